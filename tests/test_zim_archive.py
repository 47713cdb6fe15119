"""A ZIM archive read in place (harness.wiki_snapshot.zim_archive.ZimWiki) over real ZIM files written with
libzim's writer (full-text indexing on, and one archive with it off) from the real Wikipedia text in
tests/fixtures (tests/zim_fixtures.py)."""

from __future__ import annotations

import asyncio
import json
import re
import threading
from pathlib import Path

import pytest

pytest.importorskip("libzim.writer", reason="libzim is not installed (pip install libzim)")

from harness.cli import main  # noqa: E402
from zim_fixtures import DATE, REDIRECTS, fixture_articles, write_zim  # noqa: E402

import harness.wiki_snapshot.builders as builders  # noqa: E402
from harness.wiki_snapshot import SnapshotError, open_wiki  # noqa: E402
from harness.wiki_snapshot.builders import build_snapshot, html_to_markdown  # noqa: E402
from harness.wiki_snapshot.space import WikiBackend, scope_of  # noqa: E402
from harness.wiki_snapshot.store import Snapshot, stable_pageid  # noqa: E402
from harness.wiki_snapshot.zim_archive import ZimWiki  # noqa: E402


QUESTIONS = 30  # HotpotQA questions whose paragraphs science.zim holds (all 100: the slow test)
PAGES = len(fixture_articles(True, QUESTIONS))


@pytest.fixture(scope="session")
def zims(tmp_path_factory):
    """science.zim: the 10 physics articles and the paragraphs of the first 30 HotpotQA questions,
    full-text indexed; physics_noindex.zim: the physics articles with indexing off."""
    root = tmp_path_factory.mktemp("zim")
    science, plain = root / "science.zim", root / "physics_noindex.zim"
    htmls = write_zim(science, indexing=True, hotpot=True, questions=QUESTIONS)
    write_zim(plain, indexing=False, hotpot=False)
    return {"science": science, "noindex": plain, "htmls": htmls}


@pytest.fixture
def wiki(zims):
    w = open_wiki(zims["science"])
    yield w
    w.close()


def test_opens_as_a_backend_with_the_archives_metadata(wiki, zims):
    assert isinstance(wiki, ZimWiki) and isinstance(wiki, WikiBackend)
    meta = wiki.metadata
    assert meta["format"] == "zim" and meta["source"] == "science.zim"
    assert meta["revision_date"] == DATE and meta["zim_metadata"]["Flavour"] == "nopic"
    assert meta["pages"] == PAGES + len(REDIRECTS)  # libzim's article_count: front articles, hinted redirects too
    assert meta["redirects"] is None  # libzim does not count them
    assert meta["full_text_index"] is True and meta["title_index"] is True and wiki.full_text_search
    assert meta["content_hash"] == f"zim:{meta['zim_uuid']}:md5:{meta['zim_checksum_md5']}"
    assert re.fullmatch(r"[0-9a-f]{32}", meta["zim_checksum_md5"])
    assert "markdownify" in meta["renderer"]
    assert scope_of(meta) == ("source", None)
    assert wiki.notices == []


def test_resolve_exact_case_redirects_and_missing(wiki, zims):
    page = wiki.resolve_title("Albert Einstein")
    assert page.title == "Albert Einstein" and page.pageid == stable_pageid("Albert Einstein")
    assert page.revid is None and page.timestamp == DATE
    assert page.text == html_to_markdown(zims["htmls"]["Albert Einstein"])
    assert "# Albert Einstein" in page.text and "<p>" not in page.text and "var x" not in page.text
    assert "| Related |" in page.text  # the infobox table, as markdown
    for query in ("Albert_Einstein", "albert einstein", "ALBERT EINSTEIN", "Albert Einstein#Early life"):
        assert wiki.resolve_title(query) == page, query
    assert wiki.resolve_title("Einstein") == page  # a redirect
    assert wiki.resolve_title("A. Einstein") == page  # a chain of two
    assert wiki.resolve_title("a. einstein") == page  # a chain, any case
    assert wiki.resolve_title("the oscars").title == "Academy Awards"
    assert wiki.resolve_title("android robot").title == "Android (robot)"
    # a HotpotQA paragraph page
    hot = wiki.resolve_title("Scott Derrickson")
    assert hot.title == "Scott Derrickson" and "American director" in hot.text
    for missing in ("No such page anywhere", "Einsteinium", "style.css"):  # style.css: not an HTML page
        assert wiki.resolve_title(missing) is None, missing


def test_get_page_knows_only_pages_resolved_here(wiki):
    page = wiki.resolve_title("Aristotle")
    assert wiki.get_page(page.pageid) == page
    assert wiki.get_page(stable_pageid("Anatomy")) is None  # not resolved yet: a ZIM has no page ids
    assert wiki.get_page("not an id") is None


def test_similar_titles_come_from_title_suggestions_redirects_resolved(wiki):
    similar = wiki.similar_titles("einstein", 5)
    # the suggestions are the redirects "Einstein" and "A. Einstein" (libzim collapses the page under
    # them): both resolve to the page, listed once
    assert similar[0] == "Albert Einstein" and similar.count("Albert Einstein") == 1
    academy = wiki.similar_titles("academy award", 6)
    assert academy[:2] == ["Academy Award for Best Production Design", "Academy Awards"] or academy[:2] == [
        "Academy Awards",
        "Academy Award for Best Production Design",
    ]
    assert len(academy) == 6 and len(set(academy)) == 6  # filled up with full-text results
    assert all(wiki.resolve_title(t).title == t for t in academy)
    assert wiki.similar_titles("einstein", 0) == []


def _only_in_one_body(articles):
    """A word found in exactly one page's text and in no title (case folded)."""
    words_of = {t: set(re.findall(r"[a-z]{9,}", " ".join(ps).casefold())) for t, ps in articles.items()}
    in_titles = set(re.findall(r"[a-z]+", " ".join(articles).casefold()))
    counts: dict[str, list[str]] = {}
    for t, words in words_of.items():
        for w in words:
            counts.setdefault(w, []).append(t)
    return sorted((w, ts[0]) for w, ts in counts.items() if len(ts) == 1 and w not in in_titles)


def test_full_text_search_finds_a_page_by_a_word_only_in_its_body(wiki):
    articles = fixture_articles(True, QUESTIONS)
    checked = 0
    for word, title in _only_in_one_body(articles)[::41][:8]:
        hits = wiki.search(word, 10)
        # Xapian stems English words ("abbreviation" also matches "abbreviated"): a hit, not always the first
        assert title in [t for t, _ in hits], (word, title, hits)
        checked += 1
    assert checked == 8
    assert wiki.search("photoelectric", 3)[0] == ("Albert Einstein", 1.0)
    hits = wiki.search("relativity", 5)
    assert [s for _, s in hits] == [1.0, 1 / 2, 1 / 3, 1 / 4, 1 / 5]  # rank-based scores, best first
    assert len({t for t, _ in hits}) == 5  # each page once


def test_an_archive_without_a_full_text_index_says_so(zims):
    wiki = open_wiki(zims["noindex"])
    assert not wiki.full_text_search and wiki.metadata["full_text_index"] is False
    assert len(wiki.notices) == 1 and "no full-text index" in wiki.notices[0]
    assert "title lookup" in wiki.notices[0] and "title suggestions" in wiki.notices[0]
    assert wiki.search("relativity") == []
    assert wiki.similar_titles("acad", 5) == ["Academy Award for Best Production Design", "Academy Awards"] or sorted(
        wiki.similar_titles("acad", 5)
    ) == ["Academy Award for Best Production Design", "Academy Awards"]
    assert wiki.resolve_title("einstein").title == "Albert Einstein"


def test_text_equals_what_snapshot_build_stores_both_ways(zims, tmp_path):
    """Every page of a snapshot built from the archive reads the same in place, and every title of the
    archive (pages and redirects) resolves to the same page in both."""
    db = tmp_path / "physics.db"
    build_snapshot(str(zims["noindex"]), db, progress=None, workers=1)
    wiki = open_wiki(zims["noindex"])
    with Snapshot.open(db) as snap:
        pages = list(snap.pages())
        assert len(pages) == 10
        for page in pages:
            assert wiki.resolve_title(page.title) == page
        for title in [*fixture_articles(hotpot=False), *(r for r, _ in REDIRECTS if r != "Android robot")]:
            assert wiki.resolve_title(title) == snap.resolve_title(title), title


@pytest.mark.slow
def test_text_equals_snapshot_build_on_the_indexed_archive(tmp_path):
    zim, db = tmp_path / "all.zim", tmp_path / "all.db"
    write_zim(zim, indexing=True, hotpot=True)  # all 100 questions' paragraphs
    build_snapshot(str(zim), db, progress=None, workers=1)
    wiki = open_wiki(zim)
    with Snapshot.open(db) as snap:
        n = 0
        for page in snap.pages():
            assert wiki.resolve_title(page.title) == page
            n += 1
        assert n == 1001
        for title, _ in REDIRECTS:
            assert wiki.resolve_title(title) == snap.resolve_title(title)


def test_rendering_is_cached_in_memory_and_on_disk(zims, tmp_path, monkeypatch):
    calls = []
    real = builders.html_to_markdown

    def counting(html):
        calls.append(1)
        return real(html)

    monkeypatch.setattr(builders, "html_to_markdown", counting)
    cache = tmp_path / "zimcache"
    first = ZimWiki.open(zims["science"], cache_dir=cache)
    page = first.resolve_title("Aristotle")
    assert first.resolve_title("aristotle") == page and first.resolve_title("Aristotle") == page
    assert len(calls) == 1 and first.renders == 1
    files = list((cache / first.metadata["zim_uuid"]).rglob("*.json"))
    assert len(files) == 1
    # a new reader (a new process, say) reads the disk cache
    second = ZimWiki.open(zims["science"], cache_dir=cache)
    assert second.resolve_title("Aristotle") == page and len(calls) == 1 and second.renders == 0
    # a partial (or corrupt) cache file is ignored and rewritten
    files[0].write_text(files[0].read_text()[:100], encoding="utf-8")
    third = ZimWiki.open(zims["science"], cache_dir=cache)
    assert third.resolve_title("Aristotle") == page and len(calls) == 2
    assert json.loads(files[0].read_text(encoding="utf-8"))["text"] == page.text
    # a cache file whose text was changed (its checksum no longer matches) is not believed
    rec = json.loads(files[0].read_text(encoding="utf-8"))
    rec["text"] = "tampered"
    files[0].write_text(json.dumps(rec), encoding="utf-8")
    assert ZimWiki.open(zims["science"], cache_dir=cache).resolve_title("Aristotle") == page and len(calls) == 3
    assert not list(cache.rglob("*.tmp"))
    # the default cache directory is $HARNESS_CACHE_DIR/zim/<uuid>/ (conftest points it at tmp)
    default = open_wiki(zims["science"])
    assert default.cache_dir.parent.name == "zim" and default.cache_dir.name == first.metadata["zim_uuid"]


def test_concurrent_queries_give_the_sequential_answers(wiki):
    queries = ["relativity", "einstein", "academy award", "Scott Derrickson", "android robot", "Aristotle", "xyzzy"]
    expected = {q: (wiki.search(q, 5), wiki.similar_titles(q, 5), wiki.resolve_title(q)) for q in queries}
    errors, mismatches = [], []

    def worker(offset):
        try:
            for i in range(30):
                q = queries[(i + offset) % len(queries)]
                got = (wiki.search(q, 5), wiki.similar_titles(q, 5), wiki.resolve_title(q))
                if got != expected[q]:
                    mismatches.append(q)
        except Exception as exc:  # pragma: no cover - the test fails on any
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and mismatches == []


HOSTILE = [
    "",
    " ",
    "\x00",
    "\ud800",  # a lone surrogate: UTF-8 cannot encode it
    "Einstein\ud800",
    "x" * 100_000,
    "word " * 20_000,
    '"',
    "(((",
    "AND OR NOT",
    "title:foo*",
    "*",
    "🙂🙂🙂",
    "אלברט איינשטיין",
    "e\u0301",
    "#",
    "#section only",
    "../../etc/passwd",
    "A/Albert_Einstein",
]


@pytest.mark.parametrize("name", ["science", "noindex"])
def test_hostile_queries_never_raise(zims, name):
    wiki = open_wiki(zims[name])
    for q in HOSTILE:
        assert wiki.resolve_title(q) is None or wiki.resolve_title(q).title, repr(q[:20])
        assert isinstance(wiki.similar_titles(q, 5), list)
        assert isinstance(wiki.search(q, 5), list)
    assert wiki.resolve_title(None) is None and wiki.search(None) == [] and wiki.similar_titles(None) == []


def test_a_file_that_is_not_a_whole_zim_is_one_line_error(zims, tmp_path):
    data = zims["noindex"].read_bytes()
    for name, content in (
        ("half.zim", data[: len(data) // 2]),
        ("head.zim", data[:40]),
        ("short.zim", data[:-8]),
        ("fake.zim", b"ZIM\x04" + b"\0" * 200),
    ):
        path = tmp_path / name
        path.write_bytes(content)
        with pytest.raises(SnapshotError) as err:
            open_wiki(path)
        assert "\n" not in str(err.value) and str(path) in str(err.value), name
    # a passage index or a retrieve-read run needs a SQLite snapshot: one line saying how to make one
    with pytest.raises(SnapshotError, match="is a ZIM archive.*harness snapshot build --from"):
        Snapshot.open(zims["noindex"])


def _cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_snapshot_info_and_search_read_a_zim(zims, capsys):
    science = str(zims["science"])
    code, out, err = _cli(capsys, "snapshot", "info", science)
    assert code == 0, err
    info = json.loads(out)
    assert info["format"] == "zim" and info["counts"] == {"pages": PAGES + len(REDIRECTS), "redirects": None}
    code, out, err = _cli(capsys, "snapshot", "search", science, "a. einstein", "--json")
    resolved = json.loads(out)["resolved"]
    assert code == 0 and resolved["title"] == "Albert Einstein"
    assert resolved["pageid"] == stable_pageid("Albert Einstein")
    code, out, err = _cli(capsys, "snapshot", "search", science, "academy award winners list", "--json", "--k", "3")
    assert code == 0 and json.loads(out)["resolved"] is None and len(json.loads(out)["similar"]) == 3
    code, out, err = _cli(capsys, "snapshot", "search", science, "photoelectric", "--text", "--json", "--k", "3")
    assert code == 0 and json.loads(out)[0] == {"title": "Albert Einstein", "score": 1.0}
    # no full-text index: the notice on stderr, no matches
    code, out, err = _cli(capsys, "snapshot", "search", str(zims["noindex"]), "photoelectric", "--text")
    assert code == 0 and "no full-text index" in err and "no matches" in err


def test_cli_refuses_a_passage_index_over_a_zim_in_one_line(zims, tmp_path, capsys):
    code, out, err = _cli(capsys, "index", "build", str(zims["noindex"]), "--kind", "bm25")
    assert code == 2 and "is a ZIM archive" in err and len(err.strip().splitlines()) == 1
    assert f"harness snapshot build --from {zims['noindex']} --out SNAP.db" in err
    # retrieve-read reads a passage index: refused before anything runs, not "build the index" (which would fail)
    code, out, err = _cli(capsys, "run", "--model", "scripted/echo", "--dataset", "hotpotqa:dev", "--setting",
                          "retrieve-read", "--snapshot", str(zims["noindex"]), "--out", str(tmp_path / "rr"))  # fmt: skip
    assert code == 2 and "is a ZIM archive" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "rr").exists()


def test_open_book_run_over_a_zim_finishes(zims, tmp_path):
    """A scripted model searches each question's gold titles in the ZIM, then answers."""
    from harness.datasets import load_dataset
    from harness.execution.config import build_config
    from harness.execution.runner import Run
    from harness.models.scripted import register_script, unregister_script

    samples = load_dataset("hotpotqa:dev").samples[:3]
    by_question = {s.question: s for s in samples}
    seen_pages: list[str] = []

    def script(messages, tools, tool_choice, params):
        sample = next(s for q, s in by_question.items() if q in messages[0]["content"])
        done = sum(1 for m in messages if m["role"] == "assistant")
        if done < len(sample.needed_titles):
            return {"content": "", "tool_calls": [{"name": "search", "arguments": {"query": sample.needed_titles[done]}}]}
        seen_pages.extend(m["content"] for m in messages if m["role"] == "tool")
        return str(sample.answer)

    register_script("zim-reader", script)
    try:
        options = {"model": "scripted/zim-reader", "dataset": "hotpotqa:dev", "setting": "open-book", "limit": 3,
                   "out": str(tmp_path / "run"), "cache": False, "snapshot": str(zims["science"]),
                   "metrics": ["em-f1"]}  # fmt: skip
        results = asyncio.run(Run(build_config(options), show_progress=False).execute())
    finally:
        unregister_script("zim-reader")
    assert results.status == "complete"
    assert results.scores.metric_values()["em-f1.em"] == 1.0
    snap = results.snapshot
    assert snap.content_hash.startswith("zim:") and snap.metadata["format"] == "zim"
    assert snap.metadata["scope"] == "source"
    gold = samples[0].needed_titles[0]
    assert any(gold in text for text in seen_pages)  # the tool returned the page read from the ZIM


def test_open_book_run_over_an_archive_without_full_text_index_says_so(zims, tmp_path, capsys):
    code, out, err = _cli(capsys, "run", "--model", "scripted/answer=yes", "--dataset", "hotpotqa:dev", "--setting",
                          "open-book", "--snapshot", str(zims["noindex"]), "--limit", "1", "--metrics", "em-f1",
                          "--no-cache", "--out", str(tmp_path / "ob"))  # fmt: skip
    assert code == 0, err
    assert sum("no full-text index" in line for line in err.splitlines()) == 1


def test_gold_pages_are_counted_without_rendering_a_page(zims, tmp_path, monkeypatch):
    """Counting a run's gold pages happens before the first model call: on a whole Wikipedia it must
    not render thousands of pages. resolve_pageid names the same page as resolve_title, unrendered."""
    from types import SimpleNamespace

    from harness.execution.summary import search_space_info

    calls = []
    real = builders.html_to_markdown
    monkeypatch.setattr(builders, "html_to_markdown", lambda html: calls.append(1) or real(html))
    wiki = ZimWiki.open(zims["science"], cache_dir=tmp_path / "zimcache")
    titles = ["Aristotle", "aristotle", *(t for t, _ in REDIRECTS), "No Such Page At All"]
    ids = [wiki.resolve_pageid(t) for t in titles]
    assert calls == [] and ids[-1] is None and ids[0] == ids[1] is not None
    samples = [SimpleNamespace(needed_titles=titles)]
    space = search_space_info(wiki, samples)
    assert calls == [] and space["gold_pages"] == len({i for i in ids if i is not None})
    # the same pages as the rendering lookup, and get_page knows them afterwards
    for title, pageid in zip(titles, ids):
        page = wiki.resolve_title(title)
        assert (page.pageid if page else None) == pageid
        assert pageid is None or wiki.get_page(pageid) == page
