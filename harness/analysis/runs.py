"""Finding the runs under folders, and a run's sample rows: what the leaderboard and the data frames
read (each run through the typed record, ``harness.execution.record``).

A search follows symbolic links (a paper's runs are often linked in from where they were made) and
lists each real run once: a folder reached again, through a link or a second root, is not read
twice, and a link back up the tree (a loop) is not followed. Every folder passed over is named with
the reason, so a run missing from a table is never a silent miss. A folder holding a
``retrieval.json`` (``harness retrieval-eval --out-dir``: a retriever scored alone) is listed apart,
in ``retrievals``: never a run.
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel, ValidationError

from harness.errors import HarnessError
from harness.execution.lock import writer_of
from harness.execution.record import SampleRow, results_path
from harness.records import (
    CONFIG_FILE,
    FAILURES_FILE,
    RESULTS_FILE,
    RETRIEVAL_FILE,
    SAMPLES_FILE,
    iter_jsonl,
    load_finished,
    work_key,
)


class Skipped(BaseModel):
    """A folder (or link) a search passed over, and why."""

    path: str
    reason: str


class RunSearch(BaseModel):
    """The run folders found (in search order, each real folder once), the folders passed over,
    and notes on what was found (one run id in two places)."""

    runs: list[Path] = []
    skipped: list[Skipped] = []
    retrievals: list[Path] = []  # folders with a retrieval.json (retriever rows, never runs)


def _is_within(inner: str, outer: str) -> bool:
    return inner == outer or inner.startswith(outer.rstrip(os.sep) + os.sep)


def find_runs(roots: list[str | Path] | str | Path) -> RunSearch:
    """Every folder holding a ``results.json`` under ``roots`` (each a folder; a run folder itself
    is one too), following links. Folders reached without a link are searched first, so a run
    found both ways is listed by its own path. HarnessError when a root is not a folder."""
    if isinstance(roots, (str, Path)):
        roots = [roots]
    roots = [Path(r) for r in roots]
    for root in roots:
        if not root.is_dir():
            raise HarnessError(f"not a folder: {root}")
    search = RunSearch()
    seen: dict[str, Path] = {}  # real path of each folder searched -> the path it was searched by
    # (folder, whether a run folder holds it): folders inside a run (its logs) are not "not a run"
    stack: list[tuple[Path, bool]] = [(root, False) for root in reversed(roots)]
    links: list[tuple[Path, bool]] = []  # linked folders: searched once no folder without a link is left
    while stack or links:
        folder, in_run = stack.pop() if stack else links.pop(0)
        subfolders = _visit(folder, in_run, seen, search)
        for sub, sub_in_run in reversed(subfolders):
            (links if sub.is_symlink() else stack).append((sub, sub_in_run))
        links.sort(key=lambda item: str(item[0]))
    return search


def _visit(folder: Path, in_run: bool, seen: dict[str, Path], search: RunSearch) -> list[tuple[Path, bool]]:
    """One folder: listed as a run, or passed over with the reason; returns its subfolders."""
    real = os.path.realpath(folder)
    if folder.is_symlink() and _is_within(os.path.realpath(folder.parent), real):
        search.skipped.append(Skipped(path=str(folder), reason=f"a link to {real}, a folder above it (a loop): not followed"))
        return []
    if real in seen:
        first = seen[real]
        if (folder / RESULTS_FILE).is_file():
            reason = f"the same run as {first} (reached again through a link): listed once"
        else:
            reason = f"the same folder as {first}, already searched"
        search.skipped.append(Skipped(path=str(folder), reason=reason))
        return []
    seen[real] = folder
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError as exc:
        search.skipped.append(Skipped(path=str(folder), reason=f"cannot be read: {exc.strerror}"))
        return []
    names = {e.name for e in entries}
    subfolders = []
    for entry in entries:
        if entry.is_symlink() and not os.path.exists(entry.path):
            search.skipped.append(Skipped(path=entry.path, reason="a broken link (its target is missing)"))
        elif entry.is_dir():  # follows links
            subfolders.append(Path(entry.path))
    is_run = RESULTS_FILE in names and (folder / RESULTS_FILE).is_file()
    if is_run:
        writer = writer_of(folder)
        if writer is not None:
            reason = f"in use by {writer} (a run or a re-scoring is writing it): read it when that is done"
            search.skipped.append(Skipped(path=str(folder), reason=reason))
        else:
            search.runs.append(folder)
    elif RESULTS_FILE in names and not in_run:  # a FIFO, socket or device: never opened
        reason = f"{RESULTS_FILE}: {_kind_of(folder / RESULTS_FILE)}, not a regular file"
        search.skipped.append(Skipped(path=str(folder), reason=reason))
    elif not in_run and RETRIEVAL_FILE in names and (folder / RETRIEVAL_FILE).is_file():
        search.retrievals.append(folder)
    elif not in_run and (CONFIG_FILE in names or SAMPLES_FILE in names):
        reason = f"a run without {RESULTS_FILE} yet (still running, or stopped before writing it)"
        search.skipped.append(Skipped(path=str(folder), reason=reason))
    elif not in_run and not subfolders:
        search.skipped.append(Skipped(path=str(folder), reason=f"not a run (no {RESULTS_FILE})"))
    return [(sub, in_run or is_run) for sub in subfolders]


def _kind_of(path: Path) -> str:
    import stat

    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    for test, kind in ((stat.S_ISFIFO, "is a FIFO"), (stat.S_ISSOCK, "is a socket"), (stat.S_ISDIR, "is a folder")):
        if test(mode):
            return kind
    return "is a device or special file"


class SampleRows(BaseModel):
    """A run's sample rows, typed: the finished ones by work key (``ID`` or ``ID@EPOCH``) and the
    last failed attempt of each (question, epoch) not finished. A row this harness cannot read is
    left out, as a resume leaves it out."""

    finished: dict[str, SampleRow] = {}
    failed: dict[str, SampleRow] = {}


def load_rows(run_dir: str | Path) -> SampleRows:
    run_dir = Path(run_dir)
    out = SampleRows()
    for key, record in load_finished(run_dir).items():
        row = _row(record)
        if row is not None:
            out.finished[key] = row
    if (run_dir / FAILURES_FILE).exists():
        for _, record in iter_jsonl(run_dir / FAILURES_FILE, torn_tail=True):
            row = _row(record)
            if row is None:
                continue
            key = work_key(row.id, row.epoch)
            if key not in out.finished:
                out.failed[key] = row  # the last attempt wins
    return out


def _row(record: object) -> SampleRow | None:
    try:
        return SampleRow.model_validate(record)
    except ValidationError:
        return None


def run_paths(given: list[str | Path]) -> list[tuple[Path, bool]]:
    """The runs named by ``given``, each with whether it was found in a folder (a reader may skip an
    unreadable one there, never one named itself): a run directory or results.json as it is, a
    folder as every run ``find_runs`` lists under it; each real run once. A path that does not
    exist, or a folder without any run, is a one-line error."""
    out: list[tuple[Path, bool]] = []
    seen: set[Path] = set()
    for item in given:
        path = Path(item)
        if not path.exists():
            raise HarnessError(f"{path}: no such run directory, results file or folder")
        if path.is_dir() and not (path / RESULTS_FILE).exists():
            found = find_runs([path]).runs
            if not found:
                raise HarnessError(f"{path}: not a run directory and no run under it (no {RESULTS_FILE})")
        else:
            found = [path]
        for run in found:
            real = results_path(run).resolve()
            if real not in seen:
                seen.add(real)
                out.append((run, run != path))
    return out
