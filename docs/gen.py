"""Generated documentation: the CLI reference (docs/cli.md) from the argparse parsers in
harness/commands/, and the JSON Schemas of a run's files (docs/schema/*.json) from the typed
models in harness/execution/record.py. Nothing here is edited by hand.

    python docs/gen.py          # write them
    python docs/gen.py --check  # exit 1 naming any stale file (tests and the mkdocs hook do this)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
WIDTH = "100"  # argparse wraps help at $COLUMNS: fixed, so the page does not depend on the terminal


def _help(parser: argparse.ArgumentParser) -> str:
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH
    try:
        # Python 3.10 titles the options "optional arguments:"; later versions "options:"
        return parser.format_help().replace("\noptional arguments:\n", "\noptions:\n").rstrip() + "\n"
    finally:
        if old is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = old


def _subcommands(parser: argparse.ArgumentParser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            yield from action.choices.items()


def cli_markdown() -> str:
    """docs/cli.md: ``harness --help`` and every (sub-)command's ``--help``, as the parsers print them."""
    sys.path.insert(0, str(ROOT))
    from harness.cli import build_parser, docs_anchor

    parser = build_parser()
    out = [
        "# CLI reference",
        "",
        "Generated from the parsers in `harness/commands/` by `python docs/gen.py`; a test fails when this",
        "page differs from what the parsers print, so it is what `harness COMMAND --help` says.",
        "",
        "```text",
        _help(parser).rstrip(),
        "```",
        "",
    ]

    def walk(p: argparse.ArgumentParser, words: list[str]) -> None:
        for name, child in _subcommands(p):
            path = [*words, name]
            out.extend([f"## {' '.join(path)}", "", f'<a id="{docs_anchor(path)}"></a>', ""])
            out.extend(["```text", _help(child).rstrip(), "```", ""])
            walk(child, path)

    walk(parser, [])
    return "\n".join(out).rstrip() + "\n"


def schema_texts() -> dict[str, str]:
    sys.path.insert(0, str(ROOT))
    from harness.execution.record import SCHEMAS, json_schema

    return {name: json.dumps(json_schema(name), indent=2, ensure_ascii=False) + "\n" for name in sorted(SCHEMAS)}


def generated() -> dict[Path, str]:
    """Every generated file and the text it must hold."""
    files = {DOCS / "cli.md": cli_markdown()}
    files.update({DOCS / "schema" / f"{name}.json": text for name, text in schema_texts().items()})
    return files


def stale() -> list[str]:
    """Generated files whose text on disk is not what the code generates now."""
    return [
        str(path.relative_to(ROOT))
        for path, text in generated().items()
        if not path.is_file() or path.read_text(encoding="utf-8") != text
    ]


def main(argv: list[str] | None = None) -> int:
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--check", action="store_true", help="only check; exit 1 if a file is stale")
    check = args.parse_args(argv).check
    if check:
        bad = stale()
        if bad:
            print(f"error: stale generated docs: {', '.join(bad)}; run python docs/gen.py", file=sys.stderr)
            return 1
        return 0
    for path, text in generated().items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
