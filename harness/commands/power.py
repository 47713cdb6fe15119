"""``harness power RUN --metric NAME --delta D``: questions needed to detect a difference, from a pilot run."""

from __future__ import annotations

import sys

from harness.argtypes import number


def add_parser(sub) -> None:
    p = sub.add_parser(
        "power",
        description=(
            "How many questions a comparison needs to detect a difference of --delta in a metric, from the "
            "per-question spread of a pilot run (two-sided test, normal approximation). With one run: two "
            "independent runs (unpaired). With --paired-with RUN_B: two runs on the same questions, from the "
            "spread of their per-question differences (usually far fewer questions)."
        ),
    )
    p.add_argument("run", metavar="RUN", help="the pilot run directory (or its results.json)")
    p.add_argument("--metric", required=True, help="METRIC.LEAF or a unique ending of one, e.g. acc.loose, em-f1.f1")
    p.add_argument("--delta", required=True, type=number(float, 0, 1e9, low_open=True),
                   help="the difference to detect, on the metric's scale (e.g. 0.03)")
    p.add_argument("--alpha", type=number(float, 0, 1, low_open=True), default=0.05, help="significance level (default 0.05)")
    p.add_argument("--power", type=number(float, 0, 1, low_open=True), default=0.8, help="power (default 0.8)")
    p.add_argument("--paired-with", metavar="RUN_B", help="a second pilot run on the same questions: paired design")
    p.add_argument("--out", help="write the answer as JSON here")


def command(args) -> int:
    from harness.errors import HarnessError
    from harness.analysis.power import format_power, power_analysis
    from harness.records import check_output_path, write_json_atomic

    if args.alpha >= 1 or args.power >= 1:
        raise HarnessError(f"{'--alpha' if args.alpha >= 1 else '--power'} must be < 1")
    if args.out:
        check_output_path(args.out, "--out")
    result = power_analysis(args.run, args.metric, args.delta, args.alpha, args.power, args.paired_with)
    print(format_power(result))
    if args.out:
        write_json_atomic(args.out, result)
        print(f"wrote {args.out}", file=sys.stderr)
    return 0
