"""``harness export fanoutqa-submission RUN_DIR... --out DIR`` (the logic: harness.analysis.export)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from harness.argtypes import number
from harness.analysis.export import SUBMISSION_TYPES, TEMPLATE_FIELDS, export_fanoutqa_submission, load_metadata_file


def add_parser(sub) -> None:
    p = sub.add_parser(
        "export",
        description=(
            "fanoutqa-submission: write FanOutQA's leaderboard submission from test-set runs, one per setting: "
            "DIR/{closedbook,openbook,evidenceprovided}-generations/NAME.jsonl and DIR/metadata/NAME.json in the "
            "official template (checked after writing). Dev-set and non-FanOutQA runs are refused; so is a run "
            "that does not answer every test question, unless --allow-partial."
        ),
    )
    p.add_argument("format", choices=["fanoutqa-submission"], help="what to export")
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="finished fanoutqa:test runs, one per setting")
    p.add_argument("--out", required=True, help="submission folder (the repository's leaderboard-submissions/)")
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
