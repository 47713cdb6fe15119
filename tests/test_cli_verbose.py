"""``-v`` means the same before and after the sub-command (``harness -v run`` = ``harness run -v``), for
every command and nested command (issue 14; in place since issue 9, kept by this test)."""

from __future__ import annotations

import argparse

import pytest

from harness.cli import build_parser
from harness.commands import COMMANDS


def _subparsers(parser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield name, sub
                for inner, subsub in _subparsers(sub):
                    yield f"{name} {inner}", subsub


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_takes_verbose_after_it(command):
    parser = build_parser([command])
    built = dict(_subparsers(parser))
    names = [n for n in built if n == command or n.startswith(command + " ")]
    assert names
    for name in names:
        assert any("-v" in a.option_strings for a in built[name]._actions), name


@pytest.mark.parametrize(
    "argv, verbose",
    [
        (["run", "-v", "--model", "scripted/echo"], True),
        (["-v", "run", "--model", "scripted/echo"], True),
        (["run", "--model", "scripted/echo", "--verbose"], True),
        (["run", "--model", "scripted/echo"], False),
        (["snapshot", "info", "x.db", "-v"], True),
        (["-v", "snapshot", "info", "x.db"], True),
    ],
)
def test_verbose_before_or_after_the_command(argv, verbose):
    args = build_parser(argv).parse_args(argv)
    assert getattr(args, "verbose", False) is verbose
