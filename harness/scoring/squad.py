"""Answer text as SQuAD's evaluation reads it, for the benchmarks that score with it: HotpotQA
(``hotpot_evaluate_v1.py``) and TopiOCQA (``evaluate_reader.py``, by way of CoQA's evaluator).

Written here from that definition: an answer is lower-cased, every ASCII punctuation character
(``string.punctuation``) is deleted, each whole word "a", "an" or "the" (``re``'s ``\\b`` on both
sides, after the deletion) becomes a space, and the result is split on whitespace. The normalised
string is those tokens joined by single spaces, so two answers have equal normalised strings
exactly when their token lists are equal. Token F1 compares the two token bags.
"""

from __future__ import annotations

import re
import string
from collections import Counter

_ARTICLE = re.compile(r"\b(?:a|an|the)\b")
_NO_PUNCTUATION = str.maketrans("", "", string.punctuation)


def answer_tokens(text: str) -> list[str]:
    """The answer's tokens after normalisation (see the module docstring); ``[]`` for none."""
    return _ARTICLE.sub(" ", str(text).lower().translate(_NO_PUNCTUATION)).split()


def normalized(text: str) -> str:
    """The normalised answer string: its tokens joined by single spaces."""
    return " ".join(answer_tokens(text))


def bag_overlap(reference: list[str], prediction: list[str]) -> tuple[float, float, float] | None:
    """(F1, precision, recall) of the prediction's tokens against the reference's, each token
    counted as often as it occurs on both sides; None when they share no token (empty sides
    included), so each benchmark applies its own rule there."""
    available = Counter(prediction)
    shared = sum(min(count, available[token]) for token, count in Counter(reference).items())
    if not shared:
        return None
    precision = shared / len(prediction)
    recall = shared / len(reference)
    # this grouping, (2 * p * r) / (p + r), gives the official scripts' floats bit for bit
    return 2 * precision * recall / (precision + recall), precision, recall
