"""``harness leaderboard DIR [DIR ...]``: every run under the folders (links followed, each real run
once: ``harness.analysis.runs``) as one row (model x dataset x version x setting x agent), with
every metric, the run's facts (context size, native tool calling, tokens, cost, path), as JSON and
as a markdown table. Runs that share a key are separate rows, told apart by the knobs whose values
differ. A run in which no sample finished is failed: its values are null (``n/a``), never 0, and it
sorts after the runs that have values. Samples that finished without an answer (``max_steps``, ...)
are counted beside the numbers with why (``harness.analysis.row``: answered is computed there once);
they are scored as wrong. Every folder passed over is listed with the reason. Retriever evaluations
(``harness retrieval-eval --out-dir``: a folder with ``retrieval.json``) are rows of their own
(``harness.analysis.retrievers``): the JSON's ``retrievers``, their own markdown table, never mixed
with the runs."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, WrapSerializer

from harness.analysis.retrievers import RetrieverRow, format_retrievers, load_retriever_row, retriever_metrics
from harness.analysis.row import RunRow
from harness.analysis.runs import Skipped, find_runs
from harness.errors import HarnessError
from harness.execution.record import mixed_spaces_warning, read_results
from harness.records import RESULTS_FILE
from harness.scoring.display import display_name
from harness.scoring.results import headline_of, scale_of

# Identity of a row (shown in its own columns, never as a knob): ``RunRow.key``
KEY_FIELDS = ("model", "dataset", "split", "version", "setting", "agent")

is_headline = headline_of  # shown in tables and plots: F-scores and accuracies, not precision/recall

# The leaderboard JSON's row (its file format): these of RunRow's dumped fields, in this order
ROW_KEYS = (
    *KEY_FIELDS,
    "knobs",
    "run_id",
    "status",
    "n_questions",
    "n_scored",  # questions with values (each finished sample's, answered or not)
    "n_selected",
    "n_finished",
    "n_failed",
    "n_pending",
    "n_answered",  # samples that finished with an answer (harness.analysis.row)
    # how the samples ended (finished without an answer, by outcome; failed, by type; steps or tool
    # calls unreadable), and the one line saying those without an answer
    "outcomes",
    "outcome_note",
    "failed",  # nothing scored: every value null (a failed run is never ranked as 0)
    "failure_note",
    "metrics",
    "null_reasons",
    "score_counts",  # e.g. topiocqa.turns: not a score, never a metric column
    "breakdown",  # {group: {value: {"n", METRIC.NAME: mean}}}: FanOutQA category, QAMPARI type, ...
    "stderr",  # next to each value: its standard error and 95% interval (None: no interval)
    "ci95",
    "uncertainty_method",
    "uncertainty_note",  # why a value has no standard error (all values equal, one cluster): ± n/a
    "tokens",
    "cost_usd",
    "cost_per_sample_usd",
    "spent_usd",
    "cost_note",
    "context_size",
    "native_tool_calling",
    "decoding",  # the conditions of the numbers on the model side: budget and its source, effort, API
    "search_space",  # what the strategies searched: an evidence-only space's numbers never unlabelled
    "backend",
    "path",
    "config_hash",
    "ended_at",
)


def _row_json(row: RunRow, dump: Any) -> dict[str, Any]:
    """A row as the leaderboard JSON holds it: the typed row dumped, the leaderboard's fields in order."""
    dumped = dump(row)
    return {key: dumped[key] for key in ROW_KEYS}


class Leaderboard(BaseModel):
    """Every run under the folders, one typed row each (``RunRow``); ``to_json`` is what ``--out`` writes."""

    roots: list[str]
    generated_at: str
    key: list[str] = list(KEY_FIELDS)
    metrics: list[str]  # every metric of the rows, in the order first met
    # each metric column has one scale: TopiOCQA's official EM/F1/BLEU are 0-100, the rest 0-1
    scales: dict[str, str]
    labels: dict[str, str]
    rows: list[Annotated[RunRow, WrapSerializer(_row_json)]]
    skipped: list[Skipped]
    warnings: list[str]
    # retriever evaluations (retrieval.json folders): their own rows and columns, never runs
    retrievers: list[RetrieverRow] = []
    retriever_metrics: list[str] = []

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)


def load_row(run_dir: Path) -> RunRow:
    """One run as a leaderboard row; HarnessError (one line) when results.json is unusable."""
    return RunRow.of(read_results(run_dir / RESULTS_FILE), run_dir)


def _differing_knobs(rows: list[RunRow]) -> None:
    """Within each key, the knobs whose values differ between its runs."""
    groups: dict[tuple, list[RunRow]] = {}
    for row in rows:
        groups.setdefault(row.key, []).append(row)
    for members in groups.values():
        if len(members) < 2:
            continue
        names = sorted({k for r in members for k in r.config})
        differing = [n for n in names if len({json.dumps(r.config.get(n), sort_keys=True) for r in members}) > 1]
        for r in members:
            r.knobs = {n: r.config.get(n) for n in differing} or {"run": r.run_id}


def build_leaderboard(roots: str | Path | list[str | Path]) -> Leaderboard:
    """The leaderboard of every run under ``roots`` (a folder or several)."""
    roots = [roots] if isinstance(roots, (str, Path)) else list(roots)
    search = find_runs(roots)
    rows: list[RunRow] = []
    skipped = list(search.skipped)
    for run_dir in search.runs:
        try:
            rows.append(load_row(run_dir))
        except HarnessError as exc:  # the message names the file and what is wrong with it
            skipped.append(Skipped(path=str(run_dir), reason=str(exc)))
    retrievers: list[RetrieverRow] = []
    for folder in search.retrievals:
        try:
            retrievers.append(load_retriever_row(folder))
        except HarnessError as exc:
            skipped.append(Skipped(path=str(folder), reason=str(exc)))
    retrievers.sort(key=lambda r: r.sort_key)
    if not rows and not retrievers:
        said = "; ".join(f"{s.path}: {s.reason}" for s in skipped[:3]) + ("; ..." if len(skipped) > 3 else "")
        passed = f"; passed over: {said}" if skipped else ""
        raise HarnessError(f"no runs (folders with {RESULTS_FILE}) under {', '.join(map(str, roots))}{passed}")
    _differing_knobs(rows)
    rows.sort(key=lambda r: (r.failed, [str(k) for k in r.key], json.dumps(r.knobs, sort_keys=True), r.path))
    metrics: list[str] = []
    for r in rows:
        metrics += [m for m in r.metrics if m not in metrics]
    warnings = []
    by_id: dict[str, list[str]] = {}
    for r in rows:
        by_id.setdefault(r.run_id, []).append(r.path)
    for run_id, paths in by_id.items():
        if len(paths) > 1:
            warnings.append(f"run {run_id} is in {len(paths)} folders ({', '.join(paths)}): copies? each is listed")
    mixed = mixed_spaces_warning([(r.path, r.search_space) for r in rows])
    if mixed:
        warnings.append(mixed)
    return Leaderboard(
        roots=[str(r) for r in roots],
        generated_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        metrics=metrics,
        scales={m: scale_of(m) for m in metrics},
        labels={m: display_name(m) for m in metrics},
        rows=rows,
        skipped=skipped,
        warnings=warnings,
        retrievers=retrievers,
        retriever_metrics=retriever_metrics(retrievers),
    )


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


def _status(r: RunRow) -> str:
    """The run's status; ``failed (3 of 3)`` when nothing was answered; ``no answer (10 of 10)``
    when samples finished and none of them with an answer (their values are scored as wrong)."""
    o = r.outcomes
    if r.failed:
        return f"failed ({o.failed + o.pending} of {o.selected})"
    if o.no_answer:
        return f"no answer ({o.finished} of {o.finished})"
    return r.status


def _failed_cell(r: RunRow) -> str:
    """Questions that failed, and those never asked: ``2``, ``1 + 2 not asked``."""
    o = r.outcomes
    return f"{o.failed} + {o.pending} not asked" if o.pending else str(o.failed)


def _metric_cell(r: RunRow, m: str) -> Any:
    """The value with its error bar; ``n/a`` for a null value (nothing answered, a judge
    unavailable: the JSON's null_reasons says why); ``—`` where the run has no such metric."""
    if m not in r.metrics:
        return None
    value = r.metrics[m]
    if value is None:
        return "n/a"
    return _with_error(value, r.stderr.get(m), r.uncertainty_note.get(m))


def format_markdown(board: Leaderboard) -> str:
    """The runs' table, then the retrievers' (``## Retrievers``) where there are any: two tables."""
    parts = [_runs_markdown(board)] if board.rows or not board.retrievers else []
    if board.retrievers:
        parts.append(format_retrievers(board.retrievers))
    return "\n\n".join(parts)


def _runs_markdown(board: Leaderboard) -> str:
    metrics = [m for m in board.metrics if is_headline(m)]
    by_key = column_labels(metrics, board.scales)
    labels = [by_key[m] for m in metrics]
    head = ["model", "dataset", "setting", "agent", "knobs", "n", "failed", "no answer", "status", *labels]
    head += ["tokens", "cost USD", "USD/sample", "context", "native tools", "decoding", "search space", "path"]
    numeric = {*labels, "n", "failed"}
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---:" if h in numeric else "---" for h in head) + "|"]
    for r in board.rows:
        knobs = ", ".join(f"{k}={json.dumps(v) if not isinstance(v, str) else v}" for k, v in r.knobs.items())
        cells = [
            r.model,
            f"{r.dataset}:{r.split}@{r.version}",
            r.setting,
            r.agent,
            knobs,
            r.scored if r.scored is not None else r.answered,
            _failed_cell(r),
            r.outcomes.cell(),
            _status(r),
            *[_metric_cell(r, m) for m in metrics],
            r.tokens.total if r.tokens is not None else None,
            _cell(r.cost_usd, 6) if r.cost_usd is not None else "—",
            _cell(r.cost_per_sample_usd, 6) if r.cost_per_sample_usd is not None else "—",
            r.context_size,
            r.native_tool_calling,
            r.decoding.label(),
            (r.search_space.label if r.search_space is not None else "") or "—",
            r.path,
        ]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines)
