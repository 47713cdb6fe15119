"""``harness leaderboard DIR``: every run under a folder in one table (the logic: harness.analysis.leaderboard)."""

from __future__ import annotations

import sys

from harness.analysis.leaderboard import build_leaderboard, format_markdown


def add_parser(sub) -> None:
    p = sub.add_parser(
        "leaderboard",
        description=(
            "One row per run found under DIR (any folder holding a results.json), keyed by model, dataset, "
            "split, version, setting and agent, with every metric, tokens, cost, context size, native tool "
            "calling and the run's path. Runs sharing a key show the knobs whose values differ. The markdown "
            "table goes to stdout."
        ),
    )
    p.add_argument("root", metavar="DIR", help="folder to search for runs (e.g. results/)")
    p.add_argument("--out", help="write the leaderboard JSON here")


def command(args) -> int:
    from harness.records import write_json_atomic

    board = build_leaderboard(args.root)
    for warning in board["warnings"]:
        print(f"warning: {warning}", file=sys.stderr)
    if args.out:
        write_json_atomic(args.out, board)
        print(f"wrote {args.out} ({len(board['rows'])} runs)", file=sys.stderr)
    print(format_markdown(board))
    return 0
