"""``anthropic/MODEL``: Anthropic's Messages API through the official ``anthropic`` SDK.

The harness speaks the OpenAI chat format; it is converted here (``to_anthropic_request``):
system messages -> ``system``; function tools -> ``{name, description, input_schema}``; assistant
``tool_calls`` -> ``tool_use`` blocks, after the turn's ``thinking`` / ``redacted_thinking`` blocks
(kept under ``reasoning_items`` and sent back unchanged); ``role: "tool"`` messages ->
``tool_result`` blocks in a user turn; a named ``tool_choice`` -> ``{"type": "tool", "name": ...}``.
Consecutive turns of one role are merged (the API wants them alternating).

API version: every request (messages, token counting, message batches) carries
``anthropic-version: ANTHROPIC_VERSION``, sent explicitly rather than left to the installed SDK
(anthropic 2.14's ``_constants.ANTHROPIC_API_VERSION`` is 2026-10-21, which refuses ``temperature``
on every model; the SDK's ``default_headers`` let the client's own headers override it).

What is sent comes from the model's facts (``harness/models/model_facts.yaml``), never from a reply:

* sampling: ``temperature`` (and ``top_p`` when not 1.0) only where ``facts.sampling`` lists them,
  and never with thinking on (Anthropic refuses temperature and top_k with thinking; top_p only
  from 0.95 to 1). ``seed`` has no equivalent (ignored). A model the table does not know is probed
  at pre-flight (``start()``: one tiny request before any sample) for the parameters it refuses;
  the probe is recorded (``describe()["probe"]``). A sample's 400 is a failure, never a lesson.
* thinking: ``always`` models get ``{"type": "adaptive", "display": "summarized"}``; ``optional``
  ones ``{"type": "enabled", "budget_tokens": N}`` with ``--thinking-budget N`` only (checked before
  any request: at least the model's minimum, below ``--max-tokens``; refused for a model that never
  thinks or always does). Thinking text lands in ``ModelResponse.reasoning``, its tokens
  (``output_tokens_details.thinking_tokens``) in ``Usage.reasoning_tokens``.
* the context window and the prompt cache's minimum prefix: the table's (unknown model: no context
  size without ``--context-size``, and every shared prefix marked).

Prompt caching (``--no-prompt-cache`` turns it off): ``cache_control`` breakpoints on the shared
prefix (``add_cache_breakpoints``); the reply's cache reads and writes are recorded in ``Usage`` and
priced at their own rates.

Replies are read as in ``openai_compat``: a byte cap while reading, one deadline per request, and a
reply that is not a message (``content`` not a list of blocks, an HTML page) a transient fault.
``stop_reason: refusal`` keeps its explanation (or text) in ``ModelResponse.refusal``.

``count_tokens`` calls the API's ``/v1/messages/count_tokens`` (a user message holding the text; it
includes a few tokens of message framing), so it needs ``ANTHROPIC_API_KEY`` and network access.
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from typing import Any, Mapping

from harness.errors import ModelError, TransientModelError
from harness.redact import strip_credentials
from harness.models.base import (
    GenerationParams,
    ModelBackend,
    ModelResponse,
    ToolCall,
    Usage,
    close_loop_clients,
    endpoint_fact,
    env_base_url,
    register_backend,
)
from harness.models.facts import ModelFacts, facts_for
from harness.models.http_reply import (
    ReplyRejected,
    capped_sdk_http_client,
    caused_by,
    json_kind,
    rejected_reply,
    reply_json,
    resolve_http_client,
    within_deadline,
)
from harness.models.openai_compat import map_api_error

API_KEY_ENV = "ANTHROPIC_API_KEY"
BASE_URL_ENV = "ANTHROPIC_BASE_URL"
DEFAULT_BASE_URL = "https://api.anthropic.com"

# The Messages API version sent with every request. 2023-06-01 keeps the sampling parameters the
# models that take them accept; 2026-10-21 removes temperature, top_p and top_k for every model
# (https://platform.claude.com/docs/en/api/versioning, read 2026-11-26), so greedy decoding would
# be lost on Haiku 4.5 (recorded taking temperature 0.2: pydantic-ai's cassette
# test_anthropic_sampling_settings_reach_the_wire.yaml) or Sonnet 4.6. 2023-06-01 is what the SDK
# sent before 2.0 (anthropics/anthropic-sdk-python src/anthropic/_client.py, v0.121.0) and so what
# pydantic-ai's recordings of adaptive thinking and thinking_tokens on claude-opus-5 were made with
# (anthropic 1.0.0 in its uv.lock at 4fda3898): the reply shapes parsed here are that version's.
ANTHROPIC_VERSION = "2023-06-01"
# What every request carried before the version was pinned (the batch path's; the SDK's before 2.0):
# left out of the run and cache keys, so the keys of earlier runs stay valid; any other value is in.
NEUTRAL_ANTHROPIC_VERSION = "2023-06-01"

STOP_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
    "model_context_window_exceeded": "length",
}

# what a prefix may hold beside its bytes (a token is at least one byte): role framing per turn, and
# the tool-use system prompt the API adds when tools are sent (a few hundred tokens)
FRAMING_TOKENS = 8
TOOL_PROMPT_TOKENS = 600

# Thinking for models that always think: adaptive (the only kind they take; "disabled" and a
# budget are refused with a 400), its text summarized (the default on Opus 5.5 is "omitted": empty
# thinking text). The shape of the recorded request to claude-opus-5 (pydantic-ai
# tests/models/cassettes/test_anthropic/test_anthropic_opus_5_features.yaml) and of
# https://platform.claude.com/docs/en/models/opus-5-5/whats-new-opus-5-5 ("Thinking can't be disabled").
ADAPTIVE_THINKING = {"type": "adaptive", "display": "summarized"}
# https://platform.claude.com/docs/en/build-with-claude/extended-thinking: budget_tokens at least 1,024
MIN_THINKING_BUDGET = 1024
# With thinking on, top_p is taken from 0.95 to 1 only; temperature and top_k not at all (extended
# thinking docs, "Feature compatibility").
THINKING_TOP_P_FLOOR = 0.95
# the block kinds a reply's thinking comes in; sent back unchanged, first in their assistant turn
THINKING_BLOCKS = ("thinking", "redacted_thinking")

# How the API refuses a sampling parameter a model does not take (400 invalid_request_error), as
# reported verbatim: "`temperature` is deprecated for this model." (github.com/danielmiessler/Fabric
# issue 2109, claude-opus-4-7; github.com/BitterSecurity/Decepticon issue 107) and "`temperature` and
# `top_p` cannot both be specified for this model. Please use only one." (github.com/Vali-98/ChatterUI
# issue 564, claude-sonnet-4-6). No recording of either is in pydantic-ai's cassettes.
REFUSED_PARAM = "`{param}` is deprecated for this model"
REFUSED_TOGETHER = "`temperature` and `top_p` cannot both be specified"
# the pre-flight probe: the smallest request that shows whether the sampling parameters are taken
PROBE_MESSAGES = [{"role": "user", "content": [{"type": "text", "text": "Say OK."}]}]


# --------------------------------------------------------------------------- conversion
def _text_of(content: Any) -> str:
    """OpenAI content (a string or a list of parts) -> plain text."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, Mapping):
                if part.get("type") in (None, "text") and "text" in part:
                    parts.append(str(part["text"]))
            elif isinstance(part, str):
                parts.append(part)
        return "\n".join(parts)
    return str(content)


def _tool_input(arguments: Any) -> dict[str, Any]:
    """Tool-call arguments (JSON text) -> the object Anthropic wants as ``input``."""
    if isinstance(arguments, Mapping):
        return dict(arguments)
    if arguments is None or (isinstance(arguments, str) and not arguments.strip()):
        return {}
    try:
        value = json.loads(arguments)
    except (TypeError, ValueError):
        return {"_raw_arguments": str(arguments)}  # the model wrote invalid JSON; keep it visible
    return value if isinstance(value, dict) else {"value": value}


def to_anthropic_tools(tools: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    out = []
    for tool in tools or []:
        fn = tool.get("function", tool) if tool.get("type", "function") == "function" else None
        if fn is None:
            continue
        entry: dict[str, Any] = {
            "name": fn["name"],
            "input_schema": fn.get("parameters") or {"type": "object", "properties": {}},
        }
        if fn.get("description"):
            entry["description"] = fn["description"]
        out.append(entry)
    return out


def to_anthropic_tool_choice(tool_choice: Any) -> dict[str, Any] | None:
    """OpenAI ``tool_choice`` -> Anthropic's (None: leave it to the API's default, auto)."""
    if tool_choice is None:
        return None
    if isinstance(tool_choice, str):
        return {"auto": {"type": "auto"}, "required": {"type": "any"}, "none": {"type": "none"}}.get(tool_choice)
    if isinstance(tool_choice, Mapping):
        if tool_choice.get("type") == "function":
            return {"type": "tool", "name": tool_choice["function"]["name"]}
        if tool_choice.get("type") in ("auto", "any", "tool", "none"):
            return dict(tool_choice)  # already Anthropic's shape
    raise ModelError(f"unsupported tool_choice for Anthropic: {tool_choice!r}")


def to_anthropic_messages(messages: list[dict[str, Any]]) -> tuple[str | None, list[dict[str, Any]]]:
    """OpenAI chat messages -> (system text or None, Anthropic messages with content blocks)."""
    system_parts: list[str] = []
    out: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if not blocks:
            return
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})

    for msg in messages:
        role = msg.get("role")
        if role in ("system", "developer"):
            text = _text_of(msg.get("content"))
            if text:
                system_parts.append(text)
        elif role == "user":
            text = _text_of(msg.get("content"))
            add("user", [{"type": "text", "text": text}] if text else [])
        elif role == "assistant":
            # the turn's thinking first, unchanged (signature and all): the API checks it in a tool
            # loop; other providers' items (OpenAI reasoning) are not Anthropic's to send
            blocks: list[dict[str, Any]] = [
                dict(item)
                for item in msg.get("reasoning_items") or []
                if isinstance(item, Mapping) and item.get("type") in THINKING_BLOCKS
            ]
            text = _text_of(msg.get("content"))
            if text:
                blocks.append({"type": "text", "text": text})
            for call in msg.get("tool_calls") or []:
                fn = call.get("function", {})
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": call.get("id") or f"toolu_{uuid.uuid4().hex[:20]}",
                        "name": fn.get("name", ""),
                        "input": _tool_input(fn.get("arguments")),
                    }
                )
            add("assistant", blocks)
        elif role == "tool":
            block: dict[str, Any] = {"type": "tool_result", "tool_use_id": msg.get("tool_call_id", "")}
            result = _text_of(msg.get("content"))
            if result:  # an empty text is rejected; no content is fine
                block["content"] = result
            if msg.get("is_error"):
                block["is_error"] = True
            add("user", [block])
        else:
            raise ModelError(f"cannot convert a message with role {role!r} for Anthropic")
    # The API wants tool results first in their user turn, before any text that follows them.
    for m in out:
        if m["role"] == "user" and any(b["type"] == "tool_result" for b in m["content"]):
            m["content"].sort(key=lambda b: b["type"] != "tool_result")
    return ("\n\n".join(system_parts) or None), out


def min_cacheable_tokens(model: str) -> int | None:
    """The shortest prefix (tokens) the model caches, from the facts table; None where it is unknown."""
    facts = facts_for("anthropic", model)
    return facts.cache_min_tokens if facts is not None else None


def _size(block: dict[str, Any]) -> int:
    if block.get("type") == "text":
        return len(block["text"].encode())
    return len(json.dumps(block, ensure_ascii=False).encode())


def add_cache_breakpoints(kwargs: dict[str, Any], min_tokens: int) -> int:
    """``cache_control`` on the last block of each prefix another request shares (how many were set):

    * the system prompt (after the tools), which every request starts with;
    * in a conversation that goes on (an assistant turn before the last message): the end of the
      request before (cached by it, read now, whatever the API's 20-block lookback) and the end of
      this one (read by the next round). A single-turn request gets none there: writing a prompt
      no later request extends costs 25% more and saves nothing.

    Blocks are marked, never split: the text the model reads is unchanged. A prefix with fewer bytes
    (plus framing) than the model's minimum cannot reach it and is left unmarked."""
    size = 3
    if kwargs.get("tools"):
        size += len(json.dumps(kwargs["tools"], ensure_ascii=False).encode()) + TOOL_PROMPT_TOKENS
    marked = 0
    system = kwargs.get("system")
    if system:
        size += len(system.encode()) + FRAMING_TOKENS
        if size >= min_tokens:
            kwargs["system"] = [{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}]
            marked += 1
    messages = kwargs["messages"]
    replies = [i for i, m in enumerate(messages[:-1]) if m["role"] == "assistant"]
    if not replies:
        return marked
    ends = {replies[-1] - 1, len(messages) - 1} - {-1}
    for i, message in enumerate(messages):
        size += FRAMING_TOKENS + sum(_size(b) for b in message["content"])
        if i in ends and size >= min_tokens and message["content"]:
            last = message["content"][-1]
            if last.get("type") in THINKING_BLOCKS:
                continue  # a thinking block goes back exactly as it came: nothing added to it
            last["cache_control"] = {"type": "ephemeral"}
            marked += 1
    return marked


def to_anthropic_request(
    model: str,
    messages: list[dict[str, Any]],
    params: GenerationParams,
    tools: list[dict[str, Any]] | None = None,
    tool_choice: Any = None,
    *,
    sampling: Mapping[str, float] | None = None,
    thinking: Mapping[str, Any] | None = None,
    effort: str | None = None,
    prompt_cache: bool = False,
    cache_min_tokens: int | None = None,
) -> dict[str, Any]:
    """Keyword arguments for ``client.messages.create``: exactly the ``sampling`` parameters and the
    ``thinking`` object given (the backend decides them from the model's facts; ``seed`` has no
    equivalent), both in ``extra_body`` (anthropic >= 1.0 has no ``temperature`` argument).
    ``prompt_cache``: with ``cache_control`` breakpoints (``add_cache_breakpoints``) on prefixes of
    at least ``cache_min_tokens`` (default: the model's, from the facts table; unknown: every one)."""
    system, converted = to_anthropic_messages(messages)
    kwargs: dict[str, Any] = {"model": model, "max_tokens": params.max_tokens, "messages": converted}
    if system:
        kwargs["system"] = system
    if tools:
        kwargs["tools"] = to_anthropic_tools(tools)
        choice = to_anthropic_tool_choice(tool_choice)
        if choice is not None:
            kwargs["tool_choice"] = choice
    if prompt_cache:
        if cache_min_tokens is None:
            cache_min_tokens = min_cacheable_tokens(model) or 0
        add_cache_breakpoints(kwargs, cache_min_tokens)
    extra: dict[str, Any] = dict(sampling or {})
    if thinking:
        extra["thinking"] = dict(thinking)
    if effort:  # recorded: claude-opus-4-6 / claude-opus-5 requests carry output_config.effort (pydantic-ai cassettes)
        extra["output_config"] = {"effort": effort}
    if extra:
        kwargs["extra_body"] = extra
    return kwargs


def wire_body(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON body ``client.messages.create(**kwargs)`` sends: ``extra_body`` merged in."""
    return {**{k: v for k, v in kwargs.items() if k != "extra_body"}, **kwargs.get("extra_body", {})}


def from_anthropic_message(message: Any, where: str = "Anthropic API") -> ModelResponse:
    """An Anthropic ``Message`` (the parsed JSON, or an SDK object) -> ``ModelResponse``. A reply that
    is not one (no content list, a block of the wrong type) is a ``TransientModelError`` naming the
    field: retried, never passed off as an (empty) answer. ``thinking`` / ``redacted_thinking``
    blocks are kept whole in ``reasoning_items`` (sent back unchanged in a tool loop), the thinking
    text in ``reasoning``."""
    if hasattr(message, "model_dump"):
        message = message.model_dump()

    def fault(text: str) -> TransientModelError:
        return TransientModelError(f"{where}: {text}")

    def get(obj: dict[str, Any], key: str, path: str, kind: type, what: str, optional: bool = True) -> Any:
        value = obj.get(key)
        if value is None and optional:
            return None
        if isinstance(value, kind) and not isinstance(value, bool):
            return value
        raise fault(f"{path}.{key} is {json_kind(value) if key in obj else 'missing'}, not {what}")

    if not isinstance(message, dict):
        raise fault(f"reply is {json_kind(message)}, not a message object")
    texts, calls, thoughts, items = [], [], [], []
    for i, block in enumerate(get(message, "content", "reply", list, "a list of blocks", optional=False)):
        path = f"content[{i}]"
        if not isinstance(block, dict):
            raise fault(f"{path} is {json_kind(block)}, not an object")
        kind = block.get("type")
        if kind == "text":
            texts.append(get(block, "text", path, str, "text", optional=False))
        elif kind == "tool_use":
            calls.append(
                ToolCall(
                    id=get(block, "id", path, str, "text", optional=False),
                    name=get(block, "name", path, str, "text", optional=False),
                    arguments=json.dumps(get(block, "input", path, dict, "an object") or {}),
                )
            )
        elif kind == "thinking":
            get(block, "signature", path, str, "text", optional=False)  # without it the block cannot go back
            thought = get(block, "thinking", path, str, "text") or ""
            if thought:
                thoughts.append(thought)
            items.append(block)
        elif kind == "redacted_thinking":
            get(block, "data", path, str, "text", optional=False)
            items.append(block)
    usage = get(message, "usage", "reply", dict, "an object") or {}
    counts = {}
    for key in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens", "output_tokens"):
        counts[key] = get(usage, key, "usage", int, "a whole number") or 0
        if counts[key] < 0:
            raise fault(f"usage.{key} is {counts[key]}, not a count")
    details = get(usage, "output_tokens_details", "usage", dict, "an object") or {}
    thinking_tokens = get(details, "thinking_tokens", "usage.output_tokens_details", int, "a whole number") or 0
    if not 0 <= thinking_tokens <= counts["output_tokens"]:
        raise fault(f"usage.output_tokens_details.thinking_tokens is {thinking_tokens}, not a part of output_tokens")
    reason = get(message, "stop_reason", "reply", str, "text")
    text = "".join(texts) if texts else None
    refusal = None
    if reason == "refusal":
        # the classifier's explanation where the reply has one, else what was said before the cut
        stop = message.get("stop_details") if isinstance(message.get("stop_details"), dict) else {}
        explanation = stop.get("explanation") if isinstance(stop.get("explanation"), str) else None
        refusal = explanation or text or "declined (stop_reason refusal)"
    return ModelResponse(
        content=text,
        tool_calls=calls,
        finish_reason=STOP_REASONS.get(reason, reason),
        usage=Usage(
            prompt_tokens=counts["input_tokens"]
            + counts["cache_creation_input_tokens"]
            + counts["cache_read_input_tokens"],
            completion_tokens=counts["output_tokens"],
            cache_read_tokens=counts["cache_read_input_tokens"],
            cache_write_tokens=counts["cache_creation_input_tokens"],
            reasoning_tokens=thinking_tokens,
        ),
        model=get(message, "model", "reply", str, "text"),
        reasoning="\n\n".join(thoughts) if thoughts else None,
        reasoning_items=items,
        refusal=refusal,
    )


def refused_param(message: str, sent: Mapping[str, Any]) -> str | None:
    """The sampling parameter a 400's ``message`` says the model does not take, of those ``sent``
    (the recorded wordings, ``REFUSED_PARAM`` / ``REFUSED_TOGETHER``); None for any other 400."""
    text = message.lower()
    if "top_p" in sent and "temperature" in sent and REFUSED_TOGETHER.lower() in text:
        return "top_p"  # "cannot both be specified": keep the temperature
    for param in sent:
        if REFUSED_PARAM.format(param=param).lower() in text:
            return param
    return None


# --------------------------------------------------------------------------- backend
@register_backend("anthropic")
class AnthropicBackend(ModelBackend):
    bills_per_token = True
    reasoning_knobs = frozenset({"reasoning_effort", "thinking_budget"})

    def __init__(self, model, options):
        super().__init__(model, options)
        self._clients: dict[int, tuple[Any, Any]] = {}
        self._sync_client: Any = None
        self._token_cache: dict[str, int] = {}
        self._probe_locks: dict[int, tuple[Any, asyncio.Lock]] = {}
        # The SDK itself falls back to ANTHROPIC_BASE_URL: read here, so it is sent, recorded and keyed alike.
        self.env_base_url = None if options.base_url else env_base_url(BASE_URL_ENV, API_KEY_ENV)
        self.base_url = options.base_url or self.env_base_url
        self.api_version = ANTHROPIC_VERSION
        # None: the table does not know the model; its sampling parameters are probed (start())
        self.facts: ModelFacts | None = facts_for("anthropic", model)
        self.probed: dict[str, bool] = {}  # sampling parameter -> taken (unknown models)
        self.probe_log: list[dict[str, Any]] = []

    # setup ---------------------------------------------------------------------
    def api_key(self) -> str:
        key = os.environ.get(API_KEY_ENV)
        if not key:
            raise ModelError(f"{API_KEY_ENV} is not set: export it to use anthropic/ models")
        return key

    def _sdk(self) -> Any:
        try:
            import anthropic
        except ImportError:
            raise ModelError("the anthropic backend needs the anthropic package: pip install anthropic") from None
        return anthropic

    def where(self) -> str:
        return f"Anthropic API at {strip_credentials(self.base_url)}" if self.base_url else "Anthropic API"

    def http_transport(self) -> str:
        """``--http-client`` resolved: aiohttp or httpx."""
        return resolve_http_client(self.options.http_client)

    def default_headers(self) -> dict[str, str]:
        """Sent with every SDK request: the pinned API version, not the installed SDK's."""
        return {"anthropic-version": self.api_version}

    def client(self) -> Any:
        loop = asyncio.get_running_loop()
        entry = self._clients.get(id(loop))
        if entry is not None and entry[0] is loop:
            return entry[1]
        anthropic = self._sdk()
        self._clients = {k: v for k, v in self._clients.items() if not v[0].is_closed()}
        client = anthropic.AsyncAnthropic(
            api_key=self.api_key(),
            base_url=self.base_url,
            max_retries=0,  # retries are ours
            timeout=self.options.request_timeout,  # per read; within_deadline bounds the whole request
            default_headers=self.default_headers(),
            http_client=capped_sdk_http_client(anthropic, self.options.max_response_bytes, self.http_transport()),
        )
        self._clients[id(loop)] = (loop, client)
        return client

    async def start(self) -> None:
        self.api_key()
        self._sdk()
        from harness.models.openai_compat import check_reachable

        await check_reachable((self.base_url or DEFAULT_BASE_URL).rstrip("/") + "/v1")
        if self.facts is None:  # before any sample: what the model refuses is known, not met
            from harness.models.retry import retrying

            await retrying(
                lambda: self.ensure_probed(self.run_params or GenerationParams()),
                self.options.max_attempts,
                self.options.retry_max_wait,
            )

    async def close(self) -> None:
        clients, self._clients = self._clients, {}
        await close_loop_clients(clients)
        sync, self._sync_client = self._sync_client, None
        if sync is not None:
            try:
                sync.close()
            except Exception:
                pass

    # what a request carries ------------------------------------------------------
    def thinking_mode(self) -> str:
        """never / optional / always from the facts; ``unknown`` for a model the table lacks."""
        return self.facts.thinking if self.facts is not None else "unknown"

    def check_params(self, params: GenerationParams) -> None:
        """The thinking budget against the model's facts, one line (``ModelError``) before any request."""
        super().check_params(params)
        budget, mode, name = params.thinking_budget, self.thinking_mode(), f"anthropic/{self.model}"
        effort = params.reasoning_effort
        efforts = self.facts.reasoning_efforts if self.facts is not None else None
        if effort is not None and self.facts is not None and not efforts:
            raise ModelError(
                f"--reasoning-effort {effort}: {name} takes no effort (harness/models/model_facts.yaml lists none); "
                "drop --reasoning-effort"
            )
        if effort is not None and efforts and effort not in efforts:
            raise ModelError(f"--reasoning-effort {effort}: {name} takes {', '.join(efforts)}")
        if budget is None:
            return
        if self.adaptive_only():
            raise ModelError(
                f"--thinking-budget {budget}: {name} refuses a thinking budget (it thinks adaptively); "
                "drop --thinking-budget, and pass --reasoning-effort to turn its thinking on"
            )
        if mode == "never":
            raise ModelError(
                f"--thinking-budget {budget}: {name} does not think (thinking: never in "
                "harness/models/model_facts.yaml); drop --thinking-budget"
            )
        if mode == "always":
            raise ModelError(
                f"--thinking-budget {budget}: {name} always thinks, adaptively (the API refuses a budget for it); "
                "drop --thinking-budget"
            )
        least = (self.facts.min_thinking_budget if self.facts is not None else None) or MIN_THINKING_BUDGET
        if budget < least:
            raise ModelError(f"--thinking-budget {budget}: {name} takes a thinking budget of at least {least} tokens")
        if budget >= params.max_tokens:
            raise ModelError(
                f"--thinking-budget {budget} must be below --max-tokens {params.max_tokens}: the thinking is "
                "part of the answer's token budget"
            )

    def thinking(self, params: GenerationParams) -> dict[str, Any] | None:
        """The ``thinking`` object of a request (None: none sent)."""
        if self.thinking_mode() == "always":
            return dict(ADAPTIVE_THINKING)
        if params.thinking_budget is not None:
            return {"type": "enabled", "budget_tokens": params.thinking_budget}
        if params.reasoning_effort is not None and self.adaptive_only():
            # a model that takes no budget thinks adaptively when an effort is asked (claude-opus-5's
            # recorded request: thinking adaptive with output_config.effort)
            return dict(ADAPTIVE_THINKING)
        return None

    def adaptive_only(self) -> bool:
        """Thinking is optional but the API refuses a budget (facts: min_thinking_budget null)."""
        return self.facts is not None and self.facts.thinking == "optional" and self.facts.min_thinking_budget is None

    def wanted_sampling(self, params: GenerationParams) -> dict[str, float]:
        """The sampling parameters a request with ``params`` would carry where the model takes them:
        the temperature, top_p when not 1.0; with thinking on only a top_p from 0.95 up."""
        if self.thinking(params) is not None:
            top_p = params.top_p
            return {"top_p": top_p} if THINKING_TOP_P_FLOOR <= top_p < 1.0 else {}
        wanted = {"temperature": params.temperature}
        if params.top_p != 1.0:
            wanted["top_p"] = params.top_p
        return wanted

    def takes(self, param: str) -> bool | None:
        """Whether the model takes ``param``: its facts, else what the probe found (None: not probed)."""
        if self.facts is not None:
            return self.facts.takes(param)
        return self.probed.get(param)

    def sampling(self, params: GenerationParams) -> dict[str, float]:
        wanted = self.wanted_sampling(params)
        unprobed = [p for p in wanted if self.takes(p) is None]
        if unprobed:  # the batch path builds requests without a chance to probe first
            raise ModelError(
                f"anthropic/{self.model} is not in harness/models/model_facts.yaml and was not probed for "
                f"{', '.join(unprobed)}: add it to the table, or run without --batch"
            )
        return {p: v for p, v in wanted.items() if self.takes(p)}

    def request_kwargs(
        self, messages, params: GenerationParams, tools=None, tool_choice=None, prompt_cache: bool | None = None
    ) -> dict[str, Any]:
        """The ``messages.create`` arguments for one request (``prompt_cache``: default the option)."""
        self.check_params(params)
        facts = self.facts
        return to_anthropic_request(
            self.model,
            messages,
            params,
            tools,
            tool_choice,
            sampling=self.sampling(params),
            thinking=self.thinking(params),
            effort=params.reasoning_effort,
            prompt_cache=self.options.prompt_cache if prompt_cache is None else prompt_cache,
            cache_min_tokens=(facts.cache_min_tokens if facts is not None else None) or 0,
        )

    # the pre-flight probe (models the table does not know) ----------------------
    def _probe_lock(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        held = self._probe_locks.get(id(loop))
        if held is None or held[0] is not loop:
            held = (loop, asyncio.Lock())
            self._probe_locks = {id(loop): held}
        return held[1]

    async def ensure_probed(self, params: GenerationParams) -> None:
        """For a model the table does not know: the sampling parameters ``params`` would send that
        have not been tried yet, tried in tiny requests of their own (``max_tokens`` 1) until none is
        refused. Found once; recorded in ``probe_log``. Any other error is the request's own
        (a 404 for a model that does not exist: one line, before any sample)."""
        if self.facts is not None:
            return
        if all(p in self.probed for p in self.wanted_sampling(params)):
            return
        async with self._probe_lock():
            wanted = self.wanted_sampling(params)
            if all(p in self.probed for p in wanted):
                return
            anthropic, client, where = self._sdk(), self.client(), self.where()
            send = {p: v for p, v in wanted.items() if self.probed.get(p, True)}
            while send:
                try:
                    await within_deadline(
                        client.messages.with_raw_response.create(
                            model=self.model, max_tokens=1, messages=PROBE_MESSAGES, extra_body=send
                        ),
                        self.options.request_timeout,
                        where,
                    )
                except anthropic.APIError as exc:
                    from harness.models.openai_compat import error_message

                    refused = (
                        refused_param(error_message(exc), send) if getattr(exc, "status_code", None) == 400 else None
                    )
                    if refused is None:
                        raise map_api_error(exc, anthropic, where, self.model) from exc
                    self.probed[refused] = False
                    self.probe_log.append(
                        {"sent": dict(send), "status": 400, "refused": refused, "error": error_message(exc)}
                    )
                    del send[refused]
                    if all(p in self.probed for p in send):
                        break  # what is left was taken before
                    continue
                self.probed.update({p: True for p in send})
                self.probe_log.append({"sent": dict(send), "status": 200})
                break

    def probe_facts(self) -> dict[str, Any] | None:
        if self.facts is not None or not self.probe_log:
            return None
        return {
            "why": f"anthropic/{self.model} is not in harness/models/model_facts.yaml",
            "takes": sorted(p for p, ok in self.probed.items() if ok),
            "refuses": sorted(p for p, ok in self.probed.items() if not ok),
            "requests": [dict(x) for x in self.probe_log],
        }

    # generation ----------------------------------------------------------------
    async def _generate(self, messages, params: GenerationParams, tools=None, tool_choice=None) -> ModelResponse:
        self.check_params(params)
        await self.ensure_probed(params)
        anthropic = self._sdk()
        client = self.client()
        kwargs = self.request_kwargs(messages, params, tools, tool_choice)
        where = self.where()
        try:
            raw = await within_deadline(
                client.messages.with_raw_response.create(**kwargs), self.options.request_timeout, where
            )
        except ReplyRejected as exc:  # the body was over the cap or unreadable
            raise rejected_reply(exc, where) from None
        except anthropic.APIError as exc:
            if caused_by(exc, ReplyRejected) is not None:  # older SDKs wrap what the body stream raised
                raise rejected_reply(exc, where) from None
            raise map_api_error(exc, anthropic, where, self.model) from exc
        # parsed here, not by the SDK: its lenient models turn a malformed reply into an empty answer
        return from_anthropic_message(reply_json(raw.http_response, where), where)

    # facts ---------------------------------------------------------------------
    def context_size(self) -> int | None:
        if self.options.context_size:
            return self.options.context_size
        return self.facts.input_limit if self.facts is not None else None

    def max_context_size(self) -> int | None:
        return self.facts.context_window if self.facts is not None else None

    def count_tokens(self, text: str) -> int:
        """Input tokens of one user message holding ``text`` (``/v1/messages/count_tokens``)."""
        if text in self._token_cache:
            return self._token_cache[text]
        if not os.environ.get(API_KEY_ENV):
            raise ModelError(
                f"token counting for Anthropic models needs the API (no offline tokenizer): set {API_KEY_ENV}"
            )
        anthropic = self._sdk()
        if self._sync_client is None:
            self._sync_client = anthropic.Anthropic(
                api_key=self.api_key(),
                base_url=self.base_url,
                max_retries=2,
                timeout=60.0,
                default_headers=self.default_headers(),
            )
        try:
            result = self._sync_client.messages.count_tokens(
                model=self.model, messages=[{"role": "user", "content": text or " "}]
            )
        except anthropic.APIError as exc:
            err = map_api_error(exc, anthropic, self.where(), self.model)
            raise ModelError(f"cannot count tokens: {err}") from exc
        if len(self._token_cache) < 10_000:
            self._token_cache[text] = result.input_tokens
        return result.input_tokens

    def tokenizer_name(self) -> str:
        return f"anthropic-api:{self.model}"

    def endpoint(self) -> str | None:
        return strip_credentials(self.base_url or DEFAULT_BASE_URL)

    def identity_facts(self) -> dict[str, Any]:
        facts = endpoint_fact(self.env_base_url, DEFAULT_BASE_URL)
        if self.api_version != NEUTRAL_ANTHROPIC_VERSION:  # another API version may answer otherwise
            facts["anthropic_version"] = self.api_version
        return facts

    def usage_facts(self) -> dict[str, Any]:
        # a probe made after describe() was read (a top_p first seen in a request)
        probe = self.probe_facts()
        return {"probe": probe} if probe else {}

    def describe(self) -> dict[str, Any]:
        info = super().describe()
        info["anthropic_version"] = self.api_version
        info["ignored_params"] = ["seed"]
        info["http_client"] = self.http_transport()
        info["facts"] = self.facts.describe() if self.facts is not None else None
        info["thinking"] = self.thinking_mode()
        if self.facts is None:
            info["facts_note"] = (
                f"anthropic/{self.model} is not in harness/models/model_facts.yaml: its context window is "
                "unknown (--context-size sets one) and its sampling parameters were probed"
            )
        cache_min = self.facts.cache_min_tokens if self.facts is not None else None
        info["prompt_cache"] = {"enabled": self.options.prompt_cache, "min_tokens": cache_min}
        probe = self.probe_facts()
        if probe:
            info["probe"] = probe
        return info


__all__ = [
    "ANTHROPIC_VERSION",
    "API_KEY_ENV",
    "AnthropicBackend",
    "add_cache_breakpoints",
    "from_anthropic_message",
    "min_cacheable_tokens",
    "refused_param",
    "to_anthropic_messages",
    "to_anthropic_request",
    "to_anthropic_tool_choice",
    "to_anthropic_tools",
    "wire_body",
]
