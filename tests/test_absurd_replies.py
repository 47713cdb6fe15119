"""Malformed and absurd 200 replies (issue 45, item 6): a body nested past any reply's depth is a
malformed reply (retried, never ``exception: RecursionError``), and usage no request could have used
(10^30 tokens) is refused as malformed and never priced, for every backend through the one place
every reply passes (``ModelBackend.generate``; a batch result in ``Batcher._deliver``). The replies
are the real recorded ones (tests/fixtures/recorded), their usage inflated."""

from __future__ import annotations

import asyncio
import copy
import functools
import json
from pathlib import Path

import pytest
import yaml
from fake_openai import FakeServer, recorded

from harness.errors import TransientModelError
from harness.models import BackendOptions, GenerationParams, create_backend
from harness.models.anthropic_api import from_anthropic_message
from harness.models.base import ModelBackend, ModelResponse, Usage
from harness.models.http_reply import MAX_REPLY_DEPTH, body_json, loads_reply
from harness.models.openai_compat import response_from_completion
from harness.models.openai_responses import response_from_responses
from harness.models.usage_bounds import PROMPT_OVERHEAD_TOKENS, usage_problem

RECORDED = Path(__file__).resolve().parent / "fixtures" / "recorded"
HUGE = 10**30
ASK = [{"role": "user", "content": "What is the capital of France?"}]
FAST = {"retry_max_wait": 0.01, "request_timeout": 5}


def deep(levels: int) -> bytes:
    return b"[" * levels + b"]" * levels


@functools.lru_cache(maxsize=None)
def _anthropic(name: str) -> str:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return json.dumps(yaml.load((RECORDED / "anthropic" / f"{name}.yaml").read_text(), Loader=loader)["interactions"])


def anthropic_interactions(name: str) -> list[dict]:
    return json.loads(_anthropic(name))


# ---------------------------------------------------------------------------------------------- depth
def test_a_reply_nested_past_the_limit_is_not_json_and_never_a_recursion_error():
    assert loads_reply(deep(MAX_REPLY_DEPTH)) is not None
    assert loads_reply('{"content": "' + "[" * 5000 + '"}') == {"content": "[" * 5000}  # brackets in text
    for levels in (MAX_REPLY_DEPTH + 1, 900, 200_000):  # 900 parses in json, 200,000 raises RecursionError
        with pytest.raises(ValueError, match=f"nested deeper than {MAX_REPLY_DEPTH} levels"):
            loads_reply(deep(levels))
    with pytest.raises(TransientModelError, match="reply 200 is not valid JSON \\(nested deeper than 100 levels\\)"):
        body_json(200, {"content-type": "application/json"}, deep(200_000), "server")


# ---------------------------------------------------------------------------------------------- bounds
def _recorded_replies():
    """(reply parsed by our parser, the recorded request's messages/input, tools, max tokens) of
    each recorded provider reply."""
    out = []
    chat = recorded("test_max_completion_tokens_o3-mini")[0]
    body = chat["request"]["parsed_body"]
    out.append(("o3-mini chat", response_from_completion(chat["response"]["parsed_body"]), body["messages"], None,
                body["max_completion_tokens"]))  # fmt: skip
    for name in ("test_openai_responses_thinking_with_tool_calls", "test_openai_responses_prompt_cache_e2e"):
        for turn in recorded(name):
            body = turn["request"]["parsed_body"]
            # sent without max_output_tokens: the model's own cap (gpt-5: 128,000, harness/models/model_facts.yaml)
            out.append((name, response_from_responses(turn["response"]["parsed_body"]), body["input"],
                        body.get("tools"), body.get("max_output_tokens") or 128_000))  # fmt: skip
    for name in ("tool_with_thinking", "cache_real_api", "model_thinking_part_redacted", "opus_5_features"):
        for turn in anthropic_interactions(name):
            body = turn["request"]["parsed_body"]
            out.append((name, from_anthropic_message(turn["response"]["parsed_body"]), body["messages"],
                        body.get("tools"), body["max_tokens"]))  # fmt: skip
    return out


def test_the_recorded_replies_are_within_the_bounds_and_the_same_inflated_are_not():
    replies = _recorded_replies()
    assert len(replies) == 12
    for name, reply, messages, tools, cap in replies:
        usage = reply.usage
        assert usage.prompt_tokens > 0 and usage.completion_tokens <= cap, name  # the caps hold the reasoning
        assert usage_problem(usage, cap, messages, tools, lambda: 200_000) is None, name
        assert usage_problem(usage, cap, messages, tools, lambda: None) is None, name  # context unknown
        for field in ("prompt_tokens", "completion_tokens"):
            inflated = usage.model_copy(update={field: HUGE})
            assert usage_problem(inflated, cap, messages, tools, lambda: 200_000), (name, field)
    # the tightest: 398 input tokens for a 421-byte request with a tool (Anthropic's tool-use prompt)
    first = next(r for r in replies if r[0] == "tool_with_thinking")
    assert first[1].usage.prompt_tokens == 398


def test_the_margins():
    small = [{"role": "user", "content": "hi"}]
    cap = 512
    # completion: the cap plus the cap, or plus the context where known (reasoning a gateway bills past it)
    assert usage_problem(Usage(prompt_tokens=5, completion_tokens=2 * cap), cap, small, None, lambda: None) is None
    assert "capped at --max-tokens 512" in usage_problem(
        Usage(prompt_tokens=5, completion_tokens=2 * cap + 1), cap, small, None, lambda: None
    )
    ok = Usage(prompt_tokens=5, completion_tokens=cap + 8192)
    assert usage_problem(ok, cap, small, None, lambda: 8192) is None
    assert "context of 8,192" in usage_problem(ok.model_copy(update={"completion_tokens": cap + 8193}), cap, small,
                                               None, lambda: 8192)  # fmt: skip
    # prompt: a byte a token plus the overhead, and at most twice the context
    assert usage_problem(Usage(prompt_tokens=PROMPT_OVERHEAD_TOKENS + 30), cap, small, None, lambda: None) is None
    assert "prompt tokens for a request of" in usage_problem(
        Usage(prompt_tokens=PROMPT_OVERHEAD_TOKENS + 100), cap, small, None, lambda: None
    )
    long = [{"role": "user", "content": "word " * 20_000}]
    assert usage_problem(Usage(prompt_tokens=20_000), cap, long, None, lambda: 10_000) is None
    assert "2x the model's context of 10,000" in usage_problem(Usage(prompt_tokens=20_001), cap, long, None,
                                                                lambda: 10_000)  # fmt: skip


class _Claims(ModelBackend):
    """A plugin-like backend whose replies report ``usage`` (the check is the base class's: every
    backend, a plugin's too, gets it)."""

    prefix = "claims"

    def __init__(self, usages):
        super().__init__("m", BackendOptions(max_attempts=3, retry_max_wait=0.01))
        self.usages = list(usages)

    async def _generate(self, messages, params, tools=None, tool_choice=None):
        return ModelResponse(content="Paris", usage=self.usages.pop(0))

    def context_size(self):
        return 8192

    def count_tokens(self, text):
        return len(text.split())


def test_every_backend_refuses_absurd_usage_in_generate_and_retries():
    backend = _Claims([Usage(prompt_tokens=HUGE, completion_tokens=1), Usage(prompt_tokens=9, completion_tokens=1)])
    reply = asyncio.run(backend.generate(ASK, GenerationParams()))
    assert reply.attempts == 2 and reply.usage.prompt_tokens == 9
    backend = _Claims([Usage(completion_tokens=HUGE)] * 3)
    with pytest.raises(TransientModelError, match="claims/m: reply reports .* completion tokens .*not priced"):
        asyncio.run(backend.generate(ASK, GenerationParams()))
    assert backend.usages == []  # all three tries used


# ---------------------------------------------------------------------------------------------- backends
def _generate(backend):
    async def go():
        try:
            await backend.start()
            return await backend.generate(ASK, GenerationParams(max_tokens=64))
        finally:
            await backend.close()

    return asyncio.run(go())


def _chat_reply(usage=(12, 3)):
    return {
        "id": "c", "object": "chat.completion", "created": 0, "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Paris"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)},
    }  # fmt: skip


class _Scripted:
    """A FakeServer handler answering POSTs by a script of faults (``deep``, ``absurd``, ``ok``),
    then ``ok``; GET answers the model list (vLLM reads ``max_model_len``, /version)."""

    def __init__(self, script, ok):
        self.script, self.ok = list(script), ok
        self.served = []

    def __call__(self, method, path, headers, body):
        if method == "GET":
            return 200, {}, {"object": "list", "data": [{"id": "m", "object": "model", "max_model_len": 4096}]}
        fault = self.script.pop(0) if self.script else "ok"
        self.served.append(fault)
        reply = copy.deepcopy(self.ok)
        if fault == "absurd":
            usage = reply["usage"]
            for key in ("prompt_tokens", "completion_tokens", "input_tokens", "output_tokens"):
                if key in usage:
                    usage[key] = HUGE
        if fault == "deep":
            return 200, {}, json.loads(deep(MAX_REPLY_DEPTH + 50))
        return 200, {}, reply


@pytest.fixture
def keys(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-0123456789abcdef")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-0123456789")


def _backend(kind, server, transport, monkeypatch):
    options = {**FAST, "http_client": transport, "max_attempts": 3}
    if kind == "openai-chat":
        return create_backend("openai/m", BackendOptions(base_url=server.url + "/v1", context_size=4096, **options))
    if kind == "openai-responses":  # OpenAI's own endpoint (there gpt-5 is asked on the Responses API)
        monkeypatch.setattr("harness.models.openai_api.DEFAULT_BASE_URL", server.url + "/v1")
        return create_backend("openai/gpt-5", BackendOptions(**options))
    if kind == "vllm":
        return create_backend("vllm/m", BackendOptions(base_url=server.url + "/v1", **options))
    return create_backend("anthropic/claude-sonnet-4-5", BackendOptions(base_url=server.url, **options))


OK_REPLY = {
    "openai-chat": _chat_reply(),
    "vllm": _chat_reply(),
    # the real recorded replies (a Responses answer with 128 reasoning tokens; a Claude answer)
    "openai-responses": recorded("test_openai_responses_requires_function_call_status_none")[1]["response"]["parsed_body"],
    "anthropic": anthropic_interactions("cache_real_api")[1]["response"]["parsed_body"],
}
TRANSPORTS = ["httpx", "aiohttp"]


@pytest.mark.slow  # loopback servers, the SDKs imported
@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("kind", sorted(OK_REPLY))
def test_each_backend_retries_a_deep_or_absurd_reply_and_answers(keys, kind, transport, monkeypatch):
    if transport == "aiohttp":
        pytest.importorskip("aiohttp")
    handler = _Scripted(["deep", "absurd"], OK_REPLY[kind])
    with FakeServer(handler) as server:
        reply = _generate(_backend(kind, server, transport, monkeypatch))
    assert handler.served == ["deep", "absurd", "ok"]
    assert reply.attempts == 3 and reply.usage.prompt_tokens < 10_000


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(OK_REPLY))
def test_absurd_usage_that_persists_fails_as_malformed_never_priced(keys, kind, monkeypatch):
    handler = _Scripted(["absurd"] * 3, OK_REPLY[kind])
    with FakeServer(handler) as server:
        with pytest.raises(TransientModelError) as info:
            _generate(_backend(kind, server, "httpx", monkeypatch))
    text = str(info.value)
    assert "\n" not in text and "a malformed reply, not priced" in text and "1,000,000,000" in text, text
    assert handler.served == ["absurd"] * 3


# ---------------------------------------------------------------------------------------------- a run
@pytest.mark.slow
def test_a_run_never_prices_absurd_usage(tmp_path, keys):
    """A priced model (gpt-4o-mini) behind a server reporting 10^30 tokens: before, $2.25e24 spent."""
    from fault_server import FaultServer

    from harness.cli import main

    def run(out, server):
        return main(["run", "--model", "openai/gpt-4o-mini", "--base-url", server.url, "--dataset", "hotpotqa:dev",
                     "--limit", "1", "--out", str(out), "--no-cache", "--max-attempts", "2", "--retry-max-wait",
                     "0.01"])  # fmt: skip

    with FaultServer(script=["absurd-usage", "deep-json"]) as server:
        assert run(tmp_path / "a", server) == 4  # both tries malformed: the sample failed, a rerun retries it
        assert run(tmp_path / "a", server) == 0  # the rerun: answered
    assert server.served == ["absurd-usage", "deep-json", "ok"]
    (failure,) = [json.loads(x) for x in (tmp_path / "a" / "failures.jsonl").read_text().splitlines()]
    assert failure["error_type"] == "model_unavailable" and "nested deeper than 100 levels" in failure["error"]
    assert not failure.get("spent_usd")
    results = json.loads((tmp_path / "a" / "results.json").read_text())
    spent = results["cost"]["spent_usd"]
    assert 0 < spent < 0.001, spent  # the one answer's 10 + 2 tokens, nothing of the 10^30


@pytest.mark.slow
def test_a_batch_result_with_absurd_usage_is_sent_again_never_priced(tmp_path, keys):
    import harness
    from fake_batch import FakeBatchServer

    prices = tmp_path / "prices.yaml"
    prices.write_text("source: test\nretrieved: today\nbatch_discount: {openai: 0.5}\n"
                      "models:\n  openai/gpt-test: {input: 1.0, output: 1.0}\n")  # fmt: skip
    with FakeBatchServer(usage=(HUGE, 10)) as fake:
        harness.run(model="openai/gpt-test", base_url=fake.url + "/v1", batch=True, limit=2, out=str(tmp_path / "b"),
                    cache=False, show_progress=False, max_tokens=16, retry_max_wait=0.05, max_attempts=2,
                    batch_window=0.2, batch_poll_interval=0.05, price_table=str(prices))  # fmt: skip
    failures = [json.loads(x) for x in (tmp_path / "b" / "failures.jsonl").read_text().splitlines()]
    assert len(failures) == 2 and all("a malformed reply, not priced" in f["error"] for f in failures), failures
    assert all("(try 2 of 2)" in f["error"] for f in failures)  # sent again in a second batch, then given up
    results = json.loads((tmp_path / "b" / "results.json").read_text())
    assert not results["cost"]["spent_usd"], results["cost"]
