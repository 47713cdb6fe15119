"""A full disk ends a command with one line that says so and how to go on (rerunning resumes: the rows
written stay), not an "internal error"; other OS errors are still the last resort's."""

from __future__ import annotations

import errno
import importlib

import pytest

from harness.cli import main
from harness.commands import COMMANDS


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT])
def test_a_full_disk_is_one_line_naming_the_file(code, monkeypatch, capsys):
    module = importlib.import_module(COMMANDS["list"][0])

    def full(args):
        raise OSError(code, "ignored", "/runs/r1/samples.jsonl")

    monkeypatch.setattr(module, "command", full)
    assert main(["list"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: /runs/r1/samples.jsonl: ")
    assert "rerun the same command" in err and "internal error" not in err


def test_another_os_error_is_still_an_internal_error(monkeypatch, capsys):
    module = importlib.import_module(COMMANDS["list"][0])

    def broken(args):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(module, "command", broken)
    assert main(["list"]) == 1
    assert capsys.readouterr().err.startswith("internal error: OSError: [Errno 5] Input/output error")
