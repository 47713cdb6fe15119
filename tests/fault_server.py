"""A hostile OpenAI-protocol server on loopback (stdlib only): each chat request is answered by the
next fault of a script, then by ``default``. Bounded: hangs sleep a fixed time, the server stops
with the test.

Faults: ``ok`` (a normal answer), ``slow`` (the same after ``hang_s`` seconds), ``429`` (with ``Retry-After``), ``500``, ``503``
(these three with ``error_headers`` too: ``x-should-retry``), ``hang`` (no
answer for ``hang_s`` seconds, then the connection closes), ``drop`` (the connection closes with
no response), ``invalid-json`` (200 whose body is not JSON), ``no-choices`` (200 with an empty
``choices``), ``bad-tool-args`` (a tool call whose arguments are not JSON), ``huge`` (a
``huge_chars``-character answer, ignoring ``max_tokens``), ``401-echo`` (401 whose error message
echoes the Authorization header, as some gateways do).

Hostile bodies: ``trickle`` (a good answer sent one byte every ``trickle_s`` seconds: no single read
waits long, the whole takes ages), ``gzip-bomb`` (``Content-Encoding: gzip``, ``bomb_bytes`` of JSON
whitespace then a good answer, inflating ~1000x), ``oversize`` (``huge`` chunked, with no
Content-Length to refuse it by), ``html-200`` (a proxy's HTML page with status 200),
``null-message`` (``message: null``; Anthropic: ``content: null``), ``list-content`` and
``number-content`` (``content`` a list of parts / a number; Anthropic: a string / a number),
``deep-json`` (200 whose body is a JSON list nested 200,000 levels deep), ``absurd-usage`` (a good
answer reporting 10^30 prompt and completion tokens).

Requests to ``.../messages`` are answered in Anthropic's shape, the others in OpenAI's;
``.../count_tokens`` is answered without taking a fault. Every answer reports ``usage``: prompt and
completion tokens, of the prompt ``cache_read`` tokens read from the prompt cache (OpenAI
``prompt_tokens_details.cached_tokens``, Anthropic ``cache_read_input_tokens``) and ``cache_write``
written to it (Anthropic ``cache_creation_input_tokens``); ``bodies`` keeps each chat request sent.
"""

from __future__ import annotations

import json
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request, client_address) -> None:
        pass  # a client that hangs up mid-reply is what several faults provoke


class LoopbackServer:
    """A threading HTTP server on 127.0.0.1's first free port, serving ``handler`` inside ``with``;
    ``url`` ends in /v1 as an OpenAI client's base URL does."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]):
        self.httpd = _QuietServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self):
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class FaultServer(LoopbackServer):
    def __init__(
        self,
        script: list[str] | None = None,
        default: str = "ok",
        answer: str = "Paris",
        hang_s: float = 3.0,
        huge_chars: int = 3_000_000,
        retry_after: str = "0",
        context_size: int | None = 4096,
        trickle_s: float = 0.05,
        bomb_bytes: int = 256 * 2**20,
        usage: tuple[int, int, int, int] = (10, 2, 0, 0),  # prompt, completion, cache read, cache write
        error_headers: dict[str, str] | None = None,
    ):
        self.error_headers = dict(error_headers or {})
        self.script = list(script or [])
        self.default = default
        self.answer = answer
        self.hang_s = hang_s
        self.huge_chars = huge_chars
        self.retry_after = retry_after
        self.context_size = context_size
        self.trickle_s = trickle_s
        self.bomb_bytes = bomb_bytes
        self.usage = usage
        self.bodies: list[dict] = []  # every chat request's body, in order
        if "gzip-bomb" in (*self.script, default):
            _bomb_prefix(bomb_bytes)  # built before serving: the first bomb is not slowed by it
        self.served: list[str] = []  # the fault used for each chat request, in order
        self.headers_seen: list[dict[str, str]] = []
        self.in_flight = 0
        self.in_flight_seen: list[int] = []  # chat requests being answered as each one arrived (itself included)
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _send(
                self, status: int, body: bytes, headers: dict[str, str] | None = None, content_type="application/json"
            ):
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                model = {"id": "fault-model", "object": "model", "owned_by": "test"}
                if outer.context_size:
                    model["max_model_len"] = outer.context_size
                self._send(200, json.dumps({"object": "list", "data": [model]}).encode())

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}") if length else {}
                if self.path.endswith("/count_tokens"):  # Anthropic's token counting: not a chat request
                    self._send(200, b'{"input_tokens": 10}')
                    return
                body["_anthropic"] = self.path.endswith("/messages")
                with outer._lock:
                    fault = outer.script.pop(0) if outer.script else outer.default
                    outer.served.append(fault)
                    outer.bodies.append(dict(body))
                    outer.headers_seen.append({k.lower(): v for k, v in self.headers.items()})
                    outer.in_flight += 1
                    outer.in_flight_seen.append(outer.in_flight)
                try:
                    outer.respond(self, fault, body)
                finally:
                    with outer._lock:
                        outer.in_flight -= 1

        super().__init__(Handler)

    # ------------------------------------------------------------------ responses
    def completion(self, body: dict, content: str | None, tool_calls: list | None = None) -> bytes:
        prompt, completion, read, write = self.usage
        if body.get("_anthropic"):
            blocks = [{"type": "text", "text": content}] if content is not None else []
            return json.dumps(
                {
                    "id": "msg_fault",
                    "type": "message",
                    "role": "assistant",
                    "model": body.get("model", "fault-model"),
                    "content": blocks,
                    "stop_reason": "end_turn",
                    "usage": {
                        "input_tokens": prompt - read - write,
                        "cache_read_input_tokens": read,
                        "cache_creation_input_tokens": write,
                        "output_tokens": completion,
                    },
                }
            ).encode()
        message: dict = {"role": "assistant", "content": content}
        if tool_calls:
            message["tool_calls"] = tool_calls
        return json.dumps(
            {
                "id": "chatcmpl-fault",
                "object": "chat.completion",
                "created": 0,
                "model": body.get("model", "fault-model"),
                "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if tool_calls else "stop"}],
                "usage": {
                    "prompt_tokens": prompt,
                    "completion_tokens": completion,
                    "total_tokens": prompt + completion,
                    "prompt_tokens_details": {"cached_tokens": read},
                },
            }
        ).encode()

    def respond(self, h: BaseHTTPRequestHandler, fault: str, body: dict) -> None:
        def error(status: int, message: str, headers=None):
            h._send(status, json.dumps({"error": {"message": message, "type": "test"}}).encode(), headers)

        if fault == "ok":
            h._send(200, self.completion(body, self.answer))
        elif fault == "slow":
            time.sleep(self.hang_s)
            h._send(200, self.completion(body, self.answer))
        elif fault == "429":
            error(429, "Rate limit reached", {"Retry-After": self.retry_after, **self.error_headers})
        elif fault in ("500", "503"):
            error(int(fault), "The server had an error", self.error_headers)
        elif fault == "hang":
            time.sleep(self.hang_s)
            h.close_connection = True
        elif fault == "drop":
            h.close_connection = True  # no status line at all: the client sees a dropped connection
        elif fault == "invalid-json":
            h._send(200, b'{"id": "chatcmpl-x", "choices": [{"message": ')
        elif fault == "no-choices":
            h._send(200, json.dumps({"id": "chatcmpl-x", "object": "chat.completion", "choices": []}).encode())
        elif fault == "bad-tool-args":
            call = {"id": "call_1", "type": "function", "function": {"name": "search", "arguments": '{"query": '}}
            h._send(200, self.completion(body, "", [call]))
        elif fault == "huge":
            words = ("Paris is the capital of France " * (self.huge_chars // 31 + 1))[: self.huge_chars]
            h._send(200, self.completion(body, words))
        elif fault == "trickle":
            data = self.completion(body, self.answer)
            h.send_response(200)
            h.send_header("Content-Type", "application/json")
            h.send_header("Content-Length", str(len(data)))
            h.end_headers()
            try:
                for i in range(len(data)):
                    h.wfile.write(data[i : i + 1])
                    h.wfile.flush()
                    time.sleep(self.trickle_s)
            except OSError:  # the client gave up and closed the connection
                h.close_connection = True
        elif fault == "gzip-bomb":
            h._send(200, self._bomb(body), {"Content-Encoding": "gzip"})
        elif fault == "oversize":
            words = ("Paris is the capital of France " * (self.huge_chars // 31 + 1))[: self.huge_chars]
            data = self.completion(body, words)
            h.send_response(200)
            h.send_header("Content-Type", "application/json")
            h.send_header("Transfer-Encoding", "chunked")
            h.end_headers()
            try:
                for i in range(0, len(data), 65536):
                    piece = data[i : i + 65536]
                    h.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                h.wfile.write(b"0\r\n\r\n")
            except OSError:
                h.close_connection = True
        elif fault == "html-200":
            page = b"<html><body><h1>502 Bad Gateway</h1><p>upstream timed out</p></body></html>"
            h._send(200, page, content_type="text/html; charset=utf-8")
        elif fault in ("null-message", "list-content", "number-content"):
            h._send(200, self._malformed(body, fault))
        elif fault == "deep-json":
            h._send(200, b"[" * 200_000 + b"]" * 200_000)
        elif fault == "absurd-usage":
            data = json.loads(self.completion(body, self.answer))
            usage = data["usage"]
            for key in ("input_tokens", "output_tokens") if body.get("_anthropic") else ("prompt_tokens", "completion_tokens"):
                usage[key] = 10**30
            h._send(200, json.dumps(data).encode())
        elif fault == "401-echo":
            auth = h.headers.get("Authorization", "") or h.headers.get("x-api-key", "")
            error(401, f"Incorrect API key provided: {auth}. You can find your API key at https://example.test")
        else:  # pragma: no cover - a typo in a test
            raise ValueError(f"unknown fault {fault!r}")

    def _malformed(self, body: dict, fault: str) -> bytes:
        """A good answer with its message (OpenAI) or content (Anthropic) replaced by the wrong type."""
        data = json.loads(self.completion(body, self.answer))
        if body.get("_anthropic"):
            data["content"] = {"null-message": None, "list-content": self.answer, "number-content": 42}[fault]
        elif fault == "null-message":
            data["choices"][0]["message"] = None
        else:
            parts = [{"type": "text", "text": self.answer}]
            data["choices"][0]["message"]["content"] = parts if fault == "list-content" else 42
        return json.dumps(data).encode()

    def _bomb(self, body: dict) -> bytes:
        """gzip of ``bomb_bytes`` spaces (JSON whitespace) then a good answer: inflated whole, it parses."""
        prefix, z = _bomb_prefix(self.bomb_bytes)
        z = z.copy()
        return prefix + z.compress(self.completion(body, self.answer)) + z.flush()


_BOMBS: dict = {}


def _bomb_prefix(size: int):
    """The gzip stream of ``size`` spaces so far, and its compressor to go on with (built once:
    compressing 256 MiB takes a second)."""
    if size not in _BOMBS:
        z = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        block = b" " * 2**20
        _BOMBS[size] = (b"".join(z.compress(block) for _ in range(size // len(block))), z)
    return _BOMBS[size]


def run_args(url: str, out, *extra: str, dataset: str = "hotpotqa:dev", limit: str = "1") -> list[str]:
    """``harness run`` against a fault server: no response cache, so every request reaches it."""
    return [
        "run",
        "--model",
        "openai/fault-model",
        "--base-url",
        url,
        "--dataset",
        dataset,
        "--limit",
        limit,
        "--out",
        str(out),
        "--no-cache",
        *extra,
    ]


# ---- an instant server in its own process (benchmarks/overhead.py, tests/test_run_memory.py) --------
INSTANT_REPLY = json.dumps(
    {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 0,
        "model": "bench",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Paris"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12},
    }
).encode()
INSTANT_MODELS = json.dumps({"object": "list", "data": [{"id": "bench", "object": "model", "max_model_len": 32768}]}).encode()


def _http_reply(body: bytes) -> bytes:
    head = f"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
    return head.encode() + body


def serve_instant() -> None:
    """Answers every POST with INSTANT_REPLY and every GET with INSTANT_MODELS at once (HTTP/1.1
    keep-alive, asyncio: thousands of requests a second, little CPU), until stdin closes; prints
    its base URL first."""
    import asyncio
    import sys

    post, get = _http_reply(INSTANT_REPLY), _http_reply(INSTANT_MODELS)

    class Instant(asyncio.Protocol):
        def connection_made(self, transport):
            self.transport, self.buf = transport, b""

        def data_received(self, data):
            self.buf += data
            while (end := self.buf.find(b"\r\n\r\n")) >= 0:
                head = self.buf[:end].lower()
                at = head.find(b"\r\ncontent-length:")
                size = int(head[at + 17 :].split(b"\r\n", 1)[0]) if at >= 0 else 0
                if len(self.buf) < end + 4 + size:
                    return
                self.buf = self.buf[end + 4 + size :]
                self.transport.write(get if head.startswith(b"get") else post)

    loop = asyncio.new_event_loop()
    server = loop.run_until_complete(loop.create_server(Instant, "127.0.0.1", 0, backlog=1024))
    print(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1", flush=True)
    threading.Thread(target=lambda: (sys.stdin.read(), loop.call_soon_threadsafe(loop.stop)), daemon=True).start()
    loop.run_forever()


class InstantServer:
    """``serve_instant`` in a child process for the ``with`` block; ``url`` is its API base."""

    def __enter__(self):
        import subprocess
        import sys

        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--instant"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        self.url = self.proc.stdout.readline().strip()
        return self

    def __exit__(self, *exc) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=10)
        self.proc.stdout.close()


if __name__ == "__main__":
    import sys

    if sys.argv[1:] == ["--instant"]:
        serve_instant()
