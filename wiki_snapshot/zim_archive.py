"""A Kiwix ZIM archive (e.g. ``wikipedia_en_all_nopic_2023-11.zim``, ~7M articles) read in place.

:class:`ZimWiki` implements :class:`harness.wiki_snapshot.space.WikiBackend` with libzim's own indexes and
nothing scanned at open (opening reads the header, the metadata and the stored checksum, nothing
per entry):

- titles: ``Archive.get_entry_by_title`` / ``get_entry_by_path`` (binary searches of the archive's
  title and path listings); a redirect entry is followed with ``Entry.get_redirect_entry``;
- similar titles: the archive's title suggestions (``libzim.suggestion.SuggestionSearcher``);
- full-text search: the archive's Xapian full-text index (``libzim.search``), when it has one;
- a page's text: its HTML rendered to markdown by :func:`harness.wiki_snapshot.builders.html_to_markdown`,
  the function ``harness snapshot build --kind zim`` uses, so a page reads the same here as in a
  snapshot built from the same archive. The first read renders; later ones hit an in-memory LRU or
  an on-disk cache under ``$HARNESS_CACHE_DIR/zim/<archive uuid>/`` (``~/.cache/harness`` when the
  variable is unset).

What libzim offers and does not (python-libzim 3.13.1, ``libzim/libzim.pyx``; libzim's headers at
openzim/libzim commit d3f23136):

- search results are entry paths in rank order, with no score (the C++ ``SearchIterator::getScore``
  is not bound), so :meth:`ZimWiki.search` scores by rank: ``1 / (1 + rank)``;
- title suggestions collapse every redirect to one page into one result (``set_collapse_key`` on
  the target path, ``src/suggestion.cpp``; test ``Suggestion.checkRedirectionCollapse``) and hold
  only entries declared front articles (``include/zim/suggestion.h``): a suggestion may be a
  redirect, so each is followed to its page;
- the archive counts user entries (``entry_count``: pages, redirects and resources together) and
  front articles (``article_count``) but not redirects, so ``metadata["redirects"]`` is None;
- ``Archive`` is thread-safe (``include/zim/archive.h``; the maintainer's answer in openzim/libzim
  issue 673); suggestion searches are not (``include/zim/suggestion.h``), nor, in older libzim,
  full-text searches (issue 673): one lock serializes every search and suggestion here, reads
  take none. (python-libzim's reader calls also hold the GIL.)
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import unicodedata
from collections import OrderedDict
from pathlib import Path
from typing import Any

from harness.wiki_snapshot.errors import SnapshotError
from harness.wiki_snapshot.text import json_bytes, plain_text
from harness.wiki_snapshot.store import MAX_QUERY_CHARS, MAX_REDIRECT_HOPS, Page, normalize_title, split_fragment, stable_pageid
from harness._version import pip_install

FORMAT = "zim"
# ZIM metadata recorded in ``metadata["zim_metadata"]`` (openZIM's metadata conventions).
META_KEYS = ("Title", "Name", "Description", "Language", "Date", "Creator", "Publisher", "Source", "Flavour", "Tags")
# No MediaWiki title is longer than 255 bytes; a query many times longer is no title (and not looked up).
MAX_TITLE_BYTES = 1024
# Full-text queries longer than this are cut at a word boundary (as Snapshot.search keeps 32 words).
MAX_SEARCH_CHARS = 1000
# How many title suggestions are read to find a title that differs from the query by case only.
CASE_SUGGESTIONS = 20
CACHE_VERSION = 1


def renderer_description() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        md = version("markdownify")
    except PackageNotFoundError:  # pragma: no cover - markdownify is a dependency
        md = "unknown"
    return (
        f"harness.wiki_snapshot.builders.html_to_markdown: markdownify {md} as fanoutqa.utils.markdownify "
        "(heading_style=atx, links as text, images as alt, no <head>); the text `snapshot build --kind zim` stores"
    )


def default_cache_root() -> Path:
    root = os.environ.get("HARNESS_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "harness")
    return Path(root) / "zim"


def _clean(text: Any) -> str | None:
    """A query as a str libzim can take: each lone surrogate (which UTF-8 cannot encode) becomes one
    U+FFFD (``harness.wiki_snapshot.text``), NFC."""
    if not isinstance(text, str):
        return None
    return unicodedata.normalize("NFC", plain_text(text)[0])


def _upper_first(s: str) -> str:
    return s[:1].upper() + s[1:]


class ZimWiki:
    """A ZIM archive read in place (see the module docstring). Use :meth:`open`."""

    def __init__(
        self,
        path: Path,
        archive: Any,
        *,
        cache_dir: str | os.PathLike | None = None,
        disk_cache: bool = True,
        memory_pages: int = 256,
    ):
        self.path = path
        self._archive = archive
        self._uuid = str(archive.uuid)
        self._fulltext = bool(archive.has_fulltext_index)
        self._title_index = bool(archive.has_title_index)
        self._new_scheme = bool(archive.has_new_namespace_scheme)
        self._search_lock = threading.Lock()  # libzim's searchers are not thread-safe
        self._searcher = None
        self._suggester = None
        self._cache_lock = threading.Lock()
        self._memory: OrderedDict[str, str] = OrderedDict()  # entry path -> markdown
        self._memory_pages = max(0, int(memory_pages))
        self._pageid_paths: dict[int, str] = {}  # pages resolved in this process
        self.renders = 0  # pages rendered (not read from a cache) by this object
        root = Path(cache_dir) if cache_dir else default_cache_root()
        self.cache_dir: Path | None = (root / self._uuid) if disk_cache else None
        self._renderer = renderer_description()
        self._zim_metadata = self._read_zim_metadata()
        self._metadata = self._build_metadata()
        self.notices: list[str] = []
        if not self._fulltext:
            self.notices.append(
                f"{path.name} has no full-text index: search() finds nothing, so the search tool's hit rule "
                "falls back to title lookup and similar titles come from the archive's title suggestions only"
            )
        if not self._title_index:
            self.notices.append(
                f"{path.name} has no title index: similar titles are titles that start with the query "
                "(libzim's title listing), not word matches"
            )

    @classmethod
    def open(cls, path: str | os.PathLike, **options: Any) -> "ZimWiki":
        p = Path(path)
        if not p.exists():
            raise SnapshotError(f"ZIM archive not found: {p}")
        if not p.is_file():
            raise SnapshotError(f"{p}: not a regular file (a ZIM archive expected)")
        try:
            from libzim.reader import Archive
        except ImportError:
            raise SnapshotError(f"reading ZIM archives needs the libzim package: {pip_install('zim')}") from None
        try:
            archive = Archive(str(p))
        except (RuntimeError, OSError, ValueError) as exc:
            # libzim checks the header and the file's size against it: a truncated file fails here
            raise SnapshotError(f"{p}: not a readable ZIM archive ({exc})") from None
        return cls(p, archive, **options)

    # WikiBackend --------------------------------------------------------------------------
    @property
    def metadata(self) -> dict[str, Any]:
        return json.loads(json.dumps(self._metadata))  # a copy callers may change

    @property
    def full_text_search(self) -> bool:
        """True when the archive has a Xapian full-text index (:meth:`search` uses it)."""
        return self._fulltext

    def close(self) -> None:
        """libzim closes the file when the archive object goes; drop ours (and the searchers)."""
        with self._search_lock:
            self._searcher = self._suggester = None

    def __enter__(self) -> "ZimWiki":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"ZimWiki({str(self.path)!r}, articles={self._metadata['pages']})"

    def resolve_title(self, title: str) -> Page | None:
        """The page titled ``title``: exact (by title, then by path, Kiwix paths being titles with
        underscores), then a few case variants (first letter upper, the rest lower, each word
        capitalized), then a title suggestion equal to it case folded; redirects followed (at most
        ``MAX_REDIRECT_HOPS``). ``#section`` is ignored. None when nothing matches or the entry is
        not an HTML page (an image, a stylesheet)."""
        found = self._resolve_entry(title)
        return None if found is None else self._page_of(*found)

    def resolve_pageid(self, title: str) -> int | None:
        """The pageid :meth:`resolve_title` would return, without rendering the page: what counting
        a run's gold pages needs (a few thousand lookups on a whole Wikipedia stay a few seconds)."""
        found = self._resolve_entry(title)
        if found is None:
            return None
        entry, _ = found
        pageid = stable_pageid(self._title_of(entry))
        self._pageid_paths[pageid] = entry.path
        return pageid

    def _resolve_entry(self, title: str):
        """``(entry, item)`` of the HTML page ``title`` names (redirects followed), or None."""
        title = _clean(title)
        if not title or len(title.encode("utf-8")) > MAX_TITLE_BYTES:
            return None
        base, _ = split_fragment(title)
        if not base:
            return None
        entry = self._find_entry(base)
        if entry is None:
            return None
        entry = self._follow(entry)
        if entry is None:
            return None
        try:
            item = entry.get_item()
        except (RuntimeError, KeyError):
            return None
        if not item.mimetype.startswith("text/html"):
            return None
        return entry, item

    def get_page(self, pageid: int) -> Page | None:
        """A page already returned by :meth:`resolve_title` (or named by :meth:`resolve_pageid`) in this
        process, by its pageid; None for any other (a ZIM has no page ids: they are derived from
        titles, and the title of an id is not known without scanning the archive)."""
        try:
            path = self._pageid_paths.get(int(pageid))
        except (TypeError, ValueError):
            return None
        if path is None:
            return None
        try:
            entry = self._archive.get_entry_by_path(path)
            item = entry.get_item()
        except (KeyError, RuntimeError):
            return None
        return self._page_of(entry, item)

    def similar_titles(self, query: str, k: int = 10) -> list[str]:
        """Page titles like ``query``: the archive's title suggestions (a redirect's target in its
        place, each page once), then full-text results to fill up to ``k``."""
        query = _clean(query)
        if not query or k <= 0:
            return []
        query = query[:MAX_QUERY_CHARS]
        out: list[str] = []
        seen: set[str] = set()

        def add(entry) -> None:
            entry = self._follow(entry)
            if entry is None or not self._is_html(entry):
                return
            t = self._title_of(entry)
            if t not in seen:
                seen.add(t)
                out.append(t)

        # redirects to one page collapse into one suggestion; read more than k to fill k pages
        for path in self._suggest(normalize_title(query), 3 * k + 10):
            entry = self._entry_by_path(path)
            if entry is not None:
                add(entry)
            if len(out) >= k:
                return out[:k]
        if self._fulltext:
            for path in self._search_paths(query, 2 * k):
                entry = self._entry_by_path(path)
                if entry is not None:
                    add(entry)
                if len(out) >= k:
                    break
        return out[:k]

    def search(self, query: str, k: int = 10) -> list[tuple[str, float]]:
        """The archive's Xapian full-text search: ``(title, 1 / (1 + rank))`` best first (libzim's
        Python binding gives ranks, not scores). ``[]`` when the archive has no full-text index."""
        query = _clean(query)
        if not query or k <= 0 or not self._fulltext:
            return []
        out: list[tuple[str, float]] = []
        seen: set[str] = set()
        for path in self._search_paths(query, k):
            entry = self._entry_by_path(path)
            if entry is None:
                continue
            entry = self._follow(entry)
            if entry is None or not self._is_html(entry):
                continue
            t = self._title_of(entry)
            if t not in seen:
                seen.add(t)
                out.append((t, 1.0 / (1 + len(out))))
        return out

    # lookups ----------------------------------------------------------------------------------
    def _entry_by_title(self, title: str):
        try:
            return self._archive.get_entry_by_title(title)
        except (KeyError, RuntimeError, UnicodeError):
            return None

    def _entry_by_path(self, path: str):
        try:
            return self._archive.get_entry_by_path(path)
        except (KeyError, RuntimeError, UnicodeError):
            return None

    def _exact(self, title: str):
        entry = self._entry_by_title(title)
        if entry is not None:
            return entry
        path = title.replace(" ", "_")
        entry = self._entry_by_path(path)
        if entry is None and not self._new_scheme:  # pre-2021 archives keep articles under "A/"
            entry = self._entry_by_path("A/" + path)
        return entry

    def _find_entry(self, title: str):
        words = " ".join(_upper_first(w) for w in title.split(" "))
        variants = [title, _upper_first(title), _upper_first(title.lower()), words]
        for v in dict.fromkeys(variants):
            entry = self._exact(v)
            if entry is not None:
                return entry
        key = title.casefold()
        for path in self._suggest(title, CASE_SUGGESTIONS):
            entry = self._entry_by_path(path)
            if entry is not None and self._title_of(entry).casefold() == key:
                return entry
        return None

    def _follow(self, entry):
        """The entry a redirect chain ends at (None for a loop, a dangling or too long chain)."""
        for _ in range(MAX_REDIRECT_HOPS + 1):
            if not entry.is_redirect:
                return entry
            try:
                entry = entry.get_redirect_entry()
            except (KeyError, RuntimeError):
                return None
        return None

    @staticmethod
    def _title_of(entry) -> str:
        # as the zim builder names a page (entry.title, else its path), normalized as a snapshot stores it
        return normalize_title(entry.title or entry.path)

    @staticmethod
    def _is_html(entry) -> bool:
        try:
            return entry.get_item().mimetype.startswith("text/html")
        except (RuntimeError, KeyError):
            return False

    def _suggest(self, query: str, count: int) -> list[str]:
        if not query.strip():
            return []
        with self._search_lock:
            try:
                if self._suggester is None:
                    from libzim.suggestion import SuggestionSearcher

                    self._suggester = SuggestionSearcher(self._archive)
                return list(self._suggester.suggest(query).getResults(0, count))
            except (RuntimeError, ValueError, UnicodeError):
                return []

    def _search_paths(self, query: str, count: int) -> list[str]:
        if len(query) > MAX_SEARCH_CHARS:
            query = query[:MAX_SEARCH_CHARS].rsplit(None, 1)[0]
        if not query.strip():
            return []
        with self._search_lock:
            try:
                if self._searcher is None:
                    from libzim.search import Searcher

                    self._searcher = Searcher(self._archive)
                from libzim.search import Query

                return list(self._searcher.search(Query().set_query(query)).getResults(0, count))
            except (RuntimeError, ValueError, UnicodeError):
                return []

    # pages ------------------------------------------------------------------------------------
    def _page_of(self, entry, item) -> Page:
        title = self._title_of(entry)
        text = self._text(entry.path, item)
        pageid = stable_pageid(title)
        self._pageid_paths[pageid] = entry.path
        return Page(pageid=pageid, revid=None, title=title, text=text, timestamp=self._zim_metadata.get("Date"))

    def _text(self, path: str, item) -> str:
        with self._cache_lock:
            text = self._memory.get(path)
            if text is not None:
                self._memory.move_to_end(path)
                return text
        text = self._read_disk(path)
        if text is None:
            from harness.wiki_snapshot.builders import html_to_markdown

            text = html_to_markdown(bytes(item.content).decode("utf-8", "replace"))
            self.renders += 1
            self._write_disk(path, text)
        with self._cache_lock:
            self._memory[path] = text
            self._memory.move_to_end(path)
            while len(self._memory) > self._memory_pages:
                self._memory.popitem(last=False)
        return text

    def _cache_file(self, path: str) -> Path | None:
        if self.cache_dir is None:
            return None
        h = hashlib.sha256(path.encode("utf-8", "surrogatepass")).hexdigest()
        return self.cache_dir / h[:2] / f"{h}.json"

    def _read_disk(self, path: str) -> str | None:
        """The cached text, or None when absent, unreadable, partial, or from another renderer."""
        f = self._cache_file(path)
        if f is None:
            return None
        try:
            rec = json.loads(f.read_text(encoding="utf-8"))
            text = rec["text"]
            ok = (
                rec.get("v") == CACHE_VERSION
                and rec.get("path") == path
                and rec.get("renderer") == self._renderer
                and isinstance(text, str)
                and rec.get("sha256") == hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
            )
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None
        return text if ok else None

    def _write_disk(self, path: str, text: str) -> None:
        """Write atomically (a temporary file renamed over the target); a cache that cannot be
        written is no error: the page is rendered again next time."""
        f = self._cache_file(path)
        if f is None:
            return
        rec = {
            "v": CACHE_VERSION,
            "path": path,
            "renderer": self._renderer,
            "sha256": hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest(),
            "text": text,
        }
        tmp = f.with_name(f"{f.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            f.parent.mkdir(parents=True, exist_ok=True)
            # a lone surrogate as JSON's escape (surrogatepass wrote bytes no UTF-8 reader takes back)
            tmp.write_bytes(json_bytes(json.dumps(rec, ensure_ascii=False)))
            os.replace(tmp, f)
        except OSError:
            try:
                tmp.unlink()
            except OSError:
                pass

    # metadata ---------------------------------------------------------------------------------
    def _read_zim_metadata(self) -> dict[str, str]:
        out: dict[str, str] = {}
        try:
            keys = set(self._archive.metadata_keys)
        except RuntimeError:
            return out
        for key in META_KEYS:
            if key in keys:
                try:
                    out[key] = bytes(self._archive.get_metadata(key)).decode("utf-8", "replace")
                except (RuntimeError, KeyError):
                    pass
        return out

    def _build_metadata(self) -> dict[str, Any]:
        a, m = self._archive, self._zim_metadata
        label = m.get("Title") or m.get("Name") or self.path.name
        extra = ", ".join(f"{k} {m[k]}" for k in ("Name", "Date", "Language", "Flavour") if m.get(k))
        checksum = a.checksum if a.has_checksum else None
        return {
            "format": FORMAT,
            "source": self.path.name,
            "source_description": f"ZIM archive {self.path.name}: {label}" + (f" ({extra})" if extra else ""),
            "pages": int(a.article_count),  # front articles (Kiwix: the Wikipedia articles)
            "entries": int(a.entry_count),  # pages, redirects and resources together
            "redirects": None,  # libzim does not count them; counting means reading every entry
            "revision_date": m.get("Date"),  # the archive's date (Kiwix: when the wiki was scraped)
            "scope": "source",
            # The archive's uuid and the MD5 its creator stored over every byte before it (the ZIM
            # header's checksumPos), read, not verified: verifying reads the whole file (Archive.check()).
            "content_hash": f"zim:{self._uuid}:md5:{checksum}" if checksum else f"zim:{self._uuid}",
            "zim_uuid": self._uuid,
            "zim_checksum_md5": checksum,
            "zim_metadata": dict(m),
            "full_text_index": self._fulltext,
            "title_index": self._title_index,
            "renderer": self._renderer,
        }


__all__ = ["ZimWiki", "default_cache_root", "renderer_description"]
