"""``anthropic/MODEL``: Anthropic's Messages API through the official ``anthropic`` SDK.

The harness speaks the OpenAI chat format; it is converted here (``to_anthropic_request``):
system messages -> ``system``; function tools -> ``{name, description, input_schema}``; assistant
``tool_calls`` -> ``tool_use`` blocks; ``role: "tool"`` messages -> ``tool_result`` blocks in a user
turn; a named ``tool_choice`` -> ``{"type": "tool", "name": ...}``. Consecutive turns of one role are
merged (the API wants them alternating).

Sampling: the Messages API has no ``seed`` (ignored). ``anthropic`` >= 1.0 dropped ``temperature``
and ``top_p`` from its signature and recent models reject them, so they are sent via ``extra_body``
and, when a model answers 400 "`temperature` ... not supported/deprecated", dropped for the rest of
the run (recorded in ``describe()["dropped_params"]``). ``top_p`` is only sent when it is not 1.0
(some models refuse both together).

Prompt caching (``--no-prompt-cache`` turns it off): ``cache_control`` breakpoints on the shared
prefix (``add_cache_breakpoints``); the reply's cache reads and writes are recorded in ``Usage`` and
priced at their own rates.

Replies are read as in ``openai_compat``: a byte cap while reading, one deadline per request, and a
reply that is not a message (``content`` not a list of blocks, an HTML page) a transient fault.

``count_tokens`` calls the API's ``/v1/messages/count_tokens`` (a user message holding the text; it
includes a few tokens of message framing), so it needs ``ANTHROPIC_API_KEY`` and network access.
"""

from __future__ import annotations

import json
import os
import re
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
from harness.models.http_reply import (
    ReplyRejected,
    capped_sdk_http_client,
    caused_by,
    json_kind,
    reply_json,
    resolve_http_client,
    within_deadline,
)
from harness.models.openai_compat import map_api_error

API_KEY_ENV = "ANTHROPIC_API_KEY"
BASE_URL_ENV = "ANTHROPIC_BASE_URL"
DEFAULT_BASE_URL = "https://api.anthropic.com"
DEFAULT_CONTEXT = 200_000

STOP_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
    "model_context_window_exceeded": "length",
}

# Prompt caching: the shortest prefix (tokens) each model caches, from Anthropic's prompt-caching
# page (longest matching name prefix; others 1024). A shorter prefix marked is simply not cached.
MIN_CACHEABLE_TOKENS = {
    "claude-opus-4-6": 4096,
    "claude-opus-4-5": 4096,
    "claude-haiku-4-5": 4096,
    "claude-sonnet-4-6": 2048,
    "claude-3-5-haiku": 2048,
    "claude-3-haiku": 2048,
}
DEFAULT_MIN_CACHEABLE_TOKENS = 1024
# what a prefix may hold beside its bytes (a token is at least one byte): role framing per turn, and
# the tool-use system prompt the API adds when tools are sent (a few hundred tokens)
FRAMING_TOKENS = 8
TOOL_PROMPT_TOKENS = 600

_SAMPLING_REJECTED = re.compile(
    r"`?(temperature|top_p|top_k)`?[^.]*\b(deprecated|not supported|unsupported|cannot)", re.I
)


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
            blocks: list[dict[str, Any]] = []
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


def min_cacheable_tokens(model: str) -> int:
    name = model.lower()
    for prefix in sorted(MIN_CACHEABLE_TOKENS, key=len, reverse=True):
        if name.startswith(prefix):
            return MIN_CACHEABLE_TOKENS[prefix]
    return DEFAULT_MIN_CACHEABLE_TOKENS


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
            message["content"][-1]["cache_control"] = {"type": "ephemeral"}
            marked += 1
    return marked


def to_anthropic_request(
    model: str,
    messages: list[dict[str, Any]],
    params: GenerationParams,
    tools: list[dict[str, Any]] | None = None,
    tool_choice: Any = None,
    dropped: set[str] | frozenset[str] = frozenset(),
    prompt_cache: bool = False,
) -> dict[str, Any]:
    """Keyword arguments for ``client.messages.create`` (``seed`` has no equivalent: ignored);
    ``prompt_cache``: with ``cache_control`` breakpoints (``add_cache_breakpoints``)."""
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
        add_cache_breakpoints(kwargs, min_cacheable_tokens(model))
    extra: dict[str, Any] = {}
    if "temperature" not in dropped:
        extra["temperature"] = params.temperature
    if params.top_p != 1.0 and "top_p" not in dropped:
        extra["top_p"] = params.top_p
    if extra:
        kwargs["extra_body"] = extra
    return kwargs


def from_anthropic_message(message: Any, where: str = "Anthropic API") -> ModelResponse:
    """An Anthropic ``Message`` (the parsed JSON, or an SDK object) -> ``ModelResponse``. A reply that
    is not one (no content list, a block of the wrong type) is a ``TransientModelError`` naming the
    field: retried, never passed off as an (empty) answer."""
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
    texts, calls = [], []
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
    usage = get(message, "usage", "reply", dict, "an object") or {}
    counts = {}
    for key in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens", "output_tokens"):
        counts[key] = get(usage, key, "usage", int, "a whole number") or 0
        if counts[key] < 0:
            raise fault(f"usage.{key} is {counts[key]}, not a count")
    reason = get(message, "stop_reason", "reply", str, "text")
    return ModelResponse(
        content="".join(texts) if texts else None,
        tool_calls=calls,
        finish_reason=STOP_REASONS.get(reason, reason),
        usage=Usage(
            prompt_tokens=counts["input_tokens"]
            + counts["cache_creation_input_tokens"]
            + counts["cache_read_input_tokens"],
            completion_tokens=counts["output_tokens"],
            cache_read_tokens=counts["cache_read_input_tokens"],
            cache_write_tokens=counts["cache_creation_input_tokens"],
        ),
        model=get(message, "model", "reply", str, "text"),
    )


# --------------------------------------------------------------------------- backend
@register_backend("anthropic")
class AnthropicBackend(ModelBackend):
    bills_per_token = True

    def __init__(self, model, options):
        super().__init__(model, options)
        self._clients: dict[int, tuple[Any, Any]] = {}
        self._sync_client: Any = None
        self.dropped_params: set[str] = set()
        self._token_cache: dict[str, int] = {}
        # The SDK itself falls back to ANTHROPIC_BASE_URL: read here, so it is sent, recorded and keyed alike.
        self.env_base_url = None if options.base_url else env_base_url(BASE_URL_ENV, API_KEY_ENV)
        self.base_url = options.base_url or self.env_base_url

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
        return (
            f"Anthropic API at {strip_credentials(self.base_url)}" if self.base_url else "Anthropic API"
        )

    def http_transport(self) -> str:
        """``--http-client`` resolved: aiohttp or httpx."""
        return resolve_http_client(self.options.http_client)

    def client(self) -> Any:
        import asyncio

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
            http_client=capped_sdk_http_client(anthropic, self.options.max_response_bytes, self.http_transport()),
        )
        self._clients[id(loop)] = (loop, client)
        return client

    async def start(self) -> None:
        self.api_key()
        self._sdk()
        from harness.models.openai_compat import check_reachable

        await check_reachable((self.base_url or DEFAULT_BASE_URL).rstrip("/") + "/v1")

    async def close(self) -> None:
        clients, self._clients = self._clients, {}
        await close_loop_clients(clients)
        sync, self._sync_client = self._sync_client, None
        if sync is not None:
            try:
                sync.close()
            except Exception:
                pass

    # generation ----------------------------------------------------------------
    async def _generate(self, messages, params: GenerationParams, tools=None, tool_choice=None) -> ModelResponse:
        anthropic = self._sdk()
        client = self.client()
        for _ in range(3):  # at most: drop temperature, then top_p
            kwargs = to_anthropic_request(
                self.model, messages, params, tools, tool_choice, self.dropped_params, self.options.prompt_cache
            )
            where = self.where()
            try:
                raw = await within_deadline(
                    client.messages.with_raw_response.create(**kwargs), self.options.request_timeout, where
                )
            except ReplyRejected as exc:  # the body was over the cap or unreadable
                raise type(exc)(f"{where}: {exc}") from exc
            except anthropic.APIError as exc:
                unreadable = caused_by(exc, ReplyRejected)  # older SDKs wrap what the body stream raised
                if unreadable is not None:
                    raise type(unreadable)(f"{where}: {unreadable}") from unreadable
                rejected = self._rejected_param(exc, kwargs)
                if rejected:
                    self.dropped_params.add(rejected)
                    continue
                raise map_api_error(exc, anthropic, where, self.model) from exc
            # parsed here, not by the SDK: its lenient models turn a malformed reply into an empty answer
            return from_anthropic_message(reply_json(raw.http_response, where), where)
        raise ModelError(f"{self.where()} rejected the sampling parameters of {self.model}")

    @staticmethod
    def _rejected_param(exc: Exception, kwargs: dict[str, Any]) -> str | None:
        """``temperature``/``top_p`` when a 400 says the model does not take it (and we sent it)."""
        if getattr(exc, "status_code", None) != 400:
            return None
        from harness.models.openai_compat import error_message

        message, sent = error_message(exc), kwargs.get("extra_body", {})
        if "top_p" in sent and "temperature" in message and "top_p" in message and "both" in message:
            return "top_p"  # "temperature and top_p cannot both be specified": keep the temperature
        match = _SAMPLING_REJECTED.search(message)
        if match and match.group(1).lower() in sent:
            return match.group(1).lower()
        return None

    # facts ---------------------------------------------------------------------
    def context_size(self) -> int | None:
        if self.options.context_size:
            return self.options.context_size
        return DEFAULT_CONTEXT if self.model.startswith("claude") else None

    def max_context_size(self) -> int | None:
        return DEFAULT_CONTEXT if self.model.startswith("claude") else None

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
                api_key=self.api_key(), base_url=self.base_url, max_retries=2, timeout=60.0
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
        return endpoint_fact(self.env_base_url, DEFAULT_BASE_URL)

    def usage_facts(self) -> dict[str, Any]:
        # found while the run went (describe() is read before the first request)
        return {"dropped_params": sorted(self.dropped_params)} if self.dropped_params else {}

    def describe(self) -> dict[str, Any]:
        info = super().describe()
        info["ignored_params"] = ["seed"]
        info["http_client"] = self.http_transport()
        info["prompt_cache"] = {"enabled": self.options.prompt_cache, "min_tokens": min_cacheable_tokens(self.model)}
        if self.dropped_params:
            info["dropped_params"] = sorted(self.dropped_params)
        return info


__all__ = [
    "API_KEY_ENV",
    "AnthropicBackend",
    "add_cache_breakpoints",
    "from_anthropic_message",
    "min_cacheable_tokens",
    "to_anthropic_messages",
    "to_anthropic_request",
    "to_anthropic_tool_choice",
    "to_anthropic_tools",
]
