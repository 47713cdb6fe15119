"""``set-f1``: QAMPARI's official list-answer metric (samsam3232/qampari at commit dd9fe313, licence
CC0 1.0, ``models/evaluation/reader_metrics.py``, ``compute_metrics_qampari``), for any dataset whose
answer is a list of entities with aliases.

Its behaviour, restated here from its definition (checked case by case in
tests/test_qampari_quest_parity.py):

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

Options (keyword parameters of ``set_f1``, ``--metric-option set-f1.KEY=VALUE``, recorded in its
``info``; the defaults are official):

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

FanOutQA (``--metrics set-f1`` on ``fanoutqa``): its answers are dicts, lists, strings, numbers and
booleans, without aliases. ``gold_items`` flattens them as FanOutQA's own accuracy reads them: a
dict's keys and its values are the items, numbers their text, booleans "yes"/"no"; items equal once
normalized count once, empty ones not at all. Against a dict answer, a generation's lines are also
split into key and value at ": " / " - " where the pieces are gold items ("Avatar: The Way of Water
- 460" at " - "). Gold answers printed by FanOutQA's ``str_answer`` score F1 = 1 on every dev question.
"""

from __future__ import annotations

import re
import string
from typing import Any

import regex
from pydantic import Field

from harness.scoring.gold import GoldMatch, scalar_text
from harness.scoring.kinds import mean, share
from harness.scoring.metrics import FANOUTQA_SHAPES, MetricOptions, ScoringOptions, declare, streamable

_PUNCT = set(string.punctuation)
# ``regex``, not ``re``: upstream's module; the two disagree on \b next to "²", "½", combining marks.
_ARTICLES = regex.compile(r"\b(a|an|the)\b")
_BULLET = re.compile(r"^\s*(?:[-*•]\s+|\(?\d+[.)]\s+|\(?[a-zA-Z][.)]\s+(?=\S))")
_CITATION = re.compile(r"\s*\[\d+(?:\s*,\s*\d+)*\]")
_PAIR = re.compile(r":\s+|\s+[-\u2013\u2014]\s+")


def normalize_answer(s: str) -> str:
    """QAMPARI's (SQuAD's) normalization, as in reader_metrics.py."""
    s = s.lower()
    s = "".join(ch for ch in s if ch not in _PUNCT)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def _clean(item: str, known: set[str] | frozenset[str] = frozenset()) -> str:
    item = _CITATION.sub("", item).strip()
    prev = None
    # "1. - foo"; a gold alias is left whole ("J. J. Abrams" is not a lettered list item)
    while prev != item and normalize_answer(item) not in known:
        prev = item
        item = _BULLET.sub("", item).strip()
    item = item.strip().strip("*").strip()
    if item.endswith(".") and not re.search(r"\b[A-Z][a-z]?\.$|\.\w\.$", item):
        item = item[:-1].rstrip()
    return item


def split_items(text: str, known: set[str] | None = None, pairs: bool = False) -> list[str]:
    """Split a free-form generation into answer strings (see the module docstring).

    ``known``: normalized gold aliases; a piece that already equals one is not split further.
    ``pairs`` (the gold answer is a mapping, as FanOutQA's): a line is first split into key and
    value at ": " or " - " (also en/em dash), the layout FanOutQA's own answers are printed in."""
    known = known or set()

    def whole(piece: str) -> bool:
        return normalize_answer(piece) in known

    items: list[str] = []
    for line in re.split(r"[#\n]", text):
        pieces = _split_pair(line.strip(), known) if pairs else [line]
        for piece in pieces:
            units = [piece] if whole(_clean(piece, known)) else piece.split(";")
            for unit in units:
                unit = _clean(unit, known)
                if not unit:
                    continue
                if whole(unit):
                    items.append(unit)
                    continue
                parts = unit.split(",")
                if pairs:  # "k1: v1, k2: v2" on one line
                    parts = [p for part in parts for p in _split_pair(part.strip(), known)]
                for part in parts:
                    part = _clean(part, known)
                    if not part:
                        continue
                    if whole(part):
                        items.append(part)
                        continue
                    for sub in re.split(r"(?:^|\s+)and\s+", part):
                        sub = _clean(sub, known)
                        if sub:
                            items.append(sub)
    return items


def _split_pair(line: str, known: set[str]) -> list[str]:
    """A "key: value" line as [key, value], split where the most of it is gold items: both sides,
    else the longer side that is one ("Avatar: The Way of Water - 460" splits at " - "); a line
    that is one gold item stays whole; with no gold item in sight, split at every separator."""

    def whole(piece: str) -> bool:
        return normalize_answer(_clean(piece, known)) in known

    if not line or whole(line):
        return [line]
    best, best_rank = None, (0, 0)
    for match in _PAIR.finditer(line):
        key, value = line[: match.start()], line[match.end() :]
        hits = [side for side in (key, value) if whole(side)]
        rank = (len(hits), max((len(side) for side in hits), default=0))
        if rank > best_rank:
            best, best_rank = [key, value], rank
    return best if best is not None else _PAIR.split(line)


def _is_entry(item: Any) -> bool:
    """A QAMPARI-format answer: ``{"answer_text", "aliases"}``."""
    return isinstance(item, dict) and "answer_text" in item


def gold_items(answer: Any) -> list[Any]:
    """The gold answer of a question as a list of items for set-F1.

    A list of QAMPARI entries (QAMPARI) is used as given (the official path), a list of strings
    (QUEST) too, exact repeats once. Any other answer (FanOutQA's) is flattened: a dict gives its keys and its values as items (as
    FanOutQA's accuracy reads a dict), a list its items, nested values theirs; numbers become their
    text, booleans "yes"/"no"; empty items are dropped, and items equal once normalized are counted
    once (a set of predictions can credit "Left" only once, however many keys share that value).
    FanOutQA has no aliases: each item matches by its own text."""
    if answer is None:
        return []
    if isinstance(answer, list) and all(_is_entry(a) for a in answer):
        return answer
    if isinstance(answer, list) and all(isinstance(a, str) for a in answer):
        return list(dict.fromkeys(answer))  # an exact repeat could never be credited twice
    flat: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, dict) and not _is_entry(value):
            for key in value:
                walk(key)
            for item in value.values():
                walk(item)
        elif isinstance(value, (list, tuple)):
            for item in value:
                walk(item)
        elif _is_entry(value):
            flat.append(value)
        elif value is not None:
            flat.append(scalar_text(value))

    walk(answer)
    items: list[Any] = []
    seen: set[str] = set()
    for item in flat:
        if _is_entry(item):
            items.append(item)
            continue
        key = normalize_answer(item)
        if key and key not in seen:
            seen.add(key)
            items.append(item)
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


def credited_answers(
    predictions: list[str], answer_list: list[dict[str, Any]], alias_fallback: bool = False
) -> dict[str, str]:
    """{answer text: the prediction that credited it}, the official way: an alias -> answer map
    (a shared alias owned by the later answer), each distinct prediction compared with the aliases
    in order and crediting the answer of the first it equals once normalized. The count is the
    official one; which prediction is named is the first, in the order given."""
    mapping = {}
    for ans in answer_list:
        text, aliases = answer_aliases(ans, alias_fallback)
        mapping[text] = aliases
    inverse = {}
    for key, aliases in mapping.items():
        for alias in aliases:
            inverse[alias] = key
    normalized = [(normalize_answer(alias), key) for alias, key in inverse.items()]
    credited: dict[str, str] = {}
    for pred in dict.fromkeys(predictions):  # set(predictions), in the order given
        norm = normalize_answer(pred)
        for alias_norm, key in normalized:
            if norm == alias_norm:
                credited.setdefault(key, pred)
                break
    return credited


def score_list(
    predictions: list[str], answer_list: list[dict[str, Any]], alias_fallback: bool = False
) -> dict[str, float]:
    """One question, the official way: precision, recall, F1 of ``predictions`` (already split)."""
    predicted = set(predictions)
    credited = credited_answers(predictions, answer_list, alias_fallback)
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
    answer: Any,
    answer_list: list[dict[str, Any]],
    clean_items: bool = False,
    alias_fallback: bool = False,
    pairs: bool = False,
) -> list[str]:
    """The predictions of one answer: a list as given (``clean_items``: stripped, empties dropped),
    a string split by ``split_items``. Non-string list items are stringified (upstream would fail)."""
    if answer is None:
        return []
    if isinstance(answer, dict):  # a mapping answer (FanOutQA's shape): its keys and values
        answer = [scalar_text(a) for a in [*answer.keys(), *answer.values()]]
    if isinstance(answer, list):
        items = [scalar_text(a) for a in answer]
        return [a.strip() for a in items if a.strip()] if clean_items else items
    known = {normalize_answer(a) for ans in answer_list for a in answer_aliases(ans, alias_fallback)[1]}
    return split_items(str(answer), known, pairs=pairs)


def aggregate_set_f1(rows: list[dict[str, Any]], n: int) -> dict[str, float]:
    """QAMPARI's aggregates from per-question rows in scoring order: means, %F1>=0.5, %Recall>=0.8."""
    agg = {key: sum(r[key] for r in rows) / n if n else 0.0 for key in ("precision", "recall", "f1")}
    agg["f1_ge_0.5"] = sum(r["f1"] >= 0.5 for r in rows) / n if n else 0.0
    agg["recall_ge_0.8"] = sum(r["recall"] >= 0.8 for r in rows) / n if n else 0.0
    return agg


def _read(answer: Any, gold_answer: Any, clean_items: bool, alias_fallback: bool) -> tuple[list[str], list[Any]]:
    """(the predictions, the gold items) of one question, as set-f1 reads them."""
    gold = gold_items(gold_answer)
    preds = predictions_from(
        answer, gold, clean_items=clean_items, alias_fallback=alias_fallback, pairs=isinstance(gold_answer, dict)
    )
    return preds, gold


class SetF1Options(MetricOptions):
    """set-f1's options; the defaults are QAMPARI's official scorer."""

    clean_items: bool = Field(False, description="strip a list answer's items and drop the empty ones")
    alias_fallback: bool = Field(False, description="an answer with no aliases matches by its answer_text")


# the two shares are the means of per-question indicators: a share's interval (Wilson), as every share
@declare(
    accepts=(*FANOUTQA_SHAPES, "entity_list"),
    options=SetF1Options,
    headline=("f1",),
    labels={
        "precision": "Set precision",
        "recall": "Set recall",
        "f1": "Set F1",
        "f1_ge_0.5": "Share F1 ≥ 0.5",
        "recall_ge_0.8": "Share recall ≥ 0.8",
    },
    detail=("precision", "recall"),
    kind=mean(),
    kinds={"f1_ge_0.5": share(), "recall_ge_0.8": share()},
)
@streamable(aggregate_set_f1, per_question_leaves={"f1_ge_0.5": "f1>=0.5", "recall_ge_0.8": "recall>=0.8"})
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
        preds, gold = _read(by_id.get(q.id), q.answer, clean_items, alias_fallback)
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
        "gold_items": "QAMPARI entries as given; other answers (FanOutQA) flattened: dict keys and values, list items, "
        "numbers as text, booleans yes/no, each distinct normalized item once; dict answers: 'key: value' / "
        "'key - value' lines split into key and value",
    }
    return {"aggregate": agg, "raw": raw, "info": info}


def gold_matches(
    answer: Any, gold_answer: Any, clean_items: bool = False, alias_fallback: bool = False
) -> list[GoldMatch]:
    """Each gold item of one question as set-f1 scores it (its options as given to the metric):
    matched with the prediction that credited it, or missed. The matched ones are the question's
    ``n_correct``; an answer text given twice counts once, as in the official map."""
    preds, gold = _read(answer, gold_answer, clean_items, alias_fallback)
    credited = credited_answers(preds, gold, alias_fallback)
    out: list[GoldMatch] = []
    shown: set[str] = set()
    for item in gold:
        text = answer_aliases(item, alias_fallback)[0]
        matched = text in credited and text not in shown
        shown.add(text)
        out.append(GoldMatch(scalar_text(text), matched, credited[text] if matched else None))
    return out
