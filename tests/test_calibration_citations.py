"""Issue 42: calibration and citations. ``--confidence`` / ``--citations`` add BrowseComp's and
BrowseComp-Plus's instructions to the prompt whose reply is the answer (recorded, in the run key); the
stated confidence and cited pages are read and taken out of the answer before any metric reads it;
``calibration`` (ece with BrowseComp-Plus's bins, brier, parsed) and ``citations`` (precision and
recall against the gold pages and the pages retrieved) equal BrowseComp-Plus's own definitions
(tests/reference_browsecomp_plus.py restates them) on generated hostile cases over real answers."""

from __future__ import annotations

import asyncio
import json
import random

import pytest
from sklearn.metrics import brier_score_loss

import harness
from harness.analysis.compare import compare_runs, load_run
from harness.analysis.leaderboard import build_leaderboard, format_markdown
from harness.analysis.report import build_report_data
from harness.cli import main
from harness.datasets import load_dataset
from harness.execution.config import build_config
from harness.execution.record import results_dict
from harness.execution.runner import Run
from harness.execution.scoring import run_metrics
from harness.models.scripted import register_script, unregister_script
from harness.scoring.calibration import calibration_error
from harness.scoring.gold import gold_text
from harness.scoring.metrics import ScoringOptions, score_answers
from harness.scoring.statements import split_citations, split_confidence
from harness.strategy import AGENTS, ANSWER_INSTRUCTION_AGENTS
from reference_browsecomp_plus import (
    official_calibration_error,
    official_citation_metrics,
    official_citation_summary,
    official_summary_calibration,
)

HOTPOT = load_dataset("hotpotqa:dev")
FANOUT = load_dataset("fanoutqa:dev")
# simple-evals browsecomp_eval.py QUERY_TEMPLATE's line (commit ee3b0318), as the model reads it
CONFIDENCE_LINE = "Confidence: {your confidence score between 0% and 100% for your answer}"


# reading what an answer states --------------------------------------------------------------------


def test_confidence_is_read_as_browsecomp_plus_reads_it_and_never_guessed():
    answer = gold_text(FANOUT.samples[0].answer)  # five "Name - hand" lines of a real gold answer
    read = {
        f"{answer}\nConfidence: 85%": ("parsed", 0.85),
        f"{answer}\n**Confidence:** 85 %": ("parsed", 0.85),
        f"{answer}\nConfidence score: 100%.": ("parsed", 1.0),
        f"{answer}\nconfidence: 0": ("parsed", 0.0),
        f"{answer}\nConfidence: 0.9": ("parsed", 0.9 / 100.0),  # a number is a percentage, as the grader reads it
        f"{answer}\nConfidence: 85% (the draft order is certain)": ("parsed", 0.85),
        f"{answer}\nConfidence: high": ("unreadable", None),
        f"{answer}\nConfidence: 80-90%": ("unreadable", None),
        f"{answer}\nConfidence: 80 to 90%": ("unreadable", None),
        f"{answer}\nConfidence: 9/10": ("unreadable", None),
        f"{answer}\nConfidence: 150%": ("unreadable", None),  # the grader caps it at 100: a guess, not read
        answer: ("missing", None),  # the grader puts 100: counted here instead
    }
    for text, (status, value) in read.items():
        stripped, stated = split_confidence(text)
        assert stripped == answer, text
        assert stated["status"] == status and stated.get("value") == value, text
    assert split_confidence(None) == (None, {"status": "unanswered"})
    assert split_confidence("Pat Burrell. Confidence: 60%")[0] == "Pat Burrell."  # the text before the label stays
    assert split_confidence(f"Confidence: 20%\n{answer}\nConfidence: 70%") == (
        answer, {"status": "parsed", "value": 0.7, "text": "70%"}  # the last one; every label line out
    )  # fmt: skip


def test_citations_are_read_and_taken_out():
    text = "Scott Derrickson [Scott Derrickson] [[Ed Wood]]\nyes 【Ed Wood】 [see](https://en.wikipedia.org)"
    stripped, stated = split_citations(text)
    assert stripped == "Scott Derrickson\nyes [see](https://en.wikipedia.org)"  # a markdown link is no citation
    assert stated == {"pages": ["Scott Derrickson", "Ed Wood"], "marks": 3}
    assert split_citations("yes") == ("yes", {"pages": [], "marks": 0})
    assert split_citations(None) == (None, {"pages": None, "marks": 0})


# calibration against BrowseComp-Plus's code ---------------------------------------------------------


def hostile_cases(rng: random.Random):
    """(confidences in percent, correctness): one question, sizes around the bins, every confidence 0 or
    100, ties (a 5-point grid), all right, none right."""
    sizes = [1, 2, 99, 100, 101, 199, 200, 201, 250, 299, 300, 310, 777]
    for n in sizes:
        for kind in ("grid", "float", "zero", "hundred"):
            for right in ("all", "none", "mixed"):
                conf = [
                    rng.choice(range(0, 101, 5)) if kind == "grid" else rng.uniform(0, 100) if kind == "float"
                    else 0.0 if kind == "zero" else 100.0
                    for _ in range(n)
                ]  # fmt: skip
                correct = [right == "all" or (right == "mixed" and rng.random() < 0.4) for _ in range(n)]
                yield conf, correct


def test_ece_equals_browsecomp_plus_on_generated_hostile_cases():
    checked = 0
    for conf, correct in hostile_cases(random.Random(42)):
        n = len(conf)
        ours = {p: calibration_error([c / 100.0 for c in conf], [float(x) for x in correct], 100, p) for p in (1, 2)}
        if n >= 200:  # at least one bin before the last, which the reference skips
            assert ours[2] * 100 == pytest.approx(official_summary_calibration(conf, correct), rel=1e-12, abs=1e-12)
            assert ours[1] * 100 == pytest.approx(official_calibration_error(conf, correct, p="1"), rel=1e-12, abs=1e-12)
            checked += 1
            continue
        # no bin counted: no value here; the reference's summary says 0.0, its calib_err 0.0 or IndexError
        assert ours == {1: None, 2: None}
        assert official_summary_calibration(conf, correct) == 0.0
        if n < 100:
            with pytest.raises(IndexError):
                official_calibration_error(conf, correct)
        else:
            assert official_calibration_error(conf, correct) == 0.0
    assert checked == 7 * 12
    # every confidence 100 and every answer wrong: the largest gap there is, over the counted bins only
    assert calibration_error([1.0] * 250, [0.0] * 250) == pytest.approx((100 / 250) ** 0.5)  # bin 1 of 2
    assert calibration_error([1.0] * 250, [0.0] * 250, last_bin="counted") == pytest.approx(1.0)
    # one bin of everything, counted: the classic |mean confidence - accuracy|
    assert calibration_error([0.9, 0.6, 0.3], [1.0, 0.0, 0.0], bin_size=3, norm=1, last_bin="counted") == pytest.approx(0.6 - 1 / 3)


def score_fanout(answers, metrics, **options):
    options.setdefault("metric_options", {"calibration": {"correct": "em-f1:em"}})
    return score_answers(FANOUT, FANOUT.samples, answers, metrics, options=ScoringOptions(**options))


def test_calibration_of_real_answers_counts_missing_and_unreadable_and_equals_the_reference():
    rng = random.Random(7)
    answers, bare, stated = [], [], {}
    for q in FANOUT.samples:  # 310 real questions: a right (the gold's text) or a wrong answer
        text = gold_text(q.answer) if rng.random() < 0.45 else "I could not find it."
        kind = rng.choices(["number", "missing", "unreadable", "unanswered"], [0.8, 0.1, 0.05, 0.05])[0]
        percent = rng.choice([0, 10, 35, 50, 70, 90, 95, 100])
        line = {"number": f"\nConfidence: {percent}%", "missing": "", "unreadable": "\nConfidence: very high"}.get(kind)
        answers.append({"id": q.id, "answer": None if kind == "unanswered" else text + line})
        bare.append({"id": q.id, "answer": None if kind == "unanswered" else text})
        stated[q.id] = (kind, percent)
    scores = score_fanout(answers, ["em-f1", "calibration"], confidence=True)
    # the confidence line is out of the answer before any metric reads it
    assert scores.aggregate("em-f1") == score_fanout(bare, ["em-f1"]).aggregate("em-f1")
    rows = {r["question_id"]: r for r in scores.raw}
    parsed = [qid for qid, (kind, _) in stated.items() if kind == "number"]
    assert len(parsed) >= 200
    confidences = [stated[qid][1] for qid in parsed]
    correct = [rows[qid]["em-f1"]["em"] == 1.0 for qid in parsed]
    calibration = scores.aggregate("calibration")
    assert calibration["ece"] * 100 == pytest.approx(official_summary_calibration(confidences, correct), rel=1e-12)
    assert calibration["brier"] == pytest.approx(brier_score_loss(correct, [c / 100 for c in confidences]), rel=1e-12)
    assert calibration["parsed"] == len(parsed) / len(FANOUT.samples)  # counted, never guessed
    info = scores.meta.metric_info["calibration"]
    counts = {k: sum(1 for kind, _ in stated.values() if kind == k) for k in ("missing", "unreadable", "unanswered")}
    assert (info["n_missing"], info["n_unreadable"], info["n_unanswered"]) == tuple(counts.values())
    assert {rows[qid]["calibration"]["status"] for qid in stated if stated[qid][0] != "number"} == {
        "missing", "unreadable", "unanswered"
    }  # fmt: skip
    # intervals: parsed is a share (Wilson); ece and brier bootstrapped over questions through the aggregate
    uncertainty = scores.uncertainty
    assert uncertainty["calibration.parsed"]["method"] == "wilson"
    for leaf in ("ece", "brier"):
        entry = uncertainty[f"calibration.{leaf}"]
        assert entry["method"] == "bootstrap-percentile" and entry["ci95"][0] < entry["value"] < entry["ci95"][1]
    # fewer than 200 parsed: no ece, the reason said; the last bin counted gives one
    few = score_fanout(answers[:150], ["calibration"], confidence=True)
    assert few.aggregate("calibration")["ece"] is None and "no value" in few.meta.metric_info["calibration"]["ece"]
    counted = score_fanout(
        answers[:150], ["calibration"], confidence=True,
        metric_options={"calibration": {"correct": "em-f1:em", "last_bin": "counted"}},
    )  # fmt: skip
    assert counted.aggregate("calibration")["ece"] > 0


# citations against BrowseComp-Plus's code -----------------------------------------------------------


def test_citations_equal_browsecomp_plus_per_question_and_averaged():
    rng = random.Random(3)
    others = sorted({t for q in FANOUT.samples for t in q.needed_titles})
    answers, expected = [], []
    for q in FANOUT.samples[:120]:
        gold = list(q.needed_titles)
        k = rng.choice([0, 0, 1, 2, 3])
        cited = rng.sample(gold, min(k, len(gold))) + rng.sample(others, rng.choice([0, 1, 2]) if k else 0)
        cited = list(dict.fromkeys(cited + cited[:1]))  # a page cited twice counts once
        text = gold_text(q.answer) + "".join(f" [{t}]" for t in cited + cited[:1])
        answers.append({"id": q.id, "answer": text})
        expected.append((cited, official_citation_metrics(cited, gold)))
    scores = score_answers(FANOUT, FANOUT.samples[:120], answers, ["citations"], options=ScoringOptions(citations=True))
    rows = {r["question_id"]: r["citations"] for r in scores.raw}
    for q, (cited, official) in zip(FANOUT.samples[:120], expected):
        row = rows[q.id]
        assert row["cited"] == int(bool(cited))
        if cited:
            assert row["gold"] == official and row["n_cited"] == len(cited)
            assert "retrieved" not in row  # bare generations: no row says what was retrieved
        else:
            assert "gold" not in row  # no citation: no precision, rather than the reference's 0.0 ...
    summary = official_citation_summary(expected)  # ... which its averages leave out the same way
    aggregate = scores.aggregate("citations")
    assert aggregate["cited"] == pytest.approx(summary["coverage"])
    assert aggregate["gold"]["precision"] == pytest.approx(summary["precision"])
    assert aggregate["gold"]["recall"] == pytest.approx(summary["recall"])
    assert aggregate["n_cited"] == pytest.approx(summary["avg_citations"])
    assert scores.uncertainty["citations.cited"]["method"] == "wilson"
    assert scores.uncertainty["citations.gold.precision"]["method"] == "bootstrap-percentile"


# runs ------------------------------------------------------------------------------------------------

GOLD = {s.question: (i, s) for i, s in enumerate(HOTPOT.samples)}


def _stating(percents):
    """Question i searches nothing, its first gold page, or both (by i % 3), then answers the gold
    answer citing its first gold page and a page it never saw, with the confidence percents[i % 3]."""

    def script(messages, tools, tool_choice, params):
        i, sample = next(v for q, v in GOLD.items() if q in messages[0]["content"])
        plan = [[], sample.needed_titles[:1], sample.needed_titles][i % 3]
        done = sum(1 for m in messages if m["role"] == "assistant")
        if done < len(plan):
            return {"content": "", "tool_calls": [{"name": "search", "arguments": {"query": plan[done]}}]}
        return f"{sample.answer} [{sample.needed_titles[0]}] [Invented Page]\nConfidence: {percents[i % 3]}%"

    return script


def open_book(out, script, **extra):
    options = {
        "model": f"scripted/{script}", "dataset": "hotpotqa:dev", "setting": "open-book", "limit": 6,
        "out": str(out), "cache": False, "search_space": "evidence-only", "metrics": ["em-f1", "calibration", "citations"],
        "metric_options": {"calibration": {"correct": "em-f1:em", "bin_size": 2}}, **extra,
    }  # fmt: skip
    return results_dict(asyncio.run(Run(build_config(options), show_progress=False).execute()))


def test_open_book_run_states_confidence_and_citations_scored_rescored_and_shown(hotpot_snapshot, tmp_path):
    for name, percents in (("cal-a", (90, 60, 100)), ("cal-b", (50, 50, 50))):
        register_script(name, _stating(percents))
    try:
        first = open_book(tmp_path / "a", "cal-a", snapshot=str(hotpot_snapshot), confidence=True, citations=True)
        open_book(tmp_path / "b", "cal-b", snapshot=str(hotpot_snapshot), confidence=True, citations=True)
        plain = build_config({"model": "scripted/cal-a", "dataset": "hotpotqa:dev", "setting": "open-book"})
    finally:
        for name in ("cal-a", "cal-b"):
            unregister_script(name)
    rows = [json.loads(line) for line in (tmp_path / "a" / "samples.jsonl").read_text().splitlines()]
    for row in rows:  # the instructions after the template's text; the row keeps the reply as written
        assert row["messages"][0]["content"].endswith(CONFIDENCE_LINE)
        assert "enclosing their Wikipedia page titles in square brackets []" in row["messages"][0]["content"]
        assert "[Invented Page]\nConfidence: " in row["answer"]
    assert first["config"]["confidence"] and first["config"]["citations"]
    assert set(first["agent"]["answer_instructions"]) == {
        "prompts/instructions/confidence.txt", "prompts/instructions/citations.txt"
    }  # fmt: skip
    key = build_config({**first["config"], "out": None})
    assert key.identity()["confidence"] is True and "confidence" not in plain.identity()
    scores = first["scores"]
    assert scores["em-f1"]["em"] == 1.0  # the answers are right once their citations and confidence are out
    by_id = {r["question_id"]: r for r in scores["raw"]}
    for i, sample in enumerate(HOTPOT.samples[:6]):
        cited = by_id[sample.id]["citations"]
        assert cited["gold"] == {"precision": 0.5, "recall": 1 / len(sample.needed_titles)}
        # the invented page was never retrieved; the gold page only where it was searched
        assert cited["retrieved"]["precision"] == [0.0, 0.5, 0.5][i % 3]
        assert by_id[sample.id]["calibration"]["confidence"] == [0.9, 0.6, 1.0][i % 3]
    assert scores["calibration"]["parsed"] == 1.0
    assert scores["calibration"]["brier"] == pytest.approx((0.01 + 0.16 + 0.0) / 3)
    assert scores["calibration"]["ece"] is not None  # bins of 2: six answers, two bins counted
    assert scores["uncertainty"]["calibration.ece"]["method"] == "bootstrap-percentile"
    # re-scored from samples.jsonl, no model call (the scripts are gone): the same numbers
    assert harness.score(str(tmp_path / "a"), save=False).as_dict() == scores
    # leaderboard, table, compare and report show them like any metric
    board = build_leaderboard(tmp_path)
    assert {"calibration.ece", "calibration.brier", "citations.gold.precision"} <= set(board.metrics)
    table = format_markdown(board)
    assert "Calibration error (0-1)" in table and "Citation precision (gold) (0-1)" in table
    compared = compare_runs([load_run(tmp_path / "a"), load_run(tmp_path / "b")])
    assert {"calibration.ece", "calibration.brier", "citations.retrieved.precision"} <= set(compared["metrics"])
    columns = build_report_data(tmp_path / "a")["score_columns"]  # the report's per-question columns
    assert {"calibration.confidence", "calibration.brier", "citations.gold.precision", "citations.gold.recall"} <= set(columns)
    assert not [c for c in columns if "binning" in c or "pages" in c]  # what is no score is no column


def test_default_metrics_and_refusals(capsys, tmp_path):
    assert run_metrics(None, HOTPOT, (), True, True) == [*HOTPOT.metrics, "calibration", "citations"]
    assert run_metrics(None, HOTPOT, ("searches",), True, False) == [*HOTPOT.metrics, "agent", "calibration"]
    assert run_metrics(["em-f1"], HOTPOT, (), True, True) == ["em-f1"]
    for name in AGENTS.names():
        takes = AGENTS.get(name).takes_answer_instructions
        assert takes == (name in ANSWER_INSTRUCTION_AGENTS), name  # the refusal names exactly these

    def refused(*argv):
        capsys.readouterr()
        base = ["run", "--model", "scripted/echo", "--dataset", "hotpotqa:dev", "--limit", "2", "--out", str(tmp_path / "x")]
        assert main([*base, *argv]) == 2
        lines = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: "), lines
        return lines[0]

    assert "--confidence cannot be asked" in refused("--agent", "react", "--confidence")
    assert "metric calibration needs answers with a stated confidence" in refused("--metrics", "em-f1,calibration")
    assert "metric citations needs answers that cite" in refused("--metrics", "citations")
    assert "calibration.correct" in refused("--confidence", "--metric-option", "calibration.correct=em-f1")
    assert "cannot say which answers are correct" in refused("--confidence", "--metric-option", "calibration.correct=agent:searches")
    assert "set-f1's f1 is no 0/1" in refused("--metrics", "em-f1,outcomes", "--metric-option", "outcomes.correct=set-f1:f1")
    assert "unknown metric 'nope'" in refused("--confidence", "--metric-option", "calibration.correct=nope:x")


def test_score_generations_that_state_a_confidence():
    q = HOTPOT.samples[0]
    given = [{"id": q.id, "answer": f"{q.answer}\nConfidence: 80%"}]
    scores = harness.score(
        dataset="hotpotqa:dev", generations=given, metrics=["em-f1", "calibration"], confidence=True,
        metric_options=["calibration.correct=em-f1:em"],
    )  # fmt: skip
    # generations: the other 99 questions are unanswered (0, as officially), their confidence counted missing
    assert scores.aggregate("em-f1")["em"] == 0.01 and scores.aggregate("calibration")["parsed"] == 0.01
    assert scores.aggregate("calibration")["brier"] == pytest.approx(0.04)  # over the one stated: (0.8 - 1)²
    assert scores.meta.options["confidence"] is True and scores.meta.metric_info["calibration"]["n_unanswered"] == 99


@pytest.mark.slow
def test_real_local_model_asked_for_a_confidence(tmp_path):
    """The embedded GGUF model (local/smollm2) asked for a confidence: whatever it writes is read as the
    statements module reads it, counted when missing, and out of the answer em-f1 scores."""
    out = tmp_path / "run"
    code = main([
        "run", "--dataset", "hotpotqa:dev", "--limit", "3", "--max-tokens", "48", "--confidence", "--out", str(out),
        "--metrics", "em-f1,calibration", "--metric-option", "calibration.correct=em-f1:em",
    ])  # fmt: skip
    assert code in (0, 4)  # 4: no answer at all from the small model, still scored
    results = json.loads((out / "results.json").read_text())
    rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    by_id = {r["question_id"]: r for r in results["scores"]["raw"]}
    statuses = []
    for row in rows:
        assert row["messages"][0]["content"].endswith(CONFIDENCE_LINE)
        stripped, stated = split_confidence(row["answer"])
        assert by_id[row["id"]]["calibration"]["status"] == stated["status"]
        statuses.append(stated["status"])
        alone = score_answers(HOTPOT, [s for s in HOTPOT.samples if s.id == row["id"]], [{"id": row["id"], "answer": stripped}], ["em-f1"])
        assert by_id[row["id"]]["em-f1"] == alone.raw[0]["em-f1"]
    assert results["scores"]["calibration"]["parsed"] == statuses.count("parsed") / 3
