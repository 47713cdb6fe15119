"""A search service (``harness search serve``, :mod:`harness.wiki_snapshot.service`) as a wiki backend: what
``--search-url URL`` gives the strategies in place of a local snapshot file.

:class:`RemoteWiki` is a :class:`harness.wiki_snapshot.space.WikiBackend` whose every method is one request
to the service, and :meth:`RemoteWiki.open_retriever` a passage retriever over the service's
indexes; both return what the local snapshot returns, the same objects with the same values.

Failures are never an answer: a refused or dropped connection, a timeout or a 5xx is tried again
(``attempts`` tries, waits doubling from ``first_wait`` seconds), then raises
:class:`SearchServiceUnavailable` (the sample that needed it fails, a rerun retries it); a 4xx raises
:class:`SnapshotError` with the service's own line; an answer from a service now serving another
snapshot (``X-Snapshot-Content``) raises :class:`SearchServiceChanged`. The calls block: the search
tool is called synchronously, as a local snapshot's SQLite query is.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from harness.wiki_snapshot.errors import SearchServiceChanged, SearchServiceUnavailable, SnapshotError
from harness.wiki_snapshot.retriever import Hit
from harness.wiki_snapshot.service import CONTENT_HEADER, PROTOCOL
from harness.wiki_snapshot.store import Page

DEFAULT_ATTEMPTS = 4
FIRST_WAIT_S = 0.25  # then 0.5, 1, ...: a service restarting answers within a few seconds
MAX_WAIT_S = 4.0
TIMEOUT_S = 60.0


class RemoteWiki:
    """The wiki backend a search service serves. Use :meth:`connect` (fetches and checks the identity)."""

    def __init__(
        self,
        url: str,
        *,
        shown: str | None = None,
        attempts: int = DEFAULT_ATTEMPTS,
        first_wait: float = FIRST_WAIT_S,
        timeout: float = TIMEOUT_S,
    ):
        """``url``: the service's address as given (a user:password in it is sent as Basic auth, a query
        is sent with every request); ``shown``: the same without credentials, what is recorded and said."""
        import httpx

        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise SnapshotError(f"--search-url {shown or url!r}: expected an http(s) URL such as http://127.0.0.1:8765")
        self.shown = shown or url
        self.path = self.shown  # what a run records as where its pages came from
        self._base = urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))
        self._params = parse_qsl(parts.query, keep_blank_values=True)
        self.attempts = max(1, int(attempts))
        self.first_wait = float(first_wait)
        self._client = httpx.Client(timeout=timeout, limits=httpx.Limits(max_keepalive_connections=64))
        self._lock = threading.Lock()
        self.requests = 0  # sent, retries included
        self.retries = 0
        self._identity: dict[str, Any] | None = None

    @classmethod
    def connect(cls, url: str, **options: Any) -> RemoteWiki:
        """The service at ``url``, its identity fetched; unreachable or not a search service: one line."""
        wiki = cls(url, **options)
        try:
            wiki._load_identity()
        except SearchServiceUnavailable as exc:
            wiki.close()
            raise SnapshotError(
                f"--search-url {wiki.shown}: no search service answers there ({exc.reason}, {wiki.attempts} tries); "
                "start one with: harness search serve SNAP.db --port PORT"
            ) from None
        except BaseException:
            wiki.close()
            raise
        return wiki

    def _load_identity(self) -> None:
        data = self._call("GET", "/v1/identity")
        if not isinstance(data, dict) or data.get("protocol") != PROTOCOL or not isinstance(data.get("metadata"), dict):
            raise SnapshotError(
                f"--search-url {self.shown}: not a search service of protocol {PROTOCOL} (harness search serve)"
            )
        self._identity = data

    # requests ---------------------------------------------------------------------------------
    def _call(self, method: str, route: str, body: dict[str, Any] | None = None, params: dict[str, str] | None = None):
        import httpx

        url = self._base + route
        query = [*self._params, *(params or {}).items()]
        last: str = ""
        for attempt in range(self.attempts):
            if attempt:
                with self._lock:
                    self.retries += 1
                time.sleep(min(MAX_WAIT_S, self.first_wait * 2 ** (attempt - 1)))
            with self._lock:
                self.requests += 1
            try:
                if method == "GET":
                    response = self._client.get(url, params=query)
                else:
                    response = self._client.post(url, params=query, content=json.dumps(body), headers=_JSON)
            except httpx.TransportError as exc:  # refused, reset, timed out: the service may come back
                last = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                continue
            if response.status_code >= 500 or response.status_code == 429:
                last = f"HTTP {response.status_code}: {_error_of(response)}"
                continue
            self._check_content(response)
            if response.status_code >= 400:
                raise SnapshotError(f"search service {self.shown}{route}: {_error_of(response)}")
            try:
                return response.json()
            except ValueError:
                last = "an answer that is not JSON"
                continue
        raise SearchServiceUnavailable(
            f"search service {self.shown} did not answer {route} after {self.attempts} tries ({last})", last
        )

    def _check_content(self, response) -> None:
        served = response.headers.get(CONTENT_HEADER)
        if self._identity is not None and served != self._identity.get("content_hash"):
            raise SearchServiceChanged(
                f"search service {self.shown} now serves snapshot {str(served)[:12]}, not {self.content_hash[:12]} "
                "that this run was started on; restart it on that snapshot, or start a new run"
            )

    # identity ---------------------------------------------------------------------------------
    @property
    def identity(self) -> dict[str, Any]:
        if self._identity is None:
            self._load_identity()
        return self._identity

    @property
    def content_hash(self) -> str:
        return str(self.identity.get("content_hash"))

    @property
    def metadata(self) -> dict[str, Any]:
        """The served snapshot's metadata as the service read it, and where it was served from."""
        ident = self.identity
        meta = json.loads(json.dumps(ident["metadata"]))  # a copy callers may change
        meta["search_service"] = {
            "url": self.shown,
            "served_path": ident.get("path"),
            "harness_version": ident.get("harness_version"),
            "protocol": ident.get("protocol"),
        }
        return meta

    @property
    def full_text_search(self) -> bool:
        return bool(self.identity.get("full_text_search"))

    @property
    def notices(self) -> list[str]:
        return list(self.identity.get("notices") or ())

    def __len__(self) -> int:
        return int(self.identity.get("pages") or 0)

    def __repr__(self) -> str:
        return f"RemoteWiki({self.shown!r})"

    # WikiBackend ------------------------------------------------------------------------------
    def search(self, query: str, k: int = 10) -> list[tuple[str, float]]:
        if not isinstance(query, str) or k <= 0:
            return []
        return [(t, s) for t, s in self._call("POST", "/v1/search", {"query": query, "k": int(k)})["results"]]

    def similar_titles(self, query: str, k: int = 10) -> list[str]:
        if not isinstance(query, str) or k <= 0:
            return []
        return list(self._call("POST", "/v1/similar_titles", {"query": query, "k": int(k)})["titles"])

    def resolve_title(self, title: str) -> Page | None:
        if not isinstance(title, str):
            return None
        return _page(self._call("POST", "/v1/resolve_title", {"title": title})["page"])

    def resolve_pageid(self, title: str) -> int | None:
        if not isinstance(title, str):
            return None
        return self._call("POST", "/v1/resolve_pageid", {"title": title})["pageid"]

    def get_page(self, pageid: int) -> Page | None:
        try:
            pageid = int(pageid)
        except (TypeError, ValueError):
            return None
        return _page(self._call("POST", "/v1/get_page", {"pageid": pageid})["page"])

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> RemoteWiki:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # passage retrieval --------------------------------------------------------------------------
    def index_meta(self, retriever: str, passages: str) -> dict[str, Any]:
        """The served index's metadata (checked fresh against the snapshot by the service)."""
        return self._call("GET", "/v1/index", params={"retriever": retriever, "passages": passages})["meta"]

    def open_retriever(self, retriever: str, passages: str) -> RemoteRetriever:
        return RemoteRetriever(self, retriever, passages, self.index_meta(retriever, passages))


class RemoteRetriever:
    """A passage index searched through the service: ``search``/``search_many`` as the local
    :class:`harness.wiki_snapshot.retriever.Retriever`'s, the same hits."""

    def __init__(self, wiki: RemoteWiki, kind: str, passages: str, meta: dict[str, Any]):
        self.wiki, self.kind, self.passages_kind, self.meta = wiki, kind, passages, meta
        self.n_passages = meta.get("n_passages")

    def __len__(self) -> int:
        return int(self.n_passages or 0)

    def search(self, query: str, k: int) -> list[Hit]:
        return self.search_many([query], k)[0]

    def search_many(self, queries: list[str], k: int) -> list[list[Hit]]:
        body = {"retriever": self.kind, "passages": self.passages_kind, "queries": list(queries), "topk": int(k)}
        rows = self.wiki._call("POST", "/v1/retrieve", body)["result"]
        return [[Hit(**hit) for hit in row] for row in rows]

    def describe(self) -> dict[str, Any]:
        keep = ("retriever", "passages", "n_passages", "splitter", "bm25", "dense", "created_at", "snapshot")
        where = f"{self.wiki.shown} {self.kind}-{self.passages_kind}"  # the service, and which of its indexes
        return {"path": where, **{k: self.meta[k] for k in keep if k in self.meta}}


_JSON = {"Content-Type": "application/json"}


def _error_of(response) -> str:
    try:
        data = response.json()
    except ValueError:
        data = None
    if isinstance(data, dict) and isinstance(data.get("error"), str):
        return data["error"]
    return " ".join(response.text.split())[:200] or f"HTTP {response.status_code}"


def _page(record: dict[str, Any] | None) -> Page | None:
    return None if record is None else Page(**record)


__all__ = ["RemoteRetriever", "RemoteWiki"]
