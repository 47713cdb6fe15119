"""Paired comparison of runs on the questions they share (``harness compare``, ``harness ablate``'s steps).

Each later run is compared with the first (the baseline), leaf by leaf of every metric all the
runs have, whichever run comes first or has more questions:

* each run's value and 95% interval on the shared questions (as ``Scores.uncertainty`` computes
  them: Wilson for shares, analytic for other means, bootstrap through the metric's aggregate
  otherwise; n/a with a note where there is no spread to estimate);
* the difference (run - baseline) with Newcombe's paired score interval for two unclustered shares,
  else a paired bootstrap interval (the same resampled questions, or clusters when clustered, for
  both runs); either stays within the difference's range;
* a p-value: exact McNemar for unclustered 0/1 per-question values, else a paired sign-flip
  permutation test (a mean) or a paired swap permutation of the metric's own aggregate (any other
  number); each permutes the unit its interval resamples (whole clusters when clustered), and a
  Monte Carlo p records its error (``p_mc_error``);
* the questions whose value changed most.

Every p-value is adjusted for the others by Holm's method over all the tests one comparison ran
(each compared number of each run against the baseline; ``--metric`` limits them): ``p_holm``, and
``significant`` means ``p_holm < 0.05``. Each test also records the smallest p it could have
given with the questions (clusters) that differed (``p_min``: 2 / 2^n): with 5 of them no
two-sided test of 5 paired signs can reach 0.05, and the report says so. A run that answered
nothing is listed as failed, with why; nothing is compared with it (no test, no p) and its zero
scores are never read as measurements.

How a leaf is compared is decided from each run's own aggregate and all of its own rows (a mean
of a per-question value in every run, or not), then every number is recomputed on the shared
questions, taken in one order (sorted ids): compare(B, A) mirrors compare(A, B). A metric is
aggregated by the implementation its runs recorded (a plugin by its reference and sha256 or
version), never by another metric of the same name; when that code cannot be had, or the runs
used different ones, only its means of per-question values are compared and the rest are listed
under ``skipped`` with the reason.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness.analysis.row import Outcomes, answered_nothing
from harness.errors import HarnessError
from harness.execution.record import RunResults, read_results, results_path
from harness.scoring.results import interval_text
from harness.scoring.scores import PluginRecord, Scores
from harness.scoring.uncertainty import (
    _flat_leaves,
    declared_sources,
    leaf,
    leaf_interval,
    plan_leaf_of_runs,
    sums_of,
)

ALPHA = 0.05
TOP_CHANGED = 5


@dataclass(frozen=True)
class LoadedRun:
    """A run to compare: where it is, its typed results, and its scores (empty: an unscored run)."""

    path: str
    results: RunResults
    scores: Scores

    @classmethod
    def of(cls, path: str | Path, results: RunResults) -> LoadedRun:
        return cls(str(path), results, results.scores or Scores())


def load_run(path: str | Path, failed_ok: bool = False) -> LoadedRun:
    """A run directory (or its results.json) with per-question scores and at least one answer;
    one-line errors. ``failed_ok``: a run that answered nothing is returned too (``compare_runs``
    shows it as failed)."""
    run = LoadedRun.of(path, read_results(path))
    nothing = answered_nothing(run.results)
    if nothing and failed_ok:
        return run
    if nothing:  # unanswered questions score 0: comparing those zeros would look like a result
        raise HarnessError(f"{results_path(path)}: {nothing}: its zero scores measure nothing; rerun it first")
    if not run.scores.question_ids():
        raise HarnessError(f"{results_path(path)}: no per-question scores (an unscored run: harness score {path} first)")
    return run


def dataset_of(run: LoadedRun) -> tuple[str | None, str | None]:
    meta = run.scores.meta
    return run.results.dataset.spec or meta.dataset, run.results.dataset.sha256 or meta.dataset_sha256


def run_label(results: RunResults, path: str | Path) -> str:
    """A run as tables and plots name it: model, setting, agent (where not the setting's own) and
    context size (``gpt-4o closed-book ctx=8192``); its folder's name when it records none."""
    agent = results.agent_name
    parts = [results.model_name, results.setting, agent if agent != results.setting else None]
    ctx = results.context_size
    text = " ".join(str(p) for p in parts if p)
    return f"{text} ctx={ctx}" if ctx else text or Path(path).name


def label(run: LoadedRun) -> str:
    return run_label(run.results, run.path)


def _labels(runs: list[LoadedRun]) -> list[str]:
    """Each run's label, its folder added where two runs would read alike."""
    labels = [label(r) for r in runs]
    counts = Counter(labels)
    return [f"{text} ({Path(r.path).name})" if counts[text] > 1 else text for text, r in zip(labels, runs)]


def _implementation(run: LoadedRun, name: str) -> tuple[Any, str, str | None]:
    """(the metric function that scored ``run``'s ``name``, or None; its identity; why None). Taken
    from what the run recorded (a plugin's reference and sha256 or package version), never the
    current registry's ``name``: a plugin may share a built-in's name and aggregate otherwise."""
    from harness.scoring.metrics import METRICS

    record = run.scores.plugin(name)
    if record is None:  # built-ins record no plugin
        try:
            entry = METRICS.resolve(name)
        except Exception:  # noqa: BLE001 - any failure is a reason, never a crash
            entry = None
        if entry is None or entry.source != "builtin":
            return None, f"unrecorded:{name}", f"{run.path} does not record which plugin scored {name}"
        return entry.obj, f"builtin:{name}", None  # a Metric
    identity = record.identity()
    ref = record.ref or name
    what = f"{name} (plugin {ref}{' sha256 ' + identity['sha256'][:12] if 'sha256' in identity else ''})"
    # a file is its code (sha256) whatever path it was given by; anything else its reference and version
    named = f"file:{ref.rpartition(':')[2]}" if record.source == "file" else f"{record.source}:{ref}"
    ident = f"{named}:" + ",".join(f"{k}={v}" for k, v in identity.items())
    try:
        fn, found = _load_recorded(run, record, name)
        from harness.scoring.metrics import as_metric

        fn = as_metric(fn, ref)
    except Exception as exc:  # noqa: BLE001 - a plugin that cannot load here is a reason, not a crash
        return None, ident, f"{run.path}'s {what} cannot be loaded here: {_error_line(exc)}"
    # an in-process registration has no identity to check; anything else must match the record
    if record.source != "registered" and (not identity or any(found.get(k) != v for k, v in identity.items())):
        return None, ident, f"{run.path}'s {what} is not verifiably the code found now (identity differs)"
    return fn, ident, None


def _load_recorded(run: LoadedRun, record: PluginRecord, name: str) -> tuple[Any, dict[str, Any]]:
    """(function, identity found) of a recorded plugin metric. A ``FILE.py`` is looked for where it
    was given (relative to the current directory), then beside the run; it is executed only when its
    sha256 is the recorded one."""
    import hashlib

    from harness.registry import load_reference
    from harness.scoring.metrics import METRICS

    source, ref = record.source, record.ref or ""
    if source == "file":
        given = Path(record.file or ref.rpartition(":")[0])
        run_dir = Path(run.path) if Path(run.path).is_dir() else Path(run.path).parent
        places = [given] if given.is_absolute() else [given, run_dir / given, run_dir.parent / given]
        for place in places:
            if place.is_file() and hashlib.sha256(place.read_bytes()).hexdigest() == record.sha256:
                fn, _, identity = load_reference(f"{place}:{ref.rpartition(':')[2]}", "metric")
                return fn, identity
        raise HarnessError(f"no file {given} with the recorded sha256 (looked in: {', '.join(map(str, places))})")
    if source == "module":
        fn, _, identity = load_reference(ref, "metric")
        return fn, identity
    if source in ("entry-point", "registered"):  # by the name it was registered under
        entry = METRICS.resolve(record.name or name)
        if entry.source != source:
            raise HarnessError(f"{entry.name} is now a {entry.source} metric, not the recorded {source}")
        return entry.obj, entry.identity
    raise HarnessError(f"unknown plugin source {source!r}")


def metric_of_run(run: LoadedRun, name: str) -> Any:
    """The metric function that scored ``run``'s ``name`` (``_implementation``), None when it cannot
    be had: then only its means of per-question values get intervals."""
    return _implementation(run, name)[0]


def _error_line(exc: BaseException) -> str:
    text = str(exc) if isinstance(exc, HarnessError) else f"{type(exc).__name__}: {exc}"
    return " ".join(text.split())[:300]


def _metric_of_runs(runs: list[LoadedRun], name: str) -> tuple[Any, str | None]:
    """(the one implementation of ``name`` every run was scored by, or None; why None)."""
    found = [_implementation(run, name) for run in runs]
    if len({ident for _, ident, _ in found}) > 1:  # first: no loading makes two implementations one
        idents = "; ".join(i for _, i, _ in found)
        return None, f"the runs were scored by different implementations of {name} ({idents})"
    why = next((w for _, _, w in found if w), None)
    return (None, why) if why else (found[0][0], None)


def _clusters(runs: list[LoadedRun], ids: list[str]) -> tuple[list[Any] | None, str | None]:
    """Each shared question's cluster, from every run that records a clustering (so whether the
    comparison is clustered does not depend on which run comes first). Runs clustered differently
    are joined: questions that share a cluster in any run share one here (coarser: never too narrow)."""
    found = []
    for run in runs:
        labels = run.scores.clusters
        if run.scores.cluster_by and labels:
            found.append((run.scores.cluster_by, [labels.get(q, f"question:{q}") for q in ids]))
    if not found:
        return None, None
    by = "+".join(sorted({b for b, _ in found}))
    if all(labels == found[0][1] for _, labels in found):
        return found[0][1], by
    parent = {q: q for q in ids}

    def root(q: str) -> str:
        while parent[q] != q:
            parent[q] = parent[parent[q]]
            q = parent[q]
        return q

    for _, labels in found:
        first: dict[Any, str] = {}
        for q, label in zip(ids, labels):
            a, b = root(q), root(first.setdefault(label, q))
            parent[max(a, b, key=str)] = min(a, b, key=str)  # the smallest id names the cluster
    return [f"cluster:{root(q)}" for q in ids], by


def compare_runs(
    runs: list[LoadedRun], allow_mismatch: bool = False, metrics: list[str] | None = None
) -> dict[str, Any]:
    """The comparison of ``runs`` (``load_run``'s) with the first; see the module docstring."""
    if len(runs) < 2:
        raise HarnessError("compare needs at least two runs")
    failed = {i: why for i, run in enumerate(runs) if (why := answered_nothing(run.results))}
    if 0 in failed:
        raise HarnessError(
            f"{results_path(runs[0].path)}: the baseline (the first run) {failed[0].removeprefix('the run ')}: "
            "there is nothing to compare the others with; put a run that answered first"
        )
    base_spec, base_sha = dataset_of(runs[0])
    for run in runs[1:]:
        spec, sha = dataset_of(run)
        if (spec, sha) != (base_spec, base_sha) and not allow_mismatch:
            why = f"{spec} vs {base_spec}" if spec != base_spec else f"{spec}: the dataset files differ (sha256)"
            raise HarnessError(
                f"{run.path} and {runs[0].path} score different datasets ({why}); "
                "--allow-mismatch compares them anyway"
            )
    everyone, runs = runs, [run for i, run in enumerate(runs) if i not in failed]
    out = _compare_answered(runs, metrics)
    _add_failed(out, everyone, failed)
    _adjust(out)
    out["runs"] = [
        {
            "path": r.path,
            "label": text,
            "dataset": dataset_of(r)[0],
            "search_space": r.results.search_space_label,
            **({"failed": failed[i]} if i in failed else {}),
            **_no_answer(r),
        }
        for i, (r, text) in enumerate(zip(everyone, _labels(everyone)))
    ]
    out["warnings"] = [w for w in (spaces_warning(everyone),) if w]
    out["n_questions"] = [len(r.scores.question_ids()) for r in everyone]
    return out


def _no_answer(run: LoadedRun) -> dict[str, Any]:
    """A run's samples that finished without an answer, as ``harness run`` says them
    (``harness.analysis.row.Outcomes``): ``answered``, ``no_answer`` (how many) and ``no_answer_note``
    (why; "no sample produced an answer: ..." where none did); nothing where every finished sample answered."""
    outcomes = Outcomes.of(run.results)
    if not outcomes.unanswered:
        return {}
    note = outcomes.none_answered_line() if outcomes.no_answer else outcomes.note()
    return {"answered": outcomes.answered, "no_answer": outcomes.unanswered, "no_answer_note": note}


_SPACE_FACTS = ("backend", "source", "pages", "revision_date", "scope", "scope_dataset")


def spaces_warning(runs: list[LoadedRun]) -> str | None:
    """One line when runs that searched searched different spaces (one evidence-only, one a whole
    Wikipedia; two snapshots of different sizes): their difference is partly the search space's."""
    searched = [(i, r.results.search_space) for i, r in enumerate(runs) if r.results.search_space is not None]
    kinds = {tuple(space.model_dump().get(k) for k in _SPACE_FACTS) for _, space in searched}
    if len(kinds) < 2:
        return None
    listed = "; ".join(f"{run_letter(i)}: {space.label}" for i, space in searched)
    mixed = len({space.evidence_only for _, space in searched}) > 1
    return (
        f"the runs searched different spaces ({listed}): "
        + ("an evidence-only number is not an open-book number over Wikipedia; " if mixed else "")
        + "a difference between them is partly the search space's"
    )


def _compare_answered(runs: list[LoadedRun], metrics: list[str] | None) -> dict[str, Any]:
    """The comparison of the runs that answered (the baseline first; alone when every other failed)."""
    from harness.scoring import stats

    ids = [set(run.scores.question_ids()) for run in runs]
    # one order whichever run comes first: the same resamples and permutations, mirrored results
    shared = sorted((q for q in ids[0] if all(q in other for other in ids[1:])), key=str)
    if not shared:
        raise HarnessError(f"{runs[0].path} and the other runs share no scored question")
    aggs = [run.scores.metric_aggregates() for run in runs]
    names = [m for m in aggs[0] if all(m in a for a in aggs[1:])]
    # the leaves every run has (each run's own aggregate may have others)
    leaves = {m: [p for p in _flat_leaves(aggs[0][m]) if all(p in _flat_leaves(a[m]) for a in aggs[1:])] for m in names}
    if metrics:
        known = {f"{m}.{'.'.join(p)}" for m in names for p in leaves[m]}
        for wanted in metrics:
            if wanted not in names and wanted not in known:
                raise HarnessError(
                    f"metric {wanted!r} is not scored in every run; shared: {', '.join(names) or 'none'}"
                )
    if not names:
        raise HarnessError("the runs share no metric")
    clusters, cluster_by = _clusters(runs, shared)
    out: dict[str, Any] = {
        "runs": [],
        "baseline": runs[0].path,
        "n_shared": len(shared),
        "n_questions": [],
        "clustering": {"by": cluster_by, "n_clusters": len(set(clusters))} if clusters else {"by": None},
        "alpha": ALPHA,
        "metrics": {},
        "skipped": {},  # "METRIC[.LEAF]": why it is not compared (one line)
    }
    for name in names:
        wanted = [p for p in leaves[name] if not metrics or name in metrics or ".".join((name, *p)) in metrics]
        if not wanted:
            continue
        own = [run.scores.metric_rows(name) for run in runs]  # {question id: its values of this metric}
        per = [[values.get(q) for q in shared] for values in own]
        if any(v is None for col in per for v in col):
            out["skipped"][name] = "no per-question values for some shared question"
            continue
        fn, why_not = _metric_of_runs(runs, name)
        # each run's aggregate is over all its own rows: its plan is checked against those
        full = [list(values.values()) for values in own]
        declared = declared_sources(fn, aggs[0][name])
        for path in wanted:
            key = ".".join((name, *path))
            values = [_flat_leaves(a[name])[path] for a in aggs]
            kind = _leaf_kind(fn, path, runs)
            plan = plan_leaf_of_runs(path, values, full, declared, kind)
            if plan is not None and plan["kind"] != "mean":
                continue  # a count, or no value: nothing to compare
            if plan is None:
                reason = _no_aggregate(fn, why_not, name, path, per, runs)
                if reason:
                    out["skipped"][key] = f"not a mean of per-question values, and {reason}"
                    continue
            out["metrics"][key] = _compare_leaf(stats, fn, kind, path, plan, per, shared, clusters, len(runs))
    if metrics and not out["metrics"]:
        why = "".join(f" ({key}: {reason})" for key, reason in list(out["skipped"].items())[:1])
        raise HarnessError(f"no comparable number among {', '.join(metrics)}{why}")
    if not out["skipped"]:
        del out["skipped"]
    return out


def _failed_run(why: str) -> dict[str, Any]:
    return {"value": None, "stderr": None, "ci95": None, "method": None, "failed": why}


def _failed_diff(why: str) -> dict[str, Any]:
    keys = ("diff", "stderr", "ci95", "interval", "p", "p_holm", "p_mc_error", "p_min", "test")
    return {**dict.fromkeys(keys), "significant": False, "most_changed": [], "failed": why}


def _add_failed(out: dict[str, Any], runs: list[LoadedRun], failed: dict[int, str]) -> None:
    """Each metric's entries for every run in the order given: a failed run's value and difference
    are None with why (no test, no p-value)."""
    if not failed:
        return
    for entry in out["metrics"].values():
        answered_runs, answered_diffs = iter(entry["runs"]), iter(entry["diffs"])
        entry["runs"] = [_failed_run(failed[i]) if i in failed else next(answered_runs) for i in range(len(runs))]
        entry["diffs"] = [
            _failed_diff(failed[i]) if i in failed else next(answered_diffs) for i in range(1, len(runs))
        ]


def _adjust(out: dict[str, Any]) -> None:
    """Holm's adjustment over every test the comparison ran (``p_holm``; ``significant`` by it)."""
    from harness.scoring.stats import holm

    tests = [d for entry in out["metrics"].values() for d in entry["diffs"] if d.get("p") is not None]
    for d, adjusted in zip(tests, holm([d["p"] for d in tests])):
        d["p_holm"] = adjusted
        d["significant"] = bool(adjusted < ALPHA)
    out["multiple_testing"] = {"method": "holm", "n_tests": len(tests), "alpha": ALPHA}


def _epochs(runs: list[LoadedRun]) -> list[int]:
    """Each run's number of epochs (1 when it records none)."""
    found = []
    for run in runs:
        n = run.scores.n_epochs
        found.append(n if isinstance(n, int) and n > 1 else 1)
    return found


def _no_aggregate(fn, why_not, name, path, per, runs: list[LoadedRun]) -> str | None:
    """Why a leaf that is no mean cannot be recomputed on the shared questions (None: it can)."""
    if fn is None:
        return f"{why_not}: no other implementation stands in for it"
    if fn.aggregation.rows is None:
        return f"{name} has no aggregate of per-question rows (aggregate_rows) to recompute it on the shared questions"
    for col, run, epochs in zip(per, runs, _epochs(runs)):
        try:
            value = leaf(fn.aggregation.rows(col, len(col)), path)
        except Exception as exc:  # noqa: BLE001 - a metric's failure skips its number, not the comparison
            return f"{name}'s aggregate of the shared rows failed: {_error_line(exc)}"
        if value is None and epochs > 1:  # epochs.reduce_values drops a corpus number's parts
            return (
                f"{run.path} has {epochs} epochs: a question's parts of a corpus number are each epoch's own, "
                "not kept once the epochs are combined"
            )
        if value is None:
            return "the per-question values lack what it is computed from (scored before the metric kept them)"
    return None


def _leaf_kind(fn, path: tuple[str, ...], runs: list[LoadedRun]):
    """The declared kind of a leaf (unbounded where the metric cannot be had), as the runs' rows
    hold it: a share's per-question values are each question's share of its epochs when a run
    combined several by their mean (``harness.scoring.epochs.epoch_kind``)."""
    from harness.scoring.epochs import epoch_kind
    from harness.scoring.kinds import UNBOUNDED

    kind = fn.kind_of(path) if fn is not None else UNBOUNDED
    for run, n in zip(runs, _epochs(runs)):
        reducer = run.scores.epoch_reducer
        kind = epoch_kind(kind, reducer or "mean", n)
    return kind


def _compare_leaf(stats, fn, kind, path, plan, per, shared, clusters, k) -> dict[str, Any]:
    """One leaf's entry: ``plan`` a mean (the interval its declared ``kind`` asks: Wilson for a
    share, else analytic; difference: Newcombe's for two unclustered shares, else paired bootstrap;
    McNemar for shares, else sign-flip) or None (the metric's own aggregate of the shared rows,
    bootstrapped and swap-tested, whole clusters when clustered)."""
    n = len(shared)
    entry: dict[str, Any] = {"runs": [], "diffs": []}
    if plan is not None:
        raw = [[float(leaf(r, plan["source"])) for r in col] for col in per]
        cols = [[plan["scale"] * v for v in col] for col in raw]
        entry["kind"] = "mean"
        for values in raw:
            entry["runs"].append(_short(leaf_interval(kind, values, clusters, plan["scale"])))
        # a share's values are 0/1 (before any x100 scale); McNemar and Newcombe read them so
        binary = kind.name == "share" and all(entry_run["method"] != "none" for entry_run in entry["runs"])
        for j in range(1, k):
            d = stats.paired_bootstrap_diff(cols[0], cols[j], clusters)
            d["method"] = "paired " + d["method"]
            diffs = [b - a for a, b in zip(cols[0], cols[j])]
            if binary and clusters is None:
                test = stats.mcnemar_exact(raw[0], raw[j])
                both = sum(1 for a, b in zip(raw[0], raw[j]) if a == b == 1)
                neither = n - both - test["only_a"] - test["only_b"]
                lo, hi = stats.newcombe_paired_interval(both, test["only_a"], test["only_b"], neither)
                d = {**d, "ci95": [plan["scale"] * lo, plan["scale"] * hi], "method": "newcombe paired score"}
            else:
                test = stats.sign_flip_test(diffs, clusters)
            order = sorted(range(n), key=lambda i: (-abs(diffs[i]), shared[i]))
            changed = [
                {"question_id": shared[i], "baseline": cols[0][i], "run": cols[j][i], "diff": diffs[i]}
                for i in order[:TOP_CHANGED]
                if diffs[i] != 0
            ]
            entry["diffs"].append(_diff_entry(d, test, changed))
        return entry
    aggregate_rows = fn.aggregation.rows

    def agg(drawn: list[Any]) -> float:
        value = leaf(aggregate_rows(drawn, len(drawn)), path)
        return math.nan if value is None else float(value)  # a resample without it (a ratio's empty base): left out

    entry["kind"] = "aggregate"
    counts = stats.draw_counts(n, clusters)  # the same resamples for every run: paired
    n_clusters = len(set(clusters)) if clusters else None
    sums = _sums_of(fn, path, per)
    if sums is not None:  # a function of summed per-question numbers (corpus BLEU): products, not loops
        vectors, of_sums = sums
        values = [[of_sums(t.tolist()) for t in counts @ np.asarray(v, dtype=float)] for v in vectors]
    else:
        idx = [np.repeat(np.arange(n), c) for c in counts]
        values = [[agg([col[i] for i in ix]) for ix in idx] for col in per]
    method = "bootstrap-percentile" + ("-clustered" if clusters else "")
    for col, draws in zip(per, values):
        entry["runs"].append({"value": agg(col), **stats.summarize_draws(draws, n, n_clusters), "method": method})
    for j in range(1, k):
        d = np.asarray(values[j]) - np.asarray(values[0])
        boot = {"value": agg(per[j]) - agg(per[0]), **stats.summarize_draws(d, n, n_clusters)}
        boot["method"] = "paired " + method
        if sums is not None:
            test = stats.swap_test_sums(sums[0][0], sums[0][j], sums[1], clusters)
        else:
            test = stats.swap_test(per[0], per[j], agg, clusters)
        entry["diffs"].append(_diff_entry(boot, test, []))
    return entry


def _sums_of(fn, path, per) -> tuple[list[list[Any]], Any] | None:
    """(each run's per-question vectors, column sums -> this number) when the number is a function
    of summed per-question values (``aggregate_sums``) and every run's rows have them."""
    found = [sums_of(fn, col) for col in per]
    if any(f is None for f in found):
        return None
    vectors, finish = [f[0] for f in found], found[0][1]
    if leaf(finish([sum(c) for c in zip(*vectors[0])]), path) is None:
        return None
    return vectors, lambda totals: float(leaf(finish(totals), path))


def _short(entry: dict[str, Any]) -> dict[str, Any]:
    out = {k: entry.get(k) for k in ("value", "stderr", "ci95", "method")}
    note = entry.get("note") or entry.get("reason")
    return {**out, "note": note} if note else out


def _diff_entry(boot: dict[str, Any], test: dict[str, Any], changed: list[dict[str, Any]]) -> dict[str, Any]:
    from harness.scoring.stats import smallest_p

    out = {
        "diff": boot["value"],
        "stderr": boot["stderr"],
        "ci95": boot["ci95"],
        "interval": boot["method"],
        "p": test["p"],
        "p_mc_error": test.get("p_mc_error"),  # None: an exact p
        "test": test["test"],
        "p_holm": None,  # set once every test of the comparison is known (_adjust)
        "significant": bool(test["p"] < ALPHA),
        "significant_unadjusted": bool(test["p"] < ALPHA),
        "p_min": smallest_p(test),
        "test_detail": {k: v for k, v in test.items() if k not in ("p", "test", "p_mc_error")},
        "most_changed": changed,
    }
    if boot.get("note"):
        out["note"] = boot["note"]
    return out


def _fmt(value: Any, digits: int = 4) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _ci(ci: list[float] | None) -> str:
    return "" if not ci else f"[{_fmt(ci[0])}, {_fmt(ci[1])}]"


def p_text(d: dict[str, Any]) -> str:
    """``p = 0.31 ± 0.0046, Holm p = 0.93`` (the Monte Carlo error of a permutation p; none for an
    exact p; the Holm-adjusted p where the comparison adjusted it)."""
    err = d.get("p_mc_error")
    text = f"p = {d['p']:.4g}" + (f" ± {err:.2g}" if err else "")
    return text + (f", Holm p = {d['p_holm']:.4g}" if d.get("p_holm") is not None else "")


def run_letter(i: int) -> str:
    return "ABCDEFGHIJKLMNOPQRSTUVWXYZ"[i] if i < 26 else f"R{i + 1}"


def holm_line(result: dict[str, Any]) -> str:
    """What the adjustment covered, said once under every comparison."""
    n = (result.get("multiple_testing") or {}).get("n_tests", 0)
    if n == 0:
        return "no test ran (no run but the baseline was compared), so no p-value to adjust"
    return (
        f"p adjusted over {n} test{'s' if n != 1 else ''} (Holm): every compared number of every run against "
        f"the baseline (--metric limits them); significant means Holm p < {result['alpha']}"
    )


def min_p_note(d: dict[str, Any], alpha: float = ALPHA) -> str | None:
    """``n=5 paired questions that differ: the smallest p this test can reach is 0.0625 > 0.05``
    where the test could not have reached ``alpha`` whatever the answers (None otherwise)."""
    least = d.get("p_min")
    if not least or least["p"] <= alpha:
        return None
    n, unit = least["n"], least["unit"]
    return (
        f"n={n} paired {unit}{'s that differ' if n != 1 else ' that differs'}: "
        f"the smallest p this test can reach is {least['p']:.4g} > {alpha}"
    )


# what each procedure does, for the note where the interval and the p-value seem to disagree
_INTERVALS = {
    "newcombe paired score": "Newcombe's paired score interval (from the two runs' Wilson intervals)",
    "paired bootstrap-percentile": "a percentile bootstrap that resamples the questions",
    "paired bootstrap-percentile-clustered": "a percentile bootstrap that resamples whole clusters",
}
_TESTS = {
    "McNemar exact": "McNemar's exact test on the questions only one run got right",
    "sign-flip permutation (exact)": "a sign-flip permutation test of the per-{unit} differences",
    "sign-flip permutation (Monte Carlo)": "a sign-flip permutation test of the per-{unit} differences",
    "paired swap permutation": "a permutation test that swaps each question's two rows between the runs",
    "paired swap permutation of whole clusters": "a permutation test that swaps whole clusters between the runs",
}


def disagreement_note(d: dict[str, Any], alpha: float = ALPHA) -> str | None:
    """Where the 95% interval excludes 0 beside p >= alpha (or includes 0 beside p < alpha): which
    procedure each comes from. They are two procedures, not one: near the threshold they can
    disagree (a percentile bootstrap is narrow at small n), and significance here follows the test."""
    ci, p = d.get("ci95"), d.get("p")
    if not ci or p is None or any(v is None for v in ci):
        return None
    excludes = ci[0] > 0 or ci[1] < 0
    if excludes == (p < alpha):
        return None
    interval = d.get("interval") or "the interval"
    test = d.get("test") or "the test"
    unit = (d.get("test_detail") or {}).get("unit") or "question"
    said = "excludes 0" if excludes else "includes 0"
    from_test = _TESTS.get(test, test).replace("{unit}", unit)
    return (
        f"the interval {said} while p = {p:.4g} {'>=' if excludes else '<'} {alpha}: the interval is "
        f"{_INTERVALS.get(interval, interval)}, the p-value {from_test}; two procedures that can disagree "
        "near the threshold, and significance follows the test"
    )


def _shown(result: dict[str, Any], headline_only: bool) -> list[str]:
    from harness.analysis.leaderboard import is_headline

    return [key for key in result["metrics"] if not headline_only or is_headline(key)]


def format_comparison(result: dict[str, Any], headline_only: bool = True) -> str:
    """The console report of ``compare_runs``."""
    from harness.analysis.leaderboard import is_headline

    lines = [
        f"{result['n_shared']} shared questions (of {', '.join(str(n) for n in result['n_questions'])})"
        + (
            f"; clustered by {result['clustering']['by']} ({result['clustering']['n_clusters']} clusters)"
            if result["clustering"].get("by")
            else ""
        )
    ]
    for i, run in enumerate(result["runs"]):
        mark = "  [baseline]" if i == 0 else f"  [failed, not compared: {run['failed']}]" if run.get("failed") else ""
        lines.append(f"  {run_letter(i)}: {run['path']}  ({run['label']}){mark}")
        if run.get("no_answer_note"):
            lines.append(f"     {run['no_answer_note']}")
        if run.get("search_space"):
            lines.append(f"     search space: {run['search_space']}")
    lines += [f"warning: {w}" for w in result.get("warnings") or []]
    for key in _shown(result, headline_only):
        entry = result["metrics"][key]
        lines.append(key)
        for i, r in enumerate(entry["runs"]):
            value = "n/a (failed)" if r.get("failed") else f"{_fmt(r['value'])}{interval_text(r)}"
            run = result["runs"][i]
            if run.get("no_answer") and not r.get("failed"):  # beside the number: how much of it is no answer
                value += f"  ({run['no_answer']} finished samples without an answer, scored as wrong)"
            lines.append(f"  {run_letter(i)}      {value}")
        for j, d in enumerate(entry["diffs"], 1):
            name = f"{run_letter(j)} - A"
            if d.get("failed"):
                lines.append(f"  {name}  not compared: {run_letter(j)} failed")
                continue
            mark = "significant" if d["significant"] else "not significant"
            ci = _ci(d["ci95"]) or f"[n/a: {d.get('note') or 'no interval'}]"
            lines.append(f"  {name}  {d['diff']:+.4f} {ci}  {p_text(d)} ({d['test']}; {mark} at {result['alpha']})")
            for note in (min_p_note(d, result["alpha"]), disagreement_note(d, result["alpha"])):
                if note:
                    lines.append(f"    {note}")
            if d["most_changed"]:
                moved = ", ".join(
                    f"{c['question_id']} {_fmt(c['baseline'], 2)}->{_fmt(c['run'], 2)}" for c in d["most_changed"]
                )
                lines.append(f"    changed most: {moved}")
    for key, why in (result.get("skipped") or {}).items():
        if not headline_only or is_headline(key):
            lines.append(f"not compared: {key}: {why}")
    lines.append(holm_line(result))
    return "\n".join(lines)


def comparison_grid(result: dict[str, Any], headline_only: bool = True) -> Any:
    """The comparison as a table (``harness compare --format md|latex|csv``): a row per metric and
    run, its value, its difference from the baseline, p, Holm's p and the test; the runs, the
    adjustment, the tests that could not reach 0.05 and the failed runs in the notes."""
    from harness.analysis.grid import Cell, Column, Grid
    from harness.scoring.display import display_name, scale_of

    columns = [
        Column(key="metric", title="Metric", show="csv"),
        Column(key="metric_name", title="Metric", show="print"),
        Column(key="run", title="Run"),
        Column(key="label", title="Label", show="csv"),
        Column(key="path", title="Path", show="csv"),
        Column(key="value", title="Value [95% CI]", kind="score", interval=True),
        Column(key="diff", title="Δ vs A [95% CI]", kind="score", interval=True, signed=True),
        Column(key="p", title="p", kind="p"),
        Column(key="p_holm", title="p (Holm)", kind="p"),
        Column(key="p_min", title="smallest p", kind="p", show="csv"),
        Column(key="p_mc_error", title="p error", kind="p", show="csv"),
        Column(key="significant", title="significant", show="csv"),
        Column(key="test", title="Test"),
        Column(key="status", title="Status", show="csv"),
    ]
    runs = result["runs"]
    rows, notes = [], []
    for key in _shown(result, headline_only):
        entry, scale = result["metrics"][key], scale_of(key)
        for i, r in enumerate(entry["runs"]):
            d = entry["diffs"][i - 1] if i else None
            failed = r.get("failed")
            value = Cell(value=r["value"], ci95=r.get("ci95"), scale=scale, text="failed" if failed else None)
            if d is None:  # the baseline: nothing to take from it
                blank = Cell(absent=True)
                tail = [blank, blank, blank, blank, blank, blank, blank]
            elif failed:
                na = Cell(value=None)
                tail = [Cell(text="not compared"), na, na, na, na, Cell(value=None), na]
            else:
                tail = [
                    Cell(value=d["diff"], ci95=d["ci95"], scale=scale),
                    Cell(value=d["p"]),
                    Cell(value=d["p_holm"]),
                    Cell(value=(d.get("p_min") or {}).get("p")),
                    Cell(value=d.get("p_mc_error")),
                    Cell(value="yes" if d["significant"] else "no"),
                    Cell(value=d["test"]),
                ]
                for note in (min_p_note(d, result["alpha"]), disagreement_note(d, result["alpha"])):
                    if note:
                        notes.append(f"{display_name(key)}, {run_letter(i)} vs A: {note}")
            rows.append(
                [
                    Cell(value=key),
                    Cell(value=display_name(key)),
                    Cell(value=f"{run_letter(i)}: {runs[i]['label']}"),
                    Cell(value=runs[i]["label"]),
                    Cell(value=runs[i]["path"]),
                    value,
                    *tail,
                    Cell(value="failed" if failed else "baseline" if i == 0 else "compared"),
                ]
            )
    lead = [
        f"{run_letter(i)}: {run['label']} ({run['path']})"
        + (f"; search space: {run['search_space']}" if run.get("search_space") else "")
        + (" [baseline]" if i == 0 else "")
        for i, run in enumerate(runs)
    ]
    lead += [f"{run_letter(i)}: {run['no_answer_note']}" for i, run in enumerate(runs) if run.get("no_answer_note")]
    lead += [f"warning: {w}" for w in result.get("warnings") or []]
    failed_notes = [f"{run_letter(i)} failed, not compared: {run['failed']}" for i, run in enumerate(runs) if run.get("failed")]
    shared = f"{result['n_shared']} shared questions" + (
        f", clustered by {result['clustering']['by']}" if result["clustering"].get("by") else ""
    )
    skipped = [f"not compared: {key}: {why}" for key, why in (result.get("skipped") or {}).items()]
    return Grid(columns=columns, rows=rows, notes=[*lead, shared, holm_line(result), *notes, *failed_notes, *skipped])


def plot_comparison(result: dict[str, Any], path: Path) -> list[str]:
    """Write ``comparison_figure`` as a PNG; returns the metrics drawn."""
    import io

    import matplotlib.pyplot as plt

    from harness.records import write_bytes_atomic
    from harness.text import plain_value, replaced_warning

    # a run label holding a lone surrogate (read back from its escape): U+FFFD, said (matplotlib raises on it)
    result, replaced = plain_value(result)
    if replaced:
        replaced_warning(path, replaced)
    fig, keys = comparison_figure(result)
    try:
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png")
    finally:
        plt.close(fig)
    write_bytes_atomic(path, buffer.getvalue())
    return keys


def comparison_figure(result: dict[str, Any]) -> tuple[Any, list[str]]:
    """Each headline difference (run - baseline) with its 95% interval, one row per metric and
    run; every run named in the title and the legend (a failed run as failed, not compared).
    Returns (the matplotlib figure, the metrics drawn)."""
    import textwrap

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from harness.scoring.display import display_name

    keys = _shown(result, headline_only=True)
    runs = result["runs"]
    k = len(runs) - 1
    legend_in = 0.15 + 0.22 * k  # inches below the axes: one legend line per run
    height = 1.6 + legend_in + 0.45 * max(1, len(keys)) * max(1, k)
    fig, ax = plt.subplots(figsize=(9.0, height), dpi=100)
    try:
        ys = []
        for row, key in enumerate(keys):
            for j, d in enumerate(result["metrics"][key]["diffs"]):
                y = row * (k + 1) + j
                letter = run_letter(j + 1)
                text = display_name(key) if k == 1 else f"{display_name(key)} ({letter})"
                ys.append((y, f"{display_name(key)} ({letter}: failed)" if d.get("failed") else text))
                if d.get("failed"):
                    continue
                lo, hi = d["ci95"] or (d["diff"], d["diff"])
                ax.errorbar(
                    [d["diff"]],
                    [y],
                    xerr=[[d["diff"] - lo], [hi - d["diff"]]],
                    fmt="o",
                    capsize=3,
                    color=f"C{j}",
                )
        for j in range(1, len(runs)):  # one legend entry per run, drawn or not
            name = f"{run_letter(j)} - A: {runs[j]['label']}"
            if runs[j].get("failed"):
                ax.plot([], [], "x", color="grey", label=f"{name} (failed, not compared)")
            else:
                ax.plot([], [], "o", color=f"C{j - 1}", label=name)
        ax.axvline(0, color="black", linewidth=0.8)
        ax.set_yticks([y for y, _ in ys], [text for _, text in ys], fontsize="small")
        ax.invert_yaxis()
        ax.set_xlabel("difference from the baseline (95% interval)")
        title = f"{result['n_shared']} shared questions; A (baseline): {runs[0]['label']}"
        ax.set_title("\n".join(textwrap.wrap(title, 90)), fontsize="small")
        ax.grid(True, axis="x", alpha=0.3)
        fig.legend(fontsize="small", loc="lower center", frameon=False)
        fig.tight_layout(rect=(0, legend_in / height, 1, 1))
    except BaseException:
        plt.close(fig)
        raise
    return fig, keys
