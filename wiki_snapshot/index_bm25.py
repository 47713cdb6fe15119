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

import json
import logging
import time
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from wiki_snapshot.errors import SnapshotError
from wiki_snapshot.retriever import UNREADABLE, Hit, Retriever, first_line, live_progress, top_k

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


class _TokenIdsOnDisk:
    """Every passage's term ids, read back from the build's files: what bm25s's
    ``build_index_from_ids`` iterates (three passes), without a list of lists in memory."""

    def __init__(self, ids: np.ndarray, lengths: np.ndarray, block: int = 65536):
        self.ids, self.lengths, self.block = ids, lengths, block
        self.offsets = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)])

    def __len__(self) -> int:
        return len(self.lengths)

    def __iter__(self):
        for b in range(0, len(self.lengths), self.block):
            end = min(b + self.block, len(self.lengths))
            lo = int(self.offsets[b])
            chunk = self.ids[lo : int(self.offsets[end])].tolist()
            for d in range(b, end):
                yield chunk[int(self.offsets[d]) - lo : int(self.offsets[d + 1]) - lo]


class BM25Build:
    """Streams the workers' token ids to disk with one global vocabulary (terms numbered by first
    appearance in passage order), then builds bm25s's score matrix from those files."""

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
        lengths = np.fromfile(self._len_path, dtype=np.int32)  # 4 bytes a passage; the ids stay on disk
        on_disk = self._ids_path.stat().st_size > 0
        ids = np.memmap(self._ids_path, dtype=np.int32, mode="r") if on_disk else np.empty(0, np.int32)
        corpus = _TokenIdsOnDisk(ids, lengths)
        live_progress(progress, f"indexing {len(lengths):,} passages")
        live_progress(progress, None)
        model = bm25s.BM25(k1=float(opts["k1"]), b=float(opts["b"]), delta=float(opts["delta"]), method=opts["method"])
        # what BM25.index does for an ids + vocab corpus (including its empty-string term), from the files
        vocab = dict(self.vocab)
        model.scores = model.build_index_from_ids(list(vocab.values()), corpus, show_progress=False)
        if "" not in vocab:
            vocab[""] = max(vocab.values(), default=-1) + 1
        model.vocab_dict = vocab
        model.unique_token_ids_set = set(vocab.values())
        indexed = time.perf_counter()
        model.save(str(tmp / "bm25"), show_progress=False)
        saved = time.perf_counter()
        del corpus, ids  # release the memory map before removing its file
        self._ids_path.unlink()
        self._len_path.unlink()
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
                    "tokens": int(lengths.sum(dtype=np.int64)),
                }
            },
            "timings": {"index_s": round(indexed - started, 3), "save_s": round(saved - indexed, 3)},
        }


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
