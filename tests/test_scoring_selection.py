"""--metrics selection, unknown metrics, and per-category breakdowns (FanOutQA categories)."""

import json

import pytest
from conftest import run_harness

from harness.datasets import load_dataset
from harness.scoring.metrics import score_answers


def test_fanoutqa_breakdown_by_category():
    ds = load_dataset("fanoutqa:dev")
    qs = ds.samples[:12]
    answers = [{"id": q.id, "answer": str(q.answer)} for q in qs[:6]]  # half answered
    scores = score_answers(ds, qs, answers)
    by_cat = scores["breakdown"]["category"]
    raw = {r["question_id"]: r for r in scores["raw"]}
    for category, row in by_cat.items():
        members = [q for q in qs if category in q.raw["categories"]]
        assert row["n"] == len(members)
        row, rows = row["fanoutqa-string"], [raw[q.id]["fanoutqa-string"] for q in members]
        assert row["acc"]["loose"] == pytest.approx(sum(r["acc"] for r in rows) / len(members))
        assert row["acc"]["strict"] == pytest.approx(sum(r["acc"] == 1 for r in rows) / len(members))
        assert row["rouge"]["rougeL"]["fscore"] == pytest.approx(
            sum(r["rouge"]["rougeL"]["fscore"] for r in rows) / len(members)
        )


def test_metrics_selection_and_unknown_metric(tmp_path):
    ds = load_dataset("hotpotqa:dev")
    gens = tmp_path / "gens.jsonl"
    gens.write_text("".join(json.dumps({"id": q.id, "answer": q.answer}) + "\n" for q in ds.samples[:5]))
    out = tmp_path / "s.json"
    proc = run_harness("score", "--dataset", "hotpotqa:dev", "--generations", str(gens), "--metrics", "em-f1",
                       "--out", str(out), "--only-answered")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    scores = json.loads(out.read_text())
    assert scores["em-f1"]["em"] == 1.0 and scores["em-f1"]["f1"] == 1.0 and "fanoutqa-string" not in scores
    assert scores["meta"]["metrics"] == ["em-f1"] and scores["meta"]["n_questions"] == 5

    proc = run_harness("score", "--dataset", "hotpotqa:dev", "--generations", str(gens), "--metrics", "nosuch")
    assert proc.returncode == 2 and "unknown metric 'nosuch'" in proc.stderr and "Traceback" not in proc.stderr
