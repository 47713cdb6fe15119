"""Corpus-level passage retrieval over a snapshot: the common ``Retriever`` interface, where an
index lives, and the checks that refuse a stale or mismatched one.

An index is a directory beside its snapshot, ``SNAP.db.index/{retriever}-{passages}/``
(``bm25-words100``, ``dense-words100``, ...), holding ``meta.json`` (the snapshot's content hash,
the passage kind, every build option, counts and timings), ``passages.npy`` (pageid, start, end,
ordinal per passage: offsets into the snapshot's page texts) and the retriever's own files. It
is built in a temporary directory and renamed into place only when complete. Opening it checks
the snapshot's content hash, so an index built from another version of the snapshot is refused
with the command that rebuilds it.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from harness.wiki_snapshot._version import HARNESS_VERSION
from harness.wiki_snapshot.errors import SnapshotError
from harness.wiki_snapshot.parallel import NpyAppender, batched, default_workers, ordered_map
from harness.wiki_snapshot.passages import PASSAGE_DTYPE, iter_passages, parse_kind, splitter_info
from harness.wiki_snapshot.retriever import PASSAGES_FILE, Retriever, build_command, live_progress
from harness.wiki_snapshot.text import json_bytes

INDEX_FORMAT = "harness-passage-index"
INDEX_FORMAT_VERSION = 1
RETRIEVERS = ("bm25", "dense")
META_FILE = "meta.json"


# where indexes live -------------------------------------------------------------------------
def index_root(snapshot_path: str | os.PathLike) -> Path:
    return Path(str(snapshot_path) + ".index")


def index_dir(snapshot_path: str | os.PathLike, retriever: str, passages: str) -> Path:
    if retriever not in RETRIEVERS:
        raise SnapshotError(f"unknown retriever {retriever!r} (known: {', '.join(RETRIEVERS)})")
    parse_kind(passages)
    return index_root(snapshot_path) / f"{retriever}-{passages}"


def read_meta(snapshot_path, retriever: str, passages: str) -> tuple[Path, dict[str, Any]]:
    """The index's directory and metadata; a clear error (with the command to build it) otherwise."""
    from harness.wiki_snapshot.store import refuse_zim

    refuse_zim(snapshot_path)
    directory = index_dir(snapshot_path, retriever, passages)
    path = directory / META_FILE
    if not path.is_file():
        raise SnapshotError(
            f"no {retriever} index of {passages} passages for {snapshot_path} (looked in {directory}); "
            f"build it with: {build_command(snapshot_path, retriever, passages)}"
        )
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SnapshotError(
            f"index {directory} is damaged ({META_FILE}: not readable: {exc}); rebuild it with: "
            f"{build_command(snapshot_path, retriever, passages)}"
        ) from None
    if (
        not isinstance(meta, dict)
        or meta.get("format") != INDEX_FORMAT
        or meta.get("format_version") != INDEX_FORMAT_VERSION
    ):
        raise SnapshotError(
            f"{directory}: not a passage index of format version {INDEX_FORMAT_VERSION}; rebuild it with: "
            f"{build_command(snapshot_path, retriever, passages)}"
        )
    return directory, meta


def check_fresh(meta: dict[str, Any], snapshot, directory: Path, retriever: str, passages: str) -> None:
    built = (meta.get("snapshot") or {}).get("content_sha256")
    now = snapshot.metadata.get("content_sha256")
    if built != now:
        raise SnapshotError(
            f"{directory} is stale: built from a snapshot with content sha256 {str(built)[:12]}, but "
            f"{snapshot.path} has {str(now)[:12]}; rebuild it with: {build_command(snapshot.path, retriever, passages)}"
        )


def open_retriever(snapshot, retriever: str, passages: str, exact: bool = False) -> Retriever:
    """``exact``: a dense index built with ``--ann`` is searched exactly (to measure the ANN's recall)."""
    directory, meta = read_meta(snapshot.path, retriever, passages)
    check_fresh(meta, snapshot, directory, retriever, passages)
    if retriever == "bm25":
        from harness.wiki_snapshot.index_bm25 import BM25Retriever

        return BM25Retriever(directory, meta, snapshot)
    from harness.wiki_snapshot.index_dense import DenseRetriever

    return DenseRetriever(directory, meta, snapshot, exact=exact)


# building -------------------------------------------------------------------------------------
def collect_passages(snapshot, passages: str, progress: TextIO | None = None) -> tuple[np.ndarray, list[str], float]:
    """Every passage of the snapshot (records, indexed texts) and the seconds it took, in memory:
    for tests and benchmarks on small snapshots (``build_index`` streams instead)."""
    if parse_kind(passages)[0] == "words":
        from harness.wiki_snapshot.passages import sentencizer

        sentencizer()  # load spaCy before the clock starts: the rate is the splitter's
    started = time.perf_counter()
    records, texts = [], []
    for recs, batch_texts in iter_passages(snapshot, passages):
        records.append(recs)
        texts.extend(batch_texts)
        live_progress(progress, f"splitting pages: {len(texts):,} passages")
    live_progress(progress, None)
    table = np.concatenate(records) if records else np.empty(0, dtype=PASSAGE_DTYPE)
    return table, texts, time.perf_counter() - started


UNIT_PAGES = 64  # pages per work unit: fixed, so the units (and dense encoder batches) never depend on --workers


def index_unit(retriever: str, passages: str, opts: dict[str, Any], pages: list[tuple[int, str, str]]):
    """One work unit, in a worker process: split pages into passages, then tokenize (bm25) or
    embed (dense) them. Returns (records, the retriever's payload, split seconds, work seconds)."""
    from harness.wiki_snapshot.passages import split_pages

    started = time.perf_counter()
    records, texts = split_pages(pages, passages)
    split = time.perf_counter()
    if retriever == "bm25":
        from harness.wiki_snapshot.index_bm25 import tokenize_unit as work
    else:
        from harness.wiki_snapshot.index_dense import embed_unit as work
    payload = work(texts, opts)
    return records, payload, split - started, time.perf_counter() - split


def _page_units(snapshot) -> Iterator[list[tuple[int, str, str]]]:
    return batched(((p.pageid, p.title, p.text) for p in snapshot.pages()), UNIT_PAGES)


def build_index(
    snapshot_path: str | os.PathLike,
    retriever: str,
    passages: str = "words100",
    options: dict[str, Any] | None = None,
    progress: TextIO | None = None,
    workers: int | None = None,
) -> dict[str, Any]:
    """Build (or rebuild) one index beside the snapshot; returns its metadata.

    Pages are read in pageid order and cut into fixed units of ``UNIT_PAGES`` pages; ``workers``
    processes (default: every core) split, tokenize or embed them, and the results are consumed in
    unit order and streamed to disk, so the index is the same for any number of workers."""
    from harness.wiki_snapshot.store import Snapshot

    final = index_dir(snapshot_path, retriever, passages)
    options = dict(options or {})
    workers = int(workers) if workers else default_workers()
    if workers < 1:
        raise SnapshotError("--workers must be at least 1")
    with Snapshot.open(snapshot_path) as snapshot:
        if retriever == "bm25":
            from harness.wiki_snapshot.index_bm25 import BM25Build as Build
        else:
            from harness.wiki_snapshot.index_dense import DenseBuild as Build
        build = Build(options, snapshot)  # validates options and loads the model before any page is split
        if parse_kind(passages)[0] == "words":
            from harness.wiki_snapshot.passages import sentencizer

            sentencizer()  # loading spaCy is not indexing time (and forked workers inherit it)
        started = time.perf_counter()

        def write(tmp: Path) -> dict[str, Any]:
            table = NpyAppender(tmp / PASSAGES_FILE, PASSAGE_DTYPE)
            pageids = 0
            split_s = work_s = 0.0
            try:
                build.open(tmp)
                unit = partial(index_unit, retriever, passages, build.worker_options)
                results = ordered_map(
                    unit, _page_units(snapshot), workers, start_method=build.start_method, init=build.worker_init
                )
                for records, payload, s_split, s_work in results:
                    table.append(records)
                    build.add(payload)
                    pageids += len(np.unique(records["pageid"]))
                    split_s, work_s = split_s + s_split, work_s + s_work
                    rate = table.rows / (time.perf_counter() - started)
                    live_progress(progress, f"{build.verb}: {table.rows:,} passages ({rate:,.0f}/s)")
                live_progress(progress, None)
                table.close()
                if table.rows == 0:
                    raise SnapshotError(f"{snapshot_path}: no text to index (no page has any {passages} passage)")
                built = build.finish(tmp, progress)
            finally:
                table.discard()
                build.close()
            seconds = time.perf_counter() - started
            meta = {
                "format": INDEX_FORMAT,
                "format_version": INDEX_FORMAT_VERSION,
                "retriever": retriever,
                "passages": passages,
                "snapshot": {
                    "path": str(snapshot_path),
                    "content_sha256": snapshot.metadata.get("content_sha256"),
                    "pages": len(snapshot),
                },
                "n_passages": table.rows,
                "n_pages_with_passages": pageids,  # units hold whole pages, so no page is counted twice
                "passage_text": "title + newline + passage text",
                "splitter": splitter_info(passages),
                **built["meta"],
                # split_s and the workers' own step are CPU seconds summed over workers; total_s is wall time
                "timings": {
                    "split_s": round(split_s, 3),
                    f"{build.work_timing}": round(work_s, 3),
                    **built["timings"],
                    "total_s": round(seconds, 3),
                },
                "workers": workers,
                "passages_per_s": round(table.rows / seconds, 1) if seconds else None,
                "harness_version": HARNESS_VERSION,
                "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            }
            _write_json(tmp / META_FILE, meta)
            return meta

        return _replace_dir_atomically(final, write)


def _write_json(path: Path, data: dict[str, Any]) -> None:
    with open(path, "wb") as f:  # a lone surrogate (a metadata value read back from its escape): the escape
        f.write(json_bytes(json.dumps(data, indent=2, ensure_ascii=False)))
        f.flush()
        os.fsync(f.fileno())


def _replace_dir_atomically(final: Path, fill: Callable[[Path], dict[str, Any]]) -> dict[str, Any]:
    """Fill a temporary directory beside ``final``, then rename it into place: a reader sees the old
    index or the new one, never a half-written one; an error or Ctrl-C leaves ``final`` untouched."""
    final.parent.mkdir(parents=True, exist_ok=True)
    from harness.wiki_snapshot.store import remove_dead_leftovers

    remove_dead_leftovers(final.parent, re.compile(rf"^\.{re.escape(final.name)}\.(?:tmp|old)-(\d+)-"))
    tag = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp = final.parent / f".{final.name}.tmp-{tag}"
    tmp.mkdir()
    try:
        result = fill(tmp)
        old = None
        if final.exists():
            old = final.parent / f".{final.name}.old-{tag}"
            os.replace(final, old)
        os.replace(tmp, final)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        return result
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
