"""``harness leaderboard DIR [DIR ...]``: every run under the folders in one table (the logic:
harness.analysis.leaderboard)."""

from __future__ import annotations

import sys

from harness.analysis.leaderboard import build_leaderboard, format_markdown


def add_parser(sub) -> None:
    p = sub.add_parser(
        "leaderboard",
        description=(
            "One row per run found under the folders (any folder holding a results.json; links are "
            "followed and each real run is listed once), keyed by model, dataset, split, version, setting "
            "and agent, with every metric, the questions scored and failed, tokens, cost, context size, "
            "native tool calling and the run's path. A run in which no sample finished shows as failed "
            "with n/a values, after the others; the samples that finished without an answer (max_steps, "
            "refused, ...) are counted in the 'no answer' column with why (and on stderr), scored as "
            "wrong. Runs sharing a key show the knobs whose values differ. Every folder passed over is "
            "named on stderr with the reason. The markdown table goes to stdout. Folders holding a "
            "retrieval.json (harness retrieval-eval --out-dir) are retriever rows: a table of their own "
            "(## Retrievers) and the JSON's 'retrievers', never mixed with the runs."
        ),
    )
    p.add_argument("roots", nargs="+", metavar="DIR", help="folders to search for runs (e.g. results/ runs/)")
    p.add_argument("--out", help="write the leaderboard JSON here (rows, and the folders passed over)")


def command(args) -> int:
    from harness.records import write_json_atomic

    board = build_leaderboard(args.roots)
    for skipped in board.skipped:
        print(f"skipped {skipped.path}: {skipped.reason}", file=sys.stderr)
    for warning in board.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    for row in board.rows:
        if row.outcome_note:
            print(f"note: {row.path}: {row.outcome_note}", file=sys.stderr)
    if args.out:
        write_json_atomic(args.out, board.to_json())
        retrievers = f", {len(board.retrievers)} retrievers" if board.retrievers else ""
        print(f"wrote {args.out} ({len(board.rows)} runs{retrievers})", file=sys.stderr)
    print(format_markdown(board))
    return 0
