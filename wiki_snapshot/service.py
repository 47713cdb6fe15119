"""One search service for many workers (``harness search serve SNAPSHOT``): a snapshot's page lookups
(what the open-book ``search`` tool asks of its backend) and its passage indexes (what retrieve-read
asks), read-only over HTTP, so K shards on K machines read one copy of a whole-Wikipedia snapshot.

The shape follows Search-R1's retrieval server, which serves one index to many RL trainers
(PeterGriffinJin/Search-R1 ``search_r1/search/retrieval_server.py`` at a14dc3a4: FastAPI under
uvicorn, ``POST /retrieve`` with ``{"queries": [...], "topk": K, "return_scores": true}`` answered
``{"result": [[{"document", "score"}, ...], ...]}``); ours is Starlette (FastAPI's base) under uvicorn,
with the same batch ``/v1/retrieve`` (a hit carries its passage id, title, text, score and pageid) and
one route per method of :class:`harness.wiki_snapshot.space.WikiBackend`. What the tool does with a page
(chunking, BM25+ ranking of its chunks, fitting the model's token budget) stays in the run: it needs
the model's own token counter, so the service sends pages and titles, never a formatted result.

Routes (JSON in, JSON out; every answer carries ``X-Snapshot-Content``, the snapshot's content hash,
so a client notices a service restarted on another snapshot):

- ``GET /v1/identity``: the snapshot's metadata (content hash, revision date, scope, ...), whether it
  has a full-text search, its page count, the notices of a ZIM, the passage indexes beside it;
- ``POST /v1/search`` ``{"query", "k"}`` -> ``{"results": [[title, score], ...]}``;
- ``POST /v1/similar_titles`` ``{"query", "k"}`` -> ``{"titles": [...]}``;
- ``POST /v1/resolve_title`` ``{"title"}`` / ``POST /v1/get_page`` ``{"pageid"}`` -> ``{"page": {...} | null}``;
- ``POST /v1/resolve_pageid`` ``{"title"}`` -> ``{"pageid": int | null}``;
- ``GET /v1/index?retriever=bm25&passages=words100`` -> ``{"meta": ...}`` (checked fresh against the snapshot);
- ``POST /v1/retrieve`` ``{"retriever", "passages", "queries", "topk"}`` -> ``{"result": [[hit, ...], ...]}``.

A bad request is a 400 with ``{"error": one line}``; a missing index a 404 saying how to build it; an
exception while answering a 500 (a client retries 5xx). Each worker thread opens its own read-only
connection to the snapshot (SQLite reads then run side by side); an index is searched by one thread
at a time. Floats travel as Python's ``repr`` (``json``), which reads back to the same double, so a
result over the service equals the local one byte for byte.
"""

from __future__ import annotations

import json
import logging
import socket
import sys
import threading
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from harness.wiki_snapshot._version import HARNESS_VERSION
from harness.wiki_snapshot.errors import SnapshotError

log = logging.getLogger(__name__)

PROTOCOL = 1
CONTENT_HEADER = "X-Snapshot-Content"
DEFAULT_HOST = "127.0.0.1"  # loopback: the service has no authentication of its own
DEFAULT_PORT = 8765
DEFAULT_THREADS = 32
MAX_K = 10_000  # results one call may ask for (a bigger k is a 400)
MAX_QUERIES = 1_024  # queries one /v1/retrieve may carry
MAX_BODY = 1 << 20  # bytes of a request body


def content_hash(metadata: dict[str, Any]) -> str:
    """The snapshot's identity as a run keys it (``harness.execution.summary.snapshot_hash``)."""
    return str(metadata.get("content_hash") or metadata.get("content_sha256") or metadata.get("hash"))


def page_record(page) -> dict[str, Any] | None:
    if page is None:
        return None
    return {k: getattr(page, k) for k in ("pageid", "revid", "title", "text", "timestamp")}


class BadRequest(Exception):
    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


class SearchService:
    """What the routes answer from: one backend per worker thread, the passage retrievers opened on
    first use (one search at a time each)."""

    def __init__(self, path: str | Path):
        from harness.wiki_snapshot.backends import open_wiki

        self.path = Path(path)
        self._open = open_wiki
        self._local = threading.local()
        self._opened: list[Any] = []
        self._lock = threading.Lock()
        first = self.backend()  # opened here: a bad file is refused before the port is bound
        self.metadata = first.metadata
        self.content = content_hash(self.metadata)
        self.full_text_search = bool(getattr(first, "full_text_search", False))
        self.pages = self.metadata.get("pages")
        if self.pages is None and hasattr(first, "__len__"):
            self.pages = len(first)
        self.notices = list(getattr(first, "notices", ()) or ())
        self._retrievers: dict[tuple[str, str], tuple[Any, threading.Lock]] = {}

    def backend(self):
        wiki = getattr(self._local, "wiki", None)
        if wiki is None:
            wiki = self._local.wiki = self._open(self.path)
            with self._lock:
                self._opened.append(wiki)
        return wiki

    def close(self) -> None:
        with self._lock:
            opened, self._opened = self._opened, []
            retrievers, self._retrievers = list(self._retrievers.values()), {}
        for wiki in opened:
            wiki.close()
        for retriever, _ in retrievers:
            retriever.snapshot.close()

    # answers ----------------------------------------------------------------------------------
    def identity(self) -> dict[str, Any]:
        from harness.wiki_snapshot.retrieval import index_root

        root = index_root(self.path)
        indexes = sorted(p.name for p in root.iterdir() if (p / "meta.json").is_file()) if root.is_dir() else []
        return {
            "protocol": PROTOCOL,
            "harness_version": HARNESS_VERSION,
            "path": str(self.path),
            "content_hash": self.content,
            "metadata": self.metadata,
            "full_text_search": self.full_text_search,
            "pages": self.pages,
            "notices": self.notices,
            "indexes": indexes,
        }

    def index_meta(self, retriever: str, passages: str) -> dict[str, Any]:
        from harness.wiki_snapshot.retrieval import check_fresh, read_meta

        try:
            directory, meta = read_meta(self.path, retriever, passages)
            check_fresh(meta, self.backend(), directory, retriever, passages)
        except SnapshotError as exc:
            raise BadRequest(str(exc), 404) from None
        return meta

    def retrieve(self, retriever: str, passages: str, queries: list[str], k: int) -> list[list[dict[str, Any]]]:
        key = (retriever, passages)
        with self._lock:
            entry = self._retrievers.get(key)
        if entry is None:
            from harness.wiki_snapshot.retrieval import open_retriever
            from harness.wiki_snapshot.store import Snapshot

            self.index_meta(retriever, passages)  # a 404 with the build command where there is none
            snapshot = Snapshot.open(self.path)
            try:
                opened = open_retriever(snapshot, retriever, passages)
            except BaseException:
                snapshot.close()
                raise
            with self._lock:
                entry = self._retrievers.setdefault(key, (opened, threading.Lock()))
            if entry[0] is not opened:  # another thread opened it first
                snapshot.close()
        index, lock = entry
        with lock:
            hits = index.search_many(queries, k)
        return [[asdict(h) for h in row] for row in hits]


# requests ---------------------------------------------------------------------------------------
def _text(body: dict[str, Any], name: str) -> str:
    value = body.get(name)
    if not isinstance(value, str):
        raise BadRequest(f"{name}: a string expected")
    return value


def _k(body: dict[str, Any], name: str = "k") -> int:
    value = body.get(name)
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_K:
        raise BadRequest(f"{name}: an integer from 0 to {MAX_K} expected")
    return value


def _int(body: dict[str, Any], name: str) -> int:
    value = body.get(name)
    if not isinstance(value, int) or isinstance(value, bool):
        raise BadRequest(f"{name}: an integer expected")
    return value


def _queries(body: dict[str, Any]) -> list[str]:
    queries = body.get("queries")
    if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries):
        raise BadRequest("queries: a list of strings expected")
    if len(queries) > MAX_QUERIES:
        raise BadRequest(f"queries: at most {MAX_QUERIES} in one request")
    return queries


def routes(service: SearchService) -> dict[tuple[str, str], Callable[[dict[str, Any]], dict[str, Any]]]:
    """(method, path) -> the answer to a request's JSON body (GET: its query parameters)."""

    def search(body):
        return {"results": [[t, s] for t, s in service.backend().search(_text(body, "query"), _k(body))]}

    def similar(body):
        return {"titles": list(service.backend().similar_titles(_text(body, "query"), _k(body)))}

    def resolve(body):
        return {"page": page_record(service.backend().resolve_title(_text(body, "title")))}

    def resolve_pageid(body):
        wiki, title = service.backend(), _text(body, "title")
        by_id = getattr(wiki, "resolve_pageid", None)  # a ZIM names a pageid without rendering the page
        if by_id is not None:
            return {"pageid": by_id(title)}
        page = wiki.resolve_title(title)
        return {"pageid": None if page is None else page.pageid}

    def get_page(body):
        return {"page": page_record(service.backend().get_page(_int(body, "pageid")))}

    def index(params):
        return {"meta": service.index_meta(_text(params, "retriever"), _text(params, "passages"))}

    def retrieve(body):
        queries = _queries(body)
        kind, passages = _text(body, "retriever"), _text(body, "passages")
        return {"result": service.retrieve(kind, passages, queries, _k(body, "topk"))}

    return {
        ("GET", "/v1/identity"): lambda _: service.identity(),
        ("POST", "/v1/search"): search,
        ("POST", "/v1/similar_titles"): similar,
        ("POST", "/v1/resolve_title"): resolve,
        ("POST", "/v1/resolve_pageid"): resolve_pageid,
        ("POST", "/v1/get_page"): get_page,
        ("GET", "/v1/index"): index,
        ("POST", "/v1/retrieve"): retrieve,
    }


def make_app(service: SearchService, threads: int = DEFAULT_THREADS):
    """The Starlette application: each route's work runs in a worker thread (``threads`` of them)."""
    import contextlib

    import anyio.to_thread
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    table = routes(service)
    headers = {CONTENT_HEADER: service.content}

    def reply(status: int, data: dict[str, Any]) -> Response:
        body = json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        return Response(body, status_code=status, media_type="application/json", headers=headers)

    async def endpoint(request: Request) -> Response:
        answer = table.get((request.method, request.url.path))
        if answer is None:
            return reply(405, {"error": f"{request.method} {request.url.path}: not a route of this service"})
        if request.method == "GET":
            body: Any = dict(request.query_params)
        else:
            raw = await request.body()
            if len(raw) > MAX_BODY:
                return reply(413, {"error": f"request body over {MAX_BODY} bytes"})
            try:
                body = json.loads(raw)
            except (UnicodeDecodeError, json.JSONDecodeError):
                return reply(400, {"error": "the request body is not JSON"})
            if not isinstance(body, dict):
                return reply(400, {"error": "the request body must be a JSON object"})
        try:
            return reply(200, await anyio.to_thread.run_sync(answer, body))
        except BadRequest as exc:
            return reply(exc.status, {"error": str(exc)})
        except Exception as exc:  # noqa: BLE001 - one failed answer is a 500 the client may retry
            log.exception("%s %s failed", request.method, request.url.path)
            return reply(500, {"error": f"{type(exc).__name__}: {exc}"})

    @contextlib.asynccontextmanager
    async def lifespan(app):
        anyio.to_thread.current_default_thread_limiter().total_tokens = threads
        yield

    paths = sorted({path for _, path in table})
    return Starlette(routes=[Route(p, endpoint, methods=["GET", "POST"]) for p in paths], lifespan=lifespan)


def bind(host: str, port: int) -> socket.socket:
    """The listening socket (port 0: a free one), bound before the service says where it is."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise SnapshotError(f"--host {host}: cannot be resolved ({exc.strerror})") from None
    family, kind, proto, _, address = infos[0]
    # proto IPPROTO_TCP, not 0: asyncio turns Nagle off (TCP_NODELAY) only on sockets that say TCP
    # (base_events._set_nodelay); with it on, each answer's body waits for the client's delayed ACK of
    # its headers (44 ms a request, measured)
    sock = socket.socket(family, kind, proto or socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise SnapshotError(f"cannot listen on {host}:{port} ({exc.strerror or exc})") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def serve(path: str | Path, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, threads: int = DEFAULT_THREADS,
          announce: Callable[[str], None] | None = None) -> None:  # fmt: skip
    """Serve ``path`` until SIGINT or SIGTERM (uvicorn's graceful shutdown). ``announce`` gets the URL
    once the socket listens (connections made from then on wait in its backlog)."""
    import uvicorn

    service = SearchService(path)
    try:
        sock = bind(host, port)
        bound_host, bound_port = sock.getsockname()[:2]
        shown = f"[{bound_host}]" if ":" in bound_host else bound_host
        url = f"http://{shown}:{bound_port}"
        config = uvicorn.Config(
            make_app(service, threads), log_level="warning", access_log=False, lifespan="on",
            timeout_graceful_shutdown=5,
        )  # fmt: skip
        server = uvicorn.Server(config)
        (announce or (lambda line: print(line, file=sys.stderr, flush=True)))(url)
        server.run(sockets=[sock])
    finally:
        service.close()


__all__ = [
    "CONTENT_HEADER", "DEFAULT_HOST", "DEFAULT_PORT", "PROTOCOL", "SearchService", "content_hash", "make_app", "serve",
]  # fmt: skip
