"""Open a path as the wiki backend it holds: a SQLite snapshot or a ZIM archive read in place."""

from __future__ import annotations

import os
from pathlib import Path

from harness.wiki_snapshot.errors import SnapshotError
from harness.wiki_snapshot.space import WikiBackend

# A ZIM file starts with this magic number (little-endian uint32 72173914), per openzim's format spec.
ZIM_MAGIC = (72173914).to_bytes(4, "little")


def is_zim(path: str | os.PathLike) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == ZIM_MAGIC
    except OSError:
        return False


def open_wiki(path: str | os.PathLike) -> WikiBackend:
    """A SQLite snapshot or a ZIM archive (read in place), by the file's first bytes."""
    p = Path(path)
    if not p.exists():
        raise SnapshotError(f"snapshot not found: {p}")
    if p.is_file() and is_zim(p):
        from harness.wiki_snapshot.zim_archive import ZimWiki

        return ZimWiki.open(p)
    from harness.wiki_snapshot.store import Snapshot

    return Snapshot.open(p)


__all__ = ["ZIM_MAGIC", "is_zim", "open_wiki"]
