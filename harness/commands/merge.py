"""``harness merge``: a thin layer over ``harness.execution.merge.merge_runs``."""

from __future__ import annotations

import argparse
import sys


def add_parser(sub) -> None:
    p = sub.add_parser(
        "merge",
        description=(
            "Join the shards of one run (harness run --shard I/K, one run directory each) into one run "
            "directory, as if the run had run on one machine: every shard's rows, results.json over the whole "
            "selection, scores and error bars from the one scoring path (harness score). Refuses shards of "
            "different configurations, overlapping shards and a missing shard (unless --partial). The shards "
            "are only read."
        ),
    )
    p.add_argument("run_dirs", nargs="+", metavar="DIR", help="the shards' run directories")
    p.add_argument("--out", required=True, help="the merged run directory (new, or an empty folder)")
    p.add_argument(
        "--partial",
        action="store_true",
        help="merge even if shards are missing: their samples are counted pending (a warning says so); "
        "run the unsharded command with --out DIR to finish them",
    )


def command(args: argparse.Namespace) -> int:
    from harness.commands.run import print_summary
    from harness.execution.merge import merge_runs

    record = merge_runs(args.run_dirs, args.out, partial=args.partial)
    print(f"merged {len(args.run_dirs)} shard(s) of run {record.run_id} -> {args.out}", file=sys.stderr)
    print_summary(record)
    return 0
