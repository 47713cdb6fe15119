"""Uncertainty and comparison statistics, pure functions over per-question values (numpy only).

No scipy: the normal quantiles come from ``statistics.NormalDist``, the binomial tail of McNemar's
exact test from ``math.comb``.

* ``mean_ci``: the standard error (CLT; clustered: cluster-robust, the sum of each cluster's
  residuals, G/(G-1) small-sample factor) and 95% interval of a mean. A share (``share=True``: the
  caller's declaration, every value 0/1 times the scale) gets the Wilson score interval, clustered
  with the effective size n / design effect; any other mean the normal interval, clipped to its
  bounds where it has some. No spread to estimate (all values equal, one value, one cluster) gives
  stderr None and a ``note`` saying why, and no interval but a share's.
* ``wilson_interval``, ``newcombe_paired_interval`` (the difference of two paired shares,
  Newcombe 1998's method 10: Wilson intervals of each share squared and added, with their
  correlation).
* ``bootstrap``: percentile bootstrap of any statistic of per-question rows. The statistic gets a
  (resamples x n) matrix of how often each question was drawn, so a mean or a ratio of sums is one
  matrix product; a cluster bootstrap draws whole clusters (every question of a drawn cluster gets
  its count). Fixed seed: the same rows give the same interval.
* ``paired_bootstrap_diff``, ``sign_flip_test`` (exact up to ``EXACT_MAX`` non-zero differences,
  else Monte Carlo with a fixed seed; every difference 0 gives p = 1), ``swap_test`` (whole
  clusters swap when clustered), ``mcnemar_exact``. A Monte Carlo p records its error
  ``p_mc_error`` = sqrt(p (1 - p) / permutations). ``smallest_p``: the smallest p a test's
  permutation (or binomial) distribution allows with the units that differed: 2 / 2^n.
* ``holm``: Holm's step-down adjustment of several p-values (family-wise error).
* ``required_n`` / ``detectable_delta``: the sample size a two-sided test needs, from a pilot's SD.

Per-question values must be one number per question: several epochs (repeats) of one question
are averaged first (``harness.scoring.uncertainty.collapse_repeats``), so the unit resampled and
counted is always the question (or its cluster).
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Any, Callable, Sequence

import numpy as np

CONFIDENCE = 0.95
RESAMPLES = 1000
SEED = 20240613
EXACT_MAX = 16  # sign-flip test enumerates all 2**k sign patterns up to this many non-zero differences
PERMUTATIONS = 10_000


def z_quantile(p: float) -> float:
    return NormalDist().inv_cdf(p)


Z95 = z_quantile(0.975)  # 1.959963984540054


def _labels(clusters: Sequence[Any] | None, n: int) -> np.ndarray | None:
    if clusters is None:
        return None
    if len(clusters) != n:
        raise ValueError(f"{len(clusters)} cluster labels for {n} values")
    _, inverse = np.unique(np.asarray([str(c) for c in clusters]), return_inverse=True)
    return inverse.reshape(-1)


def wilson_interval(successes: float, n: float, z: float = Z95) -> list[float]:
    """The Wilson score interval of the proportion successes / n (n may be an effective size, not
    an integer). Inside [0, 1]; 0 successes give lower bound 0, n give upper bound 1."""
    if n <= 0:
        raise ValueError("a proportion of nothing has no interval")
    p = successes / n
    z2 = z * z
    denom = 1 + z2 / n
    centre = (p + z2 / (2 * n)) / denom
    half = z * math.sqrt(max(p * (1 - p), 0.0) / n + z2 / (4 * n * n)) / denom
    lo = 0.0 if successes <= 0 else max(0.0, centre - half)
    hi = 1.0 if successes >= n else min(1.0, centre + half)
    return [lo, hi]


def newcombe_paired_interval(both: int, only_a: int, only_b: int, neither: int, z: float = Z95) -> list[float]:
    """95% interval of p_b - p_a for two shares on the same questions (Newcombe 1998, method 10):
    each share's Wilson interval, squared and added, less twice their correlation phi (corrected
    toward 0 by n/2 when positive, 0 when a margin is empty). Inside [-1, 1]."""
    n = both + only_a + only_b + neither
    ka, kb = both + only_a, both + only_b
    pa, pb = ka / n, kb / n
    la, ua = wilson_interval(ka, n, z)
    lb, ub = wilson_interval(kb, n, z)
    margins = ka * (n - ka) * kb * (n - kb)
    cross = both * neither - only_a * only_b
    if margins == 0 or 0 <= cross <= n / 2:
        phi = 0.0
    else:
        phi = (cross - n / 2 if cross > 0 else cross) / math.sqrt(margins)
    below = math.sqrt(max(0.0, (pb - lb) ** 2 + (ua - pa) ** 2 - 2 * phi * (pb - lb) * (ua - pa)))
    above = math.sqrt(max(0.0, (pa - la) ** 2 + (ub - pb) ** 2 - 2 * phi * (pa - la) * (ub - pb)))
    return [max(-1.0, pb - pa - below), min(1.0, pb - pa + above)]


def no_spread(n: int, n_clusters: int | None = None, all_equal: bool = True) -> str:
    """Why a standard error cannot be estimated (stderr None, the interval n/a)."""
    if n_clusters == 1:
        return "one cluster: no between-cluster spread"
    if n == 1:
        return "one value: no spread to estimate"
    if all_equal:
        return f"all {n} values equal: no spread to estimate"
    return f"all {n_clusters} clusters have the same mean: no between-cluster spread"


def measured_no_spread(entry: dict[str, Any]) -> bool:
    """An entry without a standard error because its values (or cluster means) were all equal: a
    spread measured as 0, not one that cannot be measured (one value, one cluster)."""
    return entry.get("stderr") is None and str(entry.get("note") or "").startswith("all ")


def mean_ci(
    values: Sequence[float],
    clusters: Sequence[Any] | None = None,
    scale: float = 1.0,
    bounds: tuple[float, float] | None = None,
    share: bool = False,
) -> dict[str, Any]:
    """{value, stderr, ci95, method, n[, n_clusters, n_effective, note]} of the mean of ``values``
    (times ``scale``). ``bounds``: the range the scaled values lie in (an end may be infinite);
    ``share``: the values are a share's, each at one of the bounds (0/1): a Wilson interval
    (``wilson``, ``wilson-clustered``); otherwise a normal interval clipped to the bounds (method
    ``...-clipped`` where clipped). No spread to estimate: stderr None and a ``note``; the interval
    too, but for a share of two clusters or more. Whether a mean is a share is the caller's
    declaration, never read from the values."""
    x = np.asarray(values, dtype=float) * scale
    n = len(x)
    out: dict[str, Any] = {"value": float(x.mean()) if n else None, "stderr": None, "ci95": None}
    out.update(method="analytic", n=n)
    labels = _labels(clusters, n)
    g = None
    if labels is not None:
        out["method"] = "analytic-clustered"
        g = int(labels.max()) + 1 if n else 0
        out["n_clusters"] = g
    if n == 0:
        out["note"] = "no values"
        return out
    mean = float(x.mean())
    if labels is None:
        var = float(x.var(ddof=1)) / n if n >= 2 else 0.0
    elif g >= 2:
        resid = np.bincount(labels, weights=x - mean, minlength=g)
        var = g / (g - 1) * float((resid**2).sum()) / n**2
    else:
        var = 0.0
    if var > (1e-12 * max(1.0, float(np.abs(x).max()))) ** 2:  # above rounding: residuals that cancel are 0
        out["stderr"] = math.sqrt(var)
    else:
        out["note"] = no_spread(n, g, bool(np.all(x == x[0])))
    low, high = bounds if bounds is not None else (-math.inf, math.inf)
    if share:
        if not (math.isfinite(low) and math.isfinite(high) and high > low and bool(np.isin(x, (low, high)).all())):
            raise ValueError(f"a share's values lie at its bounds {low:g} and {high:g} (0/1 times the scale)")
        out["method"] = "wilson" if labels is None else "wilson-clustered"
        if g is not None and g < 2:
            return out  # one cluster: not even a share has an interval
        width = high - low
        p = (mean - low) / width
        n_eff = float(n)
        if labels is not None:
            if p * (1 - p) > 0:  # Korn & Graubard: n / design effect, never above n
                n_eff = min(n_eff, p * (1 - p) / (var / width**2)) if out["stderr"] else n_eff
            else:  # no design effect to estimate: as if each cluster were one answer (n^2 / sum of sizes^2)
                n_eff = n**2 / float((np.bincount(labels) ** 2).sum())
            out["n_effective"] = n_eff
        lo, hi = wilson_interval(p * n_eff, n_eff)
        out["ci95"] = [low + width * lo, low + width * hi]
        return out
    if out["stderr"] is not None:
        lo, hi = mean - Z95 * out["stderr"], mean + Z95 * out["stderr"]
        if lo < low or hi > high:
            out["method"] += "-clipped"
        out["ci95"] = [float(max(lo, low)), float(min(hi, high))]
    return out


def draw_counts(
    n: int, clusters: Sequence[Any] | None = None, resamples: int = RESAMPLES, seed: int = SEED
) -> np.ndarray:
    """(resamples x n) counts: how often each question is in each bootstrap resample. Clustered:
    clusters are drawn with replacement and each question counts as often as its cluster."""
    rng = np.random.default_rng(seed)
    labels = _labels(clusters, n)
    units = n if labels is None else int(labels.max()) + 1
    idx = rng.integers(0, units, size=(resamples, units))
    offsets = (np.arange(resamples) * units)[:, None]
    counts = np.bincount((idx + offsets).ravel(), minlength=resamples * units).reshape(resamples, units)
    return counts if labels is None else counts[:, labels]


def percentile_interval(samples: np.ndarray) -> list[float]:
    lo, hi = np.percentile(samples, [100 * (1 - CONFIDENCE) / 2, 100 * (1 + CONFIDENCE) / 2])
    return [float(lo), float(hi)]


def summarize_draws(draws: np.ndarray, n: int, n_clusters: int | None = None) -> dict[str, Any]:
    """{stderr, ci95[, note]} of a statistic's bootstrap draws (NaN draws left out): None and a
    note where there is no spread (one question or cluster, every resample the same)."""
    col = np.asarray(draws, dtype=float)
    col = col[np.isfinite(col)]
    note = None
    if n < 2 or n_clusters == 1:
        note = no_spread(n, n_clusters)
    elif len(col) < 2:
        note = "no resample has a value"
    elif float(np.ptp(col)) <= 1e-12 * max(1.0, float(np.abs(col).max())):  # equal up to rounding
        note = f"all {len(col)} resamples give the same value: no spread to estimate"
    if note:
        return {"stderr": None, "ci95": None, "note": note}
    return {"stderr": float(col.std(ddof=1)), "ci95": percentile_interval(col)}


def bootstrap(
    statistic: Callable[[np.ndarray], Any],
    n: int,
    clusters: Sequence[Any] | None = None,
    resamples: int = RESAMPLES,
    seed: int = SEED,
    value: Any = None,
) -> list[dict[str, Any]]:
    """Percentile bootstrap: ``statistic(counts)`` -> one number per resample, shape (resamples,), or
    several, shape (resamples, k). Returns one {value, stderr, ci95, method, n, resamples, seed
    [, n_clusters, note]} per statistic; ``value``: the statistic on the data (else the counts of all
    ones). The interval lies within the statistic's own range (percentiles of its values)."""
    counts = draw_counts(n, clusters, resamples, seed)
    draws = np.asarray(statistic(counts), dtype=float)
    if draws.ndim == 1:
        draws = draws[:, None]
    if value is None:
        value = np.asarray(statistic(np.ones((1, n), dtype=np.int64)), dtype=float).reshape(-1)
    value = np.atleast_1d(np.asarray(value, dtype=float))
    labels = _labels(clusters, n)
    g = None if labels is None else (int(labels.max()) + 1 if n else 0)
    out = []
    for j in range(draws.shape[1]):
        entry: dict[str, Any] = {"value": float(value[j]), **summarize_draws(draws[:, j], n, g)}
        entry.update(method="bootstrap-percentile" + ("-clustered" if clusters is not None else ""), n=n)
        entry.update(resamples=resamples, seed=seed)
        if g is not None:
            entry["n_clusters"] = g
        out.append(entry)
    return out


def weighted_mean(values: Sequence[float]) -> Callable[[np.ndarray], np.ndarray]:
    """The mean as a bootstrap statistic (one matrix product for all resamples)."""
    x = np.asarray(values, dtype=float)
    return lambda counts: counts @ x / counts.sum(axis=1)


def function_of_sums(
    rows: Sequence[Sequence[float]], finish: Callable[[list[float]], Sequence[float]]
) -> Callable[[np.ndarray], np.ndarray]:
    """``finish(column sums)`` as a bootstrap statistic: each resample's sums are one matrix
    product; ``finish`` (a few numbers in, a few out) runs once per resample."""
    x = np.asarray(rows, dtype=float)
    return lambda counts: [list(finish(t.tolist())) for t in counts @ x]


def ratio_of_sums(num: Sequence[float], den: Sequence[float]) -> Callable[[np.ndarray], np.ndarray]:
    """sum(num) / sum(den) as a bootstrap statistic (micro-averaged precision and the like)."""
    a, b = np.asarray(num, dtype=float), np.asarray(den, dtype=float)

    def stat(counts: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return (counts @ a) / (counts @ b)

    return stat


def rows_statistic(
    rows: list[Any], aggregate: Callable[[list[Any]], Sequence[float]]
) -> Callable[[np.ndarray], np.ndarray]:
    """Any aggregate of per-question rows (``aggregate(rows) -> numbers``) as a bootstrap statistic:
    each resample's rows are the drawn rows, in their order, each as often as it was drawn."""

    def stat(counts: np.ndarray) -> np.ndarray:
        out = []
        for c in counts:
            drawn = [rows[i] for i in np.repeat(np.arange(len(rows)), c)]
            out.append(list(aggregate(drawn)))
        return np.asarray(out, dtype=float)

    return stat


def paired_bootstrap_diff(
    a: Sequence[float], b: Sequence[float], clusters: Sequence[Any] | None = None, **kw: Any
) -> dict[str, Any]:
    """mean(b) - mean(a) over paired questions, its bootstrap SE and percentile interval."""
    d = np.asarray(b, dtype=float) - np.asarray(a, dtype=float)
    return bootstrap(weighted_mean(d), len(d), clusters, **kw)[0]


def mc_error(p: float, permutations: int) -> float:
    """The Monte Carlo standard error of a permutation p-value: sqrt(p (1 - p) / permutations)."""
    return math.sqrt(p * (1 - p) / permutations)


def sign_flip_test(
    diffs: Sequence[float],
    clusters: Sequence[Any] | None = None,
    permutations: int = PERMUTATIONS,
    seed: int = SEED,
) -> dict[str, Any]:
    """Two-sided paired permutation test of mean difference 0: each question's (each cluster's)
    difference keeps or flips its sign. Exact when at most ``EXACT_MAX`` units differ, else Monte
    Carlo, p = (1 + #{|T*| >= |T|}) / (1 + permutations). All differences 0: p = 1."""
    d = np.asarray(diffs, dtype=float)
    labels = _labels(clusters, len(d))
    unit = "question" if labels is None else "cluster"
    if labels is not None:
        d = np.bincount(labels, weights=d)  # the unit that flips is the cluster: its summed difference
    d = d[d != 0]
    k = len(d)
    if k == 0:
        return {"p": 1.0, "test": "sign-flip permutation (exact)", "n_nonzero": 0, "unit": unit, "p_mc_error": None}
    observed = abs(d.sum())
    tol = 1e-12 * max(1.0, float(np.abs(d).sum()))
    if k <= EXACT_MAX:
        signs = 1 - 2 * ((np.arange(2**k)[:, None] >> np.arange(k)) & 1)
        totals = np.abs(signs @ d)
        p = float(np.mean(totals >= observed - tol))
        return {"p": p, "test": "sign-flip permutation (exact)", "n_nonzero": k, "unit": unit, "p_mc_error": None}
    rng = np.random.default_rng(seed)
    signs = rng.choice(np.array([-1.0, 1.0]), size=(permutations, k))
    hits = int(np.sum(np.abs(signs @ d) >= observed - tol))
    p = (1 + hits) / (1 + permutations)
    return {
        "p": p,
        "test": "sign-flip permutation (Monte Carlo)",
        "n_nonzero": k,
        "unit": unit,
        "permutations": permutations,
        "seed": seed,
        "p_mc_error": mc_error(p, permutations),
    }


def _swap_units(n: int, clusters: Sequence[Any] | None) -> tuple[int, np.ndarray | None, str]:
    labels = _labels(clusters, n)
    units = n if labels is None else (int(labels.max()) + 1 if n else 0)
    test = "paired swap permutation" if labels is None else "paired swap permutation of whole clusters"
    return units, labels, test


def _swap_result(hits: int, permutations: int, seed: int, test: str, units: int, differing: int) -> dict[str, Any]:
    p = (1 + hits) / (1 + permutations)
    out = {"p": p, "test": test, "permutations": permutations, "seed": seed, "p_mc_error": mc_error(p, permutations)}
    return {**out, "units": units, "n_differing": differing}


def _differing_units(differs: Sequence[bool], labels: np.ndarray | None) -> int:
    """How many units (questions, or clusters) hold a row that differs between the runs: only
    those change anything when swapped."""
    flags = np.asarray(differs, dtype=bool)
    if labels is None:
        return int(flags.sum())
    return int(np.unique(labels[flags]).size) if flags.any() else 0


def swap_test(
    rows_a: list[Any],
    rows_b: list[Any],
    aggregate: Callable[[list[Any]], float],
    clusters: Sequence[Any] | None = None,
    permutations: int = 1000,
    seed: int = SEED,
) -> dict[str, Any]:
    """Paired permutation test of an arbitrary aggregate: each question's two rows (each cluster's
    rows, whole, when clustered: the unit its bootstrap resamples) swap runs at random;
    p = (1 + #{|D*| >= |D|}) / (1 + permutations). Identical rows give p = 1."""
    units, labels, test = _swap_units(len(rows_a), clusters)
    observed = abs(aggregate(rows_b) - aggregate(rows_a))
    differing = _differing_units([x != y for x, y in zip(rows_a, rows_b)], labels)
    if not differing:
        return {"p": 1.0, "test": test, "permutations": 0, "p_mc_error": None, "units": units, "n_differing": 0}
    rng = np.random.default_rng(seed)
    tol = 1e-12 * max(1.0, observed)
    hits = 0
    for _ in range(permutations):
        swap = rng.random(units) < 0.5
        if labels is not None:
            swap = swap[labels]
        a = [y if s else x for x, y, s in zip(rows_a, rows_b, swap)]
        b = [x if s else y for x, y, s in zip(rows_a, rows_b, swap)]
        hits += abs(aggregate(b) - aggregate(a)) >= observed - tol
    return _swap_result(int(hits), permutations, seed, test, units, differing)


def swap_test_sums(
    rows_a: Sequence[Sequence[float]],
    rows_b: Sequence[Sequence[float]],
    value: Callable[[list[float]], float],
    clusters: Sequence[Any] | None = None,
    permutations: int = 1000,
    seed: int = SEED,
) -> dict[str, Any]:
    """``swap_test`` of an aggregate that is ``value(column sums)`` of per-question vectors: the
    same random swaps, each resample's sums one product (the same p as ``swap_test``)."""
    a, b = np.asarray(rows_a, dtype=float), np.asarray(rows_b, dtype=float)
    units, labels, test = _swap_units(len(a), clusters)
    total_a, total_b = a.sum(axis=0), b.sum(axis=0)
    observed = abs(value(total_b.tolist()) - value(total_a.tolist()))
    differing = _differing_units(np.any(a != b, axis=1) if a.size else [], labels)
    if not differing:
        return {"p": 1.0, "test": test, "permutations": 0, "p_mc_error": None, "units": units, "n_differing": 0}
    rng = np.random.default_rng(seed)
    swaps = np.stack([rng.random(units) < 0.5 for _ in range(permutations)]).astype(float)
    if labels is not None:
        swaps = swaps[:, labels]
    moved = swaps @ (b - a)  # what each resample's swaps move from run b's sums to run a's
    tol = 1e-12 * max(1.0, observed)
    hits = sum(abs(value((total_b - m).tolist()) - value((total_a + m).tolist())) >= observed - tol for m in moved)
    return _swap_result(int(hits), permutations, seed, test, units, differing)


def binom_cdf_half(k: int, n: int) -> float:
    """P(X <= k) for X ~ Binomial(n, 1/2), exactly (integer arithmetic)."""
    return sum(math.comb(n, i) for i in range(k + 1)) / 2**n


def mcnemar_exact(a: Sequence[float], b: Sequence[float]) -> dict[str, Any]:
    """Exact (binomial) McNemar test for paired 0/1 outcomes: b01 = questions right in b only,
    b10 = right in a only; p = min(1, 2 P(X <= min(b01, b10))), X ~ Bin(b01 + b10, 1/2)."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    only_a = int(np.sum((x == 1) & (y == 0)))
    only_b = int(np.sum((x == 0) & (y == 1)))
    m = only_a + only_b
    p = 1.0 if m == 0 else min(1.0, 2 * binom_cdf_half(min(only_a, only_b), m))
    return {"p": p, "test": "McNemar exact", "only_a": only_a, "only_b": only_b, "p_mc_error": None}


def smallest_p(test: dict[str, Any]) -> dict[str, Any]:
    """{p, n, unit}: the smallest two-sided p ``test`` (a result of the tests above) can give with
    the ``n`` units that differed between the runs: 2 / 2^n (the observed sign or swap pattern and
    its mirror image are always as extreme; McNemar's binomial tail is the same count), never below
    the 1 / (1 + permutations) a Monte Carlo p starts from; 1 when nothing differed."""
    if "only_a" in test:  # McNemar: the discordant questions
        n, unit = test["only_a"] + test["only_b"], "question"
    elif "n_nonzero" in test:  # sign-flip: the questions (clusters) whose difference is not 0
        n, unit = test["n_nonzero"], test.get("unit", "question")
    else:  # swap: the questions (clusters) with a row that differs
        n = test["n_differing"]
        unit = "cluster" if "clusters" in test["test"] else "question"
    p = min(1.0, 2.0 / 2.0**n)
    if test.get("permutations"):
        p = max(p, 1.0 / (1 + test["permutations"]))
    return {"p": p, "n": n, "unit": unit}


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the given order: the i-th smallest of m p-values is
    multiplied by m - i + 1 (i from 1), then made non-decreasing in that order and capped at 1.
    Rejecting where the adjusted p < alpha keeps the family-wise error at alpha."""
    p = np.asarray(pvalues, dtype=float)
    m = len(p)
    if m == 0:
        return []
    order = np.argsort(p, kind="stable")
    stepped = np.minimum(1.0, np.maximum.accumulate(p[order] * np.arange(m, 0, -1)))
    out = np.empty(m)
    out[order] = stepped
    return out.tolist()


def required_n(sd: float, delta: float, alpha: float = 0.05, power: float = 0.8, paired: bool = False) -> int:
    """Questions (per run) a two-sided z-test needs to detect ``delta`` with this power.
    Paired: ``sd`` is the SD of the per-question differences, n = (sd (z_a + z_b) / delta)^2.
    Unpaired (two independent runs, equal SD): n = 2 (sd (z_a + z_b) / delta)^2."""
    if delta <= 0:
        raise ValueError("delta must be positive")
    if not (0 < alpha < 1 and 0 < power < 1):
        raise ValueError("alpha and power must be between 0 and 1")
    z = z_quantile(1 - alpha / 2) + z_quantile(power)
    n = (sd * z / delta) ** 2 * (1 if paired else 2)
    return max(2, math.ceil(n - 1e-9))


def detectable_delta(sd: float, n: int, alpha: float = 0.05, power: float = 0.8, paired: bool = False) -> float:
    """The smallest difference ``n`` questions detect with this power (the inverse of required_n)."""
    z = z_quantile(1 - alpha / 2) + z_quantile(power)
    return sd * z * math.sqrt((1 if paired else 2) / n)
