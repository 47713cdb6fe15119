"""``harness table RUN_OR_FOLDER ...``: runs as a table for a paper (the logic: harness.analysis.table)."""

from __future__ import annotations

import sys


def add_parser(sub) -> None:
    p = sub.add_parser(
        "table",
        description=(
            "One row per run (model, setting, agent, context size) with the chosen numbers, each with its 95%% "
            "interval on the metric's own scale, the questions scored (n), those failed or never asked, and the "
            "samples that finished without an answer (a column where any did; why in the notes; scored as wrong). "
            "A folder stands for every run under it (symlinks followed, each run once). Columns have display "
            "names; a run of another dataset leaves a column blank (in LaTeX, each dataset is a section of its own "
            "columns); a number without a value is n/a, and a "
            "run that answered nothing reads failed, never 0. Each column's best value is bold (the lowest for cost, "
            "tokens and rounds) among runs scored on the same questions, none where they all agree. LaTeX uses "
            "booktabs, puts intervals on a second line and scales down to the line width where wider; CSV keeps "
            "the numbers unformatted."
        ),
    )
    p.add_argument("runs", nargs="+", metavar="RUN_OR_FOLDER", help="run directories (or results.json) and folders of runs")
    p.add_argument(
        "--metric",
        dest="metrics",
        action="append",
        metavar="M",
        help="a number (METRIC.LEAF, e.g. fanoutqa-string.acc.strict) or a metric (its headline numbers); "
        "repeat for several; default: each run's dataset headline",
    )
    p.add_argument("--format", choices=["md", "latex", "csv"], default="md", help="markdown (default), LaTeX or CSV")
    p.add_argument("--out", help="write the table to this file instead of stdout")


def command(args) -> int:
    from harness.analysis.grid import render
    from harness.analysis.table import build_table, table_grid
    from harness.records import check_output_path, write_bytes_atomic

    if args.out:
        check_output_path(args.out, "--out")
    table = build_table(args.runs, args.metrics)
    for line in table.skipped:
        print(f"warning: {line}", file=sys.stderr)
    grid = table_grid(table)
    text = render(grid, args.format) + "\n"
    if args.format == "csv":  # the file stays data: the notes go to stderr
        for note in grid.notes:
            print(f"note: {note}", file=sys.stderr)
    if args.out:
        write_bytes_atomic(args.out, text)
        print(f"wrote {args.out} ({len(table.rows)} runs)", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0
