"""A dated Wikipedia snapshot in one SQLite file: pages, redirects, full-text indexes, metadata.

Tables (``format_version`` 1):

- ``pages(pageid INTEGER PRIMARY KEY, revid, title UNIQUE, text, timestamp, title_key)``:
  ``title_key`` is the case-folded title, indexed, for case-insensitive lookups.
- ``redirects(title PRIMARY KEY, target, fragment, title_key)``: ``target`` is a title without its
  ``#section`` part (kept in ``fragment``).
- ``title_index(id, title, pageid)``: every page title and every redirect title whose target is a
  page here, pointing at that page; indexed by two FTS5 tables (words and trigrams) for
  :meth:`Snapshot.similar_titles`.
- ``pages_fts``: FTS5 over pages' title and text (external content: the text is stored once),
  ranked with bm25 for :meth:`Snapshot.search`.
- ``metadata(key PRIMARY KEY, value)``: JSON-encoded values (source, revision date, builder and
  options, counts, content hash, harness version, created_at, which search backend is present).

Where this sqlite has no FTS5, the snapshot is written without the FTS tables and searches fall
back to ``LIKE`` scans (``metadata["title_search"] == "like"``).

A snapshot is written by :class:`SnapshotWriter` to a temporary file next to the target and
renamed over it only when complete, so an interrupted build never leaves a half snapshot behind.
"""

from __future__ import annotations

import datetime as _dt
import difflib
import hashlib
import json
import logging
import os
import re
import shutil
import sqlite3
import stat
import threading
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from harness.wiki_snapshot._version import HARNESS_VERSION
from harness.wiki_snapshot.errors import SnapshotError
from harness.wiki_snapshot.text import json_text, plain_text

log = logging.getLogger(__name__)

FORMAT = "wiki-snapshot"
FORMAT_VERSION = 1
MAX_REDIRECT_HOPS = 8
MAX_QUERY_CHARS = 300  # similar_titles looks at this much of a query (string similarity is quadratic)
# similar_titles over FTS5 (issue 40): candidates from boolean queries only (an FTS5 ranked OR scores
# every posting: 848 ms p95 at 1M pages), at most TITLE_ROWS title rows read, ranked by the trigrams
# they share with the query, the best TITLE_SCORED scored with difflib. Recorded in the metadata:
# another version lists other titles.
SIMILAR_TITLES = {"version": 2, "candidates": "fts5-boolean", "rows": 300, "scored": 50}
TITLE_ROWS = SIMILAR_TITLES["rows"]
TITLE_SCORED = SIMILAR_TITLES["scored"]
TITLE_DF_CAP = 5000  # counting a word's titles stops here (the count only orders words, rarest first)
REQUIRED_TABLES = ("pages", "redirects", "metadata")
# the columns the reader asks of each table (of the optional ones, where the table is there): a file
# with the tables' names but other columns is refused when opened, not in every sample's first lookup
READ_COLUMNS = {
    "metadata": ("key", "value"),
    "pages": ("pageid", "revid", "title", "text", "timestamp", "title_key"),
    "redirects": ("title", "target", "fragment", "title_key"),
    "title_index": ("id", "title", "pageid"),
    "pages_fts": ("title", "text"),
    "titles_fts": ("title",),
    "titles_trigram": ("title",),
}

# Words too common to help a bm25 OR-query (kept when the query has nothing else).
_STOPWORDS = frozenset(
    """a an and are as at be but by did do does for from had has have how in is it its of on or that the
    their there these they this to was were what when where which who whom whose why will with""".split()
)
_WORD = re.compile(r"[^\W_]+", re.UNICODE)


@dataclass(frozen=True)
class Page:
    pageid: int
    revid: int | None
    title: str
    text: str
    timestamp: str | None


# titles ------------------------------------------------------------------------------------
def normalize_title(title: str) -> str:
    """MediaWiki-style title normalization: underscores are spaces, whitespace collapsed, NFC; a lone
    surrogate (a "\\ud800" escape in a JSON source, a model's query) is U+FFFD (``harness.wiki_snapshot.text``):
    no UTF-8 holds it, so SQLite, libzim and the MediaWiki API could not take the title."""
    title = unicodedata.normalize("NFC", plain_text(str(title))[0]).replace("_", " ")
    return " ".join(title.split())


def title_key(title: str) -> str:
    """Case-insensitive lookup key of a title."""
    return normalize_title(title).casefold()


def split_fragment(target: str) -> tuple[str, str | None]:
    """``"Foo#Bar"`` -> ``("Foo", "Bar")``."""
    target = normalize_title(target)
    if "#" in target:
        base, frag = target.split("#", 1)
        return base.strip(), frag.strip() or None
    return target, None


def stable_pageid(title: str) -> int:
    """A positive 63-bit id derived from the normalized title, for sources without page ids."""
    digest = hashlib.sha256(normalize_title(title).encode("utf-8")).digest()
    return (int.from_bytes(digest[:8], "big") & ((1 << 63) - 1)) or 1


def fts5_available() -> bool:
    try:
        con = sqlite3.connect(":memory:")
        try:
            con.execute("CREATE VIRTUAL TABLE t USING fts5(x)")
        finally:
            con.close()
        return True
    except sqlite3.Error:
        return False


def trigram_available() -> bool:
    try:
        con = sqlite3.connect(":memory:")
        try:
            con.execute("CREATE VIRTUAL TABLE t USING fts5(x, tokenize='trigram')")
        finally:
            con.close()
        return True
    except sqlite3.Error:
        return False


def _quote(term: str) -> str:
    """An FTS5 string literal: any character is safe inside double quotes (doubled)."""
    return '"' + term.replace('"', '""') + '"'


def _words(text: str) -> list[str]:
    return _WORD.findall(text.casefold())


def _dedupe(items) -> list:
    seen = set()
    out = []
    for x in items:
        if x not in seen:
            seen.add(x)
            out.append(x)
    return out


def _one_edit(word: str) -> str | None:
    """An FTS5 trigram-table expression for titles that hold ``word`` with at most one edit (a letter
    inserted, dropped, replaced, or two neighbours swapped). An edit touches at most two neighbouring
    letters, so pieces of at least 3 letters (the shortest a trigram index finds) around any such
    spot stay whole: the two halves of a word of 10 or more letters with two letters between them;
    below that, for each spot, the pieces before and after it. Exact for 7 letters or more; for 4-6,
    the first or the last three letters (an edit in the middle of both is missed); 3 letters: the
    word itself; shorter: None."""
    n = len(word)
    if n < 3:
        return None
    if n == 3:
        return _quote(word)
    if n <= 6:
        return f"{_quote(word[:3])} OR {_quote(word[-3:])}"
    if n >= 10:
        h = (n - 2) // 2
        return f"{_quote(word[:h])} OR {_quote(word[h + 2:])}"
    alts = [_quote(word[4:]), _quote(word[: n - 4])]
    alts += [f"({_quote(word[:p])} AND {_quote(word[p + 2:])})" for p in range(3, n - 4)]
    return " OR ".join(alts)


def refuse_zim(path: str | os.PathLike) -> None:
    """One line for a ZIM archive given where a SQLite snapshot is needed (passage indexes,
    retrieve-read, retrieval-eval): it is read in place only as an open-book search space. Making
    those work on a ZIM would mean rendering every page, which is what ``snapshot build`` does."""
    if _starts_with(Path(path), b"ZIM\x04"):  # a ZIM's magic number (harness.wiki_snapshot.backends.ZIM_MAGIC)
        raise SnapshotError(
            f"{path} is a ZIM archive: it is read in place by open-book search and `harness snapshot info/search` "
            f"only; passage indexes and retrieve-read need a SQLite snapshot: harness snapshot build --from {path} "
            "--out SNAP.db"
        )


def _starts_with(path: Path, magic: bytes) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(len(magic)) == magic
    except OSError:
        return False


# schema ------------------------------------------------------------------------------------
_SCHEMA = """
CREATE TABLE metadata (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE pages (
    pageid INTEGER PRIMARY KEY,
    revid INTEGER,
    title TEXT NOT NULL UNIQUE,
    text TEXT NOT NULL,
    timestamp TEXT,
    title_key TEXT NOT NULL
);
CREATE TABLE redirects (
    title TEXT PRIMARY KEY,
    target TEXT NOT NULL,
    fragment TEXT,
    title_key TEXT NOT NULL
);
CREATE TABLE title_index (id INTEGER PRIMARY KEY, title TEXT NOT NULL, pageid INTEGER NOT NULL);
"""
_INDEXES = """
CREATE INDEX pages_title_key ON pages(title_key);
CREATE INDEX redirects_title_key ON redirects(title_key);
"""
_FTS_SCHEMA = """
CREATE VIRTUAL TABLE pages_fts USING fts5(
    title, text, content='pages', content_rowid='pageid', tokenize='unicode61 remove_diacritics 2'
);
CREATE VIRTUAL TABLE titles_fts USING fts5(
    title, content='title_index', content_rowid='id', tokenize='unicode61 remove_diacritics 2', prefix='2 3'
);
"""
_TRIGRAM_SCHEMA = """
CREATE VIRTUAL TABLE titles_trigram USING fts5(title, content='title_index', content_rowid='id', tokenize='trigram');
CREATE VIRTUAL TABLE titles_trigram_vocab USING fts5vocab(titles_trigram, 'row');
"""


# writer ------------------------------------------------------------------------------------
class SnapshotWriter:
    """Writes a snapshot atomically: a temp file next to ``path``, renamed over it by :meth:`finish`.

    Use as a context manager (an exception or Ctrl-C inside removes the temp file) or call
    :meth:`abort` yourself. Pages and redirects are inserted in batched transactions; the FTS
    indexes, the title index and the content hash are built once, in :meth:`finish`.
    A page whose pageid or title is already present is skipped (first one wins) and counted in
    ``metadata["duplicates_skipped"]``.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        source: str,
        options: dict[str, Any],
        overwrite: bool = False,
        builder: str | None = None,
        source_description: str | None = None,
        revision_date: str | None = None,
        fts5: bool | None = None,
        batch_size: int = 1000,
        lock: BuildLock | None = None,
    ):
        """``lock``: the target's lock, taken by a caller that had work to do first (the writer
        releases it when done); by default the writer takes it."""
        self.path = Path(path)
        self._lock = lock or BuildLock.take(self.path, overwrite)
        self.target = self._lock.target
        self.tmp_path = self.target.parent / f".{self.target.name}.{os.getpid()}.partial"
        self._remove_tmp()
        remove_dead_leftovers(self.target.parent, re.compile(rf"^\.{re.escape(self.target.name)}\.(\d+)\.partial"))
        self.fts5 = fts5_available() if fts5 is None else (fts5 and fts5_available())
        self.trigram = self.fts5 and trigram_available()
        self.batch_size = max(1, batch_size)
        self._meta: dict[str, Any] = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "source": str(source),
            "source_description": source_description or str(source),
            "builder": builder,
            "builder_options": options or {},
            "revision_date": revision_date,
        }
        self._pages: list[tuple] = []
        self._redirects: list[tuple] = []
        self.n_pages = 0
        self.n_redirects = 0
        self.duplicates_skipped = 0
        self.duplicate_redirects_skipped = 0
        self.replaced_surrogates = 0  # lone surrogates in titles and texts stored as U+FFFD
        self._max_timestamp: str | None = None
        self._started = _dt.datetime.now(_dt.timezone.utc)
        self._closed = False
        self._con = sqlite3.connect(str(self.tmp_path), isolation_level=None)
        try:
            self._con.executescript(
                "PRAGMA page_size=8192; PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; "
                "PRAGMA cache_size=-262144; PRAGMA temp_store=MEMORY;"
            )
            self._con.executescript(_SCHEMA + _INDEXES)
            if self.fts5:
                self._con.executescript(_FTS_SCHEMA)
                if self.trigram:
                    self._con.executescript(_TRIGRAM_SCHEMA)
        except BaseException:
            self.abort()
            raise

    # context manager
    def __enter__(self) -> "SnapshotWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None or not self._closed:
            self.abort()

    def set_metadata(self, key: str, value: Any) -> None:
        self._meta[key] = value

    def _plain(self, text: Any) -> str:
        # a lone surrogate (a JSON source's "\ud800"): SQLite's text binding cannot encode it
        text, n = plain_text(str(text))
        self.replaced_surrogates += n
        return text

    def add_page(self, page: Page) -> None:
        title = normalize_title(self._plain(page.title))
        if not title:
            raise SnapshotError(f"page {page.pageid}: empty title")
        ts = None if page.timestamp is None else self._plain(page.timestamp)
        if ts and (self._max_timestamp is None or ts > self._max_timestamp):
            self._max_timestamp = ts
        self._pages.append(
            (
                int(page.pageid),
                None if page.revid is None else int(page.revid),
                title,
                self._plain(page.text or ""),
                ts,
                title.casefold(),
            )
        )
        if len(self._pages) >= self.batch_size:
            self._flush()

    def add_redirect(self, from_title: str, to_title: str) -> None:
        title = normalize_title(self._plain(from_title))
        target, fragment = split_fragment(self._plain(to_title))
        if not title or not target:
            return
        self._redirects.append((title, target, fragment, title.casefold()))
        if len(self._redirects) >= self.batch_size:
            self._flush()

    def _flush(self) -> None:
        con = self._con
        con.execute("BEGIN")
        try:
            if self._pages:
                before = con.total_changes
                con.executemany(
                    "INSERT OR IGNORE INTO pages(pageid, revid, title, text, timestamp, title_key) "
                    "VALUES (?,?,?,?,?,?)",
                    self._pages,
                )
                added = con.total_changes - before
                self.n_pages += added
                self.duplicates_skipped += len(self._pages) - added
                self._pages = []
            if self._redirects:
                before = con.total_changes
                con.executemany(
                    "INSERT OR IGNORE INTO redirects(title, target, fragment, title_key) VALUES (?,?,?,?)",
                    self._redirects,
                )
                added = con.total_changes - before
                self.n_redirects += added
                self.duplicate_redirects_skipped += len(self._redirects) - added
                self._redirects = []
            con.execute("COMMIT")
        except BaseException:
            if con.in_transaction:
                con.execute("ROLLBACK")
            raise

    def _content_hashes(self) -> tuple[str, str]:
        pages = hashlib.sha256()
        for pageid, revid, title, text, ts in self._con.execute(
            "SELECT pageid, revid, title, text, timestamp FROM pages ORDER BY pageid"
        ):
            encoded = text.encode("utf-8")
            pages.update(f"{pageid}\t{revid}\t{title}\t{ts}\t{len(encoded)}\n".encode("utf-8"))
            pages.update(encoded)
        redirects = hashlib.sha256()
        for title, target, fragment in self._con.execute(
            "SELECT title, target, fragment FROM redirects ORDER BY title"
        ):
            redirects.update(f"{title}\t{target}\t{fragment or ''}\n".encode("utf-8"))
        return pages.hexdigest(), redirects.hexdigest()

    def finish(self) -> dict[str, Any]:
        """Index, hash, write metadata, and move the file into place. Returns the metadata."""
        if self._closed:
            raise SnapshotError("snapshot writer already finished or aborted")
        try:
            self._flush()
            con = self._con
            con.execute("BEGIN")
            # Every page title, then every redirect title whose target (directly or through one
            # more redirect) is a page here.
            con.execute("INSERT INTO title_index(title, pageid) SELECT title, pageid FROM pages ORDER BY pageid")
            con.execute(
                "INSERT INTO title_index(title, pageid) "
                "SELECT r.title, COALESCE(p.pageid, p2.pageid) FROM redirects r "
                "LEFT JOIN pages p ON p.title = r.target "
                "LEFT JOIN redirects r2 ON p.pageid IS NULL AND r2.title = r.target "
                "LEFT JOIN pages p2 ON p2.title = r2.target "
                "WHERE COALESCE(p.pageid, p2.pageid) IS NOT NULL AND r.title NOT IN (SELECT title FROM pages)"
            )
            if self.fts5:
                con.execute("INSERT INTO pages_fts(pages_fts) VALUES('rebuild')")
                con.execute("INSERT INTO titles_fts(titles_fts) VALUES('rebuild')")
                if self.trigram:
                    con.execute("INSERT INTO titles_trigram(titles_trigram) VALUES('rebuild')")
            con.execute("COMMIT")
            if self.fts5:
                con.execute("INSERT INTO pages_fts(pages_fts) VALUES('optimize')")
                con.execute("INSERT INTO titles_fts(titles_fts) VALUES('optimize')")
                if self.trigram:
                    con.execute("INSERT INTO titles_trigram(titles_trigram) VALUES('optimize')")
            pages_hash, redirects_hash = self._content_hashes()
            n_titles = con.execute("SELECT count(*) FROM title_index").fetchone()[0]
            now = _dt.datetime.now(_dt.timezone.utc)
            meta = dict(self._meta)
            meta.update(
                {
                    "revision_date": meta.get("revision_date") or self._max_timestamp,
                    "latest_revision_timestamp": self._max_timestamp,
                    "pages": self.n_pages,
                    "redirects": self.n_redirects,
                    "indexed_titles": n_titles,
                    "duplicates_skipped": self.duplicates_skipped,
                    "duplicate_redirects_skipped": self.duplicate_redirects_skipped,
                    "replaced_surrogates": self.replaced_surrogates,
                    "content_sha256": pages_hash,
                    "content_hash_scope": "sha256 over pages ordered by pageid: "
                    "'pageid\\trevid\\ttitle\\ttimestamp\\tbytes\\n' + utf-8 text",
                    "redirects_sha256": redirects_hash,
                    "fts5": self.fts5,
                    "title_search": ("fts5+trigram" if self.trigram else "fts5") if self.fts5 else "like",
                    "text_search": "fts5-bm25" if self.fts5 else "like",
                    "sqlite_version": sqlite3.sqlite_version,
                    "harness_version": HARNESS_VERSION,
                    "created_at": now.isoformat(timespec="seconds"),
                    "build_seconds": round((now - self._started).total_seconds(), 3),
                }
            )
            if self.replaced_surrogates:
                log.warning(
                    "%s: %d lone surrogate(s) in titles or texts (\\udXXX escapes in the source) stored as U+FFFD "
                    "(metadata replaced_surrogates)",
                    self.target,
                    self.replaced_surrogates,
                )
            con.execute("BEGIN")
            con.executemany(  # a value holding a lone surrogate (a title in stats): JSON's escape
                "INSERT OR REPLACE INTO metadata(key, value) VALUES (?, ?)",
                [(k, json_text(json.dumps(v, ensure_ascii=False))) for k, v in meta.items()],
            )
            con.execute("COMMIT")
            con.execute("PRAGMA journal_mode=DELETE")
            con.execute("ANALYZE")
            con.close()
            with open(self.tmp_path, "rb+") as f:
                os.fsync(f.fileno())
            os.replace(self.tmp_path, self.target)
            try:
                dir_fd = os.open(self.target.parent, os.O_RDONLY)
                try:
                    os.fsync(dir_fd)
                finally:
                    os.close(dir_fd)
            except OSError:
                pass
            self._closed = True
            self._lock.release()
            return meta
        except BaseException:
            self.abort()
            raise

    def abort(self) -> None:
        """Discard everything written so far; the target path is left untouched."""
        if self._closed:
            return
        self._closed = True
        try:
            self._con.close()
        except Exception:  # noqa: BLE001
            pass
        self._remove_tmp()
        self._lock.release()

    def _remove_tmp(self) -> None:
        for suffix in ("", "-journal", "-wal", "-shm"):
            try:
                os.unlink(f"{self.tmp_path}{suffix}")
            except FileNotFoundError:
                pass


def output_target(path: Path) -> Path:
    """Where a snapshot at ``path`` is written: a symlink's target (the link is kept). Only a regular
    file or a new path: renaming over a device, FIFO or folder would replace it (/dev/null as root)."""
    target = Path(os.path.realpath(path))
    if target.is_symlink():  # realpath stops at a loop
        raise SnapshotError(f"{path}: a symbolic link loop")
    try:
        mode = os.stat(target).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return target
    except OSError as exc:
        raise SnapshotError(f"{path}: cannot write ({exc.strerror or exc})") from None
    if stat.S_ISDIR(mode):
        raise SnapshotError(f"{path}: is a directory, not a snapshot file path")
    if not stat.S_ISREG(mode):
        raise SnapshotError(f"{path}: not a regular file (a device, FIFO or socket); a snapshot is written only to a file")
    return target


class BuildLock:
    """An exclusive ``flock`` on ``.NAME.lock`` beside the target while a build writes it: two builds
    of one file would both report success and the later silently win. The kernel drops it when the
    holder dies, so a killed build never blocks the next; the file holds the pid for the message a
    second build gets, and is removed on release."""

    @classmethod
    def take(cls, path: Path, overwrite: bool) -> BuildLock:
        """Lock the file a snapshot at ``path`` lands in (a symlink's target: written through, the
        link kept), creating its folder; refused if it exists and not ``overwrite``."""
        path = Path(path)
        target = output_target(path)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise SnapshotError(f"{path}: cannot create its folder ({exc.strerror or exc})") from None
        lock = cls(target, path)
        # checked under the lock: a build that finished meanwhile is not replaced without overwrite
        if target.exists() and not overwrite:
            lock.release()
            raise SnapshotError(f"{path} already exists (use --overwrite to replace it)")
        return lock

    def __init__(self, target: Path, shown: Path):
        import fcntl

        self.target = target
        self.path = target.parent / f".{target.name}.lock"
        for _ in range(50):
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
            except OSError as exc:
                raise SnapshotError(f"{shown}: cannot create the lock {self.path} ({exc.strerror or exc})") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
                os.close(fd)
                who = f"pid {holder}" if holder.isdigit() else "another process"
                raise SnapshotError(
                    f"{shown}: another build is writing it ({who}); wait for it to finish or choose another --out"
                ) from None
            # the holder before us may have removed the file on release: lock the one at the path now
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        else:  # pragma: no cover - only under a pathological unlink storm
            raise SnapshotError(f"{shown}: could not lock {self.path}")
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            os.unlink(self.path)  # while still locked: a waiting build then retries on a fresh file
        except OSError:
            pass
        os.close(fd)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by someone else
        return True
    return True


def remove_dead_leftovers(directory: Path, pattern: re.Pattern) -> list[str]:
    """Remove the temp files/dirs of builds killed before they could clean up: names matching
    ``pattern`` whose first group is the pid of a process that no longer runs."""
    removed = []
    if not directory.is_dir():
        return removed
    for path in directory.iterdir():
        m = pattern.match(path.name)
        if not m or int(m.group(1)) == os.getpid() or pid_alive(int(m.group(1))):
            continue
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        removed.append(path.name)
    return removed


# reader ------------------------------------------------------------------------------------
def _missing_columns(con: sqlite3.Connection, tables: set[str]) -> list[str]:
    """``TABLE.COLUMN`` for each column the reader asks of a table the file holds that it lacks."""
    lacking = []
    for table, columns in READ_COLUMNS.items():
        if table in tables:
            have = {row[1] for row in con.execute(f"PRAGMA table_info({table})")}
            lacking += [f"{table}.{column}" for column in columns if column not in have]
    return lacking


class Snapshot:
    """A read-only snapshot. Thread-safe (one connection, one lock)."""

    def __init__(self, path: Path, con: sqlite3.Connection, metadata: dict[str, Any], tables: set[str]):
        self.path = path
        self._con = con
        self._lock = threading.RLock()
        self._metadata = metadata
        self._fts = {"pages_fts", "titles_fts"} <= tables
        self._trigram = {"titles_trigram", "titles_trigram_vocab"} <= tables
        self._fulltext = None  # a tantivy sidecar (harness.wiki_snapshot.fulltext) when one matches this snapshot

    @classmethod
    def open(cls, path: str | os.PathLike, fulltext: bool = True) -> "Snapshot":
        """Open read-only. With ``fulltext`` (default), a ``<SNAP>.fulltext/`` tantivy sidecar built
        from this snapshot's content answers :meth:`search` (a stale one is ignored with a warning)."""
        p = Path(path)
        if not p.exists():
            raise SnapshotError(f"snapshot not found: {p}")
        if not p.is_file():
            raise SnapshotError(f"{p}: not a snapshot file")
        refuse_zim(p)
        try:
            con = sqlite3.connect(p.resolve().as_uri() + "?mode=ro", uri=True, check_same_thread=False)
        except sqlite3.Error as exc:
            raise SnapshotError(f"{p}: cannot open ({exc})") from None
        try:
            tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}
        except sqlite3.DatabaseError as exc:
            con.close()
            raise SnapshotError(f"{p}: not a SQLite file ({exc})") from None
        missing = [t for t in REQUIRED_TABLES if t not in tables]
        if missing:
            con.close()
            raise SnapshotError(f"{p}: not a wiki snapshot (missing table(s): {', '.join(missing)})")
        try:
            lacking = _missing_columns(con, tables)
        except sqlite3.DatabaseError as exc:
            con.close()
            raise SnapshotError(f"{p}: not a wiki snapshot (its tables cannot be read: {exc})") from None
        if lacking:
            con.close()
            raise SnapshotError(f"{p}: not a wiki snapshot (missing column(s): {', '.join(lacking)})")
        try:
            meta = {}
            for key, value in con.execute("SELECT key, value FROM metadata"):
                try:
                    meta[key] = json.loads(value)
                except (TypeError, json.JSONDecodeError):
                    meta[key] = value
        except sqlite3.DatabaseError as exc:
            con.close()
            raise SnapshotError(f"{p}: unreadable snapshot metadata ({exc})") from None
        if meta.get("format") != FORMAT:
            con.close()
            raise SnapshotError(f"{p}: not a wiki snapshot (metadata has no format={FORMAT!r})")
        if int(meta.get("format_version") or 0) > FORMAT_VERSION:
            con.close()
            raise SnapshotError(
                f"{p}: snapshot format version {meta.get('format_version')} is newer than this harness reads "
                f"({FORMAT_VERSION}); upgrade the harness"
            )
        snap = cls(p, con, meta, tables)
        if fulltext and snap._fts:
            from harness.wiki_snapshot.fulltext import open_fulltext, sidecar_path

            if sidecar_path(p).exists():
                snap._fulltext = open_fulltext(p, meta.get("content_sha256"))
        return snap

    # plumbing
    def _all(self, sql: str, params: tuple = ()) -> list[tuple]:
        with self._lock:
            return self._con.execute(sql, params).fetchall()

    def _one(self, sql: str, params: tuple = ()) -> tuple | None:
        with self._lock:
            return self._con.execute(sql, params).fetchone()

    def _safe_all(self, sql: str, params: tuple = ()) -> list[tuple]:
        """A MATCH query: an FTS5 syntax error or an oversized query gives no rows, never an exception."""
        try:
            return self._all(sql, params)
        except sqlite3.OperationalError:
            return []

    _PAGE_COLS = "pageid, revid, title, text, timestamp"

    def _page(self, where: str, param: Any) -> Page | None:
        row = self._one(f"SELECT {self._PAGE_COLS} FROM pages WHERE {where} ORDER BY pageid LIMIT 1", (param,))
        return Page(*row) if row else None

    # API
    def __enter__(self) -> "Snapshot":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __len__(self) -> int:
        return int(self._one("SELECT count(*) FROM pages")[0])

    def __repr__(self) -> str:
        return f"Snapshot({str(self.path)!r}, pages={self._metadata.get('pages')})"

    @property
    def metadata(self) -> dict[str, Any]:
        meta = dict(self._metadata)
        if self._fts:  # how similar_titles picks its candidates: another version lists other titles
            meta["similar_titles"] = dict(SIMILAR_TITLES)
        if self._fulltext is not None:  # the engine changes which pages search returns: recorded
            meta["text_search"] = self._fulltext.meta["text_search"]
            meta["fulltext"] = dict(self._fulltext.meta)
        return meta

    def close(self) -> None:
        with self._lock:
            self._con.close()

    @property
    def full_text_search(self) -> bool:
        """True when :meth:`search` is bm25 over page text (FTS5, or a tantivy sidecar; False: the LIKE fallback)."""
        return self._fts

    def get_page(self, pageid: int) -> Page | None:
        try:
            pageid = int(pageid)
        except (TypeError, ValueError):
            return None
        return self._page("pageid = ?", pageid)

    def _lookup(self, title: str) -> Page | None:
        return self._page("title = ?", title) or self._page("title_key = ?", title.casefold())

    def resolve_title(self, title: str) -> Page | None:
        """Exact title, then case-insensitive, then through redirects (chains of at most
        ``MAX_REDIRECT_HOPS``, loops stop). Underscores count as spaces; ``#section`` is ignored."""
        if not isinstance(title, str):
            return None
        current, _ = split_fragment(title)
        seen: set[str] = set()
        for _ in range(MAX_REDIRECT_HOPS + 1):
            if not current or current.casefold() in seen:
                return None
            seen.add(current.casefold())
            page = self._lookup(current)
            if page is not None:
                return page
            row = self._one("SELECT target FROM redirects WHERE title = ?", (current,)) or self._one(
                "SELECT target FROM redirects WHERE title_key = ? ORDER BY title LIMIT 1", (current.casefold(),)
            )
            if row is None:
                return None
            current = normalize_title(row[0])
        return None

    def redirect_target(self, title: str) -> str | None:
        """The stored target of a redirect title (one hop), or None."""
        t = normalize_title(title)
        row = self._one("SELECT target FROM redirects WHERE title = ?", (t,)) or self._one(
            "SELECT target FROM redirects WHERE title_key = ? ORDER BY title LIMIT 1", (t.casefold(),)
        )
        return row[0] if row else None

    def titles(self) -> Iterator[str]:
        """All page titles, in title order (fetched in batches; safe to interleave with other calls)."""
        last = None
        while True:
            if last is None:
                rows = self._all("SELECT title FROM pages ORDER BY title LIMIT 1000")
            else:
                rows = self._all("SELECT title FROM pages WHERE title > ? ORDER BY title LIMIT 1000", (last,))
            if not rows:
                return
            for (t,) in rows:
                yield t
            last = rows[-1][0]

    def pages(self, batch: int = 500) -> Iterator[Page]:
        """All pages in pageid order (fetched in batches; safe to interleave with other calls)."""
        last = None
        while True:
            if last is None:
                rows = self._all(f"SELECT {self._PAGE_COLS} FROM pages ORDER BY pageid LIMIT ?", (batch,))
            else:
                rows = self._all(
                    f"SELECT {self._PAGE_COLS} FROM pages WHERE pageid > ? ORDER BY pageid LIMIT ?", (last, batch)
                )
            if not rows:
                return
            for row in rows:
                yield Page(*row)
            last = rows[-1][0]

    # search
    def search(self, query: str, k: int = 10) -> list[tuple[str, float]]:
        """Full-text search over titles and texts: ``(title, score)`` best first (score = -bm25,
        title matches weighted 5x; with the LIKE fallback: the number of query words found)."""
        if not isinstance(query, str) or k <= 0:
            return []
        words = _dedupe(_words(query))
        content = [w for w in words if w not in _STOPWORDS] or words
        content = content[:32]
        if not content:
            return []
        if self._fulltext is not None:
            with self._lock:
                return self._fulltext.search(content, int(k))
        if self._fts:
            match = " OR ".join(_quote(w) for w in content)
            # The k best rowids first, then their titles: joining before the LIMIT looked up every
            # matching page (a B-tree search each: most of the time for common words at 100k pages).
            rows = self._safe_all(
                "SELECT p.title, f.s FROM (SELECT rowid AS id, bm25(pages_fts, 5.0, 1.0) AS s FROM pages_fts "
                "WHERE pages_fts MATCH ? ORDER BY s LIMIT ?) f JOIN pages p ON p.pageid = f.id ORDER BY f.s",
                (match, int(k)),
            )
            return [(t, -float(s)) for t, s in rows]
        # LIKE fallback: count query words present in title or text.
        terms = [w.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") for w in content[:8]]
        score = " + ".join(["((title_key || ' ' || lower(text)) LIKE ? ESCAPE '\\')"] * len(terms))
        rows = self._all(
            f"SELECT title, ({score}) AS s FROM pages WHERE s > 0 ORDER BY s DESC, pageid LIMIT ?",
            (*[f"%{t}%" for t in terms], int(k)),
        )
        return [(t, float(s)) for t, s in rows]

    def _title_candidates(self, qkey: str, qwords: list[str]) -> list[tuple[str, str]]:
        """(indexed title, page title) pairs worth scoring for ``qkey``."""
        if not self._fts:
            out: list[tuple[str, str]] = []
            pieces = _dedupe([w[:4] for w in qwords[:8] if len(w) >= 2]) or ([qkey[:4]] if qkey else [])
            for piece in pieces:
                esc = piece.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
                out += self._all(
                    "SELECT ti.title, p.title FROM title_index ti JOIN pages p ON p.pageid = ti.pageid "
                    "WHERE lower(ti.title) LIKE ? ESCAPE '\\' LIMIT 200",
                    (f"%{esc}%",),
                )
            return out
        # Boolean FTS5 queries only, each stopping at a LIMIT: an OR query ranked by bm25 reads and
        # scores every posting of every term (title words and trigrams recur in thousands of titles:
        # 848 ms p95 at 1M pages). Each step adds title rows (most specific first) until TITLE_ROWS.
        found: dict[int, None] = {}

        def take(fts: str, match: str, limit: int | None = None) -> int:
            room = TITLE_ROWS - len(found)
            if room <= 0:
                return 0
            rows = self._safe_all(
                f"SELECT rowid FROM {fts} WHERE {fts} MATCH ? LIMIT ?", (match, min(room, limit or room))
            )
            before = len(found)
            found.update((r[0], None) for r in rows)
            return len(found) - before

        # titles that start with the query (B-tree ranges, shortest first: the query itself, a redirect)
        prefix = self._all(
            "SELECT title, title FROM pages WHERE title_key >= ? AND title_key < ? ORDER BY title_key LIMIT 20",
            (qkey, qkey + "\U0010ffff"),
        ) + self._all(
            "SELECT r.title, p.title FROM redirects r JOIN pages p ON p.title = r.target "
            "WHERE r.title_key >= ? AND r.title_key < ? ORDER BY r.title_key LIMIT 20",
            (qkey, qkey + "\U0010ffff"),
        )
        words = qwords[:16]
        content = ([w for w in words if w not in _STOPWORDS] or words)[:8]
        exact = 0
        if words:  # every word, the last as a prefix (a title typed in part)
            last = _quote(words[-1]) + ("*" if len(words[-1]) >= 2 else "")  # a 1-letter prefix has no index
            exact = take("titles_fts", " ".join([_quote(w) for w in words[:-1]] + [last]))
        df = {}
        for w in content:
            row = self._safe_all(
                "SELECT count(*) FROM (SELECT 1 FROM titles_fts WHERE titles_fts MATCH ? LIMIT ?)",
                (_quote(w), TITLE_DF_CAP),
            )
            df[w] = row[0][0] if row else 0
        known = sorted((w for w in content if df[w]), key=lambda w: df[w])  # rarest first
        unknown = [w for w in content if not df[w] and len(w) >= 3]
        if self._trigram and (unknown or not exact):
            # Titles with every misspelt word (one edit) and the longest other words: three words at
            # most (each more costs a merge of its pieces' postings). When the words as typed are in
            # no title, a word of 7 letters or more may be a misspelling found in some other title
            # (a redirect from a misspelling): it is allowed one edit too.
            chosen = (unknown + sorted((w for w in known if len(w) >= 3), key=len, reverse=True))[:3]
            parts = [
                f"({_one_edit(w)})" if not df[w] or (not exact and len(w) >= 7) else _quote(w) for w in chosen
            ]
            if parts:
                take("titles_trigram", " AND ".join(parts))
        # titles with two of the rarest words (a third word misspelt or missing), or with the
        # rarest and a short word of the query ("of", "the")
        pair_words = known[:5]
        pairs = [f"({_quote(a)} AND {_quote(b)})" for i, a in enumerate(pair_words) for b in pair_words[i + 1 :]]
        if pair_words:
            pairs += [f"({_quote(pair_words[0])} AND {_quote(w)})" for w in words if w in _STOPWORDS][:3]
        if pairs:
            take("titles_fts", " OR ".join(pairs))
        if self._trigram and known and not exact and (unknown or len(content) <= 3):
            # A rare word with the nearest letter of each neighbour (or the next one: two letters
            # swapped there): the trigrams across two words that a typo in the neighbouring word
            # usually leaves whole ("park h" for "Park Hyadun": Park Hayden; "cloud h" for "cloud
            # ahll"). For a misspelt word, or a short query (a misspelling may be another title's word).
            phrases = []
            for w in [w for w in known[:2] if len(w) <= 8]:  # a phrase costs a merge per trigram
                j = qkey.find(w)
                if j > 1 and qkey[j - 1] == " ":
                    phrases.append(_quote(qkey[j - 2 : j + len(w)]))
                    if j > 2 and qkey[j - 3] != " ":
                        phrases.append(_quote(qkey[j - 3] + qkey[j - 1 : j + len(w)]))
                e = j + len(w)
                if j >= 0 and qkey[e : e + 1] == " " and len(qkey) > e + 1:
                    phrases.append(_quote(qkey[j : e + 2]))
                    if len(qkey) > e + 2 and qkey[e + 2] != " ":
                        phrases.append(_quote(qkey[j : e + 1] + qkey[e + 2]))
            if phrases:
                take("titles_trigram", " OR ".join(phrases))
        for n, w in enumerate(known[:2]):  # the rarest words alone, sharing what room is left
            take("titles_fts", _quote(w), (TITLE_ROWS - len(found)) // (2 - n) or 1)
        if len(found) < TITLE_SCORED and self._trigram:  # few titles share a word: any word, one edit
            alts = [f"({e})" for e in (_one_edit(w) for w in content) if e]
            if alts:
                take("titles_trigram", " OR ".join(alts))
        # (indexed title, page title) from the prefix lookup, (indexed title, pageid) from title_index
        rows: list[tuple[str, str | int]] = list(prefix)
        if found:
            marks = ",".join("?" * len(found))
            rows += self._all(f"SELECT title, pageid FROM title_index WHERE id IN ({marks})", tuple(found))
        # The rows found are in index order, not by relevance: rank them by the share of trigrams
        # they have in common with the query (Jaccard), shorter first on ties, and score the best.
        grams = list({qkey[i : i + 3] for i in range(len(qkey) - 2)})
        ranked = []
        for n, (indexed, page) in enumerate(rows):
            ikey = indexed.casefold()
            shared = sum(map(ikey.__contains__, grams))
            union = len(grams) + max(1, len(ikey) - 2) - shared
            ranked.append((-shared / union if grams else 0.0, len(ikey), n, indexed, page))
        ranked.sort()
        best = [(indexed, page) for *_, indexed, page in ranked[:TITLE_SCORED]]
        pageids = [page for _, page in best if isinstance(page, int)]
        names = {}
        if pageids:
            marks = ",".join("?" * len(pageids))
            names = dict(self._all(f"SELECT pageid, title FROM pages WHERE pageid IN ({marks})", tuple(pageids)))
        return [(t, p if isinstance(p, str) else names[p]) for t, p in best if isinstance(p, str) or p in names]

    def similar_titles(self, query: str, k: int = 10) -> list[str]:
        """Page titles close to ``query`` (for a title that resolved to nothing): title matches
        first (FTS5 words and trigrams, re-ranked by string similarity), then full-text matches
        to fill up to ``k``. Never raises on odd input."""
        if not isinstance(query, str) or k <= 0:
            return []
        q = (split_fragment(query)[0] or normalize_title(query))[:MAX_QUERY_CHARS]
        qkey = q.casefold()
        if not qkey:
            return []
        qwords = _dedupe(_words(qkey))
        scored_words = ([w for w in qwords if w not in _STOPWORDS] or qwords)[:16]
        best: dict[str, float] = {}
        scored: set[str] = set()
        word_match: dict[tuple[str, str], float] = {}  # title words recur across candidates

        letters: dict[str, dict[str, int]] = {}

        def counts(word: str) -> dict[str, int]:
            c = letters.get(word)
            if c is None:
                c = letters[word] = {}
                for ch in word:
                    c[ch] = c.get(ch, 0) + 1
            return c

        def match(w: str, iw: str) -> float:
            """How well query word ``w`` matches title word ``iw``: 1, or the ratio if >= 0.8, else 0.
            The ratio's upper bounds (difflib's real_quick_ratio and quick_ratio: the lengths, then
            the shared letters, in the ratio's own formula) settle most pairs below 0.8 exactly."""
            key = (w, iw)
            m = word_match.get(key)
            if m is None:
                m, size = 0.0, len(w) + len(iw)
                if 2.0 * min(len(w), len(iw)) / size >= 0.8:
                    cw, ci = counts(w), counts(iw)
                    if 2.0 * sum(min(n, ci.get(ch, 0)) for ch, n in cw.items()) / size >= 0.8:
                        r = difflib.SequenceMatcher(None, w, iw, autojunk=False).ratio()
                        m = r if r >= 0.8 else 0.0
                word_match[key] = m
            return m

        candidates = []
        for indexed, page_title in self._title_candidates(qkey, qwords):
            ikey = indexed.casefold()
            if ikey in scored:
                continue
            scored.add(ikey)
            # How well each query word matches some title word (a misspelt word still counts:
            # "einstien" ~ "einstein" 0.88; below 0.8 it does not), plus whole-string similarity.
            iwords = _dedupe(_words(ikey))
            overlap = 0.0
            for w in scored_words:
                overlap += 1.0 if w in iwords else max((match(w, iw) for iw in iwords), default=0.0)
            overlap = overlap / len(scored_words) if scored_words else 0.0
            # an upper bound of the score: the whole-string ratio is at most 2 * shorter / both lengths
            bound = 0.5 * (2.0 * min(len(qkey), len(ikey)) / (len(qkey) + len(ikey))) + 0.5 * overlap
            candidates.append((bound, overlap, ikey, page_title))
        # The whole-string ratio is the costly part (quadratic). Best bounds first: once a bound is
        # below the k-th best score found, no later candidate can enter the k best (exact pruning).
        candidates.sort(key=lambda c: -c[0])
        whole = difflib.SequenceMatcher(None, qkey, "", autojunk=False)
        kth = -1.0
        for bound, overlap, ikey, page_title in candidates:
            if bound < kth:
                break
            whole.set_seq2(ikey)
            if 0.5 * whole.quick_ratio() + 0.5 * overlap < kth:
                continue
            score = 0.5 * whole.ratio() + 0.5 * overlap
            if score > best.get(page_title, -1.0):
                best[page_title] = score
                if len(best) >= k:
                    kth = sorted(best.values(), reverse=True)[k - 1]
        ranked = sorted(best.items(), key=lambda kv: (-kv[1], kv[0]))
        out = [t for t, _ in ranked[:k]]
        if len(out) < k:
            for t, _ in self.search(q, k * 2):
                if t not in best:
                    out.append(t)
                    best[t] = 0.0
                if len(out) >= k:
                    break
        return out
