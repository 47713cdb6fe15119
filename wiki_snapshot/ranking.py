"""BM25+ ranking of page chunks, giving exactly the order of FanOutQA's baseline retriever.

The reference (``fanoutqa.retrieval.Corpus``, fanoutqa 1.1.1) tokenizes every chunk as
``fanoutqa.norm.normalize(text).split(" ")`` (spaCy lemmas; here the caller's tokenizer, e.g.
``harness.scoring.normalize.tokenize_fanoutqa``), scores with ``rank_bm25.BM25Plus``
(k1=1.5, b=0.75, delta=1) and orders by ``np.argsort(scores)[::-1]``. Ties are common (every chunk
that contains no query term gets the same score), and ``np.argsort`` breaks them in a way that
depends on the exact float values, so equal *orders* need equal *bits*: ``BM25PlusRanker`` does
rank_bm25's float64 arithmetic operation for operation, in the same order:

    idf(t)      = math.log((N + 1) / df(t))
    score(d)    = 0.0, then for each query token t in query order (duplicates included, tokens
                  not in the corpus skipped: rank_bm25 adds an exact 0.0 for them)
                  score(d) += idf(t) * (delta + (tf(t,d) * (k1 + 1)) / (K(d) + tf(t,d)))
    K(d)        = k1 * ((1 - b) + (b * len(d)) / avgdl),   avgdl = total tokens / N
    order       = np.argsort(score)[::-1]

It is faster because the index is built with one C-level dictionary lookup per token and
vectorized numpy for the rest (postings, idf, K, every (term, chunk) contribution), instead of
Python loops, and a query is a gather of the query terms' rows plus one ``np.add.accumulate``
instead of a Python loop per (term, chunk). Callers that search a page repeatedly keep the
ranker (harness.tools.search.SearchTool does, per page). ``bm25s`` (method="bm25+") has the same formula,
but it precomputes ``idf*tfc - idf*delta`` per posting and adds the non-occurrence sum back at
query time, so its floats differ in the last bits and ties can flip (benchmarks/ranking.py
counts how often); it is only a comparison point there, not a dependency.
"""

from __future__ import annotations

import math
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from itertools import chain, count

import numpy as np

from harness.wiki_snapshot.chunking import chunk_text

K1, B, DELTA = 1.5, 0.75, 1.0  # rank_bm25.BM25Plus defaults

# texts -> one token list per text. Injected, not imported: FanOutQA's tokenizer (spaCy lemmas)
# lives in the harness, which this library does not import.
Tokenizer = Callable[[Iterable[str]], list[list[str]]]


class BM25PlusRanker:
    """A BM25+ index over tokenized documents; ``rank`` equals rank_bm25.BM25Plus + np.argsort.

    Built once per corpus (a page's chunks) and queried many times. Scoring needs, per query
    term, its row of contributions to every document; for a small corpus (terms x documents up to
    ``DENSE_MAX`` floats) all rows are made at build time, otherwise each term's row is made on
    first use and kept, so words shared by many queries ("the", "of", the page's subject) cost
    nothing after the first query.
    """

    DENSE_MAX = 1 << 16  # floats (512 KiB): above this, rows are made lazily

    def __init__(self, corpus: Sequence[Sequence[str]], k1: float = K1, b: float = B, delta: float = DELTA):
        if not k1 > 0:
            raise ValueError(f"k1 must be positive (got {k1}); rank_bm25 divides by k1-scaled lengths")
        self.k1, self.b, self.delta = k1, b, delta
        n = self.n_docs = len(corpus)
        self._lock = threading.Lock()
        if n == 0:
            self.vocab: dict[str, int] = {}
            return

        lengths = np.fromiter(map(len, corpus), dtype=np.int64, count=n)
        total = int(lengths.sum())
        # Every token's vocabulary id (first-seen order) in one C-level pass: no Python loop per token.
        vocab = defaultdict(count().__next__)
        ids = np.fromiter(map(vocab.__getitem__, chain.from_iterable(corpus)), dtype=np.int64, count=total)
        vocab.default_factory = None  # from now on an unknown term is a KeyError, never an insertion
        self.vocab = vocab
        n_terms = len(vocab)

        # Postings (term, doc, tf), sorted by term then doc, from the sorted (term, doc) keys.
        keys = np.sort(ids * n + np.repeat(np.arange(n, dtype=np.int64), lengths))
        first = np.flatnonzero(np.concatenate(([True], keys[1:] != keys[:-1])))
        tf = np.empty(len(first))  # counts, exact in float64
        np.subtract(first[1:], first[:-1], out=tf[:-1])
        tf[-1] = total - first[-1]
        term, doc = np.divmod(keys[first], n)
        df = np.bincount(term, minlength=n_terms)

        # The same float64 operations as rank_bm25, element by element:
        # idf = math.log((N + 1) / df)  (math.log, not np.log: the two may differ in the last bit)
        idf_by_df = np.array([0.0] + [math.log((n + 1) / d) for d in range(1, n + 1)])
        idf = idf_by_df[df]
        avgdl = total / n  # Python int / int, like rank_bm25's num_doc / corpus_size
        K = k1 * (1 - b + b * lengths / avgdl)
        # contribution of a term to a document that contains it tf times ...
        post_c = idf[term] * (delta + (tf * (k1 + 1)) / (K[doc] + tf))
        # ... and to one that does not: idf * (delta + (0 * (k1 + 1)) / (K + 0)) == idf * (delta + 0.0)
        absent = idf * (delta + 0.0)

        self._dense = n_terms * n <= self.DENSE_MAX
        if self._dense:  # every row now; a term's row index is its id
            self._R = np.repeat(absent, n).reshape(n_terms, n)
            self._R[term, doc] = post_c
        else:  # rows on demand, appended to a growing matrix; _slot maps term id -> row index
            self._R = np.empty((min(64, n_terms), n))
            self._slot: dict[int, int] = {}
            self._indptr = np.concatenate(([0], np.cumsum(df)))
            self._post_doc, self._post_c, self._absent = doc, post_c, absent

    def params(self) -> dict:
        return {"k1": self.k1, "b": self.b, "delta": self.delta}

    def _add_rows(self, terms: list[int]) -> None:
        """Rows of contributions for terms not queried before (lazy mode; caller holds the lock)."""
        n, used, k = self.n_docs, len(self._slot), len(terms)
        if used + k > len(self._R):
            grown = np.empty((max(used + k, 2 * len(self._R)), n))
            grown[:used] = self._R[:used]
            self._R = grown
        ts = np.array(terms, dtype=np.int64)
        starts = self._indptr[ts]
        counts = self._indptr[ts + 1] - starts
        block = self._R[used : used + k]
        block[:] = self._absent[ts][:, None]
        pos = np.arange(int(counts.sum())) + np.repeat(starts - (np.cumsum(counts) - counts), counts)
        block[np.repeat(np.arange(k), counts), self._post_doc[pos]] = self._post_c[pos]
        self._slot.update(zip(terms, range(used, used + k)))

    def scores(self, query_tokens: Sequence[str]) -> np.ndarray:
        """float64 scores, bit for bit those of ``rank_bm25.BM25Plus(corpus).get_scores(query_tokens)``.

        rank_bm25 starts from zeros and adds one row per query token in query order, duplicates
        included (``np.add.accumulate`` adds strictly in that order); a token absent from the
        corpus adds an exact 0.0 there, so it is skipped here.
        """
        vocab = self.vocab
        rows = [vocab[t] for t in query_tokens if t in vocab]
        if not rows:
            return np.zeros(self.n_docs)
        if self._dense:
            R = self._R
        else:
            with self._lock:
                slot = self._slot
                missing = [t for t in dict.fromkeys(rows) if t not in slot]
                if missing:
                    self._add_rows(missing)
                rows = [slot[t] for t in rows]
                R = self._R
        if len(rows) == 1:
            return R[rows[0]].copy()
        return np.add.accumulate(R[rows], axis=0)[-1]

    def rank(self, query_tokens: Sequence[str]) -> list[int]:
        """Document indices best first: ``np.argsort(scores)[::-1]``, so ties fall as in the reference."""
        return np.argsort(self.scores(query_tokens))[::-1].tolist()


def rank_documents(
    docs: Sequence[tuple[str, str]],
    query: str,
    chunk_size: int = 1024,
    k1: float = K1,
    b: float = B,
    delta: float = DELTA,
    *,
    tokenize: Tokenizer,
) -> list[tuple[str, str]]:
    """(title, chunk) for every chunk of every doc, best first for ``query``, chunks and query
    tokenized with ``tokenize``.

    With ``tokenize=harness.scoring.normalize.tokenize_fanoutqa``, the order of
    ``fanoutqa.retrieval.Corpus(docs, doc_len=chunk_size).best(query)`` when the Corpus is given
    the same (title, text) documents (the evidence-provided setting).
    """
    chunks = [(title, chunk) for title, text in docs for chunk in chunk_text(text, chunk_size)]
    if not chunks:
        return []
    ranker = BM25PlusRanker(tokenize(c for _, c in chunks), k1=k1, b=b, delta=delta)
    return [chunks[i] for i in ranker.rank(tokenize([query])[0])]


__all__ = ["BM25PlusRanker", "Tokenizer", "rank_documents"]
