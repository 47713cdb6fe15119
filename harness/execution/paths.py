"""Paths as a run's record holds them: never the user's home directory, which would travel with a
shared run (``results.json``), and opened again from what was recorded.

A path (or a path inside a text: a label, a message) is written

* relative to the working directory when it lies under it (``results/run1``, ``data/q.jsonl``): as
  a path typed relative to it is already recorded;
* by its place in the package when it is a file shipped with the harness (``harness/prices.yaml``);
* from ``~`` when it lies under the home directory elsewhere (``~/data/q.jsonl``);
* as it was otherwise (a shared ``/data/wiki/en.db`` names the same file for everyone).

The most specific of these bases wins (a working directory inside the home directory: relative).
``recorded_path`` reads one back: ``~`` expanded, a shipped file found in the installed package,
and a path relative to the run's working directory found again from where the run directory lies
now (the run's own ``out`` was recorded relative to the same directory).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

_PACKAGE = Path(__file__).resolve().parents[1]  # .../harness


def _bases() -> list[tuple[str, str]]:
    """(absolute base, what it is written as), the longest first; the file system's root is no base."""
    found = {}
    for base, name in ((os.path.expanduser("~"), "~"), (str(_PACKAGE), "harness"), (os.getcwd(), ".")):
        base = os.path.normpath(base)
        if base and base != os.path.dirname(base):  # not "/"
            found[base] = name
    return sorted(found.items(), key=lambda item: -len(item[0]))


def _pattern(bases: list[tuple[str, str]]) -> re.Pattern[str]:
    alternatives = "|".join(re.escape(base) for base, _ in bases)
    # a base where a path starts (not inside a longer name), followed by a separator or the path's end
    return re.compile(rf"(?<![\w.\-/~])({alternatives})(?=/|$|[^\w.\-])")


def portable_text(text: str, bases: list[tuple[str, str]] | None = None) -> str:
    """``text`` with every path under the working directory, the package or the home directory
    written as module docstring says."""
    bases = _bases() if bases is None else bases
    if not bases or not any(base in text for base, _ in bases):
        return text
    names = dict(bases)

    def swap(match: re.Match[str]) -> str:
        name = names[match.group(1)]
        end = match.end()
        if name == "." and text[end : end + 1] == "/":
            return "\0"  # the separator after it goes too: data/q.jsonl, not ./data/q.jsonl
        return name

    out = _pattern(bases).sub(swap, text)
    return out.replace("\0/", "")


def portable(value: Any, bases: list[tuple[str, str]] | None = None) -> Any:
    """Every text in ``value`` (dicts, lists) through ``portable_text``; other values as they are."""
    bases = _bases() if bases is None else bases
    if isinstance(value, str):
        return portable_text(value, bases)
    if isinstance(value, dict):
        return {k: portable(v, bases) for k, v in value.items()}
    if isinstance(value, list):
        return [portable(v, bases) for v in value]
    return value


def portable_record(record: Any) -> Any:
    """A ``RunResults`` with its paths written portably, its per-question rows (answers, judges'
    words: what was said, never rewritten) and breakdowns untouched; the same object when nothing
    changes."""
    from harness.execution.record import RunResults

    bases = _bases()
    head = record.model_dump(mode="json", exclude_unset=True, exclude={"scores": {"raw", "breakdown"}})
    moved = portable(head, bases)
    if moved == head:
        return record
    scores = record.scores
    if scores is not None:
        moved["scores"] = {**moved.get("scores", {}), "raw": []}
    copy = RunResults.model_validate(moved)
    if scores is not None and copy.scores is not None:
        update = {"raw": scores.raw}
        if "breakdown" in scores.model_fields_set:
            update["breakdown"] = scores.breakdown
        copy.scores = copy.scores.model_copy(update=update)
    return copy


def recorded_path(path: str | None, run_dir: str | Path | None = None, out: str | None = None) -> str | None:
    """A path a run recorded, as this process opens it: absolute or found from the working directory
    as it is; ``~`` expanded; a file shipped with the harness (``harness/...``) in the installed
    package; else, given where the run directory is now and the ``out`` it recorded (both relative to
    the same working directory), the place that path names from there. None stays None."""
    if not path:
        return path
    expanded = os.path.expanduser(path)
    if os.path.isabs(expanded) or os.path.exists(expanded):
        return expanded
    if expanded.startswith("harness/") and (_PACKAGE.parent / expanded).exists():
        return str(_PACKAGE.parent / expanded)
    if run_dir is not None and out and not os.path.isabs(os.path.expanduser(out)):
        # the run's working directory, seen from where its directory is now
        then = Path(run_dir) / os.path.relpath(".", os.path.expanduser(out))
        candidate = os.path.normpath(then / expanded)
        if os.path.exists(candidate):
            return candidate
    return expanded


def directory_run_id(config_hash: str, run_dir: str | Path, created_at: str) -> str:
    """A run's id: its key's first 12 characters (the configuration), a dash, and 6 of a hash of its
    directory as resolved and the moment it was claimed, so two runs of one configuration in two
    folders read apart while a copy of a folder keeps its run's id. Recorded in the claim
    (``config.json``), so resuming the directory keeps it; the directory's path is never written."""
    import hashlib

    from harness.text import hash_bytes

    where = f"{Path(run_dir).resolve()}\n{created_at}"
    return f"{config_hash[:12]}-{hashlib.sha256(hash_bytes(where)).hexdigest()[:6]}"
