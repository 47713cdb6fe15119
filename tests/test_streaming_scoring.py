"""Scoring that streams with a run equals scoring afterwards, question by question and bit for bit.

Runs with ``stream_scoring="on"`` score each finished sample in a worker process, once its row is
written, and keep the values for the end's aggregate; ``harness score RUN_DIR`` scores the same records
afresh in one batch. Both must give
the same scores dict (every per-question value, aggregate, breakdown), on hostile answers: the
question echoed, empty, a long ramble past the scoring cap, numbers with thousands separators,
unicode, lists."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import wait_until

import harness
from harness.models.scripted import register_script, unregister_script
from harness.scoring.scores import Scores
from harness.execution.record import results_dict

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
    return results_dict(harness.run(  # the JSON written
        model="scripted/hostile", out=str(tmp_path / name), cache_path=str(tmp_path / "cache.sqlite"),
        show_progress=False, max_tokens=100_000, **options,
    ))  # fmt: skip


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
    results = run(tmp_path, "r", dataset=dataset, metrics=metrics)
    streamed = results["scores"]
    recs = records(tmp_path / "r")
    assert results["invocations"][-1]["streamed_scores"] == len(recs)  # every sample scored as it finished
    assert not any("scores" in r for r in recs)  # rows are written before they are scored
    assert any(r["oversized_answer"] for r in recs)  # the cap was exercised
    rescored = harness.score(str(tmp_path / "r"))
    assert json.dumps(streamed, sort_keys=True) == json.dumps(rescored.as_dict(), sort_keys=True)


@pytest.mark.slow
def test_resumed_and_rescored_runs_mix_stored_and_new_values(tmp_path, hostile):
    run(tmp_path, "r", dataset="hotpotqa:dev", limit=6)
    # a resumed run scores the earlier rows at its end, the new ones as they finish
    resumed = run(tmp_path, "r", dataset="hotpotqa:dev", limit=12)
    assert resumed["invocations"][-1]["streamed_scores"] == 6
    assert json.dumps(resumed["scores"], sort_keys=True) == json.dumps(harness.score(str(tmp_path / "r")).as_dict(), sort_keys=True)
    # rows an older harness wrote with their values (``scores``, ``scored_with``) are used as they are
    rows = records(tmp_path / "r")
    old = [{**r, "scores": {"em-f1": {"em": 1.0, "f1": 1.0, "f1_precision": 1.0, "f1_recall": 1.0}}} for r in rows]
    from harness.scoring.streaming import fingerprint
    from harness.execution.config import build_config

    options = build_config({"cache_path": str(tmp_path / "cache.sqlite")}).scoring_options()
    mark = fingerprint(["fanoutqa-string", "em-f1"], options)
    (tmp_path / "r" / "samples.jsonl").write_text("".join(json.dumps({**r, "scored_with": mark}) + "\n" for r in old))
    kept = run(tmp_path, "r", dataset="hotpotqa:dev", limit=12, stream_scoring="off")
    assert kept["scores"]["em-f1"]["em"] == 1.0  # the stored values, not the answers' (mostly wrong)
    assert harness.score(str(tmp_path / "r")).aggregate("em-f1")["em"] < 1.0  # re-scoring always scores afresh
    # other metrics than the records were scored with: the stored values are not used for them
    other = run(tmp_path, "r", dataset="hotpotqa:dev", limit=12, metrics="em-f1")
    assert other["scores"]["meta"]["metrics"] == ["em-f1"]
    assert other["scores"]["em-f1"] == harness.score(str(tmp_path / "r"), metrics="em-f1").aggregate("em-f1")


def test_auto_streams_only_large_runs(tmp_path, hostile):
    results = run(tmp_path, "small", dataset="qampari:sample", stream_scoring="auto")
    assert "streamed_scores" not in results["invocations"][-1]  # 13 samples: no worker, scored at the end


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
        os.kill(scorer.pid, signal.SIGSEGV)  # what a crash in native code (spaCy, numpy) does
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


def without_call_counts(scores: Scores | dict) -> dict:
    """``scores`` (as written) less the judge's accounting: a re-score finds the run's verdicts in the cache."""
    scores = scores.as_dict() if isinstance(scores, Scores) else json.loads(json.dumps(scores))
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
    options = {"dataset": dataset, "metrics": metrics, "epochs": epochs, "stream_scoring": stream, "max_connections": 8}
    if limit:
        options["limit"] = limit
    if metrics == "llm-judge":
        options["judge"] = judge_by_answer
    result = results_dict(harness.run(  # the JSON written
        model=hostile_by_epoch, out=str(tmp_path / "r"), cache_path=str(tmp_path / "cache.sqlite"),
        show_progress=False, max_tokens=100_000, **options,
    ))  # fmt: skip
    rescored = harness.score(str(tmp_path / "r"))
    assert json.dumps(without_call_counts(result["scores"]), sort_keys=True) == json.dumps(
        without_call_counts(rescored), sort_keys=True
    )
    recs = records(tmp_path / "r")
    assert len(recs) == epochs * len({r["id"] for r in recs})
    if epochs > 1:  # the epochs answered differently, so a value keyed by question alone would show
        assert any(len({r["answer"] for r in recs if r["id"] == q}) > 1 for q in {r["id"] for r in recs})
    # the streamed values (each (question, epoch) its own answer's) made the run's scores above
    streamed = result["invocations"][-1].get("streamed_scores")
    assert bool(streamed) == (stream == "on" and metrics != "llm-judge")


def test_score_some_keeps_each_pair_apart_when_a_question_repeats():
    from harness.datasets import load_dataset
    from harness.scoring.metrics import ScoringOptions, score_one, score_some

    samples = load_dataset("hotpotqa:dev").samples[:3]
    pairs = [(samples[0], samples[0].answer), (samples[1], "no"), (samples[0], "wrong"), (samples[0], ""), (samples[2], "x")]
    together = score_some([s for s, _ in pairs], [a for _, a in pairs], ["em-f1"], ScoringOptions())
    alone = [score_one(s, a, ["em-f1"], ScoringOptions()) for s, a in pairs]
    assert together == alone
    assert together[0]["em-f1"]["raw"] != together[2]["em-f1"]["raw"]  # one question, two answers, two values


# --------------------------------------------------------------------------- the worker's faults (issue 22)
SLOW_AGENT = """
import asyncio
from harness.strategy import Agent, SampleResult

class Slow(Agent):
    settings = ("closed-book",)

    async def solve(self, sample, ctx):
        reply = await ctx.generate([{"role": "user", "content": sample.question}])
        await asyncio.sleep(0.3)
        return SampleResult(reply.content, [])
"""

# A streamable metric that hangs in the scoring worker on real samples (its warm-up probe passes),
# and scores like em-f1 anywhere else: the end of the run, `harness score`.
HANGING_IN_WORKER = """
import sys, time
from harness.scoring.metrics import em_f1, streamable

@streamable()
def stuck(questions, answers, only_answered, options=None):
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if spec is not None and spec.name == "harness.scoring.worker" and questions[0].id != "warm-up":
        time.sleep(3600)
    return em_f1(questions, answers, only_answered, options)
"""


def descendants(pid: int) -> dict[int, str]:
    """{pid: command line} of every live process whose parent chain leads to ``pid``."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            if fields[0] != "Z":
                parents[int(entry.name)] = int(fields[1])
    found: dict[int, str] = {}
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        for child, of in parents.items():
            if of == parent and child not in found:
                try:
                    found[child] = Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ").decode()
                except OSError:
                    continue
                frontier.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc")
def test_kill_9_mid_run_leaves_no_process_and_no_finished_row_behind(tmp_path):
    """Issue 22: kill -9 orphaned the scoring worker and its multiprocessing resource tracker (180 MB
    each, for good), and a stalled worker held finished rows back (101 lost). The worker is stalled
    here on purpose: the rows are written anyway, and kill -9 takes every child with the run."""
    import os
    import signal
    import subprocess
    import sys

    (tmp_path / "slow.py").write_text(SLOW_AGENT)
    (tmp_path / "stuck.py").write_text(HANGING_IN_WORKER)
    out = tmp_path / "run"
    argv = [
        sys.executable, "-m", "harness", "run", "--model", "scripted/echo", "--dataset", "hotpotqa:dev",
        "--limit", "60", "--max-connections", "2", "--agent", f"{tmp_path / 'slow.py'}:Slow",
        "--metrics", f"em-f1,{tmp_path / 'stuck.py'}:stuck", "--stream-scoring", "on", "--no-cache", "--out", str(out),
    ]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        # the worker holds its first real batch for good; the run goes on writing rows regardless
        wait_until(lambda: len(records(out)) >= 1 if (out / "samples.jsonl").exists() else False, 120, "a row")
        children = wait_until(lambda: descendants(proc.pid), 30, "the scoring worker")
        stuck_at = len(records(out))
        wait_until(lambda: len(records(out)) >= stuck_at + 4, 60, "rows written while the worker is stalled")
        children = descendants(proc.pid)
        assert [c for c in children.values() if "harness.scoring.worker" in c], children
        assert not [c for c in children.values() if "resource_tracker" in c], children
        finished_before_kill = len(records(out))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        wait_until(lambda: not any(alive(pid) for pid in children), 5, f"the run's children to die: {children}")
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in descendants(proc.pid):
            os.kill(pid, signal.SIGKILL)
    assert len(records(out)) >= finished_before_kill  # every finished row kept, none waiting on its score


def test_a_stalled_worker_is_stopped_and_the_run_scores_at_the_end(tmp_path, hostile, monkeypatch, caplog):
    """A scoring worker that gives no answer within its deadline is killed, said in one line, and
    what it did not score is scored at the end: every row written, the scores harness score's."""
    from harness.scoring.streaming import StreamingScorer

    monkeypatch.setattr(StreamingScorer, "DEADLINE_S", 2.0)
    monkeypatch.setattr(StreamingScorer, "PER_SAMPLE_S", 0.0)
    (tmp_path / "stuck.py").write_text(HANGING_IN_WORKER)
    results = run(tmp_path, "r", dataset="hotpotqa:dev", limit=8, metrics=f"em-f1,{tmp_path / 'stuck.py'}:stuck")
    assert results["status"] == "complete" and len(records(tmp_path / "r")) == 8
    stopped = results["invocations"][-1]["streaming_stopped"]
    assert "gave no answer to a batch of" in stopped and "within 2 s and was stopped" in stopped
    pid = int(stopped.split("(pid ")[1].split(")")[0])
    assert not alive(pid)
    said = [r.getMessage() for r in caplog.records if "streaming scoring stopped" in r.getMessage()]
    assert len(said) == 1 and stopped in said[0] and "scored at the end" in said[0]
    assert set(results["scores"]["meta"]["metrics"]) == {"em-f1", "stuck"}
    rescored = harness.score(str(tmp_path / "r"))
    assert json.dumps(results["scores"], sort_keys=True) == json.dumps(rescored.as_dict(), sort_keys=True)


def test_a_metric_that_raises_in_the_worker_leaves_it_alone(tmp_path, hostile, caplog):
    """One metric's fault in the worker costs only that metric its streaming: the others stream on."""
    (tmp_path / "boom.py").write_text(
        "from harness.scoring.metrics import streamable\n"
        "@streamable()\n"
        "def boom(questions, answers, only_answered, options=None):\n"
        "    if questions[0].id != 'warm-up':\n"
        "        raise ZeroDivisionError('boom')\n"
        "    return {'raw': {q.id: {'x': 0.0} for q in questions}}\n"
    )
    results = run(tmp_path, "r", dataset="hotpotqa:dev", limit=4, metrics=f"em-f1,{tmp_path / 'boom.py'}:boom")
    assert results["invocations"][-1]["streamed_scores"] == 4 and "streaming_stopped" not in results["invocations"][-1]
    said = [r.getMessage() for r in caplog.records if "failed in the scoring worker" in r.getMessage()]
    assert len(said) == 1 and "ZeroDivisionError: boom" in said[0]
    meta = results["scores"]["meta"]  # at the end, in-process, it fails again: recorded, the others scored
    assert meta["metrics"] == ["em-f1"] and "ZeroDivisionError: boom" in meta["failed_metrics"]["boom"]


@pytest.mark.slow
def test_the_run_keeps_pace_with_the_scorer_and_every_sample_is_streamed(tmp_path, hostile, monkeypatch):
    """Samples that finish faster than the worker scores them wait in a bounded queue: the run starts
    no new sample while BACKLOG_MAX wait (issue 25: the queue grew with the run), and none is left to
    the end for it; the scores equal a fresh ``harness score``."""
    from harness.scoring import streaming

    monkeypatch.setattr(streaming.StreamingScorer, "BACKLOG_MAX", 7)
    monkeypatch.setattr(streaming.StreamingScorer, "BATCH_MAX", 3)
    longest, submit = [0], streaming.StreamingScorer.submit

    def watched(self, sample, answer):
        future = submit(self, sample, answer)
        longest[0] = max(longest[0], len(self._queue))
        return future

    monkeypatch.setattr(streaming.StreamingScorer, "submit", watched)
    results = run(tmp_path, "r", dataset="fanoutqa:dev", limit=40, max_connections=4)
    assert results["invocations"][-1]["streamed_scores"] == 40  # every one scored in the worker
    # BACKLOG_MAX waiting, plus those in flight when the feeder stopped starting new ones
    assert 7 <= longest[0] <= 7 + 4
    assert json.dumps(results["scores"], sort_keys=True) == json.dumps(harness.score(str(tmp_path / "r")).as_dict(), sort_keys=True)
