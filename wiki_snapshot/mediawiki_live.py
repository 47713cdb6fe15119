"""The live MediaWiki API as a wiki backend: the paper's open-book search (``--search mediawiki``).

What FanOutQA's own code asks (zhudotexe/fanoutqa ``fanoutqa/wiki.py`` at 145cfdc9):

- ``search(query, k)``: ``action=query&list=search&srsearch=QUERY&srlimit=K&format=json``, the
  wiki's full-text search over every article (``wiki_search``: ``results=10``);
- a page's text at its revision as of a date (``DATASET_EPOCH``, 2023-11-20 for FanOutQA):
  ``action=query&prop=revisions&rvprop=ids|timestamp&rvlimit=1&rvstart=DATE&pageids=ID`` (the newest
  revision at or before DATE: ``rvdir`` defaults to ``older``), then ``action=parse&oldid=REVID&prop=text``,
  the HTML rendered to markdown with FanOutQA's options (``harness.wiki_snapshot.builders.html_to_markdown``).
  A page with no revision by then reads as empty text, logged (FanOutQA's ``LazyEvidence.revid``
  raises there; its ``wiki_content`` reads a parse without text as empty, logged);
- ``resolve_title(title)``: ``action=query&titles=TITLE&redirects=1`` (MediaWiki's title
  normalization and redirects; a ``missing`` or ``invalid`` page is None): what the paper's 2024 code
  (``DatedPage(title=query, redirect=True)``) looks up, and what the ``title`` hit rule uses.

Every request goes through :class:`harness.wiki_snapshot.mediawiki_http.MediaWikiClient`: a polite
User-Agent, a rate limit (default 1 request/s), retries on 429/5xx/maxlag with ``Retry-After``, and
an on-disk cache of the raw responses, so a rerun sends nothing it sent before. :meth:`check` is
the pre-flight (``meta=siteinfo``, cached like the rest): with no network it raises one line that
says so and what to use instead; there is never a fallback to anything else.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import threading
from typing import Any

from harness.wiki_snapshot.errors import SnapshotError
from harness.wiki_snapshot.mediawiki_http import DEFAULT_API_URL, MediaWikiClient, Unreachable

log = logging.getLogger(__name__)

FANOUTQA_EPOCH = "2023-11-20"
LIVE_USER_AGENT_PURPOSE = "open-book search as FanOutQA's code asks"
OFFLINE_HINT = (
    "use an offline Wikipedia instead: --snapshot SNAP.db (harness snapshot build) or "
    "--snapshot wikipedia_en_all_nopic_YYYY-MM.zim (a Kiwix ZIM read in place)"
)


def as_of_timestamp(date: str) -> str:
    """``2023-11-20`` -> ``2023-11-20T00:00:00+00:00``, the form FanOutQA sends (``DATASET_EPOCH.isoformat()``)."""
    try:
        when = dt.datetime.fromisoformat(str(date).replace("Z", "+00:00"))
    except ValueError:
        raise SnapshotError(f"--search-date {date!r}: expected a date such as 2023-11-20 (ISO 8601)") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.timezone.utc)
    return when.astimezone(dt.timezone.utc).isoformat()


class LivePage:
    """A page found by title or id; its revision as of the date and its text are fetched when first read."""

    __slots__ = ("_rev", "_text", "pageid", "title", "wiki")

    def __init__(self, wiki: MediaWikiLive, pageid: int, title: str):
        self.wiki = wiki
        self.pageid = pageid
        self.title = title
        self._rev: tuple[int | None, str | None] | None = None
        self._text: str | None = None

    def _revision(self) -> tuple[int | None, str | None]:
        if self._rev is None:
            self._rev = self.wiki._dated_revision(self.pageid)
        return self._rev

    @property
    def revid(self) -> int | None:
        return self._revision()[0]

    @property
    def timestamp(self) -> str | None:
        return self._revision()[1]

    @property
    def text(self) -> str:
        if self._text is None:
            revid = self.revid
            self._text = self.wiki._page_text(revid, self.title) if revid is not None else ""
        return self._text

    def __repr__(self) -> str:
        return f"LivePage(pageid={self.pageid}, title={self.title!r})"


class MediaWikiLive:
    """A :class:`harness.wiki_snapshot.space.WikiBackend` over a live ``api.php``."""

    full_text_search = True

    def __init__(
        self,
        api_url: str | None = None,
        *,
        as_of: str = FANOUTQA_EPOCH,
        rate_limit: float | None = None,
        cache_dir: str | None = None,
        user_agent: str | None = None,
        max_attempts: int | None = None,
        retry_max_wait: float | None = None,
        timeout: float | None = None,
    ):
        from harness.wiki_snapshot._version import HARNESS_VERSION

        self.as_of = str(as_of)
        self.rvstart = as_of_timestamp(self.as_of)
        self.client = MediaWikiClient(
            api_url or DEFAULT_API_URL,
            user_agent=user_agent or f"harness/{HARNESS_VERSION} (LLM evaluation harness; {LIVE_USER_AGENT_PURPOSE})",
            rate_limit=rate_limit,
            max_attempts=max_attempts,
            retry_max_wait=retry_max_wait,
            timeout=timeout,
            cache_dir=cache_dir,
            option="--search-api-url",
            rate_option="--search-rate-limit",
        )
        self.path = self.client.api_url
        self._pages: dict[int, LivePage] = {}
        self._pageids: dict[str, int] = {}  # search result title -> its pageid (as fanoutqa's LazyEvidence keeps)
        self._lock = threading.Lock()
        self._siteinfo: dict[str, Any] = {}

    # pre-flight --------------------------------------------------------------------------------
    def check(self) -> None:
        """One request (``meta=siteinfo``, cached) before anything runs: the API answers, or one line."""
        params = {"format": "json", "action": "query", "meta": "siteinfo", "siprop": "general|statistics"}
        path = self.client.cache_path(params)
        data = self.client.read_cache(path)
        if data is None:
            try:
                data = self.client.get(params, attempts=3, retry_transport=False)
            except Unreachable:
                raise SnapshotError(
                    f"--search mediawiki: Wikipedia's API ({self.path}) cannot be reached from here (no network?); "
                    f"{OFFLINE_HINT}"
                ) from None
            except SnapshotError as exc:
                raise SnapshotError(f"--search mediawiki: {exc}; {OFFLINE_HINT}") from None
            general = (data.get("query") or {}).get("general") if isinstance(data.get("query"), dict) else None
            if not isinstance(general, dict):
                raise SnapshotError(
                    f"--search mediawiki: {self.path} did not answer meta=siteinfo as a MediaWiki api.php does"
                )
            self.client.write_cache(path, data)
        self._siteinfo = (data.get("query") or {}) if isinstance(data.get("query"), dict) else {}

    # WikiBackend -------------------------------------------------------------------------------
    @property
    def metadata(self) -> dict[str, Any]:
        general = self._siteinfo.get("general") or {}
        stats = self._siteinfo.get("statistics") or {}
        identity = {"format": "mediawiki-live", "source": self.path, "revision_date": self.as_of}
        return {
            **identity,
            # runs over the same API and date share a key; the text behind it is Wikipedia's at that date
            "content_hash": "mediawiki-live:"
            + hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16],
            "scope": "source",
            "pages": stats.get("articles"),
            "site": general.get("sitename"),
            "generator": general.get("generator"),
            "rvstart": self.rvstart,
            "user_agent": self.client.user_agent,
            "rate_limit": self.client.rate_limit,
            "cache_dir": str(self.client.cache_dir),
            "requests": dict(self.client.stats),
        }

    def search(self, query: str, k: int = 10) -> list[tuple[str, float]]:
        """The wiki's full-text search: ``(title, score)`` best first; the score is the rank's reverse
        (the API sends no score by default)."""
        if not isinstance(query, str) or not query.strip() or k <= 0:
            return []
        data = self.client.cached_get(
            {"format": "json", "action": "query", "list": "search", "srsearch": query, "srlimit": int(k)}
        )
        if "error" in data:
            err = data["error"] if isinstance(data["error"], dict) else {}
            raise SnapshotError(f"{self.path}: list=search for {query!r}: {err.get('code')}: {err.get('info')}")
        hits = ((data.get("query") or {}).get("search")) or []
        out: list[tuple[str, float]] = []
        for i, hit in enumerate(hits[:k]):
            title = hit.get("title") if isinstance(hit, dict) else None
            if not isinstance(title, str):
                continue
            if isinstance(hit.get("pageid"), int):
                with self._lock:
                    self._pageids[title] = hit["pageid"]
            out.append((title, float(len(hits) - i)))
        return out

    def similar_titles(self, query: str, k: int = 10) -> list[str]:
        return [t for t, _ in self.search(query, k)]

    def resolve_title(self, title: str):
        """The page MediaWiki finds for ``title`` (its normalization, redirects), or None."""
        if not isinstance(title, str) or not title.strip():
            return None
        with self._lock:
            pageid = self._pageids.get(title)
        if pageid is not None:  # a search result's own title: the page it named (no request)
            return self._page(pageid, title)
        data = self.client.cached_get({"format": "json", "action": "query", "titles": title, "redirects": 1})
        pages = (data.get("query") or {}).get("pages") if isinstance(data.get("query"), dict) else None
        if not isinstance(pages, dict) or not pages:
            return None
        page = next(iter(pages.values()))
        if not isinstance(page, dict) or "missing" in page or "invalid" in page or not page.get("pageid"):
            return None
        return self._page(int(page["pageid"]), str(page.get("title") or title))

    def get_page(self, pageid: int):
        try:
            pageid = int(pageid)
        except (TypeError, ValueError):
            return None
        with self._lock:
            known = self._pages.get(pageid)
        if known is not None:
            return known
        rev = self._revision_response(pageid)
        page = ((rev.get("query") or {}).get("pages") or {}).get(str(pageid)) if isinstance(rev, dict) else None
        if not isinstance(page, dict) or "missing" in page or not page.get("title"):
            return None
        return self._page(pageid, str(page["title"]))

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> MediaWikiLive:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # pages ---------------------------------------------------------------------------------------
    def _page(self, pageid: int, title: str) -> LivePage:
        with self._lock:
            page = self._pages.get(pageid)
            if page is None:
                page = self._pages[pageid] = LivePage(self, pageid, title)
            return page

    def _revision_response(self, pageid: int) -> dict[str, Any]:
        return self.client.cached_get(
            {
                "format": "json",
                "action": "query",
                "prop": "revisions",
                "rvprop": "ids|timestamp",
                "rvlimit": 1,
                "rvstart": self.rvstart,
                "pageids": int(pageid),
            }
        )

    def _dated_revision(self, pageid: int) -> tuple[int | None, str | None]:
        data = self._revision_response(pageid)
        page = ((data.get("query") or {}).get("pages") or {}).get(str(pageid)) if isinstance(data, dict) else None
        revisions = page.get("revisions") if isinstance(page, dict) else None
        if not revisions:
            log.warning("%s: page %s has no revision as of %s (it did not exist yet?)", self.path, pageid, self.as_of)
            return None, None
        rev = revisions[0]
        return int(rev["revid"]), rev.get("timestamp")

    def _page_text(self, revid: int, title: str) -> str:
        from harness.wiki_snapshot.builders import html_to_markdown

        data = self.client.cached_get({"format": "json", "action": "parse", "oldid": int(revid), "prop": "text"})
        parse = data.get("parse") if isinstance(data, dict) else None
        text = parse.get("text") if isinstance(parse, dict) else None
        html = text.get("*") if isinstance(text, dict) else text
        if not isinstance(html, str):
            err = data.get("error") if isinstance(data, dict) else None
            log.warning("%s: no text for %r at revision %s (%s)", self.path, title, revid, err)
            return ""
        return html_to_markdown(html)


__all__ = ["FANOUTQA_EPOCH", "LivePage", "MediaWikiLive", "OFFLINE_HINT", "as_of_timestamp"]
