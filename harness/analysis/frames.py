"""Runs as pandas data frames, for analysis in a notebook: ``runs_df`` has one row per run and
``samples_df`` one per question x epoch (what Inspect's ``evals_df`` and ``samples_df`` give).

Both read the runs as every other reader does: the folders searched as the leaderboard searches
them (``harness.analysis.runs``: links followed, each real run once), each run through the typed
record (``read_results``, ``SampleRow``), a run's row the typed ``RunRow`` the leaderboard reads. A
value that does not exist stays missing (NaN or None), never 0: a failed run's metrics, a failed or
never-asked question's scores. pandas is an optional extra: ``pip install 'manyanswer-harness[analysis]'``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.analysis.row import RunRow
from harness.analysis.runs import find_runs, load_rows
from harness.errors import HarnessError
from harness.execution.record import RunResults, read_results
from harness.records import work_key
from harness.scoring.display import display_name
from harness._version import pip_install

INSTALL = pip_install("analysis")


def _pandas():
    try:
        import pandas
    except ImportError:
        raise HarnessError(f"the data frames need pandas, which is not installed: {INSTALL}") from None
    return pandas


def _search(paths: tuple[str | Path, ...]):
    if not paths:
        raise HarnessError("give at least one run folder or a folder holding runs")
    return find_runs(list(paths))


def _frame(records: list[dict[str, Any]], numeric: list[str], skipped: list[dict[str, str]]):
    pd = _pandas()
    frame = pd.DataFrame.from_records(records)
    for column in numeric:  # None -> NaN in a numeric column (never 0)
        if column in frame:
            frame[column] = pd.to_numeric(frame[column], errors="coerce")
    frame.attrs["skipped"] = skipped
    return frame


def _readable(paths: tuple[str | Path, ...]) -> tuple[list[tuple[Path, RunResults]], list[dict[str, str]]]:
    """The runs under ``paths`` that read, typed; the folders passed over and the runs that do not
    read, each with the reason."""
    search = _search(paths)
    skipped = [s.model_dump() for s in search.skipped]
    runs = []
    for run_dir in search.runs:
        try:
            runs.append((run_dir, read_results(run_dir)))
        except HarnessError as exc:
            skipped.append({"path": str(run_dir), "reason": str(exc)})
    return runs, skipped


def runs_df(*paths: str | Path):
    """One row per run under ``paths``: its identity (``run_id``, ``dir``, dataset, setting, agent,
    model, context size), ``status``, ``failed`` (nothing scored: no values), ``n`` (questions scored),
    ``answered`` (samples that finished with an answer), ``no_answer`` (finished without one) and
    ``no_answer_why`` (``max_steps 10; 70 of 70 steps unreadable``), ``n_failed``, ``n_pending``, the
    dataset's headline (``headline``: its key, ``headline_value``), every metric value under its key
    (``fanoutqa-string.acc.loose``) with ``KEY.stderr``, ``KEY.ci_lo`` and ``KEY.ci_hi`` where the
    run has an interval, tokens and cost. A run whose
    results.json cannot be read is left out and named, with the reason, in ``frame.attrs["skipped"]``
    (as are the folders the search passed over)."""
    pd = _pandas()
    runs, skipped = _readable(paths)
    records: list[dict[str, Any]] = []
    numeric: list[str] = []
    for run_dir, results in runs:
        row = RunRow.of(results, run_dir)
        key = row.headline_key
        tokens = row.tokens
        o = row.outcomes
        record: dict[str, Any] = {
            "run_id": row.run_id,
            "dir": row.path,
            "dataset": row.dataset_spec,
            "dataset_name": row.dataset,
            "split": row.split,
            "version": row.version,
            "setting": row.setting,
            "agent": row.agent,
            "model": row.model,
            "backend": row.backend,
            "context_size": row.context_size,
            # what it searched: its label, and whether it was a dataset's evidence only (None: no search space)
            "search_space": row.search_space.label if row.search_space is not None else None,
            "evidence_only": row.search_space.evidence_only if row.search_space is not None else None,
            "status": row.status,
            "failed": row.failed,
            "n": row.scored,
            "answered": o.answered,
            "no_answer": o.unanswered,
            "no_answer_why": o.why() if o.unanswered else None,
            "n_failed": o.failed,
            "n_pending": o.pending,
            "n_selected": o.selected,
            "epochs": row.epochs,
            "headline": key,
            "headline_label": display_name(key) if key else None,
            "headline_value": row.headline_value,
            "tokens_prompt": tokens.prompt if tokens is not None else None,
            "tokens_completion": tokens.completion if tokens is not None else None,
            "tokens_total": tokens.total if tokens is not None else None,
            "cost_usd": row.cost_usd,
            "spent_usd": row.spent_usd,
            "config_hash": row.config_hash,
            "started_at": row.started_at,
            "ended_at": row.ended_at,
        }
        for metric, value in row.metrics.items():
            record[metric] = value
            ci = row.ci95.get(metric)
            if metric in row.stderr or ci:
                record[f"{metric}.stderr"] = row.stderr.get(metric)
                record[f"{metric}.ci_lo"] = ci[0] if ci else None
                record[f"{metric}.ci_hi"] = ci[1] if ci else None
            numeric += [c for c in (metric, f"{metric}.stderr", f"{metric}.ci_lo", f"{metric}.ci_hi") if c not in numeric]
        records.append(record)
    numeric += ["headline_value", "cost_usd", "spent_usd"]
    frame = _frame(records, numeric, skipped)
    if not records:
        frame = pd.DataFrame(columns=["run_id", "dir", "dataset", "setting", "agent", "model", "status", "n"])
        frame.attrs["skipped"] = skipped
    return frame


def samples_df(*paths: str | Path):
    """One row per question x epoch of each run under ``paths``: ``run_id``, ``dir``, ``id``,
    ``epoch``, ``status`` (``ok``, ``error``: failed, ``pending``: never asked), the question and
    answer, ``outcome``, ``error_type`` and ``error``, latency, tokens, model calls, cost, and each
    metric's per-question values under their keys (``set-f1.f1``; from ``scores.raw``, so a run
    re-scored shows its new values). A failed or never-asked question has no values (NaN), never 0.
    With ``--epochs N`` the stored per-question values are the question's values reduced over its
    epochs (``scores.raw`` keeps no per-epoch ones): each of its epoch rows shows them, and
    ``values_of`` says ``question`` instead of ``sample``."""
    pd = _pandas()
    runs, skipped = _readable(paths)
    records: list[dict[str, Any]] = []
    numeric: list[str] = [*SAMPLE_NUMBERS]
    for run_dir, results in runs:
        for record in sample_records(run_dir, results):
            numeric += [k for k in record if k not in SAMPLE_COLUMNS and k not in numeric]  # the metrics' values
            records.append(record)
    frame = _frame(records, numeric, skipped)
    if not records:
        frame = pd.DataFrame(columns=["run_id", "dir", "id", "epoch", "status", "answer"])
        frame.attrs["skipped"] = skipped
    return frame


SAMPLE_NUMBERS = ("latency_s", "prompt_tokens", "completion_tokens", "model_calls", "cost_usd")
# a sample record's own columns (the metrics' values follow them)
SAMPLE_COLUMNS = (
    "run_id", "dir", "id", "epoch", "status", "question", "answer", "outcome", "error_type", "error",
    *SAMPLE_NUMBERS, "truncated_output", "values_of",
)  # fmt: skip


def sample_records(run_dir: str | Path, results: RunResults) -> list[dict[str, Any]]:
    """One record per question x epoch of one run (``samples_df``'s rows, without pandas: the
    experiment trackers' per-question table too): ``SAMPLE_COLUMNS``, then each metric's
    per-question values under their keys, on a finished sample only (a failed or never-asked one has none)."""
    rows = load_rows(Path(run_dir))
    values = results.scores.per_question() if results.scores is not None else {}
    epochs = results.counts.epochs or 1
    ids = results.sample_ids or list(dict.fromkeys(r.id for r in [*rows.finished.values(), *rows.failed.values()]))
    records: list[dict[str, Any]] = []
    for qid in ids:
        for epoch in range(1, epochs + 1):
            key = work_key(qid, epoch)
            row = rows.finished.get(key) or rows.failed.get(key)
            status = "ok" if key in rows.finished else "error" if key in rows.failed else "pending"
            record: dict[str, Any] = {
                "run_id": results.run_id,
                "dir": str(run_dir),
                "id": qid,
                "epoch": epoch,
                "status": status,
                "question": row.question if row is not None else None,
                "answer": row.answer if row is not None else None,
                "outcome": (row.outcome or "answered") if status == "ok" else None,
                "error_type": row.error_type if row is not None else None,
                "error": row.error if row is not None else None,
                "latency_s": row.latency_s if row is not None else None,
                "prompt_tokens": row.usage.prompt_tokens if row is not None else None,
                "completion_tokens": row.usage.completion_tokens if row is not None else None,
                "model_calls": row.model_calls if row is not None else None,
                "cost_usd": row.cost_usd if row is not None else None,
                "truncated_output": row.truncated_output if row is not None else None,
                "values_of": "sample" if epochs == 1 else "question",
            }
            if status == "ok":  # a failed or never-asked question is never scored here
                record.update(values.get(qid, {}))
            records.append(record)
    return records
