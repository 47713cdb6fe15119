"""HotpotQA answer EM and F1, with the values of the official ``hotpot_evaluate_v1.py``
(hotpotqa/hotpot at commit 36358534; licence Apache 2.0), restated from their definition: SQuAD's
normalisation and token F1 (``harness.scoring.squad``), and one rule of HotpotQA's own: when either
normalised side is "yes", "no" or "noanswer" and the two differ, F1, precision and recall are all 0.
EM is equality of the normalised strings."""

from __future__ import annotations

from harness.scoring.squad import bag_overlap, normalized

_CLOSED_ANSWERS = frozenset({"yes", "no", "noanswer"})
_NOTHING = (0.0, 0.0, 0.0)


def normalize_answer(s: str) -> str:
    return normalized(s)


def f1_score(prediction: str, ground_truth: str) -> tuple[float, float, float]:
    """(f1, precision, recall)."""
    pred, gold = normalized(prediction), normalized(ground_truth)
    if pred != gold and not _CLOSED_ANSWERS.isdisjoint((pred, gold)):
        return _NOTHING
    return bag_overlap(gold.split(), pred.split()) or _NOTHING


def exact_match_score(prediction: str, ground_truth: str) -> bool:
    return normalized(prediction) == normalized(ground_truth)
