"""Hostile files for the bad-input tests: FIFOs, device nodes, and a deadline so a command that
blocks on one fails its test instead of hanging the suite."""

from __future__ import annotations

import contextlib
import os
import signal
import stat
from pathlib import Path

import pytest


class Hung(BaseException):
    """A command ran past its deadline: blocked, e.g. in open() on a FIFO (BaseException: the CLI's
    last-resort ``except Exception`` must not turn it into an ordinary failure line)."""


@contextlib.contextmanager
def deadline(seconds: int):
    """SIGALRM interrupts a blocked open()/read() (PEP 475 retries only when the handler returns),
    so a hang fails the test instead of hanging the suite."""

    def fire(signum, frame):
        raise Hung(f"still running after {seconds} s (blocked on a FIFO or reading without end?)")

    previous = signal.signal(signal.SIGALRM, fire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def make_device(path: Path) -> Path:
    """A character device like /dev/null (1, 3), made in the test's folder: if the code under test
    wrongly renames over it, the machine's /dev/null survives (as root, such a rename succeeds)."""
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        return path
    except OSError:  # no CAP_MKNOD
        if os.access("/dev", os.W_OK):  # /dev/null itself would be at risk
            pytest.skip("cannot make a device node, and /dev is writable")
        return Path("/dev/null")


def unblock_fifo(path: Path) -> None:
    """Release whoever a wrong test left blocked on ``path``: a reader gets EOF, a writer a reader."""
    for flags in (os.O_WRONLY, os.O_RDONLY):
        try:
            os.close(os.open(path, flags | os.O_NONBLOCK))
        except OSError:
            pass
