"""Real ZIM archives for the tests, written with libzim's own writer from the real Wikipedia text in
tests/fixtures: the 10 physics articles (wikipedia_en_science_physics_10.json) and the 991 HotpotQA
distractor paragraphs (hotpot_dev_distractor_first100.json), each wrapped in Wikipedia-like HTML
(<title>, an h1, h2 sections, an infobox table, links), with redirects as Kiwix archives have them
(paths are titles with underscores). About half a second per archive."""

from __future__ import annotations

import html
import json
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "fixtures"
PHYSICS = FIXTURES / "wikipedia_en_science_physics_10.json"
HOTPOT = FIXTURES / "hotpot_dev_distractor_first100.json"

# (redirect title, target title): one hop, a chain of two, a redirect to a redirect of a
# different case, and one to a page of the HotpotQA set.
REDIRECTS = [
    ("Einstein", "Albert Einstein"),
    ("A. Einstein", "Einstein"),
    ("Oscars", "Academy Awards"),
    ("The Oscars", "Oscars"),
    ("Android robot", "Android (robot)"),
]
DATE = "2023-11-20"


def zim_path(title: str) -> str:
    return title.replace(" ", "_")


def article_html(title: str, paragraphs: list[str], links: list[str]) -> str:
    """A Wikipedia-like page: a title, a heading, an infobox table, sections of paragraphs, links."""
    esc = html.escape
    sections = []
    for n, chunk in enumerate(_chunks(paragraphs, 4)):
        head = "" if n == 0 else f"<h2>Section {n}</h2>"
        sections.append(head + "".join(f"<p>{esc(p)}</p>" for p in chunk))
    rows = "".join(f"<tr><th>Related</th><td><a href=\"./{esc(zim_path(t))}\">{esc(t)}</a></td></tr>" for t in links)
    return (
        f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>{esc(title)}</title>"
        f"<style>.infobox {{float: right}}</style></head><body>"
        f"<h1>{esc(title)}</h1><div class=\"mw-parser-output\">"
        f"<table class=\"infobox\"><tr><th colspan=\"2\">{esc(title)}</th></tr>{rows}</table>"
        + "".join(sections)
        + "</div><script>var x = 1;</script></body></html>"
    )


def _chunks(items, n):
    for i in range(0, len(items), n):
        yield items[i : i + n]


def fixture_articles(hotpot: bool = True, questions: int | None = None) -> dict[str, list[str]]:
    """title -> paragraphs: the physics articles, then (if ``hotpot``) every distinct HotpotQA
    context title of the first ``questions`` questions (default all 100) with its sentences as one
    paragraph (the first occurrence of a title)."""
    out: dict[str, list[str]] = {}
    for a in json.loads(PHYSICS.read_text(encoding="utf-8")):
        out[a["title"]] = [p for p in a["text"].split("\n") if p.strip()]
    if hotpot:
        for q in json.loads(HOTPOT.read_text(encoding="utf-8"))[:questions]:
            for title, sentences in zip(q["context"]["title"], q["context"]["sentences"]):
                if title not in out:
                    out[title] = ["".join(sentences)]
    return out


def write_zim(path: Path, *, indexing: bool = True, hotpot: bool = True, questions: int | None = None) -> dict[str, str]:
    """Write a ZIM at ``path``; returns title -> the HTML stored for it."""
    from libzim import writer

    class Item(writer.Item):
        def __init__(self, path, title, mimetype, content):
            super().__init__()
            self._a = (path, title, mimetype, content)

        def get_path(self):
            return self._a[0]

        def get_title(self):
            return self._a[1]

        def get_mimetype(self):
            return self._a[2]

        def get_contentprovider(self):
            return writer.StringProvider(self._a[3])

        def get_hints(self):
            return {writer.Hint.FRONT_ARTICLE: self._a[2] == "text/html"}

    articles = fixture_articles(hotpot, questions)
    titles = list(articles)
    htmls: dict[str, str] = {}
    with writer.Creator(str(path)).config_indexing(indexing, "eng") as creator:
        creator.set_mainpath(zim_path(titles[0]))
        for i, (title, paragraphs) in enumerate(articles.items()):
            links = [titles[(i + 1) % len(titles)], titles[(i + 7) % len(titles)]]
            htmls[title] = article_html(title, paragraphs, links)
            creator.add_item(Item(zim_path(title), title, "text/html", htmls[title]))
        creator.add_item(Item("style.css", "style.css", "text/css", "p { margin: 0 }"))
        for source, target in REDIRECTS:
            creator.add_redirection(zim_path(source), source, zim_path(target), {writer.Hint.FRONT_ARTICLE: True})
        for key, value in (
            ("Title", "Physics and HotpotQA sample" if hotpot else "Physics sample"),
            ("Name", "tests_en_sample"),
            ("Date", DATE),
            ("Language", "eng"),
            ("Flavour", "nopic"),
            ("Description", "Real Wikipedia text from tests/fixtures"),
        ):
            creator.add_metadata(key, value)
    return htmls
