"""BM25 passage index with ``bm25s`` (sparse precomputed scores, saved with numpy, memory-mapped).

Defaults follow the BM25 runs of the seed papers, which use Pyserini (Lucene): QAMPARI's
``models/retrievers/BM25/simple_index.py`` and TopiOCQA's BM25 baseline search a Lucene index with
Pyserini's default ``k1=0.9, b=0.4``, Lucene's idf ``log(1 + (N - df + 0.5) / (df + 0.5))``, an
English stop list and the Porter stemmer. Here: ``bm25s`` ``method="lucene"`` with those
parameters, its default tokenizer (lower-cased, ``\\b\\w\\w+\\b``, bm25s's English stop words) and
PyStemmer's ``porter`` algorithm (Lucene's ``PorterStemFilter`` is the original Porter stemmer).
Scores are float32, as Lucene's. Every option is recorded in ``meta.json`` and can be changed at
build time (``harness index build --bm25-method/--bm25-k1/--bm25-b/--stemmer/--stopwords``).
QUEST's BM25 (gensim's Okapi BM25 over whole documents) corresponds to ``--passages page
--bm25-method robertson --bm25-k1 1.5 --bm25-b 0.75``.

A query's ranking is bm25s's scores for every passage, then our ``top_k`` (ties in passage order):
bm25s's own top-k selection may order equal scores either way. Only passages that contain a query
term are returned (as Lucene does), so a query with no indexed term returns none.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from wiki_snapshot.errors import SnapshotError
from wiki_snapshot.retrieval import Hit, Retriever, live_progress, top_k

DEFAULTS = {"method": "lucene", "k1": 0.9, "b": 0.4, "delta": 0.5, "stemmer": "porter", "stopwords": "en"}
METHODS = ("lucene", "robertson", "atire", "bm25l", "bm25+")
STEMMERS = ("porter", "english", "none")  # PyStemmer algorithms (english = Porter2/Snowball)
TOKEN_PATTERN = r"(?u)\b\w\w+\b"  # bm25s's default (scikit-learn's)


def _require_bm25s():
    try:
        import bm25s
    except ImportError:
        raise SnapshotError("the bm25 index needs bm25s: pip install 'bm25s>=0.3,<0.4' PyStemmer") from None
    logging.getLogger("bm25s").setLevel(logging.WARNING)  # it logs every build step at DEBUG to stderr
    return bm25s


def make_stemmer(name: str):
    if name == "none":
        return None
    try:
        import Stemmer
    except ImportError:
        raise SnapshotError("stemming needs PyStemmer: pip install PyStemmer (or --stemmer none)") from None
    return Stemmer.Stemmer(name).stemWords


def resolve_options(options: dict[str, Any]) -> dict[str, Any]:
    opts = {**DEFAULTS, **{k: v for k, v in options.items() if k in DEFAULTS and v is not None}}
    if opts["method"] not in METHODS:
        raise SnapshotError(f"unknown BM25 method {opts['method']!r} (known: {', '.join(METHODS)})")
    if opts["stemmer"] not in STEMMERS:
        raise SnapshotError(f"unknown stemmer {opts['stemmer']!r} (known: {', '.join(STEMMERS)})")
    if opts["stopwords"] not in ("en", "none"):
        raise SnapshotError(f"--stopwords must be en or none, not {opts['stopwords']!r}")
    if not float(opts["k1"]) > 0 or not 0 <= float(opts["b"]) <= 1:
        raise SnapshotError("BM25 needs k1 > 0 and 0 <= b <= 1")
    return opts


def tokenize(texts: list[str], opts: dict[str, Any], return_ids: bool):
    """bm25s's tokenizer with the index's options (the same for passages and queries)."""
    bm25s = _require_bm25s()
    return bm25s.tokenize(
        texts,
        lower=True,
        token_pattern=TOKEN_PATTERN,
        stopwords=None if opts["stopwords"] == "none" else opts["stopwords"],
        stemmer=make_stemmer(opts["stemmer"]),
        return_ids=return_ids,
        show_progress=False,
    )


def tokenizer_info(opts: dict[str, Any]) -> dict[str, Any]:
    info = {"library": "bm25s.tokenize", "lower": True, "pattern": TOKEN_PATTERN, "stopwords": opts["stopwords"]}
    if opts["stemmer"] != "none":
        import Stemmer

        info["stemmer"] = f"PyStemmer {Stemmer.version()} {opts['stemmer']}"
    else:
        info["stemmer"] = "none"
    return info


def build_bm25(tmp: Path, texts: list[str], options: dict[str, Any], progress: TextIO | None) -> dict[str, Any]:
    bm25s = _require_bm25s()
    opts = resolve_options(options)
    started = time.perf_counter()
    tokens = tokenize(texts, opts, return_ids=True)
    tokenized = time.perf_counter()
    live_progress(progress, f"tokenized {len(texts):,} passages in {tokenized - started:.1f} s; indexing")
    live_progress(progress, None)
    model = bm25s.BM25(k1=float(opts["k1"]), b=float(opts["b"]), delta=float(opts["delta"]), method=opts["method"])
    model.index(tokens, show_progress=False)
    indexed = time.perf_counter()
    model.save(str(tmp / "bm25"), show_progress=False)
    saved = time.perf_counter()
    n_tokens = int(sum(len(ids) for ids in tokens.ids))
    return {
        "meta": {
            "bm25": {
                "library": f"bm25s {bm25s.__version__}",
                "method": opts["method"],
                "k1": float(opts["k1"]),
                "b": float(opts["b"]),
                "delta": float(opts["delta"]),
                "dtype": "float32",
                "tokenizer": tokenizer_info(opts),
                "options": opts,
                "vocabulary": len(tokens.vocab),
                "tokens": n_tokens,
            }
        },
        "timings": {
            "tokenize_s": round(tokenized - started, 3),
            "index_s": round(indexed - tokenized, 3),
            "save_s": round(saved - indexed, 3),
        },
    }


class BM25Retriever(Retriever):
    kind = "bm25"

    def __init__(self, directory: Path, meta: dict[str, Any], snapshot):
        super().__init__(directory, meta, snapshot)
        bm25s = _require_bm25s()
        self.opts = resolve_options(meta["bm25"]["options"])
        self.model = bm25s.BM25.load(str(directory / "bm25"), mmap=True, load_vocab=True)

    def query_token_ids(self, query: str) -> list[int]:
        tokens = tokenize([query], self.opts, return_ids=False)[0]
        return self.model.get_tokens_ids(tokens)

    def scores(self, query: str) -> np.ndarray | None:
        """bm25s's score of every passage for ``query`` (None: no query term is in the index)."""
        ids = self.query_token_ids(query)
        if not ids:
            return None
        return self.model.get_scores_from_ids(ids)

    def search_many(self, queries: list[str], k: int) -> list[list[Hit]]:
        out = []
        for query in queries:
            scores = self.scores(query)
            if scores is None:
                out.append([])
                continue
            idx, best = top_k(scores, k)
            # only passages holding a query term, as Lucene returns them (not a tail of zeros)
            out.append([self.passages.hit(i, s) for i, s in zip(idx, best) if s > 0])
        return out
