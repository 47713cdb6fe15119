"""A faulty plugin is its own sample's or its own metric's failure, never the run's (issue 22, point 9).

Before: a strategy whose ``solve`` returned None or a result that is not JSON ended the run with
``internal error``, no row, the other samples in flight lost; ``sys.exit(0)`` in ``solve`` ended the
run with rc 0; ``time.sleep`` in ``solve`` froze the loop so ``--sample-timeout`` never fired; a metric
that raised took every metric with it, one that hung hung the run."""

from __future__ import annotations

import asyncio
import json
import sys
import time

import pytest

from harness.cli import main
from harness.datasets import load_dataset
from harness.strategy import AGENTS, Agent, SampleResult, register_agent

# each test starts a loopback server (or runs whole CLI runs in subprocesses): the slow tier
pytestmark = pytest.mark.slow

IDS = [s.id for s in load_dataset("hotpotqa:dev").samples[:4]]
FAULTY = IDS[1]  # the sample the strategy misbehaves on; the other three are in flight beside it


class CustomBase(BaseException):
    pass


def misbehave(mode: str, reply: str) -> SampleResult | None:
    if mode == "raise":
        raise ValueError("boom")
    if mode == "none":
        return None
    if mode == "not-json":
        return SampleResult(reply, [], extra={"seen": {1, 2}})
    if mode == "extra-list":
        return SampleResult(reply, [], extra=["not", "a", "dict"])  # type: ignore[arg-type]
    if mode == "exit":
        sys.exit(0)
    if mode == "base":
        raise CustomBase("mine")
    if mode == "cancelled":
        raise asyncio.CancelledError()
    if mode == "interrupt":
        raise KeyboardInterrupt
    if mode == "block":
        time.sleep(3)  # blocks the event loop: every sample waits
        return SampleResult(reply, [])
    raise AssertionError(mode)


def faulty_agent(mode: str) -> str:
    name = f"faulty-{mode}"

    class Faulty(Agent):
        settings = ("closed-book",)

        async def solve(self, sample, ctx):
            reply = (await ctx.generate([{"role": "user", "content": sample.question}])).content
            if sample.id == FAULTY:
                return misbehave(mode, reply)
            await asyncio.sleep(0.5)  # in flight while the faulty one misbehaves
            return SampleResult(reply, [])

    if name not in AGENTS.names():
        register_agent(name)(Faulty)
    return name


def run_cli(capsys, tmp_path, agent: str, *extra: str) -> tuple[int, str]:
    code = main(
        ["run", "--model", "scripted/echo", "--dataset", "hotpotqa:dev", "--limit", "4", "--max-connections", "4",
         "--agent", agent, "--out", str(tmp_path / "run"), *extra]
    )  # fmt: skip
    return code, capsys.readouterr().err


def rows(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.parametrize(
    "mode, error_type, reason",
    [
        ("raise", "exception", "ValueError: boom (at "),
        ("none", "plugin_error", "agent faulty-none: solve returned NoneType, not a SampleResult"),
        ("not-json", "plugin_error", "its result cannot be written as JSON (extra: Object of type set is not JSON serializable)"),
        ("extra-list", "plugin_error", "its SampleResult.extra is list, not dict"),
        ("exit", "plugin_error", "called sys.exit(0) in solve"),
        ("base", "plugin_error", "solve raised CustomBase: mine"),
        ("cancelled", "plugin_error", "solve raised CancelledError"),
    ],
)
def test_a_faulty_strategy_fails_its_own_sample_only(tmp_path, capsys, mode, error_type, reason):
    code, err = run_cli(capsys, tmp_path, faulty_agent(mode))
    assert code == 1, err  # a failed sample: never 0, never an internal error
    assert "internal error" not in err and "Traceback" not in err
    out = tmp_path / "run"
    assert sorted(r["id"] for r in rows(out / "samples.jsonl")) == sorted(i for i in IDS if i != FAULTY)
    (failure,) = rows(out / "failures.jsonl")
    assert failure["id"] == FAULTY and failure["error_type"] == error_type and reason in failure["error"]
    results = json.loads((out / "results.json").read_text())
    assert results["status"] == "incomplete" and results["counts"]["finished"] == 3
    # a rerun retries that sample alone, and records it alike
    code, _ = run_cli(capsys, tmp_path, faulty_agent(mode))
    results = json.loads((out / "results.json").read_text())
    assert code == 1 and results["invocations"][-1]["attempted_ids"] == [FAULTY]
    assert len(rows(out / "failures.jsonl")) == 2 and len(rows(out / "samples.jsonl")) == 3


def test_keyboard_interrupt_in_solve_interrupts_the_run_never_rc_0(tmp_path, capsys):
    code, err = run_cli(capsys, tmp_path, faulty_agent("interrupt"))
    assert code == 130 and "interrupted" in err
    assert json.loads((tmp_path / "run" / "results.json").read_text())["status"] == "interrupted"


def test_a_strategy_blocking_the_loop_is_named_and_only_its_sample_times_out(tmp_path, capsys):
    """time.sleep(3) in solve, --sample-timeout 1.5: the watchdog names the sample, the strategy and
    the line; that sample fails as a timeout once the loop is free; the three beside it, whose
    clocks do not count the stall it caused, finish."""
    code, err = run_cli(capsys, tmp_path, faulty_agent("block"), "--sample-timeout", "1.5")
    assert code == 1, err
    (warning,) = [line for line in err.splitlines() if "event loop has not run" in line]
    assert f"sample {FAULTY} (agent faulty-block) blocks it at {__file__}:" in warning and "in misbehave" in warning
    out = tmp_path / "run"
    assert len(rows(out / "samples.jsonl")) == 3
    (failure,) = rows(out / "failures.jsonl")
    assert failure["id"] == FAULTY and failure["error_type"] == "timeout"
    assert "no answer within 1.5 s: it held the event loop" in failure["error"] and __file__ in failure["error"]
    stalls = json.loads((out / "results.json").read_text())["invocations"][-1]["loop_stalls"]
    assert stalls[0]["sample"] == FAULTY and stalls[0]["seconds"] > 2


FAULTY_METRICS = """
import sys, time
from harness.scoring.metrics import em_f1

def raises(questions, answers, only_answered, options=None):
    raise ZeroDivisionError("division by zero in raises")

def hangs(questions, answers, only_answered, options=None):
    time.sleep(30)
    return em_f1(questions, answers, only_answered, options)

def exits(questions, answers, only_answered, options=None):
    sys.exit(3)

def returns_none(questions, answers, only_answered, options=None):
    return None

def not_json(questions, answers, only_answered, options=None):
    return {"raw": {q.id: {"x": {1, 2}} for q in questions}}
"""


def test_a_faulty_metric_fails_alone_and_the_run_keeps_its_other_scores(tmp_path, capsys, caplog):
    (tmp_path / "m.py").write_text(FAULTY_METRICS)
    faulty = ["raises", "hangs", "exits", "returns_none", "not_json"]
    metrics = ",".join(["em-f1", *(f"{tmp_path / 'm.py'}:{name}" for name in faulty)])
    started = time.monotonic()
    code = main(
        ["run", "--model", "scripted/echo", "--dataset", "hotpotqa:dev", "--limit", "4", "--metrics", metrics,
         "--metric-timeout", "1", "--out", str(tmp_path / "run")]
    )  # fmt: skip
    err = capsys.readouterr().err
    assert code == 0, err  # every sample finished; the metrics' faults are theirs, said and recorded
    said = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]  # stderr, outside pytest
    assert time.monotonic() - started < 20  # the hanging metric cost its timeout, not 30 s
    scores = json.loads((tmp_path / "run" / "results.json").read_text())["scores"]
    assert scores["meta"]["metrics"] == ["em-f1"] and "em" in scores["em-f1"]
    failed = scores["meta"]["failed_metrics"]
    assert set(failed) == set(faulty)
    assert "ZeroDivisionError: division by zero in raises at " in failed["raises"]
    assert failed["hangs"] == "no result within 1 s (metric_timeout)"
    assert failed["exits"].startswith("SystemExit: 3")
    assert failed["returns_none"] == 'returned NoneType, not {"raw": {question id: values}, ...}'
    assert failed["not_json"].startswith("its result is not JSON: Object of type set")
    for name in faulty:  # one line each on stderr
        assert len([line for line in said if f"m.py:{name} failed: " in line]) == 1, said
    # `harness score` goes the same way: the run's own scores back, failures included
    code = main(["score", str(tmp_path / "run"), "--out", str(tmp_path / "scores.json")])
    assert code == 0
    rescored = json.loads((tmp_path / "scores.json").read_text())
    assert rescored["meta"]["failed_metrics"] == failed and rescored["em-f1"] == scores["em-f1"]
