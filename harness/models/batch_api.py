"""The providers' batch interfaces, one class each, behind one shape (``harness.models.batch`` drives them):

* ``OpenAIBatchAPI``: OpenAI's Batch API, or any compatible base URL: a JSONL of ``{"custom_id",
  "method": "POST", "url": "/v1/chat/completions" (or "/v1/responses" for a model the backend sends
  to the Responses API), "body"}`` uploaded to ``/files`` (purpose
  ``batch``), created at ``/batches`` (completion window 24h, ``metadata.harness_key`` naming our
  record), polled, then the output and error files downloaded from ``/files/ID/content``;
* ``AnthropicBatchAPI``: Message Batches (``/v1/messages/batches``: ``requests`` of ``{custom_id,
  params}``, ``processing_status`` polled, the ``results`` JSONL fetched);
* ``VLLMRunBatch``: ``vllm run-batch -i IN -o OUT --model M`` on this machine, the same JSONL as OpenAI's.

Each provider's results are normalized line by line into one shape, ``{"custom_id", "status", "body",
"error"}`` (status 200 with the reply's body, an HTTP status with the error text, or None for a
request that never ran: expired, cancelled), masked like every file and written atomically.
Control calls (upload, create, poll) go through httpx with the reply cap and one deadline per call;
429, 5xx, timeouts and dropped connections are transient, other 4xx one line (``ModelError``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator, Iterable
from urllib.parse import urlsplit

from harness.errors import ModelError, TransientModelError
from harness.models.base import DEFAULT_MAX_RESPONSE_BYTES, ModelBackend
from harness.models.http_reply import (
    ACCEPT_ENCODING,
    ReplyRejected,
    ReplyTooLarge,
    capped_event_hooks,
    loads_reply,
    mib,
    reply_json,
    within_deadline,
)
from harness.redact import redact, redact_data, strip_credentials
from harness.text import JSON_ERRORS, json_bytes
from harness._version import pip_install

log = logging.getLogger(__name__)

# A results file may be large (OpenAI: up to 50,000 replies); bounded all the same (decompressed
# bytes, counted as they arrive).
MAX_RESULTS_BYTES = 4 * 2**30
# One results line is one reply (the harness asks for one choice, no logprobs): at the largest
# output any provider allows (128k tokens) even all-escaped text (\uXXXX) is under ~8 MB; 64 MiB
# is far past that, and bounds what one line may hold in memory (a line over it is skipped unread).
MAX_RESULT_LINE_BYTES = 64 * 2**20
# statuses after which a batch changes no more
OPENAI_TERMINAL = ("completed", "failed", "expired", "cancelled")
ANTHROPIC_ERROR_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "overloaded_error": 529,
}


@dataclass
class BatchState:
    """One poll's answer."""

    status: str  # the provider's word: in_progress, completed, expired, ended, ...
    terminal: bool
    reason: str | None = None  # why a batch failed, expired or was cancelled
    counts: dict[str, Any] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict)
    has_results: bool = True  # False: nothing to download (a batch the provider no longer knows)


def _one_line(text: Any, limit: int = 300) -> str:
    text = " ".join(redact(str(text)).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _error_text(payload: Any) -> str:
    """``error.message`` of an API error body, else the body."""
    if isinstance(payload, dict):
        inner = payload.get("error", payload)
        if isinstance(inner, dict):
            inner = inner.get("error", inner) if isinstance(inner.get("error"), dict) else inner
            if inner.get("message"):
                code = inner.get("code") or inner.get("type")
                return _one_line(f"{code + ': ' if isinstance(code, str) else ''}{inner['message']}")
        if isinstance(inner, str):
            return _one_line(inner)
    return _one_line(payload)


class ControlError(ModelError):
    """A control call refused (a 4xx other than 408, 409, 429); ``status`` says which."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


def status_error(status: int, message: str, where: str) -> Exception:
    """An HTTP status of a control call: transient (429, 408, 409, 5xx) or one line (other 4xx)."""
    if status in (408, 409, 429) or status >= 500:
        return TransientModelError(f"{where} answered {status}: {message}", status=status)
    if status == 401:
        return ControlError(f"{where} rejected the API key (401): {message}", status)
    return ControlError(f"{where} refused ({status}): {message}", status)


class AtomicLines:
    """Lines written to a temp file beside ``path``, fsynced and renamed over it on success only."""

    def __init__(self, path: Path):
        self.path = path

    def __enter__(self):
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, self.tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=self.path.parent)
        self.file = os.fdopen(fd, "w", encoding="utf-8", errors=JSON_ERRORS)
        return self

    def write(self, record: dict[str, Any]) -> None:
        self.file.write(json.dumps(redact_data(record), ensure_ascii=False) + "\n")

    def __exit__(self, kind, exc, tb):
        try:
            if kind is None:
                self.file.flush()
                os.fsync(self.file.fileno())
            self.file.close()
            if kind is None:
                os.replace(self.tmp, self.path)
        finally:
            Path(self.tmp).unlink(missing_ok=True)  # a failed write's leftover (gone after the rename)
        return False


def openai_result(line: Any) -> dict[str, Any] | None:
    """One line of an OpenAI (or vLLM run-batch) output or error file, normalized.

    OpenAI puts a failed request's error in ``response.body.error`` (an HTTP error) or the line's
    ``error`` (``{code, message}``: never ran). ``vllm run-batch`` leaves ``response.body`` null and
    writes the error in the line's ``error``: its ErrorResponse (``{"error": {message, type, param,
    code}}``; a flat ``{object: "error", message, ...}`` in older versions) or an exception's text, with
    ``response.status_code`` its status (400 for an exception) -- vllm/entrypoints/openai/run_batch.py
    (run_request, make_error_request_output) at 0056ae7b2144abbc7b4916a43491c154567e0b76."""
    if not isinstance(line, dict) or not isinstance(line.get("custom_id"), str):
        return None
    out: dict[str, Any] = {"custom_id": line["custom_id"], "status": None, "body": None, "error": None}
    response, error = line.get("response"), line.get("error")
    if isinstance(response, dict) and isinstance(response.get("status_code"), int):
        out["status"] = response["status_code"]
        body = response.get("body")
        if response["status_code"] == 200 and not error:
            out["body"] = body
        elif body is None and error:
            out["error"] = _error_text({"error": error})
        else:
            out["error"] = _error_text(body)
    else:
        out["error"] = _error_text({"error": error}) if error else "no response and no error"
    return out


def anthropic_result(line: Any) -> dict[str, Any] | None:
    """One line of an Anthropic message batch's results, normalized."""
    if not isinstance(line, dict) or not isinstance(line.get("custom_id"), str):
        return None
    out: dict[str, Any] = {"custom_id": line["custom_id"], "status": None, "body": None, "error": None}
    result = line.get("result") if isinstance(line.get("result"), dict) else {}
    kind = result.get("type")
    if kind == "succeeded":
        out["status"], out["body"] = 200, result.get("message")
    elif kind == "errored":
        error = result.get("error") if isinstance(result.get("error"), dict) else {}
        inner = error.get("error") if isinstance(error.get("error"), dict) else error
        out["status"] = ANTHROPIC_ERROR_STATUS.get(inner.get("type"), 500)
        out["error"] = _error_text({"error": inner})
    else:  # canceled, expired
        out["error"] = f"request {kind or 'without a result'}"
    return out


@dataclass
class LongLine:
    """A results line over MAX_RESULT_LINE_BYTES, skipped unread: where it was, how long it was,
    and its custom_id when it leads the line (a top-level key, so never one inside the reply)."""

    number: int
    size: int
    custom_id: str | None


# the custom_id of a line that starts with it (Anthropic) or follows the line's "id" (OpenAI)
_LEADING_CUSTOM_ID = re.compile(rb'\s*\{\s*(?:"id"\s*:\s*"[^"\\]{0,200}"\s*,\s*)?"custom_id"\s*:\s*"([^"\\]{1,200})"')
_HEAD = 1024  # bytes of a long line kept to find its custom_id in


class LineSplitter:
    """Bytes, in chunks as they arrive, cut into lines (``\\n`` or ``\\r\\n``; the last may lack one).
    A line is decoded only once whole, so a character split across chunks is read as one; a line
    over ``cap`` bytes is never held whole: past the cap only its length is counted, up to its
    newline, and it comes out as a ``LongLine``."""

    def __init__(self, cap: int):
        self.cap = cap
        self.buf = bytearray()
        self.skipped: int | None = None  # the length so far of the long line being skipped
        self.head = b""
        self.number = 0

    def feed(self, data: bytes) -> list[bytes | LongLine]:
        out: list[bytes | LongLine] = []
        view = memoryview(data)
        start = 0
        while start < len(data):
            end = data.find(b"\n", start)
            stop = len(data) if end < 0 else end
            self._add(view[start:stop])
            if end < 0:
                break
            out.append(self._end())
            start = end + 1
        return out

    def finish(self) -> list[bytes | LongLine]:
        """The last line, when the data did not end with a newline."""
        return [self._end()] if self.buf or self.skipped is not None else []

    def _add(self, piece: memoryview) -> None:
        if self.skipped is not None:
            self.skipped += len(piece)
        elif len(self.buf) + len(piece) > self.cap:
            self.head = bytes(self.buf[:_HEAD]) + bytes(piece[: max(0, _HEAD - len(self.buf))])
            self.skipped = len(self.buf) + len(piece)
            self.buf = bytearray()
        else:
            self.buf += piece

    def _end(self) -> bytes | LongLine:
        self.number += 1
        if self.skipped is not None:
            found = _LEADING_CUSTOM_ID.match(self.head)
            custom_id = found.group(1).decode("utf-8", "replace") if found else None
            line: bytes | LongLine = LongLine(self.number, self.skipped, custom_id)
            self.skipped, self.head = None, b""
            return line
        text = bytes(self.buf[:-1] if self.buf.endswith(b"\r") else self.buf)
        self.buf = bytearray()
        return text


def long_line_result(line: LongLine) -> dict[str, Any] | None:
    """A skipped long line as its request's result when its custom_id is known: no status, as for a
    request that never ran (sent again); else nothing (without a result, as a torn line is)."""
    if line.custom_id is None:
        return None
    error = (
        f"its result line of {line.size} bytes was over the {mib(MAX_RESULT_LINE_BYTES)} cap on one result, not read"
    )
    return {"custom_id": line.custom_id, "status": None, "body": None, "error": error}


# How far a provider's clock may be behind ours when a batch's creation time is compared with the
# time we recorded it as prepared (Anthropic's candidates, AnthropicBatchAPI.find).
CLOCK_SKEW_S = 600.0
# Pages of a provider's batch list read at most when looking for one batch (100 or 1000 a page):
# past it the search fails (never "not there").
MAX_LIST_PAGES = 10_000


def pages_listed(where: str) -> Iterable[int]:
    """Page numbers of a batch-list search, then one line: a list that never ends is not "not there"."""
    yield from range(MAX_LIST_PAGES)
    raise ModelError(
        f"{where}: the batch list did not end within {MAX_LIST_PAGES} pages; cannot tell whether a batch exists"
    )


def list_page(reply: Any, where: str) -> list[Any]:
    """A list reply's ``data``; a reply without one is transient (retried), never an empty list."""
    data = reply.get("data") if isinstance(reply, dict) else None
    if not isinstance(data, list):
        raise TransientModelError(f"{where}: the batch list's reply has no data list")
    return data


def next_cursor(reply: dict[str, Any], data: list[Any], seen: set[str], where: str) -> str:
    """The cursor of the next page (the reply's ``last_id``, else its last batch's id); a page that
    says it has more but gives no new cursor is transient, not the end."""
    cursor = reply.get("last_id")
    if not isinstance(cursor, str) or not cursor:
        cursor = data[-1].get("id") if data and isinstance(data[-1], dict) else None
    if not isinstance(cursor, str) or not cursor or cursor in seen:
        raise TransientModelError(f"{where}: the batch list says it has more but its next page cannot be asked for")
    seen.add(cursor)
    return cursor


def _moment(value: Any) -> float | None:
    """An RFC 3339 time (Anthropic's ``created_at``, our records' ``at``) as epoch seconds; None if not one."""
    if not isinstance(value, str) or not value:
        return None
    from datetime import datetime, timezone

    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=timezone.utc)
    return parsed.timestamp()


class HttpBatchAPI:
    """What the HTTP providers share: one httpx client per event loop, capped, with a deadline per call."""

    name = ""

    def __init__(self, backend: ModelBackend):
        self.backend = backend
        self.options = backend.options
        self._client: tuple[Any, Any] | None = None

    def where(self) -> str:
        raise NotImplementedError

    def headers(self) -> dict[str, str]:
        raise NotImplementedError

    def client(self, limit: int = DEFAULT_MAX_RESPONSE_BYTES):
        import httpx

        loop = asyncio.get_running_loop()
        if self._client is not None and self._client[0] is loop:
            return self._client[1]
        client = httpx.AsyncClient(
            timeout=self.options.request_timeout,
            headers={**self.headers(), "Accept-Encoding": ACCEPT_ENCODING},  # what the cap can count
            trust_env=False,
            event_hooks=capped_event_hooks(max(self.options.max_response_bytes, DEFAULT_MAX_RESPONSE_BYTES)),
        )
        self._client = (loop, client)
        return client

    async def close(self) -> None:
        held, self._client = self._client, None
        if held is not None and not held[0].is_closed():
            try:
                await held[1].aclose()
            except Exception:  # closing is best effort
                pass

    list_path = ""  # where the provider lists its batches (a free GET)

    async def probe(self) -> None:
        """Before the run: a server without batch endpoints is one line now, not after the first batch."""
        try:
            await self.call("GET", f"{self.base}{self.list_path}", params={"limit": 1})
        except ControlError as exc:
            if exc.status in (404, 405, 501):
                raise ModelError(
                    f"--batch: {self.where()} has no batch endpoints (GET {self.list_path} answered {exc.status}); "
                    "use a server that implements them, or drop --batch"
                ) from None
            raise
        except TransientModelError:
            pass  # said at the first batch, with retries

    async def call(self, method: str, url: str, **kwargs: Any) -> Any:
        """A control call's JSON reply; errors mapped (``status_error``)."""
        import httpx

        where = self.where()
        try:
            resp = await within_deadline(
                self.client().request(method, url, **kwargs), self.options.request_timeout, where
            )
        except httpx.HTTPError as exc:
            raise TransientModelError(f"connection to {where} failed: {_one_line(exc or type(exc).__name__)}") from exc
        if resp.status_code >= 300:
            try:
                payload = loads_reply(resp.content)
            except ValueError:
                payload = resp.text
            raise status_error(resp.status_code, _error_text(payload), f"{where} ({method} {urlsplit(url).path})")
        return reply_json(resp, where)

    async def lines(self, url: str) -> AsyncIterator[Any]:
        """A JSONL file's lines, parsed, streamed: at most MAX_RESULTS_BYTES in all (decompressed,
        counted as they arrive); a line over MAX_RESULT_LINE_BYTES comes as a ``LongLine``, said once."""
        import httpx

        where = self.where()
        splitter = LineSplitter(MAX_RESULT_LINE_BYTES)
        try:
            async with httpx.AsyncClient(
                timeout=self.options.request_timeout,
                headers={**self.headers(), "Accept-Encoding": ACCEPT_ENCODING},
                trust_env=False,
                event_hooks=capped_event_hooks(MAX_RESULTS_BYTES),  # inflates a piece at a time, counts
            ) as client:
                async with client.stream("GET", url) as resp:
                    if resp.status_code >= 300:
                        raise status_error(resp.status_code, await _error_head(resp), where)
                    async for chunk in resp.aiter_bytes():
                        for line in splitter.feed(chunk):
                            parsed = _parsed(line, where)
                            if parsed is not None:
                                yield parsed
                    for line in splitter.finish():
                        parsed = _parsed(line, where)
                        if parsed is not None:
                            yield parsed
        except ReplyTooLarge:
            raise TransientModelError(f"{where}: results file over {mib(MAX_RESULTS_BYTES)}") from None
        except ReplyRejected as exc:
            raise TransientModelError(f"{where}: results file: {exc}") from None
        except httpx.HTTPError as exc:
            raise TransientModelError(f"download from {where} failed: {_one_line(exc or type(exc).__name__)}") from exc

    async def normalized(self, url: str, normalize) -> AsyncIterator[dict[str, Any]]:
        """``lines(url)`` as results (``normalize``: the provider's line format)."""
        async for line in self.lines(url):
            result = long_line_result(line) if isinstance(line, LongLine) else normalize(line)
            if result is not None:
                yield result


def _parsed(line: bytes | LongLine, where: str) -> Any:
    """One whole line: parsed JSON, a LongLine (warned), or None (blank or torn: its request counts
    as without a result)."""
    if isinstance(line, LongLine):
        named = f"custom_id {_one_line(line.custom_id, 80)}" if line.custom_id else "custom_id not found"
        log.warning(
            "%s: results line %d (%s) is %d bytes, over the %s cap on one result: skipped unread; "
            "its request counts as unanswered (sent again while it has tries left)",
            where, line.number, named, line.size, mib(MAX_RESULT_LINE_BYTES),
        )  # fmt: skip
        return line
    if not line.strip():
        return None
    try:
        return loads_reply(line.decode("utf-8"))
    except ValueError:  # UnicodeDecodeError and nesting past any reply's depth included
        return None


def _local_result(line: bytes | LongLine, where: str) -> dict[str, Any] | None:
    """One line of ``vllm run-batch``'s output file as a result (None: blank or torn)."""
    parsed = _parsed(line, where)
    if parsed is None:
        return None
    return long_line_result(parsed) if isinstance(parsed, LongLine) else openai_result(parsed)


async def _error_head(resp: Any, limit: int = 64 * 1024) -> str:
    """An error reply's text, its first ``limit`` bytes only."""
    head = bytearray()
    async for piece in resp.aiter_bytes():
        head += piece
        if len(head) >= limit:
            break
    text = bytes(head[:limit]).decode("utf-8", "replace")
    try:
        return _error_text(loads_reply(text))
    except ValueError:
        return _error_text(text)


class OpenAIBatchAPI(HttpBatchAPI):
    name = "openai"
    list_path = "/batches"
    max_requests = 50_000
    max_bytes = 190 * 2**20  # the API takes input files up to 200 MB

    def __init__(self, backend: ModelBackend):
        super().__init__(backend)
        from harness.models.openai_api import DEFAULT_BASE_URL

        self.base = (getattr(backend, "base_url", None) or DEFAULT_BASE_URL).rstrip("/")

    def where(self) -> str:
        return f"batch API at {strip_credentials(self.base)}"

    @property
    def url_path(self) -> str:
        """The endpoint of every line of a batch (one per batch): the Responses API for a model sent
        there (the batch API takes ``/v1/responses``: ``BatchCreateParams.endpoint`` in the openai SDK)."""
        return "/v1/responses" if self.api() == "responses" else "/v1/chat/completions"

    def api(self) -> str:
        batch_api = getattr(self.backend, "batch_api", None)
        return batch_api() if batch_api is not None else "chat"

    def headers(self) -> dict[str, str]:
        # the environment's organization, project and OPENAI_CUSTOM_HEADERS, as on every request
        extra = getattr(self.backend, "sdk_env_headers", dict)()
        return {"Authorization": f"Bearer {self.backend.api_key()}", **extra}

    def body(self, messages, params, tools, tool_choice) -> dict[str, Any]:
        if hasattr(self.backend, "batch_api"):
            return self.backend.request_kwargs(messages, params, tools, tool_choice, api=self.api())
        return self.backend.request_kwargs(messages, params, tools, tool_choice)

    def line(self, custom_id: str, body: dict[str, Any]) -> dict[str, Any]:
        return {"custom_id": custom_id, "method": "POST", "url": self.url_path, "body": body}

    def parse(self, body: Any, where: str):
        if self.api() == "responses":
            from harness.models.openai_responses import response_from_responses

            return response_from_responses(body, where)
        from harness.models.openai_compat import response_from_completion

        return response_from_completion(body, where)

    async def upload(self, key: str, lines: list[dict[str, Any]]) -> str:
        data = json_bytes("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines))
        reply = await self.call(
            "POST",
            f"{self.base}/files",
            data={"purpose": "batch"},
            files={"file": (f"harness-{key}.jsonl", data, "application/jsonl")},
        )
        if not isinstance(reply, dict) or not isinstance(reply.get("id"), str):
            raise TransientModelError(f"{self.where()}: the file upload's reply has no id")
        return reply["id"]

    async def create(self, key: str, uploaded: str, lines: list[dict[str, Any]]) -> str:
        reply = await self.call(
            "POST",
            f"{self.base}/batches",
            json={
                "input_file_id": uploaded,
                "endpoint": self.url_path,
                "completion_window": "24h",
                "metadata": {"harness_key": key},
            },
        )
        if not isinstance(reply, dict) or not isinstance(reply.get("id"), str):
            raise TransientModelError(f"{self.where()}: the batch's reply has no id")
        return reply["id"]

    async def find(self, key: str, count: int, since: str | None, known: Iterable[str] = ()) -> str | None:
        """The batch created for ``key`` (its metadata names it); None only after the whole list was
        read without it (every page, to ``has_more`` false): a definite "not there". A page that
        cannot be read raises (transient: retried by the caller), never reads as "not there"."""
        after: str | None = None
        seen: set[str] = set()
        for _ in pages_listed(self.where()):
            params: dict[str, Any] = {"limit": 100, **({"after": after} if after else {})}
            reply = await self.call("GET", f"{self.base}/batches", params=params)
            data = list_page(reply, self.where())
            for batch in data:
                meta = batch.get("metadata") if isinstance(batch, dict) else None
                if isinstance(meta, dict) and meta.get("harness_key") == key and isinstance(batch.get("id"), str):
                    return batch["id"]
            if reply.get("has_more") is not True:
                return None
            after = next_cursor(reply, data, seen, self.where())
        return None  # unreachable: pages_listed raises first

    async def poll(self, batch_id: str) -> BatchState:
        raw = await self.call("GET", f"{self.base}/batches/{batch_id}")
        if not isinstance(raw, dict) or not isinstance(raw.get("status"), str):
            raise TransientModelError(f"{self.where()}: batch {batch_id}'s reply has no status")
        status = raw["status"]
        reason = None
        errors = (raw.get("errors") or {}).get("data") if isinstance(raw.get("errors"), dict) else None
        if errors:
            reason = "; ".join(_error_text({"error": e}) for e in errors[:3] if isinstance(e, dict))
        return BatchState(status, status in OPENAI_TERMINAL, reason, raw.get("request_counts") or {}, raw)

    async def results(self, batch_id: str, state: BatchState) -> AsyncIterator[dict[str, Any]]:
        for key in ("output_file_id", "error_file_id"):
            file_id = state.raw.get(key)
            if isinstance(file_id, str) and file_id:
                async for result in self.normalized(f"{self.base}/files/{file_id}/content", openai_result):
                    yield result


class AnthropicBatchAPI(HttpBatchAPI):
    name = "anthropic"
    list_path = "/v1/messages/batches"
    max_requests = 100_000
    max_bytes = 250 * 2**20  # the API takes batches up to 256 MB

    def __init__(self, backend: ModelBackend):
        super().__init__(backend)
        from harness.models.anthropic_api import DEFAULT_BASE_URL

        self.base = (getattr(backend, "base_url", None) or DEFAULT_BASE_URL).rstrip("/")

    def where(self) -> str:
        return f"message batches API at {strip_credentials(self.base)}"

    def headers(self) -> dict[str, str]:
        # the API version the backend pins for its own requests (anthropic_api.ANTHROPIC_VERSION)
        return {"x-api-key": self.backend.api_key(), "anthropic-version": self.backend.api_version}

    def body(self, messages, params, tools, tool_choice) -> dict[str, Any]:
        """The request as the backend builds it one at a time (sampling and thinking from the model's
        facts or its probe), ``extra_body`` merged in; without cache breakpoints, as before."""
        from harness.models.anthropic_api import wire_body

        return wire_body(self.backend.request_kwargs(messages, params, tools, tool_choice, prompt_cache=False))

    def line(self, custom_id: str, body: dict[str, Any]) -> dict[str, Any]:
        return {"custom_id": custom_id, "params": body}

    def parse(self, body: Any, where: str):
        from harness.models.anthropic_api import from_anthropic_message

        return from_anthropic_message(body, where)

    async def upload(self, key: str, lines: list[dict[str, Any]]) -> str:
        return ""  # the requests travel in the create call

    async def create(self, key: str, uploaded: str, lines: list[dict[str, Any]]) -> str:
        reply = await self.call("POST", f"{self.base}/v1/messages/batches", json={"requests": lines})
        if not isinstance(reply, dict) or not isinstance(reply.get("id"), str):
            raise TransientModelError(f"{self.where()}: the batch's reply has no id")
        return reply["id"]

    async def find(self, key: str, count: int, since: str | None, known: Iterable[str] = ()) -> str | None:
        """Message batches carry no metadata to name ours by, and no request can be read back before
        the batch ends: the candidate is a batch of ``count`` requests (its ``request_counts``
        summed) created no earlier than ``since`` (when the batch was recorded as prepared, just
        before its create call) less a clock-skew margin, and not one of ours already (``known``).
        The list is newest first ("Most recently created batches are returned first":
        https://docs.anthropic.com/en/api/listing-message-batches), so reading stops at the
        first batch older than that: a definite "not there" when no candidate came before. Of
        several candidates, the first created at or after ``since`` (the create call followed the
        record at once), else the last before it (a provider's clock behind ours). A wrong
        guess is caught by its results: none of them carries one of our custom_ids (KEY-N), so our
        requests count unanswered and go again."""
        start = _moment(since)
        floor = start - CLOCK_SKEW_S if start is not None else None
        known = set(known)
        found: list[tuple[float, str]] = []
        after: str | None = None
        seen: set[str] = set()
        for _ in pages_listed(self.where()):
            params: dict[str, Any] = {"limit": 1000, **({"after_id": after} if after else {})}
            reply = await self.call("GET", f"{self.base}/v1/messages/batches", params=params)
            data = list_page(reply, self.where())
            older = False
            for batch in data:
                if not isinstance(batch, dict) or not isinstance(batch.get("id"), str):
                    continue
                created = _moment(batch.get("created_at"))
                if floor is not None and created is not None and created < floor:
                    older = True  # newest first: every batch after this one is older still
                    break
                counts = batch.get("request_counts")
                total = sum(v for v in counts.values() if isinstance(v, int)) if isinstance(counts, dict) else None
                if total == count and batch["id"] not in known:
                    found.append((created if created is not None else float("inf"), batch["id"]))
            if older or reply.get("has_more") is not True:
                break
            after = next_cursor(reply, data, seen, self.where())
        if not found:
            return None
        if start is not None:  # after the record, nearest first; then before it, nearest first
            found.sort(key=lambda c: (c[0] < start, abs(c[0] - start)))
        if len(found) > 1:
            log.warning(
                "%s: %d batches of %d requests were created about when batch %s was prepared; taking %s "
                "(its results show whether it is ours)", self.where(), len(found), count, key, found[0][1],
            )  # fmt: skip
        return found[0][1]

    async def poll(self, batch_id: str) -> BatchState:
        raw = await self.call("GET", f"{self.base}/v1/messages/batches/{batch_id}")
        if not isinstance(raw, dict) or not isinstance(raw.get("processing_status"), str):
            raise TransientModelError(f"{self.where()}: batch {batch_id}'s reply has no processing_status")
        status = raw["processing_status"]
        return BatchState(status, status == "ended", None, raw.get("request_counts") or {}, raw)

    def results_url(self, batch_id: str, state: BatchState) -> str:
        """The reply's ``results_url`` when it is on the API's own host (the key is sent there), else ours."""
        given = state.raw.get("results_url")
        ours = f"{self.base}/v1/messages/batches/{batch_id}/results"
        if isinstance(given, str) and urlsplit(given).netloc == urlsplit(self.base).netloc:
            return given
        return ours

    async def results(self, batch_id: str, state: BatchState) -> AsyncIterator[dict[str, Any]]:
        async for result in self.normalized(self.results_url(batch_id, state), anthropic_result):
            yield result


VLLM_NEEDED = (
    "--batch with vllm/ runs `vllm run-batch` on this machine (it needs vLLM and a GPU): vLLM is not installed "
    f"here; {pip_install('vllm')} on a machine with a GPU, or drop --batch"
)


# seconds vllm run-batch is given to stop after SIGTERM before its process group is killed
RUN_BATCH_GRACE_S = 30.0


class VLLMRunBatch:
    """``vllm run-batch`` as a batch provider: each batch is one process over a JSONL file in a
    private temporary folder (prompts are not kept on disk); its output has OpenAI's line format.
    Nothing is paid, so a batch whose process is gone (an earlier invocation) is run again.

    Each runs under a guard (``harness.lifeline.spawn_guarded``) in a process group of its own: when
    the run lets go of it (its results read, or the run closing) or dies (kill -9 included), the
    guard stops the whole group, vLLM's engine processes with it, and removes the folder."""

    name = "vllm"
    max_requests = 50_000
    max_bytes = 2**40

    def __init__(self, backend: ModelBackend):
        self.backend = backend
        self.options = backend.options
        self.procs: dict[str, tuple[Any, Path, int]] = {}  # batch id -> (its guard, its folder, the guard's pipe)
        self.log_dir: Path | None = None

    def where(self) -> str:
        return "vllm run-batch"

    def executable(self) -> str:
        from harness.models.vllm import find_vllm_executable

        found = find_vllm_executable()
        if found is None:
            raise ModelError(VLLM_NEEDED)
        return found

    def command(self, executable: str, input_path: str, output_path: str) -> list[str]:
        argv = [executable, "run-batch", "-i", input_path, "-o", output_path, "--model", self.backend.model]
        if self.options.context_size:
            argv += ["--max-model-len", str(self.options.context_size)]
        if "--seed" not in self.options.server_args:
            argv += ["--seed", "0"]
        # the same tool-call and reasoning parsers as a launched server: run-batch takes them too
        # (vLLM's tests/entrypoints/openai/test_run_batch.py at 09cdc7d1f08fe9c4f9c1443341c6ed83bffae6a5
        # runs it with --enable-auto-tool-choice --tool-call-parser hermes, and --reasoning-parser qwen3)
        return argv + self.backend.parser_args() + list(self.options.server_args)

    def body(self, messages, params, tools, tool_choice) -> dict[str, Any]:
        return self.backend.request_kwargs(messages, params, tools, tool_choice)

    def line(self, custom_id: str, body: dict[str, Any]) -> dict[str, Any]:
        return {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions", "body": body}

    def is_context_overflow(self, message: str) -> bool:
        """vLLM's engine words for a prompt over max_model_len ("The decoder prompt (length N) is longer
        than the maximum model length of M"): the ``vllm:`` section of the model facts, with its source."""
        from harness.models.vllm import vllm_facts

        return any(isinstance(m, str) and m in message for m in vllm_facts().get("context_overflow") or [])

    def parse(self, body: Any, where: str):
        from harness.models.openai_compat import response_from_completion

        return response_from_completion(body, where)

    async def upload(self, key: str, lines: list[dict[str, Any]]) -> str:
        folder = Path(tempfile.mkdtemp(prefix=f"harness-run-batch-{key}-"))
        text = "".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines)
        (folder / "input.jsonl").write_bytes(json_bytes(text))
        return str(folder)

    async def create(self, key: str, uploaded: str, lines: list[dict[str, Any]]) -> str:
        from harness.lifeline import spawn_guarded

        folder = Path(uploaded)
        try:
            argv = self.command(self.executable(), str(folder / "input.jsonl"), str(folder / "output.jsonl"))
            log_dir = self.log_dir or folder
            log_dir.mkdir(parents=True, exist_ok=True)
            # stopped with the run, whole (nothing is paid: a rerun runs the batch again)
            with open(log_dir / f"vllm-run-batch-{key}.log", "ab") as log:
                guard, pipe = spawn_guarded(
                    argv, remove=folder, exit_file=folder / ".exit", grace=RUN_BATCH_GRACE_S, stdout=log, stderr=log
                )
        except BaseException:
            import shutil

            shutil.rmtree(folder, ignore_errors=True)
            raise
        batch_id = f"vllm-run-batch-{key}"
        self.procs[batch_id] = (guard, folder, pipe)
        return batch_id

    async def find(self, key: str, count: int, since: str | None, known: Iterable[str] = ()) -> str | None:
        return None  # nothing is paid: a batch whose process is gone is run again

    async def poll(self, batch_id: str) -> BatchState:
        held = self.procs.get(batch_id)
        if held is None:
            return BatchState("failed", True, "its vllm run-batch process belonged to an earlier invocation")
        from harness.errors import describe_exit
        from harness.lifeline import read_exit_file

        guard, folder, _ = held
        code = read_exit_file(folder / ".exit")
        if code is None:
            if guard.poll() is not None:  # never so unless it was killed
                reason = f"the process guarding vllm run-batch ended with {describe_exit(guard.returncode)}"
                return BatchState("failed", True, reason)
            return BatchState("in_progress", False)
        if code == 0:
            return BatchState("completed", True)
        return BatchState("failed", True, f"vllm run-batch ended with {describe_exit(code)}")

    async def results(self, batch_id: str, state: BatchState) -> AsyncIterator[dict[str, Any]]:
        held = self.procs.pop(batch_id, None)
        if held is None:
            return
        output = held[1] / "output.jsonl"
        try:
            if output.is_file():
                # the same line cap as a downloaded results file: one runaway line is skipped unread
                # (its request counts as unanswered), not read into memory whole
                splitter, where = LineSplitter(MAX_RESULT_LINE_BYTES), self.where()
                with open(output, "rb") as f:
                    while chunk := f.read(2**20):
                        for line in splitter.feed(chunk):
                            if (result := _local_result(line, where)) is not None:
                                yield result
                    for line in splitter.finish():
                        if (result := _local_result(line, where)) is not None:
                            yield result
        finally:
            await self._release(held)

    async def _release(self, held: tuple[Any, Path, int]) -> None:
        """Let go of a batch's guard: it stops what is left of the group and removes the folder; its
        group is killed here if it does not end in time; the folder is removed here too."""
        import shutil
        import signal
        import subprocess

        guard, folder, pipe = held
        try:
            os.close(pipe)
        except OSError:
            pass
        try:
            await asyncio.to_thread(guard.wait, RUN_BATCH_GRACE_S + 10)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(guard.pid, signal.SIGKILL)
            except OSError:
                pass
            await asyncio.to_thread(guard.wait)
        shutil.rmtree(folder, ignore_errors=True)

    async def close(self) -> None:
        held, self.procs = list(self.procs.values()), {}
        await asyncio.gather(*(self._release(h) for h in held))


def provider_for(backend: ModelBackend):
    """The batch interface of ``backend``; one line for a backend that has none."""
    from harness.models.anthropic_api import AnthropicBackend
    from harness.models.openai_api import OpenAIBackend
    from harness.models.vllm import VLLMBackend

    if isinstance(backend, VLLMBackend):
        if backend.options.base_url:
            raise ModelError(
                "--batch with vllm/ runs `vllm run-batch` on this machine, not a server: drop --base-url, or reach a "
                "server that implements /v1/batches as openai/MODEL --base-url URL"
            )
        return VLLMRunBatch(backend)
    if isinstance(backend, OpenAIBackend):
        if len(backend.options.base_urls) > 1:
            raise ModelError("--batch sends one batch to one endpoint: give one --base-url, not a list")
        return OpenAIBatchAPI(backend)
    if isinstance(backend, AnthropicBackend):
        return AnthropicBatchAPI(backend)
    raise ModelError(
        f"--batch needs a provider batch interface: openai/ (OpenAI's Batch API or a compatible --base-url), "
        f"anthropic/ (Message Batches) or vllm/ (vllm run-batch); {getattr(backend, 'prefix', '?')}/ has none"
    )


def chunks(items: list[Any], sizes: Iterable[int], max_requests: int, max_bytes: int) -> list[list[Any]]:
    """``items`` cut in order into runs of at most ``max_requests`` items and ``max_bytes`` bytes."""
    out: list[list[Any]] = []
    current: list[Any] = []
    used = 0
    for item, size in zip(items, sizes):
        if current and (len(current) >= max_requests or used + size > max_bytes):
            out.append(current)
            current, used = [], 0
        current.append(item)
        used += size
    if current:
        out.append(current)
    return out
