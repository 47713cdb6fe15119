"""The model backend interface: one file per backend, registered by name prefix.

A model is named ``PREFIX/REST`` (``local/smollm2``, ``openai/gpt-4o``, ``vllm/Qwen/Qwen2.5-7B``);
the prefix picks the backend class, ``REST`` is handed to it as ``model``.
Messages use the OpenAI chat format (role/content/tool_calls/tool_call_id) throughout; a backend
with another wire format converts at its edge.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from abc import ABC, abstractmethod
from contextlib import asynccontextmanager
from contextvars import ContextVar
from typing import Any, AsyncIterator, ClassVar, Literal


from pydantic import BaseModel, ConfigDict, Field, field_serializer, field_validator, model_serializer

from harness.errors import ModelError, TransientModelError
from harness.models.usage_bounds import check_usage
from harness.redact import (
    http_url_parts,
    register_url_credentials,
    split_urls,
    strip_credentials,
    url_credential_problem,
)
from harness.registry import Registry
from harness.text import counted_as_sent, sendable

log = logging.getLogger(__name__)


# Upper bounds catch typos (an extra zero) and values no server accepts, before anything runs.
WEEK_S = 7 * 24 * 3600.0
# A reply body larger than this is refused as it is read: ~1,000x a 4k-token answer, far above any
# provider's output limit (OpenAI's 128k tokens is ~0.5 MB), small enough that a bomb costs little memory.
DEFAULT_MAX_RESPONSE_BYTES = 16 * 2**20


def available_cores() -> int:
    """Cores this process may run on (its CPU affinity), not every core of the machine."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


class WaitClock:
    """Seconds a sample spent with a request queued for a turn (a request slot, the local
    model) and none running: the runner's per-sample timeout does not count them."""

    def __init__(self, clock=time.monotonic) -> None:
        self._clock = clock
        self._done_s = 0.0
        self._queued = 0
        self._since = 0.0

    def waited_s(self) -> float:
        return self._done_s + (self._clock() - self._since if self._queued else 0.0)

    def queue(self) -> None:
        if not self._queued:
            self._since = self._clock()
        self._queued += 1

    def unqueue(self) -> None:
        self._queued -= 1
        if not self._queued:
            self._done_s += self._clock() - self._since


# Set by the runner around one sample; the tasks a sample starts inherit it.
WAIT_CLOCK: ContextVar[WaitClock | None] = ContextVar("harness_wait_clock", default=None)


@asynccontextmanager
async def waiting_for_turn(acquire) -> AsyncIterator[Any]:
    """``async with acquire``, the time until it is entered counted on the sample's wait clock."""
    clock = WAIT_CLOCK.get()
    if clock is None:
        async with acquire as held:
            yield held
        return
    clock.queue()
    queued = True
    try:
        async with acquire as held:
            clock.unqueue()
            queued = False
            yield held
    finally:
        if queued:
            clock.unqueue()


class GenerationParams(BaseModel):
    """Decoding knobs. Greedy by default so runs are repeatable."""

    model_config = ConfigDict(allow_inf_nan=False)

    temperature: float = Field(0.0, ge=0, le=10)
    top_p: float = Field(1.0, gt=0, le=1)
    max_tokens: int = Field(512, ge=1, le=10_000_000)
    seed: int | None = Field(0, ge=0, le=2**32 - 1)
    # reasoning models (OpenAI reasoning.effort / reasoning_effort): None sends none, the provider's default
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = Field(
        None, json_schema_extra={"neutral": None}
    )
    # Anthropic extended thinking where it is optional: budget_tokens (None: thinking off); part of max_tokens
    thinking_budget: int | None = Field(None, ge=1024, le=10_000_000, json_schema_extra={"neutral": None})

    @model_serializer(mode="wrap")
    def _without_unset_reasoning(self, handler: Any) -> dict[str, Any]:
        # the reasoning knobs appear only when set: every response-cache key, judge record and run key
        # made before they existed stays the same
        data = handler(self)
        for name in ("reasoning_effort", "thinking_budget"):
            if data.get(name) is None:
                data.pop(name, None)
        return data


class BackendOptions(BaseModel):
    """How to reach or start a backend; recorded in results (never the API key itself). A
    ``base_url`` carrying a credential (``user:pass@``, ``?api_key=``) is refused: the key goes in
    the backend's key variable (see ``refuse_url_credentials``)."""

    model_config = ConfigDict(allow_inf_nan=False)

    base_url: str | None = None
    context_size: int | None = Field(
        None, ge=1, le=100_000_000, description="override the context size (tokens); llama.cpp n_ctx"
    )
    # one deadline for a whole request, its reply body included (not per socket read)
    request_timeout: float = Field(600.0, gt=0, le=WEEK_S)
    # bytes of a reply body (decompressed) read before the request fails as a transient fault
    max_response_bytes: int = Field(DEFAULT_MAX_RESPONSE_BYTES, ge=1024, le=2**40)
    max_attempts: int = Field(6, ge=1, le=100)
    retry_max_wait: float = Field(120.0, ge=0, le=WEEK_S)
    startup_timeout: float = Field(300.0, gt=0, le=WEEK_S)
    n_threads: int | None = Field(None, ge=1, le=4096)
    server_args: list[str] = Field(default_factory=list, description="extra flags passed to a launched server")
    # llama.cpp's extra buffer types (CPU weight repacking) for local/ and llamacpp-server/; auto: off
    # where AMX would be used (its AMX path segfaults, llama.cpp issue 20824), on elsewhere. Repacked
    # kernels round differently (greedy answers of a Q4_K model differ), so on/off are in the run key;
    # auto (neutral) is not, like the CPU a run happens to land on.
    weight_repack: Literal["auto", "on", "off"] = Field("auto", json_schema_extra={"neutral": "auto"})
    # Anthropic's prompt cache: cache_control breakpoints on the shared prefix (anthropic_api). It
    # changes the bill, never the answer: not hashed, like request_timeout. OpenAI's cache is automatic.
    prompt_cache: bool = True
    # --batch: requests go through the provider's batch interface (harness.models.batch), billed at its
    # batch price: in the run key (a run is billed one way); neutral, so earlier runs keep their keys
    batch: bool = Field(False, json_schema_extra={"neutral": False})
    # a batch is sent once no request has joined it for this long (seconds)
    batch_window: float = Field(1.0, gt=0, le=3600)
    batch_poll_interval: float = Field(30.0, gt=0, le=WEEK_S)
    # the HTTP transport of openai/, vllm/, llamacpp-server/ and anthropic/: aiohttp (the OpenAI
    # protocol sent on it directly, anthropic/ through its SDK) or httpx (through the SDKs); auto is
    # aiohttp where installed; same requests and reply checks either way, so not hashed
    http_client: Literal["auto", "aiohttp", "httpx"] = "auto"
    # vLLM launched by the harness: --tool-call-parser (default: the model family's, harness/models/model_facts.yaml)
    # and --reasoning-parser (default: the family's where it thinks); "none" launches without one
    tool_parser: str | None = Field(None, json_schema_extra={"neutral": None})
    reasoning_parser: str | None = Field(None, json_schema_extra={"neutral": None})

    @field_validator("base_url")
    @classmethod
    def _url_shape(cls, value: str | None) -> str | None:
        if value is None:
            return value
        # first, so a password is masked in the error below too
        register_url_credentials(value)
        urls = split_urls(value)
        seen: set[str] = set()
        for url in urls:
            if http_url_parts(url) is None:
                shown = f"{strip_credentials(url)!r}" if url else "an empty entry"
                where = " in the list" if len(urls) > 1 else ""
                raise ValueError(f"must be an http(s) URL like http://host:8000/v1, not {shown}{where}")
            refuse_url_credentials(url)
            key = strip_credentials(url).rstrip("/")
            if key in seen:
                raise ValueError(f"{strip_credentials(url)!r} is listed twice")
            seen.add(key)
        return value

    @property
    def base_urls(self) -> list[str]:
        """``--base-url`` as a list: one entry per server (``URL1,URL2``); empty when not given."""
        return split_urls(self.base_url)

    @field_serializer("base_url")
    def _no_credentials(self, value: str | None) -> str | None:
        return strip_credentials(value)


KEY_VARIABLES = "OPENAI_API_KEY, ANTHROPIC_API_KEY or VLLM_API_KEY"


def refuse_url_credentials(url: str | None, where: str = "", key_env: str = KEY_VARIABLES) -> None:
    """A credential in an endpoint URL, refused with one line: a user:password would be sent as Basic
    auth in place of the API key, and the URL is recorded with the run. Raises ValueError (pydantic
    reports it as the option's error); backends turn it into a ModelError."""
    problem = url_credential_problem(url)
    if problem:
        shown = f"{where + ': ' if where else ''}{strip_credentials(url)!r}"
        raise ValueError(f"{shown} carries {problem}; credentials in a URL are refused: pass the key in {key_env}")


def env_base_url(name: str, key_env: str) -> str | None:
    """The endpoint an SDK variable names (``OPENAI_BASE_URL``), refused with one line when it
    carries a credential, like ``--base-url``."""
    url = os.environ.get(name) or None
    try:
        refuse_url_credentials(url, name, key_env)
    except ValueError as exc:
        raise ModelError(str(exc)) from None
    return url


def endpoint_fact(env_url: str | None, default: str) -> dict[str, Any]:
    """The run key's and cache key's share of an endpoint named by the environment: ``--base-url``
    is hashed as an option already, and the default endpoint is the neutral value (the same server
    as none named, and the keys of the runs made before endpoints were keyed stay valid)."""
    endpoint = strip_credentials(env_url)
    if not endpoint or endpoint.rstrip("/") == default.rstrip("/"):
        return {}
    return {"endpoint": endpoint}


class ToolCall(BaseModel):
    id: str
    name: str
    arguments: str  # JSON text, as the OpenAI protocol carries it


class Usage(BaseModel):
    """Tokens of one or more requests. The cache counts are parts of ``prompt_tokens``: read from
    the provider's prompt cache (OpenAI ``cached_tokens``, Anthropic ``cache_read_input_tokens``)
    and written to it (Anthropic ``cache_creation_input_tokens``); each is priced at its own rate."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    # part of completion_tokens: hidden reasoning / thinking (OpenAI reasoning_tokens, Anthropic
    # output_tokens_details.thinking_tokens), billed as output
    reasoning_tokens: int = 0

    def add(self, other: "Usage") -> None:
        for name in type(self).model_fields:
            setattr(self, name, getattr(self, name) + getattr(other, name))


class ModelResponse(BaseModel):
    content: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)
    finish_reason: str | None = None
    usage: Usage = Field(default_factory=Usage)
    model: str | None = None
    latency_s: float = 0.0
    attempts: int = 1
    cached: bool = False
    server: str | None = None  # which of several servers (--base-url URL1,URL2) answered, credentials stripped
    # the reasoning a server returns beside the content (``reasoning_content``, a reasoning summary,
    # Anthropic's thinking text): never the answer
    reasoning: str | None = None
    # provider blocks that must go back unchanged in the next turn of a tool loop: OpenAI Responses
    # ``reasoning`` items (with encrypted_content), Anthropic ``thinking`` / ``redacted_thinking`` blocks
    # (with their signatures). Each backend sends back only the kinds it knows.
    reasoning_items: list[dict[str, Any]] = Field(default_factory=list)
    # the model declined (OpenAI ``refusal``, Anthropic ``stop_reason: refusal``): its text, kept
    refusal: str | None = None

    def as_message(self) -> dict[str, Any]:
        """The assistant message to append to a transcript (content "" not None with tool calls:
        llama.cpp's server rejects null content); the reasoning, if any, kept under
        ``reasoning_content`` (``clean_messages`` drops it from what is sent back)."""
        msg: dict[str, Any] = {"role": "assistant", "content": self.content or ""}
        if self.reasoning:
            msg["reasoning_content"] = self.reasoning
        if self.reasoning_items:
            msg["reasoning_items"] = [dict(item) for item in self.reasoning_items]
        if self.refusal:
            msg["refusal"] = self.refusal
        if self.tool_calls:
            msg["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in self.tool_calls
            ]
        return msg


class ModelBackend(ABC):
    """Subclasses implement ``_generate``; ``generate`` adds retries and timing."""

    prefix: ClassVar[str]
    # llama.cpp never returns tool calls with tool_choice "auto" (only when the tool is named):
    # agents read this to force the first call there, and record that they did.
    supports_auto_tool_choice: ClassVar[bool] = True
    # whether ``--base-url URL1,URL2`` (several servers, balanced) means something to this backend
    supports_server_list: ClassVar[bool] = False
    # whether its provider bills per token: an unpriced model is then unknown (cost None, --max-cost
    # refused) rather than free; False only for backends that run on the user's own hardware
    bills_per_token: ClassVar[bool] = True
    # one model in this process, one request at a time: the runner runs samples one after another
    # (interleaving them only queues requests and loses the model's prompt-prefix reuse)
    one_request_at_a_time: ClassVar[bool] = False
    # the reasoning knobs (GenerationParams fields) this backend sends; one it does not send is refused
    # before anything runs (check_params), never ignored
    reasoning_knobs: ClassVar[frozenset[str]] = frozenset()
    # whether a reply's usage is held to what its request could use (harness.models.usage_bounds);
    # off only where the usage is made up by hand (the scripted backend's scripts)
    checks_usage: ClassVar[bool] = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # every count (a plugin's too) is of the text as sent: a lone surrogate as U+FFFD (harness.text)
        own = cls.__dict__.get("count_tokens")
        if callable(own):
            cls.count_tokens = counted_as_sent(own)  # type: ignore[method-assign]

    def __init__(self, model: str, options: BackendOptions):
        self.model = model
        self.options = options
        self.plugin: dict[str, Any] = {}  # the registry entry it came from (create_backend sets it)
        # requests in flight, adapted to 429s (harness.models.concurrency.AdaptiveLimit); the runner
        # sets it, None means no limit beyond the caller's own
        self.limiter: Any = None
        # the run's decoding knobs, set by the runner before start(): a pre-flight probe sends what the
        # run will (None outside a run: the defaults)
        self.run_params: GenerationParams | None = None
        # where the logs of processes it starts (a model worker, a server) are kept; the runner
        # points it into the run directory, else they go to a temporary folder
        self.log_dir: Path | None = None
        self.replaced_surrogates = 0  # characters of requests sent as U+FFFD (``_sendable``)
        if len(options.base_urls) > 1 and not self.supports_server_list:
            raise ModelError(
                f"--base-url: a list of servers works with the OpenAI-compatible backends (openai/, vllm/), "
                f"not {getattr(self, 'prefix', type(self).__name__)}/"
            )

    # lifecycle -----------------------------------------------------------------
    async def start(self) -> None:
        """Load the model or launch/contact the server; raise ModelError if impossible."""

    async def close(self) -> None:
        """Release the model or stop a launched server. Must be safe to call twice."""

    def check_params(self, params: GenerationParams) -> None:
        """Refuse (``ModelError``, one line) decoding knobs this model cannot take, before anything is
        sent: the runner calls it once the backend is made, before ``start()``. Here: the reasoning
        knobs this backend does not send (``reasoning_knobs``)."""
        name = f"{getattr(self, 'prefix', type(self).__name__)}/{self.model}"
        for knob, flag, takers in REASONING_KNOBS:
            if getattr(params, knob) is not None and knob not in self.reasoning_knobs:
                raise ModelError(f"{flag}: {name} does not send it ({takers}); drop {flag}")

    # generation ----------------------------------------------------------------
    @abstractmethod
    async def _generate(
        self,
        messages: list[dict[str, Any]],
        params: GenerationParams,
        tools: list[dict[str, Any]] | None = None,
        tool_choice: Any = None,
    ) -> ModelResponse:
        """One request. Raise TransientModelError for failures worth retrying."""

    async def generate(
        self,
        messages: list[dict[str, Any]],
        params: GenerationParams,
        tools: list[dict[str, Any]] | None = None,
        tool_choice: Any = None,
    ) -> ModelResponse:
        from harness.models.retry import retrying

        start = time.monotonic()
        attempts = 0
        messages, tools = self._sendable(messages, tools)

        async def once() -> ModelResponse:
            nonlocal attempts
            attempts += 1
            limiter = self.limiter
            if limiter is None:
                response = await self._generate(messages, params, tools, tool_choice)
            else:
                # the slot is held for the request only: a Retry-After wait happens outside it
                async with waiting_for_turn(limiter.slot()) as slot:
                    try:
                        response = await self._generate(messages, params, tools, tool_choice)
                    except TransientModelError as exc:
                        if exc.status == 429:
                            limiter.throttled(slot)
                        raise
                    limiter.succeeded()
            self.check_usage(response, params, messages, tools)
            return response

        response = await retrying(once, self.options.max_attempts, self.options.retry_max_wait)
        response.latency_s = time.monotonic() - start
        response.attempts = attempts
        return response

    def check_usage(self, response: ModelResponse, params: GenerationParams, messages: Any, tools: Any) -> None:
        """Refuse (``TransientModelError``: a malformed reply, retried, never priced) a reply reporting
        usage its request could not have used (``harness.models.usage_bounds``)."""
        if self.checks_usage:
            where = f"{getattr(self, 'prefix', type(self).__name__)}/{self.model}"
            check_usage(response, params.max_tokens, messages, tools, self.usage_context, where)

    def usage_context(self) -> int | None:
        """The most tokens one request of this model can hold, for judging a reply's usage: the larger
        of its working context (``--context-size``, the server's) and its documented maximum; looked up
        once it is known (a model file's header is read once, not per reply)."""
        known = self.__dict__.get("_usage_context")
        if known is None:
            sizes = [size for size in (self.context_size(), self.max_context_size()) if size]
            known = max(sizes) if sizes else None
            if known is not None:
                self._usage_context = known
        return known

    def _sendable(self, messages: list[dict[str, Any]], tools: Any) -> tuple[list[dict[str, Any]], Any]:
        """``messages`` and ``tools`` as sent: a lone surrogate (a "\\ud800" escape in an earlier reply
        or in the dataset) as U+FFFD, counted in ``replaced_surrogates`` (``harness.text``)."""
        (messages, tools), n = sendable((messages, tools))
        if n:
            if not self.replaced_surrogates:
                log.warning(
                    "%s/%s: a request held %d lone surrogate(s) (a \\udXXX escape in a reply or the dataset) "
                    "that no request can carry: sent as U+FFFD (said once; results.json counts them, "
                    "model.replaced_surrogates)",
                    getattr(self, "prefix", type(self).__name__),
                    self.model,
                    n,
                )
            self.replaced_surrogates += n
        return messages, tools

    # facts ---------------------------------------------------------------------
    @abstractmethod
    def context_size(self) -> int | None:
        """Context window in tokens, from the server or model file when known."""

    def max_context_size(self) -> int | None:
        """The longest context this model takes, known before ``start()`` (its model file, the
        provider's documented size); None where only a started server can tell (vLLM refuses a
        ``--max-model-len`` its model cannot take)."""
        return None

    @abstractmethod
    def count_tokens(self, text: str) -> int:
        """Tokens in ``text`` by this model's own tokenizer (or the closest documented one)."""

    def tokenizer_name(self) -> str:
        return f"{self.prefix}:{self.model}"

    def context_size_warning(self) -> str | None:
        """A line to say before a run that packs pages, when the context size is a guess."""
        return None

    def server_slots(self) -> int | None:
        """Requests the server runs at a time, when it is known to be fixed (None: unknown or elastic)."""
        return None

    def usage_facts(self) -> dict[str, Any]:
        """Counters of this invocation recorded with the model facts at the end of a run (per server)."""
        return {}

    def endpoint(self) -> str | None:
        """The server the requests go to, credentials stripped (recorded as ``model.endpoint``);
        None for a backend with no server of its own to name (an embedded model, a launched server)."""
        return None

    def identity_facts(self) -> dict[str, Any]:
        """What tells this model apart that the run's options do not hold (an endpoint named by
        ``OPENAI_BASE_URL``, not ``--base-url``): part of the run key and the cache key."""
        return {}

    def cache_identity(self) -> dict[str, Any]:
        """What distinguishes this backend's answers in the response cache (never a key)."""
        identity = {"backend": self.prefix, "model": self.model, "base_url": strip_credentials(self.options.base_url)}
        return identity | self.identity_facts()

    def describe(self) -> dict[str, Any]:
        """Recorded in results.json."""
        info = {
            "backend": self.prefix,
            "model": self.model,
            "base_url": strip_credentials(self.options.base_url),
            "context_size": self.context_size(),
            "tokenizer": self.tokenizer_name(),
        }
        endpoint = self.endpoint()
        if endpoint is not None:
            info["endpoint"] = endpoint
        return info


# (GenerationParams field, its flag, who sends it) for check_params' one line
REASONING_KNOBS = (
    ("reasoning_effort", "--reasoning-effort", "it is sent by openai/, vllm/ and anthropic/"),
    ("thinking_budget", "--thinking-budget", "it is Anthropic's extended thinking: anthropic/ only"),
)


def chat_request_kwargs(
    messages: list[dict[str, Any]], params: GenerationParams, tools: list[dict[str, Any]] | None, tool_choice: Any
) -> dict[str, Any]:
    """The OpenAI-style chat request fields shared by the llama.cpp worker and the OpenAI SDK."""
    kwargs: dict[str, Any] = {
        "messages": messages,
        "temperature": params.temperature,
        "top_p": params.top_p,
        "max_tokens": params.max_tokens,
    }
    if params.seed is not None:
        kwargs["seed"] = params.seed
    if params.reasoning_effort is not None:  # chat completions' field (OpenAI, vLLM)
        kwargs["reasoning_effort"] = params.reasoning_effort
    if tools:
        kwargs["tools"] = tools
        if tool_choice is not None:
            kwargs["tool_choice"] = tool_choice
    return kwargs


async def close_loop_clients(clients: dict[int, tuple[Any, Any]]) -> None:
    """Close SDK clients made per event loop; only those of the running loop can be awaited."""
    import asyncio

    for loop, client in clients.values():
        try:
            if loop is asyncio.get_running_loop():
                await client.close()
        except Exception:  # closing is best effort
            pass


def _check_backend(obj: Any, ref: str) -> None:
    if not (isinstance(obj, type) and issubclass(obj, ModelBackend)):
        raise ModelError(f"backend {ref}: not a model backend (a subclass of harness.models.base.ModelBackend)")


# prefix -> "module:Class"; a backend's SDK is imported only when that backend is used
BACKENDS: Registry[type[ModelBackend]] = Registry(
    "model backend",
    group="harness.backends",
    builtins={
        "local": "harness.models.local:LocalLlamaBackend",
        "llamacpp-server": "harness.models.llamacpp_server:LlamaCppServerBackend",
        "vllm": "harness.models.vllm:VLLMBackend",
        "openai": "harness.models.openai_api:OpenAIBackend",
        "anthropic": "harness.models.anthropic_api:AnthropicBackend",
        "scripted": "harness.models.scripted:ScriptedBackend",
    },
    validate=_check_backend,
    name_attribute="prefix",
)

register_backend = BACKENDS.register


__all__ = [
    "BACKENDS",
    "BackendOptions",
    "DEFAULT_MAX_RESPONSE_BYTES",
    "GenerationParams",
    "ModelBackend",
    "ModelResponse",
    "ToolCall",
    "TransientModelError",
    "Usage",
    "endpoint_fact",
    "env_base_url",
    "refuse_url_credentials",
    "register_backend",
]
