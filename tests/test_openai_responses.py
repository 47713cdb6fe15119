"""openai/ on today's models: the Responses API for reasoning models, checked against real traffic
recorded by pydantic-ai (tests/fixtures/recorded/openai/, see its README) and the openai SDK's own
request types; the chat-completions reasoning fields; the pre-flight probe of a model the facts table
does not know; OPENAI_CUSTOM_HEADERS; --batch lines for the Responses API."""

from __future__ import annotations

import asyncio
import copy
import json

import pytest
from fake_openai import FakeServer, recorded, recorded_responses_model

from harness.errors import ModelError, TransientModelError
from harness.models import BackendOptions, GenerationParams, create_backend
from harness.models.batch_api import OpenAIBatchAPI
from harness.models.http_reply import aiohttp_installed
from harness.models.openai_api import custom_headers, refused_parameter
from harness.models.openai_compat import response_from_completion
from harness.models.openai_responses import (
    response_from_responses,
    responses_request,
    to_responses_tool_choice,
)
from harness.redact import redact

TRANSPORTS = ["httpx", pytest.param("aiohttp", marks=pytest.mark.skipif(not aiohttp_installed(), reason="no aiohttp"))]
THINKING = "test_openai_responses_thinking_with_tool_calls"  # gpt-5, effort low, instructions, a tool loop
STATUS_NONE = "test_openai_responses_requires_function_call_status_none"  # gpt-5, no effort sent, a tool loop


def chat_tool(recorded_tool: dict) -> dict:
    """The chat-completions tool our agents would pass for a recorded Responses tool."""
    function = {"name": recorded_tool["name"], "parameters": recorded_tool["parameters"]}
    if recorded_tool.get("description") is not None:
        function["description"] = recorded_tool["description"]
    if recorded_tool.get("strict"):
        function["strict"] = True
    return {"type": "function", "function": function}


def without_null_description(tool: dict) -> dict:
    return {k: v for k, v in tool.items() if not (k == "description" and v is None)}


def transcript(interactions: list[dict], tool_output: str) -> tuple[list, list, list]:
    """(first turn's messages, tools, second turn's messages) of a recorded two-turn tool loop, as
    the harness's agents hold them: the reply parsed by us, then the tool's result."""
    first = interactions[0]["request"]["parsed_body"]
    messages = []
    if first.get("instructions"):
        messages.append({"role": "system", "content": first["instructions"]})
    messages += [{"role": m["role"], "content": m["content"]} for m in first["input"]]
    tools = [chat_tool(t) for t in first["tools"]]
    reply = response_from_responses(interactions[0]["response"]["parsed_body"])
    call = reply.tool_calls[0]
    turn2 = messages + [reply.as_message(), {"role": "tool", "tool_call_id": call.id, "content": tool_output}]
    return messages, tools, turn2


# --------------------------------------------------------------------------- replies, replayed
def test_recorded_gpt5_tool_loop_replies_parse_as_the_recording_says():
    first, second = recorded(THINKING)
    out = first["response"]["parsed_body"]
    reply = response_from_responses(out)
    reasoning, call = out["output"]
    assert reply.tool_calls[0].id == call["call_id"] and reply.tool_calls[0].name == "update_plan"
    assert json.loads(reply.tool_calls[0].arguments) == json.loads(call["arguments"])
    assert reply.content is None and reply.finish_reason == "tool_calls" and reply.refusal is None
    # the reasoning: its summary text kept as reasoning, the items kept whole to go back
    assert reply.reasoning == "\n\n".join(part["text"] for part in reasoning["summary"])
    assert reply.reasoning_items == [reasoning, call]
    assert reply.reasoning_items[0]["encrypted_content"] == reasoning["encrypted_content"]
    usage = out["usage"]
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (124, 1926) == (
        usage["input_tokens"], usage["output_tokens"]
    )  # fmt: skip
    assert reply.usage.reasoning_tokens == 1792 == usage["output_tokens_details"]["reasoning_tokens"]
    assert reply.usage.cache_read_tokens == 0
    assert reply.model == "gpt-5-2025-08-07"

    final = response_from_responses(second["response"]["parsed_body"])
    assert final.content == second["response"]["parsed_body"]["output"][0]["content"][0]["text"]
    assert final.content.startswith("Softly old fountains") and final.finish_reason == "stop"
    assert final.tool_calls == [] and final.reasoning_items == [] and final.reasoning is None
    # the second request's prompt came from the prompt cache: 2048 of its 2087 tokens
    assert (final.usage.prompt_tokens, final.usage.cache_read_tokens, final.usage.reasoning_tokens) == (2087, 2048, 0)


def test_recorded_reply_without_a_summary_keeps_its_reasoning_item_and_no_text():
    first, second = recorded(STATUS_NONE)
    reply = response_from_responses(first["response"]["parsed_body"])
    assert reply.reasoning is None and reply.reasoning_items[0]["type"] == "reasoning"
    assert reply.usage.reasoning_tokens == 128 and reply.usage.completion_tokens == 148
    assert response_from_responses(second["response"]["parsed_body"]).content == "42"


@pytest.mark.parametrize(
    "name, parse", [("test_openai_responses_prompt_cache_e2e", response_from_responses),
                    ("test_openai_chat_prompt_cache_e2e", response_from_completion)]
)  # fmt: skip
def test_recorded_prompt_cache_writes_then_reads(name, parse):
    """gpt-5.6-sol asked twice with the same 4,020-token prompt: written to the cache, then read."""
    write, read = (parse(i["response"]["parsed_body"]) for i in recorded(name))
    assert (write.usage.prompt_tokens, write.usage.cache_write_tokens, write.usage.cache_read_tokens) == (4020, 4012, 0)
    assert (read.usage.prompt_tokens, read.usage.cache_write_tokens, read.usage.cache_read_tokens) == (4020, 0, 4012)
    assert write.content == read.content == "OK"


# --------------------------------------------------------------------------- requests, compared
def test_our_requests_for_the_recorded_conversation_match_the_real_ones():
    """The same two-turn conversation built by us: the second request carries the first reply's
    reasoning item unchanged and the function call with its item id, item for item as the real one."""
    interactions = recorded(THINKING)
    real1, real2 = (i["request"]["parsed_body"] for i in interactions)
    messages, tools, turn2 = transcript(interactions, "plan updated")
    params = GenerationParams(max_tokens=4000, reasoning_effort="low")
    ours1 = responses_request("gpt-5", messages, params, tools, "auto", sampling=())
    ours2 = responses_request("gpt-5", turn2, params, tools, "auto", sampling=())
    for ours, real in ((ours1, real1), (ours2, real2)):
        assert ours["input"] == real["input"]
        assert ours["instructions"] == real["instructions"] and ours["model"] == real["model"]
        assert ours["tools"] == [without_null_description(t) for t in real["tools"]]
        assert ours["tool_choice"] == real["tool_choice"] == "auto"
        assert ours["include"] == real["include"] == ["reasoning.encrypted_content"]
        assert ours["reasoning"] == {"effort": real["reasoning"]["effort"]}  # no summary asked for
        for absent in ("temperature", "top_p", "seed", "messages", "max_tokens", "max_completion_tokens"):
            assert absent not in ours and absent not in real
        # ours only: nothing kept on OpenAI's side, and the answer budget
        assert ours["store"] is False and ours["max_output_tokens"] == 4000
    assert ours2["input"][1] is not interactions[0]["response"]["parsed_body"]["output"][0]  # a copy, equal


def test_no_reasoning_effort_sends_no_reasoning_field_as_recorded():
    interactions = recorded(STATUS_NONE)
    real1, real2 = (i["request"]["parsed_body"] for i in interactions)
    messages, tools, turn2 = transcript(interactions, "42")
    ours1 = responses_request("gpt-5", messages, GenerationParams(), tools, "auto")
    ours2 = responses_request("gpt-5", turn2, GenerationParams(), tools, "auto")
    assert "reasoning" not in ours1 and "reasoning" not in real1 and "instructions" not in ours1
    assert ours1["input"] == real1["input"] and ours1["tools"] == [without_null_description(t) for t in real1["tools"]]
    assert ours1["tools"][0]["strict"] is False  # said, not left to the API's default
    # pydantic-ai sent this model's function call with status null (a vLLM workaround); ours has none
    real_input = [{k: v for k, v in item.items() if not (k == "status" and v is None)} for item in real2["input"]]
    assert ours2["input"] == real_input


def test_request_keys_and_items_are_the_sdk_request_types():
    """Every key we send is a field of the openai SDK's ``ResponseCreateParams`` (openai 3.57.0,
    openai/types/responses/response_create_params.py) and every item's keys are those of its
    TypedDict, their required keys all present."""
    from openai.types.responses import (
        easy_input_message_param,
        function_tool_param,
        response_create_params,
        response_function_tool_call_param,
        response_input_param,
        response_reasoning_item_param,
        tool_choice_function_param,
    )
    from openai.types.shared_params import reasoning

    def keys(cls) -> tuple[set[str], set[str]]:
        return set(cls.__required_keys__) | set(cls.__optional_keys__), set(cls.__required_keys__)

    def fits(item: dict, cls) -> None:
        every, required = keys(cls)
        assert set(item) <= every, (cls.__name__, set(item) - every)
        assert required <= set(item), (cls.__name__, required - set(item))

    interactions = recorded(THINKING)
    messages, tools, turn2 = transcript(interactions, "plan updated")
    turn2 = [{"role": "system", "content": "later instructions"} if i == 99 else m for i, m in enumerate(turn2)]
    body = responses_request(
        "gpt-5", turn2, GenerationParams(reasoning_effort="high"), tools, "auto", sampling=("temperature", "top_p")
    )
    assert set(body) <= keys(response_create_params.ResponseCreateParamsNonStreaming)[0]
    fits(body["reasoning"], reasoning.Reasoning)
    fits(body["tools"][0], function_tool_param.FunctionToolParam)
    kinds = {
        "reasoning": response_reasoning_item_param.ResponseReasoningItemParam,
        "function_call": response_function_tool_call_param.ResponseFunctionToolCallParam,
        "function_call_output": response_input_param.FunctionCallOutput,
    }
    seen = set()
    for item in body["input"]:
        kind = item.get("type", "message")
        seen.add(kind)
        fits(item, kinds.get(kind, easy_input_message_param.EasyInputMessageParam))
    assert seen == {"message", "reasoning", "function_call", "function_call_output"}
    named = to_responses_tool_choice({"type": "function", "function": {"name": "update_plan"}})
    assert named == {"type": "function", "name": "update_plan"}
    fits(named, tool_choice_function_param.ToolChoiceFunctionParam)


def test_a_later_system_message_and_text_parts_keep_their_place():
    messages = [
        {"role": "system", "content": "A."},
        {"role": "developer", "content": "B."},
        {"role": "user", "content": [{"type": "text", "text": "Q?"}]},
        {"role": "assistant", "content": "Let me look.", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "search", "arguments": '{"q": "x"}'}}
        ]},
        {"role": "tool", "tool_call_id": "call_1", "content": [{"type": "text", "text": "found"}]},
        {"role": "system", "content": "Answer now."},
    ]  # fmt: skip
    body = responses_request("m", messages, GenerationParams(), None, None)
    assert body["instructions"] == "A.\n\nB."
    assert body["input"] == [
        {"role": "user", "content": [{"type": "input_text", "text": "Q?"}]},
        {"role": "assistant", "content": "Let me look."},
        {"type": "function_call", "call_id": "call_1", "name": "search", "arguments": '{"q": "x"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "found"},
        {"role": "system", "content": "Answer now."},
    ]
    assert "tools" not in body and "tool_choice" not in body


# --------------------------------------------------------------------------- documented shapes
def sdk_response(output: list[dict], status: str = "completed", incomplete: dict | None = None) -> dict:
    """A reply built to the SDK's ``Response`` model (openai/types/responses/response.py) and
    checked against it: no recording of these cases exists in the kept cassettes."""
    from openai.types.responses import Response

    reply = {
        "id": "resp_1", "object": "response", "created_at": 0, "model": "gpt-5-2025-08-07", "status": status,
        "incomplete_details": incomplete, "output": output, "parallel_tool_calls": True, "tool_choice": "auto",
        "tools": [], "error": None, "instructions": None, "metadata": {}, "temperature": 1.0, "top_p": 1.0,
        "usage": {"input_tokens": 20, "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                  "output_tokens": 16,
                  "output_tokens_details": {"reasoning_tokens": 16}, "total_tokens": 36},
    }  # fmt: skip
    Response.model_validate(reply)
    return reply


def test_an_answer_cut_at_max_output_tokens_is_length_and_a_refusal_is_kept():
    reasoning = {"id": "rs_1", "type": "reasoning", "summary": [], "encrypted_content": "gAAA"}
    cut = response_from_responses(sdk_response([reasoning], "incomplete", {"reason": "max_output_tokens"}))
    assert cut.finish_reason == "length" and cut.content is None and cut.usage.reasoning_tokens == 16
    refusal = {"type": "refusal", "refusal": "I can't help with that."}
    message = {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed", "content": [refusal]}
    declined = response_from_responses(sdk_response([message]))
    assert declined.refusal == "I can't help with that." and declined.content is None
    assert declined.finish_reason == "stop" and declined.as_message()["refusal"] == declined.refusal


@pytest.mark.parametrize(
    "change, field",
    [
        (lambda r: r.update(output={"a": 1}), "reply.output is an object, not a list"),
        (lambda r: r.pop("output"), "reply.output is missing"),
        (lambda r: r["output"][1].pop("name"), "output[1].name is missing"),
        (lambda r: r["output"].append("text"), "output[2] is a string, not an object"),
        (lambda r: r["usage"].update(input_tokens="20"), "usage.input_tokens is a string"),
        (lambda r: r["usage"]["output_tokens_details"].update(reasoning_tokens=-1), "reasoning_tokens is -1"),
        (lambda r: r.update(status="failed", error={"message": "server exploded"}), "response failed: "),
        (lambda r: r.update(status="in_progress"), "response is in_progress"),
    ],
)
def test_a_malformed_reply_is_transient_naming_the_field(change, field):
    reply = copy.deepcopy(recorded(STATUS_NONE)[0]["response"]["parsed_body"])
    change(reply)
    with pytest.raises(TransientModelError, match=field.replace("(", r"\(").replace("[", r"\[")):
        response_from_responses(reply, "OpenAI API at X")


# --------------------------------------------------------------------------- chat completions
def test_recorded_chat_completion_of_a_reasoning_model():
    (interaction,) = recorded("test_max_completion_tokens_o3-mini")
    real, out = interaction["request"]["parsed_body"], interaction["response"]["parsed_body"]
    reply = response_from_completion(out)
    assert reply.content == out["choices"][0]["message"]["content"] and reply.refusal is None
    assert (reply.usage.completion_tokens, reply.usage.reasoning_tokens) == (87, 64)
    # our chat request for it (a compatible server: chat completions) has the recorded fields
    backend = create_backend("openai/o3-mini", BackendOptions(base_url="http://127.0.0.1:9/v1"))
    ours = backend.request_kwargs(real["messages"], GenerationParams(max_tokens=100), None, None)
    assert ours["messages"] == real["messages"] and ours["max_completion_tokens"] == real["max_completion_tokens"]
    for absent in ("max_tokens", "temperature", "top_p", "reasoning_effort"):
        assert absent not in ours and absent not in real
    effort = backend.request_kwargs(real["messages"], GenerationParams(reasoning_effort="low"), None, None)
    assert effort["reasoning_effort"] == "low"
    # a refusal (the SDK's ChatCompletionMessage.refusal) is kept, content stays empty
    declined = copy.deepcopy(out)
    declined["choices"][0]["message"].update(content=None, refusal="I can't help with that.")
    assert response_from_completion(declined).refusal == "I can't help with that."


def test_the_api_each_model_is_sent_to():
    tool = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    on = {
        name: create_backend(f"openai/{name}") for name in ("gpt-5", "gpt-4o", "o1-mini", "gpt-5-chat-latest", "gpt-9")
    }
    assert on["gpt-5"].api_for(GenerationParams(), None) == "responses"
    assert on["gpt-4o"].api_for(GenerationParams(), tool) == "chat"
    assert on["o1-mini"].api_for(GenerationParams(), None) == "chat"  # the table says api: chat
    assert on["gpt-5-chat-latest"].api_for(GenerationParams(), None) == "chat"
    assert on["gpt-9"].api_for(GenerationParams(), None) == "responses"  # unknown: probed, Responses first
    behind = create_backend("openai/gpt-5", BackendOptions(base_url="http://127.0.0.1:9/v1"))
    assert behind.api_for(GenerationParams(), tool) == "chat"  # a compatible server: chat completions
    assert on["gpt-5"].identity_facts() == {"api": "responses"} and on["gpt-4o"].identity_facts() == {}
    info = on["gpt-5"].describe()
    assert info["api"] == "responses" and info["facts"]["entry"] == "openai/gpt-5"
    assert info["facts"]["default_reasoning_effort"] == "medium" and info["facts"]["retrieved"]
    assert info["context_size"] == 272_000


def test_tools_on_chat_while_reasoning_go_to_the_responses_api(tmp_path, monkeypatch):
    table = tmp_path / "facts.yaml"
    table.write_text(
        "models:\n  openai/gpt-x: {reasoning: true, api: chat, sampling: [],"
        " output_tokens_param: max_completion_tokens,"
        " tools_with_reasoning_on_chat: false, default_reasoning_effort: none, source: test, retrieved: today}\n"
    )
    monkeypatch.setenv("HARNESS_MODEL_FACTS", str(table))
    backend = create_backend("openai/gpt-x")
    tool = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    assert backend.api_for(GenerationParams(), tool) == "chat"  # it reasons at effort none: tools on chat
    assert backend.api_for(GenerationParams(reasoning_effort="low"), tool) == "responses"
    assert backend.api_for(GenerationParams(reasoning_effort="low"), None) == "chat"
    assert backend.batch_api() == "responses"  # one batch, one endpoint: the one every request can use


# --------------------------------------------------------------------------- the pre-flight probe
# 400 bodies as OpenAI sends them (no recording of these in the kept cassettes): quoted from
# OpenHands/software-agent-sdk issue 1837 (gpt-5.2) and diffbot/code-gpt-docs issue 445 (gpt-5)
TEMPERATURE_REFUSED = {
    "message": "Unsupported parameter: 'temperature' is not supported with this model.",
    "type": "invalid_request_error", "param": "temperature", "code": None,
}  # fmt: skip
TEMPERATURE_VALUE_REFUSED = {
    "message": "Unsupported value: 'temperature' does not support 0.5 with this model. "
    "Only the default (1) value is supported.",
    "type": "invalid_request_error", "param": "temperature", "code": "unsupported_value",
}  # fmt: skip
TOP_P_REFUSED = {
    "message": "Unsupported parameter: 'top_p' is not supported with this model.",
    "type": "invalid_request_error", "param": "top_p", "code": None,
}  # fmt: skip


def test_refused_parameters_are_read_from_the_real_wordings_only():
    body = {"temperature": 0.0, "top_p": 1.0, "include": ["reasoning.encrypted_content"]}
    assert refused_parameter(TEMPERATURE_REFUSED, body) == "temperature"
    assert refused_parameter(TEMPERATURE_VALUE_REFUSED, body) == "temperature"
    assert refused_parameter({**TOP_P_REFUSED, "param": None}, body) == "top_p"  # named in the message only
    assert refused_parameter(TEMPERATURE_REFUSED, {"top_p": 1.0}) is None  # not sent: nothing to drop
    # recorded 400s that are no refusal of a parameter we may drop: a value out of range ...
    (out_of_range,) = recorded("test_openai_responses_model_http_error")
    assert out_of_range["response"]["parsed_body"]["error"]["param"] == "temperature"
    assert refused_parameter(out_of_range["response"]["parsed_body"]["error"], body) is None
    # ... and an "Unsupported value" naming a message's role
    (role,) = recorded("test_openai_o1_mini_system_role_system")
    assert refused_parameter(role["response"]["parsed_body"]["error"], {**body, "messages": []}) is None


def run_backend(backend, *calls):
    async def go():
        try:
            await backend.start()
            return [await backend.generate(*call) for call in calls]
        finally:
            await backend.close()

    return asyncio.run(go())


@pytest.fixture
def openai_at(monkeypatch):
    """Point OpenAI's own endpoint (not --base-url) at a loopback server."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-0123456789abcdef")

    def point(server):
        monkeypatch.setattr("harness.models.openai_api.DEFAULT_BASE_URL", server.url + "/v1")

    return point


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_an_unknown_model_is_probed_once_and_runs_without_what_it_refused(openai_at, transport):
    answer = recorded(STATUS_NONE)[1]
    hello = [{"role": "user", "content": "Say OK"}]
    refusals = {"temperature": TEMPERATURE_REFUSED, "top_p": TOP_P_REFUSED}

    def handler(method, path, headers, body):
        if method == "POST" and body.get("input") == hello:  # the probe (and the sample asking the same)
            for param, error in refusals.items():
                if param in body:
                    return 400, {}, {"error": error}
            return 200, {}, answer["response"]["parsed_body"]
        return recorded_responses_model([], refusals)(method, path, headers, body)

    with FakeServer(handler) as server:
        openai_at(server)
        backend = create_backend("openai/gpt-9", BackendOptions(http_client=transport, retry_max_wait=0.01))
        (reply,) = run_backend(backend, (hello, GenerationParams()))
    posts = [r for r in server.requests if r[0] == "POST"]
    assert [r[1] for r in posts] == ["/v1/responses"] * 4
    assert "temperature" in posts[0][3] and "temperature" not in posts[1][3] and "top_p" in posts[1][3]
    assert "temperature" not in posts[3][3] and "top_p" not in posts[3][3]  # the sample: nothing refused sent
    assert posts[3][3]["include"] == ["reasoning.encrypted_content"] and posts[3][3]["store"] is False
    assert reply.content == "42"
    info = backend.describe()
    assert info["facts"] is None and info["probe"] and info["api"] == "responses"
    assert info["probe"]["refused"] == ["temperature", "top_p"] and info["probe"]["endpoint"] == "/v1/responses"


def test_the_probe_sends_what_the_run_will_send(openai_at):
    # the runner hands the run's knobs over before start(): the probe asks with the run's effort
    answer = recorded(STATUS_NONE)[1]

    def handler(method, path, headers, body):
        return 200, {}, answer["response"]["parsed_body"]

    with FakeServer(handler) as server:
        openai_at(server)
        backend = create_backend("openai/gpt-9", BackendOptions(retry_max_wait=0.01))
        backend.run_params = GenerationParams(reasoning_effort="low", temperature=0.7)
        asyncio.run(backend.start())
        asyncio.run(backend.close())
    (probe,) = [body for method, _, _, body in server.requests if method == "POST"]
    assert probe["reasoning"] == {"effort": "low"} and probe["temperature"] == 0.7
    assert probe["max_output_tokens"] == 16


def test_a_sample_400_is_never_read_as_a_refusal(openai_at):
    refusals = {"temperature": TEMPERATURE_REFUSED}
    with FakeServer(recorded_responses_model(recorded(STATUS_NONE), refusals)) as server:
        openai_at(server)
        # a known model sent to the Responses API with a table that (wrongly) says it takes temperature
        backend = create_backend("openai/gpt-5", BackendOptions(max_attempts=3))
        backend.facts = backend.facts.model_copy(update={"sampling": ["temperature"]})
        with pytest.raises(ModelError, match="rejected the request \\(400\\).*Unsupported parameter: 'temperature'"):
            run_backend(backend, ([{"role": "user", "content": "hi"}], GenerationParams()))
    assert len([r for r in server.requests if r[0] == "POST"]) == 1  # no probe (known), no retry, nothing dropped


def test_a_model_the_responses_api_refuses_is_probed_on_chat_completions(openai_at):
    def handler(method, path, headers, body):
        if method == "GET":
            return 200, {}, {"data": []}
        if path == "/v1/responses":  # a 400 that names no parameter to drop (this wording is ours)
            said = "The model gpt-old is not supported with the Responses API."
            error = {"message": said, "type": "invalid_request_error", "param": "model", "code": None}
            return 400, {}, {"error": error}
        message = {"role": "assistant", "content": "OK", "refusal": None}
        usage = {"prompt_tokens": 9, "completion_tokens": 1, "total_tokens": 10}
        choice = {"index": 0, "message": message, "finish_reason": "stop"}
        reply = {"id": "c", "object": "chat.completion", "created": 0, "model": body["model"], "choices": [choice]}
        return 200, {}, {**reply, "usage": usage}

    with FakeServer(handler) as server:
        openai_at(server)
        backend = create_backend("openai/gpt-old")
        (reply,) = run_backend(backend, ([{"role": "user", "content": "hi"}], GenerationParams(max_tokens=20)))
    assert [r[1] for r in server.requests if r[0] == "POST"] == [
        "/v1/responses",
        "/v1/chat/completions",
        "/v1/chat/completions",
    ]
    sample = server.requests[-1][3]
    assert sample["max_completion_tokens"] == 20 and "max_tokens" not in sample and reply.content == "OK"
    assert backend.describe()["probe"]["api"] == "chat" and backend.describe()["api"] == "chat"


def test_a_model_that_does_not_exist_stops_the_run_at_pre_flight_in_one_line(openai_at):
    said = "The model `gpt-nope` does not exist or you do not have access to it."
    error = {"message": said, "type": "invalid_request_error", "param": None, "code": "model_not_found"}

    def handler(method, path, headers, body):
        return (200, {}, {"data": []}) if method == "GET" else (404, {}, {"error": error})

    with FakeServer(handler) as server:
        openai_at(server)
        with pytest.raises(ModelError) as info:
            run_backend(create_backend("openai/gpt-nope"))
    text = str(info.value)
    assert "\n" not in text and "gpt-nope is not in the model facts table" in text and "does not exist" in text


# --------------------------------------------------------------------------- end to end
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_two_turn_tool_loop_carries_the_reasoning_item_unchanged(openai_at, monkeypatch, transport):
    """gpt-5 on the Responses API against a loopback server that answers only the recorded real
    requests with their recorded replies: the second request must carry the first reply's
    reasoning item exactly, or it gets no answer. OPENAI_CUSTOM_HEADERS goes with each request."""
    monkeypatch.setenv("OPENAI_CUSTOM_HEADERS", "X-Gateway-Route: eval\nX-Gateway-Key: gw-secret-0123456789")
    interactions = recorded(THINKING)
    messages, tools, _ = transcript(interactions, "plan updated")
    params = GenerationParams(max_tokens=4000, reasoning_effort="low")
    with FakeServer(recorded_responses_model(interactions)) as server:
        openai_at(server)
        backend = create_backend("openai/gpt-5", BackendOptions(http_client=transport))

        async def loop():
            await backend.start()
            try:
                first = await backend.generate(messages, params, tools, "auto")
                turn2 = messages + [
                    first.as_message(),
                    {"role": "tool", "tool_call_id": first.tool_calls[0].id, "content": "plan updated"},
                ]
                return first, await backend.generate(turn2, params, tools, "auto")
            finally:
                await backend.close()

        first, second = asyncio.run(loop())
    posts = [r for r in server.requests if r[0] == "POST"]
    assert [r[1] for r in posts] == ["/v1/responses", "/v1/responses"]  # a known model: no probe
    assert posts[1][3]["input"] == interactions[1]["request"]["parsed_body"]["input"]
    assert second.content.startswith("Softly old fountains") and second.usage.cache_read_tokens == 2048
    assert first.usage.reasoning_tokens == 1792 and first.finish_reason == "tool_calls"
    for _, _, headers, _ in posts:
        assert headers["x-gateway-route"] == "eval" and headers["x-gateway-key"] == "gw-secret-0123456789"
        assert headers["authorization"] == "Bearer sk-test-0123456789abcdef"


def test_custom_headers_are_parsed_as_the_sdk_parses_them_and_masked(monkeypatch):
    monkeypatch.setenv(
        "OPENAI_CUSTOM_HEADERS", "X-A: 1\n  X-Route :  eu-west \nno colon here\nX-Token: tok:with:colons-123"
    )
    assert custom_headers() == {"X-A": "1", "X-Route": "eu-west", "X-Token": "tok:with:colons-123"}
    assert "tok:with:colons-123" not in redact("sent X-Token: tok:with:colons-123")
    assert redact("count 1") == "count 1"  # a short value is no credential: not masked everywhere
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-0123456789abcdef")
    monkeypatch.setenv("OPENAI_CUSTOM_HEADERS", "Authorization: Bearer gateway-token-abcdef")
    headers = create_backend("openai/gpt-5").request_headers()
    assert headers["Authorization"] == "Bearer gateway-token-abcdef"  # over the key, as the SDK sends it


# --------------------------------------------------------------------------- --batch
def test_batch_lines_of_a_responses_model_and_its_results(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-0123456789abcdef")
    monkeypatch.setenv("OPENAI_CUSTOM_HEADERS", "X-Route: batch")
    interactions = recorded(THINKING)
    messages, tools, turn2 = transcript(interactions, "plan updated")
    provider = OpenAIBatchAPI(create_backend("openai/gpt-5"))
    assert provider.url_path == "/v1/responses" and provider.headers()["X-Route"] == "batch"
    body = provider.body(turn2, GenerationParams(max_tokens=4000, reasoning_effort="low"), tools, "auto")
    line = provider.line("r1", body)
    assert (
        line["url"] == "/v1/responses" and line["body"]["input"] == interactions[1]["request"]["parsed_body"]["input"]
    )
    reply = provider.parse(interactions[1]["response"]["parsed_body"], "batch")
    assert reply.content.startswith("Softly") and reply.usage.cache_read_tokens == 2048
    chat = OpenAIBatchAPI(create_backend("openai/gpt-4o"))
    assert chat.url_path == "/v1/chat/completions"
    assert "messages" in chat.body(messages, GenerationParams(), None, None)


@pytest.mark.slow
def test_a_batch_run_of_a_responses_model_sends_responses_lines(openai_at, tmp_path):
    from fake_batch import FakeBatchServer, answer_for

    import harness

    prices = tmp_path / "prices.yaml"
    prices.write_text(
        "source: test\nretrieved: today\nbatch_discount: {openai: 0.5}\n"
        "models:\n  openai/gpt-5: {input: 1, output: 2}\n"
    )
    with FakeBatchServer(finish_after=2) as fake:
        openai_at(fake)
        result = harness.run(
            model="openai/gpt-5", batch=True, limit=3, out=str(tmp_path / "run"), cache=False, show_progress=False,
            max_tokens=64, retry_max_wait=0.05, batch_window=0.2, batch_poll_interval=0.05, price_table=str(prices),
        )  # fmt: skip
        (batch,) = fake.batches.values()
    assert fake.chat_calls == 0 and batch["endpoint"] == "/v1/responses"
    assert all(x["url"] == "/v1/responses" and x["body"]["store"] is False for x in batch["lines"])
    assert all("messages" not in x["body"] and x["body"]["max_output_tokens"] == 64 for x in batch["lines"])
    assert result.counts.finished == 3 and result.model.model_dump()["api"] == "responses"
    for row in (json.loads(x) for x in (tmp_path / "run" / "samples.jsonl").read_text().splitlines()):
        assert row["answer"] == answer_for(row["messages"][-2]["content"])
