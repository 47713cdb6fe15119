"""``harness compare RUN_A RUN_B [RUN_C ...]``: paired comparison on the shared questions (the logic: harness.analysis.compare)."""

from __future__ import annotations

import sys


def add_parser(sub) -> None:
    p = sub.add_parser(
        "compare",
        description=(
            "Compare runs question by question on the questions they share: per metric, each run's value with "
            "its 95%% interval, each later run's difference from the first (the baseline) with its interval "
            "(Newcombe's for two shares, else a paired bootstrap), a p-value (exact McNemar for 0/1 values, else a "
            "paired permutation test of the units the interval resamples: whole clusters when clustered), the same "
            "p adjusted by Holm's method over every test the comparison ran, and the questions that changed most. "
            "Where too few questions differ for a test to reach p < 0.05 at all, it says so. A run that answered "
            "nothing is shown as failed and not compared (a failed baseline is refused); a run's samples that finished "
            "without an answer (max_steps, refused, ...) are said beside its numbers, with why (scored as wrong). "
            "Runs of different "
            "datasets (or dataset files) are refused unless --allow-mismatch."
        ),
    )
    p.add_argument("runs", nargs="+", metavar="RUN", help="run directories (or their results.json); the first is the baseline")
    p.add_argument("--metric", dest="metrics", action="append", metavar="NAME",
                   help="only this metric or METRIC.LEAF (repeat); default: all, headline numbers printed")
    p.add_argument("--all", dest="show_all", action="store_true", help="print every number, not only the headline ones")
    p.add_argument("--allow-mismatch", action="store_true", help="compare runs of different datasets or versions anyway")
    p.add_argument(
        "--format",
        choices=["text", "md", "latex", "csv"],
        default="text",
        help="text (default), or the comparison as a table: markdown, LaTeX (booktabs) or CSV (its notes on stderr)",
    )
    p.add_argument("--out", help="write the comparison JSON here")
    p.add_argument("--plot", help="write a PNG of the differences with their intervals here")


def command(args) -> int:
    from harness.analysis.compare import comparison_grid, compare_runs, format_comparison, load_run, plot_comparison
    from harness.analysis.grid import render
    from harness.errors import HarnessError
    from harness.records import check_output_path, write_json_atomic

    if len(args.runs) < 2:
        raise HarnessError("compare needs at least two runs (RUN_A RUN_B ...)")
    for option, path in (("--out", args.out), ("--plot", args.plot)):
        if path:
            check_output_path(path, option)
    runs = [load_run(path, failed_ok=True) for path in args.runs]
    result = compare_runs(runs, allow_mismatch=args.allow_mismatch, metrics=args.metrics)
    headline_only = not (args.show_all or args.metrics)
    if args.format == "text":
        print(format_comparison(result, headline_only=headline_only))
    else:
        grid = comparison_grid(result, headline_only=headline_only)
        print(render(grid, args.format))
        if args.format == "csv":  # stdout stays data: the notes go to stderr
            for note in grid.notes:
                print(f"note: {note}", file=sys.stderr)
    if args.out:
        write_json_atomic(args.out, result)
        print(f"wrote {args.out}", file=sys.stderr)
    if args.plot:
        plot_comparison(result, args.plot)
        print(f"wrote {args.plot}", file=sys.stderr)
    # every run but the baseline failed: the report is printed, and nothing was compared
    return 1 if all(run.get("failed") for run in result["runs"][1:]) else 0
