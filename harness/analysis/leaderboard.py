"""``harness leaderboard DIR``: every run under a folder as one row (model x dataset x version x
setting x agent), with every metric, the run's facts (context size, native tool calling, tokens,
cost, path), as JSON and as a markdown table. Runs that share a key are separate rows, told apart
by the knobs whose values differ."""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from harness.errors import HarnessError
from harness.execution.config import BACKEND_NOT_HASHED, NOT_HASHED, RunConfig
from harness.execution.record import CostRecord, read_results
from harness.records import RESULTS_FILE
from harness.redact import strip_credentials
from harness.scoring.results import (
    breakdown_values,
    count_values,
    headline_of,
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


def find_runs(root: Path) -> list[Path]:
    runs = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        if RESULTS_FILE in filenames:
            runs.append(Path(dirpath))
    return runs


def load_row(run_dir: Path) -> dict[str, Any]:
    """One run as a leaderboard row; HarnessError (one line) when results.json is unusable."""
    results = read_results(run_dir / RESULTS_FILE)
    scores = results.scores_dict()
    cost = results.cost or CostRecord()
    price = cost.price or {}
    metrics = score_values(scores)  # METRIC.NAME scores; counts apart
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
        "metrics": metrics,
        "score_counts": count_values(scores),  # e.g. topiocqa.turns: not a score, never a metric column
        # {group: {value: {"n", METRIC.NAME: mean}}}: FanOutQA category, QAMPARI type, ...
        "breakdown": breakdown_values(scores),
        # next to each value: its standard error and 95% interval (None: no interval, e.g. a count)
        "stderr": {m: (errors.get(m) or {}).get("stderr") for m in metrics if m in errors},
        "ci95": {m: (errors.get(m) or {}).get("ci95") for m in metrics if m in errors},
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


def build_leaderboard(root: str | Path) -> dict[str, Any]:
    root = Path(root)
    if not root.is_dir():
        raise HarnessError(f"not a folder: {root}")
    rows, warnings = [], []
    for run_dir in find_runs(root):
        try:
            rows.append(load_row(run_dir))
        except HarnessError as exc:
            warnings.append(f"{exc}; skipped")
    if not rows and not warnings:
        raise HarnessError(f"no runs (folders with {RESULTS_FILE}) under {root}")
    _differing_knobs(rows)
    rows.sort(key=lambda r: ([str(r[k]) for k in KEY_FIELDS], json.dumps(r["knobs"], sort_keys=True), r["path"]))
    metrics: list[str] = []
    for r in rows:
        metrics += [m for m in r["metrics"] if m not in metrics]
        del r["_config"]
    return {
        "root": str(root),
        "generated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "key": list(KEY_FIELDS),
        "metrics": metrics,
        # each metric column has one scale: TopiOCQA's official EM/F1/BLEU are 0-100, the rest 0-1
        "scales": {m: scale_of(m) for m in metrics},
        "rows": rows,
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


def format_markdown(board: dict[str, Any]) -> str:
    metrics = [m for m in board["metrics"] if is_headline(m)]
    scales = board.get("scales") or {}
    labels = [f"{m} ({scales.get(m) or scale_of(m)})" for m in metrics]
    head = ["model", "dataset", "setting", "agent", "knobs", "n", "status", *labels]
    head += ["tokens", "cost USD", "USD/sample", "context", "native tools", "path"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---:" if h in labels else "---" for h in head) + "|"]
    for r in board["rows"]:
        knobs = ", ".join(f"{k}={json.dumps(v) if not isinstance(v, str) else v}" for k, v in r["knobs"].items())
        cells = [
            r["model"],
            f"{r['dataset']}:{r['split']}@{r['version']}",
            r["setting"],
            r["agent"],
            knobs,
            r["n_scored"] if r["n_scored"] is not None else r["n_finished"],
            r["status"],
            *[
                _with_error(r["metrics"].get(m), *((r.get(k) or {}).get(m) for k in ("stderr", "uncertainty_note")))
                for m in metrics
            ],
            (r["tokens"] or {}).get("total"),
            _cell(r["cost_usd"], 6) if r["cost_usd"] is not None else "—",
            _cell(r["cost_per_sample_usd"], 6) if r["cost_per_sample_usd"] is not None else "—",
            r["context_size"],
            r["native_tool_calling"],
            r["path"],
        ]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines)
