"""wiki_snapshot: building snapshots from every source kind, reading them back, and the CLI.

Real inputs (tests/fixtures/README.md): a genuine MediaWiki XML dump excerpt (206 pages), the first
100 HotpotQA dev questions, 10 plain-text Wikipedia articles. Counts are tallied here
independently of the builders."""

from __future__ import annotations

import bz2
import hashlib
import html
import json
import signal
import random
import re
import sqlite3
import subprocess
import threading
import time
import xml.etree.ElementTree as ET
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest
from conftest import harness_cmd, run_harness

from harness.wiki_snapshot import Page, Snapshot, SnapshotWriter, build_snapshot, stable_pageid
from harness.wiki_snapshot.builders import detect_kind, html_to_markdown
from harness.wiki_snapshot.errors import SnapshotError

FIXTURES = Path(__file__).parent / "fixtures"
DUMP = FIXTURES / "enwiki-sample-pages-articles.xml.bz2"
HOTPOT = FIXTURES / "hotpot_dev_distractor_first100.json"
PHYSICS = FIXTURES / "wikipedia_en_science_physics_10.json"

ODD_QUERIES = [
    "",
    " ",
    '"',
    "'",
    '""quoted""',
    "(",
    ")",
    "a(b)c",
    "*",
    "***",
    ":",
    "title:Albedo",
    "-",
    "--",
    "- NOT",
    "AND OR NOT",
    "NEAR(a b)",
    "^",
    "{{Template}}",
    "[[Albedo]]",
    "Ünïcödé – ñ 北京 😀",
    "\x00\x01",
    "a" * 2000,
    "%_\\",
    'Einstien (physicist)" OR *:-',
    "Albedo\ud800",  # a lone surrogate (a model's "\ud800"): SQLite's text binding raised on it
    "\udcff",  # a 0xff byte, as Python decodes it
]


def assert_clean_error(proc, *needles):
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def no_partial_files(directory: Path) -> bool:
    return not [p for p in directory.iterdir() if ".partial" in p.name]


# independent reading of the sources ---------------------------------------------------------
@pytest.fixture(scope="module")
def dump_pages() -> dict[str, dict]:
    """Every page of the dump fixture, read with a plain full ElementTree parse."""
    root = ET.fromstring(bz2.decompress(DUMP.read_bytes()))
    ns = root.tag.split("}")[0] + "}"
    pages = {}
    for page in root.iter(f"{ns}page"):
        rev = page.find(f"{ns}revision")
        redirect = page.find(f"{ns}redirect")
        pages[page.findtext(f"{ns}title")] = {
            "ns": int(page.findtext(f"{ns}ns")),
            "id": int(page.findtext(f"{ns}id")),
            "revid": int(rev.findtext(f"{ns}id")),
            "timestamp": rev.findtext(f"{ns}timestamp"),
            "redirect": redirect.get("title") if redirect is not None else None,
            "wikitext": rev.findtext(f"{ns}text") or "",
        }
    return pages


@pytest.fixture(scope="module")
def dump_snapshot(tmp_path_factory) -> Path:
    """The dump fixture built through the CLI (exercises `harness snapshot build` end to end)."""
    out = tmp_path_factory.mktemp("dump") / "enwiki.db"
    proc = subprocess.run(
        harness_cmd("snapshot", "build", "--from", str(DUMP), "--out", str(out)),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "106 pages, 99 redirects from dump" in proc.stdout
    assert "pages/s" in proc.stdout
    return out


@pytest.fixture(scope="module")
def snap(dump_snapshot):
    s = Snapshot.open(dump_snapshot)
    yield s
    s.close()


# the MediaWiki dump -----------------------------------------------------------------------
@pytest.mark.slow
def test_dump_counts_match_the_source(snap, dump_pages):
    main = {t: p for t, p in dump_pages.items() if p["ns"] == 0}
    articles = {t: p for t, p in main.items() if p["redirect"] is None}
    redirects = {t: p for t, p in main.items() if p["redirect"] is not None}
    assert len(dump_pages) == 206 and len(articles) == 106 and len(redirects) == 99  # one ns-4 page skipped
    assert len(snap) == len(articles)
    assert set(snap.titles()) == set(articles)
    meta = snap.metadata
    assert meta["pages"] == len(articles) and meta["redirects"] == len(redirects)
    assert meta["stats"]["skipped_namespace"] == 1
    # every article keeps its pageid, revid and timestamp from the dump
    for title, p in articles.items():
        page = snap.get_page(p["id"])
        assert page is not None and page.title == title
        assert page.revid == p["revid"] and page.timestamp == p["timestamp"]
    assert meta["revision_date"] == max(p["timestamp"] for p in articles.values())


def test_dump_metadata_records_source_options_and_hash(snap, dump_snapshot):
    meta = snap.metadata
    assert meta["format"] == "wiki-snapshot" and meta["format_version"] == 1
    assert meta["builder"] == "dump"
    assert meta["source"].endswith("enwiki-sample-pages-articles.xml.bz2")
    assert "enwiki" in meta["source_description"]
    assert meta["builder_options"]["namespaces"] == [0]
    assert meta["harness_version"] and meta["created_at"]
    assert meta["title_search"] == "fts5+trigram" and meta["text_search"] == "fts5-bm25"
    # the content hash is what its documented recipe gives over the stored pages
    digest = hashlib.sha256()
    con = sqlite3.connect(dump_snapshot)
    for pageid, revid, title, text, ts in con.execute(
        "SELECT pageid, revid, title, text, timestamp FROM pages ORDER BY pageid"
    ):
        digest.update(f"{pageid}\t{revid}\t{title}\t{ts}\t{len(text.encode())}\n".encode())
        digest.update(text.encode())
    con.close()
    assert meta["content_sha256"] == digest.hexdigest()


def test_dump_text_is_clean_plain_text(snap, dump_pages):
    wikitext = dump_pages["Albedo"]["wikitext"]
    assert "''[[Photometria]]''" in wikitext and "[[Johann Heinrich Lambert]]" in wikitext
    page = snap.resolve_title("Albedo")
    assert "The term was introduced into optics by Johann Heinrich Lambert in his 1760 work Photometria." in page.text
    assert (
        'Albedo or reflection coefficient, derived from Latin albedo "whiteness" (or reflected sunlight) '
        'in turn from albus "white", is the diffuse reflectivity or reflecting power of a surface.'
    ) in page.text
    # a heading is a line of its own; paragraphs are separated by blank lines
    assert "\n\nTerrestrial albedo\n" in page.text
    assert page.text.count("\n\n") > 10
    # a wikitable becomes one line per row
    assert "Fresh snow | 0.80–0.90" in page.text
    for title in snap.titles():
        text = snap.resolve_title(title).text
        for markup in ("[[", "]]", "{{", "}}", "'''", "<ref", "thumb|"):
            assert markup not in text, (title, markup)


def test_resolve_title_case_underscores_and_redirects(snap, dump_pages):
    albedo = snap.resolve_title("Albedo")
    assert albedo.pageid == dump_pages["Albedo"]["id"]
    for variant in ("albedo", "ALBEDO", "  Albedo \n", "Albedo#Terrestrial albedo"):
        assert snap.resolve_title(variant) == albedo, variant
    assert snap.resolve_title("andre_agassi").title == "Andre Agassi"
    # every main-namespace redirect whose target is an article resolves to it, in any case
    articles = {t for t, p in dump_pages.items() if p["ns"] == 0 and p["redirect"] is None}
    followed = 0
    for title, p in dump_pages.items():
        if p["ns"] == 0 and p["redirect"] in articles:
            assert snap.resolve_title(title.lower()).title == p["redirect"], title
            assert snap.resolve_title(title.replace(" ", "_")).title == p["redirect"], title
            followed += 1
    assert followed >= 10
    assert snap.resolve_title("No such article anywhere") is None
    assert snap.redirect_target("AccessibleComputing") == "Computer accessibility"
    assert snap.resolve_title("AccessibleComputing") is None  # its target is not in this excerpt


def test_similar_titles_finds_misspelt_titles(snap):
    assert "Albedo" in snap.similar_titles("Albdeo")[:3]
    assert snap.similar_titles("Abraham Lincon")[0] == "Abraham Lincoln"
    assert "Albert Einstein" in snap.similar_titles("Albert Einstien", k=5)
    assert snap.similar_titles("anarchy", k=3)[0] == "Anarchism"
    results = snap.similar_titles("asphalt concrete road", k=10)
    assert len(results) == len(set(results)) <= 10 and "Asphalt" in results
    assert snap.similar_titles("Albdeo", k=1) == ["Albedo"]


def test_similar_titles_lists_a_redirects_page_first(snap, dump_pages):
    # the query is a redirect's title: its page comes first
    articles = {t for t, p in dump_pages.items() if p["ns"] == 0 and p["redirect"] is None}
    checked = 0
    for title, p in dump_pages.items():
        if p["ns"] == 0 and p["redirect"] in articles:
            assert snap.similar_titles(title.lower(), k=3)[0] == p["redirect"], title
            checked += 1
    assert checked >= 10
    assert snap.metadata["similar_titles"]["version"] == 2  # the candidate rules, recorded with a run


def _edits(word: str) -> set[str]:
    """Every string one edit from ``word``: a letter dropped, doubled, replaced, two neighbours swapped."""
    out = set()
    for i in range(len(word)):
        out |= {word[:i] + word[i + 1 :], word[:i] + word[i] + word[i:], word[:i] + "q" + word[i + 1 :]}
        if i + 1 < len(word):
            out.add(word[:i] + word[i + 1] + word[i] + word[i + 2 :])
    return out - {word}


def test_one_edit_expression_finds_every_single_edit(dump_pages):
    # the pieces _one_edit searches must survive any one edit of a word of 7 letters or more
    from harness.wiki_snapshot.store import _one_edit, _words

    con = sqlite3.connect(":memory:")
    con.execute("CREATE VIRTUAL TABLE t USING fts5(title, tokenize='trigram')")
    titles = sorted(t for t, p in dump_pages.items() if p["ns"] == 0)
    con.executemany("INSERT INTO t(rowid, title) VALUES (?, ?)", list(enumerate(titles)))
    words = sorted({(w, i) for i, t in enumerate(titles) for w in _words(t) if 7 <= len(w) <= 12})
    assert len({len(w) for w, _ in words}) == 6  # every length from 7 to 12: both kinds of pieces
    for word, row in words[::3]:
        for edited in _edits(word):
            hits = {r[0] for r in con.execute("SELECT rowid FROM t WHERE t MATCH ?", (_one_edit(edited),))}
            assert row in hits, (word, edited, _one_edit(edited))


def _similar_titles_unpruned(snap, query: str, k: int) -> list[str]:
    """similar_titles' ranking computed the slow way: every candidate scored in full with difflib."""
    import difflib

    from harness.wiki_snapshot.store import _STOPWORDS, _dedupe, _words, normalize_title, split_fragment

    q = (split_fragment(query)[0] or normalize_title(query))[:300]
    qkey = q.casefold()
    qwords = _dedupe(_words(qkey))
    scored_words = ([w for w in qwords if w not in _STOPWORDS] or qwords)[:16]
    best: dict[str, float] = {}
    for indexed, page_title in snap._title_candidates(qkey, qwords):
        ikey = indexed.casefold()
        iwords = _dedupe(_words(ikey))
        overlap = 0.0
        for w in scored_words:
            m = 1.0 if w in iwords else max(
                (difflib.SequenceMatcher(None, w, iw, autojunk=False).ratio() for iw in iwords), default=0.0
            )
            overlap += m if m >= 0.8 else 0.0
        overlap = overlap / len(scored_words) if scored_words else 0.0
        score = 0.5 * difflib.SequenceMatcher(None, qkey, ikey, autojunk=False).ratio() + 0.5 * overlap
        best[page_title] = max(score, best.get(page_title, -1.0))
    out = [t for t, _ in sorted(best.items(), key=lambda kv: (-kv[1], kv[0]))[:k]]
    for t, _ in snap.search(q, k * 2) if len(out) < k else []:
        if t not in best and len(out) < k:
            out.append(t)
            best[t] = 0.0
    return out


def test_similar_titles_pruning_keeps_the_full_ranking(snap, dump_pages):
    # the bounds that skip difflib work (issue 40: 10x faster at scale) must never change a result
    rng = random.Random(7)
    titles = sorted(dump_pages)
    queries = ["Albdeo", "Abraham Lincon", "asphalt concrete road", "the history of the americas", "einstien"]
    for t in rng.sample(titles, 15):
        i = rng.randrange(1, max(2, len(t) - 1))
        queries += [t, t.lower(), t[:i] + t[i + 1 :], " ".join(reversed(t.split()))]
    for query in queries:
        for k in (1, 10):
            assert snap.similar_titles(query, k) == _similar_titles_unpruned(snap, query, k), (query, k)


def test_search_ranks_full_text(snap):
    hits = snap.search("diffuse reflectivity of a surface", k=5)
    assert hits[0][0] == "Albedo"
    scores = [s for _, s in hits]
    assert scores == sorted(scores, reverse=True) and all(s > 0 for s in scores)
    assert snap.search("", k=5) == []


@pytest.mark.parametrize("query", ODD_QUERIES)
def test_odd_queries_do_not_crash(snap, query):
    assert isinstance(snap.similar_titles(query), list)
    assert isinstance(snap.search(query), list)
    assert snap.resolve_title(query) is None or isinstance(snap.resolve_title(query), Page)


# records: HotpotQA and plain-text articles ----------------------------------------------------
def test_hotpotqa_records(tmp_path, monkeypatch):
    questions = json.loads(HOTPOT.read_text(encoding="utf-8"))
    first: dict[str, str] = {}
    total = 0
    for q in questions:
        for title, sentences in zip(q["context"]["title"], q["context"]["sentences"]):
            total += 1
            first.setdefault(title, "".join(sentences))
    out = tmp_path / "hotpot.db"
    summary = build_snapshot(str(HOTPOT), out, progress=None)
    assert summary["kind"] == "records"
    with Snapshot.open(out) as s:
        assert len(s) == len(first) == 991
        meta = s.metadata
        assert meta["builder_options"]["layout"] == "hotpotqa"
        assert meta["stats"]["duplicate_titles"] == total - len(first)
        page = s.resolve_title("scott derrickson")
        assert page.text == first["Scott Derrickson"]
        assert page.text.startswith(
            "Scott Derrickson (born July 16, 1966) is an American director, screenwriter and producer. He lives in"
        )
        assert page.pageid == stable_pageid("Scott Derrickson") and 0 < page.pageid < 2**63
        assert "Scott Derrickson" in s.similar_titles("Scott Derickson")[:3]
        assert s.search("Doctor Strange Marvel Cinematic Universe director", k=3)
        # A title whose words are all in a title listed before it ("Ed Wood", "Ed Wood (film)"): the
        # word queries read rows in index order, not by rank, so however few they read, the title
        # itself comes first (titles that start with the query are looked up in the title B-tree).
        from harness.wiki_snapshot.store import _words

        titles = sorted(first, key=stable_pageid)
        shadowed = [t for i, t in enumerate(titles) if any(set(_words(t)) <= set(_words(a)) for a in titles[:i])]
        assert len(shadowed) >= 20
        monkeypatch.setattr("harness.wiki_snapshot.store.TITLE_ROWS", 1)
        for t in shadowed:
            assert s.similar_titles(t.lower(), k=3)[0] == t, t


def test_plain_text_records_keep_real_pageids(tmp_path):
    articles = json.loads(PHYSICS.read_text(encoding="utf-8"))
    out = tmp_path / "physics.db"
    build_snapshot(str(PHYSICS), out, progress=None)
    with Snapshot.open(out) as s:
        assert len(s) == len(articles) == 10
        for a in articles:
            page = s.get_page(int(a["id"]))
            assert page.title == a["title"] and page.text == a["text"]
        assert s.resolve_title("albert_einstein").pageid == 736
        assert s.search("theory of relativity", k=1)[0][0] == "Albert Einstein"


def test_jsonl_records_with_redirect_chains_and_loops(tmp_path):
    articles = json.loads(PHYSICS.read_text(encoding="utf-8"))
    src = tmp_path / "pages.jsonl"
    lines = [
        {"title": a["title"], "text": a["text"], "pageid": int(a["id"]), "revid": 1000 + i}
        for i, a in enumerate(articles)
    ]
    lines += [
        {"title": "Einstein", "redirect": "Albert Einstein"},
        {"title": "A. Einstein", "redirect": "Einstein"},  # a chain of two
        {"title": "Relativity person", "redirect": "A. Einstein#Early life"},  # three, with a fragment
        {"title": "Loop one", "redirect": "Loop two"},
        {"title": "Loop two", "redirect": "Loop one"},
        {"title": "Dangling", "redirect": "Not here"},
    ]
    src.write_text("\n".join(json.dumps(x) for x in lines) + "\n", encoding="utf-8")
    out = tmp_path / "p.db"
    build_snapshot(str(src), out, progress=None)
    with Snapshot.open(out) as s:
        assert s.metadata["redirects"] == 6
        for t in ("einstein", "A._Einstein", "relativity PERSON"):
            assert s.resolve_title(t).title == "Albert Einstein", t
        assert s.resolve_title("Loop one") is None and s.resolve_title("dangling") is None
        assert s.get_page(736).revid == 1000 + [a["title"] for a in articles].index("Albert Einstein")


# FanOutQA page cache ------------------------------------------------------------------------
def test_fanoutqa_cache_with_titles_file(tmp_path):
    articles = json.loads(PHYSICS.read_text(encoding="utf-8"))
    cache = tmp_path / "wikicache"
    cache.mkdir()
    for a in articles:
        (cache / f"{a['id']}-dated.md").write_text(a["text"], encoding="utf-8")
    (cache / "999999-dated.md").write_text(articles[0]["text"], encoding="utf-8")  # no title known
    (cache / "12-dated.md").write_text("", encoding="utf-8")  # what wiki_content caches for a missing revision
    (cache / "notes.txt").write_text("not a page", encoding="utf-8")
    titles = tmp_path / "titles.json"
    titles.write_text(json.dumps({a["id"]: a["title"] for a in articles} | {"12": "Anarchism"}), encoding="utf-8")
    assert detect_kind(str(cache)) == "fanoutqa-cache"
    out = tmp_path / "cache.db"
    build_snapshot(str(cache), out, titles=str(titles), progress=None)
    with Snapshot.open(out) as s:
        assert len(s) == 10
        assert s.resolve_title("Aristotle").text == articles[0]["text"]
        assert s.get_page(736).title == "Albert Einstein"
        stats = s.metadata["stats"]
        assert stats["skipped_no_title"] == [999999] and stats["skipped_empty"] == [12]
        assert s.metadata["builder_options"] == {"titles": str(titles)}


def test_fanoutqa_cache_titles_from_dataset_evidence(tmp_path):
    from harness.commands.snapshot import dataset_evidence
    from harness.datasets import load_dataset
    from harness.wiki_snapshot.builders import collect_evidence

    evidence = []
    for sample in load_dataset("fanoutqa:dev").samples[:2]:
        evidence += collect_evidence(sample.raw)
    evidence = list({e["pageid"]: e for e in evidence}.values())[:4]
    texts = [a["text"] for a in json.loads(PHYSICS.read_text(encoding="utf-8"))]
    cache = tmp_path / "wikicache"
    cache.mkdir()
    for ev, text in zip(evidence, texts):
        (cache / f"{ev['pageid']}-dated.md").write_text(text, encoding="utf-8")
    out = tmp_path / "cache.db"
    build_snapshot(str(cache), out, evidence=dataset_evidence("fanoutqa:dev"), dataset="fanoutqa:dev", progress=None)
    with Snapshot.open(out) as s:
        assert len(s) == len(evidence) == 4
        for ev in evidence:
            page = s.resolve_title(ev["title"])
            assert page.pageid == ev["pageid"] and page.revid == ev["revid"]
        assert s.metadata["revision_date"] == "2023-11-20"


# ZIM ---------------------------------------------------------------------------------------
def _article_html(title: str, text: str) -> str:
    paras = [p for p in text.split("\n\n") if p.strip()]
    body = "".join(f"<p>{html.escape(p)}</p>" for p in paras[:12])
    return (
        f"<html><head><title>{html.escape(title)}</title><style>p {{color: red}}</style></head><body>"
        f'<h1>{html.escape(title)}</h1><div class="content">{body}'
        f'<p>See <a href="./Physics">physics</a>.</p><img src="x.png" alt="A photo"></div></body></html>'
    )


def test_zim_archive(tmp_path):
    writer = pytest.importorskip("libzim.writer", reason="libzim is not installed (pip install libzim)")
    articles = json.loads(PHYSICS.read_text(encoding="utf-8"))

    class Item(writer.Item):
        def __init__(self, path, title, mimetype, content):
            super().__init__()
            self._path, self._title, self._mime, self._content = path, title, mimetype, content

        def get_path(self):
            return self._path

        def get_title(self):
            return self._title

        def get_mimetype(self):
            return self._mime

        def get_contentprovider(self):
            return writer.StringProvider(self._content)

        def get_hints(self):
            return {writer.Hint.FRONT_ARTICLE: self._mime == "text/html"}

    zim = tmp_path / "physics.zim"
    htmls = {}
    with writer.Creator(str(zim)).config_indexing(False, "eng") as creator:
        creator.set_mainpath(articles[0]["title"].replace(" ", "_"))
        for a in articles:
            htmls[a["title"]] = _article_html(a["title"], a["text"])
            creator.add_item(Item(a["title"].replace(" ", "_"), a["title"], "text/html", htmls[a["title"]]))
        creator.add_item(Item("style.css", "", "text/css", "p { margin: 0 }"))
        creator.add_redirection("Einstein", "Einstein", "Albert_Einstein", {writer.Hint.FRONT_ARTICLE: True})
        for key, value in (
            ("Title", "Physics sample"),
            ("Date", "2023-11-20"),
            ("Language", "eng"),
            ("Name", "physics_test"),
        ):
            creator.add_metadata(key, value)
    assert detect_kind(str(zim)) == "zim"
    out = tmp_path / "zim.db"
    build_snapshot(str(zim), out, progress=None)
    with Snapshot.open(out) as s:
        meta = s.metadata
        assert len(s) == 10 and meta["redirects"] == 1
        assert meta["stats"]["skipped_non_html"] == 1
        assert meta["revision_date"] == "2023-11-20"
        page = s.resolve_title("einstein")
        assert page.title == "Albert Einstein" and page.pageid == stable_pageid("Albert Einstein")
        first_sentence = articles[-1]["text"].split(". ")[0]
        assert first_sentence in page.text
        assert "# Albert Einstein" in page.text and "See physics." in page.text and "![A photo](image)" in page.text
        assert "<p>" not in page.text and "color: red" not in page.text
        assert page.text == html_to_markdown(htmls["Albert Einstein"])
        assert page.text.startswith("# Albert Einstein\n")  # the document's <head><title> is not rendered
        try:  # the same markdown as the official fanoutqa package renders (test extra) from the page's
            # body: fanoutqa renders the API's parse HTML, which has no <head>
            from fanoutqa.utils import markdownify as official_markdownify
        except ImportError:
            pass
        else:
            body = re.sub(r"<head>.*?</head>", "", htmls["Albert Einstein"], flags=re.S)
            assert "<head>" in htmls["Albert Einstein"] and page.text == official_markdownify(body)


def test_not_a_zim(tmp_path):
    bad = tmp_path / "bad.zim"
    bad.write_text("hello, not a ZIM archive", encoding="utf-8")
    with pytest.raises(SnapshotError, match="not a ZIM archive"):
        build_snapshot(str(bad), tmp_path / "x.db", progress=None)
    assert not (tmp_path / "x.db").exists() and no_partial_files(tmp_path)


# MediaWiki API against a local server -------------------------------------------------------
class FakeWikipedia:
    """Answers action=parse like the real api.php (formatversion 1): real article text as HTML."""

    def __init__(self):
        articles = {a["title"]: a for a in json.loads(PHYSICS.read_text(encoding="utf-8"))}
        self.revisions = {}
        for revid, title in ((5001, "Aristotle"), (5002, "Albert Einstein"), (5003, "Anatomy"), (5004, "Astronomer")):
            a = articles[title]
            self.revisions[revid] = (title, int(a["id"]), _article_html(title, a["text"]))
        self.alien = articles["Alien"]
        self.requests: list[dict] = []
        self.throttled_once: set[int] = set()
        self.hang = threading.Event()  # set: every request blocks until release is set
        self.release = threading.Event()
        self.seen_request = threading.Event()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/w/api.php"

    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _json(self, status, data, headers=()):
                body = json.dumps(data).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                for k, v in headers:
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                q = {k: v[0] for k, v in parse_qs(urlparse(self.path).query).items()}
                fake.requests.append({"params": q, "ua": self.headers.get("User-Agent"), "t": time.monotonic()})
                fake.seen_request.set()
                if fake.hang.is_set():
                    fake.release.wait(30)
                if q.get("action") != "parse" or q.get("format") != "json":
                    return self._json(200, {"error": {"code": "badvalue", "info": "unsupported"}})
                if "oldid" in q:
                    revid = int(q["oldid"])
                    if revid == 5003 and revid not in fake.throttled_once:
                        fake.throttled_once.add(revid)
                        return self._json(429, {"error": {"code": "ratelimited"}}, [("Retry-After", "1")])
                    if revid not in fake.revisions:
                        return self._json(
                            200,
                            {
                                "error": {
                                    "code": "nosuchrevid",
                                    "info": f"There is no revision with ID {revid}.",
                                    "*": "See https://en.wikipedia.org/w/api.php for API usage.",
                                },
                                "servedby": "mw-api-ext.eqiad.main-1",
                            },
                        )
                    title, pageid, body = fake.revisions[revid]
                    return self._json(
                        200, {"parse": {"title": title, "pageid": pageid, "revid": revid, "text": {"*": body}}}
                    )
                if q.get("page") == "Alien (law)" and q.get("redirects") == "1":
                    body = _article_html("Alien", fake.alien["text"])
                    return self._json(
                        200,
                        {
                            "parse": {
                                "title": "Alien",
                                "pageid": int(fake.alien["id"]),
                                "revid": 5005,
                                "redirects": [{"from": "Alien (law)", "to": "Alien"}],
                                "text": {"*": body},
                            }
                        },
                    )
                return self._json(
                    200, {"error": {"code": "missingtitle", "info": "The page you specified doesn't exist."}}
                )

        return Handler

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


def _evidence_file(tmp_path: Path) -> Path:
    evidence = [
        {"pageid": 308, "revid": 5001, "title": "Aristotle"},
        {"pageid": 736, "revid": 5002, "title": "Einstein"},  # the API reports the page's real title
        {"pageid": 674, "revid": 5003, "title": "Anatomy"},  # answered 429 + Retry-After once
        {"pageid": 580, "revid": 9999999, "title": "Astronomer"},  # no such revision: recorded as missing
        {"pageid": None, "revid": None, "title": "Alien (law)"},  # no revid: current page, API follows the redirect
    ]
    path = tmp_path / "evidence.json"
    path.write_text(
        json.dumps([{"question": "q", "decomposition": [{"evidence": e} for e in evidence]}]), encoding="utf-8"
    )
    return path


@pytest.mark.slow
def test_mediawiki_api(tmp_path):
    evidence = _evidence_file(tmp_path)
    cache = tmp_path / "api-cache"
    with FakeWikipedia() as fake:
        out = tmp_path / "api.db"
        t0 = time.monotonic()
        build_snapshot(
            str(evidence), out, kind="api", api_url=fake.url, rate_limit=0, cache_dir=str(cache), progress=None
        )
        assert time.monotonic() - t0 >= 1.0  # waited for Retry-After
        first_round = len(fake.requests)
        assert first_round == 6  # five pages + one retry
        assert all(r["ua"].startswith("harness/") for r in fake.requests)
        assert [r["params"].get("oldid") for r in fake.requests[:3]] == ["5001", "5002", "5003"]
        assert fake.requests[3]["params"]["oldid"] == "5003"  # the retry
        with Snapshot.open(out) as s:
            meta = s.metadata
            assert len(s) == 4 and meta["builder"] == "api"
            missing = meta["stats"]["missing"]
            assert [(m["title"], m["code"]) for m in missing] == [("Astronomer", "nosuchrevid")]
            assert meta["stats"]["retries"] == 1
            einstein = s.resolve_title("Einstein")
            assert einstein.title == "Albert Einstein" and einstein.revid == 5002 and einstein.pageid == 736
            assert einstein.text == html_to_markdown(fake.revisions[5002][2])
            assert "Albert Einstein" in einstein.text.split("\n")[0]
            assert s.resolve_title("alien (LAW)").title == "Alien"
            assert s.resolve_title("Astronomer") is None
            hash1 = meta["content_sha256"]
        # a rerun reads the on-disk cache: no request at all, same content
        out2 = tmp_path / "api2.db"
        build_snapshot(
            str(evidence), out2, kind="api", api_url=fake.url, rate_limit=0, cache_dir=str(cache), progress=None
        )
        assert len(fake.requests) == first_round
        with Snapshot.open(out2) as s:
            assert s.metadata["content_sha256"] == hash1 and s.metadata["stats"]["from_cache"] == 5
        # the rate limit spaces requests out
        build_snapshot(
            str(evidence), tmp_path / "api3.db", kind="api", api_url=fake.url, rate_limit=20,
            cache_dir=str(tmp_path / "cache3"), progress=None,
        )  # fmt: skip
        times = [r["t"] for r in fake.requests[first_round:]]
        gaps = [b - a for a, b in zip(times, times[1:])]
        assert len(times) == 5 and min(gaps) >= 0.04, gaps  # requests start 1/20 s apart


def test_api_interrupted_build_leaves_nothing(tmp_path):
    """SIGTERM while a request is in flight: exit 130, no snapshot, no partial file."""
    evidence = _evidence_file(tmp_path)
    out = tmp_path / "api.db"
    with FakeWikipedia() as fake:
        fake.hang.set()
        proc = subprocess.Popen(
            harness_cmd(
                "snapshot", "build", "--kind", "api", "--from", str(evidence), "--out", str(out),
                "--api-url", fake.url, "--rate-limit", "0", "--cache-dir", str(tmp_path / "c"),
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        assert fake.seen_request.wait(30)
        time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130, stderr
    assert "interrupted" in stderr and "Traceback" not in stderr
    assert not out.exists() and no_partial_files(tmp_path)


# atomic writes ------------------------------------------------------------------------------
def test_interrupted_writer_leaves_no_file_and_keeps_the_old_one(tmp_path):
    articles = json.loads(PHYSICS.read_text(encoding="utf-8"))
    target = tmp_path / "snap.db"
    with pytest.raises(KeyboardInterrupt):
        with SnapshotWriter(target, source="test", options={}) as w:
            for a in articles[:5]:
                w.add_page(Page(int(a["id"]), None, a["title"], a["text"], None))
            raise KeyboardInterrupt
    assert not target.exists() and no_partial_files(tmp_path)

    build_snapshot(str(PHYSICS), target, progress=None)
    before = target.read_bytes()
    with pytest.raises(SnapshotError, match="already exists"):
        SnapshotWriter(target, source="test", options={})
    with pytest.raises(RuntimeError):
        with SnapshotWriter(target, source="test", options={}, overwrite=True) as w:
            w.add_page(Page(1, None, "Only page", "text", None))
            raise RuntimeError("boom")
    assert target.read_bytes() == before and no_partial_files(tmp_path)
    with SnapshotWriter(target, source="test", options={"k": 1}, overwrite=True) as w:
        w.add_page(Page(1, None, "Only page", "text", None))
        w.add_page(Page(1, None, "Same id again", "text", None))
        w.finish()
    with Snapshot.open(target) as s:
        assert len(s) == 1 and s.metadata["duplicates_skipped"] == 1 and s.metadata["builder_options"] == {"k": 1}


@pytest.mark.slow
def test_truncated_dump_fails_without_output(tmp_path):
    xml = bz2.decompress(DUMP.read_bytes())
    cut = tmp_path / "cut.xml"
    cut.write_bytes(xml[: len(xml) // 2])
    out = tmp_path / "cut.db"
    with pytest.raises(SnapshotError, match="truncated or corrupt"):
        build_snapshot(str(cut), out, progress=None, workers=1)
    assert not out.exists() and no_partial_files(tmp_path)


def test_like_fallback_without_fts5(tmp_path):
    out = tmp_path / "nofts.db"
    build_snapshot(str(PHYSICS), out, progress=None, fts5=False)
    with Snapshot.open(out) as s:
        meta = s.metadata
        assert meta["fts5"] is False and meta["title_search"] == "like" and meta["text_search"] == "like"
        assert "Albert Einstein" in s.similar_titles("Albert Einstien")[:2]
        assert s.search("relativity", k=3)[0][0] == "Albert Einstein"
        for q in ODD_QUERIES:
            assert isinstance(s.similar_titles(q), list) and isinstance(s.search(q), list)


# the CLI ------------------------------------------------------------------------------------
def test_cli_info_and_search(dump_snapshot):
    info = run_harness("snapshot", "info", str(dump_snapshot))
    assert info.returncode == 0, info.stderr
    data = json.loads(info.stdout)
    assert data["counts"] == {"pages": 106, "redirects": 99} and data["builder"] == "dump"
    found = run_harness("snapshot", "search", str(dump_snapshot), "ALBEDO")
    assert found.returncode == 0 and found.stdout.startswith("Albedo  [pageid 39")
    similar = run_harness("snapshot", "search", str(dump_snapshot), "Albdeo", "--k", "3", "--json")
    assert similar.returncode == 0 and "Albedo" in json.loads(similar.stdout)["similar"]
    text = run_harness("snapshot", "search", str(dump_snapshot), "diffuse reflectivity", "--text", "--k", "2")
    assert text.returncode == 0 and "Albedo" in text.stdout.splitlines()[0]


def test_cli_build_records_and_overwrite(tmp_path):
    out = tmp_path / "h.db"
    proc = run_harness("snapshot", "build", "--from", str(HOTPOT), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "991 pages, 0 redirects from records" in proc.stdout
    assert_clean_error(
        run_harness("snapshot", "build", "--from", str(HOTPOT), "--out", str(out)), "already exists", "--overwrite"
    )
    proc = run_harness("snapshot", "build", "--from", str(PHYSICS), "--out", str(out), "--overwrite")
    assert proc.returncode == 0 and "10 pages" in proc.stdout


@pytest.mark.slow
def test_cli_bad_inputs(tmp_path, dump_snapshot):
    corrupt = tmp_path / "corrupt.db"
    corrupt.write_text("these are not the bytes of a SQLite database\n" * 20, encoding="utf-8")
    assert_clean_error(run_harness("snapshot", "info", str(corrupt)), "not a SQLite file")
    assert_clean_error(run_harness("snapshot", "search", str(corrupt), "x"), "not a SQLite file")
    other = tmp_path / "other.db"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE t (x)")
    con.commit()
    con.close()
    assert_clean_error(run_harness("snapshot", "info", str(other)), "not a wiki snapshot")
    assert_clean_error(run_harness("snapshot", "info", str(tmp_path / "missing.db")), "snapshot not found")

    out = tmp_path / "out.db"
    assert_clean_error(
        run_harness("snapshot", "build", "--from", str(tmp_path / "missing.xml"), "--out", str(out)), "not found"
    )
    text = tmp_path / "notes.xml"
    text.write_text("plain text, not XML at all\n", encoding="utf-8")
    assert_clean_error(
        run_harness("snapshot", "build", "--from", str(text), "--out", str(out)), "not a MediaWiki XML dump"
    )
    html_file = tmp_path / "page.xml"
    html_file.write_text("<html><body><p>an XML file that is no dump</p></body></html>", encoding="utf-8")
    assert_clean_error(
        run_harness("snapshot", "build", "--from", str(html_file), "--out", str(out)), "not a MediaWiki XML dump"
    )
    fake_bz2 = tmp_path / "dump.xml.bz2"
    fake_bz2.write_bytes(b"not bzip2 data" * 10)
    assert_clean_error(
        run_harness("snapshot", "build", "--from", str(fake_bz2), "--out", str(out)), "not a MediaWiki XML dump"
    )
    bad_json = tmp_path / "records.json"
    bad_json.write_text("[{not json", encoding="utf-8")
    assert_clean_error(run_harness("snapshot", "build", "--from", str(bad_json), "--out", str(out)), "not valid JSON")
    assert_clean_error(
        run_harness("snapshot", "build", "--from", str(DUMP), "--out", str(out), "--titles", "x.json"),
        "--titles does not apply to --kind dump",
    )
    assert not out.exists() and no_partial_files(tmp_path)
