"""Runs as pandas data frames (issue 31): ``harness.runs_df`` one row per run, ``harness.samples_df``
one per question x epoch, read through the typed record; a failed run's metrics and a failed or
never-asked question's values are missing (NaN), never 0; pandas missing is one line naming the
extra. The runs are real runs of scripted models (tests/scripted_runs.py)."""

from __future__ import annotations

import json
import math
import shutil
import sys

import pandas as pd
import pytest
from scripted_runs import failing, partial_answerer, scripted_run

import harness
from harness.errors import HarnessError


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("frames") / "runs"
    scripted_run(base / "fanoutqa", "fr-fq", partial_answerer("fanoutqa:dev"), "fanoutqa:dev", 3)
    scripted_run(base / "qampari", "fr-qp", partial_answerer("qampari:sample"), "qampari:sample", 3, "--epochs", "2")
    scripted_run(base / "failed", "fr-fail", failing, "qampari:sample", 2, "--max-attempts", "1")
    return base


def results_of(run):
    return json.loads((run / "results.json").read_text())


def test_runs_df_one_row_per_run(runs):
    frame = harness.runs_df(runs)
    assert sorted(frame["dir"]) == sorted(str(runs / n) for n in ("fanoutqa", "qampari", "failed"))
    rows = {d.rsplit("/", 1)[-1]: r for d, r in zip(frame["dir"], frame.to_dict("records"))}
    fq, qp, failed = rows["fanoutqa"], rows["qampari"], rows["failed"]
    res = results_of(runs / "fanoutqa")
    assert fq["run_id"] == res["run_id"] and fq["dataset"] == "fanoutqa:dev@nov23" and fq["setting"] == "closed-book"
    assert fq["model"] == "scripted/fr-fq" and fq["status"] == "complete" and fq["n"] == 3 and fq["n_failed"] == 0
    assert fq["headline"] == "fanoutqa-string.acc.loose" and fq["headline_label"] == "Accuracy (loose)"
    loose = res["scores"]["fanoutqa-string"]["acc"]["loose"]
    assert fq["headline_value"] == fq["fanoutqa-string.acc.loose"] == loose and 0 < loose < 1
    interval = res["scores"]["uncertainty"]["fanoutqa-string.acc.loose"]
    assert fq["fanoutqa-string.acc.loose.stderr"] == interval["stderr"]
    assert [fq["fanoutqa-string.acc.loose.ci_lo"], fq["fanoutqa-string.acc.loose.ci_hi"]] == interval["ci95"]
    assert fq["tokens_total"] == res["tokens"]["total"] and fq["context_size"] == res["model"]["context_size"]
    assert math.isnan(fq["set-f1.f1"])  # another dataset's metric: missing, not 0
    assert qp["epochs"] == 2 and qp["headline"] == "set-f1.f1"
    assert qp["set-f1.f1"] == results_of(runs / "qampari")["scores"]["set-f1"]["f1"]
    # every question failed: no value, never 0
    assert failed["failed"] is True or failed["failed"] == 1
    assert failed["n"] == 0 and failed["n_failed"] == 2 and math.isnan(failed["set-f1.f1"])
    assert math.isnan(failed["headline_value"]) and failed["headline"] == "set-f1.f1"
    assert frame["set-f1.f1"].dtype.kind == "f"


def test_samples_df_one_row_per_question_and_epoch(runs, tmp_path):
    frame = harness.samples_df(runs / "fanoutqa", runs / "qampari", runs / "failed")
    fq = frame[frame["dir"] == str(runs / "fanoutqa")]
    raw = {r["question_id"]: r["fanoutqa-string"] for r in results_of(runs / "fanoutqa")["scores"]["raw"]}
    assert list(fq["id"]) == list(raw) and set(fq["epoch"]) == {1} and set(fq["status"]) == {"ok"}
    assert list(fq["fanoutqa-string.acc"]) == [raw[q]["acc"] for q in fq["id"]]
    assert list(fq["fanoutqa-string.rouge.rougeL.fscore"]) == [raw[q]["rouge"]["rougeL"]["fscore"] for q in fq["id"]]
    assert set(fq["values_of"]) == {"sample"} and (fq["prompt_tokens"] > 0).all() and (fq["outcome"] == "answered").all()
    # --epochs 2: a row per question and epoch, each with the question's reduced values
    qp = frame[frame["dir"] == str(runs / "qampari")]
    assert len(qp) == 6 and sorted(qp["epoch"]) == [1, 1, 1, 2, 2, 2] and set(qp["values_of"]) == {"question"}
    raw = {r["question_id"]: r["set-f1"] for r in results_of(runs / "qampari")["scores"]["raw"]}
    assert all(row["set-f1.f1"] == raw[row["id"]]["f1"] for row in qp.to_dict("records"))
    # failed questions: their error, and no value (never 0)
    failed = frame[frame["dir"] == str(runs / "failed")]
    assert set(failed["status"]) == {"error"} and set(failed["error_type"]) == {"exception"}
    assert failed["set-f1.f1"].isna().all() and failed["answer"].isna().all()

    # a question never asked (its row gone): pending, no values
    copy = tmp_path / "copy"
    shutil.copytree(runs / "fanoutqa", copy)
    lines = (copy / "samples.jsonl").read_text().splitlines()
    (copy / "samples.jsonl").write_text("\n".join(lines[1:]) + "\n")
    gone = json.loads(lines[0])["id"]
    row = harness.samples_df(copy).set_index("id").loc[gone]
    assert row["status"] == "pending" and math.isnan(row["fanoutqa-string.acc"]) and pd.isna(row["answer"])


def test_folders_passed_over_are_in_attrs(runs, tmp_path):
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "results.json").write_text("{}")
    frame = harness.runs_df(tmp_path, runs / "failed")
    assert list(frame["dir"]) == [str(runs / "failed")]
    assert frame.attrs["skipped"] == [
        {"path": str(tmp_path / "broken"), "reason": f"{tmp_path / 'broken' / 'results.json'}: not a harness results file"}
    ]
    empty = harness.samples_df(tmp_path)
    assert len(empty) == 0 and "status" in empty.columns


def test_without_pandas_one_line_naming_the_extra(runs, monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)  # import pandas raises ImportError
    for fn in (harness.runs_df, harness.samples_df):
        with pytest.raises(HarnessError) as info:
            fn(runs)
        assert str(info.value) == "the data frames need pandas, which is not installed: pip install 'manyanswer-harness[analysis]'"
    monkeypatch.delitem(sys.modules, "pandas")
    with pytest.raises(HarnessError, match="give at least one run folder"):
        harness.runs_df()
