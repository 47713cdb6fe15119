"""``harness power``: the number of questions a comparison needs, from a pilot run's per-question spread.

The SD is the per-question one behind the metric's standard error: sd = stderr * sqrt(n), so a
clustered error (TopiOCQA's conversations) carries its design effect into the answer, and a
bootstrapped number (a share above a threshold) its bootstrap spread. Paired (two pilot runs on
the same questions): the SD of the per-question differences of a mean. Normal approximation,
two-sided: n = k (sd (z_{1-alpha/2} + z_{power}) / delta)^2, k = 2 unpaired (per run), 1 paired.
"""

from __future__ import annotations

import math
from typing import Any

from harness.errors import HarnessError


def resolve_metric(name: str, available: list[str]) -> str:
    if name in available:
        return name
    matches = [m for m in available if m.endswith("." + name)]
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise HarnessError(f"--metric {name} is ambiguous: {', '.join(matches)}")
    raise HarnessError(f"--metric {name}: not a number of this run; it has {', '.join(available) or 'none'}")


def power_analysis(
    run_path: str, metric: str, delta: float, alpha: float = 0.05, power: float = 0.8, paired_with: str | None = None
) -> dict[str, Any]:
    from harness.scoring import stats
    from harness.analysis.compare import compare_runs, load_run
    from harness.scoring.scores import Interval
    from harness.scoring.uncertainty import compute_uncertainty

    run = load_run(run_path)
    other = load_run(paired_with) if paired_with else None
    scores = run.scores
    table = scores.intervals()
    if not table:  # a results file from before the error bars: computed now, not written
        from harness.analysis.compare import metric_of_run

        fns = {m: metric_of_run(run, m) for m in scores.metric_aggregates()}
        computed = compute_uncertainty(fns, scores, scores.clusters)
        table = {k: Interval.model_validate(e) for k, e in computed.items()}
    key = resolve_metric(metric, list(table))
    entry = table[key]
    if entry.stderr is None and not entry.no_spread():  # all equal: sd 0, said below
        why = "; ".join(str(v) for v in (entry.method, entry.note) if v)
        raise HarnessError(f"--metric {key}: the run has no standard error for it (n={entry.n}; {why})")
    out: dict[str, Any] = {
        "run": run.path, "metric": key, "delta": delta, "alpha": alpha, "power": power,
        "pilot": {"n": entry.n, "value": entry.value, "stderr": entry.stderr, "method": entry.method},
        **({"note": entry.note} if entry.note else {}),
    }
    if other is not None:
        result = compare_runs([run, other], metrics=[key])
        if key not in result["metrics"]:
            raise HarnessError(f"--metric {key}: not comparable between the two runs")
        diff = result["metrics"][key]["diffs"][0]
        if diff["stderr"] is None and not stats.measured_no_spread(diff):
            raise HarnessError(f"--metric {key}: the paired difference has no standard error ({diff.get('note')})")
        n = result["n_shared"]
        sd = (diff["stderr"] or 0.0) * math.sqrt(n)
        out.update(design="paired", paired_with=other.path, n_shared=n, sd=sd, observed_diff=diff["diff"])
    else:
        n = entry.n
        sd = (entry.stderr or 0.0) * math.sqrt(n)
        out.update(design="unpaired (two independent runs)", sd=sd)
    paired = bool(paired_with)
    out["n_required"] = stats.required_n(sd, delta, alpha, power, paired=paired) if sd > 0 else None
    out["detectable_now"] = stats.detectable_delta(sd, n, alpha, power, paired=paired) if n else None
    out["n_now"] = n
    return out


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4f}"


def format_power(r: dict[str, Any]) -> str:
    pilot = r["pilot"]
    per = "per run" if r["design"].startswith("unpaired") else "shared by both runs"
    lines = [
        f"{r['metric']}: pilot {pilot['value']:.4f} ± {_fmt(pilot['stderr'])} (n={pilot['n']}, {pilot['method']}); "
        f"per-question SD {r['sd']:.4f} ({r['design']})",
    ]
    if r["n_required"] is None:
        why = r.get("note") or "every question scored the same"
        lines.append(f"the pilot shows no spread ({why}): no sample size can be estimated")
    else:
        lines.append(
            f"to detect a difference of {r['delta']:g} with power {r['power']:g} at alpha {r['alpha']:g} (two-sided): "
            f"{r['n_required']} questions {per}"
        )
        lines.append(f"with the {r['n_now']} questions of the pilot, the smallest detectable difference is {r['detectable_now']:.4f}")
    return "\n".join(lines)
