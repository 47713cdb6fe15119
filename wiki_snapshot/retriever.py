"""The retriever interface every index implements (``Retriever``, ``Hit``), the passage table it
reads hits from, and the helpers the indexes share. Apart from ``harness.wiki_snapshot.retrieval`` (where
indexes live, how they are opened and built), which imports the indexes: so the indexes import
this module, never that one."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import OrderedDict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from harness.wiki_snapshot.errors import SnapshotError
from harness.wiki_snapshot.passages import PASSAGE_DTYPE, passage_id

PASSAGES_FILE = "passages.npy"
# what a damaged file raises while it is opened (a truncated .npy: ValueError from its header or
# memory map; a cut JSON file: JSONDecodeError, a ValueError; faiss: RuntimeError)
UNREADABLE = (OSError, ValueError, EOFError, RuntimeError)


def build_command(snapshot_path, retriever: str, passages: str) -> str:
    return f"harness index build {snapshot_path} --kind {retriever} --passages {passages}"


@dataclass(frozen=True)
class Hit:
    passage_id: str
    title: str
    text: str
    score: float
    pageid: int

    def record(self) -> dict[str, Any]:
        """What a run records per retrieved passage (no text: it is in the snapshot)."""
        return {"passage_id": self.passage_id, "title": self.title, "score": round(float(self.score), 6)}

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class PassageTable:
    """Passage records (memory-mapped) turned into hits, reading page texts from the snapshot."""

    def __init__(self, records: np.ndarray, snapshot, cache_pages: int = 4096):
        self.records = records
        self.snapshot = snapshot
        self._pages: OrderedDict[int, tuple[str, str]] = OrderedDict()
        self._cache_pages = cache_pages

    def __len__(self) -> int:
        return len(self.records)

    def _page(self, pageid: int) -> tuple[str, str]:
        got = self._pages.get(pageid)
        if got is not None:
            self._pages.move_to_end(pageid)
            return got
        page = self.snapshot.get_page(pageid)
        if page is None:  # the content hash matched, so this means a corrupted index
            raise SnapshotError(f"passage index refers to page {pageid}, which is not in {self.snapshot.path}")
        got = (page.title, page.text)
        self._pages[pageid] = got
        if len(self._pages) > self._cache_pages:
            self._pages.popitem(last=False)
        return got

    def hit(self, index: int, score: float) -> Hit:
        rec = self.records[int(index)]
        title, text = self._page(int(rec["pageid"]))
        return Hit(passage_id(rec), title, text[int(rec["start"]) : int(rec["end"])], float(score), int(rec["pageid"]))


def top_k(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices and scores of the ``k`` best, best first; equal scores in passage order, so results
    never depend on a sort's tie-breaking."""
    return top_k_of(np.arange(len(scores)), scores, k)


def top_k_of(ids: np.ndarray, scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``top_k`` over a subset of the passages: ``ids`` their indices (distinct, any order),
    ``scores`` theirs. The same k best in the same order as ``top_k`` over every passage gives
    when the passages left out score below these (equal scores in passage order)."""
    n = len(scores)
    k = min(k, n)
    if k <= 0:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=scores.dtype)
    if k < n:
        # everything scoring at least the k-th best, so ties at the boundary are all candidates
        kth = np.partition(scores, n - k)[n - k]
        cand = np.flatnonzero(scores >= kth)
    else:
        cand = np.arange(n)
    cand = cand[np.lexsort((ids[cand], -scores[cand].astype(np.float64)))[:k]]
    return ids[cand].astype(np.int64), scores[cand]


class Retriever(ABC):
    """``search(query, k)`` -> the ``k`` best passages, best first."""

    kind: str

    def __init__(self, directory: Path, meta: dict[str, Any], snapshot):
        self.directory = directory
        self.meta = meta
        self.snapshot = snapshot
        self.n_passages = meta.get("n_passages")
        self.passages = PassageTable(self.load_array(PASSAGES_FILE, PASSAGE_DTYPE, (self.n_passages,)), snapshot)

    def damaged(self, name: str, reason: str) -> SnapshotError:
        """The one-line refusal of a file of this index that cannot be what its build wrote."""
        command = build_command(self.snapshot.path, self.kind, self.meta.get("passages"))
        return SnapshotError(f"index {self.directory} is damaged ({name}: {reason}); rebuild it with: {command}")

    def load_array(self, name: str, dtype: Any = None, shape: tuple[int | None, ...] | None = None) -> np.ndarray:
        """``name`` memory-mapped, its dtype and shape (None: any length) checked: a truncated or
        foreign file is refused here, by name, rather than failing later inside numpy."""
        path = self.directory / name
        try:
            array = np.load(path, mmap_mode="r")
        except FileNotFoundError:
            raise self.damaged(name, "missing") from None
        except UNREADABLE as exc:
            raise self.damaged(name, f"not readable: {first_line(exc)}") from None
        if dtype is not None and array.dtype != np.dtype(dtype):
            raise self.damaged(name, f"holds {array.dtype}, not {np.dtype(dtype)}")
        if shape is not None and (
            array.ndim != len(shape) or any(want is not None and got != want for got, want in zip(array.shape, shape))
        ):
            dims = ", ".join("any" if d is None else str(d) for d in shape) + ("," if len(shape) == 1 else "")
            raise self.damaged(name, f"shape {array.shape}, expected ({dims})")
        return array

    def __len__(self) -> int:
        return len(self.passages)

    def search(self, query: str, k: int) -> list[Hit]:
        return self.search_many([query], k)[0]

    @abstractmethod
    def search_many(self, queries: list[str], k: int) -> list[list[Hit]]: ...

    def describe(self) -> dict[str, Any]:
        """What a run records about the index it searched."""
        keep = ("retriever", "passages", "n_passages", "splitter", "bm25", "dense", "created_at", "snapshot")
        return {"path": str(self.directory), **{k: self.meta[k] for k in keep if k in self.meta}}


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__


def live_progress(stream: TextIO | None, line: str | None) -> None:
    """A progress line rewritten in place on a terminal (``None`` ends it); nothing otherwise."""
    if stream is None or not getattr(stream, "isatty", lambda: False)():
        return
    if line is None:
        print(file=stream)
    else:
        print(f"\r{line}", end="", file=stream, flush=True)
