"""Offline, dated Wikipedia snapshots: one SQLite file with pages, redirects, full-text indexes
and provenance metadata, plus builders from dumps, ZIM archives, FanOutQA's page cache, JSON
records and the MediaWiki API (``harness snapshot build``)."""

from wiki_snapshot.store import (
    FORMAT,
    FORMAT_VERSION,
    Page,
    Snapshot,
    SnapshotWriter,
    normalize_title,
    stable_pageid,
    title_key,
)

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "Page",
    "Snapshot",
    "SnapshotWriter",
    "build_snapshot",
    "normalize_title",
    "stable_pageid",
    "title_key",
]


def build_snapshot(source, out, **kwargs):
    """Build a snapshot; see :func:`wiki_snapshot.builders.build_snapshot`."""
    from wiki_snapshot.builders import build_snapshot as _build

    return _build(source, out, **kwargs)
