"""Offline, dated Wikipedia snapshots: one SQLite file with pages, redirects, full-text indexes
and provenance metadata, plus builders from dumps, ZIM archives, FanOutQA's page cache, JSON
records and the MediaWiki API (``harness snapshot build``).

A library, ``harness.wiki_snapshot`` (the folder ``wiki_snapshot/`` of the repository): it imports
nothing else of the harness but ``harness._version`` (the import-graph test checks), and its names are
imported on first use so ``harness.wiki_snapshot.errors`` stays cheap to import."""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "FORMAT": "harness.wiki_snapshot.store",
    "FORMAT_VERSION": "harness.wiki_snapshot.store",
    "Page": "harness.wiki_snapshot.store",
    "Snapshot": "harness.wiki_snapshot.store",
    "SnapshotWriter": "harness.wiki_snapshot.store",
    "normalize_title": "harness.wiki_snapshot.store",
    "stable_pageid": "harness.wiki_snapshot.store",
    "title_key": "harness.wiki_snapshot.store",
    "SnapshotError": "harness.wiki_snapshot.errors",
    "WikiBackend": "harness.wiki_snapshot.space",
    "open_wiki": "harness.wiki_snapshot.backends",
    "scope_of": "harness.wiki_snapshot.space",
}

__all__ = [*_LAZY, "build_snapshot"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'harness.wiki_snapshot' has no attribute {name!r}")


def build_snapshot(source, out, **kwargs):
    """Build a snapshot; see :func:`harness.wiki_snapshot.builders.build_snapshot`."""
    from harness.wiki_snapshot.builders import build_snapshot as _build

    return _build(source, out, **kwargs)
