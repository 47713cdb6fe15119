"""A failed sample keeps its transcript so far in failures.jsonl (issue 14): the last request's
messages and the reply it got, and the strategy's searches, whether the model hangs past
--sample-timeout or raises mid-loop; secrets masked as in every record."""

from __future__ import annotations

import asyncio
import json

import pytest

from harness.cli import main
from harness.models.scripted import register_script, unregister_script
from harness.redact import register_secret

SECRET = "sk-transcript-SECRET-0123456789abcdef"
BEHAVIOUR: dict = {}


async def search_then_fail(messages, tools, tool_choice, params):
    if not any(m["role"] == "assistant" for m in messages):
        return {
            "content": f"searching first (key {SECRET})",
            "tool_calls": [{"name": "search", "arguments": {"query": "Scott Derrickson"}}],
        }
    if BEHAVIOUR["then"] == "hang":
        await asyncio.sleep(30)
    raise KeyError("malformed response mid-loop")


@pytest.fixture
def model():
    register_secret(SECRET)
    register_script("search-then-fail", search_then_fail)
    yield "scripted/search-then-fail"
    unregister_script("search-then-fail")


@pytest.mark.parametrize("then, error_type", [("hang", "timeout"), ("raise", "exception")])
@pytest.mark.slow
def test_failed_sample_keeps_its_transcript(model, hotpot_snapshot, tmp_path, then, error_type):
    BEHAVIOUR["then"] = then
    out = tmp_path / "run"
    argv = ["run", "--model", model, "--setting", "open-book", "--agent", "open-book-native", "--dataset",
            "hotpotqa:dev", "--snapshot", str(hotpot_snapshot), "--search-space", "evidence-only", "--limit", "1", "--no-cache", "--out", str(out),
            "--sample-timeout", "1"]  # fmt: skip
    assert main(argv) == 4  # its one sample failed: no question answered
    text = (out / "failures.jsonl").read_text()
    assert SECRET not in text, "a secret in the model's reply is masked in failures.jsonl"
    failure = json.loads(text)
    assert failure["error_type"] == error_type
    messages = failure["messages"]
    # the first prompt, the reply that asked for a search, the search result: the request in flight
    assert [m["role"] for m in messages] == ["user", "assistant", "tool"]
    assert "Scott Derrickson" in messages[0]["content"]
    call = messages[1]["tool_calls"][0]
    assert call["function"]["name"] == "search" and json.loads(call["function"]["arguments"]) == {
        "query": "Scott Derrickson"
    }
    assert messages[2]["tool_call_id"] == call["id"] and "Derrickson" in messages[2]["content"]
    searches = failure["extra"]["searches"]
    assert [s["query"] for s in searches] == ["Scott Derrickson"] and searches[0]["found_title"]
    assert failure["model_calls"] == 2


def test_a_reply_received_before_the_failure_is_kept(tmp_path):
    """A closed-book strategy that fails after its one reply (a strategy's own bug): the prompt and
    that reply are in the failure record; no searches, so no extra."""
    from harness.execution.config import build_config
    from harness.execution.runner import Run

    register_script("one-reply", lambda *a: "Pat Burrell")
    try:
        config = build_config({"model": "scripted/one-reply", "out": str(tmp_path / "run"), "cache": False, "limit": 1})
        run = Run(config, show_progress=False)

        async def broken(sample, ctx):
            await ctx.generate([{"role": "user", "content": sample.question}])
            raise ValueError("strategy bug after the reply")

        run.agent.solve = broken
        results = asyncio.run(run.execute())
    finally:
        unregister_script("one-reply")
    assert results.counts.failed == 1
    failure = json.loads((tmp_path / "run" / "failures.jsonl").read_text())
    assert failure["error_type"] == "exception"
    assert failure["messages"][1] == {"role": "assistant", "content": "Pat Burrell"}
    assert failure["messages"][0]["role"] == "user" and "extra" not in failure
