"""Scoring that streams with a run equals scoring afterwards, question by question and bit for bit.

Runs with ``stream_scoring="on"`` score each finished sample in a worker process and keep the values
in its record; ``harness score RUN_DIR`` scores the same records afresh in one batch. Both must give
the same scores dict (every per-question value, aggregate, breakdown), on hostile answers: the
question echoed, empty, a long ramble past the scoring cap, numbers with thousands separators,
unicode, lists."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import harness
from harness.models.scripted import register_script, unregister_script

ANSWERS = [
    lambda q: q,
    lambda q: "",
    lambda q: ("The answer is " + q + " ") * (100_000 // len(q) + 1),  # past max_answer_chars: capped alike
    lambda q: "1,234,567 and 2,000; also 3.5 million",
    lambda q: "Ünïcödé — “quotes”, naïve café, 東京",
    lambda q: "- Paris\n- London\n- the United States\n1. Berlin",
    lambda q: "yes",
    lambda q: "none of them",
]


@pytest.fixture(scope="module")
def hostile():
    def reply(messages, tools, tool_choice, params):
        text = messages[-1]["content"]
        return ANSWERS[sum(map(ord, text)) % len(ANSWERS)](text.splitlines()[-1])

    register_script("hostile", reply)
    yield "scripted/hostile"
    unregister_script("hostile")


def run(tmp_path: Path, name: str, **options):
    options = {"stream_scoring": "on", **options}
    return harness.run(
        model="scripted/hostile", out=str(tmp_path / name), cache_path=str(tmp_path / "cache.sqlite"),
        show_progress=False, max_tokens=100_000, **options,
    )  # fmt: skip


def records(run_dir: Path) -> list[dict]:
    return [json.loads(x) for x in (run_dir / "samples.jsonl").read_text(encoding="utf-8").splitlines()]


@pytest.mark.parametrize(
    "dataset, metrics",
    [
        ("fanoutqa:dev", None),  # all 310 questions: FanOutQA string accuracy and ROUGE
        ("hotpotqa:dev", None),  # fanoutqa-string and em-f1
        ("qampari:sample", None),  # set-f1
        ("quest:train-sample", "quest,set-f1"),
    ],
)
@pytest.mark.slow
def test_streamed_scores_equal_batch_scores(tmp_path, hostile, dataset, metrics):
    streamed = run(tmp_path, "r", dataset=dataset, metrics=metrics)["scores"]
    recs = records(tmp_path / "r")
    assert all("scores" in r and r["scored_with"] for r in recs)  # every sample scored as it finished
    assert set(recs[0]["scores"]) == set(streamed["meta"]["metrics"])
    assert any(r["oversized_answer"] for r in recs)  # the cap was exercised
    rescored = harness.score(str(tmp_path / "r"))
    assert json.dumps(streamed, sort_keys=True) == json.dumps(rescored, sort_keys=True)
    # and the values in the records are the batch's, question by question
    by_id = {row["question_id"]: row for row in rescored["raw"]}
    for r in recs:
        for name, value in r["scores"].items():
            assert by_id[r["id"]][name] == value


@pytest.mark.slow
def test_resumed_and_rescored_runs_mix_stored_and_new_values(tmp_path, hostile):
    run(tmp_path, "r", dataset="hotpotqa:dev", limit=6)
    first = {r["id"]: r for r in records(tmp_path / "r")}
    # a resumed run keeps the stored values and scores only the new samples
    resumed = run(tmp_path, "r", dataset="hotpotqa:dev", limit=12, stream_scoring="off")
    recs = records(tmp_path / "r")
    assert sum("scores" in r for r in recs) == 6 and all(first[i]["scores"] for i in first)
    assert json.dumps(resumed["scores"], sort_keys=True) == json.dumps(harness.score(str(tmp_path / "r")), sort_keys=True)
    # other metrics than the records were scored with: the stored values are not used for them
    other = run(tmp_path, "r", dataset="hotpotqa:dev", limit=12, metrics="em-f1")
    assert other["scores"]["meta"]["metrics"] == ["em-f1"]
    assert other["scores"]["em-f1"] == harness.score(str(tmp_path / "r"), metrics="em-f1")["em-f1"]


def test_auto_streams_only_large_runs(tmp_path, hostile):
    run(tmp_path, "small", dataset="qampari:sample", stream_scoring="auto")
    assert not any("scores" in r for r in records(tmp_path / "small"))  # 13 samples: scored at the end


def test_a_broken_worker_stops_streaming_without_losing_samples(caplog):
    """The worker dies (killed, or a script without a main guard): each waiting sample gets None
    (scored at the end instead), one warning is logged, and later samples are not sent to it."""
    import asyncio
    import os
    import signal

    from harness.datasets import load_dataset
    from harness.scoring.metrics import ScoringOptions
    from harness.scoring.streaming import StreamingScorer

    samples = load_dataset("qampari:sample").samples[:3]

    async def go():
        scorer = StreamingScorer(["set-f1"], ScoringOptions())
        first = await scorer.score(samples[0], "x")  # the worker is up and scoring
        for pid in list(scorer._pool._processes):
            os.kill(pid, signal.SIGSEGV)  # what a crash in native code (spaCy, numpy) does
        after = await asyncio.gather(scorer.score(samples[1], "y"), scorer.score(samples[2], "z"))
        later = await scorer.score(samples[0], "again")
        scorer.close()
        return first, after, later, scorer.active

    first, after, later, active = asyncio.run(go())
    assert set(first) == {"set-f1"} and after == [None, None] and later is None and not active
    warnings = [r.message for r in caplog.records if "streaming scoring stopped" in r.message]
    assert len(warnings) == 1
    assert "the scoring worker process (pid" in warnings[0] and "died of signal 11, SIGSEGV" in warnings[0]


# --------------------------------------------------------------------------- (question, epoch)
@pytest.fixture(scope="module")
def hostile_by_epoch():
    """The hostile answers, shifted by the seed: each epoch (seed + epoch - 1) answers otherwise."""

    def reply(messages, tools, tool_choice, params):
        text = messages[-1]["content"]
        return ANSWERS[(sum(map(ord, text)) + params.seed) % len(ANSWERS)](text.splitlines()[-1])

    register_script("hostile-by-epoch", reply)
    yield "scripted/hostile-by-epoch"
    unregister_script("hostile-by-epoch")


@pytest.fixture(scope="module")
def judge_by_answer():
    """A judge whose grade depends on the answer it is shown (A, B, C, D, E in turn)."""

    def grade(messages, tools, tool_choice, params):
        return "ABCDE"[sum(map(ord, messages[-1]["content"])) % 5]

    register_script("judge-by-answer", grade)
    yield "scripted/judge-by-answer"
    unregister_script("judge-by-answer")


JUDGE_ACCOUNTING = ("calls", "cache_hits", "judge_prompt_tokens", "judge_completion_tokens")


def without_call_counts(scores: dict) -> dict:
    """``scores`` less the judge's accounting: a re-score finds the run's verdicts in the cache."""
    scores = json.loads(json.dumps(scores))
    for info in scores["meta"]["metric_info"].values():
        for key in JUDGE_ACCOUNTING:
            info.pop(key, None)
    return scores


EVERY_BUILTIN_METRIC = [  # (dataset, metrics, limit): each built-in metric that can run here
    ("fanoutqa:dev", "fanoutqa-string", 12),
    ("hotpotqa:dev", "em-f1", 30),
    ("qampari:sample", "set-f1", None),
    ("quest:train-sample", "quest", None),
    ("topiocqa:dev", "topiocqa", 40),
    ("fanoutqa:dev", "llm-judge", 12),  # not streamed: scored at the end either way
]


@pytest.mark.parametrize("stream", ["on", "off"])
@pytest.mark.parametrize("epochs", [1, 3])
@pytest.mark.parametrize("dataset, metrics, limit", EVERY_BUILTIN_METRIC)
@pytest.mark.slow
def test_a_run_s_scores_are_harness_score_s_to_the_last_bit(
    tmp_path, hostile_by_epoch, judge_by_answer, dataset, metrics, limit, epochs, stream
):
    """Issue 21: two epochs of one question streamed in one batch both got one epoch's values
    (keyed by question id). Every (question, epoch) now keeps its own, for every metric, epochs
    and streaming on or off, and the run's scores equal ``harness score`` of its directory."""
    from harness.datasets import load_dataset
    from harness.scoring.metrics import ScoringOptions, score_one

    options = {"dataset": dataset, "metrics": metrics, "epochs": epochs, "stream_scoring": stream, "max_connections": 8}
    if limit:
        options["limit"] = limit
    if metrics == "llm-judge":
        options["judge"] = judge_by_answer
    result = harness.run(
        model=hostile_by_epoch, out=str(tmp_path / "r"), cache_path=str(tmp_path / "cache.sqlite"),
        show_progress=False, max_tokens=100_000, **options,
    )  # fmt: skip
    rescored = harness.score(str(tmp_path / "r"))
    assert json.dumps(without_call_counts(result["scores"]), sort_keys=True) == json.dumps(
        without_call_counts(rescored), sort_keys=True
    )
    recs = records(tmp_path / "r")
    assert len(recs) == epochs * len({r["id"] for r in recs})
    if epochs > 1:  # the epochs answered differently, so a value keyed by question alone would show
        assert any(len({r["answer"] for r in recs if r["id"] == q}) > 1 for q in {r["id"] for r in recs})
    streamed = [r for r in recs if "scores" in r]
    assert bool(streamed) == (stream == "on" and metrics != "llm-judge")
    by_id = load_dataset(dataset).by_id()
    checked = sorted({r["id"] for r in streamed})[:5]  # every epoch of five questions (scoring alone is slow)
    for r in (r for r in streamed if r["id"] in checked):  # each record holds its own answer's values
        alone = score_one(by_id[r["id"]], r["answer"], [metrics], ScoringOptions())
        assert r["scores"] == {name: value["raw"] for name, value in alone.items()}, (r["id"], r.get("epoch"))


def test_score_some_keeps_each_pair_apart_when_a_question_repeats():
    from harness.datasets import load_dataset
    from harness.scoring.metrics import ScoringOptions, score_one, score_some

    samples = load_dataset("hotpotqa:dev").samples[:3]
    pairs = [(samples[0], samples[0].answer), (samples[1], "no"), (samples[0], "wrong"), (samples[0], ""), (samples[2], "x")]
    together = score_some([s for s, _ in pairs], [a for _, a in pairs], ["em-f1"], ScoringOptions())
    alone = [score_one(s, a, ["em-f1"], ScoringOptions()) for s, a in pairs]
    assert together == alone
    assert together[0]["em-f1"]["raw"] != together[2]["em-f1"]["raw"]  # one question, two answers, two values
