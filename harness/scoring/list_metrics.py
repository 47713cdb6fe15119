"""``set-f1``: QAMPARI's official list-answer metric (samsam3232/qampari,
``models/evaluation/reader_metrics.py``, ``compute_metrics_qampari``), for any dataset whose answer
is a list of entities with aliases.

Mirrored from the official code:

* normalization ``normalize_answer``: lower-case, drop ASCII punctuation, drop the articles
  a/an/the (word boundaries), collapse whitespace (SQuAD style);
* the predictions are ``set(predictions)`` of the *raw* strings (so exact duplicates count once,
  while "Paris" and "paris" are two predictions that credit one answer);
* an alias -> answer map built from each answer's ``aliases`` only (the official map never adds
  ``answer_text`` itself; where two answers share an alias the later one owns it); each prediction
  is compared with the aliases in order and stops at the first alias it matches, crediting that
  answer once;
* precision = credited answers / distinct predictions, recall = credited answers /
  ``len(answer_list)``, F1 = their harmonic mean (0 when either is 0);
* aggregates: the means, and the share of questions with F1 >= 0.5 and with recall >= 0.8
  (official keys ``f1_above`` / ``rec_above``, here ``f1_ge_0.5`` / ``recall_ge_0.8``).

Our extensions, for free-form generations (the official scorer receives an already split list;
its FiD reader separates answers with ``#``): a generation is split on ``#``, newlines and ``;``,
bullets ("- ", "* ", "• ") and numbering ("1.", "1)") are stripped, and each line is split on
commas and " and " -- except where the unsplit piece already matches a gold alias (so "Pride and
Prejudice" or "Washington, D.C." survive). ALCE-style citation marks ("[1]") and a trailing full
stop are dropped. An answer given as a JSON list is used as is. An empty or missing answer scores
precision = recall = F1 = 0 (the official code divides by zero there).
"""

from __future__ import annotations

import re
import string
from typing import Any

from harness.scoring.metrics import METRICS, ScoringOptions

_PUNCT = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_BULLET = re.compile(r"^\s*(?:[-*•]\s+|\(?\d+[.)]\s+|\(?[a-zA-Z][.)]\s+(?=\S))")
_CITATION = re.compile(r"\s*\[\d+(?:\s*,\s*\d+)*\]")


def normalize_answer(s: str) -> str:
    """QAMPARI's (SQuAD's) normalization, as in reader_metrics.py."""
    s = s.lower()
    s = "".join(ch for ch in s if ch not in _PUNCT)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def _clean(item: str) -> str:
    item = _CITATION.sub("", item).strip()
    prev = None
    while prev != item:  # "1. - foo"
        prev = item
        item = _BULLET.sub("", item).strip()
    item = item.strip().strip("*").strip()
    if item.endswith(".") and not re.search(r"\b[A-Z][a-z]?\.$|\.\w\.$", item):
        item = item[:-1].rstrip()
    return item


def split_items(text: str, known: set[str] | None = None) -> list[str]:
    """Split a free-form generation into answer strings (see the module docstring).

    ``known``: normalized gold aliases; a piece that already equals one is not split further."""
    known = known or set()

    def whole(piece: str) -> bool:
        return normalize_answer(piece) in known

    items: list[str] = []
    for line in re.split(r"[#\n;]", text):
        line = _clean(line)
        if not line:
            continue
        if whole(line):
            items.append(line)
            continue
        for part in line.split(","):
            part = _clean(part)
            if not part:
                continue
            if whole(part):
                items.append(part)
                continue
            for sub in re.split(r"(?:^|\s+)and\s+", part):
                sub = _clean(sub)
                if sub:
                    items.append(sub)
    return items


def answer_aliases(answer: dict[str, Any] | str) -> tuple[str, list[str]]:
    if isinstance(answer, str):
        return answer, [answer]
    return answer["answer_text"], list(answer.get("aliases") or [])


def score_list(predictions: list[str], answer_list: list[dict[str, Any]]) -> dict[str, float]:
    """One question, the official way: precision, recall, F1 of ``predictions`` (already split)."""
    mapping = {}
    for ans in answer_list:
        text, aliases = answer_aliases(ans)
        mapping[text] = aliases
    inverse = {}
    for key, aliases in mapping.items():
        for alias in aliases:
            inverse[alias] = key
    normalized = [(normalize_answer(alias), key) for alias, key in inverse.items()]
    predicted = set(predictions)
    credited: list[str] = []
    for pred in predicted:
        norm = normalize_answer(pred)
        for alias_norm, key in normalized:
            if norm == alias_norm:
                if key not in credited:
                    credited.append(key)
                break
    if not predicted or not answer_list:
        precision = recall = 0.0
    else:
        precision = len(credited) / len(predicted)
        recall = len(credited) / len(answer_list)
    f1 = 0.0 if precision == 0 or recall == 0 else 2 * recall * precision / (recall + precision)
    return {
        "precision": precision,
        "recall": recall,
        "f1": f1,
        "n_predicted": len(predicted),
        "n_correct": len(credited),
    }


def predictions_from(answer: Any, answer_list: list[dict[str, Any]]) -> list[str]:
    if answer is None:
        return []
    if isinstance(answer, list):
        return [str(a).strip() for a in answer if str(a).strip()]
    known = {normalize_answer(a) for ans in answer_list for a in answer_aliases(ans)[1]}
    return split_items(str(answer), known)


@METRICS.register("set-f1")
def set_f1(
    questions: list, answers: list[dict[str, Any]], only_answered: bool, options: ScoringOptions | None = None
) -> dict[str, Any]:
    by_id = {a["id"]: a.get("answer") for a in answers}
    pool = [q for q in questions if q.id in by_id] if only_answered else questions
    raw: dict[str, dict[str, Any]] = {}
    for q in pool:
        gold = list(q.answer or [])
        raw[q.id] = score_list(predictions_from(by_id.get(q.id), gold), gold)
    n = len(pool)
    agg: dict[str, float] = {}
    for key in ("precision", "recall", "f1"):
        agg[key] = sum(r[key] for r in raw.values()) / n if n else 0.0
    agg["f1_ge_0.5"] = sum(r["f1"] >= 0.5 for r in raw.values()) / n if n else 0.0
    agg["recall_ge_0.8"] = sum(r["recall"] >= 0.8 for r in raw.values()) / n if n else 0.0
    info = {
        "reference": "samsam3232/qampari models/evaluation/reader_metrics.py compute_metrics_qampari",
        "splitting": "# newline ; bullets numbering , ' and ' (harness extension; gold-alias pieces kept whole)",
    }
    return {"aggregate": agg, "raw": raw, "info": info}
