"""Throughput of one search service (``harness search serve``) under many concurrent clients, beside the
same calls made in process (the reference: what a run does with a local snapshot file).

    python benchmarks/search_service.py [--snapshot SNAP.db] [--clients 64] [--seconds 10] \
        [--processes 8] [--threads 32] [--passages chunk1024]

The calls are what the open-book search tool and retrieve-read ask of a snapshot, with queries from the
first 100 HotpotQA dev questions in tests/fixtures: ``search`` (full-text, k=10) and ``resolve_title``
(the page's text) of each supporting-fact title (the tool's hit), ``similar_titles`` (k=10) of the title
with one letter dropped (the tool's miss), and ``retrieve`` (BM25, k=10) of each question (retrieve-read).

For each call, three phases:

- **in process**: the snapshot opened here, one thread, one call after another (a run over a local file);
- **service, 1 client**: the same calls over HTTP on loopback, one after another;
- **service, N clients**: N clients (threads spread over ``--processes`` processes, each client its own
  connection, as N shards are) calling as fast as they are answered for ``--seconds``.

Prints a markdown table: requests/s, p50 and p95 latency (ms), and how many cores this machine has
(the clients and the service share them). Without ``--snapshot`` it builds the HotpotQA fixture's
991 pages into a temporary folder. A missing ``bm25-PASSAGES`` index is built first.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

HOTPOT = ROOT / "tests" / "fixtures" / "hotpot_dev_distractor_first100.json"
OPS = ("search", "resolve_title", "similar_titles", "retrieve")


def queries() -> dict[str, list[str]]:
    rows = json.loads(HOTPOT.read_text(encoding="utf-8"))
    titles = list(dict.fromkeys(t for r in rows for t in r["supporting_facts"]["title"]))
    dropped = [t[: len(t) // 2] + t[len(t) // 2 + 1 :] for t in titles]  # one letter gone: a miss
    return {
        "search": titles,
        "resolve_title": titles,
        "similar_titles": dropped,
        "retrieve": [r["question"] for r in rows],
    }


def caller(backend, retriever, op: str):
    if op == "search":
        return lambda q: backend.search(q, 10)
    if op == "resolve_title":
        return backend.resolve_title
    if op == "similar_titles":
        return lambda q: backend.similar_titles(q, 10)
    return lambda q: retriever.search(q, 10)


def percentile(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, max(0, round(p / 100 * (len(values) - 1))))] if values else float("nan")


def sequential(call, items: list[str], seconds: float) -> tuple[int, float, list[float]]:
    """Calls one after another over ``items`` (cycled) for ``seconds``: (count, wall s, latencies s)."""
    lat: list[float] = []
    start = time.perf_counter()
    i = 0
    while True:
        t = time.perf_counter()
        call(items[i % len(items)])
        lat.append(time.perf_counter() - t)
        i += 1
        if t - start >= seconds:
            break
    return len(lat), time.perf_counter() - start, lat


def client_process(url: str, op: str, items: list[str], threads: int, offset: int, passages: str, ready, stop,
                   out) -> None:  # fmt: skip
    """One process of the N clients: ``threads`` clients, each with its own connection, calling from
    the moment every client is connected (``ready``, a barrier) until ``stop`` is set."""
    from harness.wiki_snapshot.remote import RemoteWiki

    lat: list[list[float]] = [[] for _ in range(threads)]

    def one(n: int) -> None:
        wiki = RemoteWiki.connect(url)
        retriever = wiki.open_retriever("bm25", passages) if op == "retrieve" else None
        call = caller(wiki, retriever, op)
        call(items[0])  # the connection opened before the clock
        i = offset + n * 7
        ready.wait()
        while not stop.is_set():
            t = time.perf_counter()
            call(items[i % len(items)])
            if not stop.is_set():  # a call still running when the clock stopped is not counted
                lat[n].append(time.perf_counter() - t)
            i += 1
        wiki.close()

    workers = [threading.Thread(target=one, args=(n,)) for n in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    out.put([x for row in lat for x in row])


def concurrent(url: str, op: str, items: list[str], clients: int, processes: int, seconds: float, passages: str):
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    processes = max(1, min(processes, clients))
    shares = [clients // processes + (1 if p < clients % processes else 0) for p in range(processes)]
    ready, stop, out = ctx.Barrier(clients + 1), ctx.Event(), ctx.Queue()
    procs = [
        ctx.Process(target=client_process, args=(url, op, items, n, p * 13, passages, ready, stop, out))
        for p, n in enumerate(shares)
    ]
    for proc in procs:
        proc.start()
    ready.wait()  # every client connected
    started = time.perf_counter()
    time.sleep(seconds)
    stop.set()
    wall = time.perf_counter() - started
    lat = [x for _ in procs for x in out.get()]
    for proc in procs:
        proc.join()
    return len(lat), wall, lat


def start_service(snapshot: Path, threads: int, log: Path) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness", "search", "serve", str(snapshot), "--port", "0", "--threads", str(threads)],
        stdout=subprocess.DEVNULL, stderr=open(log, "w"), cwd=ROOT,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        found = re.search(r"on (http://\S+) ", log.read_text())
        if found:
            return proc, found.group(1)
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    raise SystemExit(f"the service did not start: {log.read_text()}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--snapshot", help="SNAP.db (default: the HotpotQA fixture's pages, built in a temporary folder)")
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--processes", type=int, default=8, help="client processes the clients are spread over")
    ap.add_argument("--threads", type=int, default=32, help="the service's --threads")
    ap.add_argument("--seconds", type=float, default=10.0, help="per call kind and phase")
    ap.add_argument("--passages", default="chunk1024", help="the bm25 index's passages (built if missing)")
    args = ap.parse_args(argv)

    from harness.wiki_snapshot.retrieval import build_index, index_dir, open_retriever
    from harness.wiki_snapshot.store import Snapshot

    tmp = Path(tempfile.mkdtemp(prefix="search-service-"))
    snapshot = Path(args.snapshot) if args.snapshot else tmp / "hotpot.db"
    if not args.snapshot:
        from harness.wiki_snapshot.builders import build_snapshot

        build_snapshot(str(HOTPOT), snapshot, progress=None)
    if not (index_dir(snapshot, "bm25", args.passages) / "meta.json").is_file():
        print(f"building the bm25-{args.passages} index of {snapshot} ...", file=sys.stderr)
        build_index(snapshot, "bm25", args.passages)
    work = queries()
    rows: list[tuple[str, str, float, float, float]] = []

    def row(op: str, phase: str, count: int, wall: float, lat: list[float]) -> None:
        rows.append((op, phase, count / wall, percentile(lat, 50) * 1000, percentile(lat, 95) * 1000))
        print(f"{op:15} {phase:22} {count / wall:10.1f}/s p50 {rows[-1][3]:.2f} ms p95 {rows[-1][4]:.2f} ms",
              file=sys.stderr, flush=True)  # fmt: skip

    local = Snapshot.open(snapshot)
    local_retriever = open_retriever(local, "bm25", args.passages)
    for op in OPS:
        row(op, "in process", *sequential(caller(local, local_retriever, op), work[op], args.seconds))
    local.close()

    proc, url = start_service(snapshot, args.threads, tmp / "serve.log")
    try:
        from harness.wiki_snapshot.remote import RemoteWiki

        with RemoteWiki.connect(url) as wiki:
            retriever = wiki.open_retriever("bm25", args.passages)
            for op in OPS:
                row(op, "service, 1 client", *sequential(caller(wiki, retriever, op), work[op], args.seconds))
        for op in OPS:
            phase = f"service, {args.clients} clients"
            row(op, phase, *concurrent(url, op, work[op], args.clients, args.processes, args.seconds, args.passages))
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    with Snapshot.open(snapshot) as snap:
        pages = len(snap)
    load = os.getloadavg()[0]
    print(
        f"\n{pages:,} pages ({snapshot.name}), bm25-{args.passages}; {os.cpu_count()} cores shared by the service "
        f"(--threads {args.threads}) and {args.processes} client processes (load average {load:.1f} at the end); "
        f"{args.seconds:g} s per row\n"
    )
    print("| call | phase | requests/s | p50 ms | p95 ms |")
    print("|---|---|---:|---:|---:|")
    for op, phase, rate, p50, p95 in rows:
        print(f"| {op} | {phase} | {rate:,.0f} | {p50:.2f} | {p95:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
