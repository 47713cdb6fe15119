"""One writer per run directory: an exclusive ``flock`` on ``RUN_DIR/.lock``.

The kernel drops the lock when its holder dies (kill -9 included), so a stale lock never blocks a
rerun. The file holds the holder's pid, for the message a second writer gets. Whoever holds the
lock is the only process that can be writing into the directory, so temporary files left there
by a killed writer are removed on acquiring it.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from harness.errors import HarnessError

LOCK_FILE = ".lock"

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows has no flock; the harness targets POSIX
    fcntl = None  # type: ignore[assignment]


class RunDirBusy(HarnessError):
    """Another process holds the run directory."""


def _holder(path: Path) -> str:
    try:
        pid = path.read_text(encoding="utf-8").strip()
    except OSError:
        pid = ""
    return f"pid {pid}" if pid.isdigit() else "another process"


def writer_of(run_dir: str | Path) -> str | None:
    """Who holds the run directory for writing now (``pid 123``), None when nobody does; for readers
    that must not create or change anything in it (the lock file is only opened to read)."""
    path = Path(run_dir) / LOCK_FILE
    if fcntl is None or not path.is_file():
        return None
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # refused only while a writer holds it exclusively
    except BlockingIOError:
        return _holder(path)
    except OSError:
        return None
    finally:
        os.close(fd)  # drops the shared lock, if taken
    return None


def flock_path(path: Path, exclusive: bool = True) -> int:
    """An open descriptor of ``path`` (created if missing) holding its ``flock``; BlockingIOError
    while another process holds it. The file may be unlinked by a holder that just released it
    (``PathLock``): the lock is on the file at the path now, never an orphan inode."""
    mode = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
    for _ in range(50):
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
        except BaseException:
            os.close(fd)
            raise
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)
        time.sleep(0.01)
    raise BlockingIOError(f"could not lock {path}")  # pragma: no cover - only under an unlink storm


class PathLock:
    """An exclusive ``flock`` on a lock file of its own (``path``, holding the holder's pid), removed
    on release: one process at a time does what it guards (``harness merge`` on one ``--out``).
    The kernel drops it when the holder dies, kill -9 included. ``holder()`` names who holds it."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._fd: int | None = None

    def acquire(self) -> bool:
        """True once held; False while another process holds it."""
        if fcntl is None:  # pragma: no cover
            return True
        try:
            self._fd = flock_path(self.path)
        except BlockingIOError:
            return False
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, f"{os.getpid()}\n".encode(), 0)
        return True

    def holder(self) -> str:
        return _holder(self.path)

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            self.path.unlink(missing_ok=True)  # while held: a waiter re-checks the inode (flock_path)
        finally:
            os.close(fd)


class RunLock:
    """``with RunLock(run_dir, purpose="run"):`` holds the directory for the block.

    ``exclusive=False`` takes a shared lock: readers exclude writers but not each other."""

    def __init__(self, run_dir: str | Path, purpose: str = "run", exclusive: bool = True):
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK_FILE
        self.purpose = purpose
        self.exclusive = exclusive
        self._fd: int | None = None
        self.created_dir = False

    def acquire(self) -> RunLock:
        if fcntl is None:  # pragma: no cover
            return self
        if self.run_dir.exists() and not self.run_dir.is_dir():
            raise HarnessError(f"{self.run_dir} is a file, not a run directory")
        if not self.run_dir.exists():
            try:
                self.run_dir.mkdir(parents=True)
                self.created_dir = True
            except FileExistsError:
                pass
            except OSError as exc:
                raise HarnessError(f"cannot create the run directory {self.run_dir}: {exc.strerror}") from None
        try:
            self._fd = flock_path(self.path, self.exclusive)
        except BlockingIOError:
            verb = "written" if self.exclusive else "read"
            raise RunDirBusy(
                f"{self.run_dir} is in use by another harness process ({_holder(self.path)}); "
                f"wait for it to finish before this {self.purpose}, or choose another directory"
                + ("" if self.exclusive else f" (it cannot be {verb} meanwhile)")
            ) from None
        except OSError as exc:
            raise HarnessError(f"cannot lock the run directory {self.run_dir}: {exc.strerror}") from None
        if self.exclusive:
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, f"{os.getpid()}\n".encode(), 0)
            remove_leftover_temp_files(self.run_dir)
        return self

    def release(self, remove_if_empty: bool = False) -> None:
        """Unlock. ``remove_if_empty``: a run that wrote nothing leaves no directory behind."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            if remove_if_empty and self.created_dir:
                others = [p for p in self.run_dir.iterdir() if p.name != LOCK_FILE]
                if not others:
                    self.path.unlink(missing_ok=True)
                    try:
                        self.run_dir.rmdir()
                    except OSError:
                        pass
        finally:
            os.close(fd)  # closing drops the flock

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def is_locked(run_dir: str | Path) -> str | None:
    """The holder ("pid N") when a process is writing ``run_dir`` now, else None."""
    if fcntl is None:  # pragma: no cover
        return None
    path = Path(run_dir) / LOCK_FILE
    if not path.exists():
        return None
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return _holder(path)
    finally:
        os.close(fd)
    return None


def remove_leftover_temp_files(directory: Path) -> list[str]:
    """Temp files of atomic writes (``.NAME.XXXX.tmp``) a killed writer left behind."""
    removed = []
    for path in directory.glob(".*.tmp"):
        if path.is_file():
            path.unlink(missing_ok=True)
            removed.append(path.name)
    return removed


__all__ = ["LOCK_FILE", "PathLock", "RunDirBusy", "RunLock", "flock_path", "is_locked", "remove_leftover_temp_files"]
