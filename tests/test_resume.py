"""A killed run resumes: finished samples are neither re-run nor duplicated."""

import pytest
import json
import signal
import subprocess
import time

from conftest import harness_cmd, run_harness


def wait_for_lines(path, n, proc, timeout=300):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and len(path.read_bytes().splitlines()) >= n:
            return
        assert proc.poll() is None, "run ended before it could be killed"
        time.sleep(0.02)
    raise AssertionError("no sample finished in time")


def start_run(out, *extra):
    args = [
        "run",
        "--limit",
        "5",
        "--out",
        str(out),
        "--max-connections",
        "1",
        "--max-tokens",
        "96",
        "--no-cache",
        *extra,
    ]
    return subprocess.Popen(harness_cmd(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_kill_then_rerun_continues_without_duplicates(tmp_path):
    out = tmp_path / "run"
    samples_path = out / "samples.jsonl"
    proc = start_run(out)
    wait_for_lines(samples_path, 1, proc)
    proc.send_signal(signal.SIGKILL)  # no chance to clean up
    proc.wait()
    first_lines = samples_path.read_bytes().splitlines()
    first_ids = [json.loads(line)["id"] for line in first_lines]
    assert 1 <= len(first_ids) < 5

    rerun = run_harness(
        "run", "--limit", "5", "--out", str(out), "--max-connections", "1", "--max-tokens", "96", "--no-cache"
    )
    assert rerun.returncode == 0, rerun.stderr
    lines = samples_path.read_bytes().splitlines()
    ids = [json.loads(line)["id"] for line in lines]
    assert len(ids) == len(set(ids)) == 5, "duplicate or missing samples"
    assert lines[: len(first_lines)] == first_lines, "finished samples were rewritten"

    results = json.loads((out / "results.json").read_text())
    last = results["invocations"][-1]
    assert last["already_finished"] == len(first_ids)
    assert not set(last["attempted_ids"]) & set(first_ids), "a finished sample was run again"
    # one closed-book call per new sample, none for the finished ones
    assert last["model_calls"] == 5 - len(first_ids)
    assert results["counts"]["finished"] == 5 and results["status"] == "complete"

    # A third run has nothing to do and calls no model.
    again = run_harness(
        "run", "--limit", "5", "--out", str(out), "--max-connections", "1", "--max-tokens", "96", "--no-cache"
    )
    assert again.returncode == 0
    results = json.loads((out / "results.json").read_text())
    assert results["invocations"][-1]["model_calls"] == 0
    assert results["invocations"][-1]["attempted_ids"] == []
    assert len(samples_path.read_bytes().splitlines()) == 5


@pytest.mark.slow
def test_sigterm_writes_interrupted_results_and_resumes(tmp_path):
    out = tmp_path / "run"
    proc = start_run(out)
    wait_for_lines(out / "samples.jsonl", 1, proc)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130
    assert "Traceback" not in stderr and "resume" in stderr
    results = json.loads((out / "results.json").read_text())
    assert results["status"] == "interrupted"
    done = results["counts"]["finished"]
    assert done >= 1

    # Extending the run (a larger --limit) continues the same run directory.
    rerun = run_harness(
        "run", "--limit", "6", "--out", str(out), "--max-connections", "1", "--max-tokens", "96", "--no-cache"
    )
    assert rerun.returncode == 0, rerun.stderr
    results = json.loads((out / "results.json").read_text())
    assert results["counts"]["finished"] == 6
    assert results["invocations"][-1]["model_calls"] == 6 - results["invocations"][-1]["already_finished"]


def test_truncated_last_line_is_repaired(tmp_path):
    from harness.records import JsonlAppender

    path = tmp_path / "samples.jsonl"
    path.write_text('{"id": "a", "status": "ok"}\n{"id": "b", "sta')
    appender = JsonlAppender(path)
    appender.append({"id": "c", "status": "ok"})
    appender.close()
    assert [json.loads(line)["id"] for line in path.read_text().splitlines()] == ["a", "c"]
