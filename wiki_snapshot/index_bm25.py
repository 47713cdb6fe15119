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

A query's ranking is bm25s's scores (``BM25.get_scores_from_ids``), then our ``top_k`` (ties in
passage order): bm25s's own top-k selection may order equal scores either way. Only passages with a
score above 0 are returned (as Lucene returns only passages holding a query term), so a query with
no indexed term returns none. bm25s scores every passage per query (a dense vector, then a
partition over it); ``query_top_k`` computes the same floats over the query terms' postings only.
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
import time
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from harness.wiki_snapshot.errors import SnapshotError
from harness.wiki_snapshot.retriever import UNREADABLE, Hit, Retriever, first_line, live_progress, top_k, top_k_of
from harness.wiki_snapshot.text import json_bytes, plain_text

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


def tokenize_unit(texts: list[str], opts: dict[str, Any]) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Worker: a unit's passages as (its terms in order of first appearance, every passage's term
    ids into that list, flat int32, and each passage's length). Tokenizing a passage depends on
    that passage only (lower-case, split, stop words, Porter stems), so units are independent."""
    tokens = tokenize(texts, opts, return_ids=True)
    lengths = np.fromiter((len(ids) for ids in tokens.ids), dtype=np.int32, count=len(tokens.ids))
    flat = np.fromiter((i for ids in tokens.ids for i in ids), dtype=np.int32, count=int(lengths.sum()))
    # bm25s numbers terms in set order (it changes with PYTHONHASHSEED): renumber by first appearance
    by_id = {i: term for term, i in tokens.vocab.items()}
    seen, first = np.unique(flat, return_index=True)
    order = seen[np.argsort(first, kind="stable")]
    lut = np.empty(len(by_id) + 1, dtype=np.int32)
    lut[order] = np.arange(len(order), dtype=np.int32)
    return [by_id[int(i)] for i in order], lut[flat] if len(flat) else flat, lengths


# ---- the score matrix, built out of core ----------------------------------------------------
#
# bm25s's ``BM25.build_index_from_ids`` (bm25s 0.3.16, bm25s/__init__.py and bm25s/scoring.py) holds
# every (passage, term) pair three times over in RAM (COO arrays, a sort key, the sorted copies):
# 2 GB at 881k passages. We compute the same CSC matrix (a column per term, its passages in
# ascending order) from the token ids on disk, in memory O(vocabulary + block):
#   pass 1, per block of passages: each (term, passage) pair and its tf, sorted by term then
#     passage, appended to a run on disk; document frequencies summed (hence indptr);
#   merge, per range of terms: each run's slice for those terms (runs are in passage order, so a
#     term's entries meet in ascending passage order), scored and written to the .npy files in order.
# Values are bm25s's bit for bit (tests/test_bm25_out_of_core.py checks all five methods): the
# same formulas evaluated in the same order with the same float types (idf with math.log in
# float64, rounded to float32; tf components in float64; scores rounded to float32).

BLOCK_TOKENS = 1 << 21  # pass 1: token ids per block (its working set is ~40 bytes a token)
BLOCK_DOCS = 1 << 16  # ... and at most this many passages per block
MERGE_PAIRS = 1 << 21  # merge: (term, passage) pairs per range of terms (~40 bytes a pair)
_SAMPLE = 4096  # every 4096th term id of each run stays in memory, to find a term in the run

# bm25s meets a passage's float64 scalar (its length norm, an np.float64) with the float32 tf
# array: NumPy >= 2 (NEP 50) computes that in float64, NumPy 1.x in float32. Our per-pair arrays
# take the type that combination has here, so the arithmetic matches bm25s under either.
_DOC_FLOAT = (np.float64(1.0) + np.ones(1, dtype=np.float32)).dtype


def _idf(method: str, df: int, n: int) -> float:
    """bm25s's idf per method (Kamphuis et al., ECIR 2020), in Python floats as bm25s computes it."""
    if method == "robertson":
        return math.log(max((n - df + 0.5) / (df + 0.5), 1))  # negatives clipped to 0, as bm25s
    if method == "lucene":
        return math.log(1 + (n - df + 0.5) / (df + 0.5))
    if method == "atire":
        return math.log(n / df)
    if method == "bm25l":
        return math.log((n + 1) / (df + 0.5))
    return math.log((n + 1) / df)  # bm25+


def _tfc(method: str, tf, norm, k1: float, delta: float, doc=lambda x: x):
    """bm25s's term-frequency component: ``tf`` the float32 counts, ``norm`` the length norm
    ``(1 - b) + b * l_d / l_avg`` (float64); ``doc`` gives a per-passage float64 the type bm25s's
    np.float64 scalar takes next to a float32 array. Same operations, same order as bm25s."""
    if method in ("robertson", "lucene"):
        return tf / (doc(k1 * norm) + tf)
    if method == "atire":
        return (tf * (k1 + 1)) / (tf + doc(k1 * norm))
    if method == "bm25l":
        c = tf / doc(norm)
        return ((k1 + 1) * (c + delta)) / (k1 + c + delta)
    return ((k1 + 1) * tf) / (doc(k1 * norm) + tf) + delta  # bm25+


def _pread(fd: int, dtype, start: int, count: int) -> np.ndarray:
    """``count`` items of ``dtype`` from item ``start`` of a raw file (read, not mapped: a memory
    map would keep every page it touched resident)."""
    item = np.dtype(dtype).itemsize
    want, offset, parts = count * item, start * item, []
    while want > 0:
        chunk = os.pread(fd, min(want, 1 << 30), offset)
        if not chunk:
            raise SnapshotError(f"bm25 build: a work file ended early ({want} bytes missing)")
        parts.append(chunk)
        want -= len(chunk)
        offset += len(chunk)
    return np.frombuffer(b"".join(parts) if len(parts) != 1 else parts[0], dtype=dtype)


def _npy_writer(path: Path, dtype, length: int):
    """An open .npy file whose header says ``length`` items of ``dtype``, the data to be appended:
    the header np.save writes for such an array (format 1.0, keys sorted)."""
    f = open(path, "wb")
    np.lib.format.write_array_header_1_0(
        f, {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False, "shape": (length,)}
    )
    return f


class _Runs:
    """Pass 1's output: runs of (term, passage, tf, passage length), int32 columns in four files,
    each run sorted by term then passage, runs in passage order."""

    COLUMNS = ("term", "doc", "tf", "len")

    def __init__(self, work: Path):
        self.paths = [work / f"bm25-run-{c}.i32.tmp" for c in self.COLUMNS]
        self.files = [open(p, "wb") for p in self.paths]
        self.starts: list[int] = []  # each run's first row
        self.samples: list[np.ndarray] = []  # its term ids at rows 0, _SAMPLE, 2 * _SAMPLE, ...
        self.rows = 0

    def append(self, *columns: np.ndarray) -> None:
        for f, col in zip(self.files, columns):
            f.write(col.astype(np.int32, copy=False).tobytes())
        self.starts.append(self.rows)
        self.samples.append(columns[0][::_SAMPLE].copy())
        self.rows += len(columns[0])

    def open_for_reading(self) -> None:
        for f in self.files:
            f.close()
        self.fds = [os.open(p, os.O_RDONLY) for p in self.paths]
        self.ends = self.starts[1:] + [self.rows]
        self.cursor = list(self.starts)  # each run's first row not yet merged

    def until(self, r: int, term: int) -> int:
        """The first row of run ``r`` whose term is ``term`` or more (its end when none is)."""
        sample, lo = self.samples[r], self.starts[r]
        j = int(np.searchsorted(sample, term, side="left"))
        if j == 0:
            return lo
        first = lo + (j - 1) * _SAMPLE  # the term there is below ``term``; the answer lies after it
        last = min(lo + j * _SAMPLE, self.ends[r])
        window = _pread(self.fds[0], np.int32, first, last - first)
        return first + int(np.searchsorted(window, term, side="left"))

    def take(self, r: int, end: int) -> tuple[np.ndarray, ...]:
        """Run ``r``'s rows from its cursor to ``end``, every column; moves the cursor there."""
        start, self.cursor[r] = self.cursor[r], end
        return tuple(_pread(fd, np.int32, start, end - start) for fd in self.fds)

    def close(self) -> None:
        for f in self.files:
            f.close()
        for fd in getattr(self, "fds", []):
            os.close(fd)
        self.fds = []
        for p in self.paths:
            p.unlink(missing_ok=True)


def _blocks(len_fd: int, n_docs: int, block_tokens: int, block_docs: int):
    """(first passage, the block's lengths, its first token) for blocks of at most ``block_docs``
    passages and ``block_tokens`` tokens (at least one passage), in passage order."""
    token = 0
    for d0 in range(0, n_docs, block_docs):
        lengths = _pread(len_fd, np.int32, d0, min(block_docs, n_docs - d0))
        ends = np.cumsum(lengths, dtype=np.int64)
        start = 0
        while start < len(lengths):
            before = int(ends[start - 1]) if start else 0
            stop = max(int(np.searchsorted(ends, before + block_tokens, side="right")), start + 1)
            yield d0 + start, lengths[start:stop], token + before
            start = stop
        token += int(ends[-1])


def write_bm25_matrix(
    ids_path: Path,
    lengths_path: Path,
    n_terms: int,
    opts: dict[str, Any],
    out: Path,
    *,
    block_tokens: int = BLOCK_TOKENS,
    block_docs: int = BLOCK_DOCS,
    merge_pairs: int = MERGE_PAIRS,
    progress: TextIO | None = None,
) -> int:
    """Write into ``out`` the score arrays bm25s's ``build_index_from_ids`` followed by ``save``
    writes for passages whose term ids (0 .. n_terms - 1, int32, concatenated) are in ``ids_path``
    and whose lengths are in ``lengths_path``: data/indices/indptr.csc.index.npy and, for bm25l and
    bm25+, nonoccurrence_array.index.npy. Work files go to ``out`` and are removed. Returns the
    number of passages."""
    method, k1, b, delta = opts["method"], float(opts["k1"]), float(opts["b"]), float(opts["delta"])
    out.mkdir(parents=True, exist_ok=True)
    n_docs = lengths_path.stat().st_size // 4
    ids_fd, len_fd = os.open(ids_path, os.O_RDONLY), os.open(lengths_path, os.O_RDONLY)
    runs = _Runs(out)
    try:
        # pass 1: per block, each passage's (term, tf); document frequencies
        df = np.zeros(n_terms, dtype=np.int64)
        total = 0
        for d0, lengths, t0 in _blocks(len_fd, n_docs, block_tokens, block_docs):
            nd, n_tok = len(lengths), int(lengths.sum(dtype=np.int64))
            ids = _pread(ids_fd, np.int32, t0, n_tok).astype(np.int64)
            local = np.repeat(np.arange(nd, dtype=np.int64), lengths)
            keys, tf = np.unique(ids * nd + local, return_counts=True)  # sorted by term, then passage
            terms, local = np.divmod(keys, nd)
            runs.append(terms, local + d0, tf, lengths[local])
            df += np.bincount(terms, minlength=n_terms)
            total += n_tok
            live_progress(progress, f"indexing: {d0 + nd:,} of {n_docs:,} passages")
        live_progress(progress, None)
        runs.open_for_reading()

        # bm25s: avg_doc_len = np.array(lengths).mean(), a float64 (a sum of integers below 2**53
        # is exact in any order, so total / n is that mean to the bit)
        l_avg = np.float64(total) / n_docs if n_docs else np.float64("nan")
        indptr = np.zeros(n_terms + 1, dtype=np.int64)
        np.cumsum(df, out=indptr[1:])
        nnz = int(indptr[-1])
        # idf per distinct document frequency, math.log in float64 as bm25s, stored as float32
        values, inverse = np.unique(df, return_inverse=True)
        idf64 = np.array([_idf(method, int(v), n_docs) if v else 0.0 for v in values], dtype=np.float64)[inverse]
        idf = idf64.astype(np.float32)
        nonocc = None
        if method in ("bm25l", "bm25+"):
            # bm25s: the score of a term absent from a passage of average length, subtracted from
            # every stored score and saved beside them
            tfc0 = _tfc(method, 0, (1 - b) + b * l_avg / l_avg, k1, delta)
            nonocc = np.where(df != 0, idf64 * tfc0, 0.0).astype(np.float32)

        def scores(terms, tf, lengths) -> np.ndarray:
            norm = (1 - b) + b * lengths / l_avg
            tfc = _tfc(method, tf.astype(np.float32), norm, k1, delta, lambda x: x.astype(_DOC_FLOAT))
            s = idf[terms] * tfc
            if nonocc is not None:
                s -= nonocc[terms]
            return s.astype(np.float32)

        # merge: ranges of terms in order; within a term, runs in order (= passages in order)
        data = _npy_writer(out / "data.csc.index.npy", np.float32, nnz)
        indices = _npy_writer(out / "indices.csc.index.npy", np.int32, nnz)
        try:
            lo = 0
            while lo < n_terms:
                # the widest range from lo holding at most merge_pairs pairs (one term at least)
                hi = max(int(np.searchsorted(indptr, indptr[lo] + merge_pairs, side="right")) - 1, lo + 1)
                hi = min(hi, n_terms)
                base, size = int(indptr[lo]), int(indptr[hi] - indptr[lo])
                if hi == lo + 1:  # one term: its slice of each run is already in passage order
                    for r in range(len(runs.starts)):
                        end = runs.until(r, hi)
                        if end == runs.cursor[r]:
                            continue
                        terms, docs, tf, lengths = runs.take(r, end)
                        data.write(scores(terms, tf, lengths).tobytes())
                        indices.write(docs.tobytes())
                else:
                    buf_data, buf_idx = np.empty(size, dtype=np.float32), np.empty(size, dtype=np.int32)
                    cursor = indptr[lo:hi] - base  # where each term's next entry goes in the buffers
                    for r in range(len(runs.starts)):
                        end = runs.until(r, hi)
                        if end == runs.cursor[r]:
                            continue
                        terms, docs, tf, lengths = runs.take(r, end)
                        first = np.flatnonzero(np.r_[True, terms[1:] != terms[:-1]])
                        counts = np.diff(np.r_[first, len(terms)])
                        rank = np.arange(len(terms)) - np.repeat(first, counts)
                        at = np.repeat(cursor[terms[first] - lo], counts) + rank
                        buf_data[at] = scores(terms, tf, lengths)
                        buf_idx[at] = docs
                        cursor[terms[first] - lo] += counts
                    data.write(buf_data.tobytes())
                    indices.write(buf_idx.tobytes())
                lo = hi
                live_progress(progress, f"writing scores: {int(indptr[lo]):,} of {nnz:,}")
            live_progress(progress, None)
        finally:
            data.close()
            indices.close()
        if any(c != e for c, e in zip(runs.cursor, runs.ends)):
            raise SnapshotError("bm25 build: the merge did not consume every pair (a bug)")
        np.save(out / "indptr.csc.index.npy", indptr)
        if nonocc is not None:
            np.save(out / "nonoccurrence_array.index.npy", nonocc)
        return n_docs
    finally:
        runs.close()
        os.close(ids_fd)
        os.close(len_fd)


class BM25Build:
    """Streams the workers' token ids to disk with one global vocabulary (terms numbered by first
    appearance in passage order), then builds bm25s's score matrix from those files, out of core."""

    start_method = "fork"  # pure Python workers: fork inherits spaCy, bm25s and PyStemmer already loaded
    worker_init = None
    verb = "splitting and tokenizing"
    work_timing = "tokenize_s"

    def __init__(self, options: dict[str, Any], snapshot=None):
        _require_bm25s()
        self.opts = resolve_options(options)
        make_stemmer(self.opts["stemmer"])  # fail before splitting when PyStemmer is missing
        self.worker_options = self.opts
        self.vocab: dict[str, int] = {}
        self._ids = self._lengths = None
        self.block_tokens, self.block_docs, self.merge_pairs = BLOCK_TOKENS, BLOCK_DOCS, MERGE_PAIRS

    def open(self, tmp: Path) -> None:
        self._ids_path, self._len_path = tmp / "tokens.i32.tmp", tmp / "lengths.i32.tmp"
        self._ids = open(self._ids_path, "wb")
        self._lengths = open(self._len_path, "wb")

    def add(self, payload) -> None:
        terms, ids, lengths = payload
        vocab = self.vocab
        lut = np.fromiter((vocab.setdefault(t, len(vocab)) for t in terms), dtype=np.int32, count=len(terms))
        self._ids.write((lut[ids] if len(ids) else ids).astype(np.int32, copy=False).tobytes())
        self._lengths.write(lengths.astype(np.int32, copy=False).tobytes())

    def close(self) -> None:
        for f in (self._ids, self._lengths):
            if f is not None and not f.closed:
                f.close()

    def finish(self, tmp: Path, progress: TextIO | None) -> dict[str, Any]:
        bm25s = _require_bm25s()
        self.close()
        opts = self.opts
        started = time.perf_counter()
        out = tmp / "bm25"
        # the score arrays bm25s's build_index_from_ids + save write, built out of core (above)
        n_docs = write_bm25_matrix(
            self._ids_path,
            self._len_path,
            len(self.vocab),
            opts,
            out,
            block_tokens=self.block_tokens,
            block_docs=self.block_docs,
            merge_pairs=self.merge_pairs,
            progress=progress,
        )
        indexed = time.perf_counter()
        tokens = self._ids_path.stat().st_size // 4
        self._ids_path.unlink()
        self._len_path.unlink()
        # and what save writes beside them: the vocabulary with BM25.index's empty-string term
        # (a column-less id after the last) and the parameters BM25.load reads back
        vocab = dict(self.vocab)
        if "" not in vocab:
            vocab[""] = max(vocab.values(), default=-1) + 1
        (out / "vocab.index.json").write_bytes(json_bytes(json.dumps(vocab, ensure_ascii=False)))
        params = {
            "k1": float(opts["k1"]),
            "b": float(opts["b"]),
            "delta": float(opts["delta"]),
            "method": opts["method"],
            "idf_method": opts["method"],
            "dtype": "float32",
            "int_dtype": "int32",
            "num_docs": n_docs,
            "version": bm25s.__version__,  # the bm25s that reads it (BM25.load keeps it as _original_version)
            "backend": "numpy",
        }
        (out / "params.index.json").write_text(json.dumps(params, indent=4), encoding="utf-8")
        saved = time.perf_counter()
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
                    "vocabulary": len(vocab),  # with bm25s's empty-string term, as before
                    "tokens": tokens,
                }
            },
            "timings": {"index_s": round(indexed - started, 3), "save_s": round(saved - indexed, 3)},
        }


class Scratch(threading.local):
    """Per thread (a retriever may be searched from several): a float32 score per passage and a
    touched flag per passage, all zero between queries (only the entries a query touched are
    reset), so a query costs its postings, not the number of passages."""

    def get(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        if getattr(self, "n", None) != n:
            self.n, self.acc, self.seen = n, np.zeros(n, dtype=np.float32), np.zeros(n, dtype=bool)
        return self.acc, self.seen


# Above this many postings per passage, scanning every passage's accumulator (sequential) costs
# less than tracking the touched ones (random access, ~50 ns a posting): measured on the 100k
# synthetic index (881,197 passages), the heaviest queries touch a third of the passages.
DENSE_SHARE = 1 / 16


def query_top_k(scores: dict, nonoccurrence, ids: list[int], k: int, scratch: Scratch, dense_share=DENSE_SHARE):
    """The ``top_k`` of bm25s's ``get_scores_from_ids(ids)`` (bm25s 0.3.16, bm25s/__init__.py)
    with score > 0, bit for bit, reading only the query terms' columns. bm25s: ``np.zeros(n,
    float32)``, then for each id in query order (a repeated id counts again) ``np.add.at`` of its
    column (``indices``/``data``, a passage at most once a column, so ``acc[idx] += data`` is the
    same float32 addition), then, for bm25l and bm25+, ``+= nonoccurrence_array[ids].sum()`` (a
    float32) on every passage: an untouched passage scores exactly that constant, so the first
    ``k`` untouched passages (passage order breaks the tie) join the candidates. Queries with
    more than ``dense_share`` postings a passage scan the accumulator instead (same floats): the
    cost stays proportional to the postings either way."""
    data, indices, indptr, n = scores["data"], scores["indices"], scores["indptr"], int(scores["num_docs"])
    q = np.asarray(ids, dtype=np.int32)  # bm25s's int_dtype
    spans = [(int(indptr[t]), int(indptr[t + 1])) for t in q.tolist()]
    acc, seen = scratch.get(n)
    if sum(end - start for start, end in spans) > n * dense_share:
        try:
            for start, end in spans:
                acc[indices[start:end]] += data[start:end]
            if nonoccurrence is None:
                hit = np.flatnonzero(acc > 0)
                return top_k_of(hit, acc[hit], k)
            idx, best = top_k(acc + nonoccurrence[q].sum(), k)
            return idx[best > 0], best[best > 0]
        finally:
            acc.fill(0)
    touched: list[np.ndarray] = []
    try:
        for start, end in spans:
            if start == end:
                continue
            idx = np.asarray(indices[start:end])
            new = idx[~seen[idx]]
            if len(new):
                seen[new] = True  # before the addition: the reset below finds every entry changed
                touched.append(new)
            acc[idx] += data[start:end]
        hit = np.concatenate(touched) if touched else np.empty(0, dtype=np.int32)
        got = acc[hit]
        if nonoccurrence is None:
            keep = got > 0
            return top_k_of(hit[keep], got[keep], k)
        constant = nonoccurrence[q].sum()
        got += constant
        first = np.arange(min(n, k + len(hit)), dtype=np.int64)
        free = first[~seen[first]][: max(k, 0)]
        cand = np.concatenate([hit.astype(np.int64), free])
        idx, best = top_k_of(cand, np.concatenate([got, np.zeros(len(free), dtype=np.float32) + constant]), k)
        keep = best > 0
        return idx[keep], best[keep]
    finally:
        for part in touched:
            acc[part] = 0
            seen[part] = False


class BM25Retriever(Retriever):
    kind = "bm25"

    def __init__(self, directory: Path, meta: dict[str, Any], snapshot):
        super().__init__(directory, meta, snapshot)
        bm25s = _require_bm25s()
        self.opts = resolve_options(meta["bm25"]["options"])
        terms = self._check_files()
        try:
            self.model = bm25s.BM25.load(str(directory / "bm25"), mmap=True, load_vocab=True)
        except json.JSONDecodeError as exc:  # the arrays and parameters were checked: the vocabulary
            raise self.damaged("bm25/vocab.index.json", f"not readable: {first_line(exc)}") from None
        except (*UNREADABLE, KeyError, TypeError) as exc:
            raise self.damaged("bm25/", f"not readable: {first_line(exc)}") from None
        # the score arrays hold a column per term, bm25s's empty-string term included or not
        if len(self.model.vocab_dict) not in (terms, terms + 1):
            raise self.damaged("bm25/vocab.index.json", f"{len(self.model.vocab_dict)} terms, the score arrays {terms}")
        self.n_terms = terms
        self._scratch = Scratch()

    def _check_files(self) -> int:
        """The score arrays (bm25s's CSC matrix) and parameters as the build wrote them: the number
        of terms they hold. Cheap: sizes and one element, nothing read in full."""
        data = self.load_array("bm25/data.csc.index.npy", shape=(None,))
        self.load_array("bm25/indices.csc.index.npy", shape=(len(data),))
        indptr = self.load_array("bm25/indptr.csc.index.npy", shape=(None,))
        if len(indptr) == 0 or int(indptr[-1]) != len(data):
            end = int(indptr[-1]) if len(indptr) else "nothing"
            raise self.damaged("bm25/indptr.csc.index.npy", f"ends at {end}, the scores hold {len(data)}")
        name = "bm25/params.index.json"
        try:
            params = json.loads((self.directory / name).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise self.damaged(name, "missing") from None
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise self.damaged(name, f"not readable: {first_line(exc)}") from None
        docs = params.get("num_docs") if isinstance(params, dict) else None
        if self.n_passages is not None and docs != self.n_passages:
            raise self.damaged(name, f"num_docs {docs}, meta.json n_passages {self.n_passages}")
        return len(indptr) - 1

    def query_token_ids(self, query: str) -> list[int]:
        # a lone surrogate (a model's "\ud800") as U+FFFD, as every query (harness.wiki_snapshot.text)
        tokens = tokenize([plain_text(query)[0]], self.opts, return_ids=False)[0]
        return self.model.get_tokens_ids(tokens)

    def scores(self, query: str) -> np.ndarray | None:
        """bm25s's score of every passage for ``query`` (None: no query term is in the index)."""
        ids = self.query_token_ids(query)
        if not ids:
            return None
        return self.model.get_scores_from_ids(ids)

    def ranking(self, query: str, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Indices and scores of the ``k`` best passages with score > 0: ``top_k`` of ``scores``,
        computed from the query terms' postings only."""
        ids = self.query_token_ids(query)
        if not ids:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32)
        if max(ids) >= self.n_terms:  # bm25s's empty-string term has no column: bm25s refuses it
            scores = self.model.get_scores_from_ids(ids)
            idx, best = top_k(scores, k)
            return idx[best > 0], best[best > 0]
        return query_top_k(self.model.scores, self.model.nonoccurrence_array, ids, k, self._scratch)

    def search_many(self, queries: list[str], k: int) -> list[list[Hit]]:
        out = []
        for query in queries:
            idx, best = self.ranking(query, k)
            out.append([self.passages.hit(i, s) for i, s in zip(idx, best)])
        return out
