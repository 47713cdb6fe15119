"""``harness score``: a thin layer over ``harness.api.score``."""

from __future__ import annotations

import argparse
import json
import sys


def add_parser(sub) -> None:
    from harness.commands.run import add_scoring_options

    p = sub.add_parser(
        "score",
        description=(
            "Score generations without calling any model. Either re-score a finished run "
            "(harness score RUN_DIR), or score a file in FanOutQA's official submission format, one "
            '{"id", "answer"} object per line (harness score --dataset fanoutqa:dev@nov23 --generations FILE.jsonl). '
            "A run's counts are said before its numbers (finished, failed, answered) and its samples that ended "
            "without an answer after them, with why, as harness run says them. Exit status: 0; 4 when no sample "
            "(no generation) has an answer, as harness run."
        ),
    )
    p.add_argument(
        "run_dir",
        nargs="?",
        help="a run directory to re-score on its own dataset, with its own metrics and options unless given; "
        "the metrics scored replace their own numbers in its results.json, every other metric's stay",
    )
    p.add_argument("--dataset", help="NAME[:SPLIT][@VERSION] the generations answer")
    p.add_argument(
        "--data-path",
        help="read the dataset from this file instead of the vendored copy; with RUN_DIR, where the run's "
        "--data-path file is now (its sha256 must match)",
    )
    p.add_argument("--generations", help='JSONL file of {"id", "answer"} lines')
    p.add_argument("--out", help="write the scores JSON here (default: print it)")
    add_scoring_options(p, suppress=False)
    p.add_argument(
        "--confidence",
        action="store_true",
        default=None,
        help="the answers end with a stated confidence ('Confidence: N%%', as harness run --confidence asks): read and "
        "removed before scoring (default: as the run was made; generations: no)",
    )
    p.add_argument(
        "--citations",
        action="store_true",
        default=None,
        help="the answers cite pages as [Title] (as harness run --citations asks): read and removed before scoring "
        "(default: as the run was made; generations: no)",
    )
    p.add_argument(
        "--only-answered",
        action="store_true",
        help="score only questions that have an answer (official only_score_answered); default counts them as 0",
    )
    p.add_argument(
        "--drop-other-metrics",
        action="store_true",
        help="with RUN_DIR: its results.json keeps only the metrics scored now (default: the others' numbers stay)",
    )


def command(args: argparse.Namespace) -> int:
    from harness.api import score
    from harness.commands.run import print_scores
    from harness.records import write_json_atomic

    scores = score(
        args.run_dir,
        dataset=args.dataset,
        generations=args.generations,
        data_path=args.data_path,
        metrics=args.metrics,
        judge=args.judge,
        bleurt_checkpoint=args.bleurt_checkpoint,
        cluster_by=args.cluster_by,
        strip_reasoning=args.strip_reasoning,
        metric_options=args.metric_options,
        max_answer_chars=args.max_answer_chars,
        confidence=args.confidence,
        citations=args.citations,
        only_answered=args.only_answered,
        drop_other_metrics=args.drop_other_metrics,
    )
    if args.out:
        write_json_atomic(args.out, scores.as_dict())
        print(f"wrote {args.out}", file=sys.stderr)
    else:
        print(json.dumps(scores.as_dict(), indent=2))
    where = sys.stdout if args.out else sys.stderr  # stdout stays JSON when it is JSON
    outcomes = _outcomes(args.run_dir)
    if outcomes is not None:  # as `harness run` says it: how the samples ended, then the numbers
        print(outcomes.counts_line(), file=where)
    print(f"scored {scores.meta.n_answered}/{scores.meta.n_questions}", file=where)
    print_scores(scores, where)
    return _say_none_answered(scores, outcomes, where, args.only_answered)


def _outcomes(run_dir: str | None):
    """How the re-scored run's samples ended (``harness.analysis.row.Outcomes``, from its results.json),
    None for generations or a run with no results.json (killed: no record of how its samples ended)."""
    from harness.analysis.row import Outcomes
    from harness.execution.record import read_results, results_path

    if not run_dir or not results_path(run_dir).is_file():
        return None
    return Outcomes.of(read_results(run_dir))


def _say_none_answered(scores, outcomes, where, only_answered: bool) -> int:
    """Beside the numbers, how many samples ended without an answer and why; where none produced
    one, one line and ``harness run``'s exit status for it (4): the numbers are all missing answers
    scored as wrong (or none at all), whichever command printed them. A run's failed samples are
    said in its counts line and do not change the status (``harness run`` retries them, not this)."""
    from harness.analysis.row import SCORED_AS_WRONG
    from harness.commands.run import EXIT_NONE_ANSWERED

    if outcomes is not None:
        if outcomes.unanswered and not outcomes.no_answer:
            print(outcomes.note(), file=where)
        line = outcomes.none_answered_line()
    else:  # generations: an answer is a non-null "answer"
        n, how = scores.meta.n_questions or 0, "none scored (--only-answered)" if only_answered else SCORED_AS_WRONG
        line = f"no generation has an answer (0 of {n} questions): {how}" if n and not scores.meta.n_answered else None
    if line is None:
        return 0
    print(f"{line}; exit status {EXIT_NONE_ANSWERED}", file=sys.stderr)
    return EXIT_NONE_ANSWERED
