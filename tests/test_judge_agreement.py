"""Several LLM judges (issue 23): every verdict recorded, the majority's verdict per question (a tie
counts 0), each judge's own share, their agreement (Krippendorff's alpha, checked against the
``krippendorff`` package) and their agreement with string accuracy; each judge priced; one judge's
scores exactly as before several were allowed (tests/fixtures/llm_judge_single_judge_before_issue23.json)."""

from __future__ import annotations

import hashlib
import io
import json
import math
import random
from pathlib import Path

import numpy as np
import pytest

from harness.cli import main
from harness.commands.run import print_scores
from harness.datasets import load_dataset
from harness.errors import ConfigError
from harness.execution.config import build_config
from harness.execution.cost import judge_cost, load_price_table
from harness.execution.record import Scores
from harness.models.scripted import register_script, unregister_script
from harness.scoring import agreement
from harness.scoring.gold import gold_text
from harness.scoring.llm_judge import AGGREGATE_RULE, majority
from harness.scoring.metrics import ScoringOptions, score_answers
from harness.scoring.results import metric_values, summary_lines

krippendorff = pytest.importorskip("krippendorff")
FIXTURE = Path(__file__).parent / "fixtures" / "llm_judge_single_judge_before_issue23.json"


def reference_alpha(matrix) -> float | None:
    """The krippendorff package's nominal alpha; None where it is undefined (it raises or gives NaN)."""
    data = np.array([[np.nan if v is None else v for v in row] for row in matrix], dtype=float)
    try:
        with np.errstate(invalid="ignore", divide="ignore"):
            value = krippendorff.alpha(reliability_data=data, level_of_measurement="nominal")
    except ValueError:  # "There has to be more than one value in the domain."
        return None
    return None if math.isnan(value) else float(value)


# --------------------------------------------------------------------------- alpha itself
def test_alpha_equals_the_krippendorff_package_on_random_matrices():
    rng = random.Random(23)
    undefined = 0
    for _ in range(400):
        raters, units = rng.randint(2, 5), rng.randint(1, 25)
        values = rng.choice([(0, 1), (0, 1), (0, 1, 2), (3, 7, 8, 9)])
        missing = rng.choice([0.0, 0.0, 0.2, 0.5, 0.9])
        skew = rng.random()  # some matrices nearly all one value
        matrix = [
            [None if rng.random() < missing else (values[0] if rng.random() < skew else rng.choice(values))
             for _ in range(units)]
            for _ in range(raters)
        ]  # fmt: skip
        ours, note = agreement.nominal_alpha(matrix)
        expected = reference_alpha(matrix)
        if expected is None:
            undefined += 1
            assert ours is None and note in (agreement.NO_PAIRS, agreement.NO_VARIATION), matrix
        else:
            assert ours == pytest.approx(expected, rel=1e-9, abs=1e-12), matrix
            assert note is None
    assert 10 < undefined < 200  # both kinds of matrix were drawn


def test_alpha_edge_cases():
    # everyone agrees on one value: no variation, alpha undefined (n/a with the reason, no crash)
    assert agreement.nominal_alpha([[1, 1, 1], [1, 1, 1]]) == (None, agreement.NO_VARIATION)
    assert agreement.nominal_alpha([[0, 1, 1], [0, 1, 1]]) == (1.0, None)  # agreeing, with variation
    # one question, two judges: disagreeing is alpha 0 (the package's value), agreeing undefined
    assert agreement.nominal_alpha([[1], [0]]) == (0.0, None) and reference_alpha([[1], [0]]) == 0.0
    assert agreement.nominal_alpha([[1], [1]]) == (None, agreement.NO_VARIATION)
    # no question with two values
    assert agreement.nominal_alpha([[1, None], [None, 0]]) == (None, agreement.NO_PAIRS)
    # systematic disagreement is below 0
    alpha, _ = agreement.nominal_alpha([[0, 1, 0, 1], [1, 0, 1, 0]])
    assert alpha == pytest.approx(reference_alpha([[0, 1, 0, 1], [1, 0, 1, 0]])) and alpha < 0
    # Krippendorff's own worked example (nominal, 4 coders x 12 units, missing values): 0.743
    ex = [
        [1, 2, 3, 3, 2, 1, 4, 1, 2, None, None, None],
        [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, None, 3],
        [None, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, None],
        [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, None],
    ]
    assert agreement.nominal_alpha(ex)[0] == pytest.approx(0.743, abs=5e-4)


def test_raters_agreement_counts():
    columns = {"a": [1, 0, 1, None, 1], "b": [1, 1, 1, 0, None], "c": [1, 0, 0, 0, None]}
    out = agreement.raters_agreement(columns, "judges")
    assert out["n_judges"] == 3 and out["n_questions"] == 4  # the last question has one verdict
    assert out["alpha"] == pytest.approx(reference_alpha(list(columns.values())))
    # pairs over the questions both rated: a-b 3 (2 agree), a-c 3 (2), b-c 4 (2) -> 6 of 10
    assert [(p["judges"], p["n"], p["agreement"]) for p in out["pairs"]] == [
        (["a", "b"], 3, pytest.approx(2 / 3)),
        (["a", "c"], 3, pytest.approx(2 / 3)),
        (["b", "c"], 4, pytest.approx(2 / 4)),
    ]
    assert out["percent_agreement"] == pytest.approx(6 / 10)
    assert out["unanimous"] == pytest.approx(2 / 4)  # questions 1 (1, 1, 1) and 4 (0, 0)
    for p in out["pairs"]:
        assert p["alpha"] == pytest.approx(reference_alpha([columns[j] for j in p["judges"]]))


def test_majority_rule():
    assert [majority(v) for v in ([1], [0], [1, 0], [1, 1], [1, 0, 1], [0, 0, 1], [1, 1, 0, 0])] == [
        1,
        0,
        0,
        1,
        1,
        0,
        0,
    ]
    assert "tie counts 0" in AGGREGATE_RULE


# --------------------------------------------------------------------------- scripted judges
def _parts(prompt: str) -> tuple[str, str, str]:
    question = prompt.split("[Question]: ")[1].split("\n************\n")[0]
    expert = prompt.split("[Expert]: ")[1].split("\n************\n")[0]
    submission = prompt.split("[Submission]: ")[1].split("\n************\n[END DATA]")[0]
    return question, expert, submission


def right_judge(messages, tools, tool_choice, params):
    """Grades by the gold: B when the submission is the expert answer, else D."""
    _, expert, submission = _parts(messages[-1]["content"])
    return "They match.\nB\nB" if submission.strip() == expert.strip() else "They differ.\nD\nD"


def random_judge(messages, tools, tool_choice, params):
    """C or A by a hash of the question: unrelated to the answer."""
    question, _, _ = _parts(messages[-1]["content"])
    return "Hmm.\nC" if hashlib.sha256(question.encode()).digest()[0] % 2 else "Hmm.\nA"


def contrarian_judge(messages, tools, tool_choice, params):
    """The opposite of the right judge."""
    return "No.\nD\nD" if "\nB" in right_judge(messages, tools, tool_choice, params) else "Yes.\nE\nE"


JUDGES = {"right": right_judge, "random": random_judge, "contrarian": contrarian_judge}
NAMES = [f"scripted/{n}" for n in JUDGES]


@pytest.fixture
def judges():
    scripts = {name: register_script(name, fn) for name, fn in JUDGES.items()}
    yield scripts
    for name in JUDGES:
        unregister_script(name)


@pytest.fixture(scope="module")
def fanoutqa():
    ds = load_dataset("fanoutqa:dev")
    qs = ds.samples[:16]
    answers = []
    for i, q in enumerate(qs):
        kind = i % 4
        if kind == 3 and i % 8 == 7:
            continue  # unanswered (missing)
        answer = {0: gold_text(q.answer), 1: "I do not know.", 2: gold_text(q.answer), 3: None}[kind]
        answers.append({"id": q.id, "answer": answer})
    return ds, qs, answers


def judged_ids(answers) -> list[str]:
    return [a["id"] for a in answers if a["answer"] is not None]


def verdict_matrix(scores, judge_names, ids) -> list[list[int]]:
    rows = {r["question_id"]: r["llm-judge"] for r in scores["raw"]}
    return [[rows[qid]["verdicts"][j]["score"] for qid in ids] for j in judge_names]


def test_three_judges(fanoutqa, judges, tmp_path):
    ds, qs, answers = fanoutqa
    options = ScoringOptions(judge=",".join(NAMES), cache_path=str(tmp_path / "c.sqlite"))
    assert options.judge == NAMES
    scores = score_answers(ds, qs, answers, ["fanoutqa-string", "llm-judge"], options=options)
    agg, ids = scores["llm-judge"], judged_ids(answers)
    assert len(ids) == 12 and len(qs) == 16
    # every verdict recorded; the question's verdict the majority's
    by_id = {a["id"]: a["answer"] for a in answers}
    for row in scores["raw"]:
        mine = row["llm-judge"]
        assert set(mine) == {"llm_judge", "verdicts"} and list(mine["verdicts"]) == NAMES
        if by_id.get(row["question_id"]) is None:  # unanswered: 0 from every judge, no request, no text
            assert mine == {"llm_judge": 0, "verdicts": {j: {"score": 0, "output": None} for j in NAMES}}
            continue
        for name, verdict in mine["verdicts"].items():
            assert verdict["output"] and verdict["score"] == int(verdict["output"].strip()[-1].lower() in "bce")
        right = by_id[row["question_id"]] == gold_text(next(q for q in qs if q.id == row["question_id"]).answer)
        assert mine["verdicts"]["scripted/right"]["score"] == int(right)
        assert mine["verdicts"]["scripted/contrarian"]["score"] == int(not right)
        assert mine["llm_judge"] == int(sum(v["score"] for v in mine["verdicts"].values()) >= 2)
    for name, script in judges.items():
        assert len(script.requests) == 12, name
    # each judge's own share over all 16 questions (unanswered 0), and the majority's
    matrix = verdict_matrix(scores, NAMES, ids)
    assert agg["by_judge"] == {j: pytest.approx(sum(col) / 16) for j, col in zip(NAMES, matrix)}
    assert agg["by_judge"]["scripted/right"] == pytest.approx(8 / 16)  # the 8 gold answers
    assert agg["by_judge"]["scripted/contrarian"] == pytest.approx(4 / 16)
    votes = [int(sum(col[i] for col in matrix) >= 2) for i in range(len(ids))]
    assert agg["llm_judge"] == pytest.approx(sum(votes) / 16)
    # agreement over the 12 questions judged, alpha as the package computes it
    judged = agg["agreement"]["judges"]
    assert judged["n_judges"] == 3 and judged["n_questions"] == 12
    assert judged["alpha"] == pytest.approx(reference_alpha(matrix), rel=1e-9)
    pairs = {tuple(p["judges"]): p for p in judged["pairs"]}
    opposite = pairs[("scripted/right", "scripted/contrarian")]
    assert opposite["agreement"] == 0.0 and opposite["n"] == 12 and opposite["alpha"] < 0
    assert opposite["alpha"] == pytest.approx(reference_alpha([matrix[0], matrix[2]]))
    assert judged["unanimous"] == 0.0  # right and contrarian never agree
    # with string accuracy (strict: acc == 1) over the questions judged
    string = agg["agreement"]["with_string"]
    assert string["string"] == "fanoutqa-string strict"
    strict = {r["question_id"]: float(r["fanoutqa-string"]["acc"] == 1) for r in scores["raw"]}
    column = [strict[q] for q in ids]
    assert 0 < sum(column) < 12
    for name, col in zip(NAMES, matrix):
        entry = string["by_judge"][name]
        assert entry["n"] == 12
        assert entry["alpha"] == pytest.approx(reference_alpha([col, column]))
        assert entry["agreement"] == pytest.approx(sum(a == b for a, b in zip(col, column)) / 12)
    right, contrarian = string["by_judge"]["scripted/right"], string["by_judge"]["scripted/contrarian"]
    assert right["agreement"] > 0.5 and right["alpha"] > 0  # the right judge mostly agrees with string accuracy
    assert contrarian["agreement"] == pytest.approx(1 - right["agreement"]) and contrarian["alpha"] < 0
    assert string["majority"]["alpha"] == pytest.approx(reference_alpha([votes, column]))
    # recorded: the judges, each one's requests and tokens, the rule, the method
    info = scores["meta"]["metric_info"]["llm-judge"]
    assert info["judges"] == NAMES and info["aggregate_rule"] == AGGREGATE_RULE
    assert "Krippendorff" in info["agreement"] and "strict" in info["agreement_with_string"]
    assert {j: e["calls"] for j, e in info["by_judge"].items()} == {j: 12 for j in NAMES}
    assert info["calls"] == 36 and info["judge_completion_tokens"] == sum(
        e["judge_completion_tokens"] for e in info["by_judge"].values()
    )
    assert scores["meta"]["options"]["judge"] == NAMES
    # error bars: each judge's share is a share (Wilson); agreement is no score (no error bar, no table column)
    errors = scores["uncertainty"]
    for name in NAMES:
        entry = errors[f"llm-judge.by_judge.{name}"]
        assert entry["method"] == "wilson" and entry["per_question"] == ["verdicts", name, "score"]
    assert not [k for k in errors if "agreement" in k]
    assert not [k for k in metric_values(scores) if "agreement" in k]
    assert "llm-judge.by_judge.scripted/right" in metric_values(scores)
    # the console: one line of agreement under the llm-judge line
    lines = summary_lines(scores)
    at = next(i for i, line in enumerate(lines) if line.startswith("llm-judge:"))
    a = {n: string["by_judge"][n]["alpha"] for n in NAMES}
    assert lines[at + 1] == (
        f"  judges agree: alpha {judged['alpha']:.2f} (3 judges, 12 questions, pairwise agreement "
        f"{judged['percent_agreement']:.2f}); with string accuracy (fanoutqa-string strict): alpha "
        f"scripted/right {a['scripted/right']:.2f}, scripted/random {a['scripted/random']:.2f}, "
        f"scripted/contrarian {a['scripted/contrarian']:.2f}; majority {string['majority']['alpha']:.2f}"
    )
    # a breakdown group has each judge's share too
    group = next(iter(next(iter(scores["breakdown"].values())).values()))
    assert set(group["llm-judge"]["by_judge"]) == set(NAMES)


def test_each_judge_priced(fanoutqa, judges, tmp_path):
    ds, qs, answers = fanoutqa
    options = ScoringOptions(judge=NAMES, cache_path=str(tmp_path / "c.sqlite"))
    scores = score_answers(ds, qs, answers, ["llm-judge"], options=options)
    prices = tmp_path / "prices.yaml"
    prices.write_text(
        "models:\n  scripted/right: {input: 2.0, output: 4.0}\n  scripted/random: {input: 1.0, output: 1.0}\n"
    )
    cost = judge_cost(scores, load_price_table(prices))
    info = scores.metric_info("llm-judge")["by_judge"]
    expected = {}
    for name, (pin, pout) in {
        "scripted/right": (2.0, 4.0),
        "scripted/random": (1.0, 1.0),
        "scripted/contrarian": (0, 0),
    }.items():
        p, c = info[name]["judge_prompt_tokens"], info[name]["judge_completion_tokens"]
        assert p > 0 and c > 0
        entry = cost["by_judge"][name]
        assert (entry["model"], entry["prompt_tokens"], entry["completion_tokens"]) == (name, p, c)
        assert entry["usd"] == pytest.approx((p * pin + c * pout) / 1e6)
        expected[name] = entry["usd"]
    assert cost["by_judge"]["scripted/contrarian"]["price"]["note"]  # not in the table: a local model, free
    assert cost["usd"] == pytest.approx(sum(expected.values()))
    assert cost["model"] == NAMES and cost["prompt_tokens"] == sum(e["judge_prompt_tokens"] for e in info.values())
    # a judge with no price (an API model missing from the table) makes the judges' total unknown
    unpriced = scores.model_copy(deep=True)
    entry = unpriced.metric_info("llm-judge")["by_judge"]["scripted/random"]
    unpriced.meta.metric_info["llm-judge"]["by_judge"] = {
        "openai/no-such-judge": {**entry, "judge": "openai/no-such-judge"}
    }
    assert judge_cost(unpriced, load_price_table(prices))["usd"] is None


def test_two_judges_tie_counts_zero_and_one_question(fanoutqa, judges, tmp_path):
    ds, qs, answers = fanoutqa
    options = ScoringOptions(judge=["scripted/right", "scripted/contrarian"], cache_path=str(tmp_path / "c.sqlite"))
    scores = score_answers(ds, qs, answers, ["llm-judge"], options=options)
    assert all(r["llm-judge"]["llm_judge"] == 0 for r in scores["raw"])  # always split 1-1: a tie is 0
    assert scores["llm-judge"]["llm_judge"] == 0.0
    judged = scores["llm-judge"]["agreement"]["judges"]
    assert judged["percent_agreement"] == 0.0 and judged["alpha"] == pytest.approx(
        reference_alpha(verdict_matrix(scores, ["scripted/right", "scripted/contrarian"], judged_ids(answers)))
    )
    # one question: disagreeing judges give alpha 0 (defined), agreeing ones n/a with the reason
    one = [a for a in answers if a["answer"] is not None][:1]
    q1 = [q for q in qs if q.id == one[0]["id"]]
    scores = score_answers(ds, q1, one, ["llm-judge"], options=options)
    assert scores["llm-judge"]["agreement"]["judges"]["alpha"] == 0.0
    options = ScoringOptions(judge=["scripted/right", "scripted/right,scripted/random"], cache_path=options.cache_path)
    assert options.judge == ["scripted/right", "scripted/random"]  # a judge named twice is asked once
    scores = score_answers(ds, q1, one, ["llm-judge"], options=options)
    judged = scores["llm-judge"]["agreement"]["judges"]
    right, rand = (scores["raw"][0]["llm-judge"]["verdicts"][j]["score"] for j in options.judge)
    assert (judged["alpha"] is None) == (right == rand)


def test_all_judges_agree_alpha_is_na(fanoutqa, tmp_path):
    """Judges that always agree (on one value): alpha undefined, recorded n/a with the reason, shown so."""
    ds, qs, answers = fanoutqa
    for name in ("yes1", "yes2"):
        register_script(name, lambda messages, tools, tool_choice, params: "B")
    try:
        options = ScoringOptions(judge="scripted/yes1,scripted/yes2", cache_path=str(tmp_path / "c.sqlite"))
        scores = score_answers(ds, qs, answers, ["em-f1", "llm-judge"], options=options)
    finally:
        for name in ("yes1", "yes2"):
            unregister_script(name)
    judged = scores["llm-judge"]["agreement"]["judges"]
    assert judged["alpha"] is None and judged["alpha_note"] == agreement.NO_VARIATION
    assert judged["percent_agreement"] == 1.0 and judged["unanimous"] == 1.0
    assert scores["llm-judge"]["llm_judge"] == pytest.approx(12 / 16)
    string = scores["llm-judge"]["agreement"]["with_string"]
    assert string["string"] == "em-f1 em"  # no fanoutqa-string: HotpotQA exact match
    em = [float(r["em-f1"]["em"]) for r in scores["raw"] if r["question_id"] in judged_ids(answers)]
    assert string["by_judge"]["scripted/yes1"]["alpha"] == pytest.approx(reference_alpha([[1] * 12, em]))
    line = summary_lines(scores)[-1]
    assert line.startswith(f"  judges agree: alpha n/a ({agreement.NO_VARIATION}) (2 judges, 12 questions")


def test_epochs_agreement_over_every_answer(fanoutqa, judges, tmp_path):
    """With --epochs, each judge's share is combined as every number is; the agreement is computed
    again over every epoch's answers (each (question, epoch) a unit), not averaged."""
    from harness.execution.scoring import score_records

    ds, qs, _ = fanoutqa
    qs = qs[:6]
    records = [
        {"id": q.id, "epoch": e, "answer": gold_text(q.answer) if (i + e) % 2 else "no idea"}
        for e in (1, 2) for i, q in enumerate(qs)
    ]  # fmt: skip
    options = ScoringOptions(judge=NAMES, cache_path=str(tmp_path / "c.sqlite"))
    scores = score_records(ds, qs, records, ["fanoutqa-string", "llm-judge"], options, epochs=2, reducer="mean")
    per_epoch = [
        score_answers(ds, qs, [{"id": r["id"], "answer": r["answer"]} for r in records if r["epoch"] == e],
                      ["fanoutqa-string", "llm-judge"], options=options)
        for e in (1, 2)
    ]  # fmt: skip
    ids = [q.id for q in qs]
    matrix = [sum((row for row in (verdict_matrix(s, NAMES, ids)[j] for s in per_epoch)), []) for j in range(3)]
    judged = scores["llm-judge"]["agreement"]["judges"]
    assert judged["n_questions"] == 12 and judged["alpha"] == pytest.approx(reference_alpha(matrix))
    assert len(judged["pairs"]) == 3
    for name in NAMES:
        own = [s["llm-judge"]["by_judge"][name] for s in per_epoch]
        assert scores["llm-judge"]["by_judge"][name] == pytest.approx(sum(own) / 2)
        assert scores["uncertainty"][f"llm-judge.by_judge.{name}"]["per_question"] == ["verdicts", name, "score"]
    strict = [float(r["fanoutqa-string"]["acc"] == 1) for s in per_epoch for r in s["raw"]]
    entry = scores["llm-judge"]["agreement"]["with_string"]["by_judge"]["scripted/random"]
    assert entry["n"] == 12 and entry["alpha"] == pytest.approx(reference_alpha([matrix[1], strict]))


# --------------------------------------------------------------------------- options and CLI
def test_judge_option_forms():
    assert build_config({"judge": "scripted/a"}).judge == "scripted/a"
    assert build_config({"judge": ["scripted/a"]}).judge == "scripted/a"  # one judge: its name, as before
    assert build_config({"judge": ["scripted/a,scripted/b", "scripted/c"]}).judge == [
        "scripted/a",
        "scripted/b",
        "scripted/c",
    ]
    assert build_config({"judge": "scripted/a, scripted/b"}).scoring_options().judge == ["scripted/a", "scripted/b"]
    with pytest.raises(ConfigError, match="--judge.*names no judge"):
        build_config({"judge": ","})
    assert ScoringOptions(judge=None).judge is None


def test_cli_several_judges(fanoutqa, judges, tmp_path, capsys):
    ds, qs, answers = fanoutqa
    generations = tmp_path / "gen.jsonl"
    generations.write_text("".join(json.dumps(a) + "\n" for a in answers if a["answer"] is not None))
    code = main(
        ["score", "--dataset", "fanoutqa:dev", "--generations", str(generations), "--metrics", "fanoutqa-string,llm-judge",
         "--judge", "scripted/right,scripted/random", "--judge", "scripted/contrarian", "--out", str(tmp_path / "s.json")]
    )  # fmt: skip
    assert code == 0
    out = capsys.readouterr().out
    scores = json.loads((tmp_path / "s.json").read_text())
    assert scores["meta"]["options"]["judge"] == NAMES
    assert list(scores["llm-judge"]["by_judge"]) == NAMES
    judged = scores["llm-judge"]["agreement"]["judges"]
    assert f"    judges agree: alpha {judged['alpha']:.2f} (3 judges, 12 questions" in out


# --------------------------------------------------------------------------- one judge: as before
def golden_judge(messages, tools, tool_choice, params):
    """The judge the fixture was made with (harness before several judges)."""
    prompt = messages[-1]["content"]
    expert = prompt.split("[Expert]: ")[1].split("\n************\n")[0]
    submission = prompt.split("[Submission]: ")[1].split("\n************\n")[0]
    return "Reasoning.\nB\nB" if expert.split("\n")[0][:12] in submission else "Reasoning.\nD\nD"


def test_single_judge_unchanged(tmp_path):
    """One judge: the scores, per-question shape, info and console exactly as the harness gave them before
    several judges (the fixture); beside a string metric, only the agreement with it is added."""
    before = json.loads(FIXTURE.read_text())
    register_script("golden-judge", golden_judge)
    try:
        ds = load_dataset("fanoutqa:dev")
        qs = ds.samples[:6]
        answers = [
            {"id": qs[0].id, "answer": gold_text(qs[0].answer)},
            {"id": qs[1].id, "answer": "I don't know."},
            {"id": qs[2].id, "answer": None},
            {"id": qs[3].id, "answer": gold_text(qs[3].answer)},
            {"id": qs[4].id, "answer": "something else entirely"},
        ]
        now = {}
        for metrics in (["llm-judge"], ["fanoutqa-string", "llm-judge"]):
            options = ScoringOptions(judge="scripted/golden-judge", cache_path=str(tmp_path / "c.sqlite"))
            s = score_answers(ds, qs, answers, metrics, options=options)
            s.meta.options["cache_path"] = "CACHE"
            s.metric_info("llm-judge")["backend"]["script"]["identity"] = "IDENTITY"
            buf = io.StringIO()
            print_scores(s, buf)
            now["+".join(metrics)] = {"scores": s.as_dict(), "console": buf.getvalue().splitlines()}
    finally:
        unregister_script("golden-judge")
    # added since (issue 41): each interval's declared kind; the verdicts are shares, FanOutQA's string
    # accuracy loose and ROUGE means, its strict accuracy a share
    for run in now.values():
        kinds = {key: entry.pop("kind") for key, entry in run["scores"]["uncertainty"].items()}
        shares = {"llm-judge.llm_judge", "fanoutqa-string.acc.strict"}
        assert kinds == {key: "share" if key in shares else "mean" for key in kinds}, kinds
        # added since (issue 42): the opt-in answer instructions, both off
        options = run["scores"]["meta"]["options"]
        assert (options.pop("confidence"), options.pop("citations")) == (False, False)
    alone = now["llm-judge"]["scores"]
    assert now["llm-judge"] == before["llm-judge"]
    assert list(alone["meta"]["metric_info"]["llm-judge"]) == [
        "judge", "backend", "params", "calls", "cache_hits", "judge_prompt_tokens", "judge_completion_tokens",
        "judge_cache_read_tokens", "judge_cache_write_tokens",
        "n_judged", "n_unanswered", "trimmed_to_4000_chars", "prompt_sha256", "rule", "reference",
    ]  # fmt: skip
    both, old = now["fanoutqa-string+llm-judge"], before["fanoutqa-string+llm-judge"]
    added = both["scores"]["llm-judge"].pop("agreement")
    assert added == {
        "with_string": {
            "string": "fanoutqa-string strict",
            "by_judge": {"scripted/golden-judge": {"n": 4, "agreement": 1.0, "alpha": 1.0}},
        }
    }
    assert both["scores"]["meta"]["metric_info"]["llm-judge"].pop("agreement_with_string")
    # FanOutQA's loose accuracy and ROUGE are declared means (issue 41): where every question here
    # happened to score 0 or 1 they were taken for shares (Wilson); now the analytic interval, with
    # the same value and standard error
    for key in [k for k in old["scores"]["uncertainty"] if k.startswith("fanoutqa-string.")]:
        was, now_entry = old["scores"]["uncertainty"].pop(key), both["scores"]["uncertainty"].pop(key)
        assert (now_entry["value"], now_entry["stderr"]) == (was["value"], was["stderr"]), key
        expected = ("wilson",) if key == "fanoutqa-string.acc.strict" else ("analytic", "analytic-clipped")
        assert now_entry["method"] in expected and (key != "fanoutqa-string.acc.strict" or now_entry == was), key
    assert both["scores"] == old["scores"]
    line = "    judge agrees with string accuracy (fanoutqa-string strict): alpha 1.00, agreement 1.00 (4 questions)"
    at = both["console"].index(line)
    console = both["console"][:at] + both["console"][at + 1 :]
    assert console[1:] == old["console"][1:]  # the string metric's line: its loose accuracy and ROUGE as means
    assert console[0] == (
        "  fanoutqa-string: acc loose 0.3333 strict 0.3333 | ROUGE-1/2/L F 0.3333/0.3333/0.3333 | 95% CI: "
        "acc loose ± 0.2108 [0.0000, 0.7465] strict ± 0.2108 [0.0968, 0.7000] ROUGE-L F ± 0.2108 [0.0000, 0.7465]"
    )


# --------------------------------------------------------------------------- a real judge beside a scripted one
@pytest.mark.slow
def test_smollm2_judge_beside_a_scripted_one(tmp_path):
    """The embedded SmolLM2-135M and a scripted judge on three FanOutQA questions: both verdicts recorded,
    the agreement computed (whatever the weak model's verdicts are)."""
    register_script("right", right_judge)
    try:
        ds = load_dataset("fanoutqa:dev")
        qs = ds.samples[:3]
        answers = [{"id": qs[0].id, "answer": gold_text(qs[0].answer)}, {"id": qs[1].id, "answer": "I don't know."},
                   {"id": qs[2].id, "answer": gold_text(qs[2].answer)}]  # fmt: skip
        options = ScoringOptions(judge="local/smollm2,scripted/right", cache_path=str(tmp_path / "c.sqlite"))
        scores = score_answers(ds, qs, answers, ["fanoutqa-string", "llm-judge"], options=options)
    finally:
        unregister_script("right")
    names = ["local/smollm2", "scripted/right"]
    for row in scores["raw"]:
        verdicts = row["llm-judge"]["verdicts"]
        assert list(verdicts) == names
        for v in verdicts.values():
            assert isinstance(v["output"], str) and v["output"].strip()
            assert v["score"] == int(v["output"].strip()[-1].lower() in "bce")
        assert row["llm-judge"]["llm_judge"] == int(all(v["score"] for v in verdicts.values()))  # 2 judges: a tie is 0
    judged = scores["llm-judge"]["agreement"]["judges"]
    assert judged["n_judges"] == 2 and judged["n_questions"] == 3
    matrix = verdict_matrix(scores, names, [q.id for q in qs])
    expected = reference_alpha(matrix)
    assert judged["alpha"] == (pytest.approx(expected) if expected is not None else None)
    assert judged["alpha"] is not None or judged["alpha_note"] == agreement.NO_VARIATION
    assert set(scores["llm-judge"]["agreement"]["with_string"]["by_judge"]) == set(names)
    info = scores["meta"]["metric_info"]["llm-judge"]["by_judge"]
    assert info["local/smollm2"]["calls"] == 3 and info["local/smollm2"]["backend"]["model"] == "smollm2"
    assert info["local/smollm2"]["judge_completion_tokens"] > 0
    assert any("judges agree: alpha" in line for line in summary_lines(scores))


def test_a_failing_judge_stops_the_others(fanoutqa, tmp_path):
    """One judge's error is the scoring's error; the other judges' requests are cancelled, not waited for."""
    import asyncio
    import time

    from harness.errors import ModelError

    async def slow(messages, tools, tool_choice, params):
        await asyncio.sleep(30)
        return "B"

    def broken(messages, tools, tool_choice, params):
        raise ModelError("judge down")

    register_script("slow", slow)
    register_script("broken", broken)
    ds, qs, answers = fanoutqa
    try:
        options = ScoringOptions(judge="scripted/slow,scripted/broken", cache_path=str(tmp_path / "c.sqlite"))
        started = time.monotonic()
        with pytest.raises(ModelError, match="judge down"):
            score_answers(ds, qs, answers, ["llm-judge"], options=options)
        assert time.monotonic() - started < 10
    finally:
        unregister_script("slow")
        unregister_script("broken")
