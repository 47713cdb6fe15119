"""``harness table RUN_OR_FOLDER ...``: the runs as a table for a paper, one row per run (model,
setting, agent, context size), the chosen numbers each with its 95% interval, the questions
scored (n), those failed or never asked, and the samples that finished without an answer (a column
wherever one did, why in the notes: ``harness.analysis.row``); as markdown, LaTeX (booktabs, the best value per
column bold) or CSV (``harness.analysis.grid``).

Bold compares only runs scored on the same questions (``question_set``: the dataset's spec, its
file's sha256 and the ids of the questions scored, as results.json records them): a run of another
dataset, of another selection or with a question failed averages over other questions, and its
number is no better or worse than theirs. A column where every such run prints the same value has
no best.

The numbers are each dataset's headline (``harness.scoring.display.dataset_headline``) unless
``--metric`` names others; runs of several datasets get the union of their columns, blank where a
run has no such number. A number without a value (a judge that was not available) is ``n/a``; a
run that answered nothing shows ``failed`` in every number (its stored scores, zeros from older
harness versions, are never shown) and why in the notes.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from pydantic import BaseModel

from harness.analysis.compare import run_label
from harness.analysis.grid import Cell, Column, Grid, mark_best
from harness.analysis.row import SCORED_AS_WRONG, RunRow
from harness.analysis.runs import run_paths
from harness.errors import HarnessError
from harness.execution.record import RunResults, mixed_spaces_warning, read_results
from harness.scoring.display import chosen_keys, display_name, lower_is_better, scale_of
from harness.text import hash_bytes


class TableRow(BaseModel):
    path: str
    label: str
    dataset: str
    model: str
    setting: str
    agent: str | None
    context_size: int | None
    status: str
    n: int | None  # questions scored (None: the run was never scored)
    failed: int  # questions (samples) failed or never asked
    failed_reason: str | None  # why the run answered nothing (then every number is failed)
    no_answer: int = 0  # samples finished without an answer (scored as wrong)
    no_answer_note: str | None = None  # how many, why, and that they are scored as wrong
    headline: list[str]  # the dataset's headline keys
    values: dict[str, float | None]  # every number of the run, None where it has no value
    ci95: dict[str, list[float] | None] = {}
    notes: dict[str, str] = {}  # why a number or its interval is n/a
    search_space: str | None = None  # its label (None: the run searched nothing)
    evidence_only: bool = False
    questions: str | None = None  # the questions its numbers average over (question_set); None: unknown


class RunTable(BaseModel):
    keys: list[str]  # the number columns, in order
    rows: list[TableRow]
    skipped: list[str] = []  # unreadable runs found in folders (one line each)


def question_set(results: RunResults) -> str:
    """What a run's numbers average over, as ``N questions #DIGEST``: the scored questions' ids
    (``scores.raw``), else the selection's (``sample_ids``), hashed with the dataset's spec and its
    file's sha256; equal for two runs only when they scored the same questions of the same data."""
    scored = results.scores.question_ids() if results.scores is not None else []
    ids = sorted({str(q) for q in scored if q is not None})
    count = len(ids)
    if not ids:  # no per-question scores: the selection, and how many of it were answered
        answered = results.scores.meta.n_answered if results.scores is not None else None
        ids = [*(sorted(results.sample_ids) or [f"first {results.dataset.n_selected}"]), f"answered {answered}"]
        count = answered if answered is not None else results.dataset.n_selected
    named = "\n".join([results.dataset.spec, results.dataset.sha256 or "", *ids])
    digest = hashlib.sha256(hash_bytes(named)).hexdigest()
    return f"{count} questions #{digest[:8]}"


def table_row(path: Path, results: RunResults) -> TableRow:
    row = RunRow.of(results, path)
    intervals = results.scores.intervals() if results.scores is not None else {}
    notes = {k: e.note for k, e in intervals.items() if e.note}
    return TableRow(
        path=str(path),
        label=run_label(results, path),
        dataset=row.dataset_spec,
        model=row.model_name,
        setting=row.setting,
        agent=row.agent,
        context_size=row.context_size,
        status=row.status,
        n=row.scored,
        failed=row.not_scored,
        failed_reason=row.failed_reason,
        no_answer=row.outcomes.unanswered,
        no_answer_note=row.outcomes.note(),
        headline=row.headline,
        values=row.numbers,
        ci95={k: e.ci95 for k, e in intervals.items()},
        notes=notes,
        search_space=results.search_space_label,
        evidence_only=results.search_space is not None and results.search_space.evidence_only,
        questions=question_set(results),
    )


def _chosen(wanted: list[str], rows: list[TableRow]) -> list[str]:
    """``--metric`` names: a ``METRIC.LEAF`` key some run has, or a metric's name (its headline
    numbers, or all of them when it declares none); anything else a one-line error."""
    available = list(dict.fromkeys(k for r in rows for k in r.values))
    return chosen_keys(wanted, available)


def build_table(paths: list[str | Path], metrics: list[str] | None = None) -> RunTable:
    """The table of the runs at ``paths`` (runs and folders of runs; see harness.analysis.runs)."""
    rows, skipped = [], []
    for path, in_folder in run_paths(paths):
        try:
            rows.append(table_row(path, read_results(path)))
        except HarnessError as exc:
            if not in_folder:
                raise
            skipped.append(f"{exc}; skipped")
    if not rows:
        raise HarnessError(f"no readable run among {', '.join(map(str, paths))} ({'; '.join(skipped)})")
    if metrics:
        keys = _chosen(metrics, rows)
    else:
        keys = list(dict.fromkeys(k for r in rows for k in r.headline))
    return RunTable(keys=keys, rows=rows, skipped=skipped)


def _cell(row: TableRow, key: str) -> Cell:
    scale = scale_of(key)
    if key not in row.values and (key not in row.headline or row.values):
        return Cell(absent=True)  # another dataset's number: blank
    if row.failed_reason:  # (a run without scores has its dataset's headline: failed, or n/a)
        return Cell(text="failed", scale=scale)
    return Cell(value=row.values.get(key), ci95=row.ci95.get(key), scale=scale)


def table_grid(table: RunTable) -> Grid:
    """The table's grid: label columns, a column per number (display names), n and failed; the
    reasons for every failed run, n/a value and missing interval in the notes."""
    several = len({r.dataset for r in table.rows}) > 1
    unanswered = any(r.no_answer for r in table.rows)  # a column wherever a sample ended without an answer
    titles = _titles(table.keys)
    columns = [
        Column(key="path", title="Path", show="csv"),
        *([Column(key="dataset", title="Dataset")] if several else [Column(key="dataset", title="Dataset", show="csv")]),
        Column(key="model", title="Model"),
        Column(key="setting", title="Setting"),
        Column(key="agent", title="Agent"),
        Column(key="context_size", title="Context", kind="count"),
        *[
            Column(
                key=key,
                title=titles[key],
                short=display_name(key),
                kind="score",
                interval=True,
                best="low" if lower_is_better(key) else "high",
            )
            for key in table.keys
        ],
        Column(key="n", title="n", kind="count"),
        Column(key="failed", title="Failed", kind="count"),
        *([Column(key="no_answer", title="No answer", kind="count")] if unanswered else []),
        Column(key="status", title="Status", show="csv"),
    ]
    # what the runs searched: a column wherever one did (a closed-book table stays as it was)
    searched = any(r.search_space for r in table.rows)
    if searched:
        columns.insert(6, Column(key="search_space", title="Search space"))
    rows = []
    for r in table.rows:
        cells = [Cell(value=r.path), Cell(value=r.dataset), Cell(value=r.model), Cell(value=r.setting)]
        cells += [Cell(value=r.agent), Cell(value=r.context_size)]
        if searched:
            cells.append(Cell(value=r.search_space or "—"))
        cells += [_cell(r, key) for key in table.keys]
        cells += [Cell(value=r.n), Cell(value=r.failed)]
        cells += [Cell(value=r.no_answer)] if unanswered else []
        cells.append(Cell(value=r.status))
        rows.append(cells)
    grid = Grid(
        columns=columns,
        rows=rows,
        notes=_notes(table, titles),
        groups=[_group(r) for r in table.rows],
        section_column="dataset" if several else None,  # LaTeX: a section per dataset, with its own columns
    )
    mark_best(grid)
    return grid


def _group(row: TableRow) -> str:
    """Rows that bold compares: the same dataset and questions."""
    return f"{row.dataset} {row.questions}" if row.questions else f"{row.dataset} n={row.n}"


def _titles(keys: list[str]) -> dict[str, str]:
    """Each column's display name; names that two columns share get their metric's name
    (``F1 (em-f1)``, ``F1 (topiocqa)``)."""
    names = {key: display_name(key) for key in keys}
    shared = {name for name in names.values() if list(names.values()).count(name) > 1}
    return {key: f"{name} ({key.partition('.')[0]})" if name in shared else name for key, name in names.items()}


def _notes(table: RunTable, titles: dict[str, str]) -> list[str]:
    notes = [
        "Each number with its 95% interval; n: questions scored; Failed: questions that failed or were never asked.",
        "Bold: the best of a column among runs scored on the same questions, none where they all print the same.",
    ]
    sets: dict[str, list[TableRow]] = {}
    for r in table.rows:
        if not r.failed_reason and r.values:
            sets.setdefault(_group(r), []).append(r)
    if len(sets) > 1:
        names = [r.label for r in table.rows]
        named = {
            id(r): r.label if names.count(r.label) == 1 else f"{r.label} ({Path(r.path).name})" for r in table.rows
        }
        notes.append(
            "The runs scored different questions, so bold compares only runs scored on the same questions: "
            + "; ".join(f"{group}: {', '.join(named[id(r)] for r in rows)}" for group, rows in sets.items())
        )
    if any(r.no_answer for r in table.rows):
        notes.append(f"No answer: samples that finished without an answer, each {SCORED_AS_WRONG}.")
    if any(r.evidence_only for r in table.rows):
        notes.append(
            "Search space evidence-only: the runs searched a snapshot of the dataset's own evidence pages or contexts "
            "(every similar title a gold page); their numbers are not open-book over Wikipedia."
        )
    mixed = mixed_spaces_warning([(r.label, {"evidence_only": r.evidence_only} if r.search_space else None) for r in table.rows])
    if mixed:
        notes.append(f"warning: {mixed}")
    for r in table.rows:
        if r.failed_reason:
            notes.append(f"{r.label}: failed, no number: {r.failed_reason}")
            continue
        if r.no_answer_note:
            notes.append(f"{r.label}: {r.no_answer_note}")
        if not r.values:
            notes.append(f"{r.label}: n/a: not scored (harness score {r.path})")
            continue
        for key in table.keys:
            if key not in r.values:
                continue
            why = r.notes.get(key)
            if r.values[key] is None:
                notes.append(f"{r.label}: {titles[key]} n/a" + (f": {why}" if why else ""))
            elif not r.ci95.get(key):
                notes.append(f"{r.label}: {titles[key]}: no interval" + (f" ({why})" if why else ""))
    return notes
