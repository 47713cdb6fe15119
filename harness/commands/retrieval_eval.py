"""``harness retrieval-eval``: score a passage index on a dataset's gold evidence (the logic:
harness.analysis.retrieval_eval)."""

from __future__ import annotations

import argparse
import sys

from harness.analysis import retrieval_eval
from harness.errors import HarnessError
from harness.analysis.retrieval_eval import DEFAULT_KS, evaluate, format_table


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
    p.add_argument("--limit", type=int, help="only the first N questions")
    p.add_argument("--sample-id", dest="sample_ids", help="comma-separated question ids")
    p.add_argument("--out", help="write the full result (per question too) as JSON")


def parse_ks(text: str) -> list[int]:
    try:
        ks = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise HarnessError(f"--k must be comma-separated integers, not {text!r}") from None
    if not ks or ks[0] < 1 or ks[-1] > 1_000_000:
        raise HarnessError(f"--k needs integers from 1 to 1000000, not {text!r}")
    return ks


def command(args: argparse.Namespace) -> int:
    from harness.execution.config import build_config
    from harness.datasets import load_dataset
    from harness.records import write_json_atomic
    from harness.execution.runner import select_samples
    from wiki_snapshot.retrieval import open_retriever
    from wiki_snapshot.store import Snapshot

    from harness.execution.config import parse_metric_options
    from harness.scoring.retrieval_metrics import retrieval_options

    ks = parse_ks(args.k)
    options = retrieval_options(parse_metric_options(args.metric_options))
    if args.limit is not None and args.limit < 1:
        raise HarnessError("--limit must be at least 1")
    config = build_config({"dataset": args.dataset, "limit": args.limit, "sample_ids": args.sample_ids})
    dataset = load_dataset(args.dataset, args.data_path)
    samples = select_samples(dataset, config)
    passages = args.passages or ("page" if dataset.info.name == "quest" else "words100")
    with Snapshot.open(args.snapshot) as snapshot:
        retriever = open_retriever(snapshot, args.retriever, passages)
        result = evaluate(dataset.info.name, samples, snapshot, retriever, ks, args.question_representation, options)
    result.update(
        {
            "dataset": {"spec": dataset.info.spec(), "sha256": dataset.info.sha256, "n_selected": len(samples)},
            "snapshot": {"path": args.snapshot, "content_sha256": snapshot.metadata.get("content_sha256")},
            "index": retriever.describe(),
        }
    )
    if args.out:
        write_json_atomic(args.out, result)
        print(f"wrote {args.out}", file=sys.stderr)
    print(format_table(result))
    return 0
