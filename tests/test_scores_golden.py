"""The epoch reduction and a re-scoring's merge give the scores they gave when they walked the dict
shape: each case's ``scores`` (as results.json writes it) equals the one stored in
tests/fixtures/scores_reduced_merged.json, written by this module (``python
tests/test_scores_golden.py``; each metric's info by its keys alone) before both were moved onto the typed ``Scores``. Inputs: real
FanOutQA dev questions (with their categories: a breakdown) and TopiOCQA dev turns (corpus BLEU:
a number with no per-question value), answered right, partly and wrong by turn over the epochs;
one question unfinished in an epoch, one epoch with nothing finished. Scoring options added since
(``confidence``, ``citations``: both off) were inserted into the stored ``meta.options`` by hand,
at their defaults; nothing else in the file was rewritten."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.datasets import load_dataset
from harness.execution.scoring import merge_scores, score_records
from harness.scoring.fanoutqa_metrics import str_answer

EXPECTED = Path(__file__).parent / "fixtures" / "scores_reduced_merged.json"


def _records(questions, epochs: int, skip: set[tuple[int, int]] = frozenset()) -> list[dict]:
    """Question i in epoch e: right, partly right (the first line and a wrong one), wrong by (i + e) % 3."""
    out = []
    for e in range(1, epochs + 1):
        for i, q in enumerate(questions):
            if (i, e) in skip or any(s == (None, e) for s in skip):
                continue
            gold = str_answer(q.answer)
            answer = [gold, gold.split("\n")[0] + "\nNobody", "I do not know"][(i + e) % 3]
            out.append({"id": q.id, "epoch": e, "answer": answer})
    return out


def cases() -> dict[str, dict]:
    """{case: scores as written}."""
    fanoutqa = load_dataset("fanoutqa:dev")
    fq = fanoutqa.samples[:8]
    topiocqa = load_dataset("topiocqa:dev")
    tq = topiocqa.samples[:12]
    both = ["fanoutqa-string", "set-f1"]
    out = {}
    for reducer in ("mean", "max"):
        records = _records(fq, 3, {(0, 2), (4, 2)})  # questions 0 and 4 unfinished in epoch 2
        out[f"fanoutqa-3-epochs-{reducer}"] = score_records(fanoutqa, fq, records, both, epochs=3, reducer=reducer)
        out[f"topiocqa-3-epochs-{reducer}"] = score_records(topiocqa, tq, _records(tq, 3), epochs=3, reducer=reducer)
    records = _records(fq, 3, {(None, 2)})  # nothing finished in epoch 2
    out["fanoutqa-epoch-2-empty"] = score_records(fanoutqa, fq, records, both, epochs=3)
    # re-scoring: set-f1 again and em-f1 added next to a kept fanoutqa-string, one epoch and two
    for epochs in (1, 2):
        records = _records(fq, epochs)
        before = score_records(fanoutqa, fq, records, both, epochs=epochs)
        now = score_records(fanoutqa, fq, records, ["set-f1", "em-f1"], epochs=epochs)
        merged, kept = merge_scores(before, now)
        assert kept == ["fanoutqa-string"]
        out[f"merge-{epochs}-epochs"] = merged
    return {name: _stable(json.loads(json.dumps(scores.as_dict()))) for name, scores in out.items()}


def _stable(scores: dict) -> dict:
    """Each metric's info by its keys alone: the values name library versions (spaCy, rouge_score)."""
    meta = scores["meta"]
    meta["metric_info"] = {name: list(info) for name, info in meta["metric_info"].items()}
    return scores


@pytest.fixture(scope="module")
def computed() -> dict[str, dict]:
    return cases()


CASES = [
    *(f"{d}-3-epochs-{r}" for r in ("mean", "max") for d in ("fanoutqa", "topiocqa")),
    "fanoutqa-epoch-2-empty",
    "merge-1-epochs",
    "merge-2-epochs",
]


@pytest.mark.parametrize("case", CASES)
def test_scores_as_stored(computed, case):
    expected = json.loads(EXPECTED.read_text())[case]
    assert computed[case] == expected
    # the key order written too (results.json diffs stay quiet)
    assert json.dumps(computed[case]) == json.dumps(expected)


if __name__ == "__main__":
    EXPECTED.write_text(json.dumps(cases(), indent=1) + "\n")
    print(f"wrote {EXPECTED}")
