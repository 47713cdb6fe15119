"""HotpotQA answer EM and F1, as the official ``hotpot_evaluate_v1.py`` computes them (SQuAD
normalization: lowercase, drop punctuation, drop articles a/an/the, collapse whitespace; F1 over
tokens; a yes/no/noanswer on either side scores 0 unless both are equal)."""

from __future__ import annotations

import re
import string
from collections import Counter

_PUNCT = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(s: str) -> str:
    s = str(s).lower()
    s = "".join(ch for ch in s if ch not in _PUNCT)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def f1_score(prediction: str, ground_truth: str) -> tuple[float, float, float]:
    """(f1, precision, recall)."""
    pred, gold = normalize_answer(prediction), normalize_answer(ground_truth)
    zero = (0.0, 0.0, 0.0)
    if pred in ("yes", "no", "noanswer") and pred != gold:
        return zero
    if gold in ("yes", "no", "noanswer") and pred != gold:
        return zero
    pred_tokens, gold_tokens = pred.split(), gold.split()
    common = Counter(pred_tokens) & Counter(gold_tokens)
    same = sum(common.values())
    if same == 0:
        return zero
    precision = same / len(pred_tokens)
    recall = same / len(gold_tokens)
    return (2 * precision * recall) / (precision + recall), precision, recall


def exact_match_score(prediction: str, ground_truth: str) -> bool:
    return normalize_answer(prediction) == normalize_answer(ground_truth)
