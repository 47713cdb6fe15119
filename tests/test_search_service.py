"""One search service for many workers (issue 43): ``harness search serve SNAPSHOT`` serves a
snapshot's page lookups and passage index over HTTP on loopback, and ``--search-url`` runs read it
in place of the file. What it answers equals the local snapshot's, byte for byte; a run over it has
the file's run key and records the snapshot identity fetched from it; a run whose key names another
snapshot is refused before any model call; a service killed mid-run fails the samples that needed
it (search_unavailable), never answers them empty, and a rerun retries them.

Real text: the ten English Wikipedia physics articles of tests/fixtures (2 KB to 84 KB each: long
pages are cut into BM25+-ranked fragments), with two redirects; a chunk1024 BM25 index over them.
Every server is a real ``harness search serve`` process, killed in a ``finally``."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.cli import main
from harness.models.scripted import register_script, unregister_script
from harness.tools.search import SearchConfig, SearchTool
from harness.wiki_snapshot import Page, Snapshot, SnapshotWriter
from harness.wiki_snapshot.errors import SearchServiceChanged, SearchServiceUnavailable, SnapshotError
from harness.wiki_snapshot.remote import RemoteWiki
from harness.wiki_snapshot.retrieval import build_index, open_retriever

FIXTURES = Path(__file__).resolve().parent / "fixtures"
ARTICLES = json.loads((FIXTURES / "wikipedia_en_science_physics_10.json").read_text(encoding="utf-8"))
QUERIES = [
    "Albert Einstein", "albert einstein", "Einstein", "Einstien", "Aristotle", "  Alien ", "alien life",
    "Academy Awards", "theory of relativity", "Android", "Anatomy of the heart", "", "\"quoted\" OR (x", "é",
]  # fmt: skip
def words(text: str) -> int:  # the scripted backend's count (tiktoken's pure-Python fallback takes seconds a page)
    return len(text.split())


QUESTION = "Which prize did Albert Einstein receive for the photoelectric effect?"


def write_snapshot(path: Path, articles: list[dict], source: str = "physics10") -> Path:
    with SnapshotWriter(path, source=source, options={}, revision_date="2023-11-20") as w:
        for a in articles:
            w.add_page(Page(int(a["id"]), None, a["title"], a["text"], None))
        w.add_redirect("Einstein", "Albert Einstein")
        w.add_redirect("Oscars", "Academy Awards")
        w.finish()
    return path


@pytest.fixture(scope="module")
def physics(tmp_path_factory):
    path = write_snapshot(tmp_path_factory.mktemp("served") / "physics.db", ARTICLES)
    build_index(path, "bm25", "chunk1024", workers=1)
    return path


class Served:
    """``harness search serve SNAP --port P`` in its own process; its URL read from its stderr line."""

    def __init__(self, snapshot: Path, log: Path, port: int = 0):
        self.log = log
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "harness", "search", "serve", str(snapshot), "--port", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=open(log, "w"),
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            found = re.search(r"on (http://127\.0\.0\.1:\d+) ", log.read_text())
            if found:
                self.url = found.group(1)
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        raise AssertionError(f"the search service did not start: {log.read_text()}")

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def served(physics, tmp_path_factory):
    server = Served(physics, tmp_path_factory.mktemp("log") / "serve.log")
    try:
        yield server
    finally:
        server.stop()


# answers ---------------------------------------------------------------------------------------
def test_every_answer_equals_the_local_snapshots(physics, served):
    with Snapshot.open(physics) as local, RemoteWiki.connect(served.url) as remote:
        assert remote.metadata["content_sha256"] == local.metadata["content_sha256"]
        assert remote.metadata["revision_date"] == "2023-11-20" and len(remote) == len(local) == 10
        assert {k: v for k, v in remote.metadata.items() if k != "search_service"} == local.metadata
        assert remote.metadata["search_service"]["url"] == served.url
        assert remote.full_text_search is local.full_text_search is True
        for q in QUERIES:
            assert remote.search(q, 10) == local.search(q, 10), q
            assert remote.similar_titles(q, 10) == local.similar_titles(q, 10), q
            assert remote.resolve_title(q) == local.resolve_title(q), q
            assert remote.resolve_pageid(q) == (local.resolve_title(q).pageid if local.resolve_title(q) else None)
        for a in ARTICLES:
            assert remote.get_page(int(a["id"])) == local.get_page(int(a["id"]))
        assert remote.get_page(123456789) is None
        # passage retrieval: the same hits (ids, titles, text, scores as doubles)
        mine, theirs = open_retriever(local, "bm25", "chunk1024"), remote.open_retriever("bm25", "chunk1024")
        assert theirs.meta == mine.meta and len(theirs) == len(mine)
        for q in [QUESTION, *QUERIES]:
            assert theirs.search(q, 7) == mine.search(q, 7), q
        assert theirs.search_many(QUERIES, 3) == mine.search_many(QUERIES, 3)


@pytest.mark.slow  # spaCy tokenizes the pages whose fragments are ranked (seconds)
def test_the_search_tool_over_the_service_equals_it_over_the_file(physics, served):
    """The same text, fragments and tokens, byte for byte. Ranking a page's fragments tokenizes it with
    spaCy (seconds for a long page): a 1,200-token context cuts Alien (801 words) into fragments;
    paper-2024 fragments every hit, so it is asked for the shortest page."""
    tool_queries = ["Alien", "  alien ", "Einstein", "Einstien", "alien life", "", '"quoted" OR (x', "é"]
    with Snapshot.open(physics) as local, RemoteWiki.connect(served.url) as remote:
        for config, queries in (
            (SearchConfig(), tool_queries),
            (SearchConfig(style="paper-2024", hit_rule="title"), ["Argument (disambiguation)", "Einstien", ""]),
        ):
            here = SearchTool(local, config, words, 1_200)
            there = SearchTool(remote, config, words, 1_200)
            got = [there(q, QUESTION) for q in queries]
            assert got == [here(q, QUESTION) for q in queries], config
            assert any(r.fragments for r in got) and any(r.found_title is None for r in got)


def test_bad_requests_and_missing_indexes_are_one_line_errors(served):
    with RemoteWiki.connect(served.url) as remote:
        with pytest.raises(SnapshotError, match="no bm25 index of words100 passages .* harness index build"):
            remote.index_meta("bm25", "words100")
        with pytest.raises(SnapshotError, match="k: an integer from 0 to"):
            remote._call("POST", "/v1/search", {"query": "x", "k": "ten"})
    import httpx

    reply = httpx.post(served.url + "/v1/search", content=b"not json")
    assert reply.status_code == 400 and reply.json() == {"error": "the request body is not JSON"}


def test_a_dead_service_raises_never_answers_empty(physics, tmp_path):
    server = Served(physics, tmp_path / "serve.log")
    try:
        remote = RemoteWiki.connect(server.url, attempts=2, first_wait=0.05)
        assert remote.search("Albert Einstein", 3)
    finally:
        server.stop()
    with pytest.raises(SearchServiceUnavailable, match=r"did not answer /v1/search after 2 tries \(ConnectError"):
        remote.search("Albert Einstein", 3)
    with pytest.raises(SearchServiceUnavailable):
        remote.similar_titles("Einstien", 3)
    assert remote.retries >= 2
    # unreachable when a run opens it: one line saying how to start one
    with pytest.raises(SnapshotError, match=r"no search service answers there .* harness search serve SNAP.db"):
        RemoteWiki.connect(server.url, attempts=1)


@pytest.mark.slow  # two services started (about 3 s)
def test_a_service_restarted_on_another_snapshot_is_noticed(physics, tmp_path):
    other = write_snapshot(tmp_path / "other.db", ARTICLES[:5], source="physics5")
    first = Served(physics, tmp_path / "a.log")
    try:
        remote = RemoteWiki.connect(first.url, attempts=1)
        port = first.port
    finally:
        first.stop()
    second = Served(other, tmp_path / "b.log", port=port)
    try:
        with pytest.raises(SearchServiceChanged, match="now serves snapshot .* restart it on that snapshot"):
            remote.search("Aristotle", 3)
    finally:
        second.stop()


def test_serve_refuses_a_bad_snapshot_in_one_line(tmp_path):
    not_one = tmp_path / "x.db"
    not_one.write_text("not sqlite")
    for path in (not_one,):
        proc = subprocess.run([sys.executable, "-m", "harness", "search", "serve", str(path), "--port", "0"],
                              capture_output=True, text=True, timeout=60)  # fmt: skip
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr


# runs --------------------------------------------------------------------------------------------
def searcher(queries: list[str], kill=None):
    """A scripted model that makes every search in ``queries`` at once, then answers; ``kill(n)``
    is called before the n-th reply (1-based) and may stop the service."""
    calls = [0]

    def reply(messages, tools, tool_choice, params):
        calls[0] += 1
        if kill is not None:
            kill(calls[0])
        if tools and not any(m["role"] == "tool" for m in messages):
            return {"tool_calls": [{"name": "search", "arguments": {"query": q}} for q in queries]}
        return "Nobel Prize in Physics"

    return reply


def run(out: Path, script: str, *where: str, setting: str = "open-book", limit: int = 3, extra=()) -> int:
    return main(
        [
            "run", "--setting", setting, "--model", f"scripted/{script}", "--dataset", "fanoutqa:dev", "--limit",
            str(limit), "--no-cache", "--max-connections", "1", "--context-size", "4000", "--metrics", "set-f1",
            *where, "--out", str(out), *extra,
        ]
    )  # fmt: skip


def rows(out: Path, name: str = "samples.jsonl") -> list[dict]:
    path = out / name
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


VOLATILE = {"started_at", "finished_at", "latency_s", "waited_s", "invocation"}


def unplaced(results: dict) -> dict:
    """results.json without what names when the run ran and where its pages came from."""
    r = json.loads(json.dumps(results))
    for key in ("invocations", "started_at", "ended_at", "run_id", "config"):
        r.pop(key)
    r["snapshot"].pop("path")
    r["snapshot"]["metadata"].pop("search_service", None)
    r["search_space"].pop("path")
    if isinstance((r.get("agent") or {}).get("index"), dict):  # retrieve-read: the index searched
        r["agent"]["index"].pop("path")
    return r


def same_rows(a: Path, b: Path) -> None:
    left, right = rows(a), rows(b)
    assert len(left) == len(right) > 0
    for x, y in zip(left, right):
        assert {k: v for k, v in x.items() if k not in VOLATILE} == {k: v for k, v in y.items() if k not in VOLATILE}


@pytest.mark.slow  # four whole runs (about 6 s)
def test_runs_over_the_service_equal_runs_over_the_file(physics, served, tmp_path):
    register_script("served-search", searcher(["Alien", "theory of relativity", "Oscars", "Argument (disambiguation)"]))
    try:
        for setting, extra in (("open-book", ()), ("retrieve-read", ("--agent-arg", "passage_kind=chunk1024"))):
            local, remote = tmp_path / f"{setting}-file", tmp_path / f"{setting}-service"
            assert run(local, "served-search", "--snapshot", str(physics), setting=setting, extra=extra) == 0
            assert run(remote, "served-search", "--search-url", served.url, setting=setting, extra=extra) == 0
            same_rows(local, remote)
            a, b = (json.loads((d / "results.json").read_text()) for d in (local, remote))
            assert a["config_hash"] == b["config_hash"]  # one run key: shards may read either
            assert unplaced(a) == unplaced(b)  # scores, counts, search space: all but when and where from
            assert b["config"]["search_url"] == served.url and b["config"]["snapshot"] is None
            # the identity the service gave: content hash and date, recorded with the run
            assert b["snapshot"]["content_hash"] == a["snapshot"]["content_hash"]
            assert b["snapshot"]["path"] == served.url
            assert b["snapshot"]["metadata"]["revision_date"] == "2023-11-20"
            assert b["snapshot"]["metadata"]["search_service"]["url"] == served.url
            assert b["search_space"]["label"] == a["search_space"]["label"]
            assert b["search_space"]["gold_pages"] == a["search_space"]["gold_pages"]
        searches = rows(tmp_path / "open-book-service")[0]["extra"]["searches"]
        assert [s["found_title"] for s in searches] == ["Alien", None, None, "Argument (disambiguation)"]
        assert searches[0]["whole_page"] and "Albert Einstein" in searches[1]["similar_titles"]
        assert "Academy Awards" in searches[2]["similar_titles"]  # a redirect is a miss listing the results
    finally:
        unregister_script("served-search")


@pytest.mark.slow  # two runs and a service started twice (about 6 s)
def test_a_service_killed_mid_run_fails_those_samples_and_a_rerun_retries_them(physics, tmp_path, capsys):
    out = tmp_path / "run"
    server = Served(physics, tmp_path / "a.log")
    try:
        # the second sample's first model call kills the service: its search and the third's fail
        register_script("served-kill", searcher(["Alien"], kill=lambda n: n == 3 and server.stop()))
        code = run(out, "served-kill", "--search-url", server.url, "--search-max-attempts", "2")
    finally:
        unregister_script("served-kill")
        server.stop()
    assert code == 1
    assert len(rows(out)) == 1
    failed = rows(out, "failures.jsonl")
    assert [f["error_type"] for f in failed] == ["search_unavailable"] * 2
    assert all("did not answer /v1/search after 2 tries" in f["error"] for f in failed)
    assert "rerun the same command to retry them" in capsys.readouterr().err
    # back on another port (where it runs is not in the run key): the rerun retries the two, keeps the first
    server = Served(physics, tmp_path / "b.log")
    try:
        register_script("served-kill", searcher(["Alien"]))
        assert run(out, "served-kill", "--search-url", server.url) == 0
    finally:
        unregister_script("served-kill")
        server.stop()
    done = rows(out)
    assert len(done) == 3 and len({r["id"] for r in done}) == 3
    assert all(r["extra"]["searches"][0]["found_title"] == "Alien" for r in done)  # never empty


@pytest.mark.slow  # a run, then a refused one (about 3 s)
def test_a_run_keyed_to_another_snapshot_is_refused_before_any_model_call(physics, served, tmp_path, capsys):
    out = tmp_path / "run"
    other = write_snapshot(tmp_path / "other.db", ARTICLES[:5], source="physics5")
    with RemoteWiki.connect(served.url) as remote:
        served_hash = remote.content_hash
    with Snapshot.open(other) as snap:
        other_hash = snap.metadata["content_sha256"]
    calls: list = []
    register_script("served-key", searcher(["Aristotle"], kill=calls.append))
    try:
        assert run(out, "served-key", "--snapshot", str(other), limit=1) == 0
        capsys.readouterr()
        calls.clear()
        # resuming that run directory from a service that serves the physics snapshot
        assert run(out, "served-key", "--search-url", served.url, limit=1) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert calls == [] and len(err) == 1, err
        assert f"the snapshot: its content changed (sha256 {other_hash[:12]} -> {served_hash[:12]})" in err[0]
        # a service nobody runs: one line, exit 2, no model call
        dead = ("--search-url", "http://127.0.0.1:9", "--search-max-attempts", "1")
        assert run(tmp_path / "none", "served-key", *dead, limit=1) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert calls == [] and len(err) == 1 and "no search service answers there" in err[0], err
    finally:
        unregister_script("served-key")


@pytest.mark.slow  # one run (about 2 s)
def test_credentials_in_the_url_are_used_never_written(physics, served, tmp_path):
    register_script("served-cred", searcher(["Aristotle"]))
    try:
        secret = "s3cr3t-pass"
        url = served.url.replace("http://", f"http://user:{secret}@") + "/?token=abc123tok"
        assert run(tmp_path / "run", "served-cred", "--search-url", url, limit=1) == 0
    finally:
        unregister_script("served-cred")
    for path in (tmp_path / "run").rglob("*"):
        if path.is_file():
            text = path.read_text(errors="replace")
            assert secret not in text and "abc123tok" not in text, path
    assert json.loads((tmp_path / "run" / "results.json").read_text())["config"]["search_url"] == served.url + "/"
    # the URL's user name is no secret: the transcript keeps its roles (it once read "[REDACTED]")
    row = json.loads((tmp_path / "run" / "samples.jsonl").read_text().splitlines()[0])
    assert {m["role"] for m in row["messages"]} >= {"user", "assistant"}


@pytest.mark.slow  # two shards and a merge (about 4 s)
def test_shards_over_one_service_merge_with_the_gold_counted_there(physics, served, tmp_path):
    register_script("served-shard", searcher(["Alien"]))
    try:
        for i in (1, 2):
            assert run(tmp_path / f"s{i}", "served-shard", "--search-url", served.url, extra=("--shard", f"{i}/2")) == 0
        assert main(["merge", str(tmp_path / "s1"), str(tmp_path / "s2"), "--out", str(tmp_path / "merged")]) == 0
        assert run(tmp_path / "whole", "served-shard", "--snapshot", str(physics)) == 0
    finally:
        unregister_script("served-shard")
    merged, whole = (json.loads((tmp_path / d / "results.json").read_text()) for d in ("merged", "whole"))
    assert merged["config_hash"] == whole["config_hash"]
    space = merged["search_space"]
    assert space["gold_note"] is None and space["gold_needed"] == whole["search_space"]["gold_needed"] > 0
    assert space["gold_pages"] == whole["search_space"]["gold_pages"]
