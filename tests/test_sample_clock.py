"""The per-sample clock counts a sample's own time, not its wait for a turn; an in-process model runs
samples one after another (issue 14: 4 of 5 open-book samples timed out waiting for the local model)."""

import asyncio
import json
from datetime import datetime

import pytest

from harness.execution.config import build_config
from harness.models.base import WAIT_CLOCK, WaitClock, waiting_for_turn
from harness.execution.attempt import within_own_time as _within_own_time
from harness.execution.runner import Run


async def queued_then_working(turn: asyncio.Lock, work_s: float) -> str:
    async with waiting_for_turn(turn):
        await asyncio.sleep(work_s)
    return "done"


def test_waiting_for_a_turn_is_not_on_the_sample_clock():
    async def main():
        turn = asyncio.Lock()
        await turn.acquire()
        asyncio.get_running_loop().call_later(0.6, turn.release)  # another sample holds the model 0.6 s
        clock = WaitClock()
        answer = await _within_own_time(queued_then_working(turn, 0.1), 0.4, clock)
        return answer, clock.waited_s()

    answer, waited = asyncio.run(main())
    assert answer == "done"  # 0.7 s of wall time, 0.1 s of its own: within a 0.4 s timeout
    assert 0.5 < waited < 0.8


def test_own_time_still_times_out_and_cancels():
    cancelled = []

    async def slow():
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    async def main():
        with pytest.raises(asyncio.TimeoutError):
            await _within_own_time(slow(), 0.2, WaitClock())

    asyncio.run(main())
    assert cancelled == [True]


def test_a_wait_still_in_progress_counts_and_the_clock_is_per_sample():
    ticks = iter([10.0, 12.5, 13.0])
    clock = WaitClock(clock=lambda: next(ticks))
    clock.queue()  # at 10.0
    assert clock.waited_s() == 2.5  # read at 12.5, still queued
    clock.unqueue()  # at 13.0
    assert clock.waited_s() == 3.0
    assert WAIT_CLOCK.get() is None  # nothing leaks out of a sample's context


@pytest.mark.slow
def test_local_model_runs_samples_one_after_another(tmp_path, capsys):
    config = build_config(
        {
            "model": "local/smollm2",
            "out": str(tmp_path / "run"),
            "cache": False,
            "limit": 3,
            "max_connections": 4,
            "max_tokens": 8,
        }
    )
    results = asyncio.run(Run(config, show_progress=False).execute())
    assert results.counts.finished == 3
    assert results.model.model_dump()["samples_at_a_time"] == 1
    err = capsys.readouterr().err
    assert err.count("one request at a time (one llama.cpp model): samples run one after another (--max-connections 4") == 1
    records = [json.loads(line) for line in (tmp_path / "run" / "samples.jsonl").read_text().splitlines()]
    spans = sorted(
        (datetime.fromisoformat(r["started_at"]), datetime.fromisoformat(r["finished_at"])) for r in records
    )
    for (_, end), (start, _) in zip(spans, spans[1:]):
        assert start >= end, "one local model's samples must not overlap"
    assert all(r["waited_s"] < 0.05 for r in records)  # one at a time: nobody queued


# The worker with llama_cpp.Llama wrapped so that each load and generation records its thread.
SPY_WORKER = """
import json, sys, threading
import llama_cpp
seen = []
Real = llama_cpp.Llama
class Spy(Real):
    def __init__(self, *args, **kwargs):
        seen.append(["load", threading.get_ident()])
        super().__init__(*args, **kwargs)
    def create_chat_completion(self, *args, **kwargs):
        seen.append(["generate", threading.get_ident()])
        return super().create_chat_completion(*args, **kwargs)
llama_cpp.Llama = Spy
from harness.models.llama_child import main
code = main(sys.argv[1:])
print("SEEN " + json.dumps({"seen": seen, "main": threading.main_thread().ident}), file=sys.stderr, flush=True)
sys.exit(code)
"""


@pytest.mark.slow  # loads the real model in a worker
def test_every_llama_call_runs_on_one_thread(tmp_path):
    """llama.cpp's OpenMP build keeps a spinning thread team per calling thread: in the model's worker
    process, loading and every generation must run on one thread (its main one), while token counts
    are answered beside them, or idle teams steal the cores (0.66x raw speed)."""
    import sys

    pytest.importorskip("llama_cpp")
    from harness.models.local import ModelWorker, packaged_model_path

    argv = [sys.executable, "-c", SPY_WORKER, "worker", "--model", str(packaged_model_path("smollm2"))]
    argv += ["--n-ctx", "512", "--n-threads", "1", "--weight-repack", "auto"]
    worker = ModelWorker(argv, tmp_path, "worker.log")

    async def go():
        await worker.start(120)
        try:
            for n in range(4):
                counted = asyncio.to_thread(worker.count_tokens, f"question {n}")
                chat = worker.chat({"messages": [{"role": "user", "content": f"Say {n}."}], "max_tokens": 4})
                tokens, _ = await asyncio.gather(counted, chat)
                assert tokens >= 2
        finally:
            await asyncio.to_thread(worker.stop)

    asyncio.run(go())
    line = next(x for x in (tmp_path / "worker.log").read_text().splitlines() if x.startswith("SEEN "))
    report = json.loads(line[len("SEEN ") :])
    assert [kind for kind, _ in report["seen"]] == ["load"] + ["generate"] * 4
    assert {ident for _, ident in report["seen"]} == {report["main"]}
