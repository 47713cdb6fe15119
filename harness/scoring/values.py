"""Per-question values averaged, nested as they are: the mean every metric without an aggregate of
its own gets, and what intervals and breakdowns are checked against. A module of its own so that
``metrics`` and ``uncertainty`` both use it without importing each other."""

from __future__ import annotations

from typing import Any


def mean_values(rows: list[dict[str, Any]], like: dict[str, Any] | None = None) -> dict[str, Any]:
    """The mean of each per-question value, nested as the values are. Bools count 0/1; a value
    that is None for some question has no mean (None); text (a judge's output) is left out.
    ``like``: only the keys of these (all questions') means, so a group where some text happens
    to be None everywhere does not get a None for it."""
    out: dict[str, Any] = {}
    keys = list(dict.fromkeys(k for row in rows for k in row))
    for key in keys:
        if like is not None and key not in like:
            continue
        values = [row[key] for row in rows if key in row]
        if all(isinstance(v, dict) for v in values):
            sub = like.get(key) if like is not None else None
            out[key] = mean_values(values, sub if isinstance(sub, dict) else None)
        elif not all(v is None or isinstance(v, (bool, int, float)) for v in values):
            continue
        elif any(v is None for v in values):
            out[key] = None
        else:
            out[key] = sum(float(v) for v in values) / len(values)
    return out
