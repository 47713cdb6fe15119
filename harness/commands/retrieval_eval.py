"""``harness retrieval-eval``: score a passage index on a dataset's gold evidence (the logic:
harness.analysis.retrieval_eval)."""

from __future__ import annotations

import argparse
import sys

from harness.analysis import retrieval_eval
from harness.errors import HarnessError
from harness.analysis.retrieval_eval import DEFAULT_KS, evaluate, format_table
from harness.scoring.retrieval_metrics import NDCG_K


def add_parser(sub) -> None:
    p = sub.add_parser(
        "retrieval-eval",
        description=retrieval_eval.__doc__.split("\n\n", 1)[1].split("\n\nMetrics", 1)[0].replace("``", ""),
    )
    p.add_argument("--dataset", required=True, help="NAME[:SPLIT][@VERSION], e.g. hotpotqa:dev, quest:train-sample")
    p.add_argument("--data-path", help="read the dataset from this file")
    p.add_argument("--snapshot", required=True, help="SNAP.db with an index (harness index build)")
    p.add_argument("--retriever", default="bm25", choices=["bm25", "dense"])
    p.add_argument("--passages", help="words100 (default; QUEST: page), chunk1024, page")
    p.add_argument(
        "--k", default=",".join(map(str, DEFAULT_KS)), help="comma-separated K values (default 10,25,50,100,200)"
    )
    p.add_argument(
        "--question-representation",
        choices=["original", "all-history"],
        default="all-history",
        help="conversations (TopiOCQA): the question alone, or every previous turn with it ('q1 [SEP] a1 [SEP] q2', "
        "the official retriever input; default). 'rewritten' needs a model: use harness run --setting retrieve-read",
    )
    p.add_argument(
        "--metric-option",
        dest="metric_options",
        action="append",
        metavar="NAME.KEY=VALUE",
        help="mrecall.cap=true (the papers' capped MRecall), evidence_recall.lcs=exact; defaults are official",
    )
    p.add_argument(
        "--ndcg-k",
        type=int,
        default=NDCG_K,
        help="nDCG's cutoff over distinct pages, binary gain (default 10: BrowseComp-Plus's ndcg_cut.10)",
    )
    p.add_argument(
        "--cluster-by",
        help="sample field whose questions are not independent, for the intervals (TopiOCQA clusters by "
        "Conversation_no unless 'none'); never changes a value",
    )
    p.add_argument("--limit", type=int, help="only the first N questions")
    p.add_argument("--sample-id", dest="sample_ids", help="comma-separated question ids")
    p.add_argument("--out", help="write the full result (per question too) as JSON (the retrieval record)")
    p.add_argument(
        "--out-dir",
        help="write it as DIR/retrieval.json, the typed retrieval record (harness schema retrieval) that "
        "harness leaderboard lists as a retriever row, apart from the runs",
    )


def parse_ks(text: str) -> list[int]:
    try:
        ks = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise HarnessError(f"--k must be comma-separated integers, not {text!r}") from None
    if not ks or ks[0] < 1 or ks[-1] > 1_000_000:
        raise HarnessError(f"--k needs integers from 1 to 1000000, not {text!r}")
    return ks


def command(args: argparse.Namespace) -> int:
    from datetime import datetime, timezone

    from harness.execution.config import build_config
    from harness.datasets import load_dataset
    from harness.records import RESULTS_FILE, RETRIEVAL_FILE, check_output_path, write_json_atomic
    from harness.execution.record import RetrievalResults
    from harness.execution.runner import select_samples
    import platform

    from harness._version import __version__
    from harness.execution.summary import git_commit, search_space_info
    from harness.wiki_snapshot.retrieval import open_retriever
    from harness.wiki_snapshot.store import Snapshot

    from harness.execution.config import parse_metric_options
    from harness.scoring.metrics import ScoringOptions, check_clustering
    from harness.scoring.retrieval_metrics import retrieval_options

    ks = parse_ks(args.k)
    options = retrieval_options(parse_metric_options(args.metric_options))
    if args.limit is not None and args.limit < 1:
        raise HarnessError("--limit must be at least 1")
    if not 1 <= args.ndcg_k <= 1_000_000:
        raise HarnessError(f"--ndcg-k needs an integer from 1 to 1000000, not {args.ndcg_k}")
    out_dir = None
    if args.out_dir:
        out_dir = check_output_path(args.out_dir, "--out-dir", directory=True)
        if (out_dir / RESULTS_FILE).exists():
            raise HarnessError(f"--out-dir {out_dir}: a run's folder ({RESULTS_FILE}); choose a folder of its own")
    config = build_config({"dataset": args.dataset, "limit": args.limit, "sample_ids": args.sample_ids})
    dataset = load_dataset(args.dataset, args.data_path)
    samples = select_samples(dataset, config)
    cluster_by = check_clustering(dataset, samples, ScoringOptions(cluster_by=args.cluster_by))
    passages = args.passages or ("page" if dataset.info.name == "quest" else "words100")
    with Snapshot.open(args.snapshot) as snapshot:
        retriever = open_retriever(snapshot, args.retriever, passages)
        result = evaluate(
            dataset.info.name, samples, snapshot, retriever, ks, args.question_representation, options,
            ndcg_k=args.ndcg_k, cluster_by=cluster_by,
        )  # fmt: skip
        space = search_space_info(snapshot, samples)
    info = dataset.info
    record = RetrievalResults.model_validate(
        {
            **result,
            "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "harness": {"version": __version__, "git_commit": git_commit(), "python": platform.python_version()},
            "dataset": {
                "name": info.name,
                "split": info.split,
                "version": info.version,
                "spec": info.spec(),
                "sha256": info.sha256,
                "n_total": len(dataset.samples),
                "n_selected": len(samples),
                "limit": args.limit,
                "sample_ids": config.sample_ids,
            },
            "snapshot": {"path": args.snapshot, "content_sha256": snapshot.metadata.get("content_sha256")},
            "search_space": space,
            "index": retriever.describe(),
        }
    )
    data = record.model_dump(mode="json")
    if args.out:
        write_json_atomic(args.out, data)
        print(f"wrote {args.out}", file=sys.stderr)
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        write_json_atomic(out_dir / RETRIEVAL_FILE, data)
        print(f"wrote {out_dir / RETRIEVAL_FILE}", file=sys.stderr)
    print(format_table(result))
    return 0
