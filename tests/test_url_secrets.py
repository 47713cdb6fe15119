"""Credentials of an endpoint URL or a key variable never reach the console, a log line or a file,
over real HTTP on loopback (tests/fake_openai.py, tests/fault_server.py): a URL carrying one is
refused before any request; the server gets the API key, never Basic auth; a key however short is
masked; the endpoint (``--base-url`` or ``OPENAI_BASE_URL``) is part of the model's identity."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from conftest import run_harness
from fake_openai import FakeServer
from fault_server import FaultServer

from harness.cli import main
from harness.models import create_backend
from harness.redact import MASK

# each test starts a loopback server (or runs whole CLI runs in subprocesses): the slow tier
pytestmark = pytest.mark.slow

USER, PASSWORD = "zed-user", "p@ss/w0rd!"  # "@" and "/" must be percent-encoded in a URL
PASSWORD_IN_URL = "p%40ss%2Fw0rd%21"
QUERY_KEY = "qk7"  # shorter than 6 characters: masked all the same
SHORT_KEY = "k3Y"


def _forms(*values: str) -> list[str]:
    """What must never show: each value in clear, and the Basic auth an HTTP client makes of USER:PASSWORD."""
    basic = [base64.b64encode(f"{USER}:{p}".encode()).decode() for p in (PASSWORD, PASSWORD_IN_URL)]
    return [*values, *basic]


def _all_files(root: Path) -> str:
    return "\n".join(p.read_bytes().decode("utf-8", "replace") for p in root.rglob("*") if p.is_file())


def _answer(content: str) -> dict:
    return {
        "id": "c",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
    }


def _echo_auth(method, path, headers, body):
    """A server that answers every question with the Authorization header it received."""
    if not path.endswith("/chat/completions"):
        return 200, {}, {"object": "list", "data": [{"id": "m", "max_model_len": 4096}]}
    return 200, {}, _answer(f"you sent {headers.get('authorization')}")


def _run(*extra: str, out: Path | None = None, model: str = "openai/m") -> list[str]:
    args = ["run", "--model", model, "--dataset", "hotpotqa:dev", "--limit", "1", *extra]
    return args + (["--out", str(out)] if out else [])


@pytest.mark.parametrize("source", ["flag", "env"])
@pytest.mark.parametrize("credential", ["userinfo", "query", "fragment"])
def test_a_url_with_a_credential_is_refused_and_never_shown(tmp_path, source, credential):
    with FakeServer(_echo_auth) as server:
        host = server.url.split("//", 1)[1]
        if credential == "userinfo":
            url, secrets = f"http://{USER}:{PASSWORD_IN_URL}@{host}/v1", _forms(PASSWORD, PASSWORD_IN_URL, USER)
        elif credential == "query":
            url, secrets = f"{server.url}/v1?x=1&api_key={QUERY_KEY}", [QUERY_KEY]
        else:  # never sent to a server, but it was written to config, results and the leaderboard
            url, secrets = f"{server.url}/v1#token={QUERY_KEY}", [QUERY_KEY]
        flag = ("--base-url", url) if source == "flag" else ()
        env = {"OPENAI_API_KEY": "sk-the-real-key-0123456789", "HARNESS_CACHE_DIR": str(tmp_path / "cache")}
        if source == "env":
            env["OPENAI_BASE_URL"] = url
        proc = run_harness(*_run(*flag, "-v", out=tmp_path / "run"), env=env, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()  # one line, no traceback, no log line before it
    where = "--base-url" if source == "flag" else "OPENAI_BASE_URL"
    problem = {"userinfo": "user or password", "query": "a key in its query (api_key)", "fragment": "a fragment"}[credential]
    assert line.startswith("error: ") and where in line and problem in line and "OPENAI_API_KEY" in line
    assert f"'{server.url}/v1" in line  # the URL is named, stripped of its credential
    assert server.requests == []  # refused before anything is sent: no Basic auth in place of the key
    shown = proc.stdout + proc.stderr + _all_files(tmp_path)
    for secret in secrets:
        assert secret not in shown, secret
    assert not (tmp_path / "run").exists()


def test_the_server_gets_the_key_and_a_short_key_echoed_back_is_masked_everywhere(tmp_path):
    env = {"OPENAI_API_KEY": SHORT_KEY, "HARNESS_CACHE_DIR": str(tmp_path / "cache")}
    with FakeServer(_echo_auth) as server:
        proc = run_harness(*_run("--base-url", f"{server.url}/v1", "-v", out=tmp_path / "runs" / "a"), env=env)
        assert proc.returncode == 0, proc.stderr
        board = run_harness("leaderboard", str(tmp_path / "runs"), "--out", str(tmp_path / "board.json"), env=env)
    assert board.returncode == 0, board.stderr
    chats = [headers for _, path, headers, _ in server.requests if path.endswith("/chat/completions")]
    assert chats and all(h["authorization"] == f"Bearer {SHORT_KEY}" for h in chats)  # the key, not Basic
    samples = (tmp_path / "runs" / "a" / "samples.jsonl").read_text()
    assert f"you sent Bearer {MASK}" in samples  # the echo reached the file, masked
    shown = proc.stdout + proc.stderr + board.stdout + board.stderr + _all_files(tmp_path)
    assert SHORT_KEY not in shown
    assert "HTTP Request" in proc.stderr  # -v did log the requests


def _echo_auth_base64(method, path, headers, body):
    """A server that answers with the Authorization header it received, base64-encoded (as some
    gateways' debug echoes do), in both alphabets and at another alignment."""
    if not path.endswith("/chat/completions"):
        return 200, {}, {"object": "list", "data": [{"id": "m", "max_model_len": 4096}]}
    auth = headers.get("authorization", "").encode()
    said = " ".join(encode(prefix + auth).decode() for prefix in (b"", b"h:") for encode in
                    (base64.b64encode, base64.urlsafe_b64encode))  # fmt: skip
    return 200, {}, _answer(f"you sent {said}")


def test_a_key_echoed_base64_encoded_is_masked_everywhere(tmp_path):
    key = "sk-proj-Base64Echo+/Key0123456789abcdefgh"
    env = {"OPENAI_API_KEY": key, "HARNESS_CACHE_DIR": str(tmp_path / "cache")}
    with FakeServer(_echo_auth_base64) as server:
        proc = run_harness(*_run("--base-url", f"{server.url}/v1", "-v", out=tmp_path / "runs" / "a"), env=env)
        assert proc.returncode == 0, proc.stderr
        board = run_harness("leaderboard", str(tmp_path / "runs"), "--out", str(tmp_path / "board.json"), env=env)
    assert board.returncode == 0, board.stderr
    sent = f"Bearer {key}".encode()
    forms = [encode(prefix + sent).decode() for prefix in (b"", b"h:") for encode in
             (base64.b64encode, base64.urlsafe_b64encode)]  # fmt: skip
    samples = (tmp_path / "runs" / "a" / "samples.jsonl").read_text()
    assert samples.count(MASK) >= 4  # the echo reached the file, masked
    shown = proc.stdout + proc.stderr + board.stdout + board.stderr + _all_files(tmp_path)
    for form in forms:
        assert form not in shown and form[8:40] not in shown, form


def test_two_endpoints_are_two_runs_and_the_second_server_answers(tmp_path, monkeypatch):
    # the response cache is on: a cache key without the endpoint would answer the second run from the first
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-endpoint-test-0123456789")
    with FaultServer() as a, FaultServer() as b:
        for server in (a, b, a):  # a again: the same run as the first, nothing left to do
            monkeypatch.setenv("OPENAI_BASE_URL", server.url)
            assert main(_run(model="openai/fault-model")) == 0
    assert len(a.served) == 1 and len(b.served) == 1  # each server answered its own run
    runs = {}
    for path in Path("results").glob("*/results.json"):
        results = json.loads(path.read_text())
        runs[results["model"]["endpoint"]] = (results, json.loads((path.parent / "config.json").read_text()))
    assert sorted(runs) == sorted([a.url, b.url])  # two run directories, one per endpoint
    (ra, config_a), (rb, config_b) = runs[a.url], runs[b.url]
    assert ra["config_hash"] != rb["config_hash"]
    assert config_a["endpoint"] == a.url and config_b["endpoint"] == b.url  # hashed with the run


def test_the_default_endpoint_is_recorded_and_keeps_the_keys(monkeypatch):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    plain = create_backend("openai/gpt-4o-mini")
    assert plain.describe()["endpoint"] == "https://api.openai.com/v1"
    assert plain.identity_facts() == {}  # neutral: run keys made before endpoints were keyed stay valid
    monkeypatch.setenv("OPENAI_BASE_URL", "https://api.openai.com/v1/")
    assert create_backend("openai/gpt-4o-mini").cache_identity() == plain.cache_identity()
    monkeypatch.setenv("OPENAI_BASE_URL", "http://10.1.2.3:8000/v1")
    other = create_backend("openai/gpt-4o-mini")
    assert other.describe()["endpoint"] == "http://10.1.2.3:8000/v1"
    assert other.identity_facts() == {"endpoint": "http://10.1.2.3:8000/v1"}
    assert other.cache_identity() != plain.cache_identity()

    claude = create_backend("anthropic/claude-sonnet-4-5")
    assert claude.describe()["endpoint"] == "https://api.anthropic.com" and claude.identity_facts() == {}
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://10.1.2.3:9000")
    proxied = create_backend("anthropic/claude-sonnet-4-5")
    assert proxied.base_url == "http://10.1.2.3:9000"  # what the SDK is given, so what is recorded is what is used
    assert proxied.identity_facts() == {"endpoint": "http://10.1.2.3:9000"}
    assert proxied.cache_identity() != claude.cache_identity()


def test_backends_without_a_server_name_no_endpoint():
    scripted = create_backend("scripted/echo")
    assert scripted.endpoint() is None and scripted.identity_facts() == {} and "endpoint" not in scripted.describe()
