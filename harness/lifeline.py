"""A child process that dies with the run, ``kill -9`` of the run included.

Two independent ways, in the child (``python -m ... --parent PID``): Linux's parent-death signal
(the kernel SIGKILLs the child when the thread that started it ends: the run starts its children
from its event-loop thread, which lives as long as the run), and a thread polling the parent pid
(any POSIX system; also a child whose signal was set too late). A child started with
``subprocess.Popen`` rather than ``multiprocessing`` leaves no resource tracker behind either.
"""

from __future__ import annotations

import os
import threading
import time

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
