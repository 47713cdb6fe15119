"""``harness leaderboard DIR [DIR ...]``: every run under the folders (links followed, each real run
once: ``harness.analysis.runs``) as one row (model x dataset x version x setting x agent), with
every metric, the run's facts (context size, native tool calling, tokens, cost, path), as JSON and
as a markdown table. Runs that share a key are separate rows, told apart by the knobs whose values
differ. A run in which no sample finished is failed: its values are null (``n/a``), never 0, and it
sorts after the runs that have values. Samples that finished without an answer (``max_steps``, ...)
are counted beside the numbers with why (``harness.analysis.row``: answered is computed there once);
they are scored as wrong. Every folder passed over is listed with the reason."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from harness.analysis.row import Outcomes, RunRow
from harness.analysis.runs import Skipped, find_runs
from harness.errors import HarnessError
from harness.execution.config import BACKEND_NOT_HASHED, NOT_HASHED, RunConfig
from harness.execution.record import Decoding, RunResults, mixed_spaces_warning, read_results
from harness.records import RESULTS_FILE
from harness.redact import strip_credentials
from harness.scoring.display import display_name
from harness.scoring.results import headline_of, scale_of

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


def load_row(run_dir: Path) -> dict[str, Any]:
    """One run as a leaderboard row; HarnessError (one line) when results.json is unusable."""
    return row_of(read_results(run_dir / RESULTS_FILE), run_dir)


def row_of(results: RunResults, run_dir: Path) -> dict[str, Any]:
    """A run's leaderboard row: its typed row (``harness.analysis.row.RunRow``) as JSON, with the
    leaderboard's own keys."""
    row = RunRow.of(results, run_dir)
    o = row.outcomes
    return {
        "model": row.model,
        "dataset": row.dataset,
        "split": row.split,
        "version": row.version,
        "setting": row.setting,
        "agent": row.agent,
        "knobs": {},
        "run_id": row.run_id,
        "status": row.status,
        "n_questions": row.questions,
        "n_scored": row.scored,  # questions with values (each finished sample's, answered or not)
        "n_selected": o.selected,
        "n_finished": o.finished,
        "n_failed": o.failed,
        "n_pending": o.pending,
        "n_answered": o.answered,  # samples that finished with an answer (harness.analysis.row)
        # how the samples ended (finished without an answer, by outcome; failed, by type; steps or
        # tool calls unreadable), and the one line saying those without an answer
        "outcomes": o.model_dump(mode="json"),
        "outcome_note": o.note(),
        # nothing scored: every value null (a failed run is never ranked as 0)
        "failed": row.failed,
        "failure_note": row.failure_note,
        "metrics": row.metrics,
        "null_reasons": row.null_reasons,
        "score_counts": row.score_counts,  # e.g. topiocqa.turns: not a score, never a metric column
        # {group: {value: {"n", METRIC.NAME: mean}}}: FanOutQA category, QAMPARI type, ...
        "breakdown": row.breakdown,
        # next to each value: its standard error and 95% interval (None: no interval, e.g. a count)
        "stderr": row.stderr,
        "ci95": row.ci95,
        "uncertainty_method": row.uncertainty_method,
        # why a value has no standard error (all values equal, one cluster): shown as ± n/a
        "uncertainty_note": row.uncertainty_note,
        "tokens": row.tokens.model_dump(mode="json") if row.tokens is not None else None,
        "cost_usd": row.cost_usd,
        "cost_per_sample_usd": row.cost_per_sample_usd,
        "spent_usd": row.spent_usd,
        "cost_note": row.cost_note,
        "context_size": row.context_size,
        "native_tool_calling": row.native_tool_calling,
        # the conditions of the numbers on the model side: budget and its source, effort, API, facts
        "decoding": row.decoding.model_dump(mode="json"),
        # what the strategies searched: an evidence-only space's numbers never stand unlabelled beside others
        "search_space": row.search_space.model_dump(mode="json") if row.search_space is not None else None,
        "backend": row.backend,
        "path": row.path,
        "config_hash": row.config_hash,
        "ended_at": row.ended_at,
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
    """The run's status; ``failed (3 of 3)`` when nothing was answered; ``no answer (10 of 10)``
    when samples finished and none of them with an answer (their values are scored as wrong)."""
    if r.get("failed"):
        lost = (r.get("n_failed") or 0) + (r.get("n_pending") or 0)
        return f"failed ({lost} of {r.get('n_selected')})"
    if r.get("n_finished") and r.get("n_answered") == 0:
        return f"no answer ({r['n_finished']} of {r['n_finished']})"
    return str(r["status"])


def _failed_cell(r: dict[str, Any]) -> str:
    """Questions that failed, and those never asked: ``2``, ``1 + 2 not asked``."""
    failed, pending = r.get("n_failed") or 0, r.get("n_pending") or 0
    return f"{failed} + {pending} not asked" if pending else str(failed)


def _no_answer_cell(r: dict[str, Any]) -> str:
    """Finished samples without an answer and why: ``10 (max_steps 10; 70 of 70 steps unreadable)``."""
    return Outcomes.model_validate(r["outcomes"]).cell() if r.get("outcomes") else "—"


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
    head = ["model", "dataset", "setting", "agent", "knobs", "n", "failed", "no answer", "status", *labels]
    head += ["tokens", "cost USD", "USD/sample", "context", "native tools", "decoding", "search space", "path"]
    numeric = {*labels, "n", "failed"}
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---:" if h in numeric else "---" for h in head) + "|"]
    for r in board["rows"]:
        knobs = ", ".join(f"{k}={json.dumps(v) if not isinstance(v, str) else v}" for k, v in r["knobs"].items())
        scored = r.get("n_scored")
        cells = [
            r["model"],
            f"{r['dataset']}:{r['split']}@{r['version']}",
            r["setting"],
            r["agent"],
            knobs,
            scored if scored is not None else r.get("n_answered"),
            _failed_cell(r),
            _no_answer_cell(r),
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
