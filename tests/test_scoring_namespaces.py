"""Results format 2: each metric's numbers under its own name, so no metric can overwrite another's;
one scoring path (``score_run``) for ``harness run`` and ``harness score RUN_DIR``, for every dataset
and for a ``--data-path`` run; format-1 results (flat, as the harness wrote them before) still read
by ``harness score``, ``leaderboard`` and ``report``. Runs use a scripted backend (no real model)."""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path

import pytest

from harness.cli import main
from harness.datasets import load_dataset
from harness.errors import HarnessError
from harness.models.scripted import register_script
from harness.scoring.fanoutqa_metrics import str_answer
from harness.scoring.metrics import ScoringOptions, get_metric, score_answers
from harness.scoring.results import (
    RESULTS_FORMAT,
    metric_values,
    numeric_leaves,
    official_fanoutqa,
    per_question,
    summary_lines,
    upgrade,
)

ALL_METRICS = ["fanoutqa-string", "em-f1", "set-f1", "quest", "topiocqa", "bleurt", "llm-judge"]


# --------------------------------------------------------------------------- scripted models
def judge(messages, tools, tool_choice, params):
    """Grades B (superset, correct) when the submission names the first reference item, else D."""
    prompt = messages[-1]["content"]
    expert = prompt.split("[Expert]: ", 1)[1].split("\n", 1)[0]
    submission = prompt.split("[Submission]: ", 1)[1].split("\n****", 1)[0]
    grade = "B" if expert and expert in submission else "D"
    return f"reasoning\n{grade}\n{grade}"


ANSWERS: dict[str, str] = {}  # question text -> the scripted answer


def answer(messages, tools, tool_choice, params):
    """Answers the question of ANSWERS that ends latest in the prompt (TopiOCQA prompts hold earlier turns)."""
    prompt = messages[-1]["content"]
    found = [(prompt.rfind(q) + len(q), len(q), q) for q in ANSWERS if q in prompt]
    return ANSWERS[max(found)[2]] if found else "I do not know"


register_script("ns-judge", judge)
register_script("ns-answers", answer)


def gold_text(answer, part: bool) -> str:
    """Right (all of the reference) or partly right (its first item and a wrong one), one item a line."""
    if isinstance(answer, list):
        items = [a["answer_text"] if isinstance(a, dict) else str_answer(a) for a in answer]
        return "\n".join(items[:1] + ["Nobody"] if part else items)
    return str_answer(answer)


def mixed_answers(samples) -> dict[str, str]:
    """Per question: right, partly right, or wrong, in turn; a single line for conversational agents."""
    out = {}
    for i, s in enumerate(samples):
        out[s.id] = [gold_text(s.answer, False), gold_text(s.answer, True), "I do not know"][i % 3]
    return out


# --------------------------------------------------------------------------- every pair of metrics
@pytest.fixture(scope="module")
def quest_case(tmp_path_factory):
    """QUEST: list answers of title strings, which every metric can score."""
    ds = load_dataset("quest:train-sample")
    qs = ds.samples[:6]
    answers = [{"id": q.id, "answer": a} for q, a in zip(qs, mixed_answers(qs).values())][:5]  # one unanswered
    options = ScoringOptions(judge="scripted/ns-judge", cache_path=str(tmp_path_factory.mktemp("judge") / "c.sqlite"))
    alone = {m: score_answers(ds, qs, answers, [m], options=options) for m in ALL_METRICS}
    return ds, qs, answers, options, alone


def _without_volatile(info: dict) -> dict:
    return {
        k: v
        for k, v in info.items()
        # the judge's agreement with a string metric scored beside it (llm-judge's diagnostics)
        if k not in ("calls", "cache_hits", "judge_prompt_tokens", "judge_completion_tokens", "agreement_with_string")
    }


def test_each_metric_alone_has_its_values(quest_case):
    _, qs, _, _, alone = quest_case
    for name, scores in alone.items():
        assert scores.results_format == RESULTS_FORMAT
        # what is written: the metric's namespace beside the sections
        assert set(scores.as_dict()) == {"results_format", name, "raw", "breakdown", "uncertainty", "meta"}
        assert scores.metric_names() == [name]
        assert scores.question_ids() == [q.id for q in qs]
        assert all(set(r) == {"question_id", name} for r in scores.raw)
    # non-trivial numbers, so that the pair test below can tell values apart
    f1 = {m: alone[m].aggregate(m)["f1"] for m in ("set-f1", "em-f1", "topiocqa")}
    assert 0 < f1["set-f1"] < 1 and 0 < f1["em-f1"] < 1 and f1["set-f1"] != f1["em-f1"]
    assert f1["topiocqa"] > 1  # 0-100 scale, as officially printed
    # graded B for the right and partly right answers (4), unanswered 0 without a request; of 6
    assert alone["llm-judge"].aggregate("llm-judge")["llm_judge"] == pytest.approx(4 / 6)
    assert alone["bleurt"].aggregate("bleurt") == {"bleurt": None}  # no checkpoint: unavailable, never 0
    # em-f1 declares no aggregate: score_answers takes the mean over the questions scored, unanswered as 0
    raw = [r["em-f1"]["f1"] for r in alone["em-f1"].raw]
    assert f1["em-f1"] == pytest.approx(sum(raw) / 6) and raw[5] == 0.0


@pytest.mark.parametrize("first, second", list(itertools.permutations(ALL_METRICS, 2)))
def test_every_pair_of_metrics_keeps_its_own_values(quest_case, first, second):
    ds, qs, answers, options, alone = quest_case
    together = score_answers(ds, qs, answers, [first, second], options=options)
    assert set(together.as_dict()) == {"results_format", first, second, "raw", "breakdown", "uncertainty", "meta"}
    assert together.meta.metrics == [first, second]
    for name in (first, second):
        own = alone[name]
        assert together.metric_aggregates()[name] == own.aggregate(name)
        if name == "llm-judge" and {first, second} & {"fanoutqa-string", "em-f1"}:
            assert set(together.aggregate(name)["agreement"]) == {"with_string"}
        assert [r[name] for r in together.raw] == [r[name] for r in own.raw]
        for group, values in own.breakdown.items():
            for value, entry in values.items():
                assert together.breakdown[group][value][name] == entry[name]
                assert together.breakdown[group][value]["n"] == entry["n"]
        assert _without_volatile(together.metric_info(name)) == _without_volatile(own.metric_info(name))
    # the flat view every table reads holds both, namespaced
    assert metric_values(together) == {**metric_values(alone[first]), **metric_values(alone[second])}


def test_the_issue_case_on_qampari_through_the_cli(tmp_path, capsys):
    """`--metrics set-f1,em-f1` on qampari:sample: set-f1's F1 is no longer overwritten by em-f1's."""
    ds = load_dataset("qampari:sample")
    gens = tmp_path / "gens.jsonl"
    answers = mixed_answers(ds.samples)
    gens.write_text("".join(json.dumps({"id": k, "answer": v}) + "\n" for k, v in answers.items()))
    values = {}
    for metrics in ("set-f1", "em-f1", "set-f1,em-f1"):
        out = tmp_path / f"{metrics}.json"
        argv = ["score", "--dataset", "qampari:sample", "--generations", str(gens), "--metrics", metrics]
        assert main([*argv, "--out", str(out)]) == 0
        values[metrics] = json.loads(out.read_text())
    both = values["set-f1,em-f1"]
    assert both["results_format"] == RESULTS_FORMAT
    assert both["set-f1"] == values["set-f1"]["set-f1"] and both["em-f1"] == values["em-f1"]["em-f1"]
    assert both["set-f1"]["f1"] != both["em-f1"]["f1"]
    lines = capsys.readouterr().out.splitlines()
    f1 = both["set-f1"]["f1"]
    assert any(line.strip().startswith("set-f1: precision") and f"f1 {f1:.4f}" in line for line in lines)
    assert any(line.strip().startswith("em-f1: em") for line in lines)


def test_reserved_names_cannot_be_metrics():
    for name in ("raw", "meta", "breakdown", "results_format", "question_id", "n"):
        with pytest.raises(HarnessError, match="reserved"):
            get_metric(name)


def test_summary_prints_every_metric(quest_case):
    ds, qs, answers, options, _ = quest_case
    scores = score_answers(ds, qs, answers, ["fanoutqa-string", "quest", "bleurt"], options=options)
    lines = summary_lines(scores)
    assert [line.split(":")[0] for line in lines] == ["fanoutqa-string", "quest", "bleurt"]
    acc = scores["fanoutqa-string"]["acc"]
    assert lines[0].startswith(f"fanoutqa-string: acc loose {acc['loose']:.4f} strict {acc['strict']:.4f} | ROUGE")
    assert f"f1 {scores['quest']['f1']:.4f}" in lines[1]
    assert lines[2].startswith("bleurt: unavailable (no --bleurt-checkpoint")


def test_official_fanoutqa_shape_is_derivable():
    ds = load_dataset("fanoutqa:dev")
    qs = ds.samples[:5]
    answers = [{"id": q.id, "answer": a} for q, a in zip(qs, mixed_answers(qs).values())]
    from harness.scoring.fanoutqa_metrics import score_fanoutqa

    official = score_fanoutqa([{"id": q.id, "answer": q.answer} for q in qs], answers)
    scores = score_answers(ds, qs, answers, ["em-f1", "fanoutqa-string"])
    assert scores["fanoutqa-string"] == {"acc": official["acc"], "rouge": official["rouge"]}
    assert official_fanoutqa(scores) == official
    assert official_fanoutqa(score_answers(ds, qs, answers, ["em-f1"])) is None


# --------------------------------------------------------------------------- format 1
def to_format1(scores: dict) -> dict:
    """The flat dict the harness wrote before results format 2, from the same values: aggregates
    merged in metric order (a later metric overwriting), per-question values merged likewise,
    breakdowns of the flattened per-question numbers, no results_format."""
    names = scores["meta"]["metrics"]
    out: dict = {}
    for name in names:
        out.update(scores[name])
    rows = []
    for r in scores["raw"]:
        row = {"question_id": r["question_id"]}
        for name in names:
            row.update(r.get(name, {}))
        rows.append(row)
    out["raw"] = rows
    if "breakdown" in scores:
        out["breakdown"] = {}
        for group, values in scores["breakdown"].items():
            out["breakdown"][group] = {}
            for value, entry in values.items():
                flat: dict = {}
                for name in names:
                    flat.update(numeric_leaves(entry[name]))
                out["breakdown"][group][value] = {"n": entry["n"], **{k: flat[k] for k in sorted(flat)}}
    out["meta"] = {k: v for k, v in scores["meta"].items() if k != "aggregation"}
    return out


def test_upgrade_reads_format1(quest_case):
    ds, qs, answers, options, _ = quest_case
    scores = score_answers(ds, qs, answers, ["fanoutqa-string", "em-f1", "bleurt"], options=options)
    old = to_format1(scores)
    assert "acc" in old and "em" in old and "results_format" not in old
    new = upgrade(old)
    for name in ("fanoutqa-string", "em-f1", "bleurt"):  # no clash: every value comes back
        assert new[name] == scores[name]
        assert [r[name] for r in new["raw"]] == [r[name] for r in scores["raw"]]
    for value, entry in scores["breakdown"]["template"].items():  # format 1 kept no None means (bleurt)
        assert new["breakdown"]["template"][value] == {k: v for k, v in entry.items() if k != "bleurt"}
    assert metric_values(old) == metric_values(scores) and per_question(old) == per_question(scores)
    # a clash: format 1 kept em-f1's f1 (written last); set-f1's other numbers are still its own
    clash = score_answers(ds, qs, answers, ["set-f1", "em-f1"], options=options)
    read = upgrade(to_format1(clash))
    assert read["em-f1"] == clash["em-f1"]
    assert read["set-f1"] == {k: v for k, v in clash["set-f1"].items() if k != "f1"}
    for got, want in zip(read["raw"], clash["raw"]):
        assert got["em-f1"] == want["em-f1"]
        assert got["set-f1"] == {k: v for k, v in want["set-f1"].items() if k != "f1"}


def test_a_newer_results_format_is_refused():
    with pytest.raises(HarnessError, match="results format 4"):
        metric_values({"results_format": 4, "x": {"y": 1.0}})


# --------------------------------------------------------------------------- runs and re-scoring
RUNS = {
    "fanoutqa": ["--dataset", "fanoutqa:dev"],
    "hotpotqa": ["--dataset", "hotpotqa:dev"],
    "qampari": ["--dataset", "qampari:sample", "--metrics", "set-f1,em-f1"],
    "quest": ["--dataset", "quest:train-sample", "--agent", "entity-set"],
    "topiocqa": ["--dataset", "topiocqa:dev", "--agent", "conversational"],
}


def make_run(out: Path, args: list[str], data_path: Path | None = None) -> dict:
    spec = args[args.index("--dataset") + 1]
    ds = load_dataset(spec, str(data_path) if data_path else None)
    samples = ds.samples[:5]
    ANSWERS.clear()
    ANSWERS.update({s.question: a for s, a in zip(samples, mixed_answers(samples).values())})
    argv = ["run", "--model", "scripted/ns-answers", *args, "--limit", "5", "--no-cache", "--out", str(out)]
    if data_path:
        argv += ["--data-path", str(data_path)]
    assert main(argv) == 0
    return json.loads((out / "results.json").read_text())


@pytest.mark.parametrize("name", sorted(RUNS))
def test_rescoring_a_run_gives_its_own_scores(tmp_path, name):
    out = tmp_path / "run"
    results = make_run(out, RUNS[name])
    scores = results["scores"]
    assert results["results_format"] == RESULTS_FORMAT and scores["results_format"] == RESULTS_FORMAT
    metrics = scores["meta"]["metrics"]
    assert len(metrics) >= 1 and all(name in scores for name in metrics)
    assert any(v > 0 for v in metric_values(scores).values())  # the scripted answers score something
    assert main(["score", str(out)]) == 0
    again = json.loads((out / "results.json").read_text())
    assert again["scores"] == scores  # the same metrics (the run's own --metrics), the same values
    assert {k: v for k, v in again.items() if k != "scores"} == {k: v for k, v in results.items() if k != "scores"}


def test_rescoring_a_data_path_run(tmp_path, capsys):
    data = tmp_path / "data" / "hotpot.json"
    data.parent.mkdir()
    shutil.copy(load_dataset("hotpotqa:dev").info.path, data)
    out = tmp_path / "run"
    results = make_run(out, ["--dataset", "hotpotqa:dev"], data_path=data)
    assert results["dataset"]["spec"] == "hotpotqa:dev@distractor-first100+file"
    assert main(["score", str(out)]) == 0
    assert json.loads((out / "results.json").read_text())["scores"] == results["scores"]

    moved = tmp_path / "moved.json"
    data.rename(moved)
    capsys.readouterr()
    assert main(["score", str(out)]) == 2
    err = capsys.readouterr().err
    assert "hotpotqa:dev@distractor-first100+file" in err and "--data-path" in err
    assert main(["score", str(out), "--data-path", str(moved)]) == 0  # the file, moved: same sha256
    assert json.loads((out / "results.json").read_text())["scores"] == results["scores"]

    moved.write_text(moved.read_text().replace("Scott Derrickson", "Scott Derickson"))
    capsys.readouterr()
    assert main(["score", str(out), "--data-path", str(moved)]) == 2
    assert "changed since the run (sha256 differs)" in capsys.readouterr().err


def test_rescoring_with_other_metrics_and_options(tmp_path):
    out = tmp_path / "run"
    results = make_run(out, RUNS["qampari"])
    assert main(["score", str(out), "--metrics", "em-f1,set-f1,llm-judge", "--judge", "scripted/ns-judge"]) == 0
    again = json.loads((out / "results.json").read_text())["scores"]
    assert again["meta"]["metrics"] == ["em-f1", "set-f1", "llm-judge"]
    assert again["set-f1"] == results["scores"]["set-f1"] and again["em-f1"] == results["scores"]["em-f1"]
    assert again["meta"]["options"]["judge"] == "scripted/ns-judge"


# --------------------------------------------------------------------------- old results files
@pytest.fixture
def old_runs(tmp_path):
    """Two finished runs whose results.json is then rewritten as format 1: hotpotqa (fanoutqa-string
    and em-f1, no clash) and qampari (set-f1, em-f1: f1 clashed)."""
    root = tmp_path / "results"
    new = {}
    for name, args in (("hotpot", ["--dataset", "hotpotqa:dev"]), ("qampari", RUNS["qampari"])):
        results = make_run(root / name, args)
        new[name] = results["scores"]
        old = {k: v for k, v in results.items() if k != "results_format"}
        old["scores"] = to_format1(results["scores"])
        (root / name / "results.json").write_text(json.dumps(old))
    return root, new


def test_leaderboard_reads_format1(old_runs, tmp_path):
    root, new = old_runs
    board = tmp_path / "board.json"
    assert main(["leaderboard", str(root), "--out", str(board)]) == 0
    rows = {Path(r["path"]).name: r for r in json.loads(board.read_text())["rows"]}
    assert rows["hotpot"]["metrics"] == metric_values(new["hotpot"])  # the columns of a new run
    assert "fanoutqa-string.acc.loose" in rows["hotpot"]["metrics"] and "em-f1.f1" in rows["hotpot"]["metrics"]
    q = rows["qampari"]["metrics"]
    assert q["em-f1.f1"] == new["qampari"]["em-f1"]["f1"] and "set-f1.f1" not in q  # lost in format 1
    assert q["set-f1.precision"] == new["qampari"]["set-f1"]["precision"]


def test_report_reads_format1(old_runs):
    from harness.analysis.report import build_report_data

    root, new = old_runs
    data = build_report_data(root / "hotpot")
    expected = per_question(new["hotpot"])
    assert {r["id"]: r["scores"] for r in data["rows"]} == expected
    assert "em-f1.em" in data["score_columns"] and "fanoutqa-string.acc" in data["score_columns"]
    assert all(r["reference"] is not None for r in data["rows"])  # the dataset was found again
    assert main(["report", str(root / "hotpot")]) == 0
    html = (root / "hotpot" / "report.html").read_text()
    assert 'data-key="score:em-f1.em"' in html and "fanoutqa-string.acc.loose" in html  # table, scores section


def test_score_rewrites_format1_as_format2(old_runs):
    root, new = old_runs
    for name in ("hotpot", "qampari"):
        assert main(["score", str(root / name)]) == 0
        results = json.loads((root / name / "results.json").read_text())
        assert results["results_format"] == RESULTS_FORMAT and next(iter(results)) == "results_format"
        assert results["scores"] == new[name]


def test_run_dir_that_is_not_a_run_is_refused_without_writing(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["score", str(empty)]) == 2
    assert "not a run directory" in capsys.readouterr().err and list(empty.iterdir()) == []


def test_score_run_without_results_json(tmp_path):
    """A run killed before writing results.json: scored from config.json and its samples."""
    from harness.execution.scoring import score_run

    out = tmp_path / "run"
    results = make_run(out, RUNS["hotpotqa"])
    (out / "results.json").unlink()
    assert score_run(out).as_dict() == results["scores"]


def test_central_means():
    from harness.scoring.values import mean_values

    rows = [
        {"f1": 1.0, "hit": True, "text": "B", "maybe": None, "nested": {"p": 1}},
        {"f1": 0.0, "hit": False, "text": None, "maybe": 2.0, "nested": {"p": 0}},
    ]
    # bools count 0/1, text is left out, a value missing for some question has no mean (never 0)
    assert mean_values(rows) == {"f1": 0.5, "hit": 0.5, "maybe": None, "nested": {"p": 0.5}}


def test_breakdown_leaves_the_judge_text_out(quest_case):
    _, _, _, _, alone = quest_case
    for values in alone["llm-judge"]["breakdown"].values():
        for entry in values.values():
            assert set(entry["llm-judge"]) == {"llm_judge"}
