"""``harness report RUN_DIR``: a run as one static HTML page (the logic: harness.analysis.report)."""

from __future__ import annotations

import sys

from harness.analysis.report import REPORT_FILE, write_report


def add_parser(sub) -> None:
    p = sub.add_parser(
        "report",
        description=(
            "Write one self-contained HTML file (no network): the run's metadata and scores, a per-question "
            "table (click a header to sort) and every transcript with its tool calls, the titles returned, "
            "token counts and per-metric scores."
        ),
    )
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run directory")
    p.add_argument("--out", help=f"HTML file to write (default RUN_DIR/{REPORT_FILE})")


def command(args) -> int:
    from pathlib import Path

    from harness.records import check_output_path

    if not args.out and Path(args.run_dir).is_dir():  # --out is checked by the CLI; the default too, before the work
        check_output_path(Path(args.run_dir) / REPORT_FILE, "report")
    path = write_report(args.run_dir, args.out)
    print(f"wrote {path}", file=sys.stderr)
    return 0
