"""Runner control flow with a scripted backend (no real model needed for these paths):
per-sample timeouts, failures retried on the next run, concurrency bound, fatal backend errors."""

import asyncio
import json

import pytest

from harness.execution.config import build_config
from harness.errors import ModelError
from harness.models.scripted import register_script, unregister_script
from harness.execution.runner import Run
from harness.execution.record import results_dict

STATE: dict = {}  # a per-question behaviour and in-flight bookkeeping


async def answer(messages, tools, tool_choice, params):
    STATE["in_flight"] += 1
    STATE["max_in_flight"] = max(STATE["max_in_flight"], STATE["in_flight"])
    try:
        behaviour = STATE["behaviour"](messages[0]["content"])
        if behaviour == "hang":
            await asyncio.sleep(30)
        if behaviour == "crash":
            raise KeyError("malformed response")
        if behaviour == "fatal":
            raise ModelError("the API key was revoked")
        await asyncio.sleep(0.05)
        return "Pat Burrell"
    finally:
        STATE["in_flight"] -= 1


@pytest.fixture(autouse=True)
def script():
    STATE.update(in_flight=0, max_in_flight=0, behaviour=lambda prompt: "ok")
    yield register_script("runner-control", answer)
    unregister_script("runner-control")


def run(tmp_path, **knobs):
    config = build_config({"model": "scripted/runner-control", "out": str(tmp_path / "run"), "cache": False, **knobs})
    return results_dict(asyncio.run(Run(config, show_progress=False).execute()))  # the JSON written


def test_timeout_is_recorded_then_retried(tmp_path, script):
    STATE["behaviour"] = lambda prompt: "hang" if "batting hand" in prompt else "ok"
    results = run(tmp_path, limit=3, sample_timeout=0.5)
    assert results["status"] == "incomplete"
    assert results["counts"] == {"selected": 3, "finished": 2, "failed": 1, "pending": 0, "truncated_output": 0}
    failure = json.loads((tmp_path / "run" / "failures.jsonl").read_text())
    assert failure["error_type"] == "timeout" and failure["id"] == "7dcbbbdc7f1120cd"
    assert results["scores"]["raw"][0]["fanoutqa-string"]["acc"] == 0  # the failed question counts 0

    STATE["behaviour"] = lambda prompt: "ok"
    script.requests.clear()
    results = run(tmp_path, limit=3, sample_timeout=0.5)
    assert results["status"] == "complete" and results["counts"]["failed"] == 0
    assert len(script.requests) == 1, "only the failed sample runs again"
    assert results["invocations"][-1]["attempted_ids"] == ["7dcbbbdc7f1120cd"]
    # Pat Burrell is one of the five picks in the reference: partial credit now.
    assert results["scores"]["raw"][0]["fanoutqa-string"]["acc"] == pytest.approx(0.1)


def test_a_crashing_sample_does_not_sink_the_run(tmp_path):
    STATE["behaviour"] = lambda prompt: "crash" if "batting hand" in prompt else "ok"
    results = run(tmp_path, limit=3)
    assert results["counts"]["finished"] == 2 and results["counts"]["failed"] == 1
    assert results["failures"]["7dcbbbdc7f1120cd"]["type"] == "exception"
    assert "KeyError" in (tmp_path / "run" / "errors.log").read_text()


def test_max_connections_bounds_concurrency(tmp_path):
    run(tmp_path, limit=8, max_connections=3)
    assert STATE["max_in_flight"] == 3


def test_fatal_backend_error_stops_the_run(tmp_path):
    STATE["behaviour"] = lambda prompt: "fatal"
    with pytest.raises(ModelError, match="revoked"):
        run(tmp_path, limit=3)
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["status"] == "error" and results["counts"]["finished"] == 0
