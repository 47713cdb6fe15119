"""Reading a ``scores`` dict (results.json ``scores``, ``harness score`` output) in either format.

Format 2 (``results_format: 2``) gives each metric its own namespace, so no metric can overwrite
another's numbers::

    {"results_format": 2,
     "fanoutqa-string": {"acc": {"loose", "strict"}, "rouge": {...}},   # official FanOutQA shape
     "set-f1": {"precision", "recall", "f1", ...},
     "raw": [{"question_id", "fanoutqa-string": {"acc", "rouge"}, "set-f1": {...}}, ...],
     "breakdown": {GROUP: {VALUE: {"n", "fanoutqa-string": {...}, "set-f1": {...}}}},
     "meta": {...}}

Format 1 (no ``results_format``; harness before issue 10) merged every metric's aggregate into one
flat dict, a later metric overwriting an earlier one's keys. ``upgrade`` reads it as format 2:
each key goes to the last metric of ``meta.metrics`` that wrote it, which is whose value it holds.
The readers are methods of ``harness.scoring.scores.Scores``; the functions here take a dict or a
``Scores`` and call them (for callers written against the dict).
"""

from __future__ import annotations

from typing import Any

from harness.scoring.sections import DIAGNOSTICS, RESULTS_FORMAT, SECTIONS  # noqa: F401 - read from here too
from harness.scoring.display import is_column as headline_of  # noqa: F401 - read from here (leaderboard)
from harness.scoring.scores import Interval, Scores
from harness.scoring.shape import (  # noqa: F401 - read from here too
    FORMAT1_KEYS,
    UNATTRIBUTED,
    _is_count_name,
    value_leaves,
    _num,
    _short_label,
    _typed_leaves,
    _without_diagnostics,
    numeric_leaves,
    results_format,
    upgrade,
)


def metric_aggregates(scores: "Scores | dict[str, Any] | None") -> dict[str, dict[str, Any]]:
    """{metric: its aggregate without its DIAGNOSTICS} (``Scores.metric_aggregates``)."""
    return _typed(scores).metric_aggregates()


def metric_values(scores: "Scores | dict[str, Any] | None") -> dict[str, float | None]:
    """Every aggregate number as ``METRIC.NAME`` (``Scores.metric_values``)."""
    return _typed(scores).metric_values()


def per_question(scores: "Scores | dict[str, Any] | None") -> dict[str, dict[str, float]]:
    """{question id: {"METRIC.NAME": number}} (``Scores.per_question``)."""
    return _typed(scores).per_question()


def scale_of(name: str) -> str:
    """The scale of a ``METRIC.NAME`` score as its metric declares it (``harness.scoring.kinds``):
    "0-100" (TopiOCQA's official EM/F1 x100, BLEU), "0-1", the unit of a count or money per question
    (``searches``, ``USD``), or "unbounded" (BLEURT, a plugin that declares nothing)."""
    from harness.scoring.display import kind_of

    return kind_of(name).text()


def score_values(scores: "Scores | dict[str, Any] | None") -> dict[str, float | None]:
    """``metric_values`` without the counts (``Scores.score_values``)."""
    return _typed(scores).score_values()


def count_values(scores: "Scores | dict[str, Any] | None") -> dict[str, int | None]:
    """The counts among the aggregates (``Scores.count_values``)."""
    return _typed(scores).count_values()


def breakdown_values(scores: "Scores | dict[str, Any] | None") -> dict[str, dict[str, dict[str, Any]]]:
    """The breakdown means by group and value (``Scores.breakdown_values``)."""
    return _typed(scores).breakdown_values()


def _typed(scores: "Scores | dict[str, Any] | None") -> "Scores":
    return Scores.of(scores)


def breakdown_lines(scores: "Scores | dict[str, Any] | None", max_values: int = 12) -> list[str]:
    """For the console: per breakdown group, one line per value (``Scores.breakdown_lines``)."""
    return _typed(scores).breakdown_lines(max_values)


def official_fanoutqa(scores: "Scores | dict[str, Any] | None") -> dict[str, Any] | None:
    """The fanoutqa-string numbers in the official shape (``Scores.official_fanoutqa``)."""
    return _typed(scores).official_fanoutqa()


def interval_text(entry: "Interval | dict[str, Any] | None", with_note: bool = True) -> str:
    """`` ± SE [LO, HI]`` of an uncertainty entry (``Interval.text``); '' without an entry."""
    if not entry:
        return ""
    return (entry if isinstance(entry, Interval) else Interval.model_validate(entry)).text(with_note)


def nothing_scored(scores: "Scores | dict[str, Any] | None") -> str | None:
    """Why no question has values, or None (``Scores.nothing_scored``)."""
    return _typed(scores).nothing_scored()


def answered_note(scores: "Scores | dict[str, Any] | None") -> str:
    """`` (n=7 of 10; 3 failed)`` or '' (``Scores.answered_note``)."""
    return _typed(scores).answered_note()


def summary_lines(scores: "Scores | dict[str, Any] | None") -> list[str]:
    """One console line per metric (``Scores.summary_lines``)."""
    return _typed(scores).summary_lines()


