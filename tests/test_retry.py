"""Retries against a scripted local OpenAI-compatible server: 429 + Retry-After, 5xx, auth errors."""

from __future__ import annotations

import asyncio
import email.utils
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from fault_server import FaultServer

from harness.errors import ContextOverflowError, ModelError, TransientModelError
from harness.models import BackendOptions, GenerationParams, create_backend
from harness.models.launcher import free_port
from harness.models.http_reply import aiohttp_installed
from harness.models.openai_compat import parse_retry_after, should_retry_header
from harness.models.retry import _wait, retrying, wait_too_long

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


# ---- the server's own say: x-should-retry, and a Retry-After past --retry-max-wait ----------------
# As the SDKs read them (openai 3.57.0 / anthropic 2.14.0 _base_client.py _should_retry): see
# harness.models.openai_compat and docs/models.md#retries.
TRANSPORTS = ["httpx", pytest.param("aiohttp", marks=pytest.mark.skipif(not aiohttp_installed(), reason="no aiohttp"))]


def backend_for(server, transport, **options):
    options = {"max_attempts": 4, "retry_max_wait": 0.05, **options}
    return create_backend("openai/test-model", BackendOptions(base_url=server.url, http_client=transport, **options))


def paired(*cases):
    """Each case on one transport, alternating: every case once, every transport seen (a test each costs ~0.5 s)."""
    return [pytest.param(*case, t.values[0], marks=t.marks) if hasattr(t, "values") else (*case, t)
            for case, t in zip(cases, TRANSPORTS * len(cases))]


@pytest.mark.parametrize("status, transport", paired((429,), (503,), (500,)))
def test_x_should_retry_false_is_not_retried(monkeypatch, transport, status):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    script = [(status, {"x-should-retry": "false"}, error(status, "Do not send this again")), (200, {}, completion())]
    with ScriptedServer(script) as server:
        with pytest.raises(TransientModelError) as info:
            generate(backend_for(server, transport))
    assert server.requests == 1  # the server said no: one request, not --max-attempts
    assert info.value.should_retry is False and info.value.status == status
    assert "said not to retry it (x-should-retry: false)" in str(info.value) and "Do not send this again" in str(info.value)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_x_should_retry_true_retries_a_4xx(monkeypatch, transport):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    script = [(400, {"X-Should-Retry": "true"}, error(400, "Try again")), (200, {}, completion("Paris"))]
    with ScriptedServer(script) as server:
        response = generate(backend_for(server, transport))
    assert response.content == "Paris" and response.attempts == 2 and server.requests == 2


@pytest.mark.parametrize("transport", ["httpx"])
def test_a_400_without_the_header_still_stops(monkeypatch, transport):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with ScriptedServer([(400, {"x-should-retry": "maybe"}, error(400, "Bad field"))]) as server:
        with pytest.raises(ModelError, match=r"rejected the request \(400\): Bad field"):
            generate(backend_for(server, transport))
    assert server.requests == 1


@pytest.mark.parametrize(
    "headers, shown, transport",
    paired(({"Retry-After": "600"}, "600 s"), ({"retry-after-ms": "90000"}, "90 s"), ({"Retry-After": "1e999"}, "an unbounded time")),
)
def test_a_retry_after_past_the_bound_fails_at_once_saying_so(monkeypatch, transport, headers, shown):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    script = [(429, headers, error(429, "Rate limit reached", "rate_limit_exceeded")), (200, {}, completion())]
    with ScriptedServer(script) as server:
        started = time.monotonic()
        with pytest.raises(TransientModelError) as info:
            generate(backend_for(server, transport, retry_max_wait=30))
        took = time.monotonic() - started
    assert server.requests == 1 and took < 10  # neither slept through nor cut short to 30 s and retried
    message = str(info.value)
    assert f"the server asked to wait {shown} before retrying, longer than --retry-max-wait 30 s: not retried" in message
    assert "rerun the same command later" in message and "Rate limit reached" in message
    assert info.value.should_retry is False and info.value.status == 429


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_retry_after_within_the_bound_is_waited_exactly(monkeypatch, transport):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    script = [(503, {"retry-after-ms": "400", "Retry-After": "9"}, error(503, "busy")), (200, {}, completion("Paris"))]
    with ScriptedServer(script) as server:
        response = generate(backend_for(server, transport, retry_max_wait=5))
    assert response.content == "Paris" and server.requests == 2
    assert 0.4 <= server.times[1] - server.times[0] < 3  # retry-after-ms, not the 9 s nor the back-off


def test_no_wait_asked_is_the_backoff_and_zero_is_no_wait_asked():
    wait = _wait(10.0)
    for retry_after in (None, 0.0):  # the SDKs take a delay of 0 as "none said": their own back-off
        delays = [wait(1, TransientModelError("x", retry_after=retry_after)) for _ in range(20)]
        assert all(1.0 <= d <= 2.0 for d in delays)
    assert wait(1, TransientModelError("x", retry_after=3.5)) == 3.5
    assert wait(3, TransientModelError("x", retry_after=3.5)) == 3.5  # not the back-off of attempt 3
    assert wait(5, TransientModelError("x")) == 10.0  # 16 s and more of back-off, capped at the bound
    assert wait_too_long(TransientModelError("x", retry_after=10.0), 10.0) is None  # at the bound: waited


def test_retrying_does_not_retry_what_the_server_refused():
    calls = []

    async def refused():
        calls.append(1)
        raise TransientModelError("503 (x-should-retry: false)", status=503, should_retry=False)

    with pytest.raises(TransientModelError, match="x-should-retry: false"):
        asyncio.run(retrying(refused, max_attempts=5, max_wait=0.01))
    assert len(calls) == 1


def test_should_retry_header_and_odd_retry_afters():
    assert should_retry_header({"x-should-retry": "true"}) is True
    assert should_retry_header({"x-should-retry": "false"}) is False
    assert should_retry_header({"x-should-retry": "yes"}) is None and should_retry_header({}) is None
    assert parse_retry_after({"retry-after": "1e999"}) == float("inf")  # too long, never short
    assert parse_retry_after({"retry-after": "nan"}) is None
    assert parse_retry_after({"retry-after-ms": "nan", "retry-after": "4"}) == 4.0
    assert parse_retry_after({"retry-after": "-5"}) == 0.0


@pytest.mark.parametrize(
    "fault, options, said, transport",
    paired(
        ("500", {"error_headers": {"x-should-retry": "false"}}, "said not to retry it (x-should-retry: false)"),
        ("429", {"retry_after": "600"}, "the server asked to wait 600 s before retrying"),
    ),
)
def test_anthropic_obeys_the_same_headers(monkeypatch, transport, fault, options, said):
    """The anthropic SDK's status errors carry the reply's headers too (exc.response.headers)."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    with FaultServer(default=fault, **options) as server:
        backend = create_backend(
            "anthropic/fault-model",
            BackendOptions(base_url=server.url[: -len("/v1")], max_attempts=4, retry_max_wait=5, http_client=transport),
        )

        async def go():
            try:
                await backend.generate(MESSAGES, GenerationParams(max_tokens=8))
            finally:
                await backend.close()

        with pytest.raises(TransientModelError, match=re.escape(said)):
            asyncio.run(go())
    assert server.served == [fault]
