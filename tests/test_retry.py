"""Retries against a scripted local OpenAI-compatible server: 429 + Retry-After, 5xx, auth errors."""

from __future__ import annotations

import asyncio
import email.utils
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from harness.errors import ContextOverflowError, ModelError, TransientModelError
from harness.models import BackendOptions, GenerationParams, create_backend
from harness.models.launcher import free_port
from harness.models.openai_compat import parse_retry_after

MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]


def completion(content: str = "Paris") -> dict:
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 0,
        "model": "test-model",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 9, "completion_tokens": 1, "total_tokens": 10},
    }


class ScriptedServer:
    """Answers POST /v1/chat/completions with the next (status, headers, body) of ``script``
    (the last entry repeats); records each request's arrival time and JSON body."""

    def __init__(self, script):
        self.script = list(script)
        self.times: list[float] = []
        self.bodies: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                outer.times.append(time.monotonic())
                outer.bodies.append(body)
                i = min(len(outer.times) - 1, len(outer.script) - 1)
                status, headers, payload = outer.script[i]
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for key, value in headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()

    @property
    def requests(self) -> int:
        return len(self.times)


def error(status: int, message: str, code: str | None = None) -> dict:
    return {"error": {"message": message, "type": "error", "param": None, "code": code}}


def generate(backend, **params):
    async def go():
        await backend.start()
        try:
            return await backend.generate(MESSAGES, GenerationParams(**params))
        finally:
            await backend.close()

    return asyncio.run(go())


@pytest.mark.slow
def test_429_then_500_then_success_honours_retry_after(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    script = [
        (429, {"Retry-After": "1"}, error(429, "Rate limit reached", "rate_limit_exceeded")),
        (500, {}, error(500, "The server had an error")),
        (200, {}, completion("Paris")),
    ]
    with ScriptedServer(script) as server:
        backend = create_backend(
            "openai/test-model", BackendOptions(base_url=server.url, max_attempts=5, retry_max_wait=5)
        )
        response = generate(backend, max_tokens=8)
    assert response.content == "Paris"
    assert response.finish_reason == "stop"
    assert response.usage.prompt_tokens == 9 and response.usage.completion_tokens == 1
    assert response.attempts == 3
    assert server.requests == 3
    assert server.times[1] - server.times[0] >= 1.0  # Retry-After: 1 was honoured
    # what went on the wire
    body = server.bodies[0]
    assert body["model"] == "test-model" and body["messages"] == MESSAGES
    assert body["temperature"] == 0.0 and body["max_tokens"] == 8 and body["seed"] == 0


def test_always_500_gives_up_after_max_attempts(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with ScriptedServer([(500, {}, error(500, "boom"))]) as server:
        backend = create_backend(
            "openai/test-model", BackendOptions(base_url=server.url, max_attempts=3, retry_max_wait=0.1)
        )
        with pytest.raises(TransientModelError) as info:
            generate(backend)
    assert info.value.status == 500
    assert "boom" in str(info.value)
    assert server.requests == 3


def test_401_is_not_retried(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-wrong")
    with ScriptedServer([(401, {}, error(401, "Incorrect API key provided", "invalid_api_key"))]) as server:
        backend = create_backend(
            "openai/test-model", BackendOptions(base_url=server.url, max_attempts=5, retry_max_wait=0.1)
        )
        with pytest.raises(ModelError) as info:
            generate(backend)
    assert not isinstance(info.value, TransientModelError)
    assert "401" in str(info.value) and "Incorrect API key" in str(info.value)
    assert "\n" not in str(info.value)
    assert server.requests == 1


def test_context_overflow_is_a_model_error_not_retried(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    msg = "This model's maximum context length is 2048 tokens. However, you requested 4000 tokens."
    with ScriptedServer([(400, {}, error(400, msg, "context_length_exceeded"))]) as server:
        backend = create_backend(
            "openai/test-model", BackendOptions(base_url=server.url, max_attempts=5, retry_max_wait=0.1)
        )
        with pytest.raises(ContextOverflowError, match="maximum context length"):
            generate(backend)
    assert server.requests == 1


def test_insufficient_quota_429_is_not_retried(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with ScriptedServer([(429, {}, error(429, "You exceeded your current quota", "insufficient_quota"))]) as server:
        backend = create_backend(
            "openai/test-model", BackendOptions(base_url=server.url, max_attempts=5, retry_max_wait=0.1)
        )
        with pytest.raises(ModelError, match="quota"):
            generate(backend)
    assert server.requests == 1


def test_connection_refused_is_transient():
    url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    backend = create_backend("openai/test-model", BackendOptions(base_url=url, max_attempts=2, retry_max_wait=0.1))
    # Nobody listening at start: the run stops at once with the URL ...
    with pytest.raises(ModelError, match="cannot reach the server at http://127.0.0.1"):
        generate(backend)
    # ... while a server that goes away mid-run is retried like any transient failure.
    with pytest.raises(TransientModelError, match="connection"):
        asyncio.run(backend.generate(MESSAGES, GenerationParams()))


def test_parse_retry_after_forms():
    assert parse_retry_after({"retry-after": "2"}) == 2.0
    assert parse_retry_after({"retry-after": "0.5"}) == 0.5
    assert parse_retry_after({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    now = time.time()
    date = email.utils.formatdate(now + 30, usegmt=True)
    assert 28 <= parse_retry_after({"retry-after": date}, now=now) <= 31
    assert parse_retry_after({"retry-after": email.utils.formatdate(now - 60, usegmt=True)}, now=now) == 0.0
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({}) is None
