"""vllm/ with native tools and thinking models: the launched server's (and run-batch's) parser flags
from the hf/ families of harness/models/model_facts.yaml, the refusal of a model without a known tool
parser, an attached server that refuses tool_choice "auto", and run-batch error lines in vLLM's own
shape (a prompt over the context is that sample's context_overflow, not the run's end). The ``vllm``
executable is a stand-in (tests/fake_batch.py ``vllm_main``) that takes the real argv and answers in
vLLM's formats."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest
from conftest import run_harness
from fake_batch import (
    VLLM_AUTO_TOOL_CHOICE_REFUSED,
    answer_for,
    completion,
    vllm_chat_reply,
    vllm_overflow_text,
    vllm_result_line,
    vllm_tokenize,
    write_vllm_stand_in,
)
from test_api_backends import WEATHER_TOOL, FakeServer

import harness
from harness.errors import ContextOverflowError, ModelError
from harness.models import BackendOptions, GenerationParams, create_backend
from harness.models.batch_api import openai_result

TOOLS = ["--enable-auto-tool-choice", "--tool-call-parser"]
ASK = [{"role": "user", "content": "What is the capital of France?"}]


def launch(model: str, native: bool = False, **options):
    backend = create_backend(f"vllm/{model}", BackendOptions(**options))
    backend.native_tools = native
    return backend


def added(backend) -> list[str]:
    """What the launch command holds after the engine seed: the parser flags, then --server-arg's."""
    argv = backend.command(8000, "/usr/bin/vllm")
    head = ["/usr/bin/vllm", "serve", backend.model, "--host", "127.0.0.1", "--port", "8000"]  # the key in VLLM_API_KEY
    assert argv[: len(head)] == head
    rest = argv[len(head) :]
    if backend.options.context_size:
        assert rest[:2] == ["--max-model-len", str(backend.options.context_size)]
        rest = rest[2:]
    if "--seed" not in backend.options.server_args:
        assert rest[:2] == ["--seed", "0"]
        rest = rest[2:]
    return rest


# ------------------------------------------------------------------------------- launch flags
@pytest.mark.parametrize(
    "model, native, flags",
    [
        ("Qwen/Qwen3-0.6B", True, [*TOOLS, "hermes", "--reasoning-parser", "qwen3"]),
        ("/models/Qwen3-0.6B", True, [*TOOLS, "hermes", "--reasoning-parser", "qwen3"]),  # a local path
        ("Qwen/Qwen3-8B", False, ["--reasoning-parser", "qwen3"]),  # thinks, no tools asked
        ("Qwen/Qwen3-Coder-30B-A3B-Instruct", True, [*TOOLS, "qwen3_xml"]),  # the longer family wins
        ("Qwen/Qwen2.5-7B-Instruct", True, [*TOOLS, "hermes"]),
        ("Qwen/Qwen2.5-7B-Instruct", False, []),  # as before: nothing added
        ("Qwen/QwQ-32B", True, [*TOOLS, "hermes", "--reasoning-parser", "deepseek_r1"]),
        ("deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B", False, ["--reasoning-parser", "deepseek_r1"]),
        ("meta-llama/Llama-3.1-8B-Instruct", True, [*TOOLS, "llama3_json"]),
        ("meta-llama/Meta-Llama-3.1-8B-Instruct", True, [*TOOLS, "llama3_json"]),
        ("mistralai/Mistral-7B-Instruct-v0.3", True, [*TOOLS, "mistral"]),
        ("openai/gpt-oss-20b", True, [*TOOLS, "openai"]),
        ("deepseek-ai/DeepSeek-V3.1", True, [*TOOLS, "deepseek_v31", "--reasoning-parser", "deepseek_v3"]),
        ("acme/Mystery-7B", False, []),  # no family, no tools: launched as before
    ],
)
def test_the_family_s_parsers_are_added_to_the_launch(model, native, flags):
    assert added(launch(model, native)) == flags


def test_the_options_override_the_family_and_none_turns_either_off():
    assert added(launch("Qwen/Qwen3-8B", True, tool_parser="qwen3_xml")) == [
        *TOOLS,
        "qwen3_xml",
        "--reasoning-parser",
        "qwen3",
    ]
    assert added(launch("Qwen/Qwen3-8B", True, reasoning_parser="none")) == [*TOOLS, "hermes"]
    assert added(launch("Qwen/Qwen3-8B", True, tool_parser="none")) == ["--reasoning-parser", "qwen3"]
    assert added(launch("Qwen/Qwen2.5-7B-Instruct", False, reasoning_parser="deepseek_r1")) == [
        "--reasoning-parser",
        "deepseek_r1",
    ]
    # an explicit --tool-parser is used even for a strategy without tools (the user asked for it)
    assert added(launch("acme/Mystery-7B", False, tool_parser="pythonic")) == [*TOOLS, "pythonic"]


def test_flags_already_in_server_args_are_not_added_again():
    args = ["--tool-call-parser=hermes", "--reasoning_parser", "deepseek_r1", "--dtype", "half"]
    backend = launch("Qwen/Qwen3-8B", True, server_args=args)
    assert added(backend) == ["--enable-auto-tool-choice", *args]  # only the missing switch
    args = ["--enable-auto-tool-choice", "--tool-call-parser", "pythonic"]
    assert added(launch("acme/Mystery-7B", True, server_args=args)) == args  # a user's parser: no refusal
    info = launch("Qwen/Qwen3-8B", True, server_args=["--tool-call-parser", "pythonic"]).describe()
    assert info["tool_parser"] == {"name": "pythonic", "source": "--server-arg"}


@pytest.mark.parametrize(
    "model, why",
    [
        ("acme/Mystery-7B", "no model family matches it"),
        ("deepseek-ai/DeepSeek-R1", "family hf/DeepSeek-R1 names none"),
    ],
)
def test_native_tools_without_a_known_parser_are_refused_before_the_launch(model, why):
    backend = create_backend(f"vllm/{model}")
    with pytest.raises(ModelError) as info:
        backend.native_tools = True
    text = str(info.value)
    assert "\n" not in text and why in text and "pass --tool-parser NAME" in text
    assert "hermes" in text and "llama3_json" in text and "qwen3_xml" in text  # vLLM's registered names
    # an attached server launches nothing: nothing to refuse
    create_backend(f"vllm/{model}", BackendOptions(base_url="http://127.0.0.1:9/v1")).native_tools = True


def test_the_parsers_are_recorded_and_in_the_cache_key_of_a_launched_server():
    backend = launch("Qwen/Qwen3-0.6B", True)
    info = backend.describe()
    assert info["tool_parser"] == {"name": "hermes", "source": "model facts hf/Qwen3"}
    assert info["reasoning_parser"] == {"name": "qwen3", "source": "model facts hf/Qwen3"}
    assert info["facts"]["entry"] == "hf/Qwen3" and "reasoning_outputs.md" in info["facts"]["source"]
    identity = backend.cache_identity()
    assert identity["tool_parser"] == "hermes" and identity["reasoning_parser"] == "qwen3"
    assert launch("Qwen/Qwen3-0.6B", False).cache_identity() == {
        "backend": "vllm", "model": "Qwen/Qwen3-0.6B", "server_args": [], "reasoning_parser": "qwen3",
    }  # fmt: skip
    assert launch("Qwen/Qwen2.5-7B-Instruct").cache_identity() == {
        "backend": "vllm",
        "model": "Qwen/Qwen2.5-7B-Instruct",
        "server_args": [],
    }  # fmt: skip  (unchanged for a model without parsers: its cached answers stay valid)


def test_run_batch_gets_the_same_parsers():
    backend = create_backend("vllm/Qwen/Qwen3-0.6B", BackendOptions(batch=True, server_args=["--dtype=half"]))
    backend.native_tools = True  # the runner sets it on the batch wrapper; the server's backend reads it
    argv = backend.provider.command("/usr/bin/vllm", "/tmp/in.jsonl", "/tmp/out.jsonl")
    assert argv == [
        "/usr/bin/vllm", "run-batch", "-i", "/tmp/in.jsonl", "-o", "/tmp/out.jsonl", "--model", "Qwen/Qwen3-0.6B",
        "--seed", "0", *TOOLS, "hermes", "--reasoning-parser", "qwen3", "--dtype=half",
    ]  # fmt: skip
    batch = create_backend("vllm/acme/Mystery-7B", BackendOptions(batch=True))
    with pytest.raises(ModelError, match="pass --tool-parser NAME"):
        batch.native_tools = True


@pytest.mark.slow  # two CLI runs
def test_the_runner_tells_the_backend_and_a_native_run_is_refused_in_one_line(tmp_path):
    """No snapshot, no vLLM here: the refusal comes first, from the runner's native_tools; the same
    model closed-book is not refused for tools (it gets as far as looking for vLLM)."""
    common = ["--model", "vllm/acme/Mystery-7B", "--dataset", "hotpotqa:dev", "--limit", "1"]
    proc = run_harness("run", *common, "--setting", "open-book", "--out", str(tmp_path / "native"))
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert "calls tools natively" in lines[0] and "--tool-parser NAME" in lines[0]
    proc = run_harness(
        "run", *common, "--setting", "closed-book", "--out", str(tmp_path / "closed"), env={"PATH": "/nonexistent"}
    )
    assert proc.returncode != 0 and "--tool-parser" not in proc.stderr and "vLLM is not installed" in proc.stderr


# ------------------------------------------------------------------------------- a launched stand-in server
@pytest.fixture
def stand_in(tmp_path, monkeypatch):
    """``vllm`` on PATH is the stand-in; returns the file its argv lines are appended to."""
    write_vllm_stand_in(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    argv_log = tmp_path / "argv.jsonl"
    monkeypatch.setenv("FAKE_VLLM_ARGV", str(argv_log))
    return argv_log


def _ask_with_tools(backend):
    async def go():
        await backend.start()
        try:
            return await backend.generate(ASK, GenerationParams(max_tokens=16), [WEATHER_TOOL], "auto")
        finally:
            await backend.close()

    return asyncio.run(go())


@pytest.mark.slow  # launches the stand-in server
def test_a_launched_server_gets_the_flags_and_answers_tool_calls(stand_in, tmp_path):
    backend = launch("Qwen/Qwen3-0.6B", True)
    backend.log_dir = tmp_path / "logs"
    response = _ask_with_tools(backend)
    assert [c.name for c in response.tool_calls] == ["search"]  # the stand-in refuses "auto" without both flags
    (argv,) = [json.loads(x) for x in stand_in.read_text().splitlines()]
    assert argv[:2] == ["serve", "Qwen/Qwen3-0.6B"]
    assert argv[-5:] == [*TOOLS, "hermes", "--reasoning-parser", "qwen3"]


@pytest.mark.slow  # launches the stand-in server
def test_a_launched_server_gets_its_key_in_the_environment_never_on_its_command_line(stand_in, tmp_path):
    """vLLM takes ``args.api_key or [envs.VLLM_API_KEY]`` (vllm/entrypoints/openai/api_server.py
    build_app), as the stand-in does: the key stays out of ps and /proc/PID/cmdline."""
    import httpx

    backend = launch("Qwen/Qwen3-0.6B")
    backend.log_dir = tmp_path / "logs"

    async def go():
        await backend.start()
        try:
            pid, key = backend.launcher.pid, backend.api_key()
            cmdline = open(f"/proc/{pid}/cmdline", "rb").read()
            environ = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
            models = backend.launcher.url + "/v1/models"
            unauthorized = httpx.get(models, trust_env=False).status_code
            answer = await backend.generate(ASK, GenerationParams(max_tokens=16))
            return key, cmdline, environ, unauthorized, answer
        finally:
            await backend.close()

    key, cmdline, environ, unauthorized, answer = asyncio.run(go())
    assert len(key) == 32 and key.encode() not in cmdline and b"--api-key" not in cmdline
    assert f"VLLM_API_KEY={key}".encode() in environ
    assert unauthorized == 401 and answer.content  # the key from the environment is in force
    (argv,) = [json.loads(x) for x in stand_in.read_text().splitlines()]
    assert key not in json.dumps(argv)


@pytest.mark.slow
def test_a_server_launched_without_a_parser_refuses_auto_in_one_line(stand_in, tmp_path):
    backend = launch("Qwen/Qwen3-0.6B", True, tool_parser="none")
    backend.log_dir = tmp_path / "logs"
    with pytest.raises(ModelError) as info:
        _ask_with_tools(backend)
    text = str(info.value)
    assert "\n" not in text and "launched without a tool-call parser" in text and "pass --tool-parser hermes" in text


# ------------------------------------------------------------------------------- an attached server
def attached_vllm(model: str, flags: list[str]):
    """A FakeServer answering as vLLM started with ``flags`` (vllm_chat_reply) serving ``model``."""

    def handler(method, path, headers, body):
        if path == "/v1/models":
            card = {"id": model, "object": "model", "owned_by": "vllm", "root": model, "max_model_len": 4096}
            return 200, {}, {"object": "list", "data": [card]}
        if path == "/version":
            return 200, {}, {"version": "0.0.0-fake"}
        if path == "/tokenize":
            return 200, {}, vllm_tokenize(body)
        status, payload = vllm_chat_reply(flags, body)
        return status, {}, payload

    return FakeServer(handler)


def _attached_generate(url, model, http_client, messages=ASK, tools=(WEATHER_TOOL,)):
    backend = create_backend(
        f"vllm/{model}", BackendOptions(base_url=url + "/v1", http_client=http_client, max_attempts=1)
    )

    async def go():
        await backend.start()
        try:
            return await backend.generate(
                messages, GenerationParams(max_tokens=16), list(tools) or None, "auto" if tools else None
            )
        finally:
            await backend.close()

    return asyncio.run(go())


HTTP_CLIENTS = [
    "httpx",
    pytest.param(
        "aiohttp", marks=pytest.mark.skipif(not __import__("importlib").util.find_spec("aiohttp"), reason="no aiohttp")
    ),
]


@pytest.mark.parametrize("http_client", HTTP_CLIENTS)
def test_an_attached_server_without_tool_calling_stops_the_run_with_the_flags_it_needs(http_client):
    model = "Qwen/Qwen2.5-0.5B-Instruct"
    with attached_vllm(model, []) as server:
        with pytest.raises(ModelError) as info:
            _attached_generate(server.url, model, http_client)
        assert _attached_generate(server.url, model, http_client, tools=()).content  # without tools it answers
        posted = [r for r in server.requests if r[1] == "/v1/chat/completions"]
    text = str(info.value)
    assert type(info.value) is ModelError and "\n" not in text
    assert f'the vLLM server at {server.url}/v1 refuses tool_choice "auto"' in text
    assert text.endswith("start vLLM with --enable-auto-tool-choice --tool-call-parser hermes")
    assert len(posted) == 2 and posted[0][3]["tool_choice"] == "auto"  # asked once: not retried


@pytest.mark.slow  # a CLI run over a snapshot
def test_a_native_run_on_such_a_server_stops_with_that_line(hotpot_snapshot, tmp_path):
    model = "Qwen/Qwen2.5-0.5B-Instruct"
    with attached_vllm(model, []) as server:
        proc = run_harness(
            "run", "--model", f"vllm/{model}", "--base-url", server.url + "/v1", "--dataset", "hotpotqa:dev",
            "--setting", "open-book", "--snapshot", str(hotpot_snapshot), "--search-space", "evidence-only", "--limit", "3", "--no-cache",
            "--out", str(tmp_path / "run"),
        )  # fmt: skip
    lines = [x for x in proc.stderr.splitlines() if x.strip() and not x.startswith("run ")]
    assert proc.returncode != 0 and len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert lines[0].endswith("start vLLM with --enable-auto-tool-choice --tool-call-parser hermes")
    assert "Traceback" not in proc.stderr


def test_an_attached_server_of_an_unknown_family_names_vllm_s_parsers():
    model = "acme/Mystery-7B"
    with attached_vllm(model, []) as server, pytest.raises(ModelError) as info:
        _attached_generate(server.url, model, "httpx")
    text = str(info.value)
    assert "--enable-auto-tool-choice --tool-call-parser NAME (one of vLLM's: " in text and "llama3_json" in text


def test_an_attached_server_s_words_for_a_long_prompt_are_a_context_overflow():
    model = "Qwen/Qwen2.5-0.5B-Instruct"
    with attached_vllm(model, ["--max-model-len", "3"]) as server:
        with pytest.raises(ContextOverflowError, match="is longer than the maximum model length of 3"):
            _attached_generate(server.url, model, "httpx", tools=())


# ------------------------------------------------------------------------------- run-batch error lines
def test_run_batch_error_lines_are_read_from_the_line_s_error():
    ok = vllm_result_line("a", completion({"messages": ASK}))
    assert openai_result(ok)["status"] == 200 and openai_result(ok)["body"]["choices"]
    too_long = vllm_overflow_text(9000, 4096)
    shaped = vllm_result_line("b", failure=(400, too_long))
    assert shaped["response"]["body"] is None and shaped["error"]["error"]["message"] == too_long
    assert openai_result(shaped) == {"custom_id": "b", "status": 400, "body": None, "error": too_long}
    raised = vllm_result_line("c", failure=(500, "boom: engine died"), style="exception")
    assert openai_result(raised) == {"custom_id": "c", "status": 400, "body": None, "error": "boom: engine died"}
    # older vLLM: a flat ErrorResponse (object "error", message, type, code)
    flat = {**shaped, "error": {"object": "error", "message": "bad request", "type": "BadRequestError", "code": 400}}
    assert openai_result(flat)["error"] == "bad request"
    # OpenAI's own error-file shape still reads as before
    line = {
        "custom_id": "d",
        "response": {"status_code": 429, "body": {"error": {"message": "slow down", "type": "rate_limit_error"}}},
        "error": None,
    }
    assert openai_result(line) == {
        "custom_id": "d",
        "status": 429,
        "body": None,
        "error": "rate_limit_error: slow down",
    }


@pytest.mark.slow  # whole runs through the stand-in run-batch
@pytest.mark.parametrize("style", ["error_response", "exception"])
def test_one_prompt_over_the_context_in_run_batch_is_that_sample_s_failure(style, stand_in, tmp_path, monkeypatch):
    """The stand-in run-batch fails the longest prompt with vLLM's own words (over --max-model-len): that
    sample fails as context_overflow, never sent again; the other three are answered."""
    monkeypatch.setenv("FAKE_VLLM_ERROR_STYLE", style)
    monkeypatch.setenv("FAKE_VLLM_OVERFLOW_LONGEST", "1")
    out = tmp_path / "run"
    result = harness.run(
        model="vllm/Qwen/Qwen2.5-7B-Instruct", batch=True, limit=4, out=str(out), cache=False, show_progress=False,
        max_tokens=16, batch_window=0.2, batch_poll_interval=0.05,
    )  # fmt: skip
    assert result.counts.finished == 3 and result.counts.failed == 1
    assert len(stand_in.read_text().splitlines()) == 1  # one run-batch: the failure was not sent again
    (failure,) = [json.loads(x) for x in (out / "failures.jsonl").read_text().splitlines()]
    assert failure["error_type"] == "context_overflow" and "is longer than the maximum model length" in failure["error"]
    for row in (json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()):
        assert row["answer"] == answer_for(row["messages"][-2]["content"])


# ------------------------------------------------------------------------------- the stand-in itself
def test_the_stand_in_answers_as_vllm_does():
    tools = {"messages": ASK, "tools": [WEATHER_TOOL], "tool_choice": "auto"}
    status, payload = vllm_chat_reply([], tools)
    assert status == 400 and payload == {
        "error": {"message": VLLM_AUTO_TOOL_CHOICE_REFUSED, "type": "BadRequestError", "param": None, "code": 400}
    }
    assert vllm_chat_reply([*TOOLS, "hermes"], tools)[0] == 200
    facts = Path(harness.__file__).parent / "models" / "model_facts.yaml"
    assert VLLM_AUTO_TOOL_CHOICE_REFUSED in facts.read_text()  # the stand-in and the table say the same words
