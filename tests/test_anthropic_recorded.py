"""anthropic/ against real traffic: the recorded Messages API exchanges in tests/fixtures/recorded/
anthropic/ (pydantic-ai's cassettes, see the README there) replayed through our parser, our requests
compared with the recorded ones (parameters present and absent, block shapes), and a loopback fake
answering with the recorded bodies through AnthropicBackend: a two-turn tool loop whose second
request carries the first reply's thinking block unchanged, under the pinned API version. Also what
rests on documentation only: refusals, the thinking-budget checks, the pre-flight probe."""

from __future__ import annotations

import asyncio
import copy
import json
from pathlib import Path

import pytest
import yaml
from test_api_backends import FakeServer

from harness.errors import ModelError
from harness.models import BackendOptions, GenerationParams, create_backend
from harness.models.anthropic_api import (
    ANTHROPIC_VERSION,
    from_anthropic_message,
    refused_param,
    wire_body,
)
from harness.models.batch_api import AnthropicBatchAPI
from harness.models.facts import FACTS_ENV

# A refusal as Anthropic documents it (no recording of one is in pydantic-ai's cassettes):
# https://platform.claude.com/docs/en/test-and-evaluate/strengthen-guardrails/handle-streaming-refusals
REFUSAL_REPLY = {
    "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
    "content": [{"type": "text", "text": "Hello.."}],
    "stop_reason": "refusal",
    "stop_details": {"type": "refusal", "category": "cyber",
                     "explanation": "This request was declined because it could enable cyber harm."},
    "usage": {"input_tokens": 10, "output_tokens": 3},
}  # fmt: skip


RECORDED = Path(__file__).parent / "fixtures" / "recorded" / "anthropic"
SAMPLING = ("temperature", "top_p", "top_k")


def interactions(name: str) -> list[tuple[dict, dict]]:
    """(request body, response body) of each recorded exchange."""
    data = yaml.safe_load((RECORDED / name).read_text())
    return [(i["request"]["parsed_body"], i["response"]["parsed_body"]) for i in data["interactions"]]


def sent(body: dict) -> dict:
    """A recorded request as our SDK call would send it: pydantic-ai passes ``stream: false``, we
    send no ``stream`` (the same non-streaming request)."""
    return {k: v for k, v in body.items() if k != "stream"}


@pytest.fixture
def facts_5x(tmp_path, monkeypatch):
    """A facts table holding the models of these recordings as the shipped table has them, and
    claude-opus-5 (thinks always, takes no sampling parameter; whats-new-opus-5-5 and the recorded
    request), without depending on which 5.x entries the shipped table carries."""
    shipped = yaml.safe_load(Path(__file__).parents[1].joinpath("harness/models/model_facts.yaml").read_text())
    models = {k: v for k, v in shipped["models"].items() if k.startswith("anthropic/")}
    models["anthropic/claude-opus-5"] = {
        "api": "messages", "thinking": "always", "sampling": [], "context_window": 1_000_000,
        "max_output_tokens": 128_000, "cache_min_tokens": 512, "default_max_tokens": 16000,
        "reasoning_efforts": ["low", "medium", "high", "xhigh", "max"],
        "source": "test", "retrieved": "2026-11-26",
    }  # fmt: skip
    models["anthropic/claude-budget-test"] = {
        "thinking": "optional",
        "min_thinking_budget": 2048,
        "source": "test",
        "retrieved": "2026-11-26",
    }
    path = tmp_path / "facts.yaml"
    path.write_text(yaml.safe_dump({"models": models}))
    monkeypatch.setenv(FACTS_ENV, str(path))
    return path


# --------------------------------------------------------------------------- replies parsed
def test_thinking_with_tool_use_reply_is_parsed_whole():
    (_, first), (_, second) = interactions("tool_with_thinking.yaml")
    response = from_anthropic_message(first)
    assert response.reasoning_items == [first["content"][0]]  # the block, signature and all, unchanged
    assert response.reasoning == first["content"][0]["thinking"]
    assert response.content == first["content"][1]["text"]
    (call,) = response.tool_calls
    assert (call.id, call.name, json.loads(call.arguments)) == (
        "toolu_01YGzqpRE16Vricda3Aqcejo",
        "get_user_country",
        {},
    )
    assert response.finish_reason == "tool_calls"
    assert (response.usage.prompt_tokens, response.usage.completion_tokens, response.usage.reasoning_tokens) == (
        398,
        155,
        0,
    )
    final = from_anthropic_message(second)
    assert final.finish_reason == "stop" and final.content.startswith(
        "Based on the information that you're from Mexico"
    )
    assert final.reasoning_items == [] and final.reasoning is None


def test_adaptive_thinking_reply_counts_its_thinking_tokens():
    ((_, reply),) = interactions("opus_5_features.yaml")
    response = from_anthropic_message(reply)
    assert response.content == "2 + 2 = 4" and response.finish_reason == "stop"
    assert response.reasoning_items == [reply["content"][0]] and response.reasoning.startswith(
        "This is a straightforward"
    )
    usage = response.usage
    assert (usage.prompt_tokens, usage.completion_tokens, usage.reasoning_tokens) == (13, 44, 33)
    # a count that cannot be part of the output is a fault, not a number passed on
    broken = copy.deepcopy(reply)
    broken["usage"]["output_tokens_details"]["thinking_tokens"] = 45
    with pytest.raises(Exception, match="thinking_tokens is 45"):
        from_anthropic_message(broken)


def test_redacted_thinking_is_kept_and_its_text_is_not_invented():
    (_, first), _ = interactions("model_thinking_part_redacted.yaml")
    response = from_anthropic_message(first)
    assert (
        response.reasoning_items == [first["content"][0]] and response.reasoning_items[0]["type"] == "redacted_thinking"
    )
    assert response.reasoning is None  # nothing readable in it
    assert response.content.startswith("I notice that your message")
    message = response.as_message()
    assert message["reasoning_items"] == [first["content"][0]]


def test_cache_reads_and_writes_from_the_recorded_usage():
    (_, first), (_, second) = interactions("cache_real_api.yaml")
    read = from_anthropic_message(first).usage
    assert (read.prompt_tokens, read.cache_read_tokens, read.cache_write_tokens, read.completion_tokens) == (
        3 + 1111, 1111, 0, 406,
    )  # fmt: skip
    both = from_anthropic_message(second).usage
    assert (both.prompt_tokens, both.cache_read_tokens, both.cache_write_tokens, both.completion_tokens) == (
        3 + 418 + 1111, 1111, 418, 33,
    )  # fmt: skip


def test_a_refusal_keeps_its_explanation():
    """Shape from https://platform.claude.com/docs/en/test-and-evaluate/strengthen-guardrails/handle-streaming-refusals
    (no recording of a refusal is in pydantic-ai's cassettes)."""
    reply = copy.deepcopy(REFUSAL_REPLY)
    response = from_anthropic_message(reply)
    assert response.finish_reason == "content_filter"
    assert response.refusal == "This request was declined because it could enable cyber harm."
    assert response.as_message()["refusal"] == response.refusal
    del reply["stop_details"]  # the older shape: only the text said before the cut
    assert from_anthropic_message(reply).refusal == "Hello.."
    assert from_anthropic_message({**reply, "stop_reason": "end_turn"}).refusal is None


def test_a_thinking_block_without_its_signature_is_a_fault():
    (_, first), _ = interactions("tool_with_thinking.yaml")
    broken = copy.deepcopy(first)
    del broken["content"][0]["signature"]
    with pytest.raises(Exception, match=r"content\[0\]\.signature is missing"):
        from_anthropic_message(broken)


# --------------------------------------------------------------------------- requests compared
def test_the_second_request_of_a_thinking_tool_loop_is_the_recorded_one(facts_5x):
    """claude-sonnet-4-0, thinking optional, --thinking-budget 3000: the request after the tool
    result carries the first reply's thinking block unchanged and first, no sampling parameter."""
    (first_request, first), (second_request, _) = interactions("tool_with_thinking.yaml")
    backend = create_backend("anthropic/claude-sonnet-4-0", BackendOptions(prompt_cache=False))
    params = GenerationParams(max_tokens=4096, thinking_budget=3000)
    tool = {"type": "function", "function": {"name": "get_user_country", "description": "",
                                             "parameters": first_request["tools"][0]["input_schema"]}}  # fmt: skip
    question = [{"role": "user", "content": "What is the largest city in the user country?"}]
    ours = wire_body(backend.request_kwargs(question, params, [tool], "auto"))
    recorded = sent(first_request)
    assert {**ours, "tools": recorded["tools"]} == recorded  # the tool's empty description is left out
    reply = from_anthropic_message(first).as_message()
    loop = [*question, reply, {"role": "tool", "tool_call_id": "toolu_01YGzqpRE16Vricda3Aqcejo", "content": "Mexico"}]
    ours = wire_body(backend.request_kwargs(loop, params, [tool], "auto"))
    recorded = sent(second_request)
    assert set(ours) == set(recorded) and not set(ours) & set(SAMPLING)
    assert ours["thinking"] == recorded["thinking"] == {"type": "enabled", "budget_tokens": 3000}
    assert ours["messages"][1] == recorded["messages"][1]  # thinking, text, tool_use: the same blocks
    assert ours["messages"][1]["content"][0] == first["content"][0]  # the signature unchanged
    # the tool result: pydantic-ai also says is_error false, which is the API's default
    assert ours["messages"][2] == {**recorded["messages"][2], "content": [
        {k: v for k, v in recorded["messages"][2]["content"][0].items() if k != "is_error"}]}  # fmt: skip


def test_redacted_thinking_goes_back_in_the_next_turn_as_recorded(facts_5x):
    """claude-sonnet-4-5 with --thinking-budget 1024: the whole second request equals the recorded one."""
    (first_request, first), (second_request, _) = interactions("model_thinking_part_redacted.yaml")
    backend = create_backend("anthropic/claude-sonnet-4-5-20250929", BackendOptions(prompt_cache=False))
    params = GenerationParams(max_tokens=4096, thinking_budget=1024)
    question = {"role": "user", "content": first_request["messages"][0]["content"][0]["text"]}
    assert wire_body(backend.request_kwargs([question], params)) == sent(first_request)
    turns = [question, from_anthropic_message(first).as_message(), {"role": "user", "content": "What was that?"}]
    assert wire_body(backend.request_kwargs(turns, params)) == sent(second_request)


def test_an_always_thinking_model_gets_the_recorded_adaptive_request(facts_5x):
    ((request, _),) = interactions("opus_5_features.yaml")
    backend = create_backend("anthropic/claude-opus-5", BackendOptions(prompt_cache=False))
    ours = wire_body(
        backend.request_kwargs([{"role": "user", "content": "What is 2+2?"}], GenerationParams(max_tokens=4096))
    )
    # the recorded request also asked for effort xhigh (output_config): we send no effort unless asked
    assert ours == {k: v for k, v in sent(request).items() if k != "output_config"}
    assert ours["thinking"] == {"type": "adaptive", "display": "summarized"}
    assert not set(ours) & set(SAMPLING)  # temperature 0 is not sent: thinking on, and the table says none


def test_an_effort_asked_gives_the_recorded_request_whole(facts_5x):
    # --reasoning-effort xhigh on claude-opus-5: byte for byte the recorded request (output_config.effort)
    ((request, _),) = interactions("opus_5_features.yaml")
    backend = create_backend("anthropic/claude-opus-5", BackendOptions(prompt_cache=False))
    params = GenerationParams(max_tokens=4096, reasoning_effort="xhigh")
    assert wire_body(backend.request_kwargs([{"role": "user", "content": "What is 2+2?"}], params)) == sent(request)


def test_an_adaptive_only_model_thinks_when_an_effort_is_asked_and_refuses_a_budget(tmp_path, monkeypatch):
    # the shipped table: claude-opus-4-7 thinks optionally but takes no budget (min_thinking_budget null)
    monkeypatch.delenv(FACTS_ENV, raising=False)
    hello = [{"role": "user", "content": "hello"}]
    opus = create_backend("anthropic/claude-opus-4-7")
    assert "thinking" not in opus.request_kwargs(hello, GenerationParams()).get("extra_body", {})
    asked = opus.request_kwargs(hello, GenerationParams(reasoning_effort="high"))["extra_body"]
    assert asked == {"thinking": {"type": "adaptive", "display": "summarized"}, "output_config": {"effort": "high"}}
    with pytest.raises(ModelError, match="refuses a thinking budget") as info:
        opus.check_params(GenerationParams(max_tokens=8192, thinking_budget=2048))
    assert "\n" not in str(info.value)
    with pytest.raises(ModelError, match="takes low, medium, high, xhigh, max"):
        opus.check_params(GenerationParams(reasoning_effort="minimal"))
    with pytest.raises(ModelError, match="takes no effort"):  # its facts list no efforts
        create_backend("anthropic/claude-3-5-haiku").check_params(GenerationParams(reasoning_effort="low"))


def test_sampling_goes_only_where_the_facts_say(facts_5x):
    hello = [{"role": "user", "content": "hello"}]
    haiku = create_backend("anthropic/claude-haiku-4-5")  # takes temperature, top_p, top_k
    assert haiku.request_kwargs(hello, GenerationParams(temperature=0.2))["extra_body"] == {"temperature": 0.2}
    both = haiku.request_kwargs(hello, GenerationParams(temperature=0.2, top_p=0.9))["extra_body"]
    assert both == {"temperature": 0.2, "top_p": 0.9}
    # thinking on: no temperature (refused with thinking); a top_p only from 0.95
    budget = GenerationParams(max_tokens=4096, thinking_budget=2048, top_p=0.97)
    assert haiku.request_kwargs(hello, budget)["extra_body"] == {
        "top_p": 0.97,
        "thinking": {"type": "enabled", "budget_tokens": 2048},
    }
    assert "top_p" not in haiku.request_kwargs(hello, budget.model_copy(update={"top_p": 0.9}))["extra_body"]
    opus5 = create_backend("anthropic/claude-opus-5")  # sampling [] in its facts
    assert opus5.request_kwargs(hello, GenerationParams(top_p=0.97))["extra_body"] == {
        "thinking": {"type": "adaptive", "display": "summarized"}
    }


# --------------------------------------------------------------------------- thinking budget checks
BAD_BUDGETS = [
    ("claude-3-haiku", GenerationParams(max_tokens=4096, thinking_budget=2048), "does not think"),
    ("claude-opus-5", GenerationParams(max_tokens=4096, thinking_budget=2048), "always thinks"),
    ("claude-budget-test", GenerationParams(max_tokens=4096, thinking_budget=1024), "at least 2048 tokens"),
    ("claude-sonnet-4-5", GenerationParams(max_tokens=2048, thinking_budget=2048), "must be below --max-tokens 2048"),
]


def test_a_thinking_budget_the_model_cannot_take_is_one_line_before_any_request(facts_5x, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    with FakeServer(lambda *a: (500, {}, {"error": "no request expected"})) as server:
        for model, params, said in BAD_BUDGETS:
            backend = create_backend(f"anthropic/{model}", BackendOptions(base_url=server.url, max_attempts=1))
            with pytest.raises(ModelError, match=said) as info:
                asyncio.run(backend.generate([{"role": "user", "content": "hi"}], params))
            assert "\n" not in str(info.value) and "--thinking-budget" in str(info.value)
            with pytest.raises(ModelError, match=said):  # the batch path builds its lines the same way
                AnthropicBatchAPI(backend).body([{"role": "user", "content": "hi"}], params, None, None)
    assert server.requests == []
    fine = create_backend("anthropic/claude-budget-test")
    fine.check_params(GenerationParams(max_tokens=4096, thinking_budget=2048))  # its minimum, below max_tokens


# --------------------------------------------------------------------------- loopback: the recorded bodies
def test_a_two_turn_tool_loop_sends_the_thinking_block_back_unchanged(facts_5x, monkeypatch):
    """AnthropicBackend against a fake answering with the recorded replies: the second request
    carries the first reply's thinking block, unchanged and first in its turn, and every request
    the pinned anthropic-version, whatever the installed SDK would send."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    (_, first), (second_request, second) = interactions("tool_with_thinking.yaml")
    replies = iter([first, second])

    def handler(method, path, headers, body):
        if path == "/v1/messages/count_tokens":
            return 200, {}, {"input_tokens": 12}
        return 200, {}, next(replies)

    schema = {"additionalProperties": False, "properties": {}, "type": "object"}
    tool = {"type": "function", "function": {"name": "get_user_country", "description": "", "parameters": schema}}
    params = GenerationParams(max_tokens=4096, thinking_budget=3000)
    with FakeServer(handler) as server:
        backend = create_backend("anthropic/claude-sonnet-4-0", BackendOptions(base_url=server.url))

        async def loop():
            try:
                messages = [{"role": "user", "content": "What is the largest city in the user country?"}]
                reply = await backend.generate(messages, params, [tool], "auto")
                messages += [reply.as_message()]
                for call in reply.tool_calls:
                    messages.append({"role": "tool", "tool_call_id": call.id, "content": "Mexico"})
                return reply, await backend.generate(messages, params, [tool], "auto")
            finally:
                await backend.close()

        reply, final = asyncio.run(loop())
        assert backend.count_tokens("hello") == 12
    assert reply.tool_calls[0].name == "get_user_country" and final.content.startswith("Based on the information")
    posts = [(headers, body) for method, path, headers, body in server.requests if path == "/v1/messages"]
    assert len(posts) == 2
    versions = {headers.get("anthropic-version") for _, _, headers, _ in server.requests}  # count_tokens too
    assert versions == {ANTHROPIC_VERSION} == {"2023-06-01"} and server.requests[-1][1] == "/v1/messages/count_tokens"
    body = posts[1][1]
    assert body["messages"][1]["content"][0] == first["content"][0]  # byte for byte what came
    assert [b["type"] for b in body["messages"][1]["content"]] == [
        b["type"] for b in second_request["messages"][1]["content"]
    ]
    assert body["thinking"] == second_request["thinking"] and not set(body) & set(SAMPLING)


def test_the_batch_path_sends_the_same_version_and_request(facts_5x, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    backend = create_backend("anthropic/claude-opus-5")
    provider = AnthropicBatchAPI(backend)
    assert provider.headers()["anthropic-version"] == ANTHROPIC_VERSION
    params, hello = GenerationParams(max_tokens=4096), [{"role": "user", "content": "What is 2+2?"}]
    body = provider.body(hello, params, None, None)
    assert body == wire_body(backend.request_kwargs(hello, params, prompt_cache=False))
    assert body["thinking"] == {"type": "adaptive", "display": "summarized"} and "extra_body" not in body


def test_the_version_is_recorded_and_keyed_only_when_not_the_neutral_one():
    backend = create_backend("anthropic/claude-sonnet-4-5")
    assert backend.describe()["anthropic_version"] == "2023-06-01"
    assert "anthropic_version" not in backend.cache_identity()  # the keys of earlier runs hold
    backend.api_version = "2026-10-21"
    assert backend.cache_identity()["anthropic_version"] == "2026-10-21"
    assert backend.default_headers() == {"anthropic-version": "2026-10-21"}


# --------------------------------------------------------------------------- models the table does not know
def test_an_unknown_model_has_no_guessed_context_and_says_so():
    backend = create_backend("anthropic/claude-opus-9")
    assert backend.context_size() is None and backend.max_context_size() is None
    info = backend.describe()
    assert info["facts"] is None and "not in harness/models/model_facts.yaml" in info["facts_note"]
    assert info["prompt_cache"]["min_tokens"] is None
    assert create_backend("anthropic/claude-opus-9", BackendOptions(context_size=50_000)).context_size() == 50_000
    known = create_backend("anthropic/claude-haiku-4-5-20251001")
    assert known.context_size() == 200_000 and known.describe()["facts"]["entry"] == "anthropic/claude-haiku-4-5"


def test_the_probe_finds_what_an_unknown_model_refuses_before_any_sample(monkeypatch):
    """One tiny request at start(); a top_p first asked for later is probed before its request, with
    the temperature (the recorded wording for refusing both: keep the temperature). Known models are
    never probed, and a sample's 400 never teaches anything."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")

    def handler(method, path, headers, body):
        if method == "GET":
            return 200, {}, {"data": []}
        if "temperature" in body and "top_p" in body:
            message = "`temperature` and `top_p` cannot both be specified for this model. Please use only one."
            return 400, {}, {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
        reply = {"type": "message", "role": "assistant", "model": body["model"], "stop_reason": "end_turn",
                 "content": [{"type": "text", "text": "OK"}],
                 "usage": {"input_tokens": 3, "output_tokens": 1}}  # fmt: skip
        return 200, {}, reply

    with FakeServer(handler) as server:
        backend = create_backend("anthropic/claude-new-x", BackendOptions(base_url=server.url))

        async def go():
            await backend.start()
            at_start = [b for _, p, _, b in server.requests if p == "/v1/messages"]
            try:
                await backend.generate([{"role": "user", "content": "hi"}], GenerationParams(top_p=0.9))
                await backend.generate([{"role": "user", "content": "hi"}], GenerationParams(top_p=0.9))
            finally:
                await backend.close()
            return at_start

        at_start = asyncio.run(go())
    assert at_start == [{"model": "claude-new-x", "max_tokens": 1, "temperature": 0.0,
                         "messages": [{"role": "user", "content": [{"type": "text", "text": "Say OK."}]}]}]  # fmt: skip
    posts = [b for _, p, _, b in server.requests if p == "/v1/messages"]
    assert [("temperature" in b, "top_p" in b, b["max_tokens"]) for b in posts] == [
        (True, False, 1),  # start(): the temperature, taken
        (True, True, 1),  # the first top_p: refused with the temperature
        (True, False, 512), (True, False, 512),  # the samples: the temperature only
    ]  # fmt: skip
    probe = backend.usage_facts()["probe"]
    assert probe["takes"] == ["temperature"] and probe["refuses"] == ["top_p"] and len(probe["requests"]) == 2


def test_refusal_wordings():
    assert refused_param("`temperature` is deprecated for this model.", {"temperature": 0.0}) == "temperature"
    assert refused_param("`top_p` is deprecated for this model.", {"temperature": 0.0, "top_p": 0.9}) == "top_p"
    both = "`temperature` and `top_p` cannot both be specified for this model. Please use only one."
    assert refused_param(both, {"temperature": 0.0, "top_p": 0.9}) == "top_p"
    assert refused_param("`temperature` is deprecated for this model.", {"top_p": 0.9}) is None  # not what was sent
    assert refused_param("prompt is too long: 300000 tokens > 200000 maximum", {"temperature": 0.0}) is None


def test_a_model_that_takes_a_temperature_gets_it_as_recorded():
    """claude-haiku-4-5 was recorded taking temperature 0.2 (and top_k 40, which the harness has no
    option for): our request for it is the recorded one without the top_k."""
    ((request, reply),) = interactions("sampling_settings_reach_the_wire.yaml")
    backend = create_backend("anthropic/claude-haiku-4-5", BackendOptions(prompt_cache=False))
    ours = wire_body(
        backend.request_kwargs(
            [{"role": "user", "content": "hello"}], GenerationParams(temperature=0.2, max_tokens=4096)
        )
    )
    assert ours == {k: v for k, v in sent(request).items() if k != "top_k"}
    assert from_anthropic_message(reply).content == "Hello! \U0001f44b How can I help you today?"
