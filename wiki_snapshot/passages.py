"""Corpus-level passages of a snapshot, for the BM25 and dense passage indexes.

Kinds (``--passages``):

- ``words{N}`` (default ``words100``): whole sentences packed greedily until the next one would
  take the passage past N whitespace-separated words, as QAMPARI's ``chunk_wiki.py`` (about 100
  words on sentence boundaries) and DPR-style corpora (TopiOCQA) do. A single sentence longer
  than N words is cut at word boundaries into N-word pieces, so no passage exceeds N words.
  Sentences come from spaCy's rule-based ``sentencizer`` on a blank English pipeline: spaCy is
  already a dependency (the scorer's normalizer), it needs no model file, and its tokenizer's
  exceptions keep "U.S." or "Dr." inside a sentence; about 0.7 MB of text per second per core.
  (QAMPARI used NLTK's Punkt, whose data cannot be installed offline from PyPI.)
- ``chunk{N}`` (``chunk1024``): FanOutQA's character chunker (``harness.wiki_snapshot.chunking``); a passage
  is the page text its chunk was cut from (the chunk less any separator the chunker added).
- ``page``: the whole page as one unit, as QUEST's retrievers rank entity documents.

A passage is stored as (pageid, start, end, ordinal): character offsets into the page text of the
snapshot, so the index holds no second copy of the text. Its id is ``"{pageid}_{ordinal}"`` (like
QAMPARI's ``{page_id}__{chunk_id}``), and the text indexed is ``title + "\\n" + passage`` (QAMPARI
and DPR index the title with the passage).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from functools import lru_cache

import numpy as np

from harness.wiki_snapshot.errors import SnapshotError

KIND_PATTERN = re.compile(r"^(?:words(?P<words>\d+)|chunk(?P<chunk>\d+)|page)$")
PASSAGE_DTYPE = np.dtype([("pageid", "<i8"), ("start", "<i4"), ("end", "<i4"), ("ordinal", "<i4")])
_WORD = re.compile(r"\S+")


def parse_kind(kind: str) -> tuple[str, int | None]:
    """``"words100"`` -> ``("words", 100)``; ``"chunk1024"`` -> ``("chunk", 1024)``; ``"page"``."""
    m = KIND_PATTERN.match(kind or "")
    if not m:
        raise SnapshotError(f"unknown passage kind {kind!r} (use words100, chunk1024 or page; any size: words80)")
    if m["words"]:
        size = int(m["words"])
        if not 10 <= size <= 1000:
            raise SnapshotError(f"passage kind {kind!r}: words per passage must be 10..1000")
        return "words", size
    if m["chunk"]:
        size = int(m["chunk"])
        if not 64 <= size <= 100_000:
            raise SnapshotError(f"passage kind {kind!r}: characters per chunk must be 64..100000")
        return "chunk", size
    return "page", None


@lru_cache(maxsize=1)
def sentencizer():
    import spacy

    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.max_length = 50_000_000  # the rule-based sentencizer needs no parser memory
    return nlp


def splitter_info(kind: str) -> dict:
    name, size = parse_kind(kind)
    if name == "words":
        import spacy

        return {
            "kind": kind,
            "unit": "whitespace-separated words",
            "max_words": size,
            "sentences": "spaCy blank('en') + rule-based sentencizer",
            "spacy_version": spacy.__version__,
        }
    if name == "chunk":
        return {"kind": kind, "unit": "characters", "max_chars": size, "chunker": "FanOutQA chunk_text"}
    return {"kind": kind, "unit": "whole page"}


def _pack_sentences(text: str, sentences: Iterable[tuple[int, int]], max_words: int) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    start = end = None
    words = 0
    for s_start, s_end in sentences:
        n = len(_WORD.findall(text, s_start, s_end))
        if n == 0:
            continue
        if n > max_words:  # an overlong sentence (a list, a table row): cut at word boundaries
            if start is not None:
                spans.append((start, end))
                start, words = None, 0
            matches = list(_WORD.finditer(text, s_start, s_end))
            for i in range(0, len(matches), max_words):
                piece = matches[i : i + max_words]
                spans.append((piece[0].start(), piece[-1].end()))
            continue
        if start is not None and words + n > max_words:
            spans.append((start, end))
            start, words = None, 0
        if start is None:
            start = s_start
        end, words = s_end, words + n
    if start is not None:
        spans.append((start, end))
    return spans


def _at_whitespace(text: str, sentences) -> list[tuple[int, int]]:
    """Sentence spans merged where a boundary falls inside a whitespace-separated word (spaCy may
    split "((anthology)" after its first "("): passages then never cut a word in two."""
    out: list[list[int]] = []
    for start, end in sentences:
        if out and start > 0 and not text[start - 1].isspace():
            out[-1][1] = end
        else:
            out.append([start, end])
    return [(s, e) for s, e in out]


def word_spans_many(texts: list[str], max_words: int) -> list[list[tuple[int, int]]]:
    """``words{N}`` spans of each text (spaCy batched)."""
    nlp = sentencizer()
    out = []
    for text, doc in zip(texts, nlp.pipe(texts, batch_size=64)):
        sentences = _at_whitespace(text, ((s.start_char, s.end_char) for s in doc.sents))
        out.append(_pack_sentences(text, sentences, max_words))
    return out


def chunk_spans(text: str, size: int) -> list[tuple[int, int]]:
    """FanOutQA's chunks as offsets: each chunk found in order as a substring of the page; a page
    where one is not (a chunk holding a separator the chunker added, see ``harness.wiki_snapshot.chunking``)
    takes its spans from ``chunk_text_sources``: each chunk's first to last character of the page."""
    from harness.wiki_snapshot.chunking import chunk_text

    spans, pos = [], 0
    for chunk in chunk_text(text, size):
        if not chunk.strip():
            continue
        at = text.find(chunk, pos)
        if at < 0:
            return _source_spans(text, size)
        spans.append((at, at + len(chunk)))
        pos = at + len(chunk)
    return spans


def _source_spans(text: str, size: int) -> list[tuple[int, int]]:
    # only for the pages the substring search cannot place, so that every page placed before keeps
    # its passages (and their ids) byte for byte
    from harness.wiki_snapshot.chunking import chunk_text_sources

    spans = []
    for chunk, src in chunk_text_sources(text, size):
        real = [i for i in src if i >= 0]
        if not chunk.strip() or not real or not text[real[0] : real[-1] + 1].strip():
            continue
        spans.append((real[0], real[-1] + 1))
    return spans


def spans_many(texts: list[str], kind: str) -> list[list[tuple[int, int]]]:
    name, size = parse_kind(kind)
    if name == "words":
        return word_spans_many(texts, size)
    if name == "chunk":
        return [chunk_spans(t, size) for t in texts]
    return [[(0, len(t))] if t.strip() else [] for t in texts]


def iter_passages(snapshot, kind: str, batch: int = 256) -> Iterator[tuple[np.ndarray, list[str]]]:
    """Batches of (passage records, indexed texts ``title\\npassage``) over the whole snapshot."""
    parse_kind(kind)
    pages = []
    for page in snapshot.pages():
        pages.append(page)
        if len(pages) >= batch:
            yield _batch(pages, kind)
            pages = []
    if pages:
        yield _batch(pages, kind)


def _batch(pages, kind: str) -> tuple[np.ndarray, list[str]]:
    return split_pages([(p.pageid, p.title, p.text) for p in pages], kind)


def split_pages(pages: list[tuple[int, str, str]], kind: str) -> tuple[np.ndarray, list[str]]:
    """(passage records, indexed texts) of ``(pageid, title, text)`` pages: a pure function of
    its pages, so a build may split them in any process."""
    rows, texts = [], []
    for (pageid, title, text), spans in zip(pages, spans_many([p[2] for p in pages], kind)):
        for ordinal, (start, end) in enumerate(spans):
            rows.append((pageid, start, end, ordinal))
            texts.append(f"{title}\n{text[start:end]}")
    return np.array(rows, dtype=PASSAGE_DTYPE), texts


def passage_id(record) -> str:
    return f"{int(record['pageid'])}_{int(record['ordinal'])}"
