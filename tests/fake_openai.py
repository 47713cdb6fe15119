"""A scripted model behind a local server speaking the OpenAI protocol (FakeServer from
test_api_backends), for tests that need tool calls and exact token counts without a real model."""

from __future__ import annotations

import json

from test_api_backends import FakeServer

__all__ = ["FakeServer", "scripted_search_model"]


def scripted_search_model(script: dict[str, tuple[str, str]], usage: tuple[int, int] = (120, 7)):
    """A handler: for the question containing KEY, the first turn calls ``search`` with QUERY and the
    turn after a tool result answers ANSWER (``script = {KEY: (QUERY, ANSWER)}``); without tools it
    answers at once. Every reply reports ``usage`` (prompt, completion tokens)."""

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
            "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)},
        }
        return 200, {}, payload

    return handler
