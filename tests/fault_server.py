"""A hostile OpenAI-protocol server on loopback (stdlib only): each chat request is answered by the
next fault of a script, then by ``default``. Bounded: hangs sleep a fixed time, the server stops
with the test.

Faults: ``ok`` (a normal answer), ``slow`` (the same after ``hang_s`` seconds), ``429`` (with ``Retry-After``), ``500``, ``503``, ``hang`` (no
answer for ``hang_s`` seconds, then the connection closes), ``drop`` (the connection closes with
no response), ``invalid-json`` (200 whose body is not JSON), ``no-choices`` (200 with an empty
``choices``), ``bad-tool-args`` (a tool call whose arguments are not JSON), ``huge`` (a
``huge_chars``-character answer, ignoring ``max_tokens``), ``401-echo`` (401 whose error message
echoes the Authorization header, as some gateways do).
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class LoopbackServer:
    """A threading HTTP server on 127.0.0.1's first free port, serving ``handler`` inside ``with``;
    ``url`` ends in /v1 as an OpenAI client's base URL does."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]):
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
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
    ):
        self.script = list(script or [])
        self.default = default
        self.answer = answer
        self.hang_s = hang_s
        self.huge_chars = huge_chars
        self.retry_after = retry_after
        self.context_size = context_size
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

            def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None):
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
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
                with outer._lock:
                    fault = outer.script.pop(0) if outer.script else outer.default
                    outer.served.append(fault)
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
                "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12},
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
            error(429, "Rate limit reached", {"Retry-After": self.retry_after})
        elif fault in ("500", "503"):
            error(int(fault), "The server had an error")
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
        elif fault == "401-echo":
            auth = h.headers.get("Authorization", "") or h.headers.get("x-api-key", "")
            error(401, f"Incorrect API key provided: {auth}. You can find your API key at https://example.test")
        else:  # pragma: no cover - a typo in a test
            raise ValueError(f"unknown fault {fault!r}")


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
