"""--shard I/K and harness merge: a scripted model on 20 HotpotQA dev questions x 2 epochs, run whole
and in 3 shards; the merged shards equal the whole run (rows, counts, every score and interval);
refusals are one line, exit 2, nothing written; a killed shard resumes; the Slurm, Kubernetes and
SkyPilot recipes in examples/ run as written (a stand-in sbatch setting the array variables as
slurmctld does; each Indexed Job index's container command as the kubelet runs it; the YAML's run:
script per node), every Slurm task and Kubernetes pod running the same `--shard auto` command."""

from __future__ import annotations

import asyncio
import collections
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from harness.cli import main
from harness.datasets import load_dataset
from harness.execution.config import build_config
from harness.execution.paths import portable_text
from harness.execution.selection import select_samples, shard_of
from harness.models.scripted import register_script

# each test starts a loopback server (or runs whole CLI runs in subprocesses): the slow tier
pytestmark = pytest.mark.slow

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
SCRIPT = "shard-test"
GOLD = {s.question: s.answer for s in load_dataset("hotpotqa:dev").samples}
RUN = [
    "--model", f"scripted/{SCRIPT}", "--dataset", "hotpotqa:dev", "--setting", "closed-book",
    "--limit", "20", "--epochs", "2", "--temperature", "1", "--no-cache",
]  # fmt: skip
TIMING = {"started_at", "finished_at", "latency_s", "waited_s"}


async def answer(messages, tools, tool_choice, params):
    """Right, half right or wrong by question and epoch (seed), so every metric has a spread."""
    delay = float(os.environ.get("SHARD_TEST_DELAY") or 0)
    if delay:
        await asyncio.sleep(delay)
    prompt = " ".join(m["content"] for m in messages if isinstance(m.get("content"), str))
    question = next(q for q in GOLD if q in prompt)
    turn = (len(question) + params.seed) % 3
    return GOLD[question] if turn == 0 else f"{GOLD[question]} or maybe something else" if turn == 1 else "no idea"


def register():
    return register_script(SCRIPT, answer)


register()


def harness(*argv, capsys=None):
    """``harness ARGV`` in this process: (exit code, stderr lines)."""
    if capsys is not None:
        capsys.readouterr()
    rc = main([str(a) for a in argv])
    err = capsys.readouterr().err.strip().splitlines() if capsys is not None else []
    return rc, err


def rows(run_dir: Path, name: str = "samples.jsonl", ignore=TIMING) -> collections.Counter:
    path = run_dir / name
    if not path.exists():
        return collections.Counter()
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return collections.Counter(
        json.dumps({k: v for k, v in r.items() if k not in ignore}, sort_keys=True) for r in lines
    )


def results(run_dir: Path) -> dict:
    return json.loads((run_dir / "results.json").read_text())


def files_of(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The whole run, then its 3 shards, each into its own directory."""
    base = tmp_path_factory.mktemp("shards")
    assert main(["run", *RUN, "--out", str(base / "whole")]) == 0
    for i in (1, 2, 3):
        assert main(["run", *RUN, "--shard", f"{i}/3", "--out", str(base / f"s{i}")]) == 0
    return base


def assert_equals_whole(merged: Path, whole: Path, ignore=TIMING):
    assert rows(merged, ignore=ignore) == rows(whole, ignore=ignore)
    assert rows(merged, "failures.jsonl", ignore) == rows(whole, "failures.jsonl", ignore)
    m, w = results(merged), results(whole)
    assert m["scores"] == w["scores"]  # every number, every interval, the raw rows and breakdowns
    for key in ("counts", "tokens", "model_calls", "sample_ids", "outcomes", "config_hash", "dataset",
                "max_tokens_source"):  # as the shards recorded it, not as their config reads back
        assert m[key] == w[key], key
    # one key; each directory its own run id (the key's 12 characters first)
    assert m["run_id"] != w["run_id"] and m["run_id"][:13] == w["run_id"][:13] == m["config_hash"][:12] + "-"
    return m, w


def test_shards_partition_the_selection():
    dataset = load_dataset("hotpotqa:dev")
    whole = [s.id for s in select_samples(dataset, build_config({"dataset": "hotpotqa:dev", "limit": 20}))]
    parts = [
        [s.id for s in select_samples(dataset, build_config({"dataset": "hotpotqa:dev", "limit": 20, "shard": f"{i}/3"}))]
        for i in (1, 2, 3)
    ]
    assert sorted(sum(parts, [])) == sorted(whole) and len(set(sum(parts, []))) == 20  # disjoint, complete
    assert all(p == [i for i in whole if i in p] for p in parts)  # each in the selection's order
    assert all(parts)  # 7, 6, 7 questions
    # a question's shard is its id's alone: a larger --limit keeps every shard's questions in it
    larger = select_samples(dataset, build_config({"dataset": "hotpotqa:dev", "limit": 60, "shard": "2/3"}))
    assert set(parts[1]) <= {s.id for s in larger} and all(shard_of(s.id, 3) == 2 for s in larger)
    # the shard is recorded but not in the run key: every shard of a run has the run's hash
    assert build_config({"shard": "2/3"}).config_hash() == build_config({}).config_hash()


def test_merged_shards_equal_the_whole_run(runs, capsys):
    whole = runs / "whole"
    shard_counts = [results(runs / f"s{i}")["counts"] for i in (1, 2, 3)]
    # each shard counts its own pairs: its questions x 2 epochs; together the whole selection
    assert [c["selected"] for c in shard_counts] == [2 * c["questions"] for c in shard_counts]
    assert sum(c["selected"] for c in shard_counts) == 40 and all(c["finished"] == c["selected"] for c in shard_counts)
    assert results(runs / "s2")["config"]["shard"] == "2/3"
    assert {results(runs / f"s{i}")["config_hash"] for i in (1, 2, 3)} == {results(whole)["config_hash"]}

    before = {i: files_of(runs / f"s{i}") for i in (1, 2, 3)}
    rc, err = harness("merge", runs / "s3", runs / "s1", runs / "s2", "--out", runs / "merged", capsys=capsys)
    assert rc == 0, err
    assert {i: files_of(runs / f"s{i}") for i in (1, 2, 3)} == before  # the shards are only read
    merged, w = assert_equals_whole(runs / "merged", whole)
    assert merged["status"] == "complete" and merged["counts"]["finished"] == 40
    assert merged["max_tokens_source"] == "default 512"  # read back, its config has max_tokens set
    assert merged["counts"] == {"selected": 40, "questions": 20, "epochs": 2, "finished": 40, "failed": 0,
                                "pending": 0, "truncated_output": 0}  # fmt: skip
    assert merged["config"]["shard"] is None and merged["config"]["out"] == portable_text(str(runs / "merged"))
    assert merged["model"] == w["model"]
    assert [(i["number"], i["shard"], i["shard_number"]) for i in merged["invocations"]] == [
        (1, "1/3", 1), (2, "2/3", 1), (3, "3/3", 1)
    ]  # fmt: skip
    assert sum(i["attempted"] for i in merged["invocations"]) == 40
    # the numbers are not trivial: some right, some half right, some wrong
    assert 0 < merged["scores"]["em-f1"]["em"] < merged["scores"]["em-f1"]["f1"] < 1
    assert merged["scores"]["uncertainty"]["em-f1.f1"]["stderr"] > 0
    # the merged directory is a run directory: `harness score` gives its scores back, and the unsharded
    # command resumes it with nothing left to do
    rc, err = harness("score", runs / "merged", capsys=capsys)
    assert rc == 0, err and results(runs / "merged")["scores"] == w["scores"]
    assert main(["run", *RUN, "--out", str(runs / "merged")]) == 0
    again = results(runs / "merged")
    assert again["invocations"][-1]["number"] == 4 and again["invocations"][-1]["attempted"] == 0
    assert again["scores"] == w["scores"]


@pytest.mark.parametrize("spec", ["0/3", "4/3", "x", "1/0", "2/3/4"])
def test_bad_shard_spec_is_one_line(tmp_path, capsys, spec):
    rc, err = harness("run", *RUN, "--shard", spec, "--out", tmp_path / "run", capsys=capsys)
    assert rc == 2 and len(err) == 1 and err[0].startswith(f"error: --shard: '{spec}'")
    assert "1 <= I <= K" in err[0] and not (tmp_path / "run").exists()


def test_run_directory_holds_one_shard(runs, capsys):
    rc, err = harness("run", *RUN, "--shard", "1/3", "--out", runs / "s2", capsys=capsys)
    assert rc == 2 and len(err) == 1 and "holds shard 2/3" in err[0] and "this is shard 1/3" in err[0]
    rc, err = harness("run", *RUN, "--out", runs / "s2", capsys=capsys)
    assert rc == 2 and "this is the whole selection (no --shard)" in err[0]


def test_merge_refusals(runs, tmp_path, capsys):
    s1, s2, s3 = (runs / f"s{i}" for i in (1, 2, 3))
    out = tmp_path / "merged"

    def refused(*dirs, extra=(), out=out):
        there = files_of(out) if out.exists() else None
        rc, err = harness("merge", *dirs, "--out", out, *extra, capsys=capsys)
        assert rc == 2 and len(err) == 1 and err[0].startswith("error: "), err
        assert (files_of(out) if out.exists() else None) == there  # nothing written
        assert not list(out.parent.glob(f".{out.name}.merging-*"))
        return err[0]

    # a shard of another configuration (another --max-tokens: another run key)
    assert main(["run", *RUN, "--max-tokens", "64", "--shard", "1/3", "--out", str(tmp_path / "other")]) == 0
    assert "a different configuration" in refused(s2, s3, tmp_path / "other")
    # a shard of the same key selecting differently (--limit is not hashed)
    assert main(["run", *RUN[:-7], "--limit", "10", *RUN[-5:], "--shard", "3/3", "--out", str(tmp_path / "lim")]) == 0
    assert "--limit 10, but" in refused(s1, s2, tmp_path / "lim")
    # overlapping shards: one shard in two directories, or a row copied into another shard
    shutil.copytree(s1, tmp_path / "s1-again")
    assert "finished in both" in refused(s1, s2, s3, tmp_path / "s1-again")
    shutil.copytree(s2, tmp_path / "s2-tampered")
    with open(tmp_path / "s2-tampered" / "samples.jsonl", "a") as f:
        f.write((s1 / "samples.jsonl").read_text().splitlines()[0] + "\n")
    assert "belongs to shard 1/3, not 2/3" in refused(s1, tmp_path / "s2-tampered", s3)
    # a missing shard; the same directory twice; a run that is not a shard; not a run at all
    assert "shard 3/3 of run" in refused(s1, s2) and "missing" in refused(s1, s2)
    assert "given twice" in refused(s1, s2, s3, s1)
    assert "not a shard" in refused(s1, s2, runs / "whole")
    assert "not a run directory" in refused(s1, s2, tmp_path)
    # the output: not empty, or inside a shard
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    assert "not empty" in refused(s1, s2, s3, out=tmp_path / "full")
    assert "inside the shard" in refused(s1, s2, s3, out=s1 / "merged")
    # a shard being written now
    from harness.execution.lock import RunLock

    with RunLock(tmp_path / "s2-tampered", purpose="test"):
        shutil.copytree(s2, tmp_path / "s2-busy", ignore=shutil.ignore_patterns(".lock"))
        with RunLock(tmp_path / "s2-busy", purpose="test"):
            assert "is being written by" in refused(s1, tmp_path / "s2-busy", s3)


def test_partial_merge_counts_missing_shards_pending_and_resumes(runs, tmp_path, capsys):
    out = tmp_path / "merged"
    rc, err = harness("merge", runs / "s1", runs / "s3", "--out", out, "--partial", capsys=capsys)
    assert rc == 0 and any(line.startswith("warning: shard 2/3 missing") for line in err)
    partial = results(out)
    s2 = results(runs / "s2")["counts"]["selected"]
    assert partial["status"] == "incomplete" and partial["counts"]["pending"] == s2
    assert partial["counts"]["finished"] == 40 - s2 and partial["counts"]["selected"] == 40
    # the unsharded command finishes the merged run: only shard 2's pairs are sent
    script = register()
    script.requests.clear()
    assert main(["run", *RUN, "--out", str(out)]) == 0
    assert len(script.requests) == s2
    assert_equals_whole(out, runs / "whole", ignore=TIMING | {"invocation"})


def test_killed_shard_resumes_then_merges(runs, tmp_path, capsys):
    out = tmp_path / "s2"
    code = (
        f"import sys; sys.path.insert(0, {str(TESTS)!r}); import test_sharding as t; from harness.cli import main; "
        f"sys.exit(main({['run', *RUN, '--shard', '2/3', '--out', str(out), '--max-connections', '1']!r}))"
    )
    env = {**os.environ, "SHARD_TEST_DELAY": "0.2", "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    samples = out / "samples.jsonl"
    deadline = time.monotonic() + 120
    while not (samples.exists() and len(samples.read_bytes().splitlines()) >= 3):
        assert proc.poll() is None, proc.communicate()[1].decode()
        assert time.monotonic() < deadline
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    first = samples.read_bytes().splitlines()
    total = results(runs / "s2")["counts"]["selected"]
    assert 3 <= len(first) < total and not (out / "results.json").exists()

    assert main(["run", *RUN, "--shard", "2/3", "--out", str(out)]) == 0  # the same command finishes it
    lines = samples.read_bytes().splitlines()
    assert lines[: len(first)] == first and len(lines) == total  # nothing rewritten or run twice
    assert results(out)["invocations"][-1]["already_finished"] == len(first)
    assert rows(out, ignore=TIMING | {"invocation"}) == rows(runs / "s2", ignore=TIMING | {"invocation"})
    rc, err = harness("merge", runs / "s1", out, runs / "s3", "--out", tmp_path / "merged", capsys=capsys)
    assert rc == 0, err
    assert_equals_whole(tmp_path / "merged", runs / "whole", ignore=TIMING | {"invocation"})


def test_a_merge_killed_9_is_cleaned_up_and_a_second_merge_at_once_is_refused(runs, tmp_path, capsys):
    """A merge paused after assembling its temporary folder (before the rename): a second merge into
    the same --out meanwhile is one line, exit 2; killed -9, it leaves the folder, which the next
    merge removes (the killed merge's lock is gone with it) before it writes the merged run."""
    out, flag = tmp_path / "merged", tmp_path / "assembled"
    dirs = [str(runs / f"s{i}") for i in (1, 2, 3)]
    code = (
        f"import sys, time; sys.path.insert(0, {str(TESTS)!r}); import test_sharding\n"
        "import harness.execution.merge as m\n"
        "write = m._write_merged\n"
        "def paused(*args):\n"
        "    record = write(*args)\n"
        f"    open({str(flag)!r}, 'w').close()\n"
        "    time.sleep(600)\n"
        "    return record\n"
        "m._write_merged = paused\n"
        "from harness.cli import main\n"
        f"sys.exit(main({['merge', *dirs, '--out', str(out)]!r}))"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while not flag.exists():
            assert proc.poll() is None, proc.communicate()[1].decode()
            assert time.monotonic() < deadline
            time.sleep(0.02)
        leftover = tmp_path / f".merged.merging-{proc.pid}"
        assert (leftover / "samples.jsonl").is_file() and not out.exists()

        rc, err = harness("merge", *dirs, "--out", out, capsys=capsys)  # while the first one runs
        assert rc == 2 and len(err) == 1 and err[0].startswith("error: "), err
        assert f"another harness merge (pid {proc.pid}) is writing it now" in err[0]
        assert leftover.is_dir() and not out.exists()  # a live merge's folder is not touched
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert leftover.is_dir()  # what kill -9 leaves

    rc, err = harness("merge", *dirs, "--out", out, capsys=capsys)
    assert rc == 0, err
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".merged.")) == []  # folder and lock gone
    assert_equals_whole(out, runs / "whole")


# the recipes in examples/ --------------------------------------------------------------------------

def stand_in_harness(bin_dir: Path) -> None:
    """``harness`` on PATH: the real CLI, with the scripted model registered."""
    bin_dir.mkdir(exist_ok=True)
    path = bin_dir / "harness"
    path.write_text(
        f"#!{sys.executable}\nimport sys\nsys.path[:0] = [{str(REPO)!r}, {str(TESTS)!r}]\n"
        "import test_sharding\nfrom harness.cli import main\nsys.exit(main(sys.argv[1:]))\n"
    )
    path.chmod(0o755)


FAKE_SBATCH = r"""#!PYTHON
# sbatch as the recipe uses it: --parsable, --array=SPEC, --dependency=afterany:ID; runs the job at once
# (an array task by task, last id first: the order must not matter), its dependency checked, and logs
# each submission. An array task gets the variables slurmctld sets (SchedMD/slurm@284c3b95
# src/slurmctld/job_mgr.c _create_job_array): COUNT the ids, MIN/MAX the first and last, STEP the number
# after the spec's first ':' (atoi: leading digits), else 1; plus SLURM_ARRAY_JOB_ID and the task's id.
import json, os, re, subprocess, sys
log = os.environ["FAKE_SLURM_LOG"]
args = sys.argv[1:]
n = next(i for i, a in enumerate(args) if not a.startswith("--"))
opts, (script, *script_args) = args[:n], args[n:]
jobs = [json.loads(line) for line in open(log)] if os.path.exists(log) else []
job = {"id": str(1000 + len(jobs)), "opts": opts, "script": script, "args": script_args, "rc": [], "tasks": []}
env = {**os.environ, "SLURM_JOB_ID": job["id"]}
array_env, tasks = {}, [None]
for opt in opts:
    name, _, value = opt.partition("=")
    if name == "--array":
        spec = value.split("%")[0]  # %N caps the tasks running at once
        ids = set()
        for part in spec.split(","):
            span, _, step = part.partition(":")
            lo, _, hi = span.partition("-")
            ids.update(range(int(lo), int(hi or lo) + 1, int(step or 1)))
        colon = re.match(r"\d*", value.split(":", 1)[1]).group() if ":" in value else ""
        array_env = {
            "SLURM_ARRAY_JOB_ID": job["id"], "SLURM_ARRAY_TASK_COUNT": str(len(ids)),
            "SLURM_ARRAY_TASK_MIN": str(min(ids)), "SLURM_ARRAY_TASK_MAX": str(max(ids)),
            "SLURM_ARRAY_TASK_STEP": str(int(colon or 1)),
        }
        tasks = sorted(ids, reverse=True)
    elif name == "--dependency":
        kind, dep = value.split(":")
        assert kind == "afterany" and dep in {j["id"] for j in jobs}, value
    else:
        assert name == "--parsable", opt
for task in tasks:
    task_env = dict(env) if task is None else {**env, **array_env, "SLURM_ARRAY_TASK_ID": str(task)}
    # a job's output goes to its log (--output), never to sbatch's stdout, which is the job id
    proc = subprocess.run(["bash", script, *script_args], env=task_env, stdout=sys.stderr, stderr=subprocess.PIPE, text=True)
    sys.stderr.write(proc.stderr)
    job["rc"].append(proc.returncode)
    job["tasks"].append({"id": task, "stderr": proc.stderr})
with open(log, "a") as f:
    f.write(json.dumps(job) + "\n")
print(job["id"])
"""


def recipe_env(tmp_path: Path, **extra) -> dict[str, str]:
    stand_in_harness(tmp_path / "bin")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "JOB_COMPLETION", "HARNESS_SHARD"))}
    return {
        **env,
        "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}",
        "MODEL": f"scripted/{SCRIPT}",
        "DATASET": "hotpotqa:dev",
        "EXTRA_ARGS": " ".join(RUN[RUN.index("--limit"):]),
        "HARNESS_CACHE_DIR": str(tmp_path / "cache"),
        **extra,
    }


def submit_slurm_recipe(tmp_path: Path, **extra) -> list[dict]:
    """``bash examples/slurm_shards.sh`` with a stand-in sbatch; the jobs it submitted, as run."""
    sbatch = tmp_path / "bin" / "sbatch"
    env = recipe_env(tmp_path, FAKE_SLURM_LOG=str(tmp_path / "slurm.log"), **extra)
    sbatch.write_text(FAKE_SBATCH.replace("PYTHON", sys.executable, 1))
    sbatch.chmod(0o755)
    script = REPO / "examples" / "slurm_shards.sh"
    proc = subprocess.run(["bash", str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    jobs = [json.loads(line) for line in (tmp_path / "slurm.log").read_text().splitlines()]
    assert [j["args"] for j in jobs] == [["shard"], ["merge"]], proc.stderr
    assert f"--dependency=afterany:{jobs[0]['id']}" in jobs[1]["opts"]
    return jobs


def test_slurm_recipe_runs_one_command_per_task_then_merges(runs, tmp_path):
    text = (REPO / "examples" / "slurm_shards.sh").read_text()
    # one command for every task: the shard comes from the array's variables, not from the script
    assert 'harness run "${RUN_ARGS[@]}" --shard auto --out "$RUNS/task-$SLURM_ARRAY_TASK_ID"' in text
    assert 'harness merge "$RUNS"/task-* --out "$RUNS/merged"' in text
    assert subprocess.run(["bash", "-n", str(REPO / "examples" / "slurm_shards.sh")]).returncode == 0
    jobs = submit_slurm_recipe(tmp_path, K="3")
    assert "--array=0-2" in jobs[0]["opts"] and [(t["id"], rc) for t, rc in zip(jobs[0]["tasks"], jobs[0]["rc"])] == [
        (2, 0), (1, 0), (0, 0)
    ]  # fmt: skip
    assert jobs[1]["rc"] == [0]
    for task in (0, 1, 2):
        got = results(tmp_path / "runs" / f"task-{task}")
        assert got["config"]["shard"] == f"{task + 1}/3"
        assert got["config"]["shard_env"] == {
            "SLURM_ARRAY_TASK_ID": str(task), "SLURM_ARRAY_TASK_COUNT": "3", "SLURM_ARRAY_TASK_MIN": "0",
            "SLURM_ARRAY_TASK_MAX": "2", "SLURM_ARRAY_TASK_STEP": "1",
        }  # fmt: skip
        assert got["invocations"][-1]["shard_env"] == got["config"]["shard_env"]
        assert f"shard {task + 1}/3 (--shard auto: SLURM_ARRAY_TASK_ID={task}," in jobs[0]["tasks"][2 - task]["stderr"]
    merged, _ = assert_equals_whole(tmp_path / "runs" / "merged", runs / "whole")
    assert merged["config"]["shard_env"] is None  # the merged run is no shard
    assert [i["shard_env"]["SLURM_ARRAY_TASK_ID"] for i in merged["invocations"]] == ["0", "1", "2"]


def test_slurm_recipe_on_a_stepped_array_that_starts_above_0(runs, tmp_path):
    """--array=5-14:4%2: ids 5, 9, 13 (MAX 13, not 14), at most 2 at once: shards 1/3, 2/3, 3/3."""
    jobs = submit_slurm_recipe(tmp_path, ARRAY="5-14:4%2")
    assert jobs[0]["rc"] == [0, 0, 0] and jobs[1]["rc"] == [0]
    for task, shard in ((5, "1/3"), (9, "2/3"), (13, "3/3")):
        got = results(tmp_path / "runs" / f"task-{task}")["config"]
        assert got["shard"] == shard and got["shard_env"]["SLURM_ARRAY_TASK_MAX"] == "13"
        assert got["shard_env"]["SLURM_ARRAY_TASK_STEP"] == "4"
    assert_equals_whole(tmp_path / "runs" / "merged", runs / "whole")


def test_slurm_recipe_refuses_an_array_that_is_no_range(tmp_path):
    """--array=0,2,3: slurmctld says STEP 1, so the 3 ids cannot be told apart from 0-2: every task
    is refused in one line, exit 2, before anything is written; the merge then has nothing to merge."""
    jobs = submit_slurm_recipe(tmp_path, ARRAY="0,2,3")
    assert jobs[0]["rc"] == [2, 2, 2]
    for task in jobs[0]["tasks"]:
        lines = task["stderr"].strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: --shard auto: the Slurm array is not a range"), lines
    assert not (tmp_path / "runs").exists()
    assert jobs[1]["rc"] == [2]


# Kubernetes: Container.command "$(VAR_NAME) are expanded using the container's environment. If a variable
# cannot be resolved, the reference in the input string will be unchanged. Double $$ are reduced to a single
# $" (kubernetes/kubernetes staging/src/k8s.io/api/core/v1/types.go, Container.Command); the Job controller
# appends JOB_COMPLETION_INDEX to every container's env (pkg/controller/job/indexed_job_utils.go).
def kubelet_expand(text: str, env: dict[str, str]) -> str:
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)", lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)), text)


def k8s_docs(name: str) -> list[dict]:
    return list(yaml.safe_load_all((REPO / "examples" / name).read_text()))


def test_kubernetes_manifests_are_an_indexed_job_and_its_merge():
    config_map, job = k8s_docs("k8s_shards.yaml")
    assert (config_map["apiVersion"], config_map["kind"]) == ("v1", "ConfigMap")
    assert (job["apiVersion"], job["kind"]) == ("batch/v1", "Job")
    spec, pod = job["spec"], job["spec"]["template"]["spec"]
    assert spec["completionMode"] == "Indexed" and 1 <= spec["parallelism"] <= spec["completions"]
    assert pod["restartPolicy"] == "Never"  # podFailurePolicy and backoffLimitPerIndex need it
    (container,) = pod["containers"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert "JOB_COMPLETION_INDEX" not in env  # the controller's to set
    assert env["HARNESS_SHARD_COUNT"] == str(spec["completions"])  # K, as the Job has it
    assert container["command"] == [
        "harness", "run", "--config", "/config/run.yaml", "--shard", "auto", "--out", "/runs/shard-$(JOB_COMPLETION_INDEX)"
    ]  # fmt: skip
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert mounts == {"runs": "/runs", "config": "/config"}
    assert volumes["config"]["configMap"]["name"] == config_map["metadata"]["name"]
    (fail_job,) = [r for r in spec["podFailurePolicy"]["rules"] if r["action"] == "FailJob"]
    assert fail_job["onExitCodes"] == {"containerName": container["name"], "operator": "In", "values": [2]}
    # every shard's options: a valid run configuration, checked as harness run checks it
    options = yaml.safe_load(config_map["data"]["run.yaml"])
    assert build_config(options).shard is None and options["model"].startswith("vllm/")
    (merge,) = k8s_docs("k8s_merge.yaml")
    assert merge["kind"] == "Job" and "completionMode" not in merge["spec"]
    (merger,) = merge["spec"]["template"]["spec"]["containers"]
    assert merger["command"] == ["sh", "-c", "exec harness merge /runs/shard-* --out /runs/merged"]
    assert merge["spec"]["template"]["spec"]["volumes"] == [volumes["runs"]]  # the shards' volume
    assert {m["mountPath"] for m in merger["volumeMounts"]} == {"/runs"}


def test_kubernetes_indexed_job_runs_each_index_then_merges(runs, tmp_path):
    """Each index's container command as the kubelet runs it (its env, JOB_COMPLETION_INDEX, $(VAR)
    expanded; the volumes at folders here; the ConfigMap's options with the scripted model), then the
    merge Job's: the merged run is the one-machine run. A Job of 3 completions: the manifest's K edited."""
    config_map, job = k8s_docs("k8s_shards.yaml")
    (container,) = job["spec"]["template"]["spec"]["containers"]
    (merger,) = k8s_docs("k8s_merge.yaml")[0]["spec"]["template"]["spec"]["containers"]
    k = 3
    options = yaml.safe_load(config_map["data"]["run.yaml"])
    options.pop("base_url")
    options.update(model=f"scripted/{SCRIPT}", dataset="hotpotqa:dev", limit=20, epochs=2, temperature=1, cache=False)
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "run.yaml").write_text(yaml.safe_dump(options))
    (tmp_path / "pvc").mkdir()
    mounts = {"/runs": str(tmp_path / "pvc"), "/config": str(tmp_path / "config")}

    def on_this_machine(arg: str) -> str:
        for path, here in mounts.items():
            arg = arg.replace(path + "/", here + "/")
        return arg

    base = recipe_env(tmp_path)
    for index in (2, 0, 1):
        env = {**{e["name"]: e["value"] for e in container["env"]}, "HARNESS_SHARD_COUNT": str(k)}
        env["JOB_COMPLETION_INDEX"] = str(index)  # appended by the Job controller
        argv = [on_this_machine(kubelet_expand(a, env)) for a in container["command"]]
        assert argv[-1] == f"{tmp_path / 'pvc'}/shard-{index}"
        proc = subprocess.run(argv, cwd=tmp_path, env={**base, **env}, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr
        got = results(tmp_path / "pvc" / f"shard-{index}")["config"]
        assert got["shard"] == f"{index + 1}/{k}"
        assert got["shard_env"] == {"JOB_COMPLETION_INDEX": str(index), "HARNESS_SHARD_COUNT": str(k)}
    # an index past the count (a manifest whose completions and HARNESS_SHARD_COUNT disagree): refused
    env = {"HARNESS_SHARD_COUNT": str(k), "JOB_COMPLETION_INDEX": str(k)}
    argv = [on_this_machine(kubelet_expand(a, env)) for a in container["command"]]
    proc = subprocess.run(argv, cwd=tmp_path, env={**base, **env}, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2 and proc.stderr.startswith("error: --shard auto: JOB_COMPLETION_INDEX=3 with")
    assert not (tmp_path / "pvc" / f"shard-{k}").exists()
    argv = [on_this_machine(a) for a in merger["command"]]
    proc = subprocess.run(argv, cwd=tmp_path, env=base, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert_equals_whole(tmp_path / "pvc" / "merged", runs / "whole")


def test_skypilot_recipe_runs_one_shard_per_node_then_merges(runs, tmp_path):
    task = yaml.safe_load((REPO / "examples" / "skypilot_shards.yaml").read_text())
    assert {"name", "num_nodes", "resources", "envs", "setup", "run", "file_mounts"} <= set(task)
    assert isinstance(task["num_nodes"], int) and task["num_nodes"] > 1
    assert "--shard \"$ID/$K\"" in task["run"] and "harness merge" in task["run"]
    assert set(task["envs"]) >= {"MODEL", "DATASET", "EXTRA_ARGS", "RUNS", "MERGE_WAIT_S"}
    (tmp_path / "home").mkdir()
    env = recipe_env(
        tmp_path, **{k: str(v) for k, v in task["envs"].items() if k not in ("MODEL", "DATASET", "EXTRA_ARGS")}
    )
    env.update(RUNS=str(tmp_path / "bucket"), HOME=str(tmp_path / "home"), SKYPILOT_NUM_NODES="3")
    for rank in (2, 1, 0):  # node 0 last: it waits for the others' markers, then merges
        proc = subprocess.run(
            ["bash", "-c", task["run"]], cwd=tmp_path, env={**env, "SKYPILOT_NODE_RANK": str(rank)},
            capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        assert (tmp_path / "bucket" / f"shard-{rank + 1}.done").read_text().strip() == "0"
    assert_equals_whole(tmp_path / "bucket" / "merged", runs / "whole")


def test_empty_shards_run_and_merge(tmp_path, capsys):
    """K above the number of questions: the empty shards record 0 samples and no scores, and merge."""
    small = [*RUN[:-7], "--limit", "3", *RUN[-5:]]
    held = [shard_of(s.id, 5) for s in load_dataset("hotpotqa:dev").samples[:3]]
    assert main(["run", *small, "--out", str(tmp_path / "whole")]) == 0
    for i in range(1, 6):
        assert main(["run", *small, "--shard", f"{i}/5", "--out", str(tmp_path / f"s{i}")]) == 0
        counts = results(tmp_path / f"s{i}")["counts"]
        assert counts["selected"] == 2 * held.count(i) and counts["finished"] == counts["selected"]
        if i not in held:
            assert results(tmp_path / f"s{i}")["scores"] is None
            assert "holds none of the selected questions" in results(tmp_path / f"s{i}")["scoring_note"]
    assert len(set(held)) < 5  # some shard is empty
    rc, err = harness("merge", *(tmp_path / f"s{i}" for i in range(1, 6)), "--out", tmp_path / "merged", capsys=capsys)
    assert rc == 0, err
    assert_equals_whole(tmp_path / "merged", tmp_path / "whole")
