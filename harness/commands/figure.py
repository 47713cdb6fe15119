"""``harness figure ablation|scores|effort``: figures for papers from finished work (the drawing:
harness.analysis.figures)."""

from __future__ import annotations

import argparse
import sys

from harness.commands._common import run_subcommand


def _common_options(p) -> None:
    p.add_argument(
        "--metric",
        dest="metrics",
        action="append",
        metavar="M",
        help="a panel for this metric: a full key (fanoutqa-string.acc.strict), a metric name (its headline "
        "keys) or a key's end (acc.strict); repeat for more panels (default: the dataset's headline)",
    )
    p.add_argument(
        "--label",
        dest="labels",
        action="append",
        metavar="TEXT",
        help="the name shown for each input, in order (repeat once per input; default: its model, and what "
        "else differs between the inputs)",
    )
    p.add_argument(
        "--out", required=True, help="the figure file: FILE.png, FILE.svg or FILE.pdf (format from the suffix)"
    )


def add_parser(sub) -> None:
    p = sub.add_parser(
        "figure",
        description=(
            "Draw a figure for a paper from finished work, nothing rerun: one panel per metric (default: the "
            "dataset's headline), display names in axes and legends, each metric on its own scale (0-1 or "
            "0-100), 95%% intervals. A run that answered nothing is marked failed, never drawn as 0."
        ),
    )
    sub = p.add_subparsers(dest="figure_command", metavar="SUBCOMMAND")
    a = sub.add_parser(
        "ablation",
        help="context-length ablations (harness ablate folders), a line each",
        description=(
            "Redraw context-length ablations from their ablation.json: one line per folder (models, agents) "
            "with its 95%% interval band against the context size, the answerability ceiling dashed (one black "
            "line when the folders share it), a gap where a size answered nothing."
        ),
    )
    a.add_argument(
        "folders", nargs="+", metavar="FOLDER", help="harness ablate output folders (or their ablation.json)"
    )
    _common_options(a)
    s = sub.add_parser(
        "scores",
        help="runs' headline scores with their 95%% intervals, a row per run",
        description=(
            "Each run's value with its 95%% interval, one row per run and one panel per metric (the "
            "scores-by-model view). A run that answered nothing shows '(failed)' and no dot; a metric "
            "without a value shows '(n/a)'."
        ),
    )
    s.add_argument("runs", nargs="+", metavar="RUN", help="run directories (or their results.json)")
    _common_options(s)
    e = sub.add_parser(
        "effort",
        help="accuracy against searches, tokens, model calls or cost per question, a line per run",
        description=(
            "Each run's questions binned by what they spent (0, then doublings: 1, 2-3, 4-7, ...), a point per "
            "bin at its mean effort and the questions' mean value, with its 95%% interval (Wilson for a share); "
            "one line per run, one panel per metric and effort axis. Read from each run's samples.jsonl and "
            "scores, nothing rerun; a metric that is no mean of per-question values cannot be binned."
        ),
    )
    e.add_argument("runs", nargs="+", metavar="RUN", help="run directories (their samples.jsonl is read)")
    e.add_argument(
        "--x",
        dest="axes",
        action="append",
        choices=["searches", "tokens", "model_calls", "cost"],
        help="an effort axis, a panel each; repeat for more (default: searches and tokens)",
    )
    _common_options(e)
    p.set_defaults(figure_parser=p)


def command(args: argparse.Namespace) -> int:
    handlers = {"ablation": _ablation, "scores": _scores, "effort": _effort}
    return run_subcommand(args, handlers, "figure_command", "figure_parser")


def _write(spec, out: str) -> int:
    from harness.analysis.figures import save

    save(spec, out)
    for note in spec.notes:
        print(f"note: {note}", file=sys.stderr)
    titles = ", ".join(panel.title for panel in spec.panels)
    print(f"wrote {out}: {len(spec.panels)} panel(s) ({titles})", file=sys.stderr)
    return 0


def _check_out(out: str) -> None:
    """The format before any reading (harness.cli has checked the path can be written)."""
    from harness.analysis.figures import output_format

    output_format(out)


def _ablation(args: argparse.Namespace) -> int:
    from harness.analysis.ablate import read_sweep
    from harness.analysis.figures import ablation_spec

    _check_out(args.out)
    sweeps = [read_sweep(folder) for folder in args.folders]
    return _write(ablation_spec(sweeps, args.metrics, args.labels), args.out)


def _scores(args: argparse.Namespace) -> int:
    from harness.analysis.figures import scores_spec
    from harness.execution.record import read_results

    _check_out(args.out)
    runs = [(path, read_results(path)) for path in args.runs]
    return _write(scores_spec(runs, args.metrics, args.labels), args.out)


def _effort(args: argparse.Namespace) -> int:
    from pathlib import Path

    from harness.analysis.figures import effort_of_rows, effort_spec
    from harness.analysis.runs import load_rows
    from harness.execution.record import read_results

    _check_out(args.out)
    runs = []
    for path in args.runs:
        results = read_results(path)
        run_dir = Path(path).parent if Path(path).is_file() else Path(path)
        runs.append((path, results, effort_of_rows(load_rows(run_dir).finished.values())))
    return _write(effort_spec(runs, args.metrics, args.axes, args.labels), args.out)
