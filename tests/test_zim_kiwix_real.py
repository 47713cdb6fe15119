"""A real Kiwix archive read in place: ``wikibooks_be_all_nopic_2017-02`` (Belarusian Wikibooks,
made by Kiwix's MWOffliner in 2017, 66 pages, 6 redirects, no full-text index), in both of libzim's
layouts: the current one (no namespaces) and the old one (articles under ``A/``, no title index).
Origin and licence: tests/fixtures/README.md. Our other ZIM tests write their archives with libzim's
writer; this one checks our reading against what Kiwix's own tools wrote."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("libzim.reader", reason="libzim is not installed (pip install libzim)")

from harness.wiki_snapshot import open_wiki  # noqa: E402
from harness.wiki_snapshot.builders import build_snapshot  # noqa: E402
from harness.wiki_snapshot.store import Snapshot  # noqa: E402
from harness.wiki_snapshot.zim_archive import ZimWiki  # noqa: E402

KIWIX = Path(__file__).parent / "fixtures" / "kiwix"
LAYOUTS = {
    "no namespaces": KIWIX / "wikibooks_be_all_nopic_2017-02.zim",
    "A/ namespace": KIWIX / "wikibooks_be_all_nopic_2017-02.withns.zim",
}


@pytest.fixture(params=list(LAYOUTS), scope="module")
def archive(request):
    return LAYOUTS[request.param]


@pytest.fixture
def wiki(archive):
    w = open_wiki(archive)
    yield w
    w.close()


def test_the_archive_opens_with_kiwix_metadata_and_says_what_it_lacks(wiki, archive):
    assert isinstance(wiki, ZimWiki)
    meta = wiki.metadata
    assert meta["pages"] == 66 and meta["revision_date"] == "2017-02-13" and meta["scope"] == "source"
    assert meta["zim_metadata"]["Publisher"] == "Kiwix" and meta["zim_metadata"]["Language"] == "bel"
    assert meta["full_text_index"] is False and not wiki.full_text_search and wiki.search("кухня") == []
    assert any("no full-text index" in n for n in wiki.notices)
    # the old layout has no title index either, and says what that changes
    assert any("no title index" in n for n in wiki.notices) == (archive.name.endswith(".withns.zim"))


def test_pages_redirects_and_case_resolve(wiki):
    page = wiki.resolve_title("Індыйская кухня")
    assert page.title == "Індыйская кухня"
    # MWOffliner's HTML holds a <head><title>: the text starts at the page's own heading, once
    assert page.text.lstrip().startswith("# Індыйская кухня\n")
    assert "агульная назва кулінарных страў" in page.text and "<" not in page.text
    assert wiki.resolve_title("індыйская кухня") == page  # case folded, as our snapshots resolve
    # Kiwix's redirect entries: an old spelling to the page, the main page's aliases to it
    assert wiki.resolve_title("Вугорская кухня").title == "Венгерская кухня"
    assert wiki.resolve_title("No such page in this archive") is None
    assert wiki.get_page(page.pageid) == page


def test_similar_titles_without_a_full_text_index(wiki):
    similar = wiki.similar_titles("Італьянская мова", 5)
    assert similar[0] == "Італьянская мова" and all(t.startswith("Італьянская мова") for t in similar)
    assert len(similar) == 5


def test_text_equals_what_snapshot_build_stores_from_the_same_archive(archive, tmp_path):
    db = tmp_path / "wikibooks.db"
    build_snapshot(str(archive), db, progress=None, workers=1)
    wiki = open_wiki(archive)
    with Snapshot.open(db) as snap:
        pages = list(snap.pages())
        assert len(pages) == 66 and snap.metadata["redirects"] == 3  # Main Page, Вугорская кухня, Галоўная старонка
        assert snap.resolve_title("favicon") is None  # a file alias is no page
        for page in pages:
            assert wiki.resolve_title(page.title) == page, page.title
        assert wiki.resolve_title("Вугорская кухня") == snap.resolve_title("Вугорская кухня")
    wiki.close()


def test_both_layouts_hold_the_same_text(tmp_path):
    """The two files are one archive in two layouts: every page reads the same in place."""
    new, old = (open_wiki(p) for p in LAYOUTS.values())
    db = tmp_path / "new.db"
    build_snapshot(str(LAYOUTS["no namespaces"]), db, progress=None, workers=1)
    with Snapshot.open(db) as snap:
        for page in snap.pages():
            assert new.resolve_title(page.title) == old.resolve_title(page.title) == page


def test_the_search_tool_falls_back_to_titles_over_it(wiki):
    from harness.tools.search import SearchConfig, SearchTool

    tool = SearchTool(wiki, SearchConfig(), count_tokens=lambda s: len(s) // 4, context_size=8192)
    assert tool.hit_rule == "title"  # no full-text index: redel's rule cannot be applied
    hit = tool("Вугорская кухня", "Што такое вугорская кухня?")
    assert hit.found_title == "Венгерская кухня" and "<title>Венгерская кухня</title>" in hit.text
    miss = tool("Італьянская", "?")
    assert miss.found_title is None and "Італьянская кухня" in miss.similar_titles
