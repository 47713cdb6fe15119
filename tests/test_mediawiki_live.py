"""``--search mediawiki``: the live MediaWiki API as FanOutQA's code asks it, against a loopback fake.

The fake (stdlib ThreadingHTTPServer on 127.0.0.1) answers with MediaWiki's response shapes:
replayed byte for byte where a recording exists (tests/fixtures/recorded/mediawiki/, real
en.wikipedia.org and awoiaf.westeros.org responses recorded by pymediawiki's tests, origin in
tests/fixtures/recorded/README.md), and built in those same shapes over real article text (the 10
physics articles of tests/fixtures) elsewhere; ``action=parse``'s ``parse.text["*"]`` and a search
hit's ``pageid`` rest on the API documentation and fanoutqa/wiki.py, not on a recording.
"""

from __future__ import annotations

import html
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest

from harness.cli import main
from harness.models.scripted import register_script, unregister_script
from harness.models.tokenizers import count_tiktoken
from harness.tools.search import SearchConfig, SearchTool
from harness.wiki_snapshot import Page, Snapshot, SnapshotWriter
from harness.wiki_snapshot.builders import html_to_markdown
from harness.wiki_snapshot.errors import SnapshotError
from harness.wiki_snapshot.mediawiki_live import MediaWikiLive

FIXTURES = Path(__file__).resolve().parent / "fixtures"
RECORDED = json.loads((FIXTURES / "recorded" / "mediawiki" / "pymediawiki_2017.json").read_text(encoding="utf-8"))
RVSTART = "2023-11-20T00:00:00+00:00"  # fanoutqa's DATASET_EPOCH.isoformat()
NOT_YET = "Android (robot)"  # a page the fake says had no revision by 2023-11-20
REDIRECTS = {"Einstein": "Albert Einstein", "USA": "Academy Awards"}


def _recorded(what: str) -> dict:
    return next(i for i in RECORDED["interactions"] if i["what"].startswith(what))


def _html(title: str, text: str) -> str:
    paras = [p for p in text.split("\n\n") if p.strip()][:12]
    return '<div class="mw-parser-output">' + "".join(f"<p>{html.escape(p)}</p>" for p in paras) + "</div>"


class FakeMediaWiki:
    """api.php over real article text; the search is FTS5 over the same pages (any engine will do:
    what is tested is what the harness sends and how it reads the answers)."""

    def __init__(self, tmp: Path):
        articles = json.loads((FIXTURES / "wikipedia_en_science_physics_10.json").read_text(encoding="utf-8"))
        path = tmp / "engine.sqlite"
        with SnapshotWriter(path, source="fake", options={}) as w:
            for a in articles:
                w.add_page(Page(int(a["id"]), None, a["title"], a["text"], None))
            w.finish()
        self.engine = Snapshot.open(path)
        self.pages = {a["title"]: (int(a["id"]), a["text"]) for a in articles}
        self.by_id = {pid: title for title, (pid, _) in self.pages.items()}
        self.revid = {pid: 900_000 + pid for pid in self.by_id}
        self.requests: list[dict] = []
        self.throttle: set[str] = set()  # request kinds answered 429 once
        self.replay = True  # answer recorded requests with the recording itself
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/w/api.php"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
        self.engine.close()

    # answers in MediaWiki's shapes (format=json, formatversion 1) ----------------------------------
    def answer(self, q: dict[str, str]) -> dict:
        if self.replay:
            for rec in RECORDED["interactions"]:
                p = rec["params"]
                same = all(str(p.get(k)) == q.get(k) for k in ("srsearch", "titles", "pageids") if k in p or k in q)
                if p.get("action") == q.get("action") and same and (p.get("list") or p.get("titles")):
                    return rec["response"]
        if q.get("meta") == "siteinfo":
            general = _recorded("meta=siteinfo")["response"]["query"]["general"]
            # statistics: shape from https://www.mediawiki.org/wiki/API:Siteinfo (documentation only)
            return {"batchcomplete": "", "query": {"general": general, "statistics": {"articles": len(self.pages)}}}
        if q.get("list") == "search":
            if not q.get("srsearch"):
                return {"error": {"code": "missingparam", "info": 'The "srsearch" parameter must be set.'}}
            k = int(q.get("srlimit", 10))
            hits = [
                {"ns": 0, "title": t, "pageid": self.pages[t][0]} for t, _ in self.engine.search(q["srsearch"], k)
            ]
            return {
                "batchcomplete": "",
                "continue": {"continue": "-||", "sroffset": k},
                "query": {"search": hits, "searchinfo": {"totalhits": len(hits)}},
            }
        if "titles" in q:
            title = q["titles"].replace("_", " ").strip()
            out: dict = {}
            norm = title[:1].upper() + title[1:]  # $wgCapitalLinks: "case": "first-letter" in siteinfo
            if norm != q["titles"]:
                out["normalized"] = [{"from": q["titles"], "to": norm}]
            if q.get("redirects") and norm in REDIRECTS:
                out["redirects"] = [{"from": norm, "to": REDIRECTS[norm]}]
                norm = REDIRECTS[norm]
            if norm in self.pages:
                pid = self.pages[norm][0]
                out["pages"] = {str(pid): {"ns": 0, "pageid": pid, "title": norm, "lastrevid": self.revid[pid]}}
            else:
                out["pages"] = {"-1": {"ns": 0, "title": norm, "missing": ""}}
            return {"batchcomplete": "", "query": out}
        if q.get("prop") == "revisions":
            pid = int(q["pageids"])
            page = {"ns": 0, "pageid": pid, "title": self.by_id[pid]}
            if self.by_id[pid] != NOT_YET:
                page["revisions"] = [{"revid": self.revid[pid], "parentid": self.revid[pid] - 1,
                                      "timestamp": "2023-11-02T10:00:00Z"}]  # fmt: skip
            return {"batchcomplete": "", "query": {"pages": {str(pid): page}}}
        if q.get("action") == "parse":
            pid = int(q["oldid"]) - 900_000
            title = self.by_id[pid]
            text = {"*": _html(title, self.pages[title][1])}
            return {"parse": {"title": title, "pageid": pid, "revid": int(q["oldid"]), "text": text}}
        return {"error": {"code": "badvalue", "info": "unsupported by the fake"}}

    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                q = {k: v[0] for k, v in parse_qs(urlparse(self.path).query, keep_blank_values=True).items()}
                fake.requests.append({"params": q, "ua": self.headers.get("User-Agent"), "t": time.monotonic()})
                kind = q.get("list") or q.get("prop") or q.get("meta") or q.get("action")
                status, headers = 200, []
                if kind in fake.throttle:
                    fake.throttle.discard(kind)
                    status, headers = 429, [("Retry-After", "1")]
                    body = {"error": {"code": "ratelimited", "info": "You've exceeded your rate limit."}}
                else:
                    body = fake.answer(q)
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                for k, v in headers:
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

        return Handler


@pytest.fixture
def fake(tmp_path):
    with FakeMediaWiki(tmp_path) as f:
        yield f


def _keys(obj) -> set[str]:
    return set(obj) if isinstance(obj, dict) else set()


def test_recorded_responses_are_read(fake, tmp_path):
    """Real responses (replayed as recorded): the search's titles in order, a title normalized, a
    title normalized then redirected, a missing page."""
    live = MediaWikiLive(fake.url, rate_limit=0, cache_dir=str(tmp_path / "c"))
    recorded = [h["title"] for h in _recorded("list=search")["response"]["query"]["search"]]
    assert [t for t, _ in live.search("chest set", 10)] == recorded and len(recorded) == 10
    castor = live.resolve_title("castor")
    assert (castor.pageid, castor.title) == (56203, "Castor")
    arya = live.resolve_title("arya")  # awoiaf's recording: arya -> Arya -> Arya Stark
    assert (arya.pageid, arya.title) == (1635, "Arya Stark")
    # the fake's own answers have the recorded shapes (and a search hit's pageid, as fanoutqa reads it)
    fake.replay = False
    mine = fake.answer({"action": "query", "list": "search", "srsearch": "Einstein", "srlimit": "10"})
    rec = _recorded("list=search")["response"]
    assert _keys(mine) == _keys(rec) and {"search"} <= _keys(mine["query"])
    assert _keys(rec["query"]["search"][0]) <= _keys(mine["query"]["search"][0]) == {"ns", "title", "pageid"}
    mine = fake.answer({"action": "query", "titles": "einstein", "redirects": "1"})
    rec = _recorded("titles= with redirects: normalized, then")["response"]["query"]
    assert _keys(mine["query"]) == _keys(rec) and mine["query"]["normalized"][0].keys() == rec["normalized"][0].keys()
    missing = _recorded("a page that does not exist")["response"]["query"]["pages"]["-1"]
    mine = fake.answer({"action": "query", "titles": "Nothing Here", "redirects": "1"})["query"]["pages"]["-1"]
    assert "missing" in missing and "missing" in mine
    revs = _recorded("prop=revisions")["response"]["query"]["pages"]["6182"]["revisions"][0]
    mine = fake.answer({"prop": "revisions", "pageids": "736"})["query"]["pages"]["736"]["revisions"][0]
    assert _keys(revs) <= _keys(mine)
    assert live.resolve_title("Nothing Here") is None


def test_requests_sent_polite_dated_and_cached(fake, tmp_path):
    cache = tmp_path / "cache"
    live = MediaWikiLive(fake.url, rate_limit=20, cache_dir=str(cache))
    live.check()
    assert live.metadata["pages"] == 10 and live.metadata["format"] == "mediawiki-live"
    assert live.metadata["revision_date"] == "2023-11-20" and live.metadata["scope"] == "source"
    hits = live.search("Albert Einstein", 10)
    assert hits[0][0] == "Albert Einstein"
    page = live.resolve_title("Albert Einstein")  # the search named its pageid: no titles= request
    assert page.pageid == 736 and page.revid == 900_736
    text = page.text
    assert text == html_to_markdown(_html("Albert Einstein", fake.pages["Albert Einstein"][1]))
    assert "Winteler" in text and "<p>" not in text
    sent = [r["params"] for r in fake.requests]
    assert sent == [
        {"format": "json", "action": "query", "meta": "siteinfo", "siprop": "general|statistics"},
        {"format": "json", "action": "query", "list": "search", "srsearch": "Albert Einstein", "srlimit": "10"},
        {"format": "json", "action": "query", "prop": "revisions", "rvprop": "ids|timestamp", "rvlimit": "1",
         "rvstart": RVSTART, "pageids": "736"},
        {"format": "json", "action": "parse", "oldid": "900736", "prop": "text"},
    ]  # fmt: skip
    assert all(r["ua"].startswith("harness/") and "LLM evaluation harness" in r["ua"] for r in fake.requests)
    gaps = [b["t"] - a["t"] for a, b in zip(fake.requests, fake.requests[1:])]
    assert min(gaps) >= 0.045, gaps  # 20 requests/s: at least 1/20 s apart
    # a redirect through titles=, and a page with no revision by the date: empty text, no parse request
    assert live.resolve_title("Einstein").title == "Albert Einstein"
    robot = live.resolve_title(NOT_YET)
    assert robot.revid is None and robot.text == ""
    n = len(fake.requests)
    # a rerun (a new process: a new backend) over the same cache sends nothing at all
    again = MediaWikiLive(fake.url, rate_limit=20, cache_dir=str(cache))
    again.check()
    assert again.search("Albert Einstein", 10) == hits
    assert again.resolve_title("Albert Einstein").text == text
    assert again.resolve_title("Einstein").title == "Albert Einstein" and again.resolve_title(NOT_YET).text == ""
    assert len(fake.requests) == n and again.client.stats["requests"] == 0


def test_429_waits_for_retry_after(fake, tmp_path):
    fake.throttle.add("search")
    live = MediaWikiLive(fake.url, rate_limit=0, cache_dir=str(tmp_path / "c"))
    t0 = time.monotonic()
    assert live.search("Aristotle", 5)[0][0] == "Aristotle"
    assert time.monotonic() - t0 >= 1.0 and live.client.stats["retries"] == 1
    assert [r["params"]["srsearch"] for r in fake.requests] == ["Aristotle", "Aristotle"]


def test_no_network_is_one_line(tmp_path):
    closed = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    url = f"http://127.0.0.1:{closed.server_address[1]}/w/api.php"
    closed.server_close()  # nothing listens there now: connection refused, as with no network
    live = MediaWikiLive(url, rate_limit=0, cache_dir=str(tmp_path / "c"))
    with pytest.raises(SnapshotError, match="cannot be reached from here") as info:
        live.check()
    assert "\n" not in str(info.value) and "--snapshot" in str(info.value) and ".zim" in str(info.value)


def _search_then_answer(calls: list):
    def reply(messages, tools, tool_choice, params):
        calls.append(len(messages))
        if tools and not any(m["role"] == "tool" for m in messages):
            return {"tool_calls": [{"name": "search", "arguments": {"query": "Albert Einstein"}}]}
        return "Mileva Marić"

    return reply


def _run(tmp_path, name, url, *extra):
    return main(
        [
            "run", "--setting", "open-book", "--model", f"scripted/{name}", "--dataset", "fanoutqa:dev",
            "--limit", "1", "--no-cache", "--search", "mediawiki", "--search-api-url", url,
            "--search-rate-limit", "0", "--out", str(tmp_path / "run"), *extra,
        ]
    )  # fmt: skip


@pytest.mark.slow  # a whole harness run (about 2 s)
def test_run_without_network_stops_before_the_model(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "cache"))
    closed = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    url = f"http://127.0.0.1:{closed.server_address[1]}/w/api.php"
    closed.server_close()
    calls: list = []
    register_script("live-offline", _search_then_answer(calls))
    try:
        code = _run(tmp_path, "live-offline", url)
    finally:
        unregister_script("live-offline")
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and calls == []
    assert len(err) == 1 and "cannot be reached from here" in err[0] and "Traceback" not in err[0]


@pytest.mark.slow  # two whole harness runs (about 5 s)
def test_open_book_run_over_the_live_search(fake, tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "cache"))
    calls: list = []
    register_script("live-search", _search_then_answer(calls))
    try:
        assert _run(tmp_path, "live-search", fake.url) == 0
        n = len(fake.requests)
        assert n >= 4 and calls
        results = json.loads((tmp_path / "run" / "results.json").read_text(encoding="utf-8"))
        row = json.loads((tmp_path / "run" / "samples.jsonl").read_text(encoding="utf-8").splitlines()[0])
        # a second run of the same command over the same cache: the finished sample is kept, nothing sent
        assert _run(tmp_path, "live-search", fake.url) == 0
        assert len(fake.requests) == n
    finally:
        unregister_script("live-search")
    text = json.dumps(results)
    assert results["config"]["search"] == "mediawiki" and results["config"]["search_api_url"] == fake.url
    assert "mediawiki-live" in text and "2023-11-20" in text
    search = row["extra"]["searches"][0]
    assert search["query"] == "Albert Einstein" and search["found_title"] == "Albert Einstein"
    assert search["hit_rule"] == "search-results"
    assert any(r["params"].get("rvstart") == RVSTART for r in fake.requests)


def test_a_query_with_a_lone_surrogate_is_sent_as_u_fffd(fake, tmp_path):
    """A model's "\\ud800" in a search call: httpx raised encoding it into the URL (the sample failed);
    the client sends U+FFFD (``sendable_params``), and the tool's record counts it."""
    live = MediaWikiLive(fake.url, rate_limit=0, cache_dir=str(tmp_path / "c"))
    fake.replay = False
    assert live.search("Albert Einstein\ud800", 3)[0][0] == "Albert Einstein"
    assert live.resolve_title("Einstein\ud800") is None
    assert [r["params"].get("srsearch") or r["params"].get("titles") for r in fake.requests] == [
        "Albert Einstein\ufffd",
        "Einstein\ufffd",
    ]
    got = SearchTool(live, SearchConfig(), count_tiktoken, 1_000_000)("Albert Einstein\udcff", "q")
    assert got.replaced_surrogates == 1 and "Albert Einstein" in got.similar_titles
    assert live.search("Albert Einstein\ud800", 3) and len(fake.requests) == 3  # cached as what was sent


def test_hit_rule_over_the_live_search(fake, tmp_path):
    """FanOutQA's loop (our restatement, as in test_search_hit_rule) over the live search's own results."""
    live = MediaWikiLive(fake.url, rate_limit=0, cache_dir=str(tmp_path / "c"))
    tool = SearchTool(live, SearchConfig(), count_tiktoken, 1_000_000)
    assert tool.hit_rule == "search-results"
    for q in ("Albert Einstein", "albert einstein", "Einstein", "USA", "  Aristotle ", "Alien", "alien life",
              "Academy Awards", "ACADEMY AWARDS", "", "Mileva Marić", "Anatomy"):  # fmt: skip
        query = q.strip()
        titles = [t for t, _ in live.search(query, 10)]
        found = next((t for t in titles if t.lower() == query.lower()), None)
        got = tool(q, "q")
        assert got.found_title == found, q
        assert got.similar_titles == ([] if found else titles), q
        if found:
            assert f"<title>{found}</title>" in got.text and live.resolve_title(found).text in got.text
    assert tool("Einstein", "q").found_title is None  # a redirect: a miss listing its target
    assert "Albert Einstein" in tool("Einstein", "q").similar_titles
