"""``harness compare`` and ``harness power`` on two real local-model runs (SmolLM2-135M in process):
closed-book vs evidence-provided on hotpotqa:dev, and a run compared with itself; then, on scripted
answers (fast), that the comparison does not depend on the runs' order or sizes and aggregates each
metric as its run did (a plugin's own aggregate, never a built-in of the same name)."""

from __future__ import annotations

import asyncio
import json
import shutil

import pytest
from conftest import loaded_run, run_harness

from harness.analysis.compare import compare_runs, load_run
from harness.execution.config import build_config
from harness.datasets import load_dataset
from harness.models.scripted import register_script, unregister_script
from harness.execution.runner import Run

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


@pytest.mark.slow
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
    d = f1["diffs"][0]
    if all(b[q] == a[q] for q in a):  # F1 is a mean (issue 41): no difference anywhere has no spread, n/a
        assert d["ci95"] is None and d["note"] and d["p"] == 1
    else:
        lo, hi = d["ci95"]
        assert lo <= d["diff"] <= hi and 0 < d["p"] <= 1
    em = result["metrics"]["em-f1.em"]["diffs"][0]
    assert em["test"] == "McNemar exact"  # 0/1 per question
    strict = result["metrics"]["fanoutqa-string.acc.strict"]  # the mean of acc == 1: 0/1 per question
    assert strict["kind"] == "mean" and strict["diffs"][0]["test"] == "McNemar exact"
    # the console: each run's value with its interval, the difference, the p-value
    assert "em-f1.f1" in proc.stdout and "B - A" in proc.stdout and "p = " in proc.stdout


@pytest.mark.slow
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
            if d["interval"] == "newcombe paired score":  # two shares: equal on 4 questions, not certainly equal
                assert d["ci95"][0] == pytest.approx(-d["ci95"][1]) and d["ci95"][1] > 0.2
            else:  # no spread to estimate: n/a with the reason, never [0, 0]
                assert d["ci95"] is None and d["stderr"] is None and "no spread" in d["note"]


@pytest.mark.slow
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


@pytest.mark.slow
def test_power_from_the_pilot(two_runs):
    from harness.scoring import stats

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


# order-free comparison and each run's own aggregation: fast, scripted answers --------------------
HOTPOT = load_dataset("hotpotqa:dev").samples
GOLD = {s.question: (i, s.answer) for i, s in enumerate(HOTPOT)}


def _answers_by(shift: int):
    """Right, half right (F1 between 0 and 1) or wrong by question index: two shifts give two runs
    that differ question by question."""

    def script(messages, tools, tool_choice, params):
        prompt = messages[0]["content"]
        i, gold = next(v for q, v in GOLD.items() if q in prompt)
        kind = (i + shift) % 3
        return gold if kind == 0 else f"{gold} and something else entirely" if kind == 1 else "no idea"

    return script


@pytest.fixture
def scripts():
    for name, shift in (("cmp-a", 0), ("cmp-b", 1)):
        register_script(name, _answers_by(shift))
    yield
    for name in ("cmp-a", "cmp-b"):
        unregister_script(name)


def scripted_run(out, script, limit, metrics=None):
    options = {"model": f"scripted/{script}", "dataset": "hotpotqa:dev", "out": str(out), "limit": limit}
    config = build_config({**options, "cache": False, **({"metrics": metrics} if metrics else {})})
    asyncio.run(Run(config, show_progress=False).execute())
    return load_run(out)


def assert_mirrored(ab, ba):
    """compare(A, B) and compare(B, A): the same numbers compared the same way, B - A = -(A - B)."""
    assert set(ab["metrics"]) == set(ba["metrics"])
    for key, x in ab["metrics"].items():
        y = ba["metrics"][key]
        assert x["kind"] == y["kind"], key
        assert x["diffs"][0]["test"] == y["diffs"][0]["test"], key
        assert [r["value"] for r in x["runs"]] == pytest.approx([r["value"] for r in reversed(y["runs"])]), key
        assert x["diffs"][0]["diff"] == pytest.approx(-y["diffs"][0]["diff"], abs=1e-12), key
        lo, hi = y["diffs"][0]["ci95"]
        assert x["diffs"][0]["ci95"] == pytest.approx([-hi, -lo], abs=1e-12), key
        assert x["diffs"][0]["p"] == pytest.approx(y["diffs"][0]["p"]), key


def test_compare_is_the_same_whichever_run_has_more_questions_or_comes_first(tmp_path, scripts):
    big = scripted_run(tmp_path / "big", "cmp-a", 12)
    small = scripted_run(tmp_path / "small", "cmp-b", 8)  # the first 8 of the same 12
    ab, ba = compare_runs([big, small]), compare_runs([small, big])
    assert ab["n_shared"] == ba["n_shared"] == 8
    assert_mirrored(ab, ba)
    shared = [r["question_id"] for r in small.scores["raw"]]
    for run, values in ((big, ab["metrics"]["em-f1.f1"]["runs"][0]), (small, ab["metrics"]["em-f1.f1"]["runs"][1])):
        f1 = {r["question_id"]: r["em-f1"]["f1"] for r in run.scores["raw"]}
        assert values["value"] == pytest.approx(sum(f1[q] for q in shared) / len(shared))
    # every leaf both runs have is compared: em-f1's means and FanOutQA's accuracy, as means
    assert {"em-f1.em", "em-f1.f1", "fanoutqa-string.acc.loose", "fanoutqa-string.acc.strict"} <= set(ab["metrics"])
    # the declared shares (EM, strict accuracy) by McNemar; loose accuracy, a mean of each question's
    # share of answer parts found, by the sign-flip test even where every question here is 0 or 1
    for key in ("em-f1.em", "fanoutqa-string.acc.strict"):
        assert ab["metrics"][key]["kind"] == "mean" and ab["metrics"][key]["diffs"][0]["test"] == "McNemar exact"
    loose = ab["metrics"]["fanoutqa-string.acc.loose"]
    assert loose["kind"] == "mean" and loose["diffs"][0]["test"].startswith("sign-flip permutation")


# A plugin metric under a built-in's name. Its f1 is a micro F1 (a ratio of sums, not a mean of
# per-question values) and its rows have no "precision": the built-in quest's aggregate of them
# would be another number, or a KeyError.
PLUGIN = """
from harness.scoring.metrics import streamable


def micro(rows, n):
    hit = sum(r["hit"] for r in rows)
    size = sum(r["pred"] + r["gold"] for r in rows)
    return {"f1": 2 * hit / size if size else 0.0, "pred": sum(r["pred"] for r in rows) / n if n else 0.0}


@streamable(micro)
def quest(questions, answers, only_answered, options=None):
    by_id = {a["id"]: a["answer"] for a in answers}
    raw = {}
    for q in questions:
        pred, gold = set(str(by_id.get(q.id) or "").lower().split()), set(str(q.answer).lower().split())
        raw[q.id] = {"hit": len(pred & gold), "pred": len(pred), "gold": len(gold)}
    return {"raw": raw, "aggregate": micro(list(raw.values()), len(raw)), "info": {}}
"""


def micro_f1(rows):
    hit, size = sum(r["hit"] for r in rows), sum(r["pred"] + r["gold"] for r in rows)
    return 2 * hit / size


@pytest.fixture
def plugin_runs(tmp_path, monkeypatch, scripts):
    monkeypatch.chdir(tmp_path)  # the runs record the plugin as the relative FILE.py they were given
    (tmp_path / "myquest.py").write_text(PLUGIN, encoding="utf-8")
    metrics = ["myquest.py:quest", "em-f1"]
    big = scripted_run(tmp_path / "big", "cmp-a", 12, metrics)
    small = scripted_run(tmp_path / "small", "cmp-b", 8, metrics)
    assert big.scores["meta"]["metric_info"]["quest"]["plugin"]["ref"] == "myquest.py:quest"
    return tmp_path, big, small


def test_a_plugin_metric_is_aggregated_as_its_run_did_not_as_the_built_in(plugin_runs, monkeypatch):
    base, big, small = plugin_runs
    ab, ba = compare_runs([big, small]), compare_runs([small, big])
    assert_mirrored(ab, ba)
    shared = {r["question_id"] for r in small.scores["raw"]}
    f1 = ab["metrics"]["quest.f1"]
    assert f1["kind"] == "aggregate"  # a micro F1: bootstrapped through the plugin's own aggregate
    # the smaller run's shared questions are all of its questions: its own recorded number
    assert f1["runs"][1]["value"] == pytest.approx(small.scores["quest"]["f1"])
    on_shared = [r["quest"] for r in big.scores["raw"] if r["question_id"] in shared]
    assert f1["runs"][0]["value"] == pytest.approx(micro_f1(on_shared))
    assert ab["metrics"]["quest.pred"]["kind"] == "mean" and not ab.get("skipped")
    monkeypatch.chdir(base / "big")  # elsewhere: the relative file is found beside the runs, by its sha256
    assert compare_runs([big, small])["metrics"]["quest.f1"] == f1


def test_a_plugin_that_cannot_be_loaded_compares_only_its_means(plugin_runs):
    base, big, small = plugin_runs
    (base / "myquest.py").unlink()  # the plugin is gone: no other quest may stand in for it
    ab, ba = compare_runs([big, small]), compare_runs([small, big])
    assert_mirrored(ab, ba)
    assert "quest.f1" not in ab["metrics"] and "quest.f1" in ab["skipped"] and "myquest.py" in ab["skipped"]["quest.f1"]
    shared = {r["question_id"] for r in small.scores["raw"]}
    pred = ab["metrics"]["quest.pred"]  # a plain mean of a per-question value needs no code
    on_shared = [r["quest"]["pred"] for r in big.scores["raw"] if r["question_id"] in shared]
    assert pred["runs"][0]["value"] == pytest.approx(sum(on_shared) / len(on_shared))
    assert "em-f1.f1" in ab["metrics"]


def test_runs_of_two_implementations_of_one_metric_compare_only_its_means(plugin_runs):
    base, big, _ = plugin_runs
    # the same name from an edited file: another implementation (another sha256) for the later run
    (base / "myquest.py").write_text(PLUGIN + "\n# edited\n", encoding="utf-8")
    other = scripted_run(base / "other", "cmp-b", 8, ["myquest.py:quest", "em-f1"])
    result = compare_runs([big, other])
    assert "quest.f1" not in result["metrics"] and "differ" in result["skipped"]["quest.f1"]
    assert result["metrics"]["quest.pred"]["kind"] == "mean"


def test_clustering_and_aggregates_do_not_depend_on_the_order(tmp_path):
    """TopiOCQA (clustered by conversation by default; x100 means; corpus BLEU through its summed
    statistics): one run re-scored without clusters, one run with more turns. Either order gives
    the same clustered comparison, mirrored."""
    import random

    from harness.scoring.metrics import ScoringOptions, score_answers

    ds = load_dataset("topiocqa:dev")
    qs = ds.samples[:60]

    def answers(seed, n):
        rnd = random.Random(seed)
        out = []
        for q in qs[:n]:
            gold = q.answer if isinstance(q.answer, str) else q.answer[0]
            r = rnd.random()
            answer = gold if r < 0.4 else " ".join(gold.split()[:2]) if r < 0.7 else "no idea"
            out.append({"id": q.id, "answer": answer})
        return out

    def run(path, seed, n, **options):
        scores = score_answers(ds, qs[:n], answers(seed, n), ["topiocqa"], options=ScoringOptions(**options))
        return loaded_run(path, scores, ds)

    clustered, plain = run("a", 1, 60), run("b", 2, 45, cluster_by="none")
    assert plain.scores["meta"]["clustering"] == {"by": None}
    ab, ba = compare_runs([clustered, plain]), compare_runs([plain, clustered])
    assert ab["clustering"] == ba["clustering"] and ab["clustering"]["by"]  # clustered in both orders
    assert_mirrored(ab, ba)
    assert ab["metrics"]["topiocqa.bleu_corpus"]["kind"] == "aggregate"
    assert ab["metrics"]["topiocqa.em"]["kind"] == "mean"  # x100 the mean of 0/1, in either order


def test_multi_epoch_runs_say_why_corpus_bleu_is_not_compared():
    """Runs of 3 epochs keep no per-question parts of TopiOCQA's corpus BLEU (epochs.reduce_values
    drops them): compare says so, naming the run, not "scored before the metric kept them"; a run of
    one epoch beside one of three: the three-epoch run is named."""
    from harness.execution.scoring import score_records

    ds = load_dataset("topiocqa:dev")
    qs = ds.samples[:30]

    def scored(shift, epochs):
        records = [
            {"id": q.id, "epoch": e + 1, "answer": q.answer if (i + e + shift) % 3 else "no idea"}
            for e in range(epochs)
            for i, q in enumerate(qs)
        ]
        return score_records(ds, qs, records, epochs=epochs, reducer="mean")

    a, b = loaded_run("a", scored(0, 3), ds), loaded_run("b", scored(1, 3), ds)
    single = loaded_run("c", scored(1, 1), ds)
    why = compare_runs([a, b])["skipped"]["topiocqa.bleu_corpus"]
    assert "a has 3 epochs" in why and "scored before" not in why
    assert "topiocqa.em" in compare_runs([a, b])["metrics"]
    why = compare_runs([single, b])["skipped"]["topiocqa.bleu_corpus"]
    assert "b has 3 epochs" in why and "scored before" not in why


@pytest.fixture
def broken_script():
    def broken(messages, tools, tool_choice, params):
        raise ValueError("no answer today")

    yield register_script("cmp-broken", broken)
    unregister_script("cmp-broken")


def test_a_run_that_answered_nothing_is_failed_never_compared(tmp_path, scripts, broken_script, capsys):
    """Unanswered questions score 0, so a run that stopped before answering anything would compare
    (and give a spread for power) as if its zeros were measured. compare shows it as failed, with
    why, and runs no test on it; as the baseline, or for power, it is refused with one line."""
    from harness.cli import main

    good = tmp_path / "good"
    scripted_run(good, "cmp-a", 4)
    broken = tmp_path / "broken"
    config = build_config({"model": "scripted/cmp-broken", "dataset": "hotpotqa:dev", "out": str(broken), "limit": 4})
    asyncio.run(Run(config, show_progress=False).execute())
    results = json.loads((broken / "results.json").read_text())
    assert results["counts"]["finished"] == 0 and results["scores"]["raw"] == []  # nothing scored: no zeros
    assert results["scores"]["em-f1"]["em"] is None and results["scores"]["meta"]["n_failed"] == 4
    # samples finished, but none with an answer (a strategy that gave up): scores.meta.n_answered 0
    mute = tmp_path / "mute"
    shutil.copytree(good, mute)
    results = json.loads((mute / "results.json").read_text())
    results["scores"]["meta"]["n_answered"] = 0
    (mute / "results.json").write_text(json.dumps(results))
    capsys.readouterr()
    expected = {
        broken: "the run answered nothing (0 of 4 samples finished; failed: 4 exception)",
        mute: "the run answered nothing (4 samples finished, none of them with an answer)",
    }
    for bad, why in expected.items():
        for argv in (
            ["power", str(bad), "--metric", "em", "--delta", "0.1"],
            ["power", str(good), "--metric", "em", "--delta", "0.1", "--paired-with", str(bad)],
        ):
            assert main(argv) == 2, argv
            captured = capsys.readouterr()
            line = f"error: {bad / 'results.json'}: {why}: its zero scores measure nothing; rerun it first"
            assert captured.err.strip().splitlines() == [line] and captured.out == "", argv
        assert main(["compare", str(bad), str(good)]) == 2  # no baseline to compare with
        captured = capsys.readouterr()
        assert captured.err.strip().splitlines() == [
            f"error: {bad / 'results.json'}: the baseline (the first run) {why.removeprefix('the run ')}: "
            "there is nothing to compare the others with; put a run that answered first"
        ]
        # a later run: listed as failed with why, every number n/a, no test and no p-value
        out = tmp_path / f"{bad.name}.json"
        assert main(["compare", str(good), str(bad), "--out", str(out)]) == 1  # nothing was compared
        text = capsys.readouterr().out
        assert f"B: {bad}" in text and f"[failed, not compared: {why}]" in text
        assert "B      n/a (failed)" in text and "B - A  not compared: B failed" in text
        assert not [line for line in text.splitlines() if line.startswith("  B ") and any(c.isdigit() for c in line)]
        assert "no test ran" in text and "p = " not in text
        result = json.loads(out.read_text())
        assert result["runs"][1]["failed"] == why and result["multiple_testing"]["n_tests"] == 0
        for entry in result["metrics"].values():
            assert entry["runs"][1]["value"] is None and entry["runs"][1]["failed"] == why
            assert entry["diffs"][0]["p"] is None and entry["diffs"][0]["diff"] is None
        for fmt, cell in (("md", "| failed | not compared | n/a | n/a |"), ("csv", ",n/a,n/a,n/a,n/a,n/a,n/a,")):
            assert main(["compare", str(good), str(bad), "--format", fmt]) == 1
            rows = [line for line in capsys.readouterr().out.splitlines() if str(bad) in line or "B: " in line]
            assert rows and all(cell in line for line in rows if not line.startswith("- "))
    # the run that answered still gives a power estimate
    assert main(["power", str(good), "--metric", "f1", "--delta", "0.1"]) == 0
