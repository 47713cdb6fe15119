"""Whole runs against a hostile OpenAI-protocol server (tests/fault_server.py): every fault ends as
a retried request, a recorded sample failure or a one-line error, never a crash; keys never leak."""

from __future__ import annotations

import asyncio
import json
import time
import tracemalloc
import zlib
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from conftest import run_harness
from fault_server import FaultServer, LoopbackServer, run_args

from harness.cli import main
from harness.errors import TransientModelError
from harness.models import BackendOptions, GenerationParams, create_backend
from harness.models.http_reply import (
    PIECE,
    DeadlineExpired,
    ReplyTooLarge,
    _Inflater,
    aiohttp_installed,
    capped_event_hooks,
)

# each test starts a loopback server (or runs whole CLI runs in subprocesses): the slow tier
pytestmark = pytest.mark.slow

KEY = "sk-proj-THISISASECRETKEY0123456789"
TRANSPORTS = ["httpx", pytest.param("aiohttp", marks=pytest.mark.skipif(not aiohttp_installed(), reason="no aiohttp"))]


@pytest.fixture(params=TRANSPORTS)
def transport(request) -> str:
    """Every check below holds on both of the SDKs' HTTP transports (--http-client)."""
    return request.param


def run(url: str, out: Path, *extra: str, dataset: str = "hotpotqa:dev", transport: str = "httpx") -> int:
    extra = ("--retry-max-wait", "0.05", "--request-timeout", "1", "--http-client", transport, *extra)
    return main(run_args(url, out, *extra, dataset=dataset))


def pages_args(setting: str, snapshot) -> list[str]:
    return ["--setting", setting, "--snapshot", str(snapshot), "--search-space", "evidence-only", "--context-size", "4096",
            "--metrics", "em-f1"]  # fmt: skip


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.parametrize(
    "faults",
    [
        ["429", "500", "503", "ok"],
        ["hang", "ok"],
        ["drop", "ok"],
        ["invalid-json", "ok"],
        ["no-choices", "ok"],
        ["trickle", "ok"],
        ["gzip-bomb", "ok"],
        ["oversize", "ok"],
        ["html-200", "null-message", "list-content", "number-content", "ok"],
    ],
    ids=lambda f: "+".join(f),
)
@pytest.mark.slow
def test_transient_faults_are_retried_until_an_answer(tmp_path, faults, transport):
    # each of these, unchecked, ends as an answer: the trickle and the bomb (whitespace, then a good
    # reply) after a long wait, the oversize 3 MB one at once
    with FaultServer(script=faults, hang_s=2.5) as server:
        code = run(server.url, tmp_path / "run", "--max-response-bytes", str(MIB), transport=transport)
    assert code == 0
    assert server.served == faults  # every fault was retried, nothing more was sent
    (sample,) = records(tmp_path / "run" / "samples.jsonl")
    assert sample["answer"] == "Paris"


MIB = 2**20


@pytest.mark.parametrize(
    "fault, reason",
    [
        ("invalid-json", "reply 200 is not valid JSON"),
        ("no-choices", "reply has no choices"),
        ("500", "answered 500"),
        ("drop", "connection to OpenAI API"),
        ("html-200", "reply 200 is text/html, not JSON"),
        ("null-message", "choices[0].message is null, not an object"),
        ("list-content", "choices[0].message.content is a list, not text"),
        ("number-content", "choices[0].message.content is a number, not text"),
        ("trickle", "did not finish its reply within --request-timeout 1 s"),
        ("gzip-bomb", "over --max-response-bytes 1 MiB (decompressed)"),
        ("oversize", "over --max-response-bytes 1 MiB (long)"),
    ],
)
def test_a_fault_that_persists_fails_the_sample_as_model_unavailable(tmp_path, fault, reason, capsys, transport):
    with FaultServer(default=fault) as server:
        code = run(
            server.url, tmp_path / "run", "--max-attempts", "3", "--max-response-bytes", str(MIB), transport=transport
        )
    assert code == 4  # the run finished, its one sample failed: nothing answered (a rerun retries it)
    assert server.served == [fault] * 3
    (failure,) = records(tmp_path / "run" / "failures.jsonl")
    assert failure["error_type"] == "model_unavailable", failure
    assert reason in failure["error"], failure["error"]
    assert not (tmp_path / "run" / "errors.log").exists()  # not a code exception
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["counts"]["failed"] == 1


@pytest.mark.slow
def test_retry_after_is_honoured(tmp_path, transport):
    with FaultServer(script=["429", "ok"], retry_after="1") as server:
        started = time.monotonic()
        code = run(server.url, tmp_path / "run", "--retry-max-wait", "5", transport=transport)
        waited = time.monotonic() - started
    assert code == 0 and server.served == ["429", "ok"]
    assert waited >= 1.0  # the server's Retry-After, not the 0.05 s back-off floor


@pytest.mark.parametrize(
    "fault, options, said",
    [
        ("429", {"retry_after": "600"}, "the server asked to wait 600 s before retrying, longer than --retry-max-wait 5 s"),
        ("503", {"error_headers": {"x-should-retry": "false"}}, "answered 503 and said not to retry it (x-should-retry: false)"),
    ],
)
def test_a_server_that_says_not_to_retry_fails_the_sample_at_once(tmp_path, transport, fault, options, said, capsys):
    """Neither a silent 10-minute sleep nor a wait cut short and retried into another 429: the sample
    fails at once as model_unavailable saying why, the run goes on, and a rerun retries it."""
    with FaultServer(default=fault, **options) as server:
        started = time.monotonic()
        code = run(server.url, tmp_path / "run", "--retry-max-wait", "5", transport=transport)
        took = time.monotonic() - started
    assert code == 4 and server.served == [fault] and took < 5
    (failure,) = records(tmp_path / "run" / "failures.jsonl")
    assert failure["error_type"] == "model_unavailable"
    assert failure["error"].startswith("not retried: ") and said in failure["error"], failure["error"]
    assert "rerun the same command to retry them" in capsys.readouterr().err


@pytest.mark.slow
def test_a_3mb_answer_is_scored_without_crashing_and_flagged(tmp_path, capsys, transport):
    out = tmp_path / "run"
    with FaultServer(default="huge", huge_chars=3_000_000) as server:
        code = run(server.url, out, dataset="fanoutqa:dev", transport=transport)
    assert code == 0, capsys.readouterr().err
    results = json.loads((out / "results.json").read_text())
    assert results["counts"]["finished"] == 1
    assert results["scores"]["meta"]["n_oversized_answers"] == 1
    (sample,) = records(out / "samples.jsonl")
    assert len(sample["answer"]) == 3_000_000  # kept whole; scored on its first max_answer_chars
    assert sample["oversized_answer"] is True
    # written once: the transcript's reply points to the answer, and a report puts it back
    assert sample["messages"][-1] == {"role": "assistant", "content": None, "content_from": "answer"}
    assert (out / "samples.jsonl").stat().st_size < 4_000_000
    from harness.analysis.report import build_report_data

    (row,) = build_report_data(out)["rows"]
    assert row["messages"][-1] == {"role": "assistant", "content": sample["answer"]}
    (row,) = results["scores"]["raw"]
    assert row["oversized_answer"] == {"chars": 3_000_000, "scored_chars": 100_000}
    # and re-scoring the run works too (it used to crash on every rerun)
    assert main(["score", str(out)]) == 0


def test_malformed_tool_call_arguments_are_counted_and_the_model_asked_again(tmp_path, hotpot_snapshot):
    with FaultServer(script=["bad-tool-args", "ok"]) as server:
        code = run(server.url, tmp_path / "run", *pages_args("open-book", hotpot_snapshot))
    assert code == 0
    (sample,) = records(tmp_path / "run" / "samples.jsonl")
    assert sample["answer"] == "Paris"
    assert sample["extra"]["malformed_tool_calls"] == 1
    tool_replies = [m for m in sample["messages"] if m["role"] == "tool"]
    assert tool_replies and "error" in tool_replies[0]["content"].lower()


def _files_text(*roots: Path) -> str:
    text = []
    for root in roots:
        for path in root.rglob("*"):
            if path.is_file():
                text.append(path.read_bytes().decode("utf-8", "replace"))
    return "\n".join(text)


@pytest.mark.parametrize("backend", ["openai", "anthropic"])
@pytest.mark.slow
def test_a_401_that_echoes_the_key_never_prints_or_writes_it(tmp_path, backend, transport):
    env_name = "OPENAI_API_KEY" if backend == "openai" else "ANTHROPIC_API_KEY"
    with FaultServer(default="401-echo") as server:
        url = server.url if backend == "openai" else server.url[: -len("/v1")]
        proc = run_harness(
            "run",
            "--model",
            f"{backend}/fault-model",
            "--base-url",
            url,
            "--dataset",
            "hotpotqa:dev",
            "--limit",
            "1",
            "--out",
            str(tmp_path / "run"),
            "--context-size",
            "4096",
            "--http-client",
            transport,
            "-v",
            env={env_name: KEY, "HARNESS_CACHE_DIR": str(tmp_path / "cache")},
        )
    assert server.served, "the request reached the server"
    echoed = server.headers_seen[0].get("authorization", "") + server.headers_seen[0].get("x-api-key", "")
    assert KEY in echoed  # the key was sent, and the server echoed it back ...
    assert proc.returncode == 2 and "401" in proc.stderr, proc.stderr
    assert "[REDACTED]" in proc.stderr
    assert KEY not in proc.stderr + proc.stdout  # ... but nothing shows it
    assert KEY[:12] not in _files_text(tmp_path)


@pytest.mark.skipif(not aiohttp_installed(), reason="no aiohttp")
def test_max_response_bytes_and_http_client_are_recorded_not_hashed(tmp_path):
    with FaultServer() as server:
        assert run(server.url, tmp_path / "a", "--max-response-bytes", str(MIB), transport="aiohttp") == 0
        assert run(server.url, tmp_path / "b", transport="httpx") == 0
    a = json.loads((tmp_path / "a" / "results.json").read_text())
    b = json.loads((tmp_path / "b" / "results.json").read_text())
    assert a["config"]["backend"]["max_response_bytes"] == MIB
    assert b["config"]["backend"]["max_response_bytes"] == 16 * MIB  # the default, recorded too
    assert (a["config"]["backend"]["http_client"], b["config"]["backend"]["http_client"]) == ("aiohttp", "httpx")
    assert a["config_hash"] == b["config_hash"]  # how replies are read, not what is asked


# --------------------------------------------------------------------------- one backend, no run
def generate(backend_name: str, server: FaultServer, **options):
    url = server.url if backend_name == "openai" else server.url[: -len("/v1")]
    # a model the facts table knows: an unknown Anthropic model would be probed first, and the probe
    # would meet the fault meant for the request
    model = "fault-model" if backend_name == "openai" else "claude-sonnet-4-5"
    backend = create_backend(
        f"{backend_name}/{model}", BackendOptions(base_url=url, retry_max_wait=0.05, request_timeout=1, **options)
    )

    async def go():
        try:
            return await backend.generate([{"role": "user", "content": "Capital of France?"}], GenerationParams())
        finally:
            await backend.close()

    return asyncio.run(go())


@pytest.fixture
def keys(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")


@pytest.mark.parametrize("backend", ["openai", "anthropic"])
def test_a_gzip_bomb_is_cut_at_the_cap_with_memory_bounded(keys, backend, transport):
    """256 MiB of whitespace gzipped to 250 KB, then a good reply: read whole it would parse."""
    too_large = r"over --max-response-bytes 1 MiB \(decompressed\)"
    with FaultServer(default="gzip-bomb", bomb_bytes=256 * MIB) as server:
        started = time.monotonic()
        with pytest.raises(ReplyTooLarge, match=too_large):
            generate(backend, server, max_attempts=2, max_response_bytes=MIB, http_client=transport)
        took = time.monotonic() - started
        assert server.served == ["gzip-bomb"] * 2  # retried within --max-attempts, then given up
        assert took < 5  # inflating 256 MiB is not what took the time
        tracemalloc.start()  # again, the SDK imported: what is left is the request
        try:
            with pytest.raises(ReplyTooLarge, match=too_large):
                generate(backend, server, max_attempts=1, max_response_bytes=MIB, http_client=transport)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    # the body never held more than the cap and an inflated piece, plus the client's own objects
    assert peak < MIB + PIECE + 3 * MIB, peak


@pytest.mark.parametrize("backend", ["openai", "anthropic"])
def test_a_gzip_reply_within_the_cap_is_read(keys, backend, transport):
    with FaultServer(default="gzip-bomb", bomb_bytes=0) as server:  # a plain gzipped reply
        response = generate(backend, server, max_attempts=1, http_client=transport)
    assert response.content == "Paris"


@pytest.mark.parametrize("lib_name", ["httpx", "httpx2"])
def test_the_cap_holds_for_either_http_library(lib_name):
    """The probes (GET /models) use httpx, newer SDKs its fork httpx2: one hook serves both."""
    lib = pytest.importorskip(lib_name)
    body = zlib.compress(b" " * (8 * MIB) + b"{}")

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Encoding", "deflate")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    async def get(limit: int):
        async with lib.AsyncClient(event_hooks=capped_event_hooks(limit)) as client:
            return (await client.get(server.url)).json()

    with LoopbackServer(Handler) as server:
        with pytest.raises(ReplyTooLarge, match="decompressed"):
            asyncio.run(get(MIB))
        assert asyncio.run(get(16 * MIB)) == {}  # within the cap: read, inflated once


def test_inflater_reads_gzip_zlib_and_raw_deflate_in_bounded_pieces():
    data = b" " * (8 * MIB) + b"end"
    gzip_z = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    raw_z = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    for encoding, packed in [
        ("gzip", gzip_z.compress(data) + gzip_z.flush()),
        ("deflate", zlib.compress(data)),  # zlib-wrapped, as the RFC says
        ("deflate", raw_z.compress(data) + raw_z.flush()),  # raw, as some servers send
    ]:
        inflater = _Inflater(encoding)
        pieces = [piece for i in range(0, len(packed), 4096) for piece in inflater.feed(packed[i : i + 4096])]
        assert b"".join(pieces) == data, encoding
        assert max(map(len, pieces)) <= PIECE  # one small read never inflates past a piece at once


@pytest.mark.parametrize("backend", ["openai", "anthropic"])
def test_a_trickling_server_is_cut_at_the_request_timeout(keys, backend, transport):
    """One byte every 0.05 s: no read waits long, the whole reply would take 15 s."""
    with FaultServer(default="trickle", trickle_s=0.05) as server:
        started = time.monotonic()
        with pytest.raises(DeadlineExpired, match="within --request-timeout 1 s"):
            generate(backend, server, max_attempts=2, http_client=transport)
        took = time.monotonic() - started
    assert server.served == ["trickle"] * 2  # the expiry is a transient fault: retried
    assert 2 <= took < 6


@pytest.mark.parametrize(
    "fault, reason",
    [
        ("html-200", "reply 200 is text/html, not JSON"),
        ("null-message", "reply.content is null, not a list of blocks"),
        ("list-content", "reply.content is a string, not a list of blocks"),
        ("number-content", "reply.content is a number, not a list of blocks"),
        ("oversize", "over --max-response-bytes 1 MiB (long)"),
    ],
)
def test_anthropic_malformed_replies_are_retried_never_answers(keys, fault, reason, transport):
    with FaultServer(script=[fault, "ok"]) as server:
        response = generate("anthropic", server, max_attempts=2, max_response_bytes=MIB, http_client=transport)
    assert response.content == "Paris" and response.attempts == 2
    with FaultServer(default=fault) as server:
        with pytest.raises(TransientModelError) as info:
            generate("anthropic", server, max_attempts=2, max_response_bytes=MIB, http_client=transport)
    assert reason in str(info.value) and server.served == [fault] * 2


@pytest.mark.parametrize("fault", ["gzip-bomb", "oversize"])
def test_a_refused_reply_is_let_go_of_when_its_sample_fails(tmp_path, fault, transport, monkeypatch):
    """Issue 45: each refused body stayed referenced (a failed sample's frames, a cycle through its
    task) until a full garbage collection: a run against a server refusing every reply kept 16 MiB
    per sample. With the collector off, what a whole run leaves allocated grows by far less than
    one body (1 MiB here) for each extra refused sample."""
    import gc

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    left: dict[int, int] = {}
    with FaultServer(default=fault, bomb_bytes=4 * MIB, huge_chars=4 * MIB) as server:
        for n in (1, 2, 6):  # the first untraced: imports (slow under tracemalloc), the SDK's first client
            args = ("--max-attempts", "1", "--max-response-bytes", str(MIB), "--max-connections", "2")
            gc.collect()
            gc.disable()
            if n > 1:
                tracemalloc.start()
            try:
                code = main(run_args(server.url, tmp_path / f"run{n}", "--http-client", transport, *args, limit=str(n)))
                left[n] = tracemalloc.get_traced_memory()[0]
            finally:
                tracemalloc.stop()
                gc.enable()
            assert code == 4 and len(records(tmp_path / f"run{n}" / "failures.jsonl")) == n
    per_sample = (left[6] - left[2]) / 4
    assert per_sample < MIB / 8, f"{per_sample / MIB:.2f} MiB left allocated per refused sample"
