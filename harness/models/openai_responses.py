"""OpenAI's Responses API (``POST /v1/responses``): the request built from our chat-format
transcript, and the reply read into a ``ModelResponse``.

Why this API: a reasoning model's reasoning survives a tool loop only here. Its reply carries
``reasoning`` items (``encrypted_content`` asked for with ``include: ["reasoning.encrypted_content"]``),
and the next request sends them back, unchanged, before the function calls they led to. Requests go
with ``store: false``: nothing is kept on OpenAI's side, so the encrypted content is what carries the
reasoning ("reasoning.encrypted_content: ... enables reasoning items to be used in multi-turn
conversations when using the Responses API statelessly (like when the store parameter is set to
false ...)", the ``include`` docstring of ``ResponseCreateParams`` in the openai SDK,
openai/types/responses/response_create_params.py). Shapes checked against real traffic recorded by
pydantic-ai (tests/fixtures/recorded/openai/, see its README) and the SDK's TypedDicts
(tests/test_openai_responses.py).

Request (``responses_request``):

* system / developer messages before the first other message -> ``instructions`` (joined by a blank
  line); a later one -> a message item of its own role;
* user / assistant text -> message items (``{"role", "content"}``; content parts -> ``input_text``);
* an assistant message's tool calls -> ``function_call`` items ``{type, id?, call_id, name, arguments}``;
* ``role: tool`` -> ``function_call_output`` ``{type, call_id, output}``;
* an assistant message's ``reasoning_items`` (the previous reply's output items, kept because it
  reasoned): its ``reasoning`` and ``message`` items go back unchanged, in their order, and each
  ``function_call`` item gives its item id (``fc_...``) to the transcript's call of the same
  ``call_id``: the API pairs a reasoning item with the item after it by id (a reasoning item sent
  without it is refused: "Item 'rs_...' of type 'reasoning' was provided without its required
  following item", langchain-ai/langchainjs PR 9082; the recorded second request sends both ids);
* tools ``{type: function, name, description, parameters, strict}``: ``strict`` said always (the
  SDK's ``FunctionToolParam`` requires it), false unless the chat tool says otherwise: chat
  completions' default, under which any JSON schema is taken (strict mode needs every property
  required and ``additionalProperties: false``); the recorded request sends ``strict: false`` so;
* ``max_output_tokens`` = ``--max-tokens``; ``reasoning: {effort}`` only when ``--reasoning-effort``
  is given (else the provider's default, recorded by the backend); ``temperature`` / ``top_p`` only
  where the model takes them; no ``seed`` (the Responses API has none).

Reply (``response_from_responses``): ``reasoning`` items kept (their summary text is
``ModelResponse.reasoning``), ``message`` items' ``output_text`` -> content and ``refusal`` parts ->
``refusal``, ``function_call`` -> ``ToolCall(id=call_id)``; usage ``input_tokens`` (of them
``input_tokens_details.cached_tokens`` read from the prompt cache and ``cache_write_tokens`` written
to it), ``output_tokens`` (of them
``output_tokens_details.reasoning_tokens``). ``status: incomplete`` for ``max_output_tokens`` ->
finish_reason ``length``; function calls -> ``tool_calls``; otherwise ``stop``. A reply that is not
a response object is a ``TransientModelError`` naming the field.
"""

from __future__ import annotations

import json
import uuid
from typing import Any, Iterable

from harness.errors import ModelError
from harness.models.base import GenerationParams, ModelResponse, ToolCall, Usage
from harness.models.http_reply import json_kind

INCLUDE_ENCRYPTED_REASONING = "reasoning.encrypted_content"
# output item kinds kept, in order, from a reply that reasoned (sent back in the next turn)
_KEPT = ("reasoning", "message", "function_call")


# --------------------------------------------------------------------------- request
def _text(content: Any) -> str:
    """A chat message's content as text (parts joined)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return str(content)


def _user_content(content: Any) -> Any:
    """User content: text as it is; chat content parts as Responses input parts."""
    if not isinstance(content, list):
        return _text(content)
    parts = []
    for part in content:
        if not isinstance(part, dict):
            continue
        if part.get("type") == "text":
            parts.append({"type": "input_text", "text": part.get("text", "")})
        elif part.get("type") == "image_url":
            image = part.get("image_url")
            url = image.get("url") if isinstance(image, dict) else image
            parts.append({"type": "input_image", "image_url": url, "detail": "auto"})
        else:
            raise ModelError(f"the Responses API request cannot carry a {part.get('type')!r} content part")
    return parts


def function_call_item(call: dict[str, Any], item_id: str | None = None) -> dict[str, Any]:
    """A chat tool call as a ``function_call`` input item (with its ``fc_`` item id when known)."""
    fn = call.get("function") or {}
    arguments = fn.get("arguments")
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments if arguments is not None else {})
    item: dict[str, Any] = {"type": "function_call"}
    if item_id:
        item["id"] = item_id
    item.update({"call_id": call.get("id"), "name": fn.get("name"), "arguments": arguments})
    return item


def _assistant_items(msg: dict[str, Any]) -> list[dict[str, Any]]:
    calls = [c for c in msg.get("tool_calls") or [] if isinstance(c, dict)]
    by_id = {c.get("id"): c for c in calls}
    kept = [i for i in msg.get("reasoning_items") or [] if isinstance(i, dict) and i.get("type") in _KEPT]
    items: list[dict[str, Any]] = []
    sent_calls: set[Any] = set()
    said = False
    for item in kept:
        kind = item["type"]
        if kind == "function_call":
            call = by_id.get(item.get("call_id"))
            if call is not None and call.get("id") not in sent_calls:  # a call the transcript dropped is not sent
                items.append(function_call_item(call, item.get("id")))
                sent_calls.add(call.get("id"))
        else:
            items.append(dict(item))  # reasoning and message items: exactly as received
            said = said or kind == "message"
    text = _text(msg.get("content"))
    if text and not said:
        first_call = next((n for n, i in enumerate(items) if i.get("type") == "function_call"), len(items))
        items.insert(first_call, {"role": "assistant", "content": text})
    items.extend(function_call_item(c) for c in calls if c.get("id") not in sent_calls)
    return items


def to_responses_input(messages: list[dict[str, Any]]) -> tuple[str | None, list[dict[str, Any]]]:
    """(instructions, input items) for a chat-format transcript."""
    instructions: list[str] = []
    items: list[dict[str, Any]] = []
    leading = True
    for msg in messages:
        role = msg.get("role")
        if role in ("system", "developer"):
            if leading:
                instructions.append(_text(msg.get("content")))
            else:
                items.append({"role": role, "content": _text(msg.get("content"))})
            continue
        leading = False
        if role == "user":
            items.append({"role": "user", "content": _user_content(msg.get("content"))})
        elif role == "assistant":
            items.extend(_assistant_items(msg))
        elif role == "tool":
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": msg.get("tool_call_id"),
                    "output": _text(msg.get("content")),
                }
            )
        else:
            raise ModelError(f"the Responses API request cannot carry a message of role {role!r}")
    return ("\n\n".join(instructions) if instructions else None), items


def to_responses_tools(tools: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chat function tools in the Responses shape (flat: no ``function`` wrapper)."""
    out = []
    for tool in tools:
        fn = tool.get("function") if tool.get("type") == "function" else None
        if not isinstance(fn, dict):
            raise ModelError(f"the Responses API request takes function tools, not {tool.get('type')!r}")
        item: dict[str, Any] = {"type": "function", "name": fn.get("name")}
        if fn.get("description") is not None:
            item["description"] = fn["description"]
        item["parameters"] = fn.get("parameters") or {"type": "object", "properties": {}}
        item["strict"] = bool(fn.get("strict", False))
        out.append(item)
    return out


def to_responses_tool_choice(choice: Any) -> Any:
    """``auto`` / ``required`` / ``none`` as they are; a named function ``{type: function, name}``."""
    if choice is None or isinstance(choice, str):
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function":
        fn = choice.get("function")
        name = fn.get("name") if isinstance(fn, dict) else choice.get("name")
        return {"type": "function", "name": name}
    return choice


def responses_request(
    model: str,
    messages: list[dict[str, Any]],
    params: GenerationParams,
    tools: list[dict[str, Any]] | None,
    tool_choice: Any,
    sampling: Iterable[str] = (),
    include_reasoning: bool = True,
) -> dict[str, Any]:
    """The body of one ``POST /v1/responses``. ``sampling``: the sampling parameters to send
    (those the model takes); ``include_reasoning``: ask for the encrypted reasoning content."""
    instructions, items = to_responses_input(messages)
    body: dict[str, Any] = {"model": model}
    if instructions is not None:
        body["instructions"] = instructions
    body["input"] = items
    body["max_output_tokens"] = params.max_tokens
    sampling = set(sampling)
    if "temperature" in sampling:
        body["temperature"] = params.temperature
    if "top_p" in sampling:
        body["top_p"] = params.top_p
    if params.reasoning_effort is not None:
        body["reasoning"] = {"effort": params.reasoning_effort}
    if tools:
        body["tools"] = to_responses_tools(tools)
        if tool_choice is not None:
            body["tool_choice"] = to_responses_tool_choice(tool_choice)
    body["store"] = False
    if include_reasoning:
        body["include"] = [INCLUDE_ENCRYPTED_REASONING]
    return body


# --------------------------------------------------------------------------- reply
def response_from_responses(reply: Any, where: str = "server") -> ModelResponse:
    """A Responses API reply (parsed JSON) -> ``ModelResponse``; one that is not a response object
    (no ``output`` list, an item or field of the wrong type, ``status: failed``) is a
    ``TransientModelError`` naming the field: retried, never passed off as an (empty) answer."""
    from harness.models.openai_compat import _one_line, _Shape

    shape = _Shape(where)
    if not isinstance(reply, dict):
        raise shape.fault(f"reply is {json_kind(reply)}, not a response object")
    status = shape.get(reply, "status", "reply", (str,), "text")
    if status == "failed" or (reply.get("error") and not reply.get("output")):
        raise shape.fault(f"response failed: {_one_line(reply.get('error') or status)}")
    if status in ("queued", "in_progress", "cancelled"):  # not an answer (nothing here runs in the background)
        raise shape.fault(f"response is {status}, not finished")
    output = shape.get(reply, "output", "reply", (list,), "a list", optional=False)
    texts: list[str] = []
    refusals: list[str] = []
    summaries: list[str] = []
    calls: list[ToolCall] = []
    reasoned = False
    for i, item in enumerate(output):
        path = f"output[{i}]"
        if not isinstance(item, dict):
            raise shape.fault(f"{path} is {json_kind(item)}, not an object")
        kind = shape.get(item, "type", path, (str,), "text", optional=False)
        if kind == "message":
            for j, part in enumerate(shape.get(item, "content", path, (list,), "a list") or []):
                where_part = f"{path}.content[{j}]"
                if not isinstance(part, dict):
                    raise shape.fault(f"{where_part} is {json_kind(part)}, not an object")
                part_kind = part.get("type")
                if part_kind == "output_text":
                    texts.append(shape.get(part, "text", where_part, (str,), "text", optional=False))
                elif part_kind == "refusal":
                    refusals.append(shape.get(part, "refusal", where_part, (str,), "text", optional=False))
        elif kind == "function_call":
            name = shape.get(item, "name", path, (str,), "text", optional=False)
            arguments = item.get("arguments")
            if not isinstance(arguments, str):
                arguments = json.dumps(arguments if arguments is not None else {})
            call_id = shape.get(item, "call_id", path, (str,), "text")
            calls.append(ToolCall(id=call_id or f"call_{uuid.uuid4().hex[:12]}", name=name, arguments=arguments))
        elif kind == "reasoning":
            reasoned = True
            # read leniently: a summary (or raw reasoning text) of a shape not known here is no fault
            for part in (item.get("summary") or []) + (item.get("content") or []):
                if isinstance(part, dict) and isinstance(part.get("text"), str) and part["text"]:
                    summaries.append(part["text"])
    usage = shape.get(reply, "usage", "reply", (dict,), "an object") or {}
    prompt = shape.count(usage, "input_tokens")
    completion = shape.count(usage, "output_tokens")
    in_details = shape.get(usage, "input_tokens_details", "usage", (dict,), "an object") or {}
    out_details = shape.get(usage, "output_tokens_details", "usage", (dict,), "an object") or {}
    cached = min(shape.count(in_details, "cached_tokens", "usage.input_tokens_details"), prompt)
    written = min(shape.count(in_details, "cache_write_tokens", "usage.input_tokens_details"), prompt - cached)
    incomplete = reply.get("incomplete_details") if isinstance(reply.get("incomplete_details"), dict) else {}
    if status == "incomplete":
        reason = incomplete.get("reason")
        finish = "length" if reason == "max_output_tokens" else (reason if isinstance(reason, str) else "incomplete")
    elif calls:
        finish = "tool_calls"
    else:
        finish = "stop"
    kept = [dict(item) for item in output if item.get("type") in _KEPT] if reasoned else []
    return ModelResponse(
        content="".join(texts) if texts else None,
        tool_calls=calls,
        finish_reason=finish,
        usage=Usage(
            prompt_tokens=prompt,
            completion_tokens=completion,
            cache_read_tokens=cached,
            cache_write_tokens=written,
            reasoning_tokens=min(
                shape.count(out_details, "reasoning_tokens", "usage.output_tokens_details"), completion
            ),
        ),
        model=shape.get(reply, "model", "reply", (str,), "text"),
        reasoning="\n\n".join(summaries) if summaries else None,
        reasoning_items=kept,
        refusal="".join(refusals) if refusals else None,
    )


__all__ = [
    "INCLUDE_ENCRYPTED_REASONING",
    "function_call_item",
    "response_from_responses",
    "responses_request",
    "to_responses_input",
    "to_responses_tool_choice",
    "to_responses_tools",
]
