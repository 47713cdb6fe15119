"""--epochs N: each question run N times (seed + epoch - 1), epochs resumed like samples; every number
the mean of the epochs' own (derived and corpus-level ones too), pass@N under max, mode for discrete
values only; error bars over questions; between-epoch variance recorded."""

import asyncio
import json

import pytest

from harness.execution.config import build_config
from harness.datasets import load_dataset
from harness.models.scripted import register_script, unregister_script
from harness.execution.runner import Run
from harness.scoring.epochs import reduce_values
from harness.scoring.results import numeric_leaves
from harness.execution.scoring import score_run
from harness.execution.record import results_dict

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
    return results_dict(asyncio.run(Run(config, show_progress=False).execute()))  # the JSON written


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
    assert score_run(tmp_path / "run").as_dict() == scores  # re-scoring the run directory gives the same

    # a fourth epoch resumes the same run: only its 4 samples are sent
    script.requests.clear()
    results = run(tmp_path, epochs=4, epoch_reducer="max", cache=False)
    assert len(script.requests) == 4 and {req["params"].seed for req in script.requests} == {3}
    claim = json.loads((tmp_path / "run" / "config.json").read_text())
    assert results["run_id"] == claim["run_id"] and results["run_id"].startswith(claim["config_hash"][:12] + "-")
    assert results["scores"]["em-f1"]["em"] == 1.0  # max over epochs: pass@4-like
    assert results["scores"]["epochs"]["reducer"] == "max" and results["scores"]["epochs"]["n"] == 4


def test_one_epoch_keeps_the_plain_records(tmp_path):
    results = run(tmp_path, cache=False)
    records = [json.loads(line) for line in (tmp_path / "run" / "samples.jsonl").read_text().splitlines()]
    assert all("epoch" not in r for r in records)
    assert "epochs" not in results["scores"] and "epochs" not in results["counts"]
    assert results["scores"]["em-f1"]["em"] == 1.0


def spelled_out(answer) -> str:
    """A FanOutQA gold answer as text: its keys and values (or items)."""
    if isinstance(answer, dict):
        return " ".join(f"{k}: {spelled_out(v)}" for k, v in answer.items())
    if isinstance(answer, list):
        return ", ".join(spelled_out(v) for v in answer)
    return str(answer)


# the questions each epoch gets right: strict accuracy 0.5, 0.3, 0.4; question 4 in every epoch,
# questions 0-7 in some epoch (pass@3: 0.8), questions 8 and 9 in none
RIGHT_BY_EPOCH = [{0, 1, 2, 3, 4}, {3, 4, 5}, {4, 5, 6, 7}]


@pytest.fixture(scope="module")
def fanoutqa_by_epoch():
    """scripted/fanoutqa-by-epoch on ten FanOutQA questions its spelled-out answer fully finds."""
    from harness.scoring.metrics import score_answers

    dataset = load_dataset("fanoutqa:dev")
    chosen = []
    for q in dataset.samples:
        scores = score_answers(dataset, [q], [{"id": q.id, "answer": spelled_out(q.answer)}], ["fanoutqa-string"])
        if scores["fanoutqa-string"]["acc"]["strict"] == 1.0:
            chosen.append(q)
        if len(chosen) == 10:
            break

    def reply(messages, tools, tool_choice, params):
        prompt = " ".join(m["content"] for m in messages)
        i = next(i for i, q in enumerate(chosen) if q.question in prompt)
        return spelled_out(chosen[i].answer) if i in RIGHT_BY_EPOCH[params.seed] else "no idea"

    register_script("fanoutqa-by-epoch", reply)
    yield [q.id for q in chosen]
    unregister_script("fanoutqa-by-epoch")


def test_every_number_is_the_mean_of_the_epochs_own_strict_accuracy_included(tmp_path, fanoutqa_by_epoch):
    """Issue 23: a question's values were reduced over its epochs first, so strict accuracy under the
    mean meant "right in every epoch" (0.1 here). Every number is now the mean of the epochs' own:
    strict (0.5, 0.3, 0.4) -> 0.4, and QAMPARI's F1>=0.5 share (set-f1) likewise."""
    from harness.scoring import stats

    options = {"model": "scripted/fanoutqa-by-epoch", "dataset": "fanoutqa:dev", "sample_ids": fanoutqa_by_epoch}
    results = asyncio.run(
        Run(build_config({**options, "out": str(tmp_path / "run"), "epochs": 3, "metrics": ["fanoutqa-string", "set-f1"],
                          "cache": False}), show_progress=False).execute()
    )  # fmt: skip
    scores = results_dict(results)["scores"]  # the JSON written
    per_epoch = scores["epochs"]["per_epoch"]
    assert [e["fanoutqa-string.acc.strict"] for e in per_epoch] == [0.5, 0.3, 0.4]
    assert scores["fanoutqa-string"]["acc"]["strict"] == pytest.approx(0.4)
    headline = numeric_leaves({name: scores[name] for name in ("fanoutqa-string", "set-f1")})
    assert set(headline) == set(per_epoch[0])
    for key, value in headline.items():  # every leaf, to the last bit
        assert value == sum(e[key] for e in per_epoch) / 3, key
    # each question's strict value is the share of its epochs fully right; its mean is the headline,
    # so the error bar is the analytic one over the 10 questions (not 30 question x epochs)
    column = [row["fanoutqa-string"]["acc==1"] for row in scores["raw"]]
    assert column == pytest.approx([1 / 3, 1 / 3, 1 / 3, 2 / 3, 1.0, 2 / 3, 1 / 3, 1 / 3, 0.0, 0.0])
    assert sum(column) / len(column) == pytest.approx(scores["fanoutqa-string"]["acc"]["strict"], abs=1e-12)
    strict = scores["uncertainty"]["fanoutqa-string.acc.strict"]
    assert strict["per_question"] == ["acc==1"] and strict["n"] == 10 and strict["method"] == "analytic"
    assert strict["stderr"] == pytest.approx(stats.mean_ci(column)["stderr"])
    # set-f1's F1>=0.5 share likewise: each question's f1>=0.5 is the share of its epochs at F1 >= 0.5
    share = scores["uncertainty"]["set-f1.f1_ge_0.5"]
    column = [row["set-f1"]["f1>=0.5"] for row in scores["raw"]]
    assert sum(column) / len(column) == pytest.approx(scores["set-f1"]["f1_ge_0.5"], abs=1e-12)
    assert share["per_question"] == ["f1>=0.5"] and share["n"] == 10 and share["method"].startswith("analytic")
    assert share["value"] == scores["set-f1"]["f1_ge_0.5"]
    assert score_run(tmp_path / "run").as_dict() == scores

    # max: pass@3, the same epochs (the reducer is not hashed: nothing is asked again)
    results = asyncio.run(
        Run(build_config({**options, "out": str(tmp_path / "run"), "epochs": 3, "epoch_reducer": "max",
                          "metrics": ["fanoutqa-string", "set-f1"], "cache": False}), show_progress=False).execute()
    )  # fmt: skip
    scores = results_dict(results)["scores"]
    assert scores["epochs"]["per_epoch"] == per_epoch
    assert scores["fanoutqa-string"]["acc"] == {"strict": 0.8, "loose": 0.8}  # 8 of 10 right in some epoch
    assert scores["epochs"]["reducer_meaning"].startswith("pass@N: a question counts as right if any epoch was")
    assert [row["fanoutqa-string"]["acc==1"] for row in scores["raw"]] == [1.0] * 8 + [0.0] * 2
    assert scores["uncertainty"]["fanoutqa-string.acc.strict"]["method"] == "wilson"  # pass@3 values are 0/1: a share
    assert score_run(tmp_path / "run").as_dict() == scores


def test_corpus_bleu_is_the_mean_of_the_epochs_corpus_bleu():
    """TopiOCQA's corpus BLEU has no per-question value: under mean, the mean of the epochs' own
    corpus BLEU (bootstrapped over the questions, each with its three epochs); under max, the best
    epoch's, while the per-question numbers are pass@3."""
    from harness.execution.scoring import score_records

    dataset = load_dataset("topiocqa:dev")
    questions = dataset.samples[:30]
    records = [  # question i right in the epochs e with (i + e) % 3 != 0: twice each
        {"id": q.id, "epoch": e + 1, "answer": q.answer if (i + e) % 3 else "no idea"}
        for e in range(3)
        for i, q in enumerate(questions)
    ]
    scores = score_records(dataset, questions, records, epochs=3, reducer="mean")
    per_epoch = [e["topiocqa.bleu_corpus"] for e in scores["epochs"]["per_epoch"]]
    assert len(set(per_epoch)) == 3
    assert scores["topiocqa"]["bleu_corpus"] == sum(per_epoch) / 3
    assert scores["topiocqa"]["em"] == pytest.approx(200 / 3) and scores["topiocqa"]["turns"] == 30
    bleu = scores["uncertainty"]["topiocqa.bleu_corpus"]
    assert bleu["value"] == scores["topiocqa"]["bleu_corpus"] and bleu["method"].startswith("bootstrap-percentile")
    assert bleu["n"] == 30 and bleu["ci95"][0] < bleu["value"] < bleu["ci95"][1]
    assert all(row["topiocqa"]["bleu_corpus_stats"] is None for row in scores["raw"])  # no one epoch's parts

    best = score_records(dataset, questions, records, epochs=3, reducer="max")
    assert best["topiocqa"]["bleu_corpus"] == max(per_epoch)
    assert best["topiocqa"]["em"] == 100.0  # every question right in some epoch
    assert best["uncertainty"]["topiocqa.bleu_corpus"]["value"] == max(per_epoch)


def test_mode_is_refused_for_continuous_values_before_the_run(tmp_path, script):
    from harness.errors import ConfigError

    config = build_config(
        {"model": "scripted/epochs", "dataset": "fanoutqa:dev", "out": str(tmp_path / "run"), "limit": 2,
         "epochs": 3, "epoch_reducer": "mode", "metrics": ["fanoutqa-string"]}
    )  # fmt: skip
    with pytest.raises(
        ConfigError, match="--epoch-reducer mode needs discrete per-question values, but fanoutqa-string"
    ):
        Run(config, show_progress=False)
    assert not script.requests and not (tmp_path / "run").exists()
    run(tmp_path, epochs=1, epoch_reducer="mode", cache=False)  # one epoch: nothing to reduce, not refused


def test_mode_is_the_majority_vote_of_discrete_values(tmp_path):
    """llm-judge's verdicts are 0/1: each question's most frequent verdict over its epochs."""

    async def right_on_seed_0(messages, tools, tool_choice, params):
        question = next(q for q in GOLD if q in messages[0]["content"])
        return GOLD[question] if params.seed == 0 else "no idea"

    register_script("right-once", right_on_seed_0)
    register_script("judge", lambda messages, *_: "A" if "no idea" in messages[-1]["content"] else "B")
    try:
        by = {}
        for reducer in ("mode", "max", "mean"):
            by[reducer] = run(
                tmp_path, model="scripted/right-once", epochs=3, epoch_reducer=reducer, metrics=["llm-judge"],
                judge="scripted/judge", cache_path=str(tmp_path / "cache.sqlite"),
            )["scores"]  # fmt: skip
    finally:
        unregister_script("right-once")
        unregister_script("judge")
    assert [e["llm-judge.llm_judge"] for e in by["mode"]["epochs"]["per_epoch"]] == [1.0, 0.0, 0.0]
    assert by["mode"]["llm-judge"]["llm_judge"] == 0.0  # right once, wrong twice: the mode is wrong
    assert by["max"]["llm-judge"]["llm_judge"] == 1.0
    assert by["mean"]["llm-judge"]["llm_judge"] == pytest.approx(1 / 3)
    assert by["mode"]["epochs"]["reducer_meaning"].startswith("majority vote")


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
    results = results_dict(asyncio.run(Run(config, show_progress=False).execute()))  # the JSON written
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
