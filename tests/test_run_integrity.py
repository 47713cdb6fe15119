"""Run integrity: one writer per run directory (an OS lock the kernel drops on kill -9), leftovers of
killed writers removed, and a run being written refused by ``harness score``.

The model is a fault-injecting OpenAI-protocol server on loopback (tests/fault_server.py), whose
``slow`` answers keep a run busy for as long as a test needs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import harness_cmd, run_harness
from fault_server import FaultServer
from fault_server import run_args as fault_run_args

from harness.execution.lock import RunDirBusy, RunLock, is_locked


def run_args(url: str, out: Path) -> list[str]:
    return fault_run_args(url, out, "--metrics", "em-f1", "--max-connections", "1", limit="2")


def wait_for(predicate, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached in time")


def test_lock_excludes_a_second_holder_and_names_it(tmp_path):
    run_dir = tmp_path / "run"
    with RunLock(run_dir):
        assert is_locked(run_dir) == f"pid {os.getpid()}"
        with pytest.raises(RunDirBusy, match=f"pid {os.getpid()}"):
            RunLock(run_dir).acquire()
        with pytest.raises(RunDirBusy):
            RunLock(run_dir, exclusive=False).acquire()
    assert is_locked(run_dir) is None
    RunLock(run_dir).acquire().release()  # free again once released


def test_lock_removes_what_it_created_when_nothing_was_written(tmp_path):
    lock = RunLock(tmp_path / "new").acquire()
    lock.release(remove_if_empty=True)
    assert not (tmp_path / "new").exists()


@pytest.mark.slow
def test_second_run_on_the_same_directory_exits_2_naming_the_holder(tmp_path):
    out = tmp_path / "run"
    with FaultServer(default="slow", hang_s=20) as server:
        first = subprocess.Popen(
            harness_cmd(*run_args(server.url, out)), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        try:
            wait_for(lambda: server.served)  # the first run holds the directory and is mid-request
            second = run_harness(*run_args(server.url, out))
            assert second.returncode == 2, second.stderr
            lines = [x for x in second.stderr.splitlines() if x.strip()]
            assert len(lines) == 1 and f"pid {first.pid}" in lines[0] and "in use" in lines[0], second.stderr
            # and `harness score` does not rewrite results under a writer
            score = run_harness("score", str(out))
            assert score.returncode == 2 and f"pid {first.pid}" in score.stderr, score.stderr
            assert len(server.served) == 1  # the refused runs sent nothing
        finally:
            first.kill()
            first.communicate()


@pytest.mark.slow
def test_kill_9_releases_the_lock_and_the_rerun_cleans_up_and_finishes_once(tmp_path):
    out = tmp_path / "run"
    with FaultServer(script=["ok"], default="slow", hang_s=30) as server:
        first = subprocess.Popen(
            harness_cmd(*run_args(server.url, out)), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        wait_for(lambda: len(server.served) == 2)  # sample 1 answered and appended, sample 2 in flight
        os.kill(first.pid, signal.SIGKILL)
        first.communicate()
        assert is_locked(out) is None  # the kernel dropped the lock with the process
        # what a kill in the middle of an atomic write leaves behind
        (out / ".results.json.x1y2z3.tmp").write_text("{half")
        server.default = "ok"
        proc = run_harness(*run_args(server.url, out))
    assert proc.returncode == 0, proc.stderr
    assert not list(out.glob(".*.tmp"))
    ids = [json.loads(line)["id"] for line in (out / "samples.jsonl").read_text().splitlines()]
    assert len(ids) == len(set(ids)) == 2  # sample 1 kept from the killed run, sample 2 done once
    results = json.loads((out / "results.json").read_text())
    assert results["counts"]["finished"] == 2 and results["invocations"][-1]["already_finished"] == 1


def test_killed_snapshot_and_index_builds_leave_nothing_for_the_next_build(tmp_path):
    from harness.wiki_snapshot.store import remove_dead_leftovers

    # a pid that is certainly dead: a child that has exited
    child = subprocess.Popen(["true"])
    child.wait()
    dead = child.pid
    snap = tmp_path / "snap.db"
    leftovers = [
        tmp_path / f".snap.db.{dead}.partial",
        tmp_path / f".snap.db.{dead}.partial-journal",
    ]
    for p in leftovers:
        p.write_text("x")
    index_tmp = tmp_path / f".snap.db.index.tmp-{dead}-abcd1234"
    index_tmp.mkdir()
    live = tmp_path / f".snap.db.{os.getpid()}.partial"  # our own: not touched by the sweep
    live.write_text("x")
    source = Path(__file__).parent / "fixtures" / "wikipedia_en_science_physics_10.json"
    proc = run_harness("snapshot", "build", "--from", str(source), "--out", str(snap), "--quiet")
    assert proc.returncode == 0, proc.stderr
    assert not any(p.exists() for p in leftovers)
    assert live.exists()
    import re

    assert remove_dead_leftovers(tmp_path, re.compile(r"^\.snap\.db\.index\.(?:tmp|old)-(\d+)-")) == [index_tmp.name]


def test_held_rows_give_back_the_rows_they_were_given(tmp_path):
    """A run holds its finished rows in a spool file (harness.records.HeldRows): read back, each
    equals the row it held, floats bit for bit, in the order asked, each let go of as it is read; the
    spool has no name in the run directory and is closed once every row is taken."""
    import math
    import random

    from harness.records import HeldRows

    rng = random.Random(7)
    held, rows = HeldRows(tmp_path), {}
    for i in range(2500):  # over two of take()'s chunks
        row = {
            "id": f"q{i}",
            "epoch": 1 + i % 2,
            "answer": rng.choice(["Paris", "", None, "naïve — 東京\n2", ["a", "b"]]),
            "usage": {"prompt_tokens": rng.randrange(10**6), "completion_tokens": 0},
            "outcome": rng.choice(["answered", "max_rounds"]),
            "scores": {"m": {"acc": rng.random(), "tiny": rng.random() * 1e-300, "zero": 0.0, "neg": -0.0}},
            "extra": {},
        }
        held[f"k{i}"] = rows[f"k{i}"] = row
    held.update("k3", scores={"m": {"acc": 0.1 + 0.2}}, scored_with="abc")
    rows["k3"] = {**rows["k3"], "scores": {"m": {"acc": 0.1 + 0.2}}, "scored_with": "abc"}
    assert held["k5"] == rows["k5"] and "k5" in held and len(held) == 2500
    assert held["k3"] == rows["k3"]  # the update, not the first text
    assert list(tmp_path.iterdir()) == []  # no name: a killed run leaves nothing behind
    keys = [f"k{i}" for i in rng.sample(range(2500), 2500)] + ["absent"]
    taken = held.take(keys)
    assert taken == [rows[k] for k in keys if k in rows]
    signs = [math.copysign(1, r["scores"]["m"]["neg"]) for r in taken if "neg" in r["scores"]["m"]]
    assert set(signs) == {-1.0}  # -0.0 stays -0.0 (a float cache keyed by text, not by value)
    assert len(held) == 0  # let go of as read
    assert held._file is None  # the spool closed with its last row
    outcomes = {id(r["outcome"]) for r in taken}
    assert len(outcomes) == 2  # one string per repeated value, not one a row
