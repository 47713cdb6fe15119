"""Reasoning removed from an answer before it is scored (``ScoringOptions.strip_reasoning``, on by
default); the sample's row and transcript keep the reply as written.

Removed: every ``<think>…</think>`` and ``<reasoning>…</reasoning>`` block (tags in any case); a
closing tag with no opening one (a chat template that opens the block in the prompt, as Qwen3 and
DeepSeek-R1 do): everything before it; an opening tag never closed (the reply cut by max_tokens
while thinking): everything from it to the end, so a reply that is only unfinished reasoning scores
as the empty answer. What is left is stripped of surrounding whitespace. A server that returns the
reasoning in its own field (``reasoning_content``) never puts it in the answer; the transcript keeps
it on the assistant message (``harness.models.base.ModelResponse.reasoning``).
"""

from __future__ import annotations

import re
from typing import Any

_TAGS = "think|reasoning"
_BLOCK = re.compile(rf"<({_TAGS})>.*?</\1\s*>", re.S | re.I)
_OPEN = re.compile(rf"<(?:{_TAGS})>", re.I)
_CLOSE = re.compile(rf"</(?:{_TAGS})\s*>", re.I)


def strip_reasoning(text: Any) -> tuple[Any, str | None]:
    """(the answer without its reasoning, what was done: None (nothing to remove), "stripped", or
    "unclosed" (a block never closed: everything from its tag on removed))."""
    if not isinstance(text, str) or "<" not in text:
        return text, None
    out = _BLOCK.sub("", text)
    closes = list(_CLOSE.finditer(out))
    if closes:  # opened by the template, in the prompt: the reply starts inside the block
        out = out[closes[-1].end() :]
    unclosed = _OPEN.search(out)
    if unclosed:
        out = out[: unclosed.start()]
    if out == text:
        return text, None
    return out.strip(), "unclosed" if unclosed else "stripped"
