"""Ordered, bounded parallel map over worker processes, shared by the builders and index builds.

Results come back in submission order, so a build's output does not depend on how many workers
ran it; at most ``3 × workers`` work units are in flight, so memory stays flat on any corpus size.
``workers <= 1`` runs the same function in-process (no pool, no pickling).
"""

from __future__ import annotations

import collections
import os
import struct
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np


def default_workers() -> int:
    """Every core this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def worker_init(extra: Callable[[], None] | None = None) -> None:
    """Workers leave signals to the parent: Ctrl-C is handled there (which then terminates the
    pool), and SIGTERM must kill a worker outright (a handler inherited through fork, such as the
    CLI's SIGTERM -> KeyboardInterrupt, would make Pool.terminate hang)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if extra is not None:
        extra()


def ordered_map(
    fn: Callable[[Any], Any],
    items: Iterable[Any],
    workers: int,
    *,
    start_method: str = "fork",
    init: Callable[[], None] | None = None,
) -> Iterator[Any]:
    """``fn(item)`` for every item, in order. ``start_method="spawn"`` for work that uses
    threaded native libraries (torch, OpenMP): forking a process that already ran them can hang."""
    if workers <= 1:
        if init is not None:
            init()
        for item in items:
            yield fn(item)
        return
    import multiprocessing

    if start_method == "fork" and not hasattr(os, "fork"):
        start_method = "spawn"
    ctx = multiprocessing.get_context(start_method)
    pool = ctx.Pool(workers, initializer=worker_init, initargs=(init,))
    finished = False
    try:
        pending: collections.deque = collections.deque()
        for item in items:
            pending.append(pool.apply_async(fn, (item,)))
            while len(pending) > 3 * workers:  # back-pressure: bounded memory
                yield pending.popleft().get()
        while pending:
            yield pending.popleft().get()
        finished = True
    finally:
        if finished:
            pool.close()
        else:
            pool.terminate()
        pool.join()


def batched(items: Iterable[Any], n: int) -> Iterator[list]:
    batch: list = []
    for x in items:
        batch.append(x)
        if len(batch) >= n:
            yield batch
            batch = []
    if batch:
        yield batch


class NpyAppender:
    """A ``.npy`` file written by appending rows (the row count is unknown until the end): a fixed
    256-byte header is rewritten with the final shape on ``close``, so nothing is copied and the
    bytes do not depend on how the rows were batched."""

    HEADER = 256  # a multiple of 64 (numpy's alignment); room for any realistic shape

    def __init__(self, path: Path, dtype, row_shape: tuple[int, ...] = ()):
        self.path = Path(path)
        self.dtype = np.dtype(dtype)
        self.row_shape = tuple(row_shape)
        self.rows = 0
        self._f = open(self.path, "wb")
        self._f.write(self._header(0))

    def _header(self, rows: int) -> bytes:
        d = {
            "descr": np.lib.format.dtype_to_descr(self.dtype),
            "fortran_order": False,
            "shape": (rows, *self.row_shape),
        }
        text = repr(d).encode("latin1")
        pad = self.HEADER - 10 - len(text) - 1
        if pad < 0:
            raise ValueError(f"npy header too long for {self.path}")
        return b"\x93NUMPY\x01\x00" + struct.pack("<H", self.HEADER - 10) + text + b" " * pad + b"\n"

    def append(self, rows: np.ndarray) -> None:
        rows = np.ascontiguousarray(rows, dtype=self.dtype)
        if rows.shape[1:] != self.row_shape:
            raise ValueError(f"{self.path}: rows of shape {rows.shape[1:]}, expected {self.row_shape}")
        self._f.write(rows.tobytes())
        self.rows += len(rows)

    def close(self) -> None:
        if self._f.closed:
            return
        self._f.seek(0)
        self._f.write(self._header(self.rows))
        self._f.flush()
        os.fsync(self._f.fileno())
        self._f.close()

    def discard(self) -> None:
        self._f.close()
