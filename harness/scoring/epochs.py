"""Several epochs of one run (``--epochs N``): each epoch is scored like a run of its own, then its
numbers are combined by the reducer (``--epoch-reducer``), every number the same way, derived and
corpus-level ones included (FanOutQA's strict accuracy, QAMPARI's F1>=0.5 share, TopiOCQA's corpus BLEU):

* ``mean``: every number is the mean of the epochs' own (``scores.epochs.per_epoch``), exactly;
* ``max``: pass@N: each question's values are its best over the epochs (a question counts as right
  if any epoch was), then the metric's aggregate of those; a number with no per-question value
  (TopiOCQA's corpus BLEU) is the best epoch's;
* ``mode``: the same with each question's most frequent value (a tie to the earliest epoch), for
  metrics whose per-question values are discrete only (``discrete_values``); others are refused
  before the run (``check_reducer``).

Diagnostics that relate a metric to others (``with_other_metrics``: several judges' agreement) are
not combined: they are computed again over every epoch's answers, each (question, epoch) a unit.

``scores.raw`` holds each question's values reduced the same way, with the per-question value of a
declared indicator leaf (fanoutqa-string's ``acc==1``: under mean, the share of the question's
epochs fully right), so the mean over questions of a leaf's per-question column is its headline and
the error bars are over questions, not question x epoch; a number that is no such mean is
bootstrapped over questions, each drawn with all its epochs. ``scores.epochs`` records N, the
reducer and its meaning, every epoch's own headline numbers and, per value, the mean over questions
of the between-epoch variance (sample variance, N - 1).
"""

from __future__ import annotations

import statistics
from collections import Counter
from typing import Any

from harness.errors import ConfigError
from harness.scoring.results import numeric_leaves
from harness.scoring.scores import Scores, ScoresMeta
from harness.scoring.sections import RESULTS_FORMAT
from harness.scoring.kinds import Kind, mean
from harness.scoring.uncertainty import compute_uncertainty, is_indicator, key_path, leaf

REDUCERS = ("mean", "max", "mode")
MEANING = {
    "mean": "every number is the mean of the epochs' own numbers (scores.epochs.per_epoch)",
    "max": "pass@N: a question counts as right if any epoch was (each question's best value over the epochs, "
    "then the metric's aggregate); a number with no per-question value (corpus BLEU) is the best epoch's",
    "mode": "majority vote: each question's most frequent value over the epochs (a tie to the earliest), "
    "then the metric's aggregate; a number with no per-question value is the most frequent epoch's",
}
EPOCH_ROWS = "epoch_rows"  # a question's rows of every epoch, in the rows the error bars see (never in scores.raw)


def _number(value: Any) -> bool:
    return isinstance(value, (bool, int, float))


def check_reducer(reducer: str, fns: dict[str, Any], epochs: int) -> None:
    """``mode`` takes the most frequent value: refused for metrics whose per-question values are
    continuous (a mode of F1s is the first epoch's), before anything is run or scored."""
    if reducer not in REDUCERS:
        raise ConfigError(f"unknown epoch reducer {reducer!r} (known: {', '.join(REDUCERS)})")
    if reducer != "mode" or epochs < 2:
        return
    continuous = [name for name, fn in fns.items() if fn is None or not fn.aggregation.discrete]
    if continuous:
        raise ConfigError(
            f"--epoch-reducer mode needs discrete per-question values, but {', '.join(continuous)} "
            "score(s) questions on a continuous scale (ROUGE, F1, BLEU); use mean or max, or a metric with "
            "discrete values (llm-judge)"
        )


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


def combine(own: list[Any], pooled: Any, reducer: str) -> Any:
    """One number (nested dicts alike) from the epochs' own numbers ``own`` and, for max and mode,
    ``pooled``: the metric's aggregate of the reduced per-question values, used where it has a number.
    Elsewhere the epochs' numbers reduced (mean: every number); a count the same in every epoch
    (TopiOCQA's turns, a breakdown's n) stays that count."""
    present = [v for v in own if v is not None]
    if present and all(isinstance(v, dict) for v in present):
        sub = pooled if isinstance(pooled, dict) else {}
        keys = list(dict.fromkeys(k for v in present for k in v))
        return {k: combine([v.get(k) for v in present], sub.get(k), reducer) for k in keys}
    if reducer != "mean" and _number(pooled):
        return pooled
    if present and all(type(v) is int for v in present) and len(set(present)) == 1:
        return present[0]
    return reduce_values(present, reducer)


def _reduced_row(bundle: list[Any], reducer: str, declared: list[tuple[str, ...]]) -> Any:
    """A question's values of one metric over its epochs (None where an epoch lacks it) reduced, with
    each declared indicator leaf (``("acc==1",)``) reduced from the epochs' own indicators."""
    reduced = reduce_values(bundle, reducer)
    if not isinstance(reduced, dict):
        return reduced
    for path in declared:
        values = [leaf(v, path) for v in bundle if v is not None]
        parent = leaf(reduced, path[:-1]) if len(path) > 1 else reduced
        if isinstance(parent, dict) and values and all(_number(v) for v in values):
            parent[path[-1]] = reduce_values(values, reducer)
    return reduced


def _indicator_leaves(fn: Any) -> list[tuple[str, ...]]:
    """The metric's declared per-question indicator leaves (``KEY==NUMBER``, ``KEY>=NUMBER``) as key paths."""
    sources = fn.aggregation.per_question_leaves.values() if fn is not None else ()
    return [path for path in map(key_path, sources) if is_indicator(path[-1])]


def epoch_kind(kind: Kind, reducer: str, n_epochs: int) -> Kind:
    """A number's kind once ``n_epochs`` epochs are combined by ``reducer``: under ``mean`` a share's
    per-question value is the question's share of its epochs (0.5: right in one of two), so the
    number is a mean of those on the share's scale; ``max`` and ``mode`` keep a 0/1 value a 0/1 value."""
    if kind.name == "share" and reducer == "mean" and n_epochs > 1:
        return mean(float(kind.scale), per_question=1.0)
    return kind


def over_epochs(fn: Any, reducer: str, n_epochs: int) -> Any:
    """A metric seen through its epochs, for the error bars (a ``Metric``, its aggregation and kinds
    replaced): each row it is given carries the question's rows of every epoch (``EPOCH_ROWS``), so a
    bootstrap draws questions with all their epochs and recomputes each number as the headline is
    computed (``combine`` of the epochs' own aggregates)."""
    if fn is None:
        return None
    from dataclasses import replace

    from harness.scoring.kinds import Kinds

    seen = _OverEpochs(fn, reducer, n_epochs)
    aggregation = replace(
        fn.aggregation,
        rows=seen.aggregate_rows if fn.aggregation.rows else None,
        sums=(seen.vector, seen.finish) if fn.aggregation.sums else None,
    )
    kinds = Kinds(
        epoch_kind(fn.kinds.default, reducer, n_epochs),
        tuple((path, epoch_kind(kind, reducer, n_epochs)) for path, kind in fn.kinds.leaves),
    )
    return replace(fn, aggregation=aggregation, kinds=kinds)


class _OverEpochs:
    """The aggregation of a metric over epochs (``over_epochs``)."""

    def __init__(self, fn: Any, reducer: str, n_epochs: int):
        self.fn, self.reducer, self.n_epochs = fn, reducer, n_epochs

    def aggregate_rows(self, rows: list[dict[str, Any]], n: float) -> dict[str, Any]:
        own = []
        for e in range(self.n_epochs):
            column = [r[EPOCH_ROWS][e] for r in rows if r[EPOCH_ROWS][e] is not None]
            scale = n if len(column) == len(rows) else n * len(column) / len(rows)
            own.append(self.fn.aggregation.rows(column, scale) if column else None)
        pooled = None if self.reducer == "mean" else self.fn.aggregation.rows(rows, n)
        return combine(own, pooled, self.reducer)

    def vector(self, row: dict[str, Any]) -> list[float] | None:
        """The question's sums vector of every epoch, one after the other (zeros for an epoch without
        it: adds nothing to that epoch's sums)."""
        per_row = self.fn.aggregation.sums[0]
        vectors = [per_row(r) if r is not None else [] for r in row[EPOCH_ROWS]]
        if any(v is None for v in vectors):
            return None
        width = max(len(v) for v in vectors)
        return [x for v in vectors for x in (v or [0] * width)]

    def finish(self, totals: list[float]) -> dict[str, Any]:
        finish = self.fn.aggregation.sums[1]
        width = len(totals) // self.n_epochs
        own = [finish(list(totals[e * width : (e + 1) * width])) for e in range(self.n_epochs)]
        return combine(own, None, self.reducer)


def reduce_epoch_scores(
    epoch_scores: "list[Scores | dict[str, Any] | None]", reducer: str, questions: list, fns: dict[str, Any]
) -> Scores:
    """One ``Scores`` from each epoch's (in epoch order, the same metrics): every
    number combined over the epochs by the reducer (see the module), per-question rows reduced. An
    epoch in which no question was scored (every one failed) is None: each number is then combined
    over the epochs that have it; at least one must."""
    from harness.scoring.metrics import _breakdown
    from harness.scoring.values import mean_values

    check_reducer(reducer, fns, len(epoch_scores))
    present = [Scores.of(scores) for scores in epoch_scores if scores is not None]
    first = present[0]
    epochs = [Scores.of(scores) if scores is not None else _no_epoch(first.meta.metrics) for scores in epoch_scores]
    # a plugin metric that failed in any epoch (scores.meta.failed_metrics) is left out of the reduction
    failed = {k: v for scores in epochs for k, v in scores.failed_metrics().items()}
    names = [n for n in first.meta.metrics if n not in failed]
    fns = {n: fn for n, fn in fns.items() if n in names}
    per_epoch_rows = [{row["question_id"]: row for row in scores.raw} for scores in epochs]
    order = list(dict.fromkeys(row["question_id"] for scores in epochs for row in scores.raw))
    rows: dict[str, dict[str, Any]] = {}  # scores.raw
    bundles: dict[str, dict[str, Any]] = {}  # what the error bars see: reduced values and every epoch's
    for qid in order:
        rows[qid], bundles[qid] = {"question_id": qid}, {"question_id": qid}
        for name in names:
            bundle = [(epoch.get(qid) or {}).get(name) for epoch in per_epoch_rows]
            if all(v is None for v in bundle):
                continue
            rows[qid][name] = _reduced_row(bundle, reducer, _indicator_leaves(fns.get(name)))
            if isinstance(rows[qid][name], dict):
                bundles[qid][name] = {**rows[qid][name], EPOCH_ROWS: bundle}
    pooled: dict[str, Any] = {}
    pooled_breakdown = None
    if reducer != "mean":  # the metric's aggregate of the reduced values (pass@N, majority vote)
        for name in names:
            reduced = [rows[qid][name] for qid in order if name in rows[qid]]
            metric = fns.get(name)
            aggregate_rows = metric.aggregation.rows if metric is not None else None
            pooled[name] = aggregate_rows(reduced, len(order)) if aggregate_rows else mean_values(reduced)
        pooled_breakdown = _breakdown([q for q in questions if q.id in rows], rows, names, fns)
    aggregates = {
        name: combine([scores.aggregate(name) for scores in epochs], pooled.get(name), reducer) for name in names
    }
    every_answer = [row for scores in epochs for row in scores.raw]
    for name in names:  # diagnostics relating a metric to others (judges' agreement): over every epoch's answers
        relate = fns[name].aggregation.with_other_metrics if fns.get(name) is not None else None
        if relate is not None and isinstance(aggregates[name], dict):
            aggregates[name], _ = relate(aggregates[name], first.metric_info(name), every_answer, name)
    sections: dict[str, Any] = {}  # a section the reduction leaves empty is not written
    breakdown = combine([scores.breakdown or None for scores in epochs], pooled_breakdown, reducer)
    if breakdown:
        _count_groups(breakdown, [q for q in questions if q.id in rows])
        sections["breakdown"] = breakdown
    # error bars over questions, each with all its epochs, clustered as each epoch was (an epoch
    # clusters the questions it scored: together, every question scored)
    clustering = dict(first.clustering)
    clusters = None
    if first.clusters is not None:
        clusters = {}
        for scores in epochs:
            clusters.update(scores.clusters or {})
        clustering.update(clusters=clusters, n_clusters=len(set(clusters.values())))
    seen = {name: over_epochs(fns.get(name), reducer, len(epochs)) for name in names}
    bundled = Scores(  # what the error bars see: each row with its every epoch's
        results_format=first.results_format,
        raw=list(bundles.values()),
        meta=ScoresMeta(n_questions=len(order)),
        **aggregates,
    )
    aggregation = {
        name: f"{reducer} of {len(epochs)} epochs: {MEANING[reducer]}; each epoch: {first.meta.aggregation[name]}"
        for name in names
    }
    meta = first.meta.model_copy(
        deep=True,
        update={"aggregation": aggregation, "epochs": len(epochs), "epoch_reducer": reducer, "clustering": clustering},
    )
    meta.metrics = names
    if failed:
        meta.failed_metrics = failed
    return Scores(
        results_format=first.results_format,
        raw=list(rows.values()),
        **sections,
        uncertainty=compute_uncertainty(seen, bundled, clusters),
        epochs={
            "n": len(epochs),
            "reducer": reducer,
            "reducer_meaning": MEANING[reducer],
            "per_epoch": [_headline(scores, names) for scores in epochs],
            "between_epoch_variance": _between_epoch_variance(per_epoch_rows, order, names),
        },
        meta=meta,
        **aggregates,
    )


def _no_epoch(names: list[str]) -> Scores:
    """An epoch in which no question was scored: no numbers, no rows (the reduction skips it)."""
    return Scores(results_format=RESULTS_FORMAT, meta=ScoresMeta(metrics=names))


def _count_groups(breakdown: dict[str, Any], questions: list) -> None:
    """Each breakdown value's ``n``: its questions scored in any epoch (the epochs' own n differ
    when a question failed in some)."""
    for values in breakdown.values():
        for entry in values.values():
            entry["n"] = 0
    for q in questions:
        for group, held in (q.groups or {}).items():  # one decode a question (Sample.groups: a PackedRecord)
            for value, entry in (breakdown.get(group) or {}).items():
                if value in (held or ()):
                    entry["n"] += 1


def epochs_of_nothing(n: int, reducer: str) -> dict[str, Any]:
    """``scores.epochs`` of a run that scored no question in any epoch."""
    return {
        "n": n,
        "reducer": reducer,
        "reducer_meaning": MEANING[reducer],
        "per_epoch": [{} for _ in range(n)],
        "between_epoch_variance": {},
        "n_answered": [0] * n,
    }


def _headline(scores: Scores, names: list[str]) -> dict[str, float]:
    return numeric_leaves({name: scores.aggregate(name) for name in names if scores.aggregate(name) is not None})


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
