"""set-F1 over FanOutQA's answers (issue 14): dicts (keys and values are the items), lists, strings,
numbers and booleans, on every dev question of the FanOutQA dev files shipped with the harness
(``harness/datasets/data/fanoutqa/{nov23,2026}/fanout-final-dev.json``, CC BY-SA 4.0, see the
SOURCE.md beside them; package data, not a tests/fixtures copy)."""

from __future__ import annotations

import json

import pytest
from conftest import run_harness

from harness.datasets import load_dataset
from harness.scoring.fanoutqa_metrics import str_answer
from harness.scoring.list_metrics import set_f1


def _colon_layout(answer):
    """The gold written as a model might: "key: value" lines, list items one per line."""
    if isinstance(answer, dict):
        return "\n".join(f"{k}: {str_answer(v)}" for k, v in answer.items())
    return str_answer(answer)


@pytest.mark.parametrize("spec", ["fanoutqa:dev", "fanoutqa:dev@2026"])
@pytest.mark.parametrize("layout", ["official", "colon", "list"])
def test_gold_answer_scores_one_on_every_dev_question(spec, layout):
    questions = load_dataset(spec).samples
    assert len(questions) == 310
    kinds = {type(q.answer).__name__ for q in questions}
    assert kinds == {"dict", "list", "str", "int", "bool"}  # every answer shape FanOutQA has
    if layout == "official":  # FanOutQA's own text of an answer ("key - value" lines)
        answers = [{"id": q.id, "answer": str_answer(q.answer)} for q in questions]
    elif layout == "colon":
        answers = [{"id": q.id, "answer": _colon_layout(q.answer)} for q in questions]
    else:  # a list answer: scored as given
        from harness.scoring.list_metrics import gold_items

        answers = [{"id": q.id, "answer": list(gold_items(q.answer))} for q in questions]
    result = set_f1(questions, answers, False)
    imperfect = {qid: row for qid, row in result["raw"].items() if row["f1"] != 1.0}
    assert not imperfect, list(imperfect.items())[:3]
    assert result["aggregate"]["f1"] == 1.0 and len(result["raw"]) == 310


def test_fanoutqa_items_hand_values():
    class Q:
        def __init__(self, answer):
            self.id, self.answer = "q", answer

    from harness.scoring.list_metrics import gold_items

    def score(answer, prediction):
        return set_f1([Q(answer)], [{"id": "q", "answer": prediction}], False)["raw"]["q"]

    hands = {"Pat Burrell": "Right", "Mark Mulder": "Left", "Corey Patterson": "Left"}
    # keys and values are the items; "Left" twice is one item a set of predictions can credit once
    assert gold_items(hands) == ["Pat Burrell", "Mark Mulder", "Corey Patterson", "Right", "Left"]
    row = score(hands, "Pat Burrell: Right\nMark Mulder: Left")
    assert (row["n_correct"], row["recall"], row["precision"]) == (4, 4 / 5, 1.0)
    row = score(hands, "Pat Burrell - Left, Corey Patterson - Left")  # a wrong value is still a prediction
    assert (row["n_correct"], row["n_predicted"]) == (3, 3)
    # keys holding ": " stay whole; numbers, booleans and strings are one item each
    films = {"Avatar": 237, "Avatar: The Way of Water": 460}
    assert score(films, "Avatar: 237\nAvatar: The Way of Water: 460")["f1"] == 1.0
    assert score(4, "4")["f1"] == 1.0 and score(4, "5")["f1"] == 0.0
    assert score(False, "No")["f1"] == 1.0  # FanOutQA reads booleans as yes/no
    assert score("Lincoln Memorial", "the Lincoln Memorial")["f1"] == 1.0  # not split into characters
    assert score(["1", "2", "0", "2", "0"], "1, 2, 0")["recall"] == 1.0  # an exact repeat once
    assert score({"Tim Kingsbury": "", "Win Butler": "April 14, 1980"}, "x")["n_predicted"] == 1
    assert gold_items({"Tim Kingsbury": "", "Win Butler": "April 14, 1980"}) == [
        "Tim Kingsbury",
        "Win Butler",
        "April 14, 1980",
    ]  # an empty value is no item
    # a dict given as the answer (a structured generation) is its keys and values
    assert score(hands, {"Pat Burrell": "Right", "Mark Mulder": "Left", "Corey Patterson": "Left"})["f1"] == 1.0


@pytest.mark.slow
def test_score_command_set_f1_on_fanoutqa(tmp_path):
    questions = load_dataset("fanoutqa:dev").samples
    path = tmp_path / "gen.jsonl"
    path.write_text("".join(json.dumps({"id": q.id, "answer": str_answer(q.answer)}) + "\n" for q in questions))
    out = tmp_path / "scores.json"
    proc = run_harness(
        "score", "--dataset", "fanoutqa:dev", "--generations", str(path), "--metrics", "set-f1,fanoutqa-string",
        "--out", str(out),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    scores = json.loads(out.read_text())
    assert scores["set-f1"]["f1"] == 1.0 and "acc" in scores["fanoutqa-string"]
