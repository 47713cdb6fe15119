"""A strategy cannot end, stop or freeze the run from outside ``solve`` (issue 45, item 4).

Before: a task spawned by ``solve`` calling ``sys.exit(0)`` ended the run rc 0, status interrupted,
no error line; ``loop.call_soon(sys.exit, 5)`` gave rc 5 silently; cancelling every task looked like
Ctrl-C (rc 130); ``loop.stop()`` gave ``internal error``; a blocking call that never returned froze
the run for good. Now the first four fail their own sample only (rc 1, the others finished), an
escape no sample can hold (a thread's ``call_soon_threadsafe``, a task outliving its sample) stops
the run with one line naming the strategy (exit 5), and a strategy blocked past --sample-timeout
plus --freeze-grace ends the run with one line naming it and its line, the finished rows kept.

The fast tests drive the guard and the watchdog on a bare loop; the slow ones are each reproducer,
``harness run`` in a subprocess with the scripted model and a plugin strategy file."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, harness_cmd
from harness.errors import StrategyStoppedRun
from harness.execution.guard import LoopGuard, StrategyEscape, run_guarded
from harness.execution.watchdog import SAMPLE, LoopWatch

# ---------------------------------------------------------------------------------------------------
# fast: the guard on a bare loop (this file is "strategy code": outside the harness's own folders)


def guarded(body):
    """Run ``body(guard)`` on a fresh loop with the guard installed."""

    async def main():
        guard = LoopGuard.install()
        guard.who = "agent test"
        try:
            return await body(guard)
        finally:
            guard.uninstall()

    return asyncio.run(main())


async def as_sample(key: str, coro_fn):
    """A task started for sample ``key`` (as the runner's within_own_time starts solve)."""
    token = SAMPLE.set(key)
    try:
        task = asyncio.ensure_future(coro_fn())
    finally:
        SAMPLE.reset(token)
    return task


def test_sys_exit_in_a_task_or_callback_fails_its_sample_and_the_loop_goes_on():
    async def body(guard):
        reasons = []
        for key, make in (
            ("task", lambda: asyncio.ensure_future(_exits(0))),
            ("soon", lambda: asyncio.get_running_loop().call_soon(sys.exit, 5)),
            ("later", lambda: asyncio.get_running_loop().call_later(0.01, sys.exit, 6)),
        ):
            with guard.sample(key) as escaped:

                async def solve():
                    make()
                    await asyncio.sleep(0.1)

                task = await as_sample(key, solve)
                await asyncio.wait({task, escaped}, return_when=asyncio.FIRST_COMPLETED)
                assert escaped.done(), key
                reasons.append(str(escaped.exception()))
                assert isinstance(escaped.exception(), StrategyEscape)
                await task
        return reasons

    task_reason, soon_reason, later_reason = guarded(body)
    assert task_reason.startswith("called sys.exit(0) in a task it started (at ") and __file__ in task_reason
    assert "in _exits)" in task_reason
    assert soon_reason.startswith("scheduled sys.exit(5) on the event loop, which raised SystemExit(5)")
    assert later_reason.startswith("scheduled sys.exit(6) on the event loop")
    assert all(r.endswith("(a strategy cannot end or stop the run)") for r in (task_reason, soon_reason))


async def _exits(code):
    sys.exit(code)


def test_a_cancel_of_a_task_not_its_own_is_refused_and_fails_the_sample_that_made_it():
    async def body(guard):
        run_task = asyncio.ensure_future(asyncio.sleep(5))  # the run's own (no sample)
        other = await as_sample("other", lambda: asyncio.sleep(5))
        with guard.sample("bad") as escaped, guard.sample("other"):

            async def solve():
                own = asyncio.ensure_future(asyncio.sleep(5))  # its own: cancelled
                results = (run_task.cancel(), other.cancel(), own.cancel())
                await asyncio.sleep(0)
                return results, own.cancelled()

            results, own_cancelled = await (await as_sample("bad", solve))
            assert results == (False, False, True) and own_cancelled
            assert not run_task.cancelled() and not other.cancelled()
            reason = str(escaped.exception())
            # the harness cancels what it must (a timeout, the end of the run): never refused
            assert run_task.cancel() and other.cancel()
            return reason

    reason = guarded(body)
    assert reason.startswith("cancelled the run's task Task-") and f"not one it started, at {__file__}:" in reason


def test_loop_stop_from_a_sample_is_refused_and_fails_it():
    async def body(guard):
        with guard.sample("s") as escaped:

            async def solve():
                asyncio.get_running_loop().stop()
                await asyncio.sleep(0.05)  # the loop is still running
                return "went on"

            assert await (await as_sample("s", solve)) == "went on"
            return str(escaped.exception())

    assert guarded(body).startswith(f"called loop.stop() at {__file__}:")


def test_an_escape_no_sample_holds_stops_the_run_in_one_line_exit_5():
    async def work():
        guard = LoopGuard.current()
        guard.who = "agent test"
        await (await as_sample("gone", lambda: asyncio.sleep(0)))  # its sample is not in flight
        token = SAMPLE.set("gone")
        try:
            asyncio.get_running_loop().call_soon(sys.exit, 0)
        finally:
            SAMPLE.reset(token)
        await asyncio.sleep(0.05)
        return "done"

    with pytest.raises(StrategyStoppedRun) as info:
        run_guarded(work)
    assert info.value.exit_code == 5
    assert str(info.value).startswith("agent test: scheduled sys.exit(0) on the event loop")
    assert "for sample gone, after that sample ended; the run stops (exit 5)" in str(info.value)


def test_run_guarded_ignores_a_cancel_of_the_main_task_but_not_its_own_stop():
    async def work():
        main = next(t for t in asyncio.all_tasks() if t.get_coro().__qualname__ == "run_guarded.<locals>.main")
        token = SAMPLE.set("s")
        try:
            main.cancel()  # a strategy cancelling every task: the work goes on
        finally:
            SAMPLE.reset(token)
        await asyncio.sleep(0.05)
        return "finished"

    assert run_guarded(work) == "finished"

    async def killed():
        os.kill(os.getpid(), signal.SIGTERM)  # a kill: interrupted, as before
        await asyncio.sleep(5)

    with pytest.raises(asyncio.CancelledError):
        run_guarded(killed)


def test_the_watchdog_ends_a_run_frozen_past_timeout_plus_grace():
    said = []

    async def main():
        watch = LoopWatch(10, who="agent test", tick_s=0.05, freeze_after_s=0.4, freeze_limit="T plus G",
                          on_freeze=said.append).start()  # fmt: skip
        guard = LoopGuard.install()
        try:

            async def solve():
                await asyncio.sleep(0)
                time.sleep(0.8)  # blocks the loop

            await (await as_sample("frozen", solve))
        finally:
            watch.stop()
            guard.uninstall()

    asyncio.run(main())
    (line,) = said
    assert line.startswith("error: agent test froze the run: sample frozen has held the event loop ")
    assert f"at {__file__}:" in line and "in solve, past T plus G;" in line and "(exit 5)" in line


# ---------------------------------------------------------------------------------------------------
# slow: each reproducer, `harness run` in a subprocess

PLUGIN = '''
import asyncio, os, sys, threading, time
from harness.strategy import Agent, SampleResult

MODE = os.environ["ESCAPE_MODE"]
FAULTY = "hotpot-dev-001"


class Escape(Agent):
    settings = ("closed-book",)

    async def solve(self, sample, ctx):
        reply = (await ctx.generate([{"role": "user", "content": sample.question}])).content
        if sample.id != FAULTY or MODE == "ok":
            if MODE != "freeze":
                await asyncio.sleep(0.5)  # in flight while the faulty one misbehaves
            return SampleResult(reply, [])
        loop = asyncio.get_running_loop()
        if MODE == "task-exit":
            async def bye():
                sys.exit(0)
            asyncio.ensure_future(bye())
        elif MODE == "soon-exit":
            loop.call_soon(sys.exit, 5)
        elif MODE == "cancel-all":
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()
        elif MODE == "stop":
            loop.stop()
        elif MODE == "late-exit":
            async def later():
                await asyncio.sleep(0.2)
                sys.exit(0)
            asyncio.ensure_future(later())
            return SampleResult(reply, [])
        elif MODE == "thread-exit":
            threading.Thread(target=lambda: loop.call_soon_threadsafe(sys.exit, 3)).start()
        elif MODE == "freeze":
            await asyncio.sleep(0.3)  # the other three finish first
            time.sleep(10**6)  # FROZEN
        await asyncio.sleep(0.3)
        return SampleResult(reply, [])
'''
FAULTY = "hotpot-dev-001"
IDS = ["hotpot-dev-000", FAULTY, "hotpot-dev-002", "hotpot-dev-003"]
WHO = "agent escape.py:Escape"


def run(tmp_path: Path, mode: str, *extra: str) -> subprocess.CompletedProcess:
    (tmp_path / "escape.py").write_text(PLUGIN, encoding="utf-8")
    env = {**os.environ, "ESCAPE_MODE": mode, "PYTHONPATH": str(REPO), "HARNESS_CACHE_DIR": str(tmp_path / "cache")}
    argv = ["run", "--model", "scripted/echo", "--dataset", "hotpotqa:dev", "--limit", "4", "--max-connections", "4",
            "--agent", "escape.py:Escape", "--out", "out", *extra]  # fmt: skip
    return subprocess.run(harness_cmd(*argv), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.slow
@pytest.mark.parametrize(
    "mode, reason",
    [
        ("task-exit", "called sys.exit(0) in a task it started (at "),
        ("soon-exit", "scheduled sys.exit(5) on the event loop, which raised SystemExit(5)"),
        ("cancel-all", "cancelled "),  # the run's task or another sample's, whichever it met first
        ("stop", "called loop.stop() at "),
    ],
)
def test_an_escape_fails_its_own_sample_only(tmp_path, mode, reason):
    proc = run(tmp_path, mode)
    assert proc.returncode == 1, proc.stderr  # a failed sample: never 0, 5, 130 or an internal error
    assert "internal error" not in proc.stderr and "Traceback" not in proc.stderr and "interrupted" not in proc.stderr
    out = tmp_path / "out"
    assert sorted(r["id"] for r in rows(out / "samples.jsonl")) == [i for i in IDS if i != FAULTY]
    (failure,) = rows(out / "failures.jsonl")
    assert failure["id"] == FAULTY and failure["error_type"] == "plugin_error"
    assert failure["error"].startswith(f"{WHO}: {reason}")
    assert failure["error"].endswith("(a strategy cannot end or stop the run)")
    if mode == "cancel-all":
        assert re.search(r"cancelled (the run's|sample hotpot-dev-00[023]'s) task Task-\d+, not one it started, at "
                         r".*escape\.py:\d+ in solve", failure["error"]), failure["error"]  # fmt: skip
    results = json.loads((out / "results.json").read_text())
    assert results["status"] == "incomplete" and results["counts"]["finished"] == 3


@pytest.mark.slow
@pytest.mark.parametrize(
    "mode, reason",
    [
        ("late-exit", f"{WHO}: called sys.exit(0) in a task it started (at "),
        ("thread-exit", f"{WHO}: scheduled sys.exit(3) on the event loop, which raised SystemExit(3) outside any"),
    ],
)
def test_an_escape_no_sample_holds_ends_the_run_in_one_line(tmp_path, mode, reason):
    proc = run(tmp_path, mode)
    assert proc.returncode == 5, proc.stderr
    (line,) = [x for x in proc.stderr.splitlines() if x.startswith("error:")]
    assert line.startswith(f"error: {reason}") and "the run stops (exit 5)" in line
    assert "Traceback" not in proc.stderr
    out = tmp_path / "out"
    assert json.loads((out / "results.json").read_text())["status"] == "error"
    assert all(r["status"] == "ok" for r in rows(out / "samples.jsonl"))


@pytest.mark.slow
def test_a_frozen_strategy_ends_the_run_with_its_line_and_the_rows_kept(tmp_path):
    started = time.monotonic()
    proc = run(tmp_path, "freeze", "--sample-timeout", "2", "--freeze-grace", "1")
    assert proc.returncode == 5, proc.stderr
    (line,) = [x for x in proc.stderr.splitlines() if x.startswith("error:")]
    frozen_at = PLUGIN.splitlines().index("            time.sleep(10**6)  # FROZEN") + 1
    assert line.startswith(f"error: {WHO} froze the run: sample {FAULTY} has held the event loop ")
    assert f"escape.py:{frozen_at} in solve, past --sample-timeout 2 s plus --freeze-grace 1 s" in line
    out = tmp_path / "out"
    kept = (out / "samples.jsonl").read_bytes()
    assert kept.endswith(b"\n")  # whole lines only
    assert sorted(r["id"] for r in rows(out / "samples.jsonl")) == [i for i in IDS if i != FAULTY]
    assert time.monotonic() - started < 60
    # the same command resumes: only the frozen sample is asked again
    proc = run(tmp_path, "ok", "--sample-timeout", "2", "--freeze-grace", "1")
    assert proc.returncode == 0, proc.stderr
    results = json.loads((out / "results.json").read_text())
    assert results["invocations"][-1]["attempted_ids"] == [FAULTY] and results["counts"]["finished"] == 4
    assert len(rows(out / "samples.jsonl")) == 4
