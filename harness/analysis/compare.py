"""Paired comparison of runs on the questions they share (``harness compare``, ``harness ablate``'s steps).

Each later run is compared with the first (the baseline), leaf by leaf of every metric all the
runs have, whichever run comes first or has more questions:

* each run's value and 95% interval on the shared questions (as ``scores["uncertainty"]`` computes
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

How a leaf is compared is decided from each run's own aggregate and all of its own rows (a mean
of a per-question value in every run, or not), then every number is recomputed on the shared
questions, taken in one order (sorted ids): compare(B, A) mirrors compare(A, B). A metric is
aggregated by the implementation its runs recorded (a plugin by its reference and sha256 or
version), never by another metric of the same name; when that code cannot be had, or the runs
used different ones, only its means of per-question values are compared and the rest are listed
under ``skipped`` with the reason.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness.errors import HarnessError
from harness.execution.record import RunResults, read_results, results_path
from harness.scoring.results import interval_text, metric_aggregates
from harness.scoring.uncertainty import (
    _flat_leaves,
    bounds_of,
    collapse_repeats,
    declared_sources,
    leaf,
    plan_leaf_of_runs,
    sums_of,
)

ALPHA = 0.05
TOP_CHANGED = 5


@dataclass(frozen=True)
class LoadedRun:
    """A run to compare: where it is, its typed results, and its scores as the scoring functions read them."""

    path: str
    results: RunResults
    scores: dict[str, Any]

    @classmethod
    def of(cls, path: str | Path, results: RunResults) -> LoadedRun:
        return cls(str(path), results, results.scores_dict() or {})


def load_run(path: str | Path) -> LoadedRun:
    """A run directory (or its results.json) with per-question scores and at least one answer;
    one-line errors."""
    run = LoadedRun.of(path, read_results(path))
    nothing = answered_nothing(run.results)
    if nothing:  # unanswered questions score 0: comparing those zeros would look like a result
        raise HarnessError(f"{results_path(path)}: {nothing}: its zero scores measure nothing; rerun it first")
    if not run.scores.get("raw"):
        raise HarnessError(f"{results_path(path)}: no per-question scores (an unscored run: harness score {path} first)")
    return run


def answered_nothing(results: RunResults) -> str | None:
    """Why the run has no answer to measure (no sample finished, or none of the scored questions
    has an answer), or None."""
    counts = results.counts
    meta = results.scores.meta if results.scores is not None else None
    if counts.finished and not (meta is not None and meta.n_answered == 0):
        return None
    failed = Counter(note.type for note in results.failures.values())
    why = ", ".join(f"{n} {kind}" for kind, n in failed.most_common(3))
    if counts.finished == 0:
        return f"the run answered nothing (0 of {counts.selected} samples finished{'; failed: ' + why if why else ''})"
    return f"the run answered nothing ({counts.finished} samples finished, none of them with an answer)"


def dataset_of(run: LoadedRun) -> tuple[str | None, str | None]:
    meta = run.results.scores.meta if run.results.scores is not None else None
    spec = run.results.dataset.spec or (meta.dataset if meta else None)
    return spec, run.results.dataset.sha256 or (meta.dataset_sha256 if meta else None)


def label(run: LoadedRun) -> str:
    r = run.results
    agent = r.agent_name
    parts = [r.config.model, r.setting, agent if agent != r.setting else None]
    ctx = r.context_size
    text = " ".join(str(p) for p in parts if p)
    return f"{text} ctx={ctx}" if ctx else text or run.path


def _implementation(run: LoadedRun, name: str) -> tuple[Any, str, str | None]:
    """(the metric function that scored ``run``'s ``name``, or None; its identity; why None). Taken
    from what the run recorded (a plugin's reference and sha256 or package version), never the
    current registry's ``name``: a plugin may share a built-in's name and aggregate otherwise."""
    from harness.scoring.metrics import METRICS

    info = run.results.scores.meta.metric_info.get(name) or {} if run.results.scores is not None else {}
    record = info.get("plugin") if isinstance(info, dict) else None
    if not isinstance(record, dict):  # built-ins record no plugin
        try:
            entry = METRICS.resolve(name)
        except Exception:  # noqa: BLE001 - any failure is a reason, never a crash
            entry = None
        if entry is None or entry.source != "builtin":
            return None, f"unrecorded:{name}", f"{run.path} does not record which plugin scored {name}"
        return entry.obj, f"builtin:{name}", None
    keys = ("sha256", "package", "version")
    identity = {k: record[k] for k in keys if k in record}
    ref = record.get("ref") or name
    what = f"{name} (plugin {ref}{' sha256 ' + identity['sha256'][:12] if 'sha256' in identity else ''})"
    # a file is its code (sha256) whatever path it was given by; anything else its reference and version
    named = f"file:{ref.rpartition(':')[2]}" if record.get("source") == "file" else f"{record.get('source')}:{ref}"
    ident = f"{named}:" + ",".join(f"{k}={v}" for k, v in identity.items())
    try:
        fn, found = _load_recorded(run, record, name)
    except Exception as exc:  # noqa: BLE001 - a plugin that cannot load here is a reason, not a crash
        return None, ident, f"{run.path}'s {what} cannot be loaded here: {_error_line(exc)}"
    # an in-process registration has no identity to check; anything else must match the record
    if record.get("source") != "registered" and (not identity or any(found.get(k) != v for k, v in identity.items())):
        return None, ident, f"{run.path}'s {what} is not verifiably the code found now (identity differs)"
    return fn, ident, None


def _load_recorded(run: LoadedRun, record: dict[str, Any], name: str) -> tuple[Any, dict[str, Any]]:
    """(function, identity found) of a recorded plugin metric. A ``FILE.py`` is looked for where it
    was given (relative to the current directory), then beside the run; it is executed only when its
    sha256 is the recorded one."""
    import hashlib

    from harness.registry import load_reference
    from harness.scoring.metrics import METRICS

    source, ref = record.get("source"), record.get("ref") or ""
    if source == "file":
        given = Path(record.get("file") or ref.rpartition(":")[0])
        run_dir = Path(run.path) if Path(run.path).is_dir() else Path(run.path).parent
        places = [given] if given.is_absolute() else [given, run_dir / given, run_dir.parent / given]
        for place in places:
            if place.is_file() and hashlib.sha256(place.read_bytes()).hexdigest() == record.get("sha256"):
                fn, _, identity = load_reference(f"{place}:{ref.rpartition(':')[2]}", "metric")
                return fn, identity
        raise HarnessError(f"no file {given} with the recorded sha256 (looked in: {', '.join(map(str, places))})")
    if source == "module":
        fn, _, identity = load_reference(ref, "metric")
        return fn, identity
    if source in ("entry-point", "registered"):  # by the name it was registered under
        entry = METRICS.resolve(record.get("name") or name)
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
        clustering = run.results.scores.meta.clustering if run.results.scores is not None else {}
        if clustering.get("by") and clustering.get("clusters"):
            labels = clustering["clusters"]
            found.append((clustering["by"], [labels.get(q, f"question:{q}") for q in ids]))
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
    from harness.scoring import stats

    if len(runs) < 2:
        raise HarnessError("compare needs at least two runs")
    base_spec, base_sha = dataset_of(runs[0])
    for run in runs[1:]:
        spec, sha = dataset_of(run)
        if (spec, sha) != (base_spec, base_sha) and not allow_mismatch:
            why = f"{spec} vs {base_spec}" if spec != base_spec else f"{spec}: the dataset files differ (sha256)"
            raise HarnessError(
                f"{run.path} and {runs[0].path} score different datasets ({why}); "
                "--allow-mismatch compares them anyway"
            )
    rows = [{r["question_id"]: r for r in collapse_repeats(run.scores["raw"])} for run in runs]
    # one order whichever run comes first: the same resamples and permutations, mirrored results
    shared = sorted((q for q in rows[0] if all(q in other for other in rows[1:])), key=str)
    if not shared:
        raise HarnessError(f"{runs[0].path} and the other runs share no scored question")
    aggs = [metric_aggregates(run.scores) for run in runs]
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
        "runs": [{"path": r.path, "label": label(r), "dataset": dataset_of(r)[0]} for r in runs],
        "baseline": runs[0].path,
        "n_shared": len(shared),
        "n_questions": [len(r) for r in rows],
        "clustering": {"by": cluster_by, "n_clusters": len(set(clusters))} if clusters else {"by": None},
        "alpha": ALPHA,
        "metrics": {},
        "skipped": {},  # "METRIC[.LEAF]": why it is not compared (one line)
    }
    for name in names:
        wanted = [p for p in leaves[name] if not metrics or name in metrics or ".".join((name, *p)) in metrics]
        if not wanted:
            continue
        per = [[rows[i][q].get(name) for q in shared] for i in range(len(runs))]
        if any(v is None or not isinstance(v, dict) for col in per for v in col):
            out["skipped"][name] = "no per-question values for some shared question"
            continue
        fn, why_not = _metric_of_runs(runs, name)
        # each run's aggregate is over all its own rows: its plan is checked against those
        full = [[r[name] for r in rows[i].values() if isinstance(r.get(name), dict)] for i in range(len(runs))]
        declared = declared_sources(fn, aggs[0][name])
        for path in wanted:
            key = ".".join((name, *path))
            values = [_flat_leaves(a[name])[path] for a in aggs]
            plan = plan_leaf_of_runs(path, values, full, declared)
            if plan is not None and plan["kind"] != "mean":
                continue  # a count, or no value: nothing to compare
            if plan is None:
                reason = _no_aggregate(fn, why_not, name, path, per)
                if reason:
                    out["skipped"][key] = f"not a mean of per-question values, and {reason}"
                    continue
            out["metrics"][key] = _compare_leaf(stats, fn, key, path, plan, per, shared, clusters, len(runs))
    if metrics and not out["metrics"]:
        why = "".join(f" ({key}: {reason})" for key, reason in list(out["skipped"].items())[:1])
        raise HarnessError(f"no comparable number among {', '.join(metrics)}{why}")
    if not out["skipped"]:
        del out["skipped"]
    return out


def _no_aggregate(fn, why_not, name, path, per) -> str | None:
    """Why a leaf that is no mean cannot be recomputed on the shared questions (None: it can)."""
    if fn is None:
        return f"{why_not}: no other implementation stands in for it"
    if getattr(fn, "aggregate_rows", None) is None:
        return f"{name} has no aggregate of per-question rows (aggregate_rows) to recompute it on the shared questions"
    for col in per:
        try:
            value = leaf(fn.aggregate_rows(col, len(col)), path)
        except Exception as exc:  # noqa: BLE001 - a metric's failure skips its number, not the comparison
            return f"{name}'s aggregate of the shared rows failed: {_error_line(exc)}"
        if value is None:
            return "the per-question values lack what it is computed from (scored before the metric kept them)"
    return None


def _compare_leaf(stats, fn, key, path, plan, per, shared, clusters, k) -> dict[str, Any]:
    """One leaf's entry: ``plan`` a mean (Wilson/analytic interval; difference: Newcombe's for two
    unclustered shares, else paired bootstrap; McNemar or sign-flip) or None (the metric's own
    aggregate of the shared rows, bootstrapped and swap-tested, whole clusters when clustered)."""
    n = len(shared)
    entry: dict[str, Any] = {"runs": [], "diffs": []}
    if plan is not None:
        raw = [[float(leaf(r, plan["source"])) for r in col] for col in per]
        cols = [[plan["scale"] * v for v in col] for col in raw]
        entry["kind"] = "mean"
        for col, values in zip(cols, raw):
            entry["runs"].append(_short(stats.mean_ci(col, clusters, bounds=bounds_of(key, values, plan["scale"]))))
        binary = stats.is_binary(*raw)  # 0/1 per question (before any x100 scale)
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
    aggregate_rows = fn.aggregate_rows

    def agg(drawn: list[Any]) -> float:
        return float(leaf(aggregate_rows(drawn, len(drawn)), path))

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
    return {**out, "note": entry["note"]} if entry.get("note") else out


def _diff_entry(boot: dict[str, Any], test: dict[str, Any], changed: list[dict[str, Any]]) -> dict[str, Any]:
    out = {
        "diff": boot["value"],
        "stderr": boot["stderr"],
        "ci95": boot["ci95"],
        "interval": boot["method"],
        "p": test["p"],
        "p_mc_error": test.get("p_mc_error"),  # None: an exact p
        "test": test["test"],
        "significant": bool(test["p"] < ALPHA),
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
    """``p = 0.31 ± 0.0046`` (the Monte Carlo error of a permutation p; none for an exact p)."""
    err = d.get("p_mc_error")
    return f"p = {d['p']:.4g}" + (f" ± {err:.2g}" if err else "")


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
    names = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    for i, run in enumerate(result["runs"]):
        lines.append(f"  {names[i]}: {run['path']}  ({run['label']})" + ("  [baseline]" if i == 0 else ""))
    for key, entry in result["metrics"].items():
        if headline_only and not is_headline(key):
            continue
        lines.append(key)
        for i, r in enumerate(entry["runs"]):
            lines.append(f"  {names[i]}      {_fmt(r['value'])}{interval_text(r)}")
        for j, d in enumerate(entry["diffs"], 1):
            mark = "significant" if d["significant"] else "not significant"
            ci = _ci(d["ci95"]) or f"[n/a: {d.get('note') or 'no interval'}]"
            lines.append(
                f"  {names[j]} - A  {d['diff']:+.4f} {ci}  {p_text(d)} ({d['test']}; {mark} at {result['alpha']})"
            )
            if d["most_changed"]:
                moved = ", ".join(
                    f"{c['question_id']} {_fmt(c['baseline'], 2)}->{_fmt(c['run'], 2)}" for c in d["most_changed"]
                )
                lines.append(f"    changed most: {moved}")
    for key, why in (result.get("skipped") or {}).items():
        if not headline_only or is_headline(key):
            lines.append(f"not compared: {key}: {why}")
    return "\n".join(lines)


def plot_comparison(result: dict[str, Any], path: Path) -> list[str]:
    """Each headline difference (run - baseline) with its 95% interval, one row per metric."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from harness.analysis.leaderboard import is_headline
    from harness.records import write_bytes_atomic

    keys = [k for k in result["metrics"] if is_headline(k)]
    k = len(result["runs"]) - 1
    fig, ax = plt.subplots(figsize=(9.0, 1.2 + 0.45 * max(1, len(keys)) * max(1, k)), dpi=100)
    try:
        ys = []
        for row, key in enumerate(keys):
            for j, d in enumerate(result["metrics"][key]["diffs"]):
                y = row * (k + 1) + j
                lo, hi = d["ci95"] or (d["diff"], d["diff"])
                ax.errorbar(
                    [d["diff"]],
                    [y],
                    xerr=[[d["diff"] - lo], [hi - d["diff"]]],
                    fmt="o",
                    capsize=3,
                    color=f"C{j}",
                    label=f"{'BCDEFGHIJ'[j]} - A" if row == 0 else None,
                )
                ys.append((y, key))
        ax.axvline(0, color="black", linewidth=0.8)
        ax.set_yticks([y for y, _ in ys], [key for _, key in ys], fontsize="small")
        ax.invert_yaxis()
        ax.set_xlabel("difference from the baseline (95% interval)")
        ax.set_title(f"{result['n_shared']} shared questions; baseline {result['runs'][0]['label']}", fontsize="small")
        ax.grid(True, axis="x", alpha=0.3)
        if k > 1:
            ax.legend(fontsize="small")
        fig.tight_layout()
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png")
    finally:
        plt.close(fig)
    write_bytes_atomic(path, buffer.getvalue())
    return keys
