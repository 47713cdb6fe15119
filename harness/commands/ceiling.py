"""``harness ceiling``: the answerability ceiling of evidence-provided at several context sizes."""

from __future__ import annotations

import argparse
import asyncio
import sys


def add_parser(sub) -> None:
    p = sub.add_parser(
        "ceiling",
        description=(
            "For each context size, pack each question's evidence exactly as --setting evidence-provided would and "
            "measure, with FanOutQA's string accuracy, how much of the gold answer the packed documents contain."
        ),
        argument_default=argparse.SUPPRESS,
    )
    p.add_argument("--context-sizes", required=True, help="comma-separated sizes in tokens, e.g. 2048,4096,8192")
    p.add_argument("--setting", help="evidence-provided (the only one with a fixed packing)")
    p.add_argument("--dataset", help="NAME[:SPLIT][@VERSION] (default fanoutqa:dev)")
    p.add_argument("--data-path", help="read the dataset from this file")
    p.add_argument("--model", help="whose tokenizer counts the tokens (default local/smollm2)")
    p.add_argument("--limit", type=int, help="only the first N samples")
    p.add_argument("--sample-id", dest="sample_ids", help="comma-separated sample ids")
    p.add_argument("--current-date", help="'Current date' in the prompt")
    p.add_argument("--out", help="write the JSON result here (default: print the table only)")
    p.add_argument("--snapshot", help="Wikipedia snapshot (SQLite) to read the evidence pages from")
    p.add_argument(
        "--agent-arg",
        dest="agent_args",
        action="append",
        metavar="KEY=VALUE",
        help="a knob of the evidence-provided strategy (chunk_size, evidence_reserve, bm25_k1, ...; repeat)",
    )


def command(args: argparse.Namespace) -> int:
    from harness.analysis.ablate import parse_sizes
    from harness.analysis.ceiling import compute_ceiling, format_table
    from harness.execution.config import build_config
    from harness.records import write_json_atomic

    flat = {k: v for k, v in vars(args).items() if k not in ("command", "verbose", "context_sizes", "out")}
    flat.setdefault("setting", "evidence-provided")
    sizes = parse_sizes(args.context_sizes)
    config = build_config(flat)
    result = asyncio.run(compute_ceiling(config, sizes))
    result["config"] = config.model_dump(mode="json")
    if getattr(args, "out", None):
        write_json_atomic(args.out, result)
        print(f"wrote {args.out}", file=sys.stderr)
    print(format_table(result))
    return 0
