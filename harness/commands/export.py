"""``harness export fanoutqa-submission RUN_DIR... --out DIR`` (the logic: harness.analysis.export) and
``harness export inspect RUN_DIR [--out FILE]`` (harness.analysis.inspect_log)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from harness.argtypes import number
from harness.analysis.export import SUBMISSION_TYPES, TEMPLATE_FIELDS, export_fanoutqa_submission, load_metadata_file
from harness.analysis.inspect_log import DEFAULT_FILE
from harness.errors import HarnessError

# options of the submission only: given, they are not None (--allow-partial: not False)
SUBMISSION_ONLY = {
    "metadata": "--metadata",
    "file_name": "--file-name",
    **{key: "--" + key.replace("_", "-") for key in TEMPLATE_FIELDS},
    "is_trained_for_function_calling": "--[no-]trained-for-function-calling",
}


def add_parser(sub) -> None:
    p = sub.add_parser(
        "export",
        description=(
            "fanoutqa-submission: write FanOutQA's leaderboard submission from test-set runs, one per setting: "
            "DIR/{closedbook,openbook,evidenceprovided}-generations/NAME.jsonl and DIR/metadata/NAME.json in the "
            "official template (checked after writing). Dev-set and non-FanOutQA runs are refused; so is a run "
            "that does not answer every test question, unless --allow-partial. "
            "inspect: write one run (finished or partial) as an Inspect AI eval log that `inspect view` and "
            "inspect_ai.log.read_eval_log open: its samples with their messages (tool calls, tool results, "
            "reasoning), per-question scores, headline numbers with their standard errors and intervals, and "
            "model usage; nothing is scored again. Needs inspect-ai (pip install 'manyanswer-harness[inspect]')."
        ),
    )
    p.add_argument("format", choices=["fanoutqa-submission", "inspect"], help="what to export")
    p.add_argument(
        "run_dirs",
        nargs="+",
        metavar="RUN_DIR",
        help="fanoutqa-submission: finished fanoutqa:test runs, one per setting; inspect: one run directory",
    )
    p.add_argument(
        "--out",
        help="fanoutqa-submission: the submission folder (the repository's leaderboard-submissions/; required); "
        f"inspect: the log file, FILE.eval or FILE.json (default RUN_DIR/{DEFAULT_FILE})",
    )
    p.add_argument("--metadata", help="YAML or JSON file with template fields; the options below override it")
    p.add_argument("--name", help="the name of your model/system")
    p.add_argument("--authors", help="the list of authors, in natural language")
    p.add_argument("--url", help="a link to the model's website (default: null)")
    p.add_argument("--citation", help="e.g. 'Zhu et al., 2024' ('' if none)")
    p.add_argument("--type", type=str.upper, choices=SUBMISSION_TYPES, help="FOUNDATION | FINETUNE | PROMPT | OTHER")
    p.add_argument("--details", help="model details, e.g. API revision or Hugging Face id (default: the --model)")
    p.add_argument(
        "--context", type=number(int, 1, 100_000_000), help="context length in tokens (default: the runs' context size)"
    )
    p.add_argument(
        "--trained-for-function-calling",
        dest="is_trained_for_function_calling",
        action=argparse.BooleanOptionalAction,
        help="is_trained_for_function_calling (default: true if a run used native tool calling)",
    )
    p.add_argument("--file-name", help="NAME of the files (default: --name, lower-cased, dashes)")
    p.add_argument("--allow-partial", action="store_true", help="export runs that do not answer every test question")


def command(args) -> int:
    if args.format == "inspect":
        return _inspect(args)
    if not args.out:
        raise HarnessError("export fanoutqa-submission: --out DIR is required (the submission folder)")
    fields: dict[str, Any] = load_metadata_file(args.metadata) if args.metadata else {}
    for key in TEMPLATE_FIELDS:
        value = getattr(args, key, None)
        if value is not None:
            fields[key] = value
    fields.setdefault("url", None)
    report = export_fanoutqa_submission(args.run_dirs, args.out, fields, args.file_name, args.allow_partial)
    for warning in report["warnings"]:
        print(f"warning: {warning}", file=sys.stderr)
    answers = ", ".join(f"{s} {n}" for s, n in report["answers"].items())
    print(f"wrote {args.out}: {', '.join(report['files'])} (answers: {answers}); checked against the template")
    return 0


def _inspect(args) -> int:
    from harness.analysis.inspect_log import export_inspect

    given = [flag for key, flag in SUBMISSION_ONLY.items() if getattr(args, key, None) is not None]
    given += ["--allow-partial"] if args.allow_partial else []
    if given:
        raise HarnessError(f"export inspect: {', '.join(given)} belong to fanoutqa-submission only")
    if len(args.run_dirs) != 1:
        raise HarnessError(f"export inspect: one RUN_DIR at a time, got {len(args.run_dirs)}")
    path, summary = export_inspect(args.run_dirs[0], args.out)
    for warning in summary["warnings"]:
        print(f"warning: {warning}", file=sys.stderr)
    failed = f", {summary['failed']} of them failed" if summary["failed"] else ""
    # the viewer lists every *.eval file, but a *.json one only under a name starting with an ISO time
    # (inspect_ai/log/_file.py, is_log_file): read_eval_log opens it under any name
    view = (
        f"inspect view --log-dir {path.parent}"
        if path.suffix.lower() == ".eval"
        else "inspect_ai.log.read_eval_log; inspect view lists a .json log only under a name starting "
        "with its time (2026-01-31T12-00-00_...json)"
    )
    print(
        f"wrote {path}: Inspect eval log, status {summary['status']} (run {summary['run_status']}), "
        f"{summary['samples']} samples{failed}; open it with {view}",
        file=sys.stderr,
    )
    return 0
