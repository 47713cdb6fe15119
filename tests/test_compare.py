"""``harness compare`` and ``harness power`` on two real local-model runs (SmolLM2-135M in process):
closed-book vs evidence-provided on hotpotqa:dev, and a run compared with itself."""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import run_harness

LIMIT = 4


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory, hotpot_snapshot):
    base = tmp_path_factory.mktemp("compare")
    common = ["--dataset", "hotpotqa:dev", "--limit", str(LIMIT), "--max-tokens", "8", "--n-threads", "2"]
    closed, evidence = base / "closed", base / "evidence"
    proc = run_harness("run", *common, "--setting", "closed-book", "--out", str(closed))
    assert proc.returncode == 0, proc.stderr
    proc = run_harness(
        "run", *common, "--setting", "evidence-provided", "--context-size", "1024",
        "--snapshot", str(hotpot_snapshot), "--out", str(evidence),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return base, closed, evidence


def per_question(run_dir, metric, leaf):
    scores = json.loads((run_dir / "results.json").read_text())["scores"]
    return {r["question_id"]: r[metric][leaf] for r in scores["raw"]}


def test_compare_two_real_runs(two_runs):
    base, closed, evidence = two_runs
    out, plot = base / "cmp.json", base / "cmp.png"
    proc = run_harness("compare", str(closed), str(evidence), "--out", str(out), "--plot", str(plot))
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text())
    assert result["n_shared"] == LIMIT and result["baseline"] == str(closed)
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    a, b = per_question(closed, "em-f1", "f1"), per_question(evidence, "em-f1", "f1")
    f1 = result["metrics"]["em-f1.f1"]
    assert f1["runs"][0]["value"] == pytest.approx(sum(a.values()) / LIMIT)
    assert f1["diffs"][0]["diff"] == pytest.approx(sum(b[q] - a[q] for q in a) / LIMIT)
    lo, hi = f1["diffs"][0]["ci95"]
    assert lo <= f1["diffs"][0]["diff"] <= hi and 0 < f1["diffs"][0]["p"] <= 1
    em = result["metrics"]["em-f1.em"]["diffs"][0]
    assert em["test"] == "McNemar exact"  # 0/1 per question
    strict = result["metrics"]["fanoutqa-string.acc.strict"]  # the mean of acc == 1: 0/1 per question
    assert strict["kind"] == "mean" and strict["diffs"][0]["test"] == "McNemar exact"
    # the console: each run's value with its interval, the difference, the p-value
    assert "em-f1.f1" in proc.stdout and "B - A" in proc.stdout and "p = " in proc.stdout


def test_a_run_compared_with_itself(two_runs):
    base, closed, _ = two_runs
    out = base / "self.json"
    proc = run_harness("compare", str(closed), str(closed), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text())
    assert result["metrics"]
    for entry in result["metrics"].values():
        for d in entry["diffs"]:
            assert d["diff"] == 0 and d["p"] == 1 and not d["significant"] and d["most_changed"] == []
            assert d["ci95"] == [0, 0]


def test_mismatched_datasets_are_refused_unless_allowed(two_runs, tmp_path):
    _, closed, evidence = two_runs
    other = tmp_path / "other"
    shutil.copytree(closed, other)
    results = json.loads((other / "results.json").read_text())
    results["dataset"]["spec"] = "hotpotqa:dev@other"
    (other / "results.json").write_text(json.dumps(results))
    proc = run_harness("compare", str(evidence), str(other))
    assert proc.returncode == 2 and "different datasets" in proc.stderr and "--allow-mismatch" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert run_harness("compare", str(evidence), str(other), "--allow-mismatch").returncode == 0


def test_power_from_the_pilot(two_runs):
    from harness import stats

    _, closed, evidence = two_runs
    out = closed.parent / "power.json"
    # "f1" names em-f1.f1 (the one number ending in .f1)
    proc = run_harness("power", str(evidence), "--metric", "f1", "--delta", "0.05", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    r = json.loads(out.read_text())
    assert r["metric"] == "em-f1.f1" and r["design"].startswith("unpaired")
    if r["sd"] > 0:
        assert r["n_required"] == stats.required_n(r["sd"], 0.05)
        assert f"{r['n_required']} questions per run" in proc.stdout
    else:  # the tiny model scored every pilot question alike
        assert r["n_required"] is None and "no spread" in proc.stdout
    paired = run_harness("power", str(closed), "--metric", "em-f1.f1", "--delta", "0.05", "--paired-with", str(evidence))
    assert paired.returncode == 0, paired.stderr
    assert "paired" in paired.stdout
    bad = run_harness("power", str(evidence), "--metric", "nope", "--delta", "0.05")
    assert bad.returncode == 2 and bad.stderr.startswith("error: --metric nope: not a number of this run")
