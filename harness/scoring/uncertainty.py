"""The standard error and 95% interval of every headline number of a scores dict (``scores["uncertainty"]``).

For each numeric leaf of a metric's aggregate (``"METRIC.LEAF"``), by its declared kind
(``harness.scoring.kinds``; a metric that declares none: unbounded), never by the values it takes:

* the leaf is the mean of the same-named per-question value (or of the one the metric names in
  ``per_question_leaves``, e.g. fanoutqa-string's ``acc.loose`` is the mean of ``acc``), times the
  kind's factor (TopiOCQA's x100 EM/F1): a **share** gets the **Wilson** interval (clustered: with
  the effective size n / design effect); a bounded **mean**, a **count** or **money** the
  **analytic** (CLT) interval, cluster-robust when the questions are clustered, clipped to the
  kind's range ([0, scale]; never below 0); an **unbounded** number the same unclipped. Whatever
  the kind, with no spread to estimate (all values equal, one value, one cluster) stderr is None
  and a ``note`` says why; only a share keeps an interval then (Wilson's needs no spread). Values
  that contradict the declaration (a share's not 0 or 1, a mean's outside its range) get no
  interval, with the ``reason``;
* otherwise, when the metric has an aggregate of per-question rows (``Aggregation.rows``: shares
  above a threshold, ratios, micro F1): **percentile bootstrap** through that very function
  (``stats.RESAMPLES`` resamples, fixed seed; clusters resampled whole when clustered);
  A metric whose number is a function of per-question numbers summed (``Aggregation.sums``: TopiOCQA's
  corpus BLEU from each turn's n-gram counts) is bootstrapped as one matrix product instead;
* a number of things (``count(total=True)``: TopiOCQA's ``turns``) carries no interval, and a leaf
  neither rule covers (rows scored before a metric kept the parts of its number) is recorded with
  ``method: none``.

Each entry records its ``kind``. Several rows of one question (epochs) are averaged per question
first (``collapse_repeats``).
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Any

from harness.scoring.kinds import Kind, key_path

if TYPE_CHECKING:
    from harness.scoring.metric import Metric

SECTION = "uncertainty"


_INDICATOR = re.compile(r"^(.+?)(==|>=)(-?\d+(?:\.\d+)?)$")


def is_indicator(key: str) -> bool:
    """Whether a last key is an indicator, ``KEY==NUMBER`` or ``KEY>=NUMBER``."""
    return _INDICATOR.match(key) is not None


def leaf(values: Any, path: tuple[str, ...] | list[str] | str) -> Any:
    """The value at ``path`` (a tuple of keys: a key may hold a dot, as set-f1's ``f1_ge_0.5``). A
    last key ``KEY==NUMBER`` or ``KEY>=NUMBER`` is the indicator 1.0/0.0 of that value (fanoutqa-string's
    strict accuracy is the mean of ``acc==1``, set-f1's ``f1_ge_0.5`` the mean of ``f1>=0.5``: shares,
    with a share's interval, not bootstrapped)."""
    parts = path.split(".") if isinstance(path, str) else list(path)
    for i, part in enumerate(parts):
        found = _INDICATOR.match(part) if i == len(parts) - 1 else None
        if found and isinstance(values, dict) and part not in values:
            key, op, target = found.groups()
            if key not in values or not isinstance(values[key], (bool, int, float)):
                return None
            value = float(values[key])
            return 1.0 if (value == float(target) if op == "==" else value >= float(target)) else 0.0
        if not isinstance(values, dict) or part not in values:
            return None
        values = values[part]
    return values


def _flat_leaves(values: dict[str, Any], prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
    """{key path: value}, ints kept apart from floats (a count has no interval), None kept (no value)."""
    out: dict[tuple[str, ...], Any] = {}
    for key, value in values.items():
        path = (*prefix, key)
        if isinstance(value, dict):
            out.update(_flat_leaves(value, path))
        elif value is None or isinstance(value, (bool, int, float)):
            out[path] = value
    return out


def collapse_repeats(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per question id, in first-seen order: repeated rows (epochs) averaged leaf by leaf."""
    ids = [r.get("question_id") for r in rows]
    if len(set(ids)) == len(ids):
        return rows
    from harness.scoring.values import mean_values

    groups: dict[Any, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(r.get("question_id"), []).append(r)
    return [
        {"question_id": qid, **mean_values([{k: v for k, v in r.items() if k != "question_id"} for r in rs])}
        for qid, rs in groups.items()
    ]


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))


def _declared(metric: "Metric | None") -> "Metric":
    """The metric, or one that declares nothing (a metric that cannot be loaded: its numbers unbounded)."""
    from harness.scoring.metric import Metric

    return metric if metric is not None else Metric(lambda *a, **k: {"raw": {}})


def declared_sources(
    metric: "Metric | None", aggregate: dict[str, Any] | None = None
) -> dict[tuple[str, ...], tuple[str, ...]]:
    """{aggregate key path: per-question key path} the metric declares: its ``per_question_leaves``,
    and those ``per_question_paths(aggregate)`` gives (key paths whose keys may hold dots)."""
    aggregation = _declared(metric).aggregation
    declared = {key_path(k): key_path(v) for k, v in aggregation.per_question_leaves.items()}
    if aggregation.per_question_paths is not None and isinstance(aggregate, dict):
        declared.update(aggregation.per_question_paths(aggregate))
    return declared


def scored_part(aggregate: dict[str, Any]) -> dict[str, Any]:
    """A metric's aggregate without its diagnostics (``results.DIAGNOSTICS``): the numbers that get error bars."""
    from harness.scoring.sections import DIAGNOSTICS

    return {k: v for k, v in aggregate.items() if k not in DIAGNOSTICS}


def plan_leaf(
    path: tuple[str, ...],
    value: Any,
    per_rows: list[Any],
    declared: dict[tuple[str, ...], tuple[str, ...]],
    kind: Kind,
) -> dict[str, Any] | None:
    """How this aggregate leaf's interval is computed: {"kind": "mean", "source", "scale"} when it
    is the mean of a per-question value times its kind's factor (``Kind.times``), {"kind": "count"}
    for a number of things (``count(total=True)``), {"kind": "none"} without a value, else None
    (bootstrap through the metric's aggregate)."""
    if isinstance(value, bool) or value is None:
        return {"kind": "none"}
    if kind.name == "count" and kind.total:
        return {"kind": "count"}
    source = declared.get(path, path)
    if _is_mean(value, [leaf(r, source) for r in per_rows], kind.times):
        return {"kind": "mean", "source": source, "scale": kind.times}
    return None


def _is_mean(value: Any, column: list[Any], times: float) -> bool:
    """Whether ``value`` is ``times`` the mean of ``column`` (the aggregate was computed from it)."""
    if not column or not all(isinstance(v, (bool, int, float)) for v in column):
        return False
    return _close(float(value), times * sum(float(v) for v in column) / len(column))


def plan_leaf_of_runs(
    path: tuple[str, ...],
    values: list[Any],
    rows_of_runs: list[list[Any]],
    declared: dict[tuple[str, ...], tuple[str, ...]],
    kind: Kind,
) -> dict[str, Any] | None:
    """``plan_leaf`` for the same leaf of several runs' aggregates, each value checked against all of
    its own run's rows (what it was computed from): a mean only when it is the mean of the same
    per-question value in every run, so neither a run's extra questions nor its place among the runs
    changes how the leaf is compared."""
    plans = [plan_leaf(path, v, rows, declared, kind) for v, rows in zip(values, rows_of_runs)]
    kinds = {p["kind"] if p else None for p in plans}
    if kinds & {"count", "none"}:
        return plans[0] if len(kinds) == 1 else {"kind": "none"}
    if None in kinds:
        return None
    return plans[0]


def contradiction(kind: Kind, column: list[float]) -> str | None:
    """Why per-question values (already times the kind's factor) cannot be what the kind says: a
    share's must be 0 or ``scale``, a bounded number's within its range; None when they can."""
    bounds = kind.bounds
    if kind.name == "share" and not all(v in bounds for v in column):
        return f"declared a share of questions, but its per-question values are not all 0 or {kind.scale:g}"
    tolerance = 1e-9 * (1.0 if bounds is None or math.isinf(bounds[1]) else max(1.0, bounds[1]))  # rounding
    if bounds is not None and not all(bounds[0] - tolerance <= v <= bounds[1] + tolerance for v in column):
        return f"declared a {kind.name} in [{bounds[0]:g}, {bounds[1]:g}], but per-question values lie outside it"
    return None


def leaf_interval(kind: Kind, column: list[float], clusters: list[Any] | None, scale: float) -> dict[str, Any]:
    """The interval of a mean of per-question values (``column``, before ``scale``) as its kind asks
    (``stats.mean_ci``: Wilson for a share, else the normal interval within the kind's range)."""
    from harness.scoring import stats

    why = contradiction(kind, [v * scale for v in column])
    if why is not None:
        value = scale * sum(column) / len(column) if column else None
        return {"value": value, "stderr": None, "ci95": None, "method": "none", "n": len(column), "reason": why}
    return stats.mean_ci(column, clusters, scale, kind.bounds, share=kind.name == "share")


def metric_uncertainty(
    name: str,
    fn: "Metric | None",
    aggregate: dict[str, Any],
    rows: list[dict[str, Any]],
    clusters: list[Any] | None,
    n_scored: int | None = None,
) -> dict[str, dict[str, Any]]:
    """{"METRIC.LEAF": entry} for one metric. ``rows``: the metric's per-question values (one per
    question, scoring order); ``clusters``: their cluster labels or None."""
    from harness.scoring import stats

    metric = _declared(fn)
    out: dict[str, dict[str, Any]] = {}
    declared = declared_sources(metric, aggregate)
    aggregate_rows = metric.aggregation.rows
    to_bootstrap: list[tuple[str, ...]] = []
    for path, value in _flat_leaves(scored_part(aggregate)).items():
        key = ".".join((name, *path))
        kind = metric.kind_of(path)
        plan = plan_leaf(path, value, rows, declared, kind)
        if plan is None:
            if aggregate_rows is not None and rows:
                to_bootstrap.append(path)
            else:
                out[key] = {
                    "value": value,
                    "stderr": None,
                    "ci95": None,
                    "method": "none",
                    "kind": kind.name,
                    "reason": "not a mean of per-question values, and the metric has no aggregate of them",
                }
            continue
        if plan["kind"] in ("count", "none"):
            continue  # a number of things (or no value): no interval
        column = [float(leaf(r, plan["source"])) for r in rows]
        entry = leaf_interval(kind, column, clusters, plan["scale"])
        entry["value"] = value  # the metric's own number, bit for bit
        entry["kind"] = kind.name
        entry["per_question"] = list(plan["source"])  # its key path in each raw row's metric values
        if plan["scale"] != 1.0:
            entry["scale"] = plan["scale"]
        out[key] = entry
    summed = sums_of(metric, rows) if to_bootstrap else None
    if summed is not None:
        vectors, finish = summed
        served = finish([sum(c) for c in zip(*vectors)])
        fast = [p for p in to_bootstrap if leaf(served, p) is not None]
        if fast:
            stat = stats.function_of_sums(vectors, lambda t: [_num(leaf(finish(t), p)) for p in fast])
            entries = stats.bootstrap(stat, len(rows), clusters, value=[_num(leaf(aggregate, p)) for p in fast])
            for path, entry in zip(fast, entries):
                entry["value"] = leaf(aggregate, path)
                entry["kind"] = metric.kind_of(path).name
                entry["aggregate"] = "the metric's own, from per-question sums"
                out[".".join((name, *path))] = entry
            to_bootstrap = [p for p in to_bootstrap if p not in fast]
    if to_bootstrap:
        n = n_scored if n_scored else len(rows)
        over_all = aggregate_rows(rows, n)
        for path in [p for p in to_bootstrap if leaf(over_all, p) is None]:
            out[".".join((name, *path))] = {
                "value": leaf(aggregate, path), "stderr": None, "ci95": None, "method": "none",
                "kind": metric.kind_of(path).name,
                "reason": "the per-question values lack what this number is computed from (reduced over epochs, "
                "or scored by an older version: harness score RUN_DIR re-scores them)",
            }  # fmt: skip
            to_bootstrap.remove(path)
    if to_bootstrap:

        def agg(drawn: list[Any]) -> list[float]:
            result = aggregate_rows(drawn, len(drawn) if n == len(rows) else len(drawn) * n / len(rows))
            return [_num(leaf(result, p)) for p in to_bootstrap]

        values = [_num(leaf(aggregate, p)) for p in to_bootstrap]
        entries = stats.bootstrap(stats.rows_statistic(rows, agg), len(rows), clusters, value=values)
        for path, entry in zip(to_bootstrap, entries):
            entry["value"] = leaf(aggregate, path)
            entry["kind"] = metric.kind_of(path).name
            entry["aggregate"] = "the metric's own (aggregate_rows)"
            out[".".join((name, *path))] = entry
    return out


def sums_of(fn: "Metric | None", rows: list[Any]) -> tuple[list[Any], Any] | None:
    """(each row's vector, column sums -> {leaf: value}) when the metric declares numbers that are a
    function of per-question sums (``Aggregation.sums``) and every row has its vector (rows scored
    before a metric kept them have none)."""
    summed = _declared(fn).aggregation.sums
    if summed is None or not rows:
        return None
    per_row, finish = summed
    vectors = [per_row(r) for r in rows]
    if any(v is None for v in vectors):
        return None
    return vectors, finish


def _num(value: Any) -> float:
    return float("nan") if value is None else float(value)


def cluster_labels(questions: list[Any], ids: list[str], field: str | None) -> list[Any] | None:
    """Each question's cluster: ``Sample.groups[field]`` (several values joined: the combination is
    the cluster) or ``Sample.raw[field]``; None without a field. A question with neither is its own
    cluster."""
    if not field:
        return None
    by_id = {q.id: q for q in questions}
    labels = []
    for qid in ids:
        q = by_id.get(qid)
        groups = (getattr(q, "groups", None) or {}).get(field)
        if groups:
            labels.append("|".join(sorted(str(v) for v in groups)))
            continue
        # read only without a group: a packed record (Sample.raw) decodes whole on each read
        raw = (getattr(q, "raw", None) or {}).get(field) if q is not None else None
        if raw is not None and not isinstance(raw, (dict, list)):
            labels.append(str(raw))
        else:
            labels.append(f"question:{qid}")
    return labels


def compute_uncertainty(
    fns: "dict[str, Metric | None]",
    scores: Any,
    clusters_by_id: dict[str, Any] | None = None,
) -> dict[str, dict[str, Any]]:
    """The uncertainty section for a results-format-2 scores dict or ``Scores`` (its aggregates and ``raw``)."""
    if not isinstance(scores, dict):  # a Scores (not imported: it sits above this module)
        scores = {**scores.metrics(), "raw": scores.raw, "meta": {"n_questions": scores.meta.n_questions}}
    rows = collapse_repeats(list(scores.get("raw") or []))
    n_scored = (scores.get("meta") or {}).get("n_questions")
    out: dict[str, dict[str, Any]] = {}
    for name, fn in fns.items():
        agg = scores.get(name)
        if not isinstance(agg, dict):
            continue
        have = [r for r in rows if isinstance(r.get(name), dict)]
        per_rows = [r[name] for r in have]
        clusters = [clusters_by_id.get(r["question_id"], r["question_id"]) for r in have] if clusters_by_id else None
        n = n_scored if n_scored == len(rows) else len(per_rows)
        out.update(metric_uncertainty(name, fn, agg, per_rows, clusters, n))
    return _clean(out)


def _clean(values: Any) -> Any:
    """NaN/inf (a resample with no denominator) are not JSON: None."""
    if isinstance(values, dict):
        return {k: _clean(v) for k, v in values.items()}
    if isinstance(values, list):
        return [_clean(v) for v in values]
    if isinstance(values, float) and not math.isfinite(values):
        return None
    return values


def uncertainty_of(scores: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    """The recorded uncertainty section, {} for older results files (shown as before)."""
    return dict((scores or {}).get(SECTION) or {})
