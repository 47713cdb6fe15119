"""Replies of model servers over HTTP, read defensively: a byte cap enforced while the body is read
(decompressed bytes counted, so a gzip bomb stops at the cap), one deadline for the whole request,
and the body checked to be JSON before anyone reads it.

The cap works at the httpx layer (a response event hook wraps the body stream before anything reads
it), so it holds for every body the client reads: answers, error bodies, redirects. The SDKs use
``httpx`` (openai < 3, older anthropic) or its fork ``httpx2``; the hook serves either, and the SDKs'
aiohttp transport too (``DefaultAioHttpClient``: an httpx2 client whose transport is aiohttp, asked
not to inflate, so the raw body passes through the same hook). Requests the harness sends on
aiohttp itself (``AiohttpSessions``) are read by ``read_capped``: the same inflater and count.

A refused body is let go of when it is refused: the frames that read it (ours, the client's) hold
its pieces, and an exception's traceback holds those frames, so a refusal leaves the reading code as
``rejected_reply(exc, where)``: a new exception whose chain holds no such frame (issue 45: they were
held until a full garbage collection, a run kept 16 MiB per refused reply, 6.4 GB after 400).
"""

from __future__ import annotations

import asyncio
import functools
import importlib.util
import json
import sys
import traceback
import zlib
from typing import Any, AsyncIterator, Awaitable, Iterator, TypeVar

from harness.errors import ModelError, TransientModelError
from harness._version import pip_install

T = TypeVar("T")

# The most bytes one inflate step may produce: a body stream holds at most the cap plus this.
PIECE = 64 * 1024
# Asked of servers; other encodings (br, zstd) could not be counted as they inflate, so are refused.
ACCEPT_ENCODING = "gzip, deflate"


class ReplyRejected(TransientModelError):
    """A reply body that cannot be read (an encoding not asked for, corrupt compression)."""


class ReplyTooLarge(ReplyRejected):
    """A reply body passed --max-response-bytes; it was not read further."""


def mib(n: int) -> str:
    return f"{n / 2**20:g} MiB" if n >= 2**20 and n % 2**16 == 0 else f"{n} bytes"


class _Inflater:
    """Decodes one Content-Encoding (identity, gzip, deflate) in pieces of at most PIECE bytes."""

    def __init__(self, encoding: str):
        if encoding not in ("identity", "gzip", "x-gzip", "deflate"):
            raise ReplyRejected(f"reply is {encoding}-encoded, not one of the encodings asked for ({ACCEPT_ENCODING})")
        self.encoding = encoding
        # deflate: zlib-wrapped as the RFC says (the header is detected), else raw as some servers send
        self._z = None if encoding == "identity" else zlib.decompressobj(zlib.MAX_WBITS | 32)
        self._started = False

    def feed(self, data: bytes) -> Iterator[bytes]:
        if self._z is None:
            yield data  # a network read: at most a socket buffer
            return
        try:
            yield self._first(data)
            while self._z.unconsumed_tail:  # a bomb inflates one small read into gigabytes: a piece at a time
                yield self._z.decompress(self._z.unconsumed_tail, PIECE)
        except zlib.error as exc:
            raise ReplyRejected(f"reply's {self.encoding} body is corrupt: {exc}") from None

    def _first(self, data: bytes) -> bytes:
        try:
            return self._z.decompress(data, PIECE)
        except zlib.error:
            if self.encoding != "deflate" or self._started:
                raise
            self._z = zlib.decompressobj(-zlib.MAX_WBITS)
            return self._z.decompress(data, PIECE)
        finally:
            self._started = True


def _capped_stream_type(base: type) -> type:
    """A subclass of the client library's AsyncByteStream (httpx checks the type) that inflates
    and counts the body of ``inner`` and stops past ``limit`` bytes."""

    class CappedBody(base):  # type: ignore[misc, valid-type]
        def __init__(self, inner: Any, encoding: str, limit: int):
            self._inner = inner
            self._encoding = encoding
            self._limit = limit

        @property
        def elapsed(self):  # httpx2 reads the timing off the stream it wraps
            return getattr(self._inner, "elapsed", None)

        async def __aiter__(self) -> AsyncIterator[bytes]:
            inflater = _Inflater(self._encoding)
            seen = 0
            stream = self._inner.__aiter__()
            try:
                async for raw in stream:
                    for piece in inflater.feed(raw):
                        seen += len(piece)
                        if seen > self._limit:
                            how = "decompressed" if self._encoding != "identity" else "long"
                            raise ReplyTooLarge(
                                f"reply body is over --max-response-bytes {mib(self._limit)} ({how}); not read further"
                            )
                        if piece:
                            yield piece
            finally:
                aclose = getattr(stream, "aclose", None)
                if aclose is not None:
                    await aclose()

        async def aclose(self) -> None:
            await self._inner.aclose()

    return CappedBody


_STREAM_TYPES: dict[type, type] = {}


def capped_event_hooks(limit: int) -> dict[str, list[Any]]:
    """``event_hooks`` for an httpx/httpx2 ``AsyncClient``: every response body is inflated here,
    counted, and cut past ``limit`` bytes (ReplyTooLarge) before the client holds more."""

    async def cap_body(response: Any) -> None:
        lib = sys.modules[type(response).__module__.partition(".")[0]]
        base = lib.AsyncByteStream
        if base not in _STREAM_TYPES:
            _STREAM_TYPES[base] = _capped_stream_type(base)
        encoding = body_encoding(response.headers, limit)
        response.stream = _STREAM_TYPES[base](response.stream, encoding, limit)
        if encoding != "identity":  # inflated here: the client must not inflate again
            del response.headers["content-encoding"]
            response.headers.pop("content-length", None)

    return {"response": [cap_body]}


def body_encoding(headers: Any, limit: int) -> str:
    """The one Content-Encoding of a reply the cap can count (identity, gzip, deflate), checked
    before any byte is read: another encoding, or a Content-Length past ``limit``, is refused."""
    named = headers.get("content-encoding")
    if not named:
        encoding = "identity"
    else:
        encodings = [e.strip().lower() for e in named.split(",") if e.strip()]
        encodings = [e for e in encodings if e != "identity"] or ["identity"]
        if len(encodings) > 1:
            raise ReplyRejected(f"reply is encoded {', '.join(encodings)}; one of {ACCEPT_ENCODING} was asked for")
        encoding = encodings[0]
        _Inflater(encoding)  # refuses an encoding it cannot count
    length = headers.get("content-length") or ""
    if encoding == "identity" and length.isdigit() and int(length) > limit:
        raise ReplyTooLarge(f"reply body is {length} bytes, over --max-response-bytes {mib(limit)}; not read")
    return encoding


async def read_capped(response: Any, limit: int) -> bytes:
    """An aiohttp response's body (its session asked not to inflate), inflated here and counted as
    it is read, cut past ``limit`` bytes: the cap ``capped_event_hooks`` puts on httpx clients."""
    encoding = body_encoding(response.headers, limit)
    if encoding == "identity" and response.content_length is not None:
        # within the cap (checked above), and aiohttp reads no more than the Content-Length
        return await response.read()
    inflater = _Inflater(encoding)
    pieces: list[bytes] = []
    seen = 0
    async for raw in response.content.iter_any():
        for piece in inflater.feed(raw):
            seen += len(piece)
            if seen > limit:
                pieces.clear()  # the traceback keeps this frame: not the body with it
                how = "decompressed" if encoding != "identity" else "long"
                raise ReplyTooLarge(f"reply body is over --max-response-bytes {mib(limit)} ({how}); not read further")
            pieces.append(piece)
    return pieces[0] if len(pieces) == 1 else b"".join(pieces)


class AiohttpSessions:
    """One aiohttp session per event loop (a session cannot cross loops), made as the SDKs' aiohttp
    transport makes its own: up to 1,000 connections, idle ones kept 5 s, certifi's roots, no
    inflating (``read_capped`` counts the bytes as it inflates), every read within ``read_timeout``.
    No cookie jar, and the proxy variables are read once per URL (``env_proxy``), not by aiohttp's
    ``trust_env`` (two hops to a thread per request, and a ~/.netrc entry for the host would clash
    with the key's Authorization header)."""

    def __init__(self, read_timeout: float):
        self.read_timeout = read_timeout
        self._sessions: dict[int, tuple[asyncio.AbstractEventLoop, Any]] = {}

    def get(self) -> Any:
        loop = asyncio.get_running_loop()
        entry = self._sessions.get(id(loop))
        if entry is not None and entry[0] is loop:
            return entry[1]
        import ssl

        import aiohttp
        import certifi

        self._sessions = {k: v for k, v in self._sessions.items() if not v[0].is_closed()}
        connector = aiohttp.TCPConnector(
            limit=1000, keepalive_timeout=5.0, ssl=ssl.create_default_context(cafile=certifi.where())
        )
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.read_timeout, sock_read=self.read_timeout)
        session = aiohttp.ClientSession(
            connector=connector, timeout=timeout, auto_decompress=False, cookie_jar=aiohttp.DummyCookieJar()
        )
        self._sessions[id(loop)] = (loop, session)
        return session

    async def close(self) -> None:
        sessions, self._sessions = self._sessions, {}
        for loop, session in sessions.values():
            try:
                if loop is asyncio.get_running_loop():
                    await session.close()
            except Exception:  # closing is best effort
                pass


def env_proxy(url: str) -> dict[str, Any]:
    """``proxy``/``proxy_auth`` for an aiohttp request to ``url`` from HTTP(S)_PROXY and NO_PROXY
    (as httpx clients honour them), or {} for none."""
    from aiohttp.helpers import get_env_proxy_for_url
    from yarl import URL

    try:
        proxy, auth = get_env_proxy_for_url(URL(url))
    except LookupError:
        return {}
    return {"proxy": proxy, "proxy_auth": auth}


HTTP_CLIENTS = ("auto", "aiohttp", "httpx")


@functools.cache
def aiohttp_installed() -> bool:
    """Whether aiohttp can be imported (looked up once: ``find_spec`` searches sys.path)."""
    return importlib.util.find_spec("aiohttp") is not None


def resolve_http_client(choice: str) -> str:
    """``--http-client``: ``auto`` is aiohttp where it is installed, else httpx."""
    if choice == "auto":
        return "aiohttp" if aiohttp_installed() else "httpx"
    if choice == "aiohttp" and not aiohttp_installed():
        raise ModelError(f"--http-client aiohttp needs the aiohttp package: {pip_install('aiohttp')}")
    if choice not in HTTP_CLIENTS:
        raise ModelError(f"--http-client must be one of {', '.join(HTTP_CLIENTS)}, not {choice!r}")
    return choice


def capped_sdk_http_client(sdk: Any, limit: int, transport: str = "httpx") -> Any:
    """The SDK's own default async client (its limits, redirects, timeouts) on ``transport``
    (``aiohttp`` or ``httpx``), with the body cap and only the encodings the cap can count."""
    cls = sdk.DefaultAioHttpClient if transport == "aiohttp" else sdk.DefaultAsyncHttpxClient
    return cls(event_hooks=capped_event_hooks(limit), headers={"Accept-Encoding": ACCEPT_ENCODING})


def rejected_reply(caught: BaseException, where: str) -> ReplyRejected:
    """The ReplyRejected in ``caught``'s chain (``caught`` itself, or what an SDK wrapped) as a new
    exception naming ``where`` (the body's reader knew no server), to be raised ``from None`` in the
    ``except`` clause that caught it; ``caught``'s chain is let go of first (``let_go``), so the new
    one's context holds no frame that read the refused body (issue 45)."""
    rejected = caused_by(caught, ReplyRejected)
    assert rejected is not None, caught
    let_go(caught)
    return type(rejected)(f"{where}: {rejected}")


def let_go(raised: BaseException) -> None:
    """Clear the frames held by ``raised``'s traceback and by those of its cause/context chain (the
    frames that read a refused body, and their locals with it) and drop the tracebacks. Called in
    the ``except`` clause that caught it: its own frame, still running, is left as it is."""
    seen: set[int] = set()
    chain: list[BaseException | None] = [raised]
    while chain:
        exc = chain.pop()
        if exc is None or id(exc) in seen:
            continue
        seen.add(id(exc))
        traceback.clear_frames(exc.__traceback__)
        exc.__traceback__ = None
        chain += (exc.__cause__, exc.__context__)


def caused_by(exc: BaseException, kind: type[BaseException]) -> BaseException | None:
    """``exc`` or the first exception of type ``kind`` in its cause/context chain (an SDK may wrap
    what a stream raised in its connection error)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, kind):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


class DeadlineExpired(TransientModelError):
    """A request, its whole reply included, took longer than --request-timeout."""


async def within_deadline(call: Awaitable[T], seconds: float, where: str) -> T:
    """``call`` with one deadline for all of it: a server sending a byte now and then (which no
    per-read timeout catches) is cut at ``seconds``; the expiry is a transient fault, retried."""
    try:
        if _TIMEOUT is None:  # Python 3.10
            return await asyncio.wait_for(call, seconds)
        async with _TIMEOUT(seconds):  # in this task: wait_for (3.10, 3.11) runs each call in a task of its own
            return await call
    except asyncio.TimeoutError:
        raise DeadlineExpired(
            f"{where} did not finish its reply within --request-timeout {seconds:g} s (the whole request)"
        ) from None


_TIMEOUT = getattr(asyncio, "timeout", None)


def json_kind(value: Any) -> str:
    """A value's JSON type with its article ("null", "a list", "an object"), for messages about a
    reply of the wrong shape."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return f"a {type(value).__name__}"


def reply_json(http_response: Any, where: str) -> Any:
    """A 2xx reply's body as JSON; anything else is a transient fault that says what came instead
    (an HTML page from a proxy, a truncated body)."""
    return body_json(http_response.status_code, http_response.headers, http_response.content, where)


# The deepest nesting a server's JSON may have. A chat reply is ~6 levels deep, a tool's arguments a
# few more; what the harness keeps of a reply is written to records and read back by pydantic, whose
# parser stops at 200 levels (the response cache), and Python's json stops near 1,000 (RecursionError).
MAX_REPLY_DEPTH = 100


def loads_reply(content: bytes | str) -> Any:
    """A server's JSON text parsed, or ValueError where it is not JSON or is nested deeper than
    ``MAX_REPLY_DEPTH`` (json.loads raises RecursionError past ~1,000 levels, no ValueError; a
    reply a few hundred deep parses, but no record of it could be written and read back)."""
    try:
        value = json.loads(content)
    except RecursionError:
        raise ValueError(f"nested deeper than {MAX_REPLY_DEPTH} levels") from None
    if nested_deeper(value, content, MAX_REPLY_DEPTH):
        raise ValueError(f"nested deeper than {MAX_REPLY_DEPTH} levels")
    return value


def nested_deeper(value: Any, text: bytes | str, limit: int) -> bool:
    """Whether ``value`` (parsed from ``text``) nests lists and objects more than ``limit`` deep. A
    text with at most ``limit`` brackets cannot (counted in C: nearly every reply); the others are
    walked without recursion."""
    opening = (b"[", b"{") if isinstance(text, bytes) else ("[", "{")
    if text.count(opening[0]) + text.count(opening[1]) <= limit:
        return False
    stack = [(value, 1)] if isinstance(value, (dict, list)) else []
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        children = item.values() if isinstance(item, dict) else item
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False



def json_text(content: bytes) -> str | bytes:
    """A body's bytes decoded as ``json.loads`` decodes them (UTF-8, -16 or -32 by its first bytes,
    surrogates passed), so that the caller can let go of the bytes before the text is parsed; the
    bytes themselves where they do not decode (``body_json`` then says why)."""
    try:
        return content.decode(json.detect_encoding(content), "surrogatepass")
    except UnicodeDecodeError:
        return content


def body_json(status: int, headers: Any, content: bytes | str, where: str) -> Any:
    """``reply_json`` of a reply's status, headers and body bytes."""
    content_type = headers.get("content-type", "").split(";")[0].strip().lower()
    try:
        return loads_reply(content)
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, too deep
        if content_type and "json" not in content_type:
            raise TransientModelError(f"{where}: reply {status} is {content_type}, not JSON") from None
        detail = " ".join(str(exc).split())[:200]
        raise TransientModelError(f"{where}: reply {status} is not valid JSON ({detail})") from None


__all__ = [
    "ACCEPT_ENCODING",
    "AiohttpSessions",
    "body_encoding",
    "body_json",
    "env_proxy",
    "read_capped",
    "DeadlineExpired",
    "HTTP_CLIENTS",
    "ReplyRejected",
    "ReplyTooLarge",
    "caused_by",
    "let_go",
    "rejected_reply",
    "capped_event_hooks",
    "capped_sdk_http_client",
    "json_kind",
    "loads_reply",
    "MAX_REPLY_DEPTH",
    "nested_deeper",
    "json_text",
    "reply_json",
    "resolve_http_client",
    "within_deadline",
]
