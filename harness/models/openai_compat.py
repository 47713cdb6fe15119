"""Shared base for every backend that speaks the OpenAI chat-completions protocol.

``OpenAICompatibleBackend`` sends chat requests on aiohttp itself (``--http-client aiohttp``, the
default where aiohttp is installed: the SDK's request building cost ~80 % of a request's CPU) or
through the official ``openai`` SDK on httpx, its own retries turned off (``max_retries=0``):
``ModelBackend.generate`` retries ``TransientModelError`` itself, honouring the server's
``Retry-After``. Either way the errors are mapped here (a reply read on aiohttp is shaped as the
SDK shapes its errors, ``StatusReply``):

* 429 (except OpenAI's ``insufficient_quota``), 408, 409, 5xx, timeouts, dropped connections
  -> ``TransientModelError`` (with ``retry_after`` from ``retry-after-ms`` / ``Retry-After``);
  the server's ``x-should-retry: false`` makes it one that is not retried, ``x-should-retry: true``
  makes any other status transient (as the SDKs obey it: see ``map_status_error``);
* a 400/413/422 saying the prompt exceeds the context -> ``ContextOverflowError``;
* 401/403/404/other 4xx -> ``ModelError`` with a one-line message;
* a reply over ``--max-response-bytes`` (counted as it is read, decompressed), a request past
  ``--request-timeout`` (one deadline for all of it, body included), a 200 that is not JSON or not
  a chat completion (``message: null``, non-text ``content``) -> ``TransientModelError`` saying which
  (``harness.models.http_reply``), never a finished answer.

The automatic prompt cache's hits (``usage.prompt_tokens_details.cached_tokens``) are read into
``Usage.cache_read_tokens``, priced at the cached-input rate; what newer OpenAI models report written
to it (``cache_write_tokens``) into ``Usage.cache_write_tokens``; a reasoning model's hidden
reasoning (``completion_tokens_details.reasoning_tokens``) into ``Usage.reasoning_tokens``, and a
``message.refusal`` into ``ModelResponse.refusal``.

The SDK is imported lazily, only where it sends the requests (httpx).
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import re
import time
import uuid
from typing import Any, ClassVar, Mapping

from harness._version import __version__
from harness.errors import ModelError, TransientModelError
from harness.redact import redact, strip_credentials
from harness.models.base import (
    DEFAULT_MAX_RESPONSE_BYTES,
    GenerationParams,
    ModelBackend,
    ModelResponse,
    ToolCall,
    Usage,
    chat_request_kwargs,
    close_loop_clients,
)
from harness.models.http_reply import (
    ACCEPT_ENCODING,
    AiohttpSessions,
    DeadlineExpired,
    ReplyRejected,
    body_json,
    capped_event_hooks,
    capped_sdk_http_client,
    caused_by,
    env_proxy,
    json_kind,
    loads_reply,
    json_text,
    read_capped,
    rejected_reply,
    reply_json,
    resolve_http_client,
    within_deadline,
)
from harness.models.pool import Endpoint, ServerPool
from harness.text import json_bytes

log = logging.getLogger(__name__)

try:  # the runner catches this class; it lives in harness.errors
    from harness.errors import ContextOverflowError
except ImportError:  # pragma: no cover - older harness.errors

    class ContextOverflowError(ModelError):  # type: ignore[no-redef]
        """The prompt does not fit the model's context window."""


_OVERFLOW_RE = re.compile(
    r"context[ _-]?length|context window|maximum context|max_model_len|prompt is too long|"
    r"too many tokens|exceeds? the (model'?s? )?(maximum|context)|input is too long|"
    r"reduce the length of the (messages|prompt)",
    re.IGNORECASE,
)


# --------------------------------------------------------------------------- errors
# How the official SDKs decide, read in openai 3.57.0 and anthropic 2.14.0 (``_base_client.py``,
# ``_parse_retry_after_header``, ``_should_retry``, ``_calculate_retry_timeout``; Apache-2.0):
# ``retry-after-ms`` first, then ``Retry-After`` as seconds (floats allowed) or an HTTP date; a
# delay that is not above 0 means "use your own back-off"; ``x-should-retry: true`` / ``false``
# overrides the status-based decision (408, 409, 429, 5xx retried). Their bound on a long delay
# differs: openai does not retry past ``MAX_RETRY_AFTER_DELAY`` (120 s), anthropic waits whatever it
# is told. Ours is ``--retry-max-wait`` (default 120 s, openai's number): past it the request is
# not retried (``harness.models.retry``).
def parse_retry_after(headers: Mapping[str, str] | None, now: float | None = None) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``Retry-After`` (seconds or an HTTP date); a date
    in the past is 0; a number too large for a float is ``inf`` (a wait too long, never a short one);
    None where neither header says anything readable."""
    if not headers:
        return None
    try:
        ms = headers.get("retry-after-ms")
    except Exception:  # pragma: no cover - exotic header containers
        ms = None
    if ms:
        seconds = _seconds(ms, 1000.0)
        if seconds is not None:
            return seconds
    value = headers.get("retry-after")
    if not value:
        return None
    value = value.strip()
    seconds = _seconds(value, 1.0)
    if seconds is not None:
        return seconds
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when is None:
        return None
    return max(when.timestamp() - (time.time() if now is None else now), 0.0)


def _seconds(text: str, divisor: float) -> float | None:
    try:
        number = float(text)
    except ValueError:
        return None
    if number != number:  # nan says nothing
        return None
    return max(number / divisor, 0.0)


def should_retry_header(headers: Any) -> bool | None:
    """The server's own verdict, ``x-should-retry: true`` / ``false`` (not a standard header: the
    SDKs obey it over the status; they compare it exactly, we forgive case and spaces); None where it
    is absent or says something else."""
    if not headers:
        return None
    try:
        said = headers.get("x-should-retry")
    except Exception:  # pragma: no cover - exotic header containers
        return None
    said = said.strip().lower() if isinstance(said, str) else None
    return True if said == "true" else False if said == "false" else None


def _one_line(text: Any, limit: int = 500) -> str:
    """Server text for a message: one line, bounded, secrets masked (error bodies echo headers)."""
    text = " ".join(redact(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def error_message(exc: Exception) -> str:
    """The server's own error message (``error.message`` in the body) or the exception text."""
    body = getattr(exc, "body", None)
    if isinstance(body, Mapping):
        inner = body.get("error", body)
        if isinstance(inner, Mapping) and inner.get("message"):
            return _one_line(inner["message"])
        if isinstance(inner, str) and inner:
            return _one_line(inner)
        if body.get("detail"):
            return _one_line(body["detail"])
        if body.get("message"):
            return _one_line(body["message"])
    elif isinstance(body, str) and body.strip():
        return _one_line(body)
    return _one_line(getattr(exc, "message", None) or str(exc) or type(exc).__name__)


def _error_code(exc: Exception) -> str | None:
    code = getattr(exc, "code", None)
    if isinstance(code, str):
        return code
    body = getattr(exc, "body", None)
    if isinstance(body, Mapping):
        inner = body.get("error", body)
        if isinstance(inner, Mapping):
            for key in ("code", "type"):
                if isinstance(inner.get(key), str):
                    return inner[key]
    return None


def is_context_overflow(exc: Exception) -> bool:
    if _error_code(exc) == "context_length_exceeded":
        return True
    return bool(_OVERFLOW_RE.search(error_message(exc)))


def map_api_error(exc: Exception, sdk: Any, where: str, model: str | None = None) -> Exception:
    """Map an ``openai``/``anthropic`` SDK exception (same Stainless layout) to ours.

    ``sdk`` is the SDK module; ``where`` names the server in messages (e.g. "OpenAI API at URL").
    """
    dropped = _aiohttp_connection_error(exc)
    if isinstance(exc, sdk.APITimeoutError) and dropped is None:
        return TransientModelError(f"request to {where} timed out", status=None)
    if isinstance(exc, sdk.APIConnectionError):
        cause = dropped or exc.__cause__ or exc.__context__
        detail = f": {_one_line(cause)}" if cause else ""
        return TransientModelError(f"connection to {where} failed{detail}", status=None)
    if isinstance(exc, sdk.APIStatusError):
        return map_status_error(exc, exc.status_code, getattr(exc.response, "headers", None), where, model)
    if isinstance(exc, getattr(sdk, "APIResponseValidationError", ())):
        # a 200 the SDK cannot read (truncated, not the schema): transient, retried, then model_unavailable
        return TransientModelError(f"{where} returned a response that does not follow the API: {error_message(exc)}")
    return ModelError(f"{where}: {type(exc).__name__}: {error_message(exc)}")


def map_status_error(exc: Exception, status: int, headers: Any, where: str, model: str | None = None) -> Exception:
    """A reply of status ``status`` (not 2xx) as our error; ``exc`` carries its ``body``, ``message``
    and ``code`` as the SDKs' status errors do (``StatusReply`` for the replies read without one).
    ``headers`` are the reply's (aiohttp's or httpx's: both read case-insensitively): its
    ``Retry-After`` and ``x-should-retry``. ``x-should-retry: false`` on a status we would retry
    fails the request at once as a ``TransientModelError`` that is not retried: the server judged
    this request, not the backend, so the sample fails (``model_unavailable``, a rerun sends it again)
    and the run goes on. ``x-should-retry: true`` on any other status makes it transient (retried)."""
    msg = error_message(exc)
    verdict = should_retry_header(headers)
    wait = parse_retry_after(headers)
    if status == 429 and _error_code(exc) == "insufficient_quota":  # the account, not the request
        return ModelError(f"{where}: quota exceeded (429 insufficient_quota): {msg}")
    if status in (408, 409, 429) or status >= 500:
        said = f"{where} rate limited the request (429)" if status == 429 else f"{where} answered {status}"
        if verdict is False:
            return TransientModelError(
                f"{said} and said not to retry it (x-should-retry: false): {msg}",
                retry_after=wait, status=status, should_retry=False,
            )
        return TransientModelError(f"{said}: {msg}", retry_after=wait, status=status)
    if verdict is True:
        return TransientModelError(
            f"{where} answered {status} and said to retry it (x-should-retry: true): {msg}", retry_after=wait, status=status
        )
    if status in (400, 413, 422) and is_context_overflow(exc):
        return ContextOverflowError(f"prompt exceeds the context of {model or 'the model'} ({status}): {msg}")
    if status == 401:
        return ModelError(f"{where} rejected the API key (401): {msg}")
    if status == 403:
        return ModelError(f"{where} denied access (403): {msg}")
    if status == 404:
        return ModelError(f"{where}: model {model!r} or endpoint not found (404): {msg}")
    return ModelError(f"{where} rejected the request ({status}): {msg}")


class StatusReply(Exception):
    """A reply that is not 2xx, read past the SDK (``--http-client aiohttp``), shaped as the SDKs make
    their status errors from it: ``message`` "Error code: N - <error.message>", ``body`` the JSON's
    ``error`` object (or the whole JSON, or the text), ``code`` its ``code``."""

    def __init__(self, status: int, headers: Any, content: bytes):
        text = content.decode("utf-8", errors="replace").strip()
        message, body = f"Error code: {status}", text
        try:
            body = loads_reply(text)
        except ValueError:  # not JSON, or nested past any reply's depth
            pass
        else:
            error = body.get("error", body) if isinstance(body, Mapping) else None
            said = error.get("message") if isinstance(error, Mapping) else None
            if isinstance(said, str) and said:
                message += f" - {said}"
        super().__init__(message)
        self.status_code, self.headers, self.message = status, headers, message
        self.body = body.get("error", body) if isinstance(body, Mapping) else body
        code = self.body.get("code") if isinstance(self.body, dict) else None
        self.code = str(code) if code is not None else None


def _aiohttp_connection_error(exc: BaseException) -> BaseException | None:
    """The aiohttp error under an SDK error, when it is not a timeout: the vendored aiohttp
    transport maps every connection error (a dropped connection too) to httpx's ConnectTimeout."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if type(exc).__module__.startswith("aiohttp"):
            return None if isinstance(exc, TimeoutError) or "Timeout" in type(exc).__name__ else exc
        exc = exc.__cause__ or exc.__context__
    return None


async def check_reachable(url: str, timeout: float = 10.0) -> None:
    """A server nobody listens on (or a name that does not resolve) fails the run at once instead
    of every sample after retries. Only the connection counts: gateways differ in what GET /models
    answers, and no key is sent."""
    import httpx

    try:
        async with httpx.AsyncClient(
            timeout=timeout, trust_env=False, event_hooks=capped_event_hooks(DEFAULT_MAX_RESPONSE_BYTES)
        ) as client:
            await client.get(url.rstrip("/") + "/models")
    except TransientModelError:  # it answered (too much, or oddly): reachable
        pass
    except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
        raise ModelError(
            f"cannot reach the server at {strip_credentials(url)}: {_one_line(exc or type(exc).__name__)}"
        ) from None


def _positive_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    try:
        n = int(value)
    except (TypeError, ValueError):
        return None
    return n if n > 0 else None


def context_from_listing(listing: Any, model: str | None) -> tuple[int | None, str | None]:
    """(context size, where it was read) from a ``GET /v1/models`` answer: vLLM's ``max_model_len``,
    or the ``meta`` llama.cpp's server adds (``n_ctx`` where a server reports it, else ``n_ctx_train``,
    the trained length: an upper bound, used only when nothing better is known). The entry is the one
    whose ``id`` (or vLLM's ``root``) is ``model``, or the only one listed."""
    entries = [m for m in (listing.get("data") or []) if isinstance(m, dict)] if isinstance(listing, dict) else []
    entry = next((m for m in entries if model is not None and model in (m.get("id"), m.get("root"))), None)
    if entry is None and len(entries) == 1:
        entry = entries[0]
    if entry is None:
        return None, None
    size = _positive_int(entry.get("max_model_len"))
    if size:
        return size, "server /v1/models max_model_len"
    meta = entry.get("meta") if isinstance(entry.get("meta"), dict) else {}
    for key in ("n_ctx", "n_ctx_train"):
        size = _positive_int(meta.get(key))
        if size:
            return size, f"server /v1/models meta.{key}"
    return None, None


def context_from_props(props: Any) -> int | None:
    """llama.cpp's ``GET /props``: ``default_generation_settings.n_ctx`` (the context of one slot,
    what one request may use), or a top-level ``n_ctx``."""
    if not isinstance(props, dict):
        return None
    settings = props.get("default_generation_settings")
    if isinstance(settings, dict) and _positive_int(settings.get("n_ctx")):
        return _positive_int(settings.get("n_ctx"))
    return _positive_int(props.get("n_ctx"))


async def discover_context_size(
    url: str, model: str | None, api_key: str | None = None, timeout: float = 10.0
) -> tuple[int | None, str | None]:
    """The context window an OpenAI-compatible server reports for ``model``, and where it said so:
    llama.cpp's ``/props`` (the window a request really gets) first, then ``/v1/models`` (vLLM's
    ``max_model_len``, llama.cpp's ``meta``). (None, None) where the server reports nothing
    (llama-cpp-python's server, OpenAI's API) or cannot be read: the caller then needs --context-size."""
    import httpx

    from harness.models.launcher import server_root

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}

    async def get_json(client: Any, target: str) -> Any:
        try:
            resp = await client.get(target)
            return loads_reply(resp.content) if resp.status_code == 200 else None
        except (httpx.HTTPError, ValueError, TransientModelError):
            return None

    hooks = capped_event_hooks(DEFAULT_MAX_RESPONSE_BYTES)
    async with httpx.AsyncClient(timeout=timeout, headers=headers, trust_env=False, event_hooks=hooks) as client:
        size = context_from_props(await get_json(client, server_root(url) + "/props"))
        if size:
            return size, "server /props default_generation_settings.n_ctx"
        return context_from_listing(await get_json(client, url.rstrip("/") + "/models"), model)


# --------------------------------------------------------------------------- messages
def clean_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Copies fit for any OpenAI-compatible server: ``content: ""`` (not null) on assistant
    messages that carry tool calls (llama.cpp rejects null), no ``reasoning_content``."""
    out = []
    for msg in messages:
        msg = dict(msg)
        if msg.get("role") == "assistant" and msg.get("content") is None:
            msg["content"] = ""
        msg.pop("reasoning_content", None)  # kept in the transcript, never sent back (DeepSeek refuses it)
        msg.pop("reasoning_items", None)  # another API's blocks (Responses, Anthropic): chat completions has none
        msg.pop("refusal", None)
        out.append(msg)
    return out


class _Shape:
    """Reads fields of a parsed reply; one of the wrong JSON type is a transient fault that says
    where it was and what came instead (``choices[0].message is null``)."""

    def __init__(self, where: str):
        self.where = where

    def fault(self, text: str) -> TransientModelError:
        return TransientModelError(f"{self.where}: {text}")

    def get(self, obj: dict[str, Any], key: str, path: str, kinds: tuple[type, ...], what: str, optional: bool = True):
        """``obj[key]`` if it is one of ``kinds`` (or None, when ``optional``)."""
        value = obj.get(key)
        if value is None and optional:
            return None
        if isinstance(value, kinds) and not isinstance(value, bool):
            return value
        raise self.fault(f"{path}.{key} is {json_kind(value) if key in obj else 'missing'}, not {what}")

    def count(self, usage: dict[str, Any], key: str, path: str = "usage") -> int:
        value = self.get(usage, key, path, (int,), "a whole number")
        if value is not None and value < 0:
            raise self.fault(f"{path}.{key} is {value}, not a count")
        return value or 0


def response_from_completion(completion: Any, where: str = "server") -> ModelResponse:
    """An OpenAI chat completion (the parsed JSON, or an SDK object) -> ``ModelResponse``. A reply
    that is not one (no choices, ``message: null``, non-text ``content``, a wrong type anywhere) is a
    ``TransientModelError`` naming the field: retried, never passed off as an (empty) answer."""
    if hasattr(completion, "model_dump"):
        completion = completion.model_dump()
    shape = _Shape(where)
    if not isinstance(completion, dict):
        raise shape.fault(f"reply is {json_kind(completion)}, not a chat completion object")
    choices = completion.get("choices")
    if not choices:
        # Some servers answer 200 with an error object instead of choices: worth another try.
        err = completion.get("error")
        raise shape.fault(f"reply has no choices{': ' + _one_line(err) if err else ''}")
    if not isinstance(choices, list):
        raise shape.fault(f"choices is {json_kind(choices)}, not a list")
    choice = choices[0]
    if not isinstance(choice, dict):
        raise shape.fault(f"choices[0] is {json_kind(choice)}, not an object")
    message = shape.get(choice, "message", "choices[0]", (dict,), "an object", optional=False)
    path = "choices[0].message"
    content = shape.get(message, "content", path, (str,), "text")
    # reasoning servers (vLLM, llama.cpp --reasoning-format, DeepSeek) return it beside the content;
    # read leniently: a shape of it this parser does not know is never a fault
    reasoning = next((v for k in ("reasoning_content", "reasoning") if isinstance(v := message.get(k), str) and v), None)
    calls = []
    for i, call in enumerate(shape.get(message, "tool_calls", path, (list,), "a list") or []):
        where_call = f"{path}.tool_calls[{i}]"
        if not isinstance(call, dict):
            raise shape.fault(f"{where_call} is {json_kind(call)}, not an object")
        fn = shape.get(call, "function", where_call, (dict,), "an object")
        if fn is None:  # custom (non-function) tool calls are not used by the harness
            continue
        name = shape.get(fn, "name", f"{where_call}.function", (str,), "text", optional=False)
        arguments = fn.get("arguments")
        if not isinstance(arguments, str):  # some servers send the arguments as an object
            arguments = json.dumps(arguments if arguments is not None else {})
        call_id = shape.get(call, "id", where_call, (str,), "text")
        calls.append(ToolCall(id=call_id or f"call_{uuid.uuid4().hex[:12]}", name=name, arguments=arguments))
    usage = shape.get(completion, "usage", "reply", (dict,), "an object") or {}
    prompt_tokens = shape.count(usage, "prompt_tokens")
    # the automatic prompt cache's hits, part of prompt_tokens (vLLM: null unless enabled); a server
    # saying more than the whole prompt is read as all of it
    details = shape.get(usage, "prompt_tokens_details", "usage", (dict,), "an object") or {}
    cached = min(shape.count(details, "cached_tokens", "usage.prompt_tokens_details"), prompt_tokens)
    # written to the prompt cache (OpenAI reports it on newer models; part of prompt_tokens)
    written = min(shape.count(details, "cache_write_tokens", "usage.prompt_tokens_details"), prompt_tokens - cached)
    completion_tokens = shape.count(usage, "completion_tokens")
    # a reasoning model's hidden reasoning, part of completion_tokens (OpenAI; vLLM sends none)
    out_details = shape.get(usage, "completion_tokens_details", "usage", (dict,), "an object") or {}
    reasoning_tokens = min(
        shape.count(out_details, "reasoning_tokens", "usage.completion_tokens_details"), completion_tokens
    )
    return ModelResponse(
        content=content,
        tool_calls=calls,
        finish_reason=shape.get(choice, "finish_reason", "choices[0]", (str,), "text"),
        usage=Usage(
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            cache_read_tokens=cached,
            cache_write_tokens=written,
            reasoning_tokens=reasoning_tokens,
        ),
        model=shape.get(completion, "model", "reply", (str,), "text"),
        reasoning=reasoning,
        # the model declined (OpenAI's message.refusal, null otherwise); read leniently like the reasoning
        refusal=refusal if isinstance(refusal := message.get("refusal"), str) and refusal else None,
    )


# --------------------------------------------------------------------------- backend
class OpenAICompatibleBackend(ModelBackend):
    """A chat-completions backend over the ``openai`` SDK.

    Subclasses set ``self.base_url`` (``http://host:port/v1``) before the first request and may
    override ``api_key()``, ``request_model()``, ``request_kwargs()`` and ``server_label()``.
    """

    api_key_env: ClassVar[str | None] = None  # checked by api_key() when set
    label: ClassVar[str] = "server"  # used in messages: "<label> at <url>"
    supports_server_list = True
    reasoning_knobs = frozenset({"reasoning_effort"})

    def __init__(self, model, options):
        super().__init__(model, options)
        self.base_url: str | None = options.base_url
        self.pool: ServerPool | None = None  # several servers (--base-url URL1,URL2): see use_servers
        self.launcher: Any = None  # the ServerLauncher of a server this backend started: its death is said at once
        self._clients: dict[tuple[int, str | None], tuple[asyncio.AbstractEventLoop, Any]] = {}
        # --http-client aiohttp: requests go out on aiohttp directly (``_request_direct``)
        self._sessions = AiohttpSessions(options.request_timeout)
        # per (server, path): URL, headers, proxy
        self._targets: dict[tuple[str | None, str], tuple[str, dict[str, Any]]] = {}
        self._labels: dict[str | None, str] = {}

    def use_servers(self, urls: list[str]) -> None:
        """Balance requests over ``urls`` (API bases, ``.../v1``); one URL stays a plain ``base_url``."""
        if len(urls) > 1:
            self.pool = ServerPool(urls, self.server_healthy)
            self.base_url = None
        else:
            self.pool = None
            self.base_url = urls[0] if urls else None

    async def server_healthy(self, endpoint: Endpoint) -> bool:
        """The health check of a server taken out: it answers ``GET /models`` without a 5xx."""
        import httpx

        headers = {"Authorization": f"Bearer {self.api_key()}"}
        try:
            async with httpx.AsyncClient(
                timeout=min(self.options.request_timeout, 30.0),
                headers=headers,
                trust_env=False,
                event_hooks=capped_event_hooks(self.options.max_response_bytes),
            ) as client:
                resp = await client.get(endpoint.url.rstrip("/") + "/models")
        except (httpx.HTTPError, TransientModelError):
            return False
        return resp.status_code < 500

    def usage_facts(self) -> dict[str, Any]:
        return {"servers": self.pool.facts()} if self.pool is not None else {}

    def http_transport(self) -> str:
        """``--http-client`` resolved: aiohttp or httpx."""
        return resolve_http_client(self.options.http_client)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "http_client": self.http_transport()}

    # hooks ---------------------------------------------------------------------
    def api_key(self) -> str:
        """The key sent as ``Authorization: Bearer``; local servers accept anything."""
        return "EMPTY"

    def request_model(self) -> str:
        """The ``model`` field sent to the server."""
        return self.model

    def default_base_url(self) -> str | None:
        """The API base used when none is set (the SDK's default): OpenAI's, for openai/."""
        return None

    def request_headers(self) -> dict[str, str]:
        """The headers of a chat request sent past the SDK (``--http-client aiohttp``): what the SDK
        sends but its own telemetry (X-Stainless-*, User-Agent AsyncOpenAI/Python)."""
        return {
            "Authorization": f"Bearer {self.api_key()}",
            "Content-Type": "application/json",
            "Accept": "application/json",
            "Accept-Encoding": ACCEPT_ENCODING,
            "User-Agent": f"harness/{__version__}",
        }

    def server_label(self, url: str | None = None) -> str:
        url = url or self.base_url
        return f"{self.label} at {strip_credentials(url)}" if url else self.label

    def request_kwargs(
        self,
        messages: list[dict[str, Any]],
        params: GenerationParams,
        tools: list[dict[str, Any]] | None,
        tool_choice: Any,
    ) -> dict[str, Any]:
        return {
            "model": self.request_model(),
            **chat_request_kwargs(clean_messages(messages), params, tools, tool_choice),
        }

    def request_path(self, kwargs: dict[str, Any]) -> str:
        """The endpoint (under the API base) a request body built by ``request_kwargs`` goes to."""
        return "/chat/completions"

    def parse_reply(self, kwargs: dict[str, Any], reply: Any, where: str) -> ModelResponse:
        """The 2xx reply (parsed JSON) to the request ``kwargs`` as a ``ModelResponse``."""
        return response_from_completion(reply, where)

    # client --------------------------------------------------------------------
    def client(self, base_url: str | None = None) -> Any:
        """An ``AsyncOpenAI`` for the running event loop (an httpx client cannot cross loops) and
        server (``base_url``, default ``self.base_url``)."""
        try:
            import openai
        except ImportError:
            raise ModelError(f"the {self.prefix} backend needs the openai package: pip install openai") from None
        base_url = base_url or self.base_url or self.default_base_url()  # the same server as the aiohttp path
        loop = asyncio.get_running_loop()
        entry = self._clients.get((id(loop), base_url))
        if entry is not None and entry[0] is loop:
            return entry[1]
        # Drop clients of loops that are gone (their connections died with them).
        self._clients = {k: v for k, v in self._clients.items() if not v[0].is_closed()}
        client = openai.AsyncOpenAI(
            base_url=base_url,
            api_key=self.api_key(),
            max_retries=0,  # retries are ours (harness.models.retry)
            timeout=self.options.request_timeout,  # per read; within_deadline bounds the whole request
            http_client=capped_sdk_http_client(openai, self.options.max_response_bytes, self.http_transport()),
        )
        self._clients[(id(loop), base_url)] = (loop, client)
        return client

    async def close(self) -> None:
        clients, self._clients = self._clients, {}
        self._targets = {}
        await close_loop_clients(clients)
        await self._sessions.close()

    # generation ----------------------------------------------------------------
    async def _generate(self, messages, params: GenerationParams, tools=None, tool_choice=None) -> ModelResponse:
        if self.launcher is None:
            return await self._generate_on_servers(messages, params, tools, tool_choice)
        # A server we launched that died is said at once (its signal or exit code), not retried for minutes.
        died = self.launcher.exit_error(self.server_process_name())
        if died is not None:
            raise died
        try:
            return await self._generate_on_servers(messages, params, tools, tool_choice)
        except TransientModelError as exc:
            if isinstance(exc.__cause__, _connection_errors()):
                died = await self.launcher.wait_exit_error(self.server_process_name())
                if died is not None:
                    raise died from None
            raise

    def server_process_name(self) -> str:
        return f"the launched {self.label} process"

    async def _generate_on_servers(self, messages, params, tools, tool_choice) -> ModelResponse:
        kwargs = self.request_kwargs(messages, params, tools, tool_choice)
        if self.pool is None:
            return await self._request(None, kwargs)
        tried: set[Endpoint] = set()
        while True:
            endpoint = await self.pool.acquire(exclude=tried)
            tried.add(endpoint)
            try:
                response = await self._request(endpoint.url, kwargs)
            except asyncio.CancelledError:  # the sample timed out or the run stops: not the server's fault
                self.pool.release(endpoint)
                raise
            except Exception as exc:
                fault = _server_fault(exc)
                self.pool.release(endpoint, failed=True, server_fault=fault, error=_one_line(exc, 200))
                # the server is gone, not the request: send it to another one now (none left: the
                # retry loop waits and asks the pool again)
                if fault and any(ep.in_service and ep not in tried for ep in self.pool.endpoints):
                    log.warning("%s; sending the request to another server", exc)
                    continue
                raise
            self.pool.release(endpoint)
            response.server = endpoint.shown
            return response

    async def _request(self, base_url: str | None, kwargs: dict[str, Any]) -> ModelResponse:
        server = base_url or self.base_url  # a launched server's URL is set when it starts
        label = self._labels.get(server)
        if label is None:  # credentials stripped once per server, not per request
            label = self._labels[server] = self.server_label(base_url)
        if self.http_transport() == "aiohttp":
            return await self._request_direct(base_url, kwargs, label)
        # the client first: the SDK's imports on first use are not the server's time. Posted as is,
        # not through chat.completions.create: its typed-params transform walked every message
        # (the loop's top cost at many connections) and left these plain fields as they were.
        client = self.client(base_url)
        path = self.request_path(kwargs)

        def create(**body: Any) -> Any:
            return client.post(path, body=body, cast_to=object, options=_RAW_REPLY)

        reply = await within_deadline(self._send(create, kwargs, label), self.options.request_timeout, label)
        # parsed here, not by the SDK: its lenient models turn a malformed reply into an empty answer
        return self.parse_reply(kwargs, reply_json(reply, label), label)

    async def _request_direct(self, base_url: str | None, kwargs: dict[str, Any], label: str) -> ModelResponse:
        """The request on aiohttp itself, past the SDK (not even imported: 0.5 s of CPU): its request
        building (options models, header merging, URL parsing, the httpx2 layer over aiohttp) was
        ~80 % of a request's CPU. The same URL and body as the SDK's, its headers but its telemetry
        (``request_headers``), and a reply read as on the SDK's transports: the same byte cap,
        deadline, reply checks and error messages (a status error shaped as the SDK shapes it)."""
        url, sent = self._direct_target(base_url, self.request_path(kwargs))
        body = json_bytes(json.dumps(kwargs, ensure_ascii=False, separators=(",", ":")))
        status, reply_headers, content = await within_deadline(
            self._post(url, body, sent, label), self.options.request_timeout, label
        )
        if not 200 <= status < 300:
            reply = StatusReply(status, reply_headers, content)
            raise map_status_error(reply, status, reply_headers, label, self.model) from reply
        text = json_text(content)
        del content  # not held while the text is parsed: an answer near the cap is 16 MiB less in flight
        return self.parse_reply(kwargs, body_json(status, reply_headers, text, label), label)

    def _direct_target(self, base_url: str | None, path: str = "/chat/completions") -> tuple[str, dict[str, Any]]:
        """(URL of ``path``, aiohttp keywords: headers, proxy) for a server (``base_url``, default
        ``self.base_url``)."""
        base = base_url or self.base_url or self.default_base_url()
        entry = self._targets.get((base, path))
        if entry is None:
            if not base:
                raise ModelError(f"{self.prefix}/{self.model}: no server to send requests to (pass --base-url)")
            url = base.rstrip("/") + path
            entry = self._targets[(base, path)] = (url, {"headers": self.request_headers(), **env_proxy(url)})
        return entry

    async def _post(self, url: str, body: bytes, sent: dict[str, Any], label: str) -> tuple[int, Any, bytes]:
        import aiohttp

        try:
            async with self._sessions.get().post(url, data=body, **sent) as reply:
                return reply.status, reply.headers, await read_capped(reply, self.options.max_response_bytes)
        except ReplyRejected as exc:
            raise rejected_reply(exc, label) from None
        except asyncio.TimeoutError as exc:  # a connect or read past --request-timeout (aiohttp's own)
            raise TransientModelError(f"request to {label} timed out", status=None) from exc
        except aiohttp.ClientError as exc:  # refused, dropped, cut short
            raise TransientModelError(f"connection to {label} failed: {_one_line(exc)}", status=None) from exc

    async def _send(self, create: Any, kwargs: dict[str, Any], label: str) -> Any:
        """The 2xx ``httpx`` response of one chat request, its body read (within the byte cap)."""
        import openai

        try:
            raw = await create(**kwargs)
        except ReplyRejected as exc:
            raise rejected_reply(exc, label) from None
        except openai.APIError as exc:
            if caused_by(exc, ReplyRejected) is not None:  # openai < 3 wraps what the body stream raised
                raise rejected_reply(exc, label) from None
            raise map_api_error(exc, openai, label, self.model) from exc
        return raw.http_response


# the SDK hands back the HTTP response, unparsed (what with_raw_response asks for)
_RAW_REPLY = {"headers": {"X-Stainless-Raw-Response": "true"}}


def _server_fault(exc: BaseException) -> bool:
    """A failure of the server itself (refused, dropped, timed out, 5xx), not of this request
    (429 throttling, a 4xx, a bad answer): such a server is taken out of the pool."""
    if not isinstance(exc, TransientModelError):
        return False
    if exc.status is not None:
        return exc.status >= 500
    # past the deadline: taken out like an SDK timeout (the health check brings it back)
    return isinstance(exc, DeadlineExpired) or isinstance(exc.__cause__, _connection_errors())


def _connection_errors() -> tuple[type, ...]:
    """What a request that never reached the server or lost it raises: the SDK's connection errors
    (APITimeoutError is one too; none where the SDK was never imported), and aiohttp's where
    requests go on it directly."""
    import sys

    found: tuple[type, ...] = (asyncio.TimeoutError,)
    if "openai" in sys.modules:
        found += (sys.modules["openai"].APIConnectionError,)
    if "aiohttp" in sys.modules:
        found += (sys.modules["aiohttp"].ClientError,)
    return found


__all__ = [
    "ContextOverflowError",
    "OpenAICompatibleBackend",
    "clean_messages",
    "context_from_listing",
    "context_from_props",
    "discover_context_size",
    "error_message",
    "is_context_overflow",
    "map_api_error",
    "map_status_error",
    "parse_retry_after",
    "should_retry_header",
    "response_from_completion",
]
