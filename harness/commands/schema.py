"""``harness schema results|samples|config|retrieval``: the JSON Schema (draft 2020-12) of what a run (or
``harness retrieval-eval``) writes."""

from __future__ import annotations

import json
import sys

from harness.execution.record import SCHEMAS


def add_parser(sub) -> None:
    p = sub.add_parser(
        "schema",
        description=(
            "Print the JSON Schema (draft 2020-12) of a run's results.json (results), of one line of its "
            "samples.jsonl or failures.jsonl (samples), or of the run configuration (config: config.json's "
            "'config', results.json's 'config', the keys of a --config YAML nested as generation/backend), or of "
            "what harness retrieval-eval writes (retrieval: retrieval.json)."
        ),
    )
    p.add_argument("name", choices=sorted(SCHEMAS), help="which schema")
    p.add_argument("--out", help="write it to this file instead of stdout")


def command(args) -> int:
    from harness.execution.record import json_schema
    from harness.records import check_output_path, write_bytes_atomic

    text = json.dumps(json_schema(args.name), indent=2, ensure_ascii=False) + "\n"
    if args.out:
        write_bytes_atomic(check_output_path(args.out, "--out"), text.encode())
        print(f"wrote {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0
