"""Offline, dated Wikipedia snapshots: one SQLite file with pages, redirects, full-text indexes
and provenance metadata, plus builders from dumps, ZIM archives, FanOutQA's page cache, JSON
records and the MediaWiki API (``harness snapshot build``).

A library: it imports nothing from ``harness`` (the import-graph test checks), and its names are
imported on first use so ``wiki_snapshot.errors`` stays cheap to import."""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "FORMAT": "wiki_snapshot.store",
    "FORMAT_VERSION": "wiki_snapshot.store",
    "Page": "wiki_snapshot.store",
    "Snapshot": "wiki_snapshot.store",
    "SnapshotWriter": "wiki_snapshot.store",
    "normalize_title": "wiki_snapshot.store",
    "stable_pageid": "wiki_snapshot.store",
    "title_key": "wiki_snapshot.store",
    "SnapshotError": "wiki_snapshot.errors",
    "WikiBackend": "wiki_snapshot.space",
    "open_wiki": "wiki_snapshot.backends",
    "scope_of": "wiki_snapshot.space",
}

__all__ = [*_LAZY, "build_snapshot"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'wiki_snapshot' has no attribute {name!r}")


def build_snapshot(source, out, **kwargs):
    """Build a snapshot; see :func:`wiki_snapshot.builders.build_snapshot`."""
    from wiki_snapshot.builders import build_snapshot as _build

    return _build(source, out, **kwargs)
