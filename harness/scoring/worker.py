"""The streaming-scoring worker: ``python -m harness.scoring.worker --parent PID``.

A plain child process (not ``multiprocessing``: no resource tracker, no re-import of the run's
``__main__``) that dies with the run (``harness.lifeline``). It reads pickled requests on stdin and
answers on a copy of its stdout, one at a time:

    ("warm", refs, options)                   -> ("ok", None, {})            load the metrics' libraries
    ("score", refs, options, samples, answers) -> ("ok", values, failed)     ``score_some`` per metric

``values`` holds one ``{metric: {"raw", "info"}}`` per (sample, answer); ``failed`` is ``{ref: reason}``
of the metrics that raised, each apart, so one metric's fault never costs the others their values.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import Any


def score_each_metric(samples, answers, refs: list[str], options) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """``score_some`` one metric at a time: the values of those that scored, the reasons of those that raised."""
    from harness.scoring.metrics import score_some

    values: list[dict[str, Any]] = [{} for _ in samples]
    failed: dict[str, str] = {}
    for ref in refs:
        try:
            scored = score_some(samples, answers, [ref], options)
        except BaseException as exc:  # noqa: BLE001 - the metric's own fault (sys.exit too), reported to the run
            failed[ref] = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
            continue
        for mine, theirs in zip(values, scored):
            mine.update(theirs)
    return values, failed


def _warm(refs: list[str], options) -> None:
    from harness.datasets.base import Sample

    probe = Sample(id="warm-up", question="", answer=["warm up"])
    score_each_metric([probe], ["warm up"], refs, options)  # a metric that cannot score a probe still scores samples


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.scoring.worker")
    parser.add_argument("--parent", type=int)
    args = parser.parse_args(argv)
    from harness.lifeline import die_with_parent

    die_with_parent(args.parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the run stops it; Ctrl-C is the run's
    from multiprocessing.connection import Connection

    # Replies go out on a copy of stdout; fd 1 then points at stderr, so what a metric prints
    # can never corrupt them.
    out = Connection(os.dup(1), readable=False)
    os.dup2(2, 1)
    inbox = Connection(0, writable=False)
    try:
        while True:
            message = inbox.recv()
            if message[0] == "warm":
                _warm(*message[1:])
                out.send(("ok", None, {}))
            elif message[0] == "score":
                refs, options, samples, answers = message[1:]
                out.send(("ok", *score_each_metric(samples, answers, refs, options)))
            else:
                return 0
    except (EOFError, OSError):  # the run closed its pipes, or is gone
        return 0


if __name__ == "__main__":
    sys.exit(main())
