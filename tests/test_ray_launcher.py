"""harness run --shards K --launcher ray[=ADDRESS]: the K shards as Ray tasks, merged into --out.

Fast tier: the refusals (one line, exit 2, nothing written, Ray never imported before the run is known
good), Ray imported by this command only, the shard command lines. Slow tier, where Ray is installed: a
real multi-node Ray cluster on this machine (ray.cluster_utils.Cluster, ray 2.60.0: a head node and
worker nodes as separate raylets, as Ray's own tests start them, e.g. ray-project/ray
python/ray/tests test_object_unpin: a num_cpus=0 head with health_check_* _system_config, worker nodes
added, then cluster.remove_node(node, allow_graceful=False)), a worker node killed while its shard runs,
the task retried on another node and the shard resumed; the merged run equal, question by question, to
the same run on one machine; and a local Ray instance with the embedded GGUF model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.cli import build_parser, main
from harness.commands.ray_launcher import shard_name
from harness.commands.run import shard_argv

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
SCRIPT = TESTS / "ray_shard_script.py"
RUN = [
    "--model", f"scripted/{SCRIPT}:answer", "--dataset", "hotpotqa:dev", "--setting", "closed-book",
    "--limit", "20", "--epochs", "2", "--temperature", "1", "--no-cache", "--max-connections", "1",
]  # fmt: skip


def harness(capsys, *argv):
    capsys.readouterr()
    try:
        rc = main([str(a) for a in argv])
    except SystemExit as exc:  # a usage error, from the parser
        rc = exc.code
    return rc, capsys.readouterr().err.strip().splitlines()


def no_ray(monkeypatch):
    """Any `import ray` from now on fails: a check that must come before Ray shows it did."""
    monkeypatch.setitem(sys.modules, "ray", None)


# fast tier -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "extra, says",
    [
        (["--shards", "3"], "--shards 3 needs a launcher to start the shards: add --launcher ray"),
        (["--launcher", "ray"], "--launcher ray starts the shards of --shards K: add --shards K"),
        (["--shards", "2", "--shard", "1/2", "--launcher", "ray"], "--shard 1/2 runs one: give one of them"),
        (["--shard", "1/2", "--launcher", "ray=10.0.0.1:6379"], "a cluster's address is for --shards K"),
        (["--shards", "0", "--launcher", "ray"], "argument --shards: must be >= 1, not 0"),
        (["--shards", "2", "--launcher", "dask"], "'dask': the launcher is ray (or ray=ADDRESS"),
        (["--shards", "2", "--launcher", "ray="], "ray=ADDRESS needs the cluster's address"),
        (["--shards", "2", "--launcher", "ray", "--dataset", "nope"], "unknown dataset 'nope'"),
        (["--shards", "2", "--launcher", "ray", "--max-tokens", "0"], "--max-tokens"),
    ],
)
def test_refusals_are_one_line_before_ray(tmp_path, capsys, monkeypatch, extra, says):
    no_ray(monkeypatch)
    rc, err = harness(capsys, "run", *RUN, "--out", tmp_path / "out", *extra)
    assert rc == 2 and len(err) == 1 and err[0].startswith("error: ") and says in err[0], err
    assert not (tmp_path / "out").exists()


def test_without_ray_installed_one_line_and_nothing_left(tmp_path, capsys, monkeypatch):
    no_ray(monkeypatch)
    rc, err = harness(capsys, "run", *RUN, "--out", tmp_path / "out", "--shards", "2", "--launcher", "ray")
    assert (rc, err) == (2, ["error: --launcher ray needs Ray: pip install 'manyanswer-harness[ray]'"])
    assert not (tmp_path / "out").exists()  # the launch's lock folder removed: nothing began


def test_out_holding_another_run_is_refused_before_ray(tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    # a shard of another configuration (another --max-tokens: another run key) where shard 1 of 2 goes
    shard = out / "shards" / shard_name(1, 2)
    assert main(["run", *RUN, "--limit", "2", "--epochs", "1", "--max-tokens", "64", "--metrics", "em-f1",
                 "--shard", "1/2", "--out", str(shard)]) == 0  # fmt: skip
    no_ray(monkeypatch)
    rc, err = harness(capsys, "run", *RUN, "--out", out, "--shards", "2", "--launcher", "ray")
    assert rc == 2 and len(err) == 1 and f"{shard}: holds shard 1/2 of run" in err[0], err
    # shards of another K
    rc, err = harness(capsys, "run", *RUN, "--out", out, "--shards", "3", "--launcher", "ray")
    assert rc == 2 and "holds shard-1of2, not one of the 3 shards of --shards 3" in err[0], err
    # something that is not a launched run's
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    rc, err = harness(capsys, "run", *RUN, "--out", tmp_path / "other", "--shards", "2", "--launcher", "ray")
    assert rc == 2 and "holds notes.txt, not a launched run's" in err[0], err
    assert sorted(p.name for p in (tmp_path / "other").iterdir()) == [".lock", "notes.txt"]


def test_shard_command_lines_are_the_options_given():
    """Each task runs `harness run` with the options as parsed, less those the launcher sets per shard."""
    parser = build_parser(["run"])
    given = [
        "run", "--model", "openai/gpt-4o", "--limit", "7", "--agent-arg", "max_rounds=5", "--agent-arg", "k=-1",
        "--temperature", "0.7", "--no-cache", "--no-prompt-cache", "--server-arg=--gpu-memory-utilization=0.8",
        "--shards", "4", "--launcher", "ray=auto", "--out", "runs/x", "--sample-filter", "category=a b",
        "--batch", "-v",
    ]  # fmt: skip
    args = parser.parse_args(given)
    argv = shard_argv(args)
    assert not any(a.startswith(("--shards", "--launcher", "--out", "--shard")) for a in argv)
    assert argv[:2] == ["run", "-v"]
    again = vars(parser.parse_args(argv))
    assert again == {k: v for k, v in vars(args).items() if k not in ("shards", "launcher", "out")}
    assert again["agent_args"] == ["max_rounds=5", "k=-1"] and again["server_args"] == ["--gpu-memory-utilization=0.8"]


def test_import_harness_and_a_plain_run_never_import_ray(tmp_path, capsys, monkeypatch):
    # `import harness` in a fresh interpreter
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    code = "import sys, harness, harness.cli; harness.cli.build_parser(['run']); print('ray' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert (proc.returncode, proc.stdout) == (0, "False\n"), proc.stderr
    # a run without --launcher, and a shard that records one, with `import ray` failing
    no_ray(monkeypatch)
    run = ["run", "--model", "scripted/answer=x", "--dataset", "hotpotqa:dev", "--limit", "1", "--metrics", "em-f1"]
    assert harness(capsys, *run, "--out", tmp_path / "run")[0] == 0
    assert harness(capsys, *run, "--shard", "1/1", "--launcher", "ray", "--out", tmp_path / "shard")[0] == 0
    assert results(tmp_path / "shard")["config"]["launcher"] == "ray"
    assert results(tmp_path / "run")["config_hash"] == results(tmp_path / "shard")["config_hash"]  # not hashed
    # and in the code: `import ray` only inside the launcher's functions
    import ast

    found = []
    packages = ("harness", "agents", "tools", "wiki_snapshot")
    for path in sorted(p for pkg in packages for p in (REPO / pkg).rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        top = {id(n) for n in tree.body}
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""] if (
                isinstance(node, ast.ImportFrom)) else []
            if any(n == "ray" or n.startswith("ray.") for n in names):
                found.append((path.relative_to(REPO).as_posix(), id(node) in top))
    assert found and {f for f, _ in found} == {"harness/commands/ray_launcher.py"} and not any(t for _, t in found)


# slow tier: real Ray -------------------------------------------------------------------------------

TIMING = {"started_at", "finished_at", "latency_s", "waited_s", "invocation"}


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def results(run_dir: Path) -> dict:
    return json.loads((run_dir / "results.json").read_text())


def keys(run_dir: Path) -> list[str]:
    return [f"{r['id']}#{r.get('epoch', 1)}" for r in rows(run_dir / "samples.jsonl")]


def ray_processes() -> set[int]:
    """Pids of Ray's processes on this machine (raylet, gcs_server, workers: 'ray::' titles)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
            except OSError:
                continue
            if b"raylet" in cmd or b"gcs_server" in cmd or cmd.startswith(b"ray::") or b"default_worker.py" in cmd:
                found.add(int(entry.name))
    return found


def assert_none_left(before: set[int]) -> None:
    deadline = time.monotonic() + 30
    while ray_processes() - before and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not ray_processes() - before, "Ray processes outlived the test"


def assert_merged_equals_whole(merged: Path, whole: Path) -> None:
    """The same rows (without timing and invocation numbers) and every score, count and identity."""

    def bag(run_dir, name):
        return sorted(json.dumps({k: v for k, v in r.items() if k not in TIMING}, sort_keys=True)
                      for r in rows(run_dir / name))  # fmt: skip

    assert bag(merged, "samples.jsonl") == bag(whole, "samples.jsonl")
    assert bag(merged, "failures.jsonl") == bag(whole, "failures.jsonl")
    m, w = results(merged), results(whole)
    assert m["scores"] == w["scores"]
    for key in ("counts", "tokens", "model_calls", "sample_ids", "outcomes", "config_hash", "dataset"):
        assert m[key] == w[key], key


@pytest.fixture
def ray_env(monkeypatch, tmp_path):
    """What Ray's processes inherit: this checkout first on the path (the tasks' shards import it)."""
    pytest.importorskip("ray")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("RAY_SHARD_REQUESTS", str(tmp_path / "requests.tsv"))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    return tmp_path


@pytest.mark.slow
def test_cluster_node_killed_mid_shard_retried_resumed_merged_equal_to_one_machine(ray_env, monkeypatch, capsys):
    from ray.cluster_utils import Cluster

    tmp = ray_env
    # the one-machine run first (no delay); its requests are not the launch's
    assert main(["run", *RUN, "--out", str(tmp / "whole")]) == 0
    (tmp / "requests.tsv").unlink()
    monkeypatch.setenv("RAY_SHARD_DELAY", "0.25")  # each request: a node can be killed while a shard runs

    before = ray_processes()
    small = {"num_cpus": 1, "object_store_memory": 80 * 1024 * 1024}
    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 0, "include_dashboard": False, "object_store_memory": 80 * 1024 * 1024,
            # a dead node is noticed in seconds (Ray's default: tens)
            "_system_config": {"health_check_initial_delay_ms": 0, "health_check_period_ms": 1000,
                               "health_check_failure_threshold": 3},
        },
    )  # fmt: skip
    proc = None
    try:
        workers = [cluster.add_node(**small), cluster.add_node(**small)]  # two nodes, three shards
        out = tmp / "launched"
        proc = subprocess.Popen(
            [sys.executable, "-m", "harness", "run", *RUN, "--shards", "3", "--launcher", f"ray={cluster.address}",
             "--out", str(out)],
            cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        # a running shard with a few finished samples: kill the node its task runs on
        deadline = time.monotonic() + 240
        victim = None
        while victim is None:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no shard got going"
            for i in (1, 2, 3):
                log = out / "shards" / f"{shard_name(i, 3)}.log"
                if log.exists() and len(rows(out / "shards" / shard_name(i, 3) / "samples.jsonl")) >= 3:
                    node_id = log.read_text().split("attempt on node ", 1)[1].split(" ", 1)[0]
                    victim = (i, next(w for w in workers if w.node_id == node_id))
                    break
            time.sleep(0.05)
        index, node = victim
        cluster.remove_node(node, allow_graceful=False)
        cluster.add_node(**small)  # a node for the retried task (and the shard still waiting)
        stdout, stderr = proc.communicate(timeout=400)
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        cluster.shutdown()
    assert_none_left(before)
    assert proc.returncode == 0, stderr

    killed = out / "shards" / shard_name(index, 3)
    # the task was retried on another node and its shard resumed: the first attempt's rows kept, none asked again
    log = (out / "shards" / f"{shard_name(index, 3)}.log").read_text()
    attempts = [line.split("attempt on node ", 1)[1].split(" ", 1)[0] for line in log.splitlines()
                if "attempt on node " in line]  # fmt: skip
    assert len(attempts) == 2 and attempts[0] == node.node_id != attempts[1], log
    assert f"shard {index}/3: attempt 2 on node {attempts[1][:12]}" in stderr
    shard = results(killed)
    selected = shard["counts"]["selected"]
    assert len(keys(killed)) == len(set(keys(killed))) == selected == shard["counts"]["finished"]
    [invocation] = shard["invocations"]  # the killed attempt wrote no results.json
    kept = invocation["already_finished"]
    assert 3 <= kept < selected and invocation["attempted"] == selected - kept
    # every pair asked once, but the one in flight when the node died (--max-connections 1)
    asked = [tuple(line.split("\t")[::2]) for line in (tmp / "requests.tsv").read_text().splitlines()]
    twice = {pair for pair in asked if asked.count(pair) > 1}
    assert len(asked) == 40 + len(twice) and len(twice) <= 1

    # one progress view over the shards, then the merge
    assert "launched 3 shard(s) as Ray tasks" in stderr and "; shards 1/3 " in stderr
    assert f"merged 3 shard(s) of run {results(out)['run_id']} -> {out}" in stderr
    assert_merged_equals_whole(out, tmp / "whole")
    merged = results(out)
    assert merged["config"]["launcher"] == "ray" and merged["config"]["shard"] is None
    assert {results(out / "shards" / shard_name(i, 3))["config"]["launcher"] for i in (1, 2, 3)} == {"ray"}
    assert {results(out / "shards" / shard_name(i, 3))["config_hash"] for i in (1, 2, 3)} == {merged["config_hash"]}
    # the merged directory is a run directory: the unsharded command resumes it with nothing to do
    assert main(["run", *RUN, "--out", str(out)]) == 0
    assert results(out)["invocations"][-1]["attempted"] == 0 and results(out)["scores"] == merged["scores"]


@pytest.mark.slow
def test_local_ray_instance_with_the_local_model_equals_one_machine(ray_env):
    """Without an address a local Ray instance; the embedded GGUF model (SmolLM2-135M) in each shard."""
    tmp = ray_env
    run = ["run", "--limit", "3", "--max-tokens", "16", "--no-cache", "--n-threads", "1"]
    env = dict(os.environ)
    before = ray_processes()
    whole = subprocess.run([sys.executable, "-m", "harness", *run, "--out", "whole"], cwd=tmp, env=env,
                           capture_output=True, text=True, timeout=600)  # fmt: skip
    assert whole.returncode in (0, 4), whole.stderr
    launched = subprocess.run(
        [sys.executable, "-m", "harness", *run, "--shards", "2", "--launcher", "ray", "--out", "launched"],
        cwd=tmp, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert_none_left(before)
    assert launched.returncode == whole.returncode, launched.stderr
    assert "launched 2 shard(s) as Ray tasks" in launched.stderr
    assert_merged_equals_whole(tmp / "launched", tmp / "whole")
    assert results(tmp / "launched")["model"]["backend"] == "local"
