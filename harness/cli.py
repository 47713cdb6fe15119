"""``harness`` command line: builds one parser from ``harness/commands/`` and dispatches to it.
Bad input of any command is one line on stderr and exit 2."""

from __future__ import annotations

import argparse
import errno
import importlib
import io
import logging
import os
import sys
from pathlib import Path

from harness._version import __version__
from harness.commands import COMMANDS
from harness.errors import USER_ERRORS, HarnessError

EXIT_BAD_INPUT = 2


class OneLineErrorParser(argparse.ArgumentParser):
    """Usage errors as one line and exit 2, like every other bad input (sub-parsers inherit it)."""

    def error(self, message: str):
        self.exit(
            EXIT_BAD_INPUT, f"error: {self.prog}: {message}{_moved_knob_hint(message)} (see {self.prog} --help)\n"
        )


def _moved_knob_hint(message: str) -> str:
    """`--max-rounds 3` is a strategy knob now: say how to set it."""
    if not message.startswith("unrecognized arguments"):
        return ""
    from harness.commands.run import MOVED_TO_KNOBS

    for token in message.split(":", 1)[-1].split():
        name = token.split("=")[0].lstrip("-").replace("-", "_")
        if token.startswith("--") and name in MOVED_TO_KNOBS:
            name = "text_protocol_strict" if name == "loose_text_protocol" else name
            return f"; strategy knobs are set with --agent-arg, e.g. --agent-arg {name}=VALUE"
    return ""


class _CommandHelp:
    """The sub-parsers action, adding each command's ``harness --help`` line from COMMANDS."""

    def __init__(self, sub):
        self._sub = sub

    def add_parser(self, name: str, **kwargs):
        kwargs.setdefault("help", COMMANDS[name][1])
        return self._sub.add_parser(name, **kwargs)


def chosen_command(argv: list[str]) -> str | None:
    """The sub-command of ``argv``: its first word that is not an option (global options take no value)."""
    first = next((a for a in argv if not a.startswith("-")), None)
    return first if first in COMMANDS else None


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The whole parser; given ``argv``, only its command's module is imported and built, the others
    are placeholders showing their one-line help (``harness --help`` imports no command at all)."""
    parser = OneLineErrorParser(
        prog="harness",
        description="Evaluate LLMs and agents on many-answer, many-document QA over Wikipedia (FanOutQA, ...).",
    )
    parser.add_argument("--version", action="version", version=f"harness {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log retries and server activity")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    only = chosen_command(argv) if argv is not None else None
    for name, (module, line) in COMMANDS.items():
        if argv is None or name == only:
            importlib.import_module(module).add_parser(_CommandHelp(sub))
        else:
            sub.add_parser(name, help=line, add_help=False)
    _add_verbose(sub)  # `harness run -v` as well as `harness -v run`
    _add_docs_epilog(parser)
    return parser


DOCS_PAGE = "docs/cli.md"


def docs_anchor(words: list[str]) -> str:
    """The CLI reference's anchor of a command: ``["snapshot", "build"]`` -> ``snapshot-build``."""
    return "-".join(words)


def _add_docs_epilog(parser: argparse.ArgumentParser, words: tuple[str, ...] = ()) -> None:
    """Every parser's help ends with the documentation page that says more (sub-commands' too)."""
    parser.epilog = f"docs: {DOCS_PAGE}#{docs_anchor(list(words))}" if words else f"docs: {DOCS_PAGE} (and docs/)"
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                if child.add_help:  # placeholders of commands not built show no help of their own
                    _add_docs_epilog(child, (*words, name))


def _add_verbose(sub) -> None:
    for command in sub.choices.values():
        if not any("--verbose" in a.option_strings for a in command._actions):
            command.add_argument(
                "-v",
                "--verbose",
                action="store_true",
                default=argparse.SUPPRESS,
                help="log retries and server activity",
            )
        for action in command._actions:
            if isinstance(action, argparse._SubParsersAction):
                _add_verbose(action)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    from harness.text import LOG_ERRORS, argv_problem, env_problem

    # a path or value no file could record (argv, HARNESS_CACHE_DIR, ...): refused before any work
    problem = argv_problem(argv) or env_problem()
    if problem is not None:
        from harness.redact import redact

        print(f"error: harness: {redact(problem)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    # printed text holding a lone surrogate: its escape, not a crash (surrogateescape, the C locale's and
    # UTF-8 mode's handler, writes only \udc80-\udcff and raises on "\ud800")
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper) and stream.errors in ("strict", "surrogateescape"):
            stream.reconfigure(errors=LOG_ERRORS)
    parser = build_parser(argv)
    args, extra = parser.parse_known_args(argv)
    trailing = getattr(args, "trailing_positionals", None)
    if extra and trailing and not any(word.startswith("-") for word in extra):
        # positionals after an option (`harness list agents -v FILE.py:NAME`): argparse matched its list before
        getattr(args, trailing).extend(extra)
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    logging.basicConfig(
        level=logging.INFO if getattr(args, "verbose", False) else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    from harness.redact import install_log_filter, redact

    install_log_filter()
    if not args.command:
        parser.print_help()
        return EXIT_BAD_INPUT
    command = importlib.import_module(COMMANDS[args.command][0]).command
    try:
        _check_common_paths(args)
        return command(args)
    except USER_ERRORS as exc:
        print(f"error: {_one_line(redact(exc))}", file=sys.stderr)
        return getattr(exc, "exit_code", EXIT_BAD_INPUT)  # 3: a process the run needs died
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `harness list | head`: the reader left; not an error worth a line
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        return 141
    except Exception as exc:  # noqa: BLE001 - last resort: one line, traceback only on request
        if os.environ.get("HARNESS_DEBUG"):
            raise
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            # the machine's, not the harness's: every row written before it stays (a torn last line
            # is repaired when the run resumes), so the same command, rerun with space, goes on
            where = f"{_one_line(redact(exc.filename))}: " if exc.filename else ""
            print(
                f"error: {where}{os.strerror(exc.errno)} while writing; free some space and rerun the same "
                "command: the samples already finished are kept and not asked again",
                file=sys.stderr,
            )
            return 1
        print(
            f"internal error: {type(exc).__name__}: {_one_line(redact(exc))} (set HARNESS_DEBUG=1 for the traceback)",
            file=sys.stderr,
        )
        return 1


# commands whose --out is a folder; every other --out is a file (export inspect's too: one log)
OUT_IS_FOLDER = {"run", "ablate", "export", "merge"}


def _out_is_folder(args: argparse.Namespace) -> bool:
    return args.command in OUT_IS_FOLDER and not (args.command == "export" and args.format == "inspect")


def _check_common_paths(args: argparse.Namespace) -> None:
    """Paths every command treats alike, checked before any work so a bad one costs nothing."""
    from harness.records import check_output_path

    if getattr(args, "out", None):
        check_output_path(args.out, "--out", directory=_out_is_folder(args))
    checkpoint = getattr(args, "bleurt_checkpoint", None)
    if checkpoint and not Path(checkpoint).is_dir():
        what = "not a folder" if Path(checkpoint).exists() else "not found"
        raise HarnessError(f"--bleurt-checkpoint {checkpoint}: {what}, expected a checkpoint folder")


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


if __name__ == "__main__":
    raise SystemExit(main())
