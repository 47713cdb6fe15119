"""A run's memory grows by little per sample (issue 25: memory flat at 100,000 samples): whole
closed-book runs against an instant loopback server, in this process under tracemalloc, at two
sizes; the growth per extra sample is bounded while the run goes (rows held in a spool file, a key
and a position in memory: 0.2 KB a sample here; 0.65 KB packed in memory, 2.3 KB as dicts) and at
its peak, the end (2.5 KB: each question's score values as dicts, for results.json). The old loop held a waiting task
per sample (~2 KB each), every row whole until the end (its transcript included), and results.json
as one string beside the chunks it was joined from: 8.2 KB a sample at the peak."""

from __future__ import annotations

import gc
import json
import tracemalloc

import pytest
from fault_server import InstantServer

from harness.cli import main
from harness.execution import runner
from harness.records import HeldRows

pytestmark = pytest.mark.slow  # a loopback server and 8,000 requests under tracemalloc


def questions(path, n: int) -> str:
    """FanOutQA-format questions, small (the dataset's own memory is not what is measured)."""
    rows = [{"id": f"q{i}", "question": f"Which city is number {i}?", "answer": "Paris"} for i in range(n)]
    path.write_text(json.dumps(rows), encoding="utf-8")
    return str(path)


def growth(url: str, tmp_path, n: int, monkeypatch) -> tuple[int, int]:
    """Bytes Python allocated over what was allocated once its dataset was loaded (tracemalloc: not
    the scoring worker's, not SQLite's) in a whole ``harness run`` of ``n`` samples: at its peak, and
    held when the last sample has finished (before the end decodes the rows for results.json)."""
    data = questions(tmp_path / f"q{n}.json", n)
    args = ["run", "--model", "openai/bench", "--base-url", url, "--dataset", "fanoutqa:dev", "--data-path", data]
    args += ["--setting", "closed-book", "--max-connections", "64", "--out", str(tmp_path / f"run{n}")]
    args += ["--cache-path", str(tmp_path / f"cache{n}.sqlite"), "--stream-scoring", "on"]
    load, loaded_at = runner.load_dataset, []

    def load_then_mark(*args, **kwargs):
        dataset = load(*args, **kwargs)
        loaded_at.append(tracemalloc.get_traced_memory()[0])
        tracemalloc.reset_peak()
        return dataset

    take, held_at = HeldRows.take, []

    def mark_then_take(self, keys):
        held_at.append(tracemalloc.get_traced_memory()[0])
        return take(self, keys)

    monkeypatch.setattr(runner, "load_dataset", load_then_mark)
    monkeypatch.setattr(HeldRows, "take", mark_then_take)
    gc.collect()
    tracemalloc.start()
    try:
        assert main(args) == 0
        return tracemalloc.get_traced_memory()[1] - loaded_at[0], held_at[0] - loaded_at[0]
    finally:
        tracemalloc.stop()


def test_memory_per_sample_is_small(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "test-dummy")
    with InstantServer() as server:
        growth(server.url, tmp_path, 64, monkeypatch)  # imports, the SDK's first client: not per sample
        small = growth(server.url, tmp_path, SMALL, monkeypatch)
        large = growth(server.url, tmp_path, LARGE, monkeypatch)
    per_sample = [(b - a) / (LARGE - SMALL) for a, b in zip(small, large)]
    # while it runs, a finished sample is its key and its row's place in the spool file (~0.2 KB;
    # the row packed in memory was ~0.65 KB, as dicts ~2 KB)
    assert per_sample[1] < 400, f"{per_sample[1]:.0f} bytes a sample held while the run goes"
    # the peak is the end: what results.json holds, each question's score values as Python dicts
    # (~1.3 KB for fanoutqa-string), and the fields of a row the end reads
    assert per_sample[0] < 2800, f"{per_sample[0]:.0f} bytes a sample at the peak"


SMALL, LARGE = 1000, 3000
