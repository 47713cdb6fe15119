"""A child process that dies with the run, ``kill -9`` of the run included.

Two independent ways, in the child (``python -m ... --parent PID``): Linux's parent-death signal
(the kernel SIGKILLs the child when the thread that started it ends: the run starts its children
from its event-loop thread, which lives as long as the run), and a thread polling the parent pid
(any POSIX system; also a child whose signal was set too late). A child started with
``subprocess.Popen`` rather than ``multiprocessing`` leaves no resource tracker behind either.

An external program (``vllm run-batch``) cannot call ``die_with_parent``, and its own children
(vLLM's engine processes) would outlive a parent-death signal sent to it alone. ``spawn_guarded``
runs it under a guard (``python -m harness.lifeline``): the guard leads a process group (a session)
of its own, the program and its children in it; it is a child subreaper (Linux), so a descendant
that leaves the group is still its own once orphaned. The guard holds the read end of a pipe whose
write end only the run holds: end of file on it means the run let go of it or died (kill -9
included: the kernel closes the pipe), on any POSIX system. Then, or on SIGTERM, the guard stops
the group (SIGTERM, ``--grace`` seconds, then SIGKILL to every process left in it and every
orphan it adopted), removes the ``--remove`` folder, and exits. The program's exit status is
written to ``--exit-file`` when it ends on its own; the guard then stops what it left running and
waits for the run to let go (the run reads the program's output first).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
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


# ---------------------------------------------------------------------------- a guarded program
PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h (man 2 prctl): orphaned descendants re-parent to us


def _prctl(option: int, value: int) -> None:
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(option, value)
    except Exception:  # not Linux: the pipe still says when the run is gone
        pass


def _left_behind(me: int) -> list[int]:
    """Processes of the guard's group, and orphans adopted by it, other than itself (Linux: /proc;
    zombies excluded: they are reaped, not killed)."""
    found = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for entry in entries:
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()  # after "pid (comm) ": state ppid pgrp ...
        if len(fields) < 3 or fields[0] == b"Z":
            continue
        if int(fields[2]) == me or int(fields[1]) == me:
            found.append(int(entry))
    return found


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _kill_left_behind(me: int) -> None:
    """SIGKILL whatever is left of the group and the adopted orphans, until nothing is."""
    if not os.path.isdir("/proc"):  # elsewhere: the group's SIGTERM was all (the guard must live on)
        return
    for _ in range(100):
        left = _left_behind(me)
        if not left:
            break
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.02)
        _reap()
    _reap()


def guard(argv: list[str], remove: str | None, exit_file: str | None, grace: float) -> int:
    """The guard's body (see the module's docstring); its stdin is the run's pipe."""
    me = os.getpid()
    stop = [False]  # a plain flag: set from a signal handler, where taking a lock could deadlock

    def stopped(*_: Any) -> None:
        stop[0] = True

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, stopped)
    _prctl(PR_SET_CHILD_SUBREAPER, 1)

    def watch_run() -> None:
        try:
            while os.read(0, 4096):
                pass
        except OSError:
            pass
        stopped()  # end of file: the run let go, or died

    threading.Thread(target=watch_run, name="run-watch", daemon=True).start()
    code: int | None = None
    try:
        child = subprocess.Popen(argv, stdin=subprocess.DEVNULL)  # in the guard's group
    except OSError as exc:
        print(f"cannot start {argv[0]}: {exc}", file=sys.stderr, flush=True)
        child, code = None, 127
    while child is not None and not stop[0]:
        code = child.poll()
        if code is not None:
            break
        time.sleep(0.1)
    if child is not None and code is None:  # the run let go or died first: stop the program
        try:
            os.killpg(me, signal.SIGTERM)  # the guard's own handler only sets the flag
        except OSError:
            pass
        try:
            code = child.wait(grace)
        except subprocess.TimeoutExpired:
            pass
    _kill_left_behind(me)  # a program that ended on its own may have left workers running
    if child is not None:
        code = child.wait()
    if exit_file and not stop[0]:
        tmp = f"{exit_file}.tmp"
        with open(tmp, "w") as f:
            f.write(f"{code}\n")
        os.replace(tmp, exit_file)
        while not stop[0]:  # until the run has read the output and lets go (or dies)
            time.sleep(0.1)
        _kill_left_behind(me)
    if remove:
        shutil.rmtree(remove, ignore_errors=True)
    return 0


def spawn_guarded(argv: list[str], *, remove: str | Path | None, exit_file: str | Path | None, grace: float,
                  stdout: Any = None, stderr: Any = None) -> tuple[subprocess.Popen, int]:
    """Start ``argv`` under a guard (see the module's docstring); returns (the guard, the write end
    of its pipe: close it to have the guard stop the program and remove ``remove``)."""
    command = [sys.executable, "-m", "harness.lifeline", "--grace", str(grace)]
    if remove is not None:
        command += ["--remove", str(remove)]
    if exit_file is not None:
        command += ["--exit-file", str(exit_file)]
    read, write = os.pipe()  # neither end inheritable by other children (PEP 446)
    try:
        process = subprocess.Popen(
            [*command, "--", *argv], stdin=read, stdout=stdout, stderr=stderr, close_fds=True, start_new_session=True
        )
    except BaseException:
        os.close(write)
        raise
    finally:
        os.close(read)
    return process, write


def read_exit_file(path: str | Path) -> int | None:
    """The guarded program's exit status, once it ended on its own (None before)."""
    try:
        return int(Path(path).read_text().strip())
    except (OSError, ValueError):
        return None


def main(args: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m harness.lifeline", description="guard a program (see the module)")
    parser.add_argument("--grace", type=float, default=30.0)
    parser.add_argument("--remove")
    parser.add_argument("--exit-file")
    parser.add_argument("argv", nargs=argparse.REMAINDER)
    ns = parser.parse_args(args)
    argv = ns.argv[1:] if ns.argv[:1] == ["--"] else ns.argv
    if not argv:
        parser.error("no program to guard")
    return guard(argv, ns.remove, ns.exit_file, ns.grace)


if __name__ == "__main__":
    sys.exit(main())
