"""A child process that dies with the run, ``kill -9`` of the run included.

Two independent ways, in the child (``python -m ... --parent PID``): Linux's parent-death signal
(the kernel SIGKILLs the child when the thread that started it ends: the run starts its children
from its event-loop thread, which lives as long as the run), and a thread polling the parent pid
(any POSIX system; also a child whose signal was set too late). A child started with
``subprocess.Popen`` rather than ``multiprocessing`` leaves no resource tracker behind either.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from typing import Any

POLL_S = 1.0


def die_with_parent(parent: int | None, poll_s: float | None = POLL_S) -> None:
    """Call first thing in a child started by process ``parent``: it exits when ``parent`` is gone."""
    if not parent:
        return
    try:
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:  # not Linux: the poll below still notices
        pass
    if os.getppid() != parent:  # the parent died before the line above
        os._exit(0)
    if poll_s:

        def watch() -> None:
            while os.getppid() == parent:  # re-parented (to init or a subreaper) once the parent dies
                time.sleep(poll_s)
            os._exit(0)

        threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def spawn_piped(argv: list[str], stderr: Any = None) -> tuple[subprocess.Popen, Any, Any]:
    """Start ``argv`` with a pipe each way (its stdin and stdout), in a session of its own (Ctrl-C
    reaches the run, which stops the child itself). Returns (the process, a connection to it, one
    from it); the child calls ``die_with_parent`` first. Call from the thread that lives as long as
    the run (the event loop's): the parent-death signal follows the thread that started the child."""
    from multiprocessing.connection import Connection

    to_child_r, to_child_w = os.pipe()
    from_child_r, from_child_w = os.pipe()
    try:
        process = subprocess.Popen(
            argv, stdin=to_child_r, stdout=from_child_w, stderr=stderr, close_fds=True, start_new_session=True
        )
    except BaseException:
        os.close(to_child_w)
        os.close(from_child_r)
        raise
    finally:
        os.close(to_child_r)
        os.close(from_child_w)
    return process, Connection(to_child_w, readable=False), Connection(from_child_r, writable=False)
