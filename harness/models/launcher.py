"""Start and stop a local OpenAI-compatible server (llama.cpp's Python server, vLLM) as a child.

``ServerLauncher`` picks a free loopback port, starts the command in its own process group with
stdout/stderr going to a log file, polls a readiness URL until the server answers (or the process
dies, or ``startup_timeout`` passes), and stops the whole group on ``stop()``/``close()``, when an
``async with`` block exits (also on Ctrl-C or an error), and at interpreter exit.

``attach(url)`` checks that an already running server answers ``/v1/models``.
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import httpx

from harness.errors import ModelError, ProcessDiedError, describe_exit
from harness.models.http_reply import loads_reply
from harness.redact import strip_credentials

log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"
LOG_TAIL_LINES = 20

# Every launcher with a live child (strong references: a dropped backend must not orphan its
# server), so interpreter exit can stop them all.
_LIVE: "set[ServerLauncher]" = set()
_LIVE_LOCK = threading.Lock()


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port that is free on ``host`` right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def port_is_open(port: int, host: str = LOOPBACK, timeout: float = 0.5) -> bool:
    """Whether something accepts TCP connections on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def server_root(url: str) -> str:
    """``http://h:p/v1/`` -> ``http://h:p``: the server root, without a trailing ``/v1``."""
    root = url.strip().rstrip("/")
    if root.endswith("/v1"):
        root = root[: -len("/v1")]
    return root


def api_base(url: str) -> str:
    """``http://h:p`` or ``http://h:p/v1`` -> ``http://h:p/v1`` (what the OpenAI SDK wants)."""
    return server_root(url) + "/v1"


def tail_lines(path: str | os.PathLike[str] | None, n: int = LOG_TAIL_LINES) -> list[str]:
    """The last ``n`` non-empty lines of a text file (empty if it cannot be read)."""
    if not path:
        return []
    try:
        with open(path, "r", encoding="utf-8", errors="replace") as fh:
            lines = collections.deque((line.rstrip() for line in fh if line.strip()), maxlen=n)
    except OSError:
        return []
    return list(lines)


def _parent_death_signal() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Linux: have the kernel SIGTERM the server if the harness dies without cleaning up (SIGKILL)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_PDEATHSIG = 1
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except Exception:
        pass


class ServerLauncher:
    """One child server process with a readiness check and reliable teardown.

    ``command`` is the argv, or a callable ``port -> argv`` when the port must appear in it
    (it does for both llama.cpp and vLLM). ``ready_path`` is polled with GET on
    ``http://127.0.0.1:PORT`` until it answers 200. The log goes to ``log_dir/NAME.log`` when
    ``log_dir`` is given (kept), else into a temporary folder removed on a clean ``stop()``.
    """

    def __init__(
        self,
        command: Sequence[str] | Callable[[int], Sequence[str]],
        *,
        name: str = "server",
        ready_path: str = "/v1/models",
        host: str = LOOPBACK,
        port: int | None = None,
        startup_timeout: float = 300.0,
        log_dir: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        unset_env: Sequence[str] = (),
        headers: Mapping[str, str] | None = None,
        grace_period: float = 10.0,
        poll_interval: float = 0.25,
        redact: Sequence[str] = (),
    ):
        self._command = command
        self.name = name
        self.ready_path = ready_path if ready_path.startswith("/") else "/" + ready_path
        self.host = host
        self.requested_port = port
        self.startup_timeout = startup_timeout
        self.log_dir = Path(log_dir) if log_dir else None
        self.env = dict(env) if env else None
        self.unset_env = tuple(unset_env)
        self.headers = dict(headers or {})
        self.grace_period = grace_period
        self.poll_interval = poll_interval
        self.redact = tuple(r for r in redact if r)  # secrets in argv (an --api-key) never shown

        self.port: int | None = None
        self.argv: list[str] = []
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path: Path | None = None
        self._tmpdir: str | None = None
        self._log_fh: Any = None
        self.startup_s: float | None = None
        self._failed = False

    # facts ---------------------------------------------------------------------
    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` (no ``/v1``)."""
        if self.port is None:
            raise ModelError(f"{self.name} has not been started")
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        """The OpenAI API base, ``http://127.0.0.1:PORT/v1``."""
        return self.url + "/v1"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def exit_error(self, what: str) -> ProcessDiedError | None:
        """``ProcessDiedError`` when the server process has exited on its own (its log then kept), else None."""
        if self.process is None or self.process.poll() is None:
            return None
        self._failed = True
        return ProcessDiedError(what, self.pid, self.process.returncode, str(self.log_path) if self.log_path else None)

    def exit_error_within(self, what: str, within: float = 2.0) -> ProcessDiedError | None:
        """``exit_error``, waiting up to ``within`` s for a process whose connections just dropped to exit."""
        deadline = time.monotonic() + within
        while True:
            error = self.exit_error(what)
            if error is not None or time.monotonic() >= deadline:
                return error
            time.sleep(0.05)

    async def wait_exit_error(self, what: str, within: float = 2.0) -> ProcessDiedError | None:
        """``exit_error_within`` off the event loop."""
        return await asyncio.to_thread(self.exit_error_within, what, within)

    def shown_command(self) -> str:
        """The command line as printed in messages and results, secrets masked."""
        text = " ".join(self.argv)
        for secret in self.redact:
            text = text.replace(secret, "***")
        return text

    def log_tail(self, n: int = LOG_TAIL_LINES) -> list[str]:
        return tail_lines(self.log_path, n)

    # lifecycle -----------------------------------------------------------------
    async def start(self) -> "ServerLauncher":
        """Launch and wait until ready; raise ModelError (with the log's last lines) if it is not."""
        if self.running():
            return self
        # A port picked by the OS can be taken by someone else before the server binds it;
        # when the log says so, try again on a fresh port (only if we picked it).
        attempts = 1 if self.requested_port else 3
        for attempt in range(1, attempts + 1):
            try:
                await self._start_once()
                return self
            except _PortTaken:
                self._stop_process()
                if attempt == attempts:
                    self._failed = True
                    raise ModelError(
                        f"{self.name} could not bind a port on {self.host} after {attempts} tries; "
                        f"log {self.log_path}: {' | '.join(self.log_tail(5))}"
                    ) from None
                log.warning("%s: port %s was taken, retrying on another", self.name, self.port)
            except BaseException:
                self._failed = True
                # ModelError, timeout, Ctrl-C (KeyboardInterrupt / CancelledError): never leave it behind.
                self.stop()
                raise
        raise AssertionError("unreachable")

    async def _start_once(self) -> None:
        self.port = self.requested_port or free_port(self.host)
        argv = self._command(self.port) if callable(self._command) else self._command
        self.argv = [str(a) for a in argv]
        if not self.argv:
            raise ModelError(f"{self.name}: empty command")
        self._open_log()

        env = dict(os.environ)
        for key in self.unset_env:
            env.pop(key, None)
        if self.env:
            env.update(self.env)

        preexec = _parent_death_signal if threading.current_thread() is threading.main_thread() else None
        log.info("starting %s: %s (log: %s)", self.name, self.shown_command(), self.log_path)
        started = time.monotonic()
        try:
            self.process = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=self._log_fh,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,  # own process group: we can signal the server and its children
                preexec_fn=preexec,
                close_fds=True,
            )
        except FileNotFoundError:
            raise ModelError(f"cannot start {self.name}: {self.argv[0]} not found") from None
        except OSError as exc:
            raise ModelError(f"cannot start {self.name} ({self.argv[0]}): {exc}") from None
        with _LIVE_LOCK:
            _LIVE.add(self)

        ready_url = self.url + self.ready_path
        deadline = started + self.startup_timeout
        async with httpx.AsyncClient(timeout=httpx.Timeout(5.0), headers=self.headers, trust_env=False) as client:
            while True:
                code = self.process.poll()
                if code is not None:
                    tail = self.log_tail()
                    if any("address already in use" in line.lower() for line in tail):
                        raise _PortTaken()
                    raise ModelError(
                        f"{self.name} ended with {describe_exit(code)} before it was ready "
                        f"(command: {self.shown_command()}; log {self.log_path}); last lines: "
                        + (" | ".join(tail) if tail else "(empty log)")
                    )
                try:
                    resp = await client.get(ready_url)
                    if resp.status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    tail = self.log_tail()
                    raise ModelError(
                        f"{self.name} was not ready at {ready_url} within {self.startup_timeout:.0f}s "
                        f"(log {self.log_path}); last lines: " + (" | ".join(tail) if tail else "(empty log)")
                    )
                await asyncio.sleep(self.poll_interval)
        self.startup_s = time.monotonic() - started
        log.info("%s ready at %s after %.1fs (pid %s)", self.name, self.url, self.startup_s, self.pid)

    def _open_log(self) -> None:
        self._close_log()
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            directory = self.log_dir
        else:
            if self._tmpdir is None:
                self._tmpdir = tempfile.mkdtemp(prefix=f"harness-{_safe(self.name)}-")
            directory = Path(self._tmpdir)
        self.log_path = directory / f"{_safe(self.name)}.log"
        self._log_fh = open(self.log_path, "ab", buffering=0)

    def _close_log(self) -> None:
        if self._log_fh is not None:
            try:
                self._log_fh.close()
            except OSError:
                pass
            self._log_fh = None

    def _stop_process(self) -> None:
        proc = self.process
        if proc is None:
            return
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                proc.wait(timeout=self.grace_period)
            except subprocess.TimeoutExpired:
                log.warning("%s (pid %s) ignored SIGTERM for %.0fs; killing it", self.name, proc.pid, self.grace_period)
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:  # pragma: no cover - unkillable (D state)
                    log.error("%s (pid %s) did not die after SIGKILL", self.name, proc.pid)
        else:
            # The leader is gone; make sure no stray children of it linger in the group.
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        with _LIVE_LOCK:
            _LIVE.discard(self)

    def stop(self) -> None:
        """Stop the server (SIGTERM to its group, SIGKILL after ``grace_period``). Safe to call twice."""
        if self.process is not None and self.process.poll() not in (None, 0):
            self._failed = True  # it died on its own: keep the log for the user
        self._stop_process()
        self._close_log()
        if self._tmpdir is not None and not self._failed:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            self._tmpdir = None

    async def close(self) -> None:
        """``stop()`` without blocking the event loop."""
        await asyncio.to_thread(self.stop)

    async def __aenter__(self) -> "ServerLauncher":
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __enter__(self) -> "ServerLauncher":  # sync use: ``with ServerLauncher(...) as s: asyncio.run(s.start())``
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def describe(self) -> dict[str, Any]:
        return {
            "url": self.url if self.port else None,
            "pid": self.pid,
            "command": self.shown_command(),
            "log": str(self.log_path) if self.log_path else None,
            "startup_s": round(self.startup_s, 2) if self.startup_s is not None else None,
        }


class _PortTaken(Exception):
    pass


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name) or "server"


def stop_all() -> None:
    """Stop every server this process launched (called at interpreter exit; the CLI may call it too)."""
    with _LIVE_LOCK:
        launchers = list(_LIVE)
    for launcher in launchers:
        try:
            launcher.stop()
        except Exception:  # pragma: no cover - best effort at exit
            log.exception("failed to stop %s", launcher.name)


atexit.register(stop_all)


async def attach(
    url: str,
    *,
    path: str = "/v1/models",
    timeout: float = 10.0,
    api_key: str | None = None,
    what: str = "server",
) -> dict[str, Any]:
    """Check that a running server answers ``GET URL/v1/models``; return its JSON.

    ``url`` may be given with or without the trailing ``/v1``.
    Raises ModelError("cannot reach WHAT at URL: reason") otherwise.
    """
    target = server_root(url) + (path if path.startswith("/") else "/" + path)
    url, shown = strip_credentials(url), strip_credentials(target)  # for the messages below
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        async with httpx.AsyncClient(timeout=timeout, headers=headers, trust_env=False) as client:
            resp = await client.get(target)
    except httpx.HTTPError as exc:
        reason = str(exc) or type(exc).__name__
        raise ModelError(f"cannot reach {what} at {url}: {reason}") from None
    if resp.status_code != 200:
        raise ModelError(f"cannot reach {what} at {url}: GET {shown} answered HTTP {resp.status_code}")
    try:
        return loads_reply(resp.content)
    except ValueError:  # not JSON, or nested past any reply's depth
        raise ModelError(f"cannot reach {what} at {url}: GET {shown} did not return JSON") from None


__all__ = ["ServerLauncher", "api_base", "attach", "free_port", "port_is_open", "server_root", "stop_all", "tail_lines"]
