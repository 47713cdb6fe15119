"""An optional full-text engine beside a SQLite snapshot: a tantivy index in ``<SNAP>.fulltext/``.

FTS5 ranks an OR query by scoring every posting of every query term (no top-k pruning), so its
``search`` grows linearly with the corpus (CPU p95 1.2 s at 1M pages, docs/performance.md);
tantivy's BM25 with block-max WAND skips blocks that cannot reach the top k. The sidecar is built
from the snapshot's pages (``harness snapshot fulltext SNAP.db``) and records the snapshot's
``content_sha256`` in ``meta.json``: :meth:`harness.wiki_snapshot.store.Snapshot.open` uses it only when that
hash matches. tantivy is imported lazily (the ``fulltext`` extra)."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from harness.wiki_snapshot.errors import SnapshotError
from harness.wiki_snapshot.text import json_bytes
from harness._version import pip_install

ENGINE = "tantivy"
TEXT_SEARCH = "tantivy-bm25"
META = "meta.json"
INDEX_DIR = "index"  # tantivy's own files (its own meta.json among them) live below ours
# Our own analyzer, registered under this name on every open (tantivy does not persist custom
# analyzers): the words FTS5's `unicode61 remove_diacritics 2` tokenizer makes (split on
# non-alphanumerics, lower case, diacritics folded, no stemming), so switching engine changes the
# ranking, not which words match. en_stem would also match "films" for "film": a second change.
TOKENIZER = "unicode61-like"
TOKENIZER_SPEC = "simple, remove_long(40), lowercase, ascii_fold (no stemming)"
TITLE_BOOST = 5.0  # FTS5's bm25(pages_fts, 5.0, 1.0): title matches weigh 5x
MAX_TERMS = 32  # as Snapshot.search: a 10k-character query is not 2,000 clauses
WRITER_HEAP = 256_000_000
WRITER_THREADS = 1


def sidecar_path(snapshot_path: str | os.PathLike) -> Path:
    p = Path(snapshot_path)
    return p.with_name(p.name + ".fulltext")


def _tantivy():
    try:
        import tantivy
    except ImportError:
        raise SnapshotError(f"the full-text sidecar needs tantivy: {pip_install('fulltext')}") from None
    return tantivy


def tantivy_version() -> str:
    from importlib.metadata import version

    return version("tantivy")


def _analyzer(tantivy):
    return (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
        .filter(tantivy.Filter.remove_long(40))
        .filter(tantivy.Filter.lowercase())
        .filter(tantivy.Filter.ascii_fold())
        .build()
    )


def _schema(tantivy):
    sb = tantivy.SchemaBuilder()
    # 'freq': term frequencies for BM25, no positions (no phrase queries are made): a smaller index
    sb.add_text_field("title", stored=True, tokenizer_name=TOKENIZER, index_option="freq")
    sb.add_text_field("body", stored=False, tokenizer_name=TOKENIZER, index_option="freq")
    sb.add_integer_field("pageid", stored=True, indexed=True, fast=True)
    return sb.build()


def read_meta(snapshot_path: str | os.PathLike) -> dict[str, Any] | None:
    """The sidecar's meta.json, or None when there is none (or it is unreadable)."""
    try:
        return json.loads((sidecar_path(snapshot_path) / META).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def build_fulltext(snap, progress: TextIO | None = None, every: int = 100_000) -> dict[str, Any]:
    """Write ``<SNAP>.fulltext/`` beside the open snapshot ``snap`` (a ``Snapshot`` opened with
    ``fulltext=False``; passed in, so this module never imports the store that reads it) from
    ``snap.pages()`` (streamed; the writer's heap bounds the memory). Built in a temporary folder
    beside it and renamed into place: an interrupted build leaves no folder, a rebuild replaces the
    old one. Returns the meta.json written."""
    tantivy = _tantivy()
    started = time.monotonic()
    snapshot_path = snap.path
    target = sidecar_path(snapshot_path)
    tmp = target.with_name(f"{target.name}.tmp-{os.getpid()}")
    content_sha256 = snap.metadata.get("content_sha256")
    if not content_sha256:
        raise SnapshotError(f"{snapshot_path}: snapshot metadata has no content_sha256")
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / INDEX_DIR).mkdir(parents=True)
    writer = index = None
    try:
        schema = _schema(tantivy)
        index = tantivy.Index(schema, path=str(tmp / INDEX_DIR), reuse=False)
        index.register_tokenizer(TOKENIZER, _analyzer(tantivy))
        writer = index.writer(WRITER_HEAP, WRITER_THREADS)
        n = 0
        for page in snap.pages():
            writer.add_document(tantivy.Document(title=page.title, body=page.text, pageid=int(page.pageid)))
            n += 1
            if progress is not None and n % every == 0:
                rate = n / max(time.monotonic() - started, 1e-9)
                print(f"fulltext: {n:,} pages ({rate:,.0f} pages/s)", file=progress, flush=True)
        writer.commit()
        writer.wait_merging_threads()
        meta = {
            "engine": ENGINE,
            "text_search": TEXT_SEARCH,
            "tantivy_version": tantivy_version(),
            "content_sha256": content_sha256,
            "tokenizer": TOKENIZER,
            "tokenizer_spec": TOKENIZER_SPEC,
            "boosts": {"title": TITLE_BOOST, "body": 1.0},
            "pages": n,
            "build_seconds": round(time.monotonic() - started, 3),
        }
        (tmp / META).write_bytes(json_bytes(json.dumps(meta, indent=2, ensure_ascii=False) + "\n"))
        old = target.with_name(f"{target.name}.old-{os.getpid()}")
        if target.exists():
            os.replace(target, old)
        os.replace(tmp, target)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        # the writer's threads hold files in tmp: stop them before removing it
        if writer is not None:
            try:
                writer.rollback()
            except Exception:  # noqa: BLE001
                pass
        writer = index = None
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return meta


class FullTextIndex:
    """A built sidecar opened for search (read-only)."""

    def __init__(self, path: Path, meta: dict[str, Any]):
        tantivy = _tantivy()
        self._tantivy = tantivy
        self.path = path
        self.meta = meta
        index = tantivy.Index.open(str(path / INDEX_DIR))
        index.register_tokenizer(TOKENIZER, _analyzer(tantivy))
        self._schema = index.schema
        self._analyzer = _analyzer(tantivy)
        self._searcher = index.searcher()
        self._boost = float((meta.get("boosts") or {}).get("title", TITLE_BOOST))

    def search(self, words: list[str], k: int) -> list[tuple[str, float]]:
        """OR of ``words`` over title (boosted) and body; the words are analyzed here and become term
        queries, so no user text is ever parsed as query syntax."""
        tv = self._tantivy
        terms: list[str] = []
        for w in words:
            for t in self._analyzer.analyze(w):
                if t not in terms:
                    terms.append(t)
        terms = terms[:MAX_TERMS]
        if not terms or k <= 0:
            return []
        Q, should = tv.Query, tv.Occur.Should
        clauses = []
        for t in terms:
            clauses.append((should, Q.boost_query(Q.term_query(self._schema, "title", t, "freq"), self._boost)))
            clauses.append((should, Q.term_query(self._schema, "body", t, "freq")))
        hits = self._searcher.search(Q.boolean_query(clauses), int(k)).hits
        return [(self._searcher.doc(addr)["title"][0], float(score)) for score, addr in hits]


def open_fulltext(snapshot_path: Path, content_sha256: str | None) -> FullTextIndex | None:
    """The sidecar when it was built from this snapshot; a stale, foreign or unusable one is
    reported on stderr in one line and not used (None)."""
    folder = sidecar_path(snapshot_path)
    if not folder.is_dir():
        return None
    meta = read_meta(snapshot_path)
    if meta is None:
        print(f"warning: {folder}: no readable {META}; full-text search uses FTS5", file=sys.stderr)
        return None
    if meta.get("engine") != ENGINE or meta.get("content_sha256") != content_sha256:
        print(
            f"warning: {folder} was built from another snapshot (content_sha256 "
            f"{str(meta.get('content_sha256'))[:12]}, this one {str(content_sha256)[:12]}): ignored, full-text "
            f"search uses FTS5; rebuild it with `harness snapshot fulltext {snapshot_path}`",
            file=sys.stderr,
        )
        return None
    try:
        return FullTextIndex(folder, meta)
    except SnapshotError as exc:
        print(f"warning: {folder}: {exc}; full-text search uses FTS5", file=sys.stderr)
    except (OSError, ValueError) as exc:
        why = " ".join(str(exc).split())[:200]
        print(f"warning: {folder}: cannot open ({why}); full-text search uses FTS5", file=sys.stderr)
    return None

