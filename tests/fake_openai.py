"""A scripted model behind a local server speaking the OpenAI protocol, or Anthropic's (FakeServer
from test_api_backends), for tests that need tool calls and exact token counts without a real model;
and OpenAI's Responses API answering with real recorded replies (``recorded_responses_model``)."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import yaml
from test_api_backends import FakeServer

RECORDED = Path(__file__).resolve().parent / "fixtures" / "recorded" / "openai"

__all__ = [
    "RECORDED",
    "FakeServer",
    "anthropic_search_model",
    "recorded",
    "recorded_responses_model",
    "scripted_search_model",
]


@functools.lru_cache(maxsize=None)
def _cassette(name: str) -> str:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: 10x faster on the long ones
    return json.dumps(yaml.load((RECORDED / f"{name}.yaml").read_text(), Loader=loader)["interactions"])


def recorded(name: str) -> list[dict]:
    """The interactions of a recorded cassette (tests/fixtures/recorded/openai/NAME.yaml), a fresh copy."""
    return json.loads(_cassette(name))


def recorded_responses_model(interactions: list[dict], refusals: dict[str, dict] | None = None):
    """A handler for OpenAI's Responses API that answers ``POST /v1/responses`` with the recorded
    real reply whose recorded request carried the same ``input`` and ``instructions``: a request
    that differs from the real one gets a 400 saying so (so a test sees the exact items sent).
    ``refusals``: parameter -> the error object of a 400 answered while the request carries it
    (a model that refuses ``temperature``); ``GET`` (start's reachability check) answers a list."""

    def handler(method, path, headers, body):
        if method == "GET":
            return 200, {}, {"object": "list", "data": []}
        if not path.endswith("/responses"):
            return 404, {}, {"error": {"message": f"no route {path}", "type": "invalid_request_error"}}
        for param, error in (refusals or {}).items():
            if param in body:
                return 400, {}, {"error": error}
        for interaction in interactions:
            sent = interaction["request"]["parsed_body"]
            if sent.get("input") == body.get("input") and sent.get("instructions") == body.get("instructions"):
                return interaction["response"]["status"]["code"], {}, interaction["response"]["parsed_body"]
        error = {"message": "no recorded reply for this input", "type": "invalid_request_error", "param": "input"}
        return 400, {}, {"error": error}

    return handler


def scripted_search_model(script: dict[str, tuple[str, str]], usage: tuple[int, int] = (120, 7), cached: int = 0):
    """A handler: for the question containing KEY, the first turn calls ``search`` with QUERY and the
    turn after a tool result answers ANSWER (``script = {KEY: (QUERY, ANSWER)}``); without tools it
    answers at once. Every reply reports ``usage`` (prompt, completion tokens), ``cached`` of the
    prompt tokens read from the prompt cache (``prompt_tokens_details.cached_tokens``)."""

    def handler(method, path, headers, body):
        if not path.endswith("/chat/completions"):
            return 200, {}, {"object": "list", "data": []}
        first = next(m["content"] for m in body["messages"] if m["role"] == "user")
        key = next((k for k in script if k in first), None)
        query, answer = script.get(key, ("Nothing", "I do not know"))
        message: dict = {"role": "assistant", "content": answer}
        finish = "stop"
        if body.get("tools") and not any(m["role"] == "tool" for m in body["messages"]):
            call = {
                "id": "call_1",
                "type": "function",
                "function": {"name": "search", "arguments": json.dumps({"query": query})},
            }
            message, finish = {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"
        payload = {
            "id": "c",
            "object": "chat.completion",
            "created": 0,
            "model": body["model"],
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {
                "prompt_tokens": usage[0],
                "completion_tokens": usage[1],
                "total_tokens": sum(usage),
                "prompt_tokens_details": {"cached_tokens": cached},
            },
        }
        return 200, {}, payload

    return handler


def anthropic_search_model(script: dict[str, tuple[str, str]], usage: tuple[int, int, int, int] = (120, 7, 0, 0)):
    """``scripted_search_model`` in Anthropic's Messages protocol (``/v1/messages``; token counting
    answers 10). ``usage``: prompt tokens, completion tokens, and of the prompt those read from and
    written to the prompt cache (``cache_read_input_tokens``, ``cache_creation_input_tokens``)."""

    def handler(method, path, headers, body):
        if path.endswith("/count_tokens"):
            return 200, {}, {"input_tokens": 10}
        if not path.endswith("/messages"):
            return 200, {}, {"data": []}
        blocks = [b for m in body["messages"] for b in (m["content"] if isinstance(m["content"], list) else [])]
        first = body["messages"][0]["content"]
        first = first if isinstance(first, str) else first[0]["text"]
        key = next((k for k in script if k in first), None)
        query, answer = script.get(key, ("Nothing", "I do not know"))
        content: list = [{"type": "text", "text": answer}]
        stop = "end_turn"
        if body.get("tools") and not any(b.get("type") == "tool_result" for b in blocks):
            content = [{"type": "tool_use", "id": "toolu_1", "name": "search", "input": {"query": query}}]
            stop = "tool_use"
        prompt, completion, read, write = usage
        payload = {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "content": content,
            "stop_reason": stop,
            "usage": {
                "input_tokens": prompt - read - write,
                "cache_read_input_tokens": read,
                "cache_creation_input_tokens": write,
                "output_tokens": completion,
            },
        }
        return 200, {}, payload

    return handler
