"""Synthetic Wikipedia-shaped corpora from the real article text in tests/fixtures, for scale tests.

    python benchmarks/synth_wiki.py --pages 100000 --out DIR [--formats jsonl,zim,xml] [--seed 0]
    python benchmarks/synth_wiki.py --extra 100000 --with-hotpot --out hotpot_plus100k.jsonl \
        --snapshot hotpot_plus100k.db

What a corpus is made of (all deterministic for a seed):

- **Sentences.** The pool is every sentence of the real English Wikipedia text in tests/fixtures:
  the 106 articles of the enwiki dump excerpt (wikitext converted by the dump builder's own
  ``wikitext_to_text``), the 10 physics articles and the 991 HotpotQA intro paragraphs, split at
  sentence ends. A page's text is sentences drawn from the pool uniformly with replacement until
  it reaches its length, in paragraphs of 2-6 sentences (blank lines between, as the builders
  store paragraphs); the first paragraph opens with the page's title, as Wikipedia leads do. So
  the vocabulary, word frequencies and sentence lengths are real Wikipedia's (of this sample),
  though a page is not about one topic.
- **Lengths.** Words per page are lognormal with mean 668 words, English Wikipedia's mean
  ("As of 26 April 2024, there are 6,816,939 articles in the English Wikipedia containing over
  4.5 billion words (giving an average of about 668 words per article)",
  https://en.wikipedia.org/wiki/Wikipedia:Size_of_Wikipedia), and sigma 1.0 (our assumption for
  the shape: article lengths are heavy-tailed and close to lognormal in log-scale histograms such
  as https://languagelog.ldc.upenn.edu/nll/?p=25838; sigma 1.0 gives a median of 405 words and a
  95th percentile of 2,090), clipped to 20-20,000 words (Wikipedia's longest article in that post
  was 50,122 words; stubs are a sentence or two).
- **Titles.** Each title copies the shape of a real title from the fixtures (the 991 HotpotQA
  titles, the dump's 205, the 10 physics ones): its word count, its "List of ..." prefix, its
  parenthetical disambiguator ("(film)", "(1973 film)", "(musician)": 13.7 % of the HotpotQA
  titles have one, 15 of 991 are lists), its lower-case words ("of", "the"), with every other word
  replaced by a capitalized word drawn from the pool of real title words. Duplicates are redrawn.
- **Redirects.** 0.93 redirects drawn per page on average (the dump excerpt has 99 main-namespace
  redirects for 106 articles), 0.80 kept (a variant already taken is redrawn at most 4 times): 44 %
  of all titles are redirects, about half as in the excerpt. Each points at a page
  and shaped like real ones: the title without its disambiguator, its initials ("USA"), a word
  dropped, a lower-case variant ("Albert einstein"), a misspelling, the words reordered with a
  comma ("Einstein, Albert").

``--extra N --with-hotpot`` writes one JSONL for the records builder: the HotpotQA distractor
snapshot's pages exactly as the records builder makes them from the HotpotQA file (text = the
sentences joined with ""), then N synthetic pages whose text comes from the dump and physics
articles only (no HotpotQA sentence is copied under another title, so no gold fact is planted on a
distractor page) and whose titles avoid the HotpotQA ones.
"""

from __future__ import annotations

import argparse
import bz2
import html
import json
import math
import os
import random
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

FIXTURES = ROOT / "tests" / "fixtures"
DUMP = FIXTURES / "enwiki-sample-pages-articles.xml.bz2"
HOTPOT = FIXTURES / "hotpot_dev_distractor_first100.json"
PHYSICS = FIXTURES / "wikipedia_en_science_physics_10.json"

MEAN_WORDS = 668.0  # Wikipedia:Size of Wikipedia, 26 April 2024
SIGMA = 1.0  # our assumption (see the module docstring)
MU = math.log(MEAN_WORDS) - SIGMA**2 / 2
MIN_WORDS, MAX_WORDS = 20, 20_000
REDIRECTS_PER_PAGE = 99 / 106  # the enwiki dump excerpt's main namespace
TIMESTAMP = "2024-04-26T00:00:00Z"
# libzim's zstd (Kiwix's archives use it) compressed our HTML at ~0.75 MB/s a core here: 1.7 CPU-hours at
# 1M pages, for a file the harness never writes (users download Kiwix's). So by default the clusters are
# stored uncompressed; --zim-compression zstd makes a Kiwix-like one (reading a page then decompresses its
# cluster; titles, suggestions and the Xapian index are not in compressed clusters either way).
ZIM_COMPRESSION = "none"

_SENT_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])")
_LOWER_WORDS = {"of", "the", "and", "in", "a", "an", "for", "on", "at", "to", "from", "by", "with", "de", "la", "le"}
_PAREN = re.compile(r"^(.*?)\s*(\([^()]*\))$")


@dataclass
class Pools:
    sentences: list[str]
    title_shapes: list[tuple[list[str], str | None]]  # words ("" = replace me), disambiguator
    title_words: list[str]
    real_titles: set[str]


def _split_sentences(text: str) -> list[str]:
    out = []
    for para in re.split(r"\n\s*\n", text):
        para = " ".join(para.split())
        if len(para) < 40 or para.startswith(("*", "|", "#", "=")):
            continue  # headings, list items and table rows are not prose
        for s in _SENT_END.split(para):
            s = s.strip()
            if 20 <= len(s) <= 600 and s[-1] in ".!?\"')":
                out.append(s)
    return out


def load_pools(*, hotpot_text: bool = True) -> Pools:
    from harness.wiki_snapshot.builders.mediawiki_dump import MediaWikiDumpBuilder, wikitext_to_text

    sentences: list[str] = []
    titles: list[str] = []
    for kind, _pid, _rev, title, _ts, payload in MediaWikiDumpBuilder(str(DUMP), workers=1)._raw_pages():
        titles.append(title)
        if kind == "page":
            sentences += _split_sentences(wikitext_to_text(payload))
    for art in json.loads(PHYSICS.read_text(encoding="utf-8")):
        titles.append(art["title"])
        sentences += _split_sentences(art["text"])
    for q in json.loads(HOTPOT.read_text(encoding="utf-8")):
        for title, sents in zip(q["context"]["title"], q["context"]["sentences"]):
            titles.append(title)
            if hotpot_text:
                sentences += [s.strip() for s in sents if len(s.strip()) >= 20]
    sentences = sorted(set(sentences))  # deterministic order whatever the sources' order
    real = sorted(set(titles))
    shapes, words = [], set()
    for t in real:
        m = _PAREN.match(t)
        base, dis = (m.group(1), m.group(2)) if m else (t, None)
        toks = base.split()
        shape = []
        for i, w in enumerate(toks):
            if (i == 0 and w == "List" and toks[1:2] == ["of"]) or (i > 0 and w.lower() in _LOWER_WORDS):
                shape.append(w)
            else:
                shape.append("")
                if w[:1].isupper() and w.isalpha():
                    words.add(w)
        shapes.append((shape, dis))
    return Pools(sentences, shapes, sorted(words), set(real))


class Synth:
    """Draws pages and redirects; every draw comes from one ``random.Random(seed)``."""

    def __init__(self, pools: Pools, seed: int = 0, avoid_titles: set[str] | None = None):
        self.p = pools
        self.rng = random.Random(seed)
        self.taken: set[str] = {t.casefold() for t in (avoid_titles or ())}

    def words(self) -> int:
        return int(min(MAX_WORDS, max(MIN_WORDS, round(self.rng.lognormvariate(MU, SIGMA)))))

    def title(self) -> str:
        rng, p = self.rng, self.p
        while True:
            shape, dis = rng.choice(p.title_shapes)
            t = " ".join(w or rng.choice(p.title_words) for w in shape)
            if dis:
                t = f"{t} {dis}"
            if t.casefold() not in self.taken:
                self.taken.add(t.casefold())
                return t

    def text(self, title: str, n_words: int) -> str:
        rng, pool = self.rng, self.p.sentences
        paras, para, count = [], [f"{title} –"], 0
        size = rng.randint(2, 6)
        while count < n_words:
            s = rng.choice(pool)
            para.append(s)
            count += s.count(" ") + 1
            if len(para) >= size:
                paras.append(" ".join(para))
                para, size = [], rng.randint(2, 6)
        if para:
            paras.append(" ".join(para))
        return "\n\n".join(paras)

    def redirect_titles(self, title: str) -> list[str]:
        rng = self.rng
        n = int(rng.random() < REDIRECTS_PER_PAGE / 2) + int(rng.random() < REDIRECTS_PER_PAGE / 2)
        m = _PAREN.match(title)
        base = m.group(1) if m else title
        words = base.split()
        out: list[str] = []
        for _ in range(4 * n):  # a variant already taken is redrawn (a few tries)
            if len(out) >= n:
                break
            kind = rng.choice(["nodis", "initials", "drop", "lower", "typo", "comma"])
            if kind == "nodis" and m:
                r = base
            elif kind == "initials" and len(words) >= 2:
                r = "".join(w[0].upper() for w in words if w[:1].isalpha())
            elif kind == "drop" and len(words) >= 3:
                i = rng.randrange(len(words))
                r = " ".join(words[:i] + words[i + 1 :])
            elif kind == "comma" and len(words) == 2:
                r = f"{words[1]}, {words[0]}"
            elif kind == "typo":
                spots = [i for i in range(1, len(base) - 1) if base[i].isalpha() and base[i + 1].isalpha()]
                if not spots:
                    continue
                i = rng.choice(spots)
                r = base[:i] + base[i + 1] + base[i] + base[i + 2 :]
            elif kind == "lower" and len(words) >= 2:
                r = words[0] + " " + " ".join(words[1:]).lower()
            else:
                continue
            if len(r) >= 2 and r.casefold() not in self.taken:
                self.taken.add(r.casefold())
                out.append(r)
        return out

    def records(self, n: int, first_pageid: int = 1) -> Iterator[dict]:
        """N pages, each followed by its redirects, as records-builder dicts."""
        for i in range(n):
            title = self.title()
            yield {
                "pageid": first_pageid + i,
                "revid": 10_000_000 + first_pageid + i,
                "timestamp": TIMESTAMP,
                "title": title,
                "text": self.text(title, self.words()),
            }
            for r in self.redirect_titles(title):
                yield {"title": r, "redirect": title}


# writers -------------------------------------------------------------------------------------
def _dumps(rec: dict) -> str:
    return json.dumps(rec, ensure_ascii=False)


def write_jsonl(records, path: Path) -> dict:
    n = nr = 0
    tmp = path.with_name(path.name + ".partial")  # appears under its name only when complete
    with open(tmp, "w", encoding="utf-8") as f:
        for rec in records:
            f.write(_dumps(rec) + "\n")
            if "redirect" in rec:
                nr += 1
            else:
                n += 1
    os.replace(tmp, path)
    return {"pages": n, "redirects": nr}


def page_html(title: str, text: str) -> str:
    """A simple Wikipedia-like article page: <h1> title, a <p> per paragraph."""
    t = html.escape(title)
    body = "".join(f"<p>{html.escape(p)}</p>" for p in text.split("\n\n"))
    return (
        f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>{t}</title></head>'
        f'<body><h1>{t}</h1><div id="mw-content-text">{body}</div></body></html>'
    )


def zim_path(title: str) -> str:
    return title.replace(" ", "_")


def write_zim(records, path: Path, *, index: bool = True, compression: str = ZIM_COMPRESSION) -> dict:
    from libzim.writer import Compression, Creator, Hint, Item, StringProvider

    class Page(Item):
        def __init__(self, title: str, content: str):
            super().__init__()
            self.title, self.content = title, content

        def get_path(self):
            return zim_path(self.title)

        def get_title(self):
            return self.title

        def get_mimetype(self):
            return "text/html"

        def get_contentprovider(self):
            return StringProvider(self.content)

        def get_hints(self):
            return {Hint.FRONT_ARTICLE: True}

    if path.exists():
        path.unlink()
    n = nr = 0
    creator = Creator(str(path)).config_indexing(index, "eng").config_compression(getattr(Compression, compression))
    creator.config_verbose(False)
    with creator:
        first = None
        for rec in records:
            if "redirect" in rec:
                creator.add_redirection(zim_path(rec["title"]), rec["title"], zim_path(rec["redirect"]),
                                        {Hint.FRONT_ARTICLE: True})  # fmt: skip
                nr += 1
            else:
                creator.add_item(Page(rec["title"], page_html(rec["title"], rec["text"])))
                first = first or rec["title"]
                n += 1
        if first:
            creator.set_mainpath(zim_path(first))
        for key, value in (
            ("Title", "Synthetic Wikipedia-shaped corpus"),
            ("Name", "synth_wiki"),
            ("Language", "eng"),
            ("Date", TIMESTAMP[:10]),
            ("Creator", "benchmarks/synth_wiki.py"),
            ("Publisher", "harness"),
            ("Description", "sentences of real Wikipedia text, synthetic titles"),
        ):
            creator.add_metadata(key, value)
    return {"pages": n, "redirects": nr}


def write_dump(records, path: Path) -> dict:
    """A MediaWiki export-0.10 ``pages-articles`` XML dump, bzip2-compressed as Wikimedia's are."""
    n = nr = 0
    esc = html.escape
    tmp = path.with_name(path.name + ".partial")  # appears under its name only when complete
    with bz2.open(tmp, "wt", encoding="utf-8", compresslevel=9) as f:
        f.write(
            '<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/" version="0.10" xml:lang="en">\n'
            "  <siteinfo>\n    <sitename>Wikipedia</sitename>\n    <dbname>enwiki</dbname>\n"
            "    <base>https://en.wikipedia.org/wiki/Main_Page</base>\n    <generator>MediaWiki 1.42</generator>\n"
            '    <namespaces>\n      <namespace key="0" case="first-letter" />\n    </namespaces>\n  </siteinfo>\n'
        )
        pid = 50_000_000
        for rec in records:
            if "redirect" in rec:
                pid += 1
                nr += 1
                page_id, rev_id, title = pid, pid + 1_000_000_000, rec["title"]
                redirect = f'    <redirect title="{esc(rec["redirect"])}" />\n'
                text = f"#REDIRECT [[{rec['redirect']}]]"
            else:
                n += 1
                page_id, rev_id, title, redirect, text = rec["pageid"], rec["revid"], rec["title"], "", rec["text"]
            f.write(
                f"  <page>\n    <title>{esc(title, quote=False)}</title>\n    <ns>0</ns>\n    <id>{page_id}</id>\n"
                f"{redirect}    <revision>\n      <id>{rev_id}</id>\n      <timestamp>{TIMESTAMP}</timestamp>\n"
                f'      <model>wikitext</model>\n      <format>text/x-wiki</format>\n      <text xml:space="preserve">'
                f"{esc(text, quote=False)}</text>\n    </revision>\n  </page>\n"
            )
        f.write("</mediawiki>\n")
    os.replace(tmp, path)
    return {"pages": n, "redirects": nr}


def hotpot_pages() -> Iterator[dict]:
    """The HotpotQA distractor paragraphs as the records builder makes pages of them."""
    seen = set()
    for q in json.loads(HOTPOT.read_text(encoding="utf-8")):
        for title, sents in zip(q["context"]["title"], q["context"]["sentences"]):
            key = " ".join(title.replace("_", " ").split())
            if key in seen:
                continue
            seen.add(key)
            yield {"title": title, "text": "".join(sents)}


def corpus_paths(out: Path, n: int) -> dict[str, Path]:
    tag = f"synth{n}"
    return {"jsonl": out / f"{tag}.jsonl", "zim": out / f"{tag}.zim", "xml": out / f"{tag}-pages-articles.xml.bz2"}


def build_corpus(
    n: int, out: Path, formats=("jsonl", "zim", "xml"), seed: int = 0, log=print, zim_compression: str = ZIM_COMPRESSION
) -> dict:
    """Writes the formats asked for (each from the same seed, so the same pages); returns
    {format: {"path", "seconds", "pages", "redirects", "bytes"}}."""
    out.mkdir(parents=True, exist_ok=True)
    pools = load_pools()
    paths = corpus_paths(out, n)
    writers = {
        "jsonl": write_jsonl,
        "zim": lambda recs, path: write_zim(recs, path, compression=zim_compression),
        "xml": write_dump,
    }
    done = {}
    for fmt in formats:
        started = time.perf_counter()
        stats = writers[fmt](Synth(pools, seed).records(n), paths[fmt])
        secs = time.perf_counter() - started
        done[fmt] = {"path": str(paths[fmt]), "seconds": round(secs, 1), "bytes": paths[fmt].stat().st_size, **stats}
        log(f"  wrote {paths[fmt]} ({done[fmt]['bytes'] / 1e6:,.0f} MB, {stats['pages']:,} pages, "
            f"{stats['redirects']:,} redirects) in {secs:,.0f} s")  # fmt: skip
    return done


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pages", type=int, help="synthetic pages in the corpus")
    ap.add_argument("--extra", type=int, help="write only the JSONL of this many extra pages (see --with-hotpot)")
    ap.add_argument("--with-hotpot", action="store_true", help="--extra: the HotpotQA distractor pages first")
    ap.add_argument("--snapshot", help="--extra: then build this snapshot from the JSONL (harness snapshot build)")
    ap.add_argument("--out", required=True, help="a folder (--pages) or the .jsonl file (--extra)")
    ap.add_argument("--formats", default="jsonl,zim,xml")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--zim-compression", choices=["none", "zstd"], default=ZIM_COMPRESSION)
    args = ap.parse_args()
    if args.extra:
        out = Path(args.out)
        pools = load_pools(hotpot_text=False)
        hot = list(hotpot_pages()) if args.with_hotpot else []
        synth = Synth(pools, args.seed, avoid_titles=pools.real_titles)

        def records():
            yield from hot
            yield from synth.records(args.extra, first_pageid=100_000_000)

        stats = write_jsonl(records(), out)
        print(f"{out}: {len(hot):,} HotpotQA pages + {stats['pages'] - len(hot):,} synthetic pages, "
              f"{stats['redirects']:,} redirects ({out.stat().st_size / 1e6:,.0f} MB)")  # fmt: skip
        if args.snapshot:
            from harness.wiki_snapshot import build_snapshot

            summary = build_snapshot(str(out), args.snapshot, kind="records", overwrite=True, progress=None)
            print(f"{args.snapshot}: {summary['pages']:,} pages in {summary['seconds']:,.0f} s")
        return 0
    if not args.pages:
        ap.error("give --pages N or --extra N")
    build_corpus(args.pages, Path(args.out), tuple(args.formats.split(",")), args.seed,
                 zim_compression=args.zim_compression)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
