"""The llamacpp-server backend against a real llama-cpp-python server running the packaged SmolLM2,
and the shared ServerLauncher's start/stop/failure behaviour."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time

import pytest
from conftest import LLAMA_SERVER

from harness.errors import ContextOverflowError, ModelError
from harness.models import BackendOptions, GenerationParams, create_backend
from harness.models.launcher import ServerLauncher, attach, free_port, port_is_open
from harness.models.gguf import gguf_trained_context, read_gguf_metadata

GREEDY = GenerationParams(temperature=0.0, max_tokens=16, seed=0)
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "the city"}},
            "required": ["city"],
        },
    },
}


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie still answers kill(0); it is dead for our purposes
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


@pytest.fixture(scope="module")
def server():
    backend = create_backend("llamacpp-server/smollm2", BackendOptions(startup_timeout=120))
    asyncio.run(backend.start())
    yield backend
    asyncio.run(backend.close())


@pytest.fixture(scope="module")
def llama_vocab(server):
    from llama_cpp import Llama

    return Llama(str(server.path), vocab_only=True, verbose=False)


@pytest.mark.slow
def test_context_size_is_the_trained_length(server, llama_vocab):
    meta = llama_vocab.metadata
    trained = int(meta[f"{meta['general.architecture']}.context_length"])
    assert server.context_size() == trained
    assert gguf_trained_context(server.path) == trained
    # the pure-Python header reader agrees with llama.cpp on the scalar keys
    ours = read_gguf_metadata(server.path)
    assert ours["general.architecture"] == meta["general.architecture"]
    assert "--n_ctx" in server.launcher.argv and str(trained) in server.launcher.argv


@pytest.mark.slow
def test_count_tokens_matches_llama_cpp(server, llama_vocab):
    for text in ("Hello world", "The quick brown fox jumps over the lazy dog.", "<|im_start|>user"):
        expected = len(llama_vocab.tokenize(text.encode(), add_bos=False, special=True))
        assert server.count_tokens(text) == expected > 0
    assert server.count_tokens("") == 0


@pytest.mark.slow
def test_greedy_answer(server):
    messages = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]
    first = asyncio.run(server.generate(messages, GREEDY))
    assert first.content and first.content.strip()
    assert first.finish_reason in ("stop", "length")
    assert 0 < first.usage.completion_tokens <= 16 and first.usage.prompt_tokens > 0
    assert first.attempts == 1
    again = asyncio.run(server.generate(messages, GREEDY))
    assert again.content == first.content  # greedy is repeatable


@pytest.mark.slow
def test_named_tool_choice_returns_a_tool_call(server):
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    choice = {"type": "function", "function": {"name": "get_weather"}}
    response = asyncio.run(server.generate(messages, GenerationParams(max_tokens=64), [WEATHER_TOOL], choice))
    assert response.tool_calls, response
    call = response.tool_calls[0]
    assert call.name == "get_weather" and call.id
    args = json.loads(call.arguments)
    assert isinstance(args, dict) and "city" in args
    # the transcript with the call and its result goes back to the server (content "" not null)
    follow = messages + [response.as_message(), {"role": "tool", "tool_call_id": call.id, "content": "sunny, 21 C"}]
    answer = asyncio.run(server.generate(follow, GREEDY, [WEATHER_TOOL]))
    assert answer.content is not None


@pytest.mark.slow
def test_describe_and_cache_identity(server):
    info = server.describe()
    assert info["base_url"] == server.launcher.base_url and info["base_url"].startswith("http://127.0.0.1:")
    assert info["context_size"] == server.context_size()
    identity = server.cache_identity()
    assert identity["model"] == str(server.path) and identity["size"] == server.path.stat().st_size
    assert str(server.launcher.port) not in json.dumps(identity)


@pytest.mark.slow
def test_the_server_key_is_in_its_environment_never_its_command_line(server):
    """Any local user reads a process's command line (ps, /proc/PID/cmdline); only its owner reads
    /proc/PID/environ. The real llama-cpp-python server takes the key from API_KEY and enforces it."""
    import httpx

    key, pid = server.api_key(), server.launcher.pid
    cmdline = open(f"/proc/{pid}/cmdline", "rb").read()
    assert key.encode() not in cmdline and b"api_key" not in cmdline
    assert key not in server.launcher.shown_command()
    assert f"API_KEY={key}".encode() in open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
    models = server.launcher.url + "/v1/models"
    assert httpx.get(models, trust_env=False).status_code == 401  # the key from the environment is in force
    assert httpx.get(models, headers={"Authorization": f"Bearer {key}"}, trust_env=False).status_code == 200


@pytest.mark.slow
def test_override_overflow_and_close():
    backend = create_backend("llamacpp-server/smollm2", BackendOptions(context_size=256, max_attempts=3))
    assert backend.context_size() == 256

    async def go():
        await backend.start()
        try:
            long = [{"role": "user", "content": "word " * 400}]
            with pytest.raises(ContextOverflowError):
                await backend.generate(long, GREEDY)
        finally:
            pid, port = backend.launcher.pid, backend.launcher.port
            await backend.close()
        return pid, port

    pid, port = asyncio.run(go())
    assert not pid_alive(pid)
    assert not port_is_open(port)
    asyncio.run(backend.close())  # twice is fine


@pytest.mark.slow
def test_broken_model_file_fails_fast_with_log(tmp_path):
    bogus = tmp_path / "bogus.gguf"
    bogus.write_bytes(b"this is not a model" * 100)
    backend = create_backend(f"llamacpp-server/{bogus}", BackendOptions(context_size=512, startup_timeout=60))
    backend.log_dir = tmp_path / "logs"
    started = time.monotonic()
    with pytest.raises(ModelError) as info:
        asyncio.run(backend.start())
    assert time.monotonic() - started < 30
    message = str(info.value)
    assert "ended with exit code" in message and "last lines" in message
    assert "\n" not in message
    assert backend._api_key not in message  # the local server's key is masked
    assert str(tmp_path / "logs" / "llama-cpp-server.log") in message


def test_missing_model_file_and_unknown_alias():
    with pytest.raises(ModelError, match="not found"):
        create_backend("llamacpp-server//nonexistent/model.gguf")
    with pytest.raises(ModelError, match="unknown packaged model"):
        create_backend("llamacpp-server/no-such-alias")


# --------------------------------------------------------------------------- launcher
def py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


HTTP_SERVER = (
    "import sys, http.server\n"
    "class H(http.server.BaseHTTPRequestHandler):\n"
    "    def do_GET(self):\n"
    "        self.send_response(200); self.send_header('Content-Type','application/json'); self.end_headers()\n"
    "        self.wfile.write(b'{\"data\": []}')\n"
    "    def log_message(self, *a): pass\n"
    "print('serving', flush=True)\n"
    "http.server.HTTPServer(('127.0.0.1', int(sys.argv[1])), H).serve_forever()\n"
)


def test_launcher_reports_early_exit_with_log_tail(tmp_path):
    code = "import sys; print('loading...'); print('fatal: no such model', file=sys.stderr); sys.exit(3)"
    launcher = ServerLauncher(py(code), name="dies", log_dir=tmp_path)
    with pytest.raises(ModelError) as info:
        asyncio.run(launcher.start())
    assert "ended with exit code 3" in str(info.value) and "fatal: no such model" in str(info.value)
    assert not launcher.running()


@pytest.mark.slow
def test_launcher_times_out_and_kills_the_child(tmp_path):
    launcher = ServerLauncher(py("import time; time.sleep(60)"), name="silent", startup_timeout=1.0, log_dir=tmp_path)
    with pytest.raises(ModelError, match="not ready"):
        asyncio.run(launcher.start())
    assert not pid_alive(launcher.pid)


def test_launcher_serves_then_stops_on_error_inside_async_with():
    launcher = ServerLauncher(lambda port: py(HTTP_SERVER) + [str(port)], name="echo")

    async def go():
        async with launcher:
            assert launcher.running() and port_is_open(launcher.port)
            assert await attach(launcher.url) == {"data": []}
            assert await attach(launcher.base_url) == {"data": []}  # with /v1 too
            raise RuntimeError("agent crashed")

    with pytest.raises(RuntimeError):
        asyncio.run(go())
    assert not pid_alive(launcher.pid)
    assert not port_is_open(launcher.port)
    assert not launcher.log_path.exists()  # a clean stop removes the temporary log


def test_launcher_keeps_its_log_in_a_given_dir(tmp_path):
    launcher = ServerLauncher(lambda port: py(HTTP_SERVER) + [str(port)], name="echo", log_dir=tmp_path)
    asyncio.run(launcher.start())
    launcher.stop()
    assert launcher.log_path == tmp_path / "echo.log"
    assert "serving" in launcher.log_path.read_text()


def test_launcher_sigkills_a_child_that_ignores_sigterm():
    code = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n" + HTTP_SERVER
    launcher = ServerLauncher(lambda port: py(code) + [str(port)], name="stubborn", grace_period=0.5)
    asyncio.run(launcher.start())
    started = time.monotonic()
    launcher.stop()
    assert time.monotonic() - started < 5
    assert launcher.process.returncode == -signal.SIGKILL
    assert not pid_alive(launcher.pid)


def test_attach_unreachable():
    url = f"http://127.0.0.1:{free_port()}/v1"
    with pytest.raises(ModelError, match=f"cannot reach .* at {url}"):
        asyncio.run(attach(url, timeout=2))


def test_launcher_retries_on_a_fresh_port_when_the_port_was_taken(tmp_path):
    marker = tmp_path / "tried"
    code = (
        "import os, sys\n"
        f"marker = {str(marker)!r}\n"
        "if not os.path.exists(marker):\n"
        "    open(marker, 'w').close()\n"
        "    print('ERROR: [Errno 98] error while attempting to bind: address already in use', flush=True)\n"
        "    sys.exit(1)\n"
    ) + HTTP_SERVER
    ports = []

    def command(port):
        ports.append(port)
        return py(code) + [str(port)]

    launcher = ServerLauncher(command, name="racy")
    asyncio.run(launcher.start())
    try:
        assert len(ports) == 2 and launcher.port == ports[-1] and launcher.running()
    finally:
        launcher.stop()


# --------------------------------------------------------------------------- threads, slots, two servers
@pytest.mark.slow
def test_threads_default_to_every_core_and_one_slot_is_recorded(server):
    from harness.models.llamacpp_server import available_cores

    argv = server.launcher.argv
    cores = str(available_cores())
    assert argv[argv.index("--n_threads") + 1] == cores and argv[argv.index("--n_threads_batch") + 1] == cores
    assert server.server_slots() == 1  # llama_cpp.server has one lock around the model, no parallel slots
    info = server.describe()
    assert info["n_threads"] == available_cores() and info["server_slots"] == 1
    chosen = create_backend("llamacpp-server/smollm2", BackendOptions(n_threads=3)).command(8000)
    assert chosen[chosen.index("--n_threads") + 1] == "3"
    overridden = create_backend("llamacpp-server/smollm2", BackendOptions(server_args=["--n_threads", "5"]))
    assert overridden.command(8000)[-2:] == ["--n_threads", "5"] and overridden.n_threads() == 5


@pytest.mark.slow
def test_max_connections_above_the_slots_is_said_once_and_recorded(tmp_path):
    from conftest import run_harness

    out = tmp_path / "run"
    proc = run_harness("run", "--model", "llamacpp-server/smollm2", "--dataset", "hotpotqa:dev", "--limit", "2",
                       "--max-tokens", "4", "--max-connections", "2", "--n-threads", "1", "--no-cache",
                       "--out", str(out))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("the server runs 1 request at a time") == 1
    model = json.loads((out / "results.json").read_text())["model"]
    assert model["requests_at_a_time"] == 1 and model["n_threads"] == 1


def _llama_server(name: str, log_dir) -> ServerLauncher:
    """llama_cpp.server (LLAMA_SERVER) on the packaged SmolLM2, without a key (loopback, test only), one thread."""
    from harness.models.local import packaged_model_path

    path = str(packaged_model_path("smollm2"))
    return ServerLauncher(
        lambda port: [*LLAMA_SERVER, "--model", path, "--host", "127.0.0.1",
                      "--port", str(port), "--n_ctx", "2048", "--n_threads", "1"],  # fmt: skip
        name=name,
        log_dir=log_dir,
        startup_timeout=120,
        unset_env=("HOST", "PORT", "CONFIG_FILE", "API_KEY", "MODEL"),
    )


@pytest.mark.slow
def test_two_servers_one_killed_mid_run_every_sample_finishes_once(tmp_path):
    import subprocess

    from conftest import harness_cmd

    a, b = _llama_server("a", tmp_path / "logs"), _llama_server("b", tmp_path / "logs")
    out = tmp_path / "run"
    with a, b:
        asyncio.run(a.start())
        asyncio.run(b.start())
        proc = subprocess.Popen(
            harness_cmd("run", "--model", "openai/smollm2", "--base-url", f"{a.base_url},{b.base_url}",
                        "--dataset", "hotpotqa:dev", "--limit", "8", "--max-tokens", "8", "--max-connections", "2",
                        "--max-attempts", "3", "--retry-max-wait", "0.5", "--no-cache", "--out", str(out)),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        samples = out / "samples.jsonl"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            if samples.exists() and samples.read_text().count("\n") >= 2:
                break
            time.sleep(0.05)
        os.killpg(a.pid, signal.SIGKILL)  # mid-run: its request in flight, if any, is dropped
        killed_after = samples.read_text().count("\n")
        _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr
    assert killed_after < 8, "the run ended before the server was killed"
    ids = [json.loads(line)["id"] for line in samples.read_text().splitlines()]
    assert len(ids) == 8 and len(set(ids)) == 8
    assert not (out / "failures.jsonl").exists() or not (out / "failures.jsonl").read_text().strip()
    results = json.loads((out / "results.json").read_text())
    assert results["counts"] == {**results["counts"], "finished": 8, "failed": 0, "pending": 0}
    servers = {s["url"]: s for s in results["model"]["servers"]}
    dead, alive = servers[a.base_url], servers[b.base_url]
    assert dead["failures"] >= 1 and dead["taken_out"] >= 1 and not dead["in_service_at_end"]
    assert alive["failures"] == 0 and alive["requests"] >= 8 - killed_after
    assert dead["requests"] + alive["requests"] == 8 + dead["failures"]  # every failed request was sent again


@pytest.mark.slow
def test_a_context_below_llama_cpps_padding_is_the_one_enforced():
    """llama.cpp pads n_ctx 200 to 256; a prompt of about 220 tokens fell between the two and the
    server answered 500 ("could not broadcast", retried as transient). Now the server keeps 200."""
    backend = create_backend("llamacpp-server/smollm2", BackendOptions(context_size=200, max_attempts=3))

    async def go():
        await backend.start()
        try:
            with pytest.raises(ContextOverflowError):
                await backend.generate([{"role": "user", "content": "word " * 190}], GREEDY)
            fits = [{"role": "user", "content": "word " * 150}]
            return await backend.generate(fits, GenerationParams(max_tokens=100))
        finally:
            await backend.close()

    fits = asyncio.run(go())
    assert fits.usage.prompt_tokens + fits.usage.completion_tokens <= 200
