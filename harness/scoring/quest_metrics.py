"""``quest``: QUEST's end-to-end set metric (google-research/language@cd31d413, ``language/quest/eval/
run_eval.py``): per query, with P = the set of predicted titles and G = the set of gold ``docs``,
tp = |P & G|; precision = tp / |P|, recall = tp / |G|, F1 = harmonic mean, all 0 when tp = 0;
averaged over queries (``eval_utils.print_avg``). The per-template averages the official script
prints come from ``Sample.groups`` (template and domain) in ``score_answers(...)["breakdown"]``.

The official script compares exact title strings and normalizes nothing; so do we by default
(``title_normalization="none"``): "1. FC Köln" or "iPhone" stay as they are, "" is a (wrong)
prediction, and a list answer is scored as given. A free-form string answer (our extension) is
read one title per line, each line stripped of surrounding whitespace, empty lines dropped.

``title_normalization="light"`` (the option ``--metric-option quest.light=true``; recorded in
``info``) also cleans predictions that are not
already a gold title: strips bullets ("- ", "* ", "• "), numbering ("1.", "1)"), wrapping quotes /
``**`` / ``[[...]]``, collapses internal whitespace, upper-cases the first character (Wikipedia
titles are case-insensitive in their first letter only), and drops empty ones. Gold titles are
never changed; matching stays case- and punctuation-sensitive beyond the first letter.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Any

from pydantic import Field

from harness.scoring.gold import GoldMatch
from harness.scoring.kinds import mean
from harness.scoring.metrics import MetricOptions, ScoringOptions, declare, streamable

_BULLET = re.compile(r"^\s*(?:[-*•]\s+|\(?\d+[.)]\s+)")
TITLE_NORMALIZATIONS = ("none", "light")


def normalize_title(title: str, known: Collection[str] = ()) -> str:
    """The ``light`` cleaning of one predicted title; a title in ``known`` (the gold titles) is
    returned unchanged, so a real title such as "1. FC Köln" keeps its "1. "."""
    if title in known:
        return title
    t = " ".join(str(title).split())
    if t in known:
        return t
    prev = None
    while prev != t:
        prev = t
        t = _BULLET.sub("", t).strip()
        if t.startswith("**") and t.endswith("**") and len(t) > 4:
            t = t[2:-2].strip()
        if t.startswith("[[") and t.endswith("]]"):
            t = t[2:-2].strip()
        if len(t) > 1 and t[0] == t[-1] and t[0] in "\"'`":
            t = t[1:-1].strip()
        if t in known:
            return t
    return t[:1].upper() + t[1:]


def _check(title_normalization: str) -> None:
    if title_normalization not in TITLE_NORMALIZATIONS:
        raise ValueError(
            f"unknown title_normalization {title_normalization!r} (one of: {', '.join(TITLE_NORMALIZATIONS)})"
        )


def titles_from(answer: Any, title_normalization: str = "none", gold: Collection[str] = ()) -> list[str]:
    """The predicted titles of one answer: a list as given (items stringified), a string one per
    line (stripped, empty lines dropped); ``light`` cleans them (see the module docstring)."""
    _check(title_normalization)
    if answer is None:
        return []
    if isinstance(answer, list):
        titles = [a if isinstance(a, str) else str(a) for a in answer]
    else:
        titles = [line.strip() for line in str(answer).splitlines() if line.strip()]
    if title_normalization == "light":
        known = set(gold)
        titles = [t for t in (normalize_title(x, known) for x in titles) if t]
    return titles


def _cleaned(predicted: list[str], gold_set: set[str], title_normalization: str) -> list[str]:
    """The predicted titles as compared with the gold ones (``light``: cleaned, empty ones dropped)."""
    _check(title_normalization)
    if title_normalization == "light":
        return [t for t in (normalize_title(x, gold_set) for x in predicted) if t]
    return list(predicted)


def score_sets(predicted: list[str], gold: list[str], title_normalization: str = "none") -> dict[str, float]:
    """One query as run_eval.py scores it (``predicted`` already read by ``titles_from``)."""
    gold_set = set(gold)
    pred_set = set(_cleaned(predicted, gold_set, title_normalization))
    tp = len(gold_set & pred_set)
    if tp:
        precision = tp / len(pred_set)
        recall = tp / len(gold_set)
        f1 = 2 * precision * recall / (precision + recall)
    else:
        precision = recall = f1 = 0.0
    return {"precision": precision, "recall": recall, "f1": f1, "n_predicted": len(pred_set), "n_correct": tp}


def aggregate_quest(rows: list[dict[str, Any]], n: int) -> dict[str, float]:
    """Average precision, recall and F1 over the queries, as ``run_eval.py``."""
    return {k: (sum(r[k] for r in rows) / n if n else 0.0) for k in ("precision", "recall", "f1")}


class QuestOptions(MetricOptions):
    """quest's options; the default is QUEST's official run_eval.py (exact titles)."""

    light: bool = Field(False, description='title_normalization "light": predictions cleaned of bullets, numbering, '
                        "quotes, first letter upper-cased, unless already a gold title")


@declare(
    accepts=("list_of_str",),
    answers=("str", "list_of_str"),
    options=QuestOptions,
    headline=("f1",),
    labels={"precision": "QUEST precision", "recall": "QUEST recall", "f1": "QUEST F1"},
    detail=("precision", "recall"),
    kind=mean(),
)
@streamable(aggregate_quest)
def quest(
    questions: list,
    answers: list[dict[str, Any]],
    only_answered: bool,
    options: ScoringOptions | None = None,
    *,
    title_normalization: str = "none",
    light: bool = False,
) -> dict[str, Any]:
    if light:  # the option (--metric-option quest.light=true)
        title_normalization = "light"
    _check(title_normalization)
    by_id = {a["id"]: a.get("answer") for a in answers}
    pool = [q for q in questions if q.id in by_id] if only_answered else questions
    raw = {}
    for q in pool:
        gold = list(q.answer or [])
        raw[q.id] = score_sets(titles_from(by_id.get(q.id)), gold, title_normalization)  # cleans if "light"
    agg = aggregate_quest(list(raw.values()), len(pool))
    info = {
        "reference": "google-research/language@cd31d413 language/quest/eval/run_eval.py",
        "title_normalization": title_normalization,
        "titles": (
            "exact strings (official); string answers: one per line, stripped, empty lines dropped"
            if title_normalization == "none"
            else "light: bullets/numbering/quotes stripped, first letter upper-cased, unless already a gold title"
        ),
    }
    return {"aggregate": agg, "raw": raw, "info": info}


def gold_matches(answer: Any, gold: list[str], title_normalization: str = "none") -> list[GoldMatch]:
    """Each distinct gold title of one query as ``quest`` scores it: matched, with the answer's
    line (as written) that gave it, or missed. The matched ones are the query's ``n_correct``."""
    gold_set = set(gold)
    given: dict[str, str] = {}  # the title as compared -> the line it came from
    for line in titles_from(answer):
        for title in _cleaned([line], gold_set, title_normalization):
            given.setdefault(title, line)
    return [GoldMatch(t, t in given, given.get(t)) for t in dict.fromkeys(gold)]
