"""The standard error and 95% interval of every headline number of a scores dict (``scores["uncertainty"]``).

For each numeric leaf of a metric's aggregate (``"METRIC.LEAF"``):

* the leaf is the mean of the same-named per-question value (or of the one the metric names in
  ``per_question_leaves``, e.g. fanoutqa-string's ``acc.loose`` is the mean of ``acc``), possibly
  times 100 (TopiOCQA's EM/F1): a share (every value 0 or 1) gets the **Wilson** interval (clustered:
  with the effective size n / design effect), another mean the **analytic** (CLT) interval,
  cluster-robust when the questions are clustered, clipped to the range its scale allows
  (``bounds_of``); with no spread to estimate (all values equal, one cluster) stderr is None and a
  ``note`` says why;
* otherwise, when the metric has an aggregate of per-question rows (``aggregate_rows``: shares
  above a threshold, ratios, micro F1): **percentile bootstrap** through that very function
  (``stats.RESAMPLES`` resamples, fixed seed; clusters resampled whole when clustered);
  A metric whose number is a function of per-question numbers summed (``aggregate_sums``: TopiOCQA's
  corpus BLEU from each turn's n-gram counts) is bootstrapped as one matrix product instead;
* counts (integers such as TopiOCQA's ``turns``) carry no interval, and a leaf neither rule covers
  (rows scored before a metric kept the parts of its number) is recorded with ``method: none``.

Several rows of one question (epochs) are averaged per question first (``collapse_repeats``).
"""

from __future__ import annotations

import math
import re
from typing import Any, Callable

SECTION = "uncertainty"


_INDICATOR = re.compile(r"^(.+?)(==|>=)(-?\d+(?:\.\d+)?)$")


def key_path(text: str) -> tuple[str, ...]:
    """A declared leaf's key path: split at each dot not followed by a digit (``acc.loose`` is two
    keys; set-f1's ``f1_ge_0.5`` and the indicator ``f1>=0.5`` are one)."""
    return tuple(re.split(r"\.(?!\d)", text))


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


def declared_sources(fn: Any, aggregate: dict[str, Any] | None = None) -> dict[tuple[str, ...], tuple[str, ...]]:
    """{aggregate key path: per-question key path} the metric declares: its ``per_question_leaves``,
    and those ``fn.per_question_paths(aggregate)`` gives (key paths whose keys may hold dots)."""
    declared = {
        key_path(k): key_path(v) for k, v in (getattr(fn, "per_question_leaves", None) or {}).items()
    }
    paths = getattr(fn, "per_question_paths", None)
    if paths is not None and isinstance(aggregate, dict):
        declared.update(paths(aggregate))
    return declared


def scored_part(aggregate: dict[str, Any]) -> dict[str, Any]:
    """A metric's aggregate without its diagnostics (``results.DIAGNOSTICS``): the numbers that get error bars."""
    from harness.scoring.results import DIAGNOSTICS

    return {k: v for k, v in aggregate.items() if k not in DIAGNOSTICS}


def plan_leaf(
    path: tuple[str, ...], value: Any, per_rows: list[Any], declared: dict[tuple[str, ...], tuple[str, ...]]
) -> dict[str, Any] | None:
    """How this aggregate leaf's interval is computed: {"kind": "mean", "source", "scale"} when it
    is a mean of a per-question value, {"kind": "count"} for an integer, else None (bootstrap)."""
    if isinstance(value, bool) or value is None:
        return {"kind": "none"}
    if isinstance(value, int):
        return {"kind": "count"}
    source = declared.get(path, path)
    scales = _mean_scales(value, [leaf(r, source) for r in per_rows])
    return {"kind": "mean", "source": source, "scale": scales[0]} if scales else None


def _mean_scales(value: Any, column: list[Any]) -> list[float]:
    """The scales (1, 100) at which ``value`` is the mean of ``column``: none when it is not."""
    if not column or not all(isinstance(v, (bool, int, float)) for v in column):
        return []
    mean = sum(float(v) for v in column) / len(column)
    return [scale for scale in (1.0, 100.0) if _close(float(value), scale * mean)]


def bounds_of(key: str, column: list[float], scale: float) -> tuple[float, float] | None:
    """The range of a mean's per-question values times ``scale``, from its metric's scale
    (``results.scale_of``): [0, 100] on the 0-100 scale (TopiOCQA's x100 EM/F1, per-turn BLEU),
    else [0, scale] when every value lies in [0, 1]; None (unbounded, a mean count) otherwise."""
    from harness.scoring.results import scale_of

    if scale_of(key) == "0-100":
        return (0.0, 100.0) if all(0 <= v * scale <= 100 for v in column) else None
    return (0.0, scale) if all(0 <= v <= 1 for v in column) else None


def plan_leaf_of_runs(
    path: tuple[str, ...],
    values: list[Any],
    rows_of_runs: list[list[Any]],
    declared: dict[tuple[str, ...], tuple[str, ...]],
) -> dict[str, Any] | None:
    """``plan_leaf`` for the same leaf of several runs' aggregates, each value checked against all of
    its own run's rows (what it was computed from): a mean only when it is the mean of the same
    per-question value at the same scale in every run, so neither a run's extra questions nor its
    place among the runs changes how the leaf is compared."""
    plans = [plan_leaf(path, v, rows, declared) for v, rows in zip(values, rows_of_runs)]
    kinds = {p["kind"] if p else None for p in plans}
    if kinds & {"count", "none"}:
        return plans[0] if len(kinds) == 1 else {"kind": "none"}
    if None in kinds:
        return None
    source = plans[0]["source"]
    for scale in (1.0, 100.0):  # all zeros are a mean at either scale: the one every run allows
        if all(scale in _mean_scales(v, [leaf(r, source) for r in rows]) for v, rows in zip(values, rows_of_runs)):
            return {"kind": "mean", "source": source, "scale": scale}
    return None


def metric_uncertainty(
    name: str,
    fn: Callable | None,
    aggregate: dict[str, Any],
    rows: list[dict[str, Any]],
    clusters: list[Any] | None,
    n_scored: int | None = None,
) -> dict[str, dict[str, Any]]:
    """{"METRIC.LEAF": entry} for one metric. ``rows``: the metric's per-question values (one per
    question, scoring order); ``clusters``: their cluster labels or None."""
    from harness.scoring import stats

    out: dict[str, dict[str, Any]] = {}
    declared = declared_sources(fn, aggregate)
    aggregate_rows = getattr(fn, "aggregate_rows", None)
    to_bootstrap: list[tuple[str, ...]] = []
    for path, value in _flat_leaves(scored_part(aggregate)).items():
        key = ".".join((name, *path))
        plan = plan_leaf(path, value, rows, declared)
        if plan is None:
            if aggregate_rows is not None and rows:
                to_bootstrap.append(path)
            else:
                out[key] = {
                    "value": value,
                    "stderr": None,
                    "ci95": None,
                    "method": "none",
                    "reason": "not a mean of per-question values, and the metric has no aggregate of them",
                }
            continue
        if plan["kind"] in ("count", "none"):
            continue  # a count (or no value): no interval
        column = [float(leaf(r, plan["source"])) for r in rows]
        entry = stats.mean_ci(column, clusters, plan["scale"], bounds_of(key, column, plan["scale"]))
        entry["value"] = value  # the metric's own number, bit for bit
        entry["per_question"] = list(plan["source"])  # its key path in each raw row's metric values
        if plan["scale"] != 1.0:
            entry["scale"] = plan["scale"]
        out[key] = entry
    summed = sums_of(fn, rows) if to_bootstrap else None
    if summed is not None:
        vectors, finish = summed
        served = finish([sum(c) for c in zip(*vectors)])
        fast = [p for p in to_bootstrap if leaf(served, p) is not None]
        if fast:
            stat = stats.function_of_sums(vectors, lambda t: [_num(leaf(finish(t), p)) for p in fast])
            entries = stats.bootstrap(stat, len(rows), clusters, value=[_num(leaf(aggregate, p)) for p in fast])
            for path, entry in zip(fast, entries):
                entry["value"] = leaf(aggregate, path)
                entry["aggregate"] = "the metric's own, from per-question sums"
                out[".".join((name, *path))] = entry
            to_bootstrap = [p for p in to_bootstrap if p not in fast]
    if to_bootstrap:
        n = n_scored if n_scored else len(rows)
        over_all = aggregate_rows(rows, n)
        for path in [p for p in to_bootstrap if leaf(over_all, p) is None]:
            out[".".join((name, *path))] = {
                "value": leaf(aggregate, path), "stderr": None, "ci95": None, "method": "none",
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
            entry["aggregate"] = "the metric's own (aggregate_rows)"
            out[".".join((name, *path))] = entry
    return out


def sums_of(fn: Callable | None, rows: list[Any]) -> tuple[list[Any], Callable] | None:
    """(each row's vector, column sums -> {leaf: value}) when the metric declares numbers that are a
    function of per-question sums (``aggregate_sums``) and every row has its vector (rows scored
    before a metric kept them have none)."""
    summed = getattr(fn, "aggregate_sums", None)
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
    fns: dict[str, Callable | None],
    scores: dict[str, Any],
    clusters_by_id: dict[str, Any] | None = None,
) -> dict[str, dict[str, Any]]:
    """The uncertainty section for a results-format-2 scores dict (its aggregates and ``raw``)."""
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
