"""``harness score RUN --metrics X`` re-scores X alone: X's numbers are replaced (or added) in every
part of the scores record, every other metric's stay as they were, and the file says which were
kept; ``--drop-other-metrics`` keeps X alone. A merge equals scoring every metric at once."""

from __future__ import annotations

import json
import shutil

import pytest

import harness
from harness.cli import main
from harness.datasets import load_dataset
from harness.errors import HarnessError
from harness.models.scripted import register_script
from harness.scoring.fanoutqa_metrics import str_answer

ANSWERS: dict[str, str] = {}  # question text -> the scripted answer


def answer(messages, tools, tool_choice, params):
    prompt = messages[-1]["content"]
    found = [q for q in ANSWERS if q in prompt]
    return ANSWERS[max(found, key=len)] if found else "I do not know"


def judge(messages, tools, tool_choice, params):
    """Grades B when the submission holds the expert answer's first line, else D."""
    prompt = messages[-1]["content"]
    expert = prompt.split("[Expert]: ", 1)[1].split("\n", 1)[0]
    submission = prompt.split("[Submission]: ", 1)[1].split("\n****", 1)[0]
    grade = "B" if expert and expert in submission else "D"
    return f"reasoning\n{grade}"


register_script("rm-answers", answer)
register_script("rm-judge", judge)


def make_run(out, dataset: str, *extra: str, n: int = 6) -> dict:
    """A finished run whose answers are right, partly right and wrong in turn."""
    samples = load_dataset(dataset).samples[:n]
    ANSWERS.clear()
    for i, s in enumerate(samples):
        gold = str_answer(s.answer) if not isinstance(s.answer, list) or not s.answer or not isinstance(
            s.answer[0], dict
        ) else "\n".join(a["answer_text"] for a in s.answer)
        ANSWERS[s.question] = [gold, gold.split("\n")[0] + "\nNobody", "I do not know"][i % 3]
    argv = ["run", "--model", "scripted/rm-answers", "--dataset", dataset, "--limit", str(n), "--no-cache"]
    assert main([*argv, *extra, "--out", str(out)]) == 0
    return read(out)


def read(run) -> dict:
    return json.loads((run / "results.json").read_text())


def without_kept(scores: dict) -> dict:
    return {**scores, "meta": {k: v for k, v in scores["meta"].items() if k != "kept_metrics"}}


def test_scoring_one_metric_keeps_every_other_metrics_numbers(tmp_path, capsys):
    run = tmp_path / "run"
    before = make_run(run, "hotpotqa:dev")["scores"]
    assert before["meta"]["metrics"] == ["fanoutqa-string", "em-f1"]
    capsys.readouterr()
    assert main(["score", str(run), "--metrics", "set-f1"]) == 0
    err = capsys.readouterr().err
    assert f"{run / 'results.json'} now holds fanoutqa-string, em-f1, set-f1: set-f1 scored now; " in err
    assert "fanoutqa-string, em-f1 kept as they were (--drop-other-metrics drops them)" in err
    after = read(run)["scores"]
    assert after["meta"]["metrics"] == ["fanoutqa-string", "em-f1", "set-f1"]
    assert after["meta"]["kept_metrics"] == ["fanoutqa-string", "em-f1"]
    for name in ("fanoutqa-string", "em-f1"):  # every part of the kept metrics, as it was
        assert after[name] == before[name]
        assert after["meta"]["metric_info"][name] == before["meta"]["metric_info"][name]
        assert [r[name] for r in after["raw"]] == [r[name] for r in before["raw"]]
        assert {k: v for k, v in after["uncertainty"].items() if k.startswith(name + ".")} == {
            k: v for k, v in before["uncertainty"].items() if k.startswith(name + ".")
        }
    assert 0 < after["set-f1"]["f1"] < 1 and all("set-f1" in r for r in after["raw"])
    assert any(k.startswith("set-f1.") for k in after["uncertainty"])

    # the merge is what scoring the three at once gives, part for part
    whole = tmp_path / "whole"
    shutil.copytree(run, whole)
    assert main(["score", str(whole), "--metrics", "fanoutqa-string,em-f1,set-f1", "--drop-other-metrics"]) == 0
    assert without_kept(after) == read(whole)["scores"]
    assert "kept_metrics" not in read(whole)["scores"]["meta"]


def test_a_metric_scored_again_is_replaced_in_place(tmp_path):
    run = tmp_path / "run"
    before = make_run(run, "qampari:sample", "--metrics", "set-f1,em-f1")["scores"]
    assert main(["score", str(run), "--metrics", "set-f1", "--metric-option", "set-f1.clean_items=true"]) == 0
    after = read(run)["scores"]
    assert after["meta"]["metrics"] == ["set-f1", "em-f1"] and after["meta"]["kept_metrics"] == ["em-f1"]
    assert after["em-f1"] == before["em-f1"]
    assert after["meta"]["options"]["metric_options"]["set-f1"]["clean_items"] is True
    assert after["breakdown"].keys() == before["breakdown"].keys()
    for group, values in after["breakdown"].items():
        for value, entry in values.items():
            assert entry["em-f1"] == before["breakdown"][group][value]["em-f1"] and "set-f1" in entry

    whole = tmp_path / "whole"
    shutil.copytree(run, whole)
    argv = ["score", str(whole), "--metrics", "set-f1,em-f1", "--metric-option", "set-f1.clean_items=true"]
    assert main(argv) == 0
    assert without_kept(after) == read(whole)["scores"]


def test_drop_other_metrics_keeps_the_named_alone(tmp_path, capsys):
    run = tmp_path / "run"
    make_run(run, "hotpotqa:dev")
    capsys.readouterr()
    assert main(["score", str(run), "--metrics", "set-f1", "--drop-other-metrics"]) == 0
    assert "now holds set-f1: set-f1 scored now; fanoutqa-string, em-f1 dropped" in capsys.readouterr().err
    scores = read(run)["scores"]
    assert scores["meta"]["metrics"] == ["set-f1"] and "fanoutqa-string" not in scores
    assert all(set(r) == {"question_id", "set-f1"} for r in scores["raw"])
    assert all(k.startswith("set-f1.") for k in scores["uncertainty"])


def test_kept_numbers_scored_on_other_options_are_refused(tmp_path, capsys):
    run = tmp_path / "run"
    make_run(run, "hotpotqa:dev")
    text = (run / "results.json").read_bytes()
    capsys.readouterr()
    assert main(["score", str(run), "--metrics", "set-f1", "--max-answer-chars", "1000"]) == 2
    err = capsys.readouterr().err
    assert "cannot keep fanoutqa-string, em-f1 from the run's earlier scoring" in err
    assert "--max-answer-chars 100000 -> 1000" in err
    assert "--metrics set-f1,fanoutqa-string,em-f1" in err and "--drop-other-metrics" in err
    assert (run / "results.json").read_bytes() == text  # nothing written
    assert main(["score", str(run), "--metrics", "set-f1", "--max-answer-chars", "1000", "--drop-other-metrics"]) == 0


def test_epochs_merge_as_scoring_them_at_once(tmp_path):
    run = tmp_path / "run"
    make_run(run, "hotpotqa:dev", "--epochs", "2", "--temperature", "0.5", n=4)
    assert main(["score", str(run), "--metrics", "set-f1"]) == 0
    after = read(run)["scores"]
    assert after["epochs"]["n"] == 2 and any(k.startswith("em-f1.") for k in after["epochs"]["per_epoch"][0])
    assert any(k.startswith("set-f1.") for k in after["epochs"]["between_epoch_variance"])
    whole = tmp_path / "whole"
    shutil.copytree(run, whole)
    assert main(["score", str(whole), "--metrics", "fanoutqa-string,em-f1,set-f1", "--drop-other-metrics"]) == 0
    assert without_kept(after) == read(whole)["scores"]


def _stable(info: dict) -> dict:
    volatile = ("calls", "cache_hits", "judge_prompt_tokens", "judge_completion_tokens")  # the second is cached
    return {k: v for k, v in info.items() if k not in volatile}


def test_a_judge_added_later_relates_to_the_kept_string_metric(tmp_path):
    """llm-judge scored alone next to a kept fanoutqa-string: its agreement with string accuracy is
    computed over the merged rows, as when both are scored at once."""
    run = tmp_path / "run"
    make_run(run, "fanoutqa:dev")
    assert main(["score", str(run), "--metrics", "llm-judge", "--judge", "scripted/rm-judge"]) == 0
    after = read(run)["scores"]
    assert after["meta"]["metrics"] == ["fanoutqa-string", "llm-judge"]
    assert "with_string" in after["llm-judge"]["agreement"]
    whole = tmp_path / "whole"
    shutil.copytree(run, whole)
    argv = ["score", str(whole), "--metrics", "fanoutqa-string,llm-judge", "--judge", "scripted/rm-judge"]
    assert main([*argv, "--drop-other-metrics"]) == 0
    full = read(whole)["scores"]
    assert after["llm-judge"] == full["llm-judge"]
    assert _stable(after["meta"]["metric_info"]["llm-judge"]) == _stable(full["meta"]["metric_info"]["llm-judge"])


def test_the_python_api_merges_too(tmp_path, capsys):
    run = tmp_path / "run"
    before = make_run(run, "hotpotqa:dev")
    text = (run / "results.json").read_bytes()
    scores = harness.score(str(run), metrics="set-f1", save=False)
    assert scores["meta"]["metrics"] == ["fanoutqa-string", "em-f1", "set-f1"]
    assert scores["fanoutqa-string"] == before["scores"]["fanoutqa-string"]
    assert (run / "results.json").read_bytes() == text
    alone = harness.score(str(run), metrics="set-f1", save=False, drop_other_metrics=True)
    assert alone["meta"]["metrics"] == ["set-f1"] and "fanoutqa-string" not in alone
    with pytest.raises(HarnessError, match="RUN_DIR"):
        harness.score(dataset="hotpotqa:dev", generations=[], drop_other_metrics=True)
