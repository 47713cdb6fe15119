"""Several epochs of one run (``--epochs N``): each epoch is scored like a run of its own, then each
question's values are reduced over its epochs (``--epoch-reducer mean|max|mode``) and the metrics'
aggregates are taken over the reduced per-question values, so the headline of an N-epoch run is a
score per question as usual (and its standard error is over questions, not over question x epoch).

The scores dict gains an ``epochs`` section: N, the reducer, every epoch's own headline numbers and,
per metric value, the mean over questions of the between-epoch variance (sample variance, N - 1).
"""

from __future__ import annotations

import statistics
from collections import Counter
from typing import Any

from harness.scoring.results import numeric_leaves

REDUCERS = ("mean", "max", "mode")


def _number(value: Any) -> bool:
    return isinstance(value, (bool, int, float))


def reduce_values(values: list[Any], reducer: str) -> Any:
    """One question's per-epoch values (nested dicts of numbers) reduced to one, nested the same way.
    Bools count 0/1 for the mean; None values are left out (all None: None); text keeps the first
    epoch's; lists (a corpus number's per-question parts) reduce to None. ``mode``: the most frequent value, a tie going to the one seen first."""
    if reducer not in REDUCERS:
        raise ValueError(f"unknown epoch reducer {reducer!r}")
    present = [v for v in values if v is not None]
    if not present:
        return None
    if all(isinstance(v, dict) for v in present):
        keys = list(dict.fromkeys(k for v in present for k in v))
        return {k: reduce_values([v[k] for v in present if k in v], reducer) for k in keys}
    if all(isinstance(v, list) for v in present):
        return None  # parts of a corpus-level number (TopiOCQA's BLEU statistics): one epoch's would mislead
    if not all(_number(v) for v in present):
        return present[0]
    if reducer == "mean":
        return sum(float(v) for v in present) / len(present)
    if reducer == "max":
        return max(present)
    counts = Counter(present)
    top = max(counts.values())
    return next(v for v in present if counts[v] == top)


def reduce_epoch_scores(
    epoch_scores: list[dict[str, Any]], reducer: str, questions: list, fns: dict[str, Any]
) -> dict[str, Any]:
    """One results-format-2 scores dict from each epoch's (in epoch order, the same questions and
    metrics): per-question values reduced, aggregates and breakdown recomputed from them."""
    from harness.scoring.metrics import _breakdown
    from harness.scoring.values import mean_values

    first = epoch_scores[0]
    # a plugin metric that failed in any epoch (scores.meta.failed_metrics) is left out of the reduction
    failed = {k: v for scores in epoch_scores for k, v in (scores["meta"].get("failed_metrics") or {}).items()}
    names = [n for n in first["meta"]["metrics"] if n not in failed]
    fns = {n: fn for n, fn in fns.items() if n in names}
    per_epoch_rows = [{row["question_id"]: row for row in scores["raw"]} for scores in epoch_scores]
    order = [row["question_id"] for row in first["raw"]]
    rows: dict[str, dict[str, Any]] = {}
    for qid in order:
        row: dict[str, Any] = {"question_id": qid}
        for name in names:
            values = [epoch[qid][name] for epoch in per_epoch_rows if qid in epoch and name in epoch[qid]]
            if values:
                row[name] = reduce_values(values, reducer)
        rows[qid] = row
    out: dict[str, Any] = {"results_format": first["results_format"]}
    aggregation: dict[str, str] = {}
    for name in names:
        reduced = [rows[qid][name] for qid in order if name in rows[qid]]
        fn = fns.get(name)
        aggregate_rows = getattr(fn, "aggregate_rows", None)
        if aggregate_rows is not None:
            out[name] = aggregate_rows(reduced, len(order))
            aggregation[name] = f"the metric's own, over the {reducer} of each question's epochs"
        else:
            out[name] = mean_values(reduced)
            aggregation[name] = f"mean over questions of the {reducer} of each question's epochs"
    out["raw"] = list(rows.values())
    breakdown = _breakdown([q for q in questions if q.id in rows], rows, names, fns)
    if breakdown:
        out["breakdown"] = breakdown
    from harness.scoring.uncertainty import compute_uncertainty

    # error bars over questions (each question's reduced value), clustered as each epoch was
    clusters = (first["meta"].get("clustering") or {}).get("clusters")
    out["uncertainty"] = compute_uncertainty(fns, {**out, "meta": {"n_questions": len(order)}}, clusters)
    out["epochs"] = {
        "n": len(epoch_scores),
        "reducer": reducer,
        "per_epoch": [_headline(scores, names) for scores in epoch_scores],
        "between_epoch_variance": _between_epoch_variance(per_epoch_rows, order, names),
    }
    out["meta"] = {**first["meta"], "aggregation": aggregation, "epochs": len(epoch_scores), "epoch_reducer": reducer}
    out["meta"]["metrics"] = names
    if failed:
        out["meta"]["failed_metrics"] = failed
    return out


def _headline(scores: dict[str, Any], names: list[str]) -> dict[str, float]:
    return numeric_leaves({name: scores[name] for name in names if isinstance(scores.get(name), dict)})


def _between_epoch_variance(per_epoch_rows, order, names) -> dict[str, float]:
    """{"METRIC.LEAF": mean over questions of the sample variance of the question's epoch values}."""
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for qid in order:
        leaves: dict[str, list[float]] = {}
        for epoch in per_epoch_rows:
            row = epoch.get(qid)
            if row is None:
                continue
            for key, value in numeric_leaves({n: row[n] for n in names if isinstance(row.get(n), dict)}).items():
                leaves.setdefault(key, []).append(value)
        for key, values in leaves.items():
            if len(values) > 1:
                sums[key] = sums.get(key, 0.0) + statistics.variance(values)
                counts[key] = counts.get(key, 0) + 1
    return {key: sums[key] / counts[key] for key in sums}
