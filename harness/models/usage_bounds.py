"""Usage a reply may report: what its request could have used. A reply that reports more (a hostile
or broken server saying 10^30 tokens) is a malformed reply, retried like any other
(``TransientModelError``), and its usage is never priced or counted.

The bounds, each with why it holds for every reply a real server sends:

* **prompt tokens** at most the request's own size in UTF-8 bytes plus ``PROMPT_OVERHEAD_TOKENS``:
  every tokenizer the backends use makes at least one byte per token (byte-level BPE, SentencePiece
  with byte fallback), and what a provider adds that the request does not carry (chat-template
  markers, Anthropic's tool-use system prompt, 346 tokens for Claude 4 models) is far under the
  overhead. The recorded replies agree: tests/fixtures/recorded/anthropic/tool_with_thinking.yaml,
  398 input tokens for a 421-byte request with one tool; openai/test_openai_responses_thinking_
  with_tool_calls.yaml, 2,087 for 14,516 bytes (the reasoning item sent back counts).
* **prompt tokens** at most ``CONTEXT_MARGIN`` times the model's context (the larger of its working
  size and its documented maximum, ``ModelBackend.usage_context``): a server cannot read more than its
  context; the margin keeps a model facts entry that is out of date from refusing real replies.
* **completion tokens** at most ``--max-tokens`` plus a margin of ``--max-tokens`` or, where it is
  known, the model's context, whichever is larger. The documented caps include the reasoning:
  OpenAI chat ``max_completion_tokens`` and the Responses API's ``max_output_tokens`` ("including
  visible output tokens and reasoning tokens"; recorded openai/test_max_completion_tokens_o3-mini.yaml:
  87 of 100 with 64 reasoning), Anthropic's ``max_tokens`` holds ``budget_tokens`` (recorded
  anthropic/*.yaml), llama.cpp's n_predict and vLLM's max_tokens count every generated token. The
  margin is for OpenAI-compatible gateways that bill reasoning beyond the cap (brockamer/findajob
  issue 639: 4,712 reasoning tokens past a 4,096 cap through OpenRouter; vllm-project/vllm issue
  28266): such reasoning still fits in one sequence, which the context bounds.
"""

from __future__ import annotations

import json
from typing import Any

from harness.errors import TransientModelError

PROMPT_OVERHEAD_TOKENS = 16_384
CONTEXT_MARGIN = 2


def _text_chars(messages: list[dict[str, Any]]) -> int:
    """Characters of the messages' text contents: a lower bound of the request's UTF-8 bytes, found
    without serializing it (nearly every reply is judged on this alone)."""
    return sum(len(m["content"]) for m in messages if isinstance(m, dict) and isinstance(m.get("content"), str))


def _request_bytes(messages: list[dict[str, Any]], tools: Any) -> int:
    text = json.dumps([messages, tools], ensure_ascii=False, default=str)
    return len(text.encode("utf-8", "surrogatepass"))


def usage_problem(
    usage: Any, max_tokens: int, messages: list[dict[str, Any]], tools: Any, context: Any
) -> str | None:
    """What ``usage`` reports that the request (``messages``, ``tools``, ``max_tokens``) could not
    have used, in words; None where it could. ``context`` is a callable giving the model's context
    in tokens (or None), asked only where a bound needs it."""
    prompt, completion = usage.prompt_tokens, usage.completion_tokens
    if completion > 2 * max_tokens:
        size = context()
        allowed = max_tokens + max(max_tokens, size or 0)
        if completion > allowed:
            known = f"the model's context of {size:,}" if size else "as much again"
            return (
                f"{completion:,} completion tokens for a request capped at --max-tokens {max_tokens:,} "
                f"(at most {allowed:,} believed: the cap plus {known})"
            )
    if prompt > _text_chars(messages) + PROMPT_OVERHEAD_TOKENS:
        size = _request_bytes(messages, tools)
        if prompt > size + PROMPT_OVERHEAD_TOKENS:
            return (
                f"{prompt:,} prompt tokens for a request of {size:,} bytes (at most one token a byte, "
                f"plus {PROMPT_OVERHEAD_TOKENS:,} for what a server adds)"
            )
    if prompt > 1024:
        size = context()
        if size and prompt > CONTEXT_MARGIN * size:
            return f"{prompt:,} prompt tokens, more than {CONTEXT_MARGIN}x the model's context of {size:,}"
    return None


def check_usage(
    response: Any, max_tokens: int, messages: list[dict[str, Any]], tools: Any, context: Any, where: str
) -> None:
    """Raise ``TransientModelError`` (a malformed reply: retried, never priced) where ``response``
    reports usage its request could not have used."""
    problem = usage_problem(response.usage, max_tokens, messages, tools, context)
    if problem is not None:
        raise TransientModelError(f"{where}: reply reports {problem}; a malformed reply, not priced")


__all__ = ["CONTEXT_MARGIN", "PROMPT_OVERHEAD_TOKENS", "check_usage", "usage_problem"]
