"""Whole runs against a hostile OpenAI-protocol server (tests/fault_server.py): every fault ends as
a retried request, a recorded sample failure or a one-line error, never a crash; keys never leak."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_harness
from fault_server import FaultServer, run_args

from harness.cli import main

KEY = "sk-proj-THISISASECRETKEY0123456789"


def run(url: str, out: Path, *extra: str, dataset: str = "hotpotqa:dev") -> int:
    return main(run_args(url, out, "--retry-max-wait", "0.05", "--request-timeout", "1", *extra, dataset=dataset))


def pages_args(setting: str, snapshot) -> list[str]:
    return ["--setting", setting, "--snapshot", str(snapshot), "--context-size", "4096", "--metrics", "em-f1"]


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
    ],
    ids=lambda f: "+".join(f),
)
@pytest.mark.slow
def test_transient_faults_are_retried_until_an_answer(tmp_path, faults):
    with FaultServer(script=faults, hang_s=2.5) as server:
        code = run(server.url, tmp_path / "run")
    assert code == 0
    assert server.served == faults  # every fault was retried, nothing more was sent
    (sample,) = records(tmp_path / "run" / "samples.jsonl")
    assert sample["answer"] == "Paris"


@pytest.mark.parametrize("fault", ["invalid-json", "no-choices", "500", "drop"])
def test_a_fault_that_persists_fails_the_sample_as_model_unavailable(tmp_path, fault, capsys):
    with FaultServer(default=fault) as server:
        code = run(server.url, tmp_path / "run", "--max-attempts", "3")
    assert code == 1  # the run finished, with a failed sample (rerun retries it)
    assert server.served == [fault] * 3
    (failure,) = records(tmp_path / "run" / "failures.jsonl")
    assert failure["error_type"] == "model_unavailable", failure
    assert not (tmp_path / "run" / "errors.log").exists()  # not a code exception
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["counts"]["failed"] == 1


@pytest.mark.slow
def test_retry_after_is_honoured(tmp_path):
    import time

    with FaultServer(script=["429", "ok"], retry_after="1") as server:
        started = time.monotonic()
        code = run(server.url, tmp_path / "run", "--retry-max-wait", "5")
        waited = time.monotonic() - started
    assert code == 0 and server.served == ["429", "ok"]
    assert waited >= 1.0  # the server's Retry-After, not the 0.05 s back-off floor


@pytest.mark.slow
def test_a_3mb_answer_is_scored_without_crashing_and_flagged(tmp_path, capsys):
    out = tmp_path / "run"
    with FaultServer(default="huge", huge_chars=3_000_000) as server:
        code = run(server.url, out, dataset="fanoutqa:dev")
    assert code == 0, capsys.readouterr().err
    results = json.loads((out / "results.json").read_text())
    assert results["counts"]["finished"] == 1
    assert results["scores"]["meta"]["n_oversized_answers"] == 1
    (sample,) = records(out / "samples.jsonl")
    assert len(sample["answer"]) == 3_000_000  # kept whole; scored on its first max_answer_chars
    assert sample["oversized_answer"] is True
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
def test_a_401_that_echoes_the_key_never_prints_or_writes_it(tmp_path, backend):
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
