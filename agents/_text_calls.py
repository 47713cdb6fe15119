"""Tool calls a model wrote as text instead of making them: recognized, so that such text is never
taken for the answer.

Small models given a tool (Qwen2.5-Coder-0.5B among them) often write the call into the reply:
``{"name": "search", "arguments": {"query": "X"}}`` as bare JSON (one or several, one per line),
inside a Markdown ```json fence, or between Hermes-style ``<tool_call>`` tags as Qwen's chat template
teaches. ``read_text_tool_calls`` finds every such call in a reply (``{"name", "arguments"}``,
``{"name", "parameters"}`` or OpenAI's ``{"function": {"name", "arguments"}}``; arguments as an
object or as JSON text), and counts the call-shaped fragments it cannot read (a call cut off by
``max_tokens``, a tag around something that is not JSON). A reply with neither is an answer.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

# what a call written as text looks like, parsed or not
_TAG = re.compile(r"<tool_call>", re.IGNORECASE)
_NAME_THEN_ARGS = re.compile(r'"name"\s*:\s*"[^"]*"\s*,\s*"(?:arguments|parameters)"\s*:')
_ARGS_THEN_NAME = re.compile(r'"(?:arguments|parameters)"\s*:.*?"name"\s*:\s*"', re.DOTALL)
_DECODER = json.JSONDecoder()


@dataclass
class TextToolCalls:
    calls: list[tuple[str, str]] = field(default_factory=list)  # (name, arguments as JSON text)
    unreadable: int = 0  # call-shaped fragments that could not be read


def _as_call(obj: Any) -> tuple[str, str] | None:
    if not isinstance(obj, dict):
        return None
    if isinstance(obj.get("function"), dict) and "name" not in obj:  # OpenAI's shape
        obj = obj["function"]
    name = obj.get("name")
    if not isinstance(name, str) or not ({"arguments", "parameters"} & obj.keys()):
        return None
    args = obj.get("arguments", obj.get("parameters"))
    return name, args if isinstance(args, str) else json.dumps(args if args is not None else {})


def _json_values(text: str):
    """Every JSON object or array in ``text`` that parses, outermost first, left to right."""
    pos = 0
    while True:
        starts = [i for i in (text.find("{", pos), text.find("[", pos)) if i >= 0]
        if not starts:
            return
        start = min(starts)
        try:
            value, end = _DECODER.raw_decode(text, start)
        except ValueError:
            pos = start + 1  # not JSON from here: an inner value may be
            continue
        yield value
        pos = end


def read_text_tool_calls(text: str | None) -> TextToolCalls | None:
    """The tool calls written in ``text``; None when it holds none, readable or not (an answer)."""
    if not text:
        return None
    found = TextToolCalls()
    for value in _json_values(text):
        for item in value if isinstance(value, list) else [value]:
            call = _as_call(item)
            if call is not None:
                found.calls.append(call)
    shaped = max(len(p.findall(text)) for p in (_TAG, _NAME_THEN_ARGS, _ARGS_THEN_NAME))
    found.unreadable = max(0, shaped - len(found.calls))
    if not found.calls and not found.unreadable:
        return None
    return found
