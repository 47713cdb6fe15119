"""``harness leaderboard DIR [DIR ...]``: every run under the folders (links followed, each real run
once: ``harness.analysis.runs``) as one row (model x dataset x version x setting x agent), with
every metric, the run's facts (context size, native tool calling, tokens, cost, path), as JSON and
as a markdown table. Runs that share a key are separate rows, told apart by the knobs whose values
differ. A run in which no question was answered is failed: its values are null (``n/a``), never 0,
and it sorts after the runs that have values. Every folder passed over is listed with the reason."""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from harness.analysis.runs import Skipped, find_runs
from harness.errors import HarnessError
from harness.execution.config import BACKEND_NOT_HASHED, NOT_HASHED, RunConfig
from harness.execution.record import CostRecord, Decoding, RunResults, mixed_spaces_warning, read_results
from harness.records import RESULTS_FILE
from harness.redact import strip_credentials
from harness.scoring.display import display_name
from harness.scoring.results import (
    breakdown_values,
    count_values,
    headline_of,
    metric_aggregates,
    scale_of,
    score_values,
)

# Identity of a row (shown in its own columns, never as a knob)
KEY_FIELDS = ("model", "dataset", "split", "version", "setting", "agent")
NOT_KNOBS = NOT_HASHED | BACKEND_NOT_HASHED | {"model", "dataset", "setting", "agent"}


is_headline = headline_of  # shown in tables and plots: F-scores and accuracies, not precision/recall


def _flat_config(config: RunConfig, endpoint: str | None = None) -> dict[str, Any]:
    """Config leaves under their flag names (generation and backend knobs unnested). A knob that a
    run from an older harness did not record has its default (the typed record fills it), so it
    does not show as a difference. The endpoint a backend recorded is one too (two servers behind
    OPENAI_BASE_URL are two runs)."""
    out: dict[str, Any] = {}
    for key, value in config.model_dump(mode="json").items():
        if key in ("generation", "backend") and isinstance(value, dict):
            for sub, v in value.items():
                if sub not in NOT_KNOBS:
                    out[sub] = v
        elif key not in NOT_KNOBS:
            out[key] = value
    if out.get("base_url"):  # a run from before URLs were stripped of credentials shows none either
        out["base_url"] = strip_credentials(out["base_url"])
    if endpoint:
        out["endpoint"] = strip_credentials(endpoint)
    return out


def null_values(scores: dict[str, Any] | None) -> list[str]:
    """The ``METRIC.NAME`` leaves whose value is null (no value: nothing answered, a judge unavailable)."""
    out: list[str] = []

    def walk(values: dict[str, Any], prefix: str) -> None:
        for key, value in values.items():
            if isinstance(value, dict):
                walk(value, f"{prefix}{key}.")
            elif value is None:
                out.append(f"{prefix}{key}")

    walk(metric_aggregates(scores), "")
    return out


def n_answered(results: RunResults) -> int:
    """Questions answered: the scores' count where they have one, else the finished samples."""
    meta = results.scores.meta if results.scores is not None else None
    n = getattr(meta, "n_answered", None)
    return n if n is not None else results.counts.finished


def failure_note(results: RunResults) -> str | None:
    """``3 of 3 failed: model_unavailable (3)``, with the questions never asked; None when none failed."""
    counts = results.counts
    if not counts.failed and not counts.pending:
        return None
    parts = []
    if counts.failed:
        types = Counter(note.type for note in results.failures.values())
        kinds = ", ".join(f"{t} ({n})" for t, n in types.most_common())
        parts.append(f"{counts.failed} of {counts.selected} failed" + (f": {kinds}" if kinds else ""))
    if counts.pending:
        parts.append(f"{counts.pending} of {counts.selected} never asked")
    return "; ".join(parts)


def load_row(run_dir: Path) -> dict[str, Any]:
    """One run as a leaderboard row; HarnessError (one line) when results.json is unusable."""
    return row_of(read_results(run_dir / RESULTS_FILE), run_dir)


def row_of(results: RunResults, run_dir: Path) -> dict[str, Any]:
    """A run's leaderboard row (also the data frames' row of it: ``harness.analysis.frames``)."""
    scores = results.scores_dict()
    cost = results.cost or CostRecord()
    price = cost.price or {}
    metrics: dict[str, float | None] = dict(score_values(scores))  # METRIC.NAME scores; counts apart
    answered = n_answered(results)
    note = failure_note(results)
    info = results.scores.meta.metric_info if results.scores is not None else {}
    null_reasons: dict[str, str] = {}
    for key in null_values(scores):
        metrics[key] = None
        null_reasons[key] = (info.get(key.split(".", 1)[0]) or {}).get("reason") or note or "no value"
    failed = answered == 0 and bool(metrics)
    if failed:  # nothing answered: whatever a run from before this rule stored (0.0), no value
        for key in metrics:
            metrics[key] = None
            null_reasons[key] = f"no question answered ({note})" if note else "no question answered"
    errors = results.scores.uncertainty if results.scores is not None else {}  # none before the error bars
    return {
        "model": results.config.model,
        "dataset": results.dataset.name,
        "split": results.dataset.split,
        "version": results.dataset.version,
        "setting": results.setting,
        "agent": results.agent_name,
        "knobs": {},
        "run_id": results.run_id,
        "status": results.status,
        "n_scored": results.scores.meta.n_questions if results.scores is not None else None,
        "n_selected": results.counts.selected,
        "n_finished": results.counts.finished,
        "n_failed": results.counts.failed,
        "n_pending": results.counts.pending,
        "n_answered": answered,
        # nothing answered: every value null (a failed run is never ranked as 0)
        "failed": failed,
        "failure_note": note,
        "metrics": metrics,
        "null_reasons": null_reasons,
        "score_counts": count_values(scores),  # e.g. topiocqa.turns: not a score, never a metric column
        # {group: {value: {"n", METRIC.NAME: mean}}}: FanOutQA category, QAMPARI type, ...
        "breakdown": breakdown_values(scores),
        # next to each value: its standard error and 95% interval (None: no interval, e.g. a count)
        "stderr": {m: None if failed else (errors.get(m) or {}).get("stderr") for m in metrics if m in errors},
        "ci95": {m: None if failed else (errors.get(m) or {}).get("ci95") for m in metrics if m in errors},
        "uncertainty_method": {m: errors[m].get("method") for m in metrics if m in errors},
        # why a value has no standard error (all values equal, one cluster): shown as ± n/a
        "uncertainty_note": {m: errors[m]["note"] for m in metrics if (errors.get(m) or {}).get("note")},
        "tokens": results.tokens.model_dump(mode="json") if results.tokens is not None else None,
        "cost_usd": cost.total_usd,
        "cost_per_sample_usd": cost.per_sample_usd,
        "spent_usd": cost.spent_usd,
        "cost_note": price.get("reason") or price.get("note"),
        "context_size": results.context_size,
        "native_tool_calling": results.native_tool_calling,
        # the conditions of the numbers on the model side: budget and its source, effort, API, facts
        "decoding": results.decoding().model_dump(mode="json"),
        # what the strategies searched: an evidence-only space's numbers never stand unlabelled beside others
        "search_space": results.search_space.model_dump(mode="json") if results.search_space is not None else None,
        "backend": results.backend,
        "path": str(run_dir),
        "config_hash": results.config_hash,
        "ended_at": results.ended_at,
        "_config": _flat_config(results.config, results.model.endpoint if results.model else None),
    }


def _differing_knobs(rows: list[dict[str, Any]]) -> None:
    """Within each key, the knobs whose values differ between its runs."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(tuple(row[k] for k in KEY_FIELDS), []).append(row)
    for members in groups.values():
        if len(members) < 2:
            continue
        names = sorted({k for r in members for k in r["_config"]})
        differing = [n for n in names if len({json.dumps(r["_config"].get(n), sort_keys=True) for r in members}) > 1]
        for r in members:
            r["knobs"] = {n: r["_config"].get(n) for n in differing} or {"run": r["run_id"]}


def build_leaderboard(roots: str | Path | list[str | Path]) -> dict[str, Any]:
    """The leaderboard of every run under ``roots`` (a folder or several)."""
    roots = [roots] if isinstance(roots, (str, Path)) else list(roots)
    search = find_runs(roots)
    rows: list[dict[str, Any]] = []
    skipped = list(search.skipped)
    for run_dir in search.runs:
        try:
            rows.append(load_row(run_dir))
        except HarnessError as exc:  # the message names the file and what is wrong with it
            skipped.append(Skipped(path=str(run_dir), reason=str(exc)))
    if not rows:
        said = "; ".join(f"{s.path}: {s.reason}" for s in skipped[:3]) + ("; ..." if len(skipped) > 3 else "")
        passed = f"; passed over: {said}" if skipped else ""
        raise HarnessError(f"no runs (folders with {RESULTS_FILE}) under {', '.join(map(str, roots))}{passed}")
    _differing_knobs(rows)
    rows.sort(
        key=lambda r: (r["failed"], [str(r[k]) for k in KEY_FIELDS], json.dumps(r["knobs"], sort_keys=True), r["path"])
    )
    metrics: list[str] = []
    for r in rows:
        metrics += [m for m in r["metrics"] if m not in metrics]
        del r["_config"]
    warnings = []
    by_id: dict[str, list[str]] = {}
    for r in rows:
        by_id.setdefault(r["run_id"], []).append(r["path"])
    for run_id, paths in by_id.items():
        if len(paths) > 1:
            warnings.append(f"run {run_id} is in {len(paths)} folders ({', '.join(paths)}): copies? each is listed")
    mixed = mixed_spaces_warning([(r["path"], r.get("search_space")) for r in rows])
    if mixed:
        warnings.append(mixed)
    return {
        "roots": [str(r) for r in roots],
        "generated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "key": list(KEY_FIELDS),
        "metrics": metrics,
        # each metric column has one scale: TopiOCQA's official EM/F1/BLEU are 0-100, the rest 0-1
        "scales": {m: scale_of(m) for m in metrics},
        "labels": {m: display_name(m) for m in metrics},
        "rows": rows,
        "skipped": [s.model_dump() for s in skipped],
        "warnings": warnings,
    }


def _cell(value: Any, digits: int = 4) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value).replace("|", "\\|").replace("\n", " ")


def _with_error(value: Any, stderr: Any, note: Any = None) -> Any:
    """``0.4100 ± 0.0300``; ``0.0000 ± n/a`` where the run says why there is none (``note``: all
    values equal, one cluster); the value alone without an error bar."""
    if value is None or (stderr is None and not note):
        return value
    return f"{_cell(value)} ± {'n/a' if stderr is None else _cell(stderr)}"


def column_labels(metrics: list[str], scales: dict[str, Any]) -> dict[str, str]:
    """``Set F1 (0-1)``: each metric's display name and scale; two metrics that would read the same
    are told apart by their keys."""
    labels = {m: f"{display_name(m)} ({scales.get(m) or scale_of(m)})" for m in metrics}
    repeated = {label for label in labels.values() if list(labels.values()).count(label) > 1}
    return {m: f"{label} [{m}]" if label in repeated else label for m, label in labels.items()}


def _status(r: dict[str, Any]) -> str:
    """The run's status; ``failed (3 of 3)`` when nothing was answered."""
    if r.get("failed"):
        lost = (r.get("n_failed") or 0) + (r.get("n_pending") or 0)
        return f"failed ({lost} of {r.get('n_selected')})"
    return str(r["status"])


def _failed_cell(r: dict[str, Any]) -> str:
    """Questions that failed, and those never asked: ``2``, ``1 + 2 not asked``."""
    failed, pending = r.get("n_failed") or 0, r.get("n_pending") or 0
    return f"{failed} + {pending} not asked" if pending else str(failed)


def _metric_cell(r: dict[str, Any], m: str) -> Any:
    """The value with its error bar; ``n/a`` for a null value (nothing answered, a judge
    unavailable: the JSON's null_reasons says why); ``—`` where the run has no such metric."""
    if m not in r["metrics"]:
        return None
    value = r["metrics"][m]
    if value is None:
        return "n/a"
    return _with_error(value, *((r.get(k) or {}).get(m) for k in ("stderr", "uncertainty_note")))


def format_markdown(board: dict[str, Any]) -> str:
    metrics = [m for m in board["metrics"] if is_headline(m)]
    by_key = column_labels(metrics, board.get("scales") or {})
    labels = [by_key[m] for m in metrics]
    head = ["model", "dataset", "setting", "agent", "knobs", "n", "failed", "status", *labels]
    head += ["tokens", "cost USD", "USD/sample", "context", "native tools", "decoding", "search space", "path"]
    numeric = {*labels, "n", "failed"}
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---:" if h in numeric else "---" for h in head) + "|"]
    for r in board["rows"]:
        knobs = ", ".join(f"{k}={json.dumps(v) if not isinstance(v, str) else v}" for k, v in r["knobs"].items())
        answered = r.get("n_answered")
        cells = [
            r["model"],
            f"{r['dataset']}:{r['split']}@{r['version']}",
            r["setting"],
            r["agent"],
            knobs,
            answered if answered is not None else r["n_finished"],
            _failed_cell(r),
            _status(r),
            *[_metric_cell(r, m) for m in metrics],
            (r["tokens"] or {}).get("total"),
            _cell(r["cost_usd"], 6) if r["cost_usd"] is not None else "—",
            _cell(r["cost_per_sample_usd"], 6) if r["cost_per_sample_usd"] is not None else "—",
            r["context_size"],
            r["native_tool_calling"],
            Decoding.model_validate(r["decoding"]).label() if r.get("decoding") else "—",
            (r.get("search_space") or {}).get("label") or "—",
            r["path"],
        ]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines)
