"""--epochs N: each question run N times (seed + epoch - 1), epochs resumed like samples, scores
reduced per question (mean, max, mode) before the aggregates, between-epoch variance recorded."""

import asyncio
import json

import pytest

from harness.execution.config import build_config
from harness.datasets import load_dataset
from harness.models.scripted import register_script, unregister_script
from harness.execution.runner import Run
from harness.scoring.epochs import reduce_values
from harness.execution.scoring import score_run

GOLD = {s.question: s.answer for s in load_dataset("hotpotqa:dev").samples}


async def right_on_even_seeds(messages, tools, tool_choice, params):
    """The gold answer on even seeds (epochs 1, 3, ...), a wrong one on odd seeds."""
    prompt = messages[0]["content"]
    question = next(q for q in GOLD if q in prompt)
    return GOLD[question] if params.seed % 2 == 0 else "no idea"


@pytest.fixture(autouse=True)
def script():
    yield register_script("epochs", right_on_even_seeds)
    unregister_script("epochs")


def run(tmp_path, **options):
    config = build_config(
        {"model": "scripted/epochs", "dataset": "hotpotqa:dev", "out": str(tmp_path / "run"), "limit": 4, **options}
    )
    return asyncio.run(Run(config, show_progress=False).execute())


def test_reduce_values_nested_mean_max_mode():
    values = [{"acc": {"loose": 1.0, "strict": True}, "note": "a"}, {"acc": {"loose": 0.0, "strict": False}}, None]
    assert reduce_values(values, "mean") == {"acc": {"loose": 0.5, "strict": 0.5}, "note": "a"}
    assert reduce_values(values, "max") == {"acc": {"loose": 1.0, "strict": True}, "note": "a"}
    assert reduce_values([0, 1, 1, 0, 2], "mode") == 0  # a tie goes to the value seen first
    assert reduce_values([1, 0, 0], "mode") == 0
    assert reduce_values([None, None], "mean") is None


def test_three_epochs_reduce_per_question_and_resume(tmp_path, script, capsys):
    results = run(tmp_path, epochs=3, cache=False)
    assert "at temperature 0" in capsys.readouterr().err
    assert results["counts"]["selected"] == 12 and results["counts"]["finished"] == 12
    assert results["counts"]["questions"] == 4 and results["counts"]["epochs"] == 3
    assert sorted(req["params"].seed for req in script.requests) == [0] * 4 + [1] * 4 + [2] * 4
    records = [json.loads(line) for line in (tmp_path / "run" / "samples.jsonl").read_text().splitlines()]
    assert sorted(r["epoch"] for r in records) == [1] * 4 + [2] * 4 + [3] * 4
    scores = results["scores"]
    # epochs 1 and 3 right, epoch 2 wrong: each question's mean is 2/3, so is the headline
    assert scores["em-f1"]["em"] == pytest.approx(2 / 3)
    assert [e["em-f1.em"] for e in scores["epochs"]["per_epoch"]] == [1.0, 0.0, 1.0]
    assert scores["epochs"]["between_epoch_variance"]["em-f1.em"] == pytest.approx(1 / 3)  # var(1, 0, 1)
    assert all(row["em-f1"]["em"] == pytest.approx(2 / 3) for row in scores["raw"])
    assert len(scores["raw"]) == 4
    # the error bar is over the 4 questions' reduced values (all 2/3: no spread, said), not the 12 samples
    em = scores["uncertainty"]["em-f1.em"]
    assert em["n"] == 4 and em["stderr"] is None and em["ci95"] is None and em["method"].startswith("analytic")
    assert em["note"] == "all 4 values equal: no spread to estimate"
    assert score_run(tmp_path / "run") == scores  # re-scoring the run directory gives the same

    # a fourth epoch resumes the same run: only its 4 samples are sent
    script.requests.clear()
    results = run(tmp_path, epochs=4, epoch_reducer="max", cache=False)
    assert len(script.requests) == 4 and {req["params"].seed for req in script.requests} == {3}
    assert results["run_id"] == json.loads((tmp_path / "run" / "config.json").read_text())["config_hash"][:12]
    assert results["scores"]["em-f1"]["em"] == 1.0  # max over epochs: pass@4-like
    assert results["scores"]["epochs"]["reducer"] == "max" and results["scores"]["epochs"]["n"] == 4


def test_one_epoch_keeps_the_plain_records(tmp_path):
    results = run(tmp_path, cache=False)
    records = [json.loads(line) for line in (tmp_path / "run" / "samples.jsonl").read_text().splitlines()]
    assert all("epoch" not in r for r in records)
    assert "epochs" not in results["scores"] and "epochs" not in results["counts"]
    assert results["scores"]["em-f1"]["em"] == 1.0


def test_mode_reducer(tmp_path):
    results = run(tmp_path, epochs=3, epoch_reducer="mode", cache=False)
    assert results["scores"]["em-f1"]["em"] == 1.0  # right, wrong, right: the mode is right


@pytest.mark.slow
def test_epochs_with_the_real_local_model(tmp_path):
    """Two epochs of local/smollm2 sampling at temperature 1: two records per question, each
    question's score the mean of its two epochs' values."""
    config = build_config(
        {
            "model": "local/smollm2",
            "dataset": "hotpotqa:dev",
            "out": str(tmp_path / "run"),
            "limit": 2,
            "epochs": 2,
            "temperature": 1.0,
            "max_tokens": 12,
            "cache": False,
        }
    )
    results = asyncio.run(Run(config, show_progress=False).execute())
    assert results["counts"]["finished"] == 4
    records = [json.loads(line) for line in (tmp_path / "run" / "samples.jsonl").read_text().splitlines()]
    assert sorted((r["id"], r["epoch"]) for r in records) == sorted(
        (i, e) for i in ("hotpot-dev-000", "hotpot-dev-001") for e in (1, 2)
    )
    per_epoch = results["scores"]["epochs"]["per_epoch"]
    for leaf in ("em-f1.f1", "fanoutqa-string.rouge.rougeL.fscore"):
        assert results["scores"]["epochs"]["n"] == 2
        mean = (per_epoch[0][leaf] + per_epoch[1][leaf]) / 2  # mean of means over the same questions
        metric, *path = leaf.split(".")
        value = results["scores"][metric]
        for part in path:
            value = value[part]
        assert value == pytest.approx(mean)


def test_report_shows_every_epoch_s_answer(tmp_path):
    """A question's transcript in the report names the answers of its later epochs too."""
    from harness.analysis.report import build_report_data, render_report

    run(tmp_path, epochs=3, cache=False)
    data = build_report_data(tmp_path / "run")
    assert len(data["rows"]) == 4
    row = data["rows"][0]
    assert [epoch for epoch, _ in row["epoch_answers"]] == [2, 3]
    assert row["epoch_answers"][0][1] == "no idea" and row["epoch_answers"][1][1] == row["answer"] != "no idea"
    page = render_report(data)
    assert page.count("answer of epoch 2") == 4 and page.count("answer of epoch 3") == 4
