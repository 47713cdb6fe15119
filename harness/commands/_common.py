"""Helpers shared by the command modules."""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
from typing import Any, Callable


def run_subcommand(
    args: argparse.Namespace, handlers: dict[str, Callable[[argparse.Namespace], int]], chosen: str, parser: str
) -> int:
    """Call the handler of the sub-command in ``args.<chosen>``; without one, print ``args.<parser>``'s help."""
    handler = handlers.get(getattr(args, chosen, None))
    if handler is None:
        getattr(args, parser).print_help(sys.stderr)
        return 2
    return handler(args)


@contextlib.contextmanager
def sigterm_interrupts():
    """A kill (SIGTERM) unwinds like Ctrl-C, so a build removes its partial output."""

    def raise_interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, raise_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
