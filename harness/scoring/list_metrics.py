"""``set-f1``: QAMPARI's official list-answer metric (samsam3232/qampari,
``models/evaluation/reader_metrics.py``, ``compute_metrics_qampari``), for any dataset whose answer
is a list of entities with aliases.

Mirrored from the official code (checked case by case in tests/test_qampari_quest_parity.py):

* normalization ``normalize_answer``: lower-case, drop ASCII punctuation, drop the articles
  a/an/the between word boundaries, collapse whitespace (SQuAD style). The word boundary is the
  ``regex`` module's, as upstream: it differs from ``re``'s next to combining accents,
  superscripts and fractions (``"A²"`` -> ``"²"``);
* a list of predictions is scored as given: ``set(predictions)`` of the raw strings, so exact
  duplicates count once, while ``"X"`` and ``"X "`` (or ``"Paris"`` and ``"paris"``) are two
  predictions that credit one answer, and ``""`` is a (wrong) prediction;
* an alias -> answer map built from each answer's ``aliases`` only: the map never adds
  ``answer_text`` itself, so an answer with no aliases is never credited; where two answers share
  an alias the later one owns it; each prediction is compared with the aliases in order and stops
  at the first alias it matches, crediting that answer once;
* precision = credited answers / distinct predictions, recall = credited answers /
  ``len(answer_list)``, F1 = their harmonic mean (0 when either is 0);
* aggregates: the means, and the share of questions with F1 >= 0.5 and with recall >= 0.8
  (official keys ``f1_above`` / ``rec_above``, here ``f1_ge_0.5`` / ``recall_ge_0.8``).

Where the official code divides by zero (no predictions, or no gold answers) the question scores
precision = recall = F1 = 0 and still counts in the means.

Options (keyword parameters of ``set_f1``, recorded in its ``info``; the defaults are official):

* ``clean_items=True``: strip the items of a list answer and drop the empty ones;
* ``alias_fallback=True``: an answer whose ``aliases`` list is empty is matched by its
  ``answer_text``.

Our extension, for free-form generations (the official scorer receives an already split list;
its FiD reader separates answers with ``#``): a string answer is split on ``#``, newlines and
``;``, bullets ("- ", "* ", "• ") and numbering ("1.", "1)") are stripped, and each line is split
on commas and " and " -- except where the unsplit piece already matches a gold alias (so "Pride
and Prejudice" or "Washington, D.C." survive). ALCE-style citation marks ("[1]") and a trailing
full stop are dropped. An answer given as a JSON list is not split: it is scored as the official
code scores a raw list (see above).
"""

from __future__ import annotations

import re
import string
from typing import Any

import regex

from harness.scoring.metrics import METRICS, ScoringOptions, streamable

_PUNCT = set(string.punctuation)
# ``regex``, not ``re``: upstream's module; the two disagree on \b next to "²", "½", combining marks.
_ARTICLES = regex.compile(r"\b(a|an|the)\b")
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


def answer_aliases(answer: dict[str, Any] | str, alias_fallback: bool = False) -> tuple[str, list[str]]:
    """(answer_text, aliases). Officially only ``aliases`` match; ``alias_fallback`` lets an answer
    with none match by its text. A plain string answer (not QAMPARI's format) is its own alias."""
    if isinstance(answer, str):
        return answer, [answer]
    aliases = list(answer.get("aliases") or [])
    if not aliases and alias_fallback:
        aliases = [answer["answer_text"]]
    return answer["answer_text"], aliases


def score_list(
    predictions: list[str], answer_list: list[dict[str, Any]], alias_fallback: bool = False
) -> dict[str, float]:
    """One question, the official way: precision, recall, F1 of ``predictions`` (already split)."""
    mapping = {}
    for ans in answer_list:
        text, aliases = answer_aliases(ans, alias_fallback)
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
    if not predicted or not answer_list:  # the official code divides by zero here
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


def predictions_from(
    answer: Any, answer_list: list[dict[str, Any]], clean_items: bool = False, alias_fallback: bool = False
) -> list[str]:
    """The predictions of one answer: a list as given (``clean_items``: stripped, empties dropped),
    a string split by ``split_items``. Non-string list items are stringified (upstream would fail)."""
    if answer is None:
        return []
    if isinstance(answer, list):
        items = [a if isinstance(a, str) else str(a) for a in answer]
        return [a.strip() for a in items if a.strip()] if clean_items else items
    known = {normalize_answer(a) for ans in answer_list for a in answer_aliases(ans, alias_fallback)[1]}
    return split_items(str(answer), known)


def aggregate_set_f1(rows: list[dict[str, Any]], n: int) -> dict[str, float]:
    """QAMPARI's aggregates from per-question rows in scoring order: means, %F1>=0.5, %Recall>=0.8."""
    agg = {key: sum(r[key] for r in rows) / n if n else 0.0 for key in ("precision", "recall", "f1")}
    agg["f1_ge_0.5"] = sum(r["f1"] >= 0.5 for r in rows) / n if n else 0.0
    agg["recall_ge_0.8"] = sum(r["recall"] >= 0.8 for r in rows) / n if n else 0.0
    return agg


@streamable(aggregate_set_f1)
@METRICS.register("set-f1")
def set_f1(
    questions: list,
    answers: list[dict[str, Any]],
    only_answered: bool,
    options: ScoringOptions | None = None,
    *,
    clean_items: bool = False,
    alias_fallback: bool = False,
) -> dict[str, Any]:
    by_id = {a["id"]: a.get("answer") for a in answers}
    pool = [q for q in questions if q.id in by_id] if only_answered else questions
    raw: dict[str, dict[str, Any]] = {}
    for q in pool:
        gold = list(q.answer or [])
        preds = predictions_from(by_id.get(q.id), gold, clean_items=clean_items, alias_fallback=alias_fallback)
        raw[q.id] = score_list(preds, gold, alias_fallback=alias_fallback)
    agg = aggregate_set_f1(list(raw.values()), len(pool))
    info = {
        "reference": "samsam3232/qampari@dd9fe313 models/evaluation/reader_metrics.py compute_metrics_qampari",
        "normalizer": f"official normalize_answer (regex {regex.__version__} word boundaries)",
        "list_answers": "stripped, empties dropped (clean_items)" if clean_items else "raw set() (official)",
        "clean_items": clean_items,
        "alias_fallback": alias_fallback,
        "empty_predictions": "score 0, counted (the official code divides by zero)",
        "splitting": "string answers: # newline ; bullets numbering , ' and ' (harness extension; gold-alias pieces kept whole)",
    }
    return {"aggregate": agg, "raw": raw, "info": info}
