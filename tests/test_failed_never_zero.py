"""Failed is never zero (issue 31): a question that failed or was never asked is not scored. A run
that answered nothing has no value for any metric (null in results.json, n/a on the console, with the
reason) and exits 4; a partial run is scored over its answered questions, and says how many failed
beside every number; a model that answers every question wrongly still scores 0."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

import harness
from harness.cli import main
from harness.datasets import load_dataset
from harness.errors import ModelError
from harness.execution.record import Scores, read_results, results_dict
from harness.execution.scoring import score_records
from harness.models.scripted import register_script, unregister_script
from harness.scoring.results import (
    breakdown_lines,
    breakdown_values,
    metric_values,
    numeric_leaves,
    score_values,
    summary_lines,
)

FANOUTQA = load_dataset("fanoutqa:dev")
HOTPOT = load_dataset("hotpotqa:dev")


def _question_of(messages) -> str:
    return messages[-1]["content"].splitlines()[-1]


def _odd(messages) -> bool:
    return sum(map(ord, _question_of(messages))) % 2 == 1


def never(messages, tools, tool_choice, params):
    raise KeyError("malformed response")


def some(messages, tools, tool_choice, params):  # fails on some questions, the same ones every epoch
    if _odd(messages):
        raise KeyError("malformed")
    return "Paris, 1,234 and London"


def epoch2_some(messages, tools, tool_choice, params):  # epoch 2 (seed 1) fails on some questions epoch 1 answered
    if params.seed == 1 and _odd(messages):
        raise KeyError("epoch 2")
    return "Paris"


def epoch2_all(messages, tools, tool_choice, params):  # epoch 2 fails on every question
    if params.seed == 1:
        raise KeyError("epoch 2")
    return "Paris"


def wrong(messages, tools, tool_choice, params):
    return "zzz qqq"


def unauthorized(messages, tools, tool_choice, params):  # what a backend raises on a 401: the run stops
    raise ModelError("http://127.0.0.1:1/v1 rejected the API key (401): invalid key")


SCRIPTS = {
    "never": never, "some": some, "epoch2-some": epoch2_some, "epoch2-all": epoch2_all, "wrong": wrong,
    "401": unauthorized,
}  # fmt: skip


@pytest.fixture(scope="module", autouse=True)
def scripts():
    for name, fn in SCRIPTS.items():
        register_script(f"fnz-{name}", fn)
    yield
    for name in SCRIPTS:
        unregister_script(f"fnz-{name}")


def run(tmp_path: Path, script: str, name: str = "r", **options) -> dict:
    options = {"dataset": "fanoutqa:dev", "limit": 6, "stream_scoring": "off", **options}
    return results_dict(harness.run(  # the JSON written
        model=f"scripted/fnz-{script}", out=str(tmp_path / name), cache_path=str(tmp_path / "cache.sqlite"),
        show_progress=False, **options,
    ))  # fmt: skip


def console(results: dict) -> str:
    from harness.commands.run import print_summary

    buffer = io.StringIO()
    print_summary(results, file=buffer)
    return buffer.getvalue()


def leaves(value) -> list:
    if isinstance(value, dict):
        return [x for v in value.values() for x in leaves(v)]
    return [value]


# ------------------------------------------------------------------ every question failed
def test_a_run_where_every_question_failed_has_no_value_and_says_why(tmp_path):
    results = run(tmp_path, "never", limit=3)
    scores = results["scores"]
    assert results["counts"]["finished"] == 0 and results["counts"]["failed"] == 3
    # every number null, never 0; the shape a reader expects kept
    agg = scores["fanoutqa-string"]
    assert set(agg) == {"acc", "rouge"} and set(agg["rouge"]) == {"rouge1", "rouge2", "rougeL"}
    assert leaves(agg) and all(v is None for v in leaves(agg))
    assert scores["raw"] == [] and "breakdown" not in scores
    meta = scores["meta"]
    assert (meta["n_questions"], meta["n_answered"], meta["n_failed"], meta["n_pending"]) == (3, 0, 3, 0)
    reason = meta["not_scored"]
    assert reason.startswith("3 of 3 failed: exception (KeyError: 'malformed response'"), reason
    assert meta["metric_info"]["fanoutqa-string"]["reason"] == reason
    # each interval n/a with the reason, none of them ± 0
    assert scores["uncertainty"]["fanoutqa-string.acc.loose"]["note"] == reason
    assert all(e["stderr"] is None and e["ci95"] is None for e in scores["uncertainty"].values())
    # readers: a key with no value, never absent, never 0
    values = metric_values(scores)
    assert "fanoutqa-string.acc.loose" in values and values["fanoutqa-string.acc.loose"] is None
    assert score_values(scores)["fanoutqa-string.acc.strict"] is None
    assert numeric_leaves(agg) == {}  # arithmetic sees no number
    # the console: n/a with the reason, no by-category table of zeros
    lines = summary_lines(scores)
    assert lines == [f"fanoutqa-string: n/a ({reason})"]
    assert breakdown_lines(scores) == []
    shown = console(results)
    assert "0.0000" not in shown and "by category" not in shown
    # the typed record reads it; a re-score gives the same
    typed = read_results(tmp_path / "r")
    assert typed.scores.meta.n_failed == 3 and typed.scores.meta.not_scored == reason
    assert harness.score(str(tmp_path / "r"), save=False).as_dict() == scores


def test_harness_run_exits_4_when_nothing_was_answered_and_1_when_some_failed(tmp_path, capsys):
    base = ["run", "--dataset", "fanoutqa:dev", "--limit", "4", "--no-cache"]
    assert main([*base, "--model", "scripted/fnz-never", "--out", str(tmp_path / "none")]) == 4
    captured = capsys.readouterr()
    assert "fanoutqa-string: n/a (4 of 4 failed: exception" in captured.out
    assert "no question was answered: no scores (n/a, not 0); exit status 4" in captured.err
    assert main([*base, "--model", "scripted/fnz-some", "--out", str(tmp_path / "some")]) == 1
    line = next(x for x in capsys.readouterr().out.splitlines() if x.strip().startswith("fanoutqa-string:"))
    failed = read_results(tmp_path / "some").counts.failed
    assert 0 < failed < 4 and line.endswith(f"(n={4 - failed} of 4; {failed} failed)")  # how many, beside the number
    assert main([*base, "--model", "scripted/fnz-wrong", "--out", str(tmp_path / "wrong")]) == 0


def test_a_run_stopped_before_asking_scores_nothing_it_never_asked(tmp_path, capsys):
    """A backend error (a rejected API key) stops the run: status error, questions pending; none is
    scored (before: 0.0 for each)."""
    code = main(["run", "--model", "scripted/fnz-401", "--dataset", "fanoutqa:dev", "--limit", "3", "--no-cache",
                 "--max-connections", "1", "--out", str(tmp_path / "r")])  # fmt: skip
    assert code == 2 and "401" in capsys.readouterr().err  # one error line, non-zero
    results = read_results(tmp_path / "r")
    assert results.status == "error" and results.counts.finished == 0 and results.counts.pending == 3
    meta = results.scores.meta
    assert (meta.n_answered, meta.n_failed, meta.n_pending) == (0, 0, 3)
    assert meta.not_scored.startswith("3 of 3 not asked: run stopped (error: ") and "(401)" in meta.not_scored
    assert results.scores.raw == [] and all(v is None for v in results.scores.metric_values().values())
    assert results.invocations[-1].error and "rejected the API key (401)" in results.invocations[-1].error
    rescored = harness.score(str(tmp_path / "r"), save=False)
    assert Scores.model_validate(rescored).as_dict() == results.scores.as_dict()


# ------------------------------------------------------------------ wrong is still 0
def test_a_model_that_answers_every_question_wrongly_still_scores_0(tmp_path):
    results = run(tmp_path, "wrong", limit=4, dataset="hotpotqa:dev")
    scores = results["scores"]
    assert scores["fanoutqa-string"]["acc"]["loose"] == 0.0 and scores["em-f1"]["em"] == 0.0
    assert scores["meta"]["n_answered"] == 4 and scores["meta"]["n_failed"] == 0 and scores["meta"]["not_scored"] is None
    assert all(v == 0.0 for k, v in metric_values(scores).items() if k.startswith("em-f1."))
    lines = summary_lines(scores)
    assert lines[0].startswith("fanoutqa-string: acc loose 0.0000") and "(n=" not in "".join(lines)


# ------------------------------------------------------------------ the scoring rule, unit by unit
def test_scored_iff_finished_and_only_answered_keeps_its_meaning():
    qs = HOTPOT.samples[:5]
    records = [
        {"id": qs[0].id, "answer": qs[0].answer},  # right
        {"id": qs[1].id, "answer": "wrong"},
        {"id": qs[2].id, "answer": None},  # finished without an answer (context full): the model's 0
    ]
    failures = {qs[3].id: {"error_type": "timeout", "error": "no answer within 5 s"}}
    scores = score_records(HOTPOT, qs, records, ["em-f1"], failures=failures, stopped="run interrupted")
    assert [r["question_id"] for r in scores["raw"]] == [q.id for q in qs[:3]]
    assert scores["em-f1"]["em"] == pytest.approx(1 / 3)  # the unanswered one counts 0; failed/pending not at all
    meta = scores["meta"]
    assert (meta["n_questions"], meta["n_answered"], meta["n_failed"], meta["n_pending"]) == (5, 3, 1, 1)
    assert meta["not_scored"] == "1 of 5 failed: timeout (no answer within 5 s); 1 of 5 not asked: run interrupted"
    only = score_records(HOTPOT, qs, records, ["em-f1"], only_answered=True, failures=failures)
    assert [r["question_id"] for r in only["raw"]] == [q.id for q in qs[:2]] and only["em-f1"]["em"] == 0.5
    assert only["meta"]["n_answered"] == 2 and "1 of 5 finished without an answer" in only["meta"]["not_scored"]
    # a complete run: exactly what scoring every question gives (the official parity)
    from harness.scoring.metrics import score_answers

    complete = [{"id": q.id, "answer": a} for q, a in zip(qs, ["x", qs[1].answer, "y", qs[3].answer, "z"])]
    whole = score_answers(HOTPOT, qs, complete, ["em-f1"])
    assert score_records(HOTPOT, qs, complete, ["em-f1"])["em-f1"] == whole["em-f1"] and whole["em-f1"]["em"] == 0.4


def test_failure_kinds_are_counted_in_the_reason():
    qs = HOTPOT.samples[:4]
    failures = {
        qs[0].id: {"error_type": "model_unavailable", "error": "gave up after retries: answered 500"},
        qs[1].id: {"error_type": "model_unavailable", "error": "gave up after retries: answered 500"},
        qs[2].id: {"error_type": "timeout", "error": "no answer within 5 s"},
    }
    scores = score_records(HOTPOT, qs, [], ["em-f1"], failures=failures, stopped="run stopped (error: boom)")
    assert scores["meta"]["not_scored"] == (
        "3 of 4 failed: 2 model_unavailable (gave up after retries: answered 500), 1 timeout (no answer within 5 s); "
        "1 of 4 not asked: run stopped (error: boom)"
    )
    assert scores["em-f1"] == {"em": None, "f1": None, "f1_precision": None, "f1_recall": None}


def test_readers_show_a_null_breakdown_value_as_n_a():
    scores = {
        "results_format": 3,
        "em-f1": {"em": 0.5, "f1": None},
        "breakdown": {"type": {"bridge": {"n": 2, "em-f1": {"em": 0.5, "f1": None}}, "comparison": {"n": 0}}},
        "meta": {},
    }
    assert breakdown_values(scores) == {"type": {"bridge": {"n": 2, "em-f1.em": 0.5, "em-f1.f1": None}}}
    assert breakdown_lines(scores) == ["by type:", "  bridge (n=2): em 0.5000 f1 n/a"]
    assert summary_lines(scores) == ["em-f1: em 0.5000 f1 n/a"]


# ------------------------------------------------------------------ partial: the answered subset, officially
@pytest.mark.slow
def test_a_partial_run_scores_what_the_official_scorer_gives_its_answered_questions(tmp_path):
    import importlib.util

    root = Path(__file__).resolve().parent.parent
    spec = importlib.util.spec_from_file_location("bench_scoring", root / "benchmarks" / "scoring.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    from harness.scoring.fanoutqa_metrics import str_answer

    def some_right(messages, tools, tool_choice, params):
        q = next(q for q in FANOUTQA.samples if q.question in messages[-1]["content"])
        if _odd(messages):
            raise KeyError("malformed")
        return str_answer(q.answer) if len(q.question) % 3 else "none of them"

    register_script("fnz-some-right", some_right)
    try:
        results = run(tmp_path, "some-right", limit=20)
    finally:
        unregister_script("fnz-some-right")
    rows = [json.loads(x) for x in (tmp_path / "r" / "samples.jsonl").read_text().splitlines()]
    assert 0 < len(rows) < 20 and results["counts"]["failed"] == 20 - len(rows)
    by_id = FANOUTQA.by_id()
    answered = [{"id": r["id"], "answer": by_id[r["id"]].answer} for r in rows]
    official = bench.official_score(bench.load_official(), answered, [{"id": r["id"], "answer": r["answer"]} for r in rows])
    ours = results["scores"]["fanoutqa-string"]
    assert ours["acc"] == official["acc"] and ours["rouge"] == official["rouge"]  # bit for bit
    assert 0 < ours["acc"]["loose"] < 1


# ------------------------------------------------------------------ streaming x epochs x failures
CASES = [  # (script, epochs)
    ("wrong", 1), ("some", 1), ("never", 1),
    ("wrong", 2), ("epoch2-some", 2), ("epoch2-all", 2), ("never", 2),
]  # fmt: skip


@pytest.mark.parametrize("script, epochs", CASES)
@pytest.mark.slow
def test_streamed_and_batch_scores_agree_whatever_failed(tmp_path, script, epochs):
    """Streaming on or off, one epoch or two, none, some or every question failed (in one epoch or
    all): the run's scores equal each other and ``harness score`` of the directory, to the last bit."""
    options = {"dataset": "hotpotqa:dev", "limit": 8, "epochs": epochs, "temperature": 0.5}
    on = run(tmp_path, script, "on", stream_scoring="on", **options)
    off = run(tmp_path, script, "off", stream_scoring="off", **options)
    canonical = [json.dumps(r["scores"], sort_keys=True) for r in (on, off)]
    rescored = [json.dumps(harness.score(str(tmp_path / n), save=False).as_dict(), sort_keys=True) for n in ("on", "off")]
    assert canonical[0] == canonical[1] == rescored[0] == rescored[1]
    if on["counts"]["finished"]:
        assert on["invocations"][-1].get("streamed_scores")  # streaming did score them
    meta = on["scores"]["meta"]
    finished_ids = {r["id"] for r in map(json.loads, (tmp_path / "on" / "samples.jsonl").read_text().splitlines())} if (
        tmp_path / "on" / "samples.jsonl"
    ).exists() else set()
    assert meta["n_answered"] == len(finished_ids) == len(on["scores"]["raw"])
    if script == "never":
        assert all(v is None for v in metric_values(on["scores"]).values()) and meta["n_failed"] == 8
    if epochs == 2:
        per_epoch = on["scores"]["epochs"]["n_answered"]
        assert len(per_epoch) == 2 and per_epoch[0] == (0 if script == "never" else meta["n_answered"])
    if script == "epoch2-all":  # the second epoch has no number: the reduction is the first's
        assert on["scores"]["epochs"]["per_epoch"][1] == {} and on["scores"]["epochs"]["n_answered"][1] == 0
        first = on["scores"]["epochs"]["per_epoch"][0]
        assert all(v == first[f"em-f1.{k}"] for k, v in on["scores"]["em-f1"].items())
    if script == "epoch2-some":
        assert 0 < on["scores"]["epochs"]["n_answered"][1] < meta["n_answered"] and meta["n_failed"] == 0
        assert "answered per epoch" in summary_lines(on["scores"])[0]


# ------------------------------------------------------------------ against a server (slow tier)
@pytest.mark.slow
def test_a_server_that_answers_500_gives_a_failed_run_not_a_score(tmp_path, capsys):
    from fault_server import FaultServer, run_args

    with FaultServer(default="500") as server:
        code = main(run_args(server.url, tmp_path / "r", "--max-attempts", "1", "--retry-max-wait", "0.05",
                             dataset="fanoutqa:dev", limit="3"))  # fmt: skip
    captured = capsys.readouterr()
    assert code == 4, captured.err
    results = read_results(tmp_path / "r")
    assert results.counts.failed == 3 and results.scores.raw == []
    reason = results.scores.meta.not_scored
    assert reason.startswith("3 of 3 failed: model_unavailable (") and "500" in reason
    assert f"fanoutqa-string: n/a ({reason})" in captured.out
    assert "0.0000" not in captured.out and "by category" not in captured.out


@pytest.mark.slow
def test_a_401_stop_scores_none_of_its_pending_questions(tmp_path, capsys):
    from fault_server import FaultServer, run_args

    with FaultServer(default="401-echo") as server:
        code = main(run_args(server.url, tmp_path / "r", "--max-connections", "1", dataset="fanoutqa:dev", limit="3"))
    assert code == 2 and "401" in capsys.readouterr().err
    results = read_results(tmp_path / "r")
    assert results.status == "error" and results.counts.pending == 3
    assert results.scores.raw == [] and all(v is None for v in results.scores.metric_values().values())
    assert results.scores.meta.not_scored.startswith("3 of 3 not asked: run stopped (error: ")
