"""Approximate dense search (faiss HNSW, IVF-PQ) against exact search: recall@10 on real passages,
latency, memory, and what that means for a 24M-passage Wikipedia.

    python benchmarks/ann.py [--synthetic 100000] [--workers N]

1. Real: the HotpotQA dev paragraphs (tests/fixtures; 1,412 ``words100`` passages) embedded once
   with all-MiniLM-L6-v2 (``build_index``); each ANN variant is built from those embeddings with
   ``build_ann`` and searched through ``DenseRetriever``. Queries: the 100 HotpotQA questions.
   recall@10 = share of exact search's top 10 that the ANN's top 10 holds. Latency: search only
   (queries encoded once beforehand), one query at a time, median, one thread.
2. Scale: ``--synthetic`` vectors made from the real embeddings (each a real passage plus Gaussian
   noise, re-normalized, so the clusters of real text remain), to measure how latency, bytes per
   vector and build rate grow; then extrapolated to 23.9M passages (DPR's 100-word split scaled
   to 6.7M articles, as benchmarks/retrieval.py assumes).
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.datasets import load_dataset  # noqa: E402
from harness.wiki_snapshot import build_snapshot  # noqa: E402
from harness.wiki_snapshot.index_dense import ANN_FILE, DenseRetriever, build_ann, resolve_ann  # noqa: E402
from harness.wiki_snapshot.retrieval import build_index, index_dir  # noqa: E402
from harness.wiki_snapshot.retriever import top_k  # noqa: E402
from harness.wiki_snapshot.store import Snapshot  # noqa: E402

HOTPOT = ROOT / "tests" / "fixtures" / "hotpot_dev_distractor_first100.json"
WIKI_PASSAGES = 23.9e6
VARIANTS = [
    {"ann": "hnsw", "ef_search": 16},
    {"ann": "hnsw", "ef_search": 32},
    {"ann": "hnsw"},  # defaults: M 32, efConstruction 200, efSearch 128
    {"ann": "ivfpq", "nprobe": 4},
    {"ann": "ivfpq", "refine": 1},  # PQ's own top K only (before over-fetching)
    {"ann": "ivfpq"},  # defaults: 4 sqrt(n) lists, 48 sub-quantizers, nprobe 16, refine 4
    {"ann": "ivfpq", "refine": 16},
    {"ann": "ivfpq", "nprobe": 64},
]


def latency_ms(fn, queries: np.ndarray) -> float:
    times = []
    for q in queries:
        t = time.perf_counter()
        fn(q[None, :])
        times.append(time.perf_counter() - t)
    return 1000 * statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--synthetic", type=int, default=100_000)
    ap.add_argument("--workers", type=int, default=None)
    args = ap.parse_args()
    import faiss

    questions = [s.question for s in load_dataset("hotpotqa:dev").samples]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        snap_path = tmp / "hotpot.db"
        build_snapshot(str(HOTPOT), snap_path, progress=None)
        t = time.perf_counter()
        build_index(snap_path, "dense", "words100", workers=args.workers)
        print(f"# embedded the HotpotQA passages in {time.perf_counter() - t:.0f} s", flush=True)
        base = index_dir(snap_path, "dense", "words100")
        meta = json.loads((base / "meta.json").read_text())
        faiss.omp_set_num_threads(1)  # latency of one query on one core
        with Snapshot.open(snap_path) as snap:
            exact = DenseRetriever(base, meta, snap)
            q = exact.encode_queries(questions)
            emb = np.asarray(exact.embeddings)
            truth = [[h.passage_id for h in hits] for hits in exact.search_many(questions, 10)]
            exact_ms = latency_ms(lambda x: top_k((emb @ x.T)[:, 0], 10), q)
            print(f"\n## recall@10 against exact search: {len(emb):,} real passages, {len(q)} HotpotQA questions\n")
            print("| index | parameters | recall@10 | top-1 same | ms/query (search only) | bytes/passage |")
            print("|---|---|---|---|---|---|")
            print(f"| exact (matrix product) | | 1.000 | 100/100 | {exact_ms:.3f} | {emb.shape[1] * 4} |")
            for options in VARIANTS:
                d = tmp / "variant"
                shutil.rmtree(d, ignore_errors=True)
                d.mkdir()
                for name in ("embeddings.npy", "passages.npy"):
                    shutil.copy(base / name, d / name)
                params = resolve_ann(options)
                ann_meta = build_ann(d, params, None)
                m = json.loads(json.dumps(meta))
                m["dense"]["ann"] = ann_meta
                r = DenseRetriever(d, m, snap)
                got = [[h.passage_id for h in hits] for hits in r.search_many(questions, 10)]
                recall = np.mean([len(set(g) & set(w)) / len(w) for g, w in zip(got, truth)])
                top1 = sum(g[:1] == w[:1] for g, w in zip(got, truth))
                ms = latency_ms(lambda x, r=r: r._search_ann(x, 10), q)
                size = (d / ANN_FILE).stat().st_size / len(emb)
                shown = {k: v for k, v in ann_meta.items() if k not in ("method", "metric", "faiss", "factory")}
                print(f"| {ann_meta['factory']} | {shown} | {recall:.3f} | {top1}/100 | {ms:.3f} | {size:,.0f} |")
        scale(emb, q, args.synthetic)
    return 0


def synthetic(emb: np.ndarray, n: int, rng) -> np.ndarray:
    base = emb[rng.integers(0, len(emb), n)]
    noisy = base + rng.normal(0, 0.03, base.shape).astype(np.float32)  # about cosine 0.85 to its source
    return (noisy / np.linalg.norm(noisy, axis=1, keepdims=True)).astype(np.float32)


def scale(emb: np.ndarray, q: np.ndarray, n_big: int) -> None:
    import faiss

    rng = np.random.default_rng(0)
    d = emb.shape[1]
    print(f"\n## scale: synthetic vectors from the real embeddings (d={d}), 1 thread per query\n")
    print("| index | vectors | build s (2 threads) | vectors/s built | ms/query | recall@10 | bytes/vector |")
    print("|---|---|---|---|---|---|---|")
    fits: dict[str, list[tuple[int, float]]] = {"hnsw": [], "ivfpq": [], "exact": []}
    sizes: dict[str, float] = {}
    rates: dict[str, float] = {}
    for n in (n_big // 10, n_big):
        x = synthetic(emb, n, rng)
        exact_ids = np.argsort(-(x @ q.T), axis=0)[:10].T
        fits["exact"].append((n, latency_ms(lambda v: top_k((x @ v.T)[:, 0], 10), q[:30])))
        for kind in ("hnsw", "ivfpq"):
            faiss.omp_set_num_threads(2)
            t = time.perf_counter()
            if kind == "hnsw":
                index = faiss.IndexHNSWFlat(d, 32, faiss.METRIC_INNER_PRODUCT)
                index.hnsw.efConstruction = 200
                index.add(x)
                index.hnsw.efSearch = 128
            else:
                nlist = int(4 * math.sqrt(n))
                index = faiss.IndexIVFPQ(faiss.IndexFlatIP(d), d, nlist, 48, 8, faiss.METRIC_INNER_PRODUCT)
                index.train(x[:: max(1, n // (256 * nlist))][: 256 * nlist])
                index.add(x)
                index.nprobe = 16
            built = time.perf_counter() - t
            faiss.omp_set_num_threads(1)
            ms = latency_ms(lambda v, index=index: index.search(v, 10), q)
            _, found = index.search(q, 10)
            recall = np.mean([len(set(f) & set(e)) / 10 for f, e in zip(found, exact_ids)])
            size = len(faiss.serialize_index(index)) / n
            fits[kind].append((n, ms))
            sizes[kind], rates[kind] = size, n / built
            print(f"| {kind} | {n:,} | {built:.1f} | {n / built:,.0f} | {ms:.3f} | {recall:.3f} | {size:,.0f} |")
        print(f"| exact | {n:,} | | | {fits['exact'][-1][1]:.3f} | 1.000 | {d * 4} |", flush=True)

    n = WIKI_PASSAGES
    (n1, l1), (n2, l2) = fits["hnsw"]
    hnsw_ms = l2 + (l2 - l1) / math.log(n2 / n1) * math.log(n / n2)  # HNSW: latency grows with log n
    (n1, i1), (n2, i2) = fits["ivfpq"]
    ivf_ms = i2 * math.sqrt(n / n2)  # lists of n / (4 sqrt n) codes: the scan grows with sqrt n
    exact_ms = fits["exact"][-1][1] * n / fits["exact"][-1][0]
    gb = 1e9
    print(f"\n## extrapolated to {n / 1e6:.1f}M passages (384-d all-MiniLM-L6-v2)\n")
    print("| index | memory | query latency (1 core, search only) | build (2 threads) |")
    print("|---|---|---|---|")
    print(f"| exact | {n * d * 4 / gb:.1f} GB read per query batch (memory-mapped) | {exact_ms / 1000:.1f} s | - |")
    print(
        f"| HNSW32,Flat (efSearch 128) | {n * sizes['hnsw'] / gb:.1f} GB in RAM | ≈{hnsw_ms:.1f} ms (log n fit; "
        f"more when the graph no longer fits in cache) | ≥{n / rates['hnsw'] / 3600:.1f} h |"
    )
    print(
        f"| IVF-PQ 48x8, {int(4 * math.sqrt(n)):,} lists, nprobe 16 | {n * sizes['ivfpq'] / gb:.1f} GB in RAM "
        f"(+ {n * d * 4 / gb:.0f} GB embeddings on disk, k rows read per query to rescore) | ≈{ivf_ms:.1f} ms "
        f"(sqrt n fit) | ≥{n / rates['ivfpq'] / 3600:.1f} h (+ training) |"
    )
    return None


if __name__ == "__main__":
    sys.exit(main())
