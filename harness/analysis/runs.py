"""The runs a command is given: run directories (or their results.json) and folders holding runs
at any depth. Symlinked run directories and folders are followed; a run reached by two paths
(a link and its target, a folder given twice) is listed once, under the first path it was found by."""

from __future__ import annotations

import os
from pathlib import Path

from harness.errors import HarnessError
from harness.execution.record import results_path
from harness.records import RESULTS_FILE


def runs_under(folder: Path) -> list[Path]:
    """Every folder under ``folder`` (itself included) holding a results.json, in sorted order,
    following symlinks; a folder reached again through a link loop is not walked twice."""
    found, walked = [], set()
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=True):
        real = os.path.realpath(dirpath)
        if real in walked:
            dirnames[:] = []
            continue
        walked.add(real)
        dirnames.sort()
        if RESULTS_FILE in filenames:
            found.append(Path(dirpath))
    return found


def run_paths(given: list[str | Path]) -> list[tuple[Path, bool]]:
    """The runs named by ``given``, each with whether it was found in a folder (a reader may skip an
    unreadable one there, never one named itself): a run directory or results.json as it is, a
    folder as every run under it (sorted); each real run once. A path that does not exist, or a
    folder without any run, is a one-line error."""
    out: list[tuple[Path, bool]] = []
    seen: set[Path] = set()
    for item in given:
        path = Path(item)
        if not path.exists():
            raise HarnessError(f"{path}: no such run directory, results file or folder")
        if path.is_dir() and not (path / RESULTS_FILE).exists():
            found = runs_under(path)
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
