"""What a strategy does on the run's event loop stays its own sample's failure.

Every sample runs on one event loop, so a strategy can reach past ``solve``: ``sys.exit`` in a task
it started, or in a callback (``loop.call_soon(sys.exit, 5)``), leaves the loop at once (asyncio
re-raises SystemExit from any callback: the run ended rc 0 or 5, no line); cancelling the run's own
tasks looked like Ctrl-C (rc 130); ``loop.stop()`` ended the run as ``internal error``. With the
guard installed on the loop:

- a callback or task step scheduled from a sample's context (``SAMPLE``, which every task the
  sample starts inherits) runs contained: a SystemExit it raises fails that sample;
- tasks are ``GuardedTask``: strategy code of one sample cancelling a task it did not start (the
  run's, another sample's) is refused and fails its own sample; the harness's own cancels (timeouts,
  Ctrl-C, kill, the first error stopping the run) are never refused;
- ``loop.stop()`` from a sample's strategy code is refused and fails its sample.

Where no sample can hold it (a thread's ``call_soon_threadsafe(sys.exit)``, a task that outlived
its sample), the run stops with one line naming the strategy, exit status 5 (``StrategyStoppedRun``).
A strategy that blocks the loop for good is ended by the watchdog (``harness.execution.watchdog``).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import threading
import traceback
import weakref
from pathlib import Path
from typing import Any, Awaitable, Callable

from harness._namespace import own_dir
from harness.errors import StrategyStoppedRun
from harness.execution.watchdog import SAMPLE, _LIBRARY_DIRS

EXIT_STRATEGY = StrategyStoppedRun.exit_code  # the strategy ended, stopped or froze the run (one line names it)

# the harness's own code: a cancel or stop it makes in a sample's context is never the strategy's
# (agents/ tools/ wiki_snapshot/ sit beside harness/ in a clone, inside it in a wheel)
_OWN_DIRS = (str(Path(__file__).resolve().parents[1]) + "/", *(str(own_dir(n)) + "/" for n in ("agents", "tools", "wiki_snapshot")))
_PATCHED = ("call_soon", "call_at", "call_soon_threadsafe", "stop")
_RUNNERS = str(Path(asyncio.__file__).parent / "runners.py")  # asyncio.run's Ctrl-C handler cancels the main task


class StrategyEscape(Exception):
    """A strategy reached past its sample (the reason): that sample's failure."""


class GuardedTask(asyncio.Task):
    """A task that notes the sample it was started for (None: the run's own) and refuses a cancel
    made by another sample's strategy code."""

    _harness_guard: "LoopGuard | None" = None
    _harness_owner: str | None = None

    def cancel(self, msg: Any = None) -> bool:
        guard = self._harness_guard
        if guard is not None and not guard.may_cancel(self):
            return False
        return super().cancel(msg)


class _Contained:
    """A callback run for sample ``owner`` (None: scheduled from a thread outside any sample): the
    SystemExit it raises is that sample's failure, not the loop's end."""

    __slots__ = ("guard", "owner", "callback")

    def __init__(self, guard: "LoopGuard", owner: str | None, callback: Callable[..., Any]):
        self.guard, self.owner, self.callback = guard, owner, callback

    def __call__(self, *args: Any) -> Any:
        try:
            return self.callback(*args)
        except SystemExit as exc:
            self.guard.escaped(self.owner, exc, self.callback, args)

    def __repr__(self) -> str:
        return repr(self.callback)


def _callback_name(callback: Any, args: tuple) -> str:
    name = getattr(callback, "__qualname__", None) or type(callback).__name__
    module = getattr(callback, "__module__", None)
    shown = ", ".join(repr(a)[:40] for a in args[:3])
    return f"{module + '.' if module and module != 'builtins' else ''}{name}({shown})"


def _strategy_frame() -> str | None:
    """Where the strategy's code made the call in progress (``FILE:LINE in FUNCTION``), or None when
    the innermost code outside the standard library and installed packages is the harness's own
    (or asyncio.run's Ctrl-C handler)."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename == __file__:  # this guard's own frames
        frame = frame.f_back
    while frame is not None:
        name = frame.f_code.co_filename
        if name.startswith(_OWN_DIRS) or name == _RUNNERS:
            return None
        if not name.startswith(_LIBRARY_DIRS):
            return f"{name}:{frame.f_lineno} in {frame.f_code.co_name}"
        frame = frame.f_back
    return None  # libraries only (a plugin installed as a package is among them): not refused


def _task_name(task: asyncio.Task) -> str:
    owner = task._harness_owner if isinstance(task, GuardedTask) else None
    return f"sample {owner}'s task {task.get_name()}" if owner is not None else f"the run's task {task.get_name()}"


class LoopGuard:
    """Installed on one loop (nested installs count); ``current()`` finds it."""

    _guards: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopGuard]" = weakref.WeakKeyDictionary()

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.depth = 0
        self.stopping = False  # Ctrl-C or a kill: every cancel is the harness's
        self.who = "the strategy"  # "agent NAME", set by the runner
        self.samples: dict[str, asyncio.Future] = {}  # sample in flight -> its failure, once it escapes
        self.run_fault: asyncio.Future | None = None  # an escape no sample holds: the run stops
        self.stray: StrategyStoppedRun | None = None  # such an escape while no run was there to stop
        self._saved: dict[str, Any] = {}

    @classmethod
    def install(cls, loop: asyncio.AbstractEventLoop | None = None) -> "LoopGuard":
        loop = loop or asyncio.get_running_loop()
        guard = cls._guards.get(loop)
        if guard is None:
            guard = cls._guards[loop] = cls(loop)
        if guard.depth == 0:
            guard._patch()
        guard.depth += 1
        return guard

    @classmethod
    def current(cls) -> "LoopGuard | None":
        try:
            guard = cls._guards.get(asyncio.get_running_loop())
        except RuntimeError:
            return None
        return guard if guard is not None and guard.depth else None

    def uninstall(self) -> None:
        self.depth -= 1
        if self.depth == 0:
            self._unpatch()

    # the loop's methods ------------------------------------------------------------
    def _patch(self) -> None:
        loop = self.loop
        saved = {name: getattr(loop, name) for name in _PATCHED}
        own = {name: loop.__dict__[name] for name in _PATCHED if name in getattr(loop, "__dict__", {})}
        previous_factory = loop.get_task_factory()
        guard = self

        def call_soon(callback, *args, context=None):
            owner = SAMPLE.get() if context is None else context.get(SAMPLE)
            if owner is not None:
                callback = _Contained(guard, owner, callback)
            return saved["call_soon"](callback, *args, context=context)

        def call_at(when, callback, *args, context=None):  # call_later too
            owner = SAMPLE.get() if context is None else context.get(SAMPLE)
            if owner is not None:
                callback = _Contained(guard, owner, callback)
            return saved["call_at"](when, callback, *args, context=context)

        def call_soon_threadsafe(callback, *args, context=None):  # from a thread: its owner may be none
            owner = SAMPLE.get() if context is None else context.get(SAMPLE)
            return saved["call_soon_threadsafe"](_Contained(guard, owner, callback), *args, context=context)

        def stop():
            owner = SAMPLE.get()
            where = _strategy_frame() if owner is not None and not guard.stopping else None
            if where is not None:
                guard.fault(owner, f"called loop.stop() at {where}")
                return None
            return saved["stop"]()

        def task_factory(loop, coro, **kwargs):
            if previous_factory is not None:  # someone else's tasks: not guarded
                return previous_factory(loop, coro, **kwargs)
            task = GuardedTask(coro, loop=loop, **kwargs)
            context = kwargs.get("context")
            task._harness_owner = SAMPLE.get() if context is None else context.get(SAMPLE)
            task._harness_guard = guard
            return task

        try:
            for name, method in (("call_soon", call_soon), ("call_at", call_at),
                                 ("call_soon_threadsafe", call_soon_threadsafe), ("stop", stop)):  # fmt: skip
                setattr(loop, name, method)
        except AttributeError:  # a loop written in C (uvloop): its methods cannot be replaced
            self._saved = {}
            return
        self._saved = {"own": own, "factory": previous_factory}
        loop.set_task_factory(task_factory)

    def _unpatch(self) -> None:
        if not self._saved:
            return
        for name in _PATCHED:
            if name in self._saved["own"]:
                setattr(self.loop, name, self._saved["own"][name])
            else:
                delattr(self.loop, name)  # the class's own method again
        self.loop.set_task_factory(self._saved["factory"])
        self._saved = {}

    # who may cancel -----------------------------------------------------------------
    def may_cancel(self, task: GuardedTask) -> bool:
        caller = SAMPLE.get()
        if caller is None or self.stopping or caller == task._harness_owner:
            return True
        where = _strategy_frame()
        if where is None:
            return True
        self.fault(caller, f"cancelled {_task_name(task)}, not one it started, at {where}")
        return False

    # failures ---------------------------------------------------------------------
    def escaped(self, owner: str | None, exc: SystemExit, callback: Any, args: tuple) -> None:
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename != __file__]
        at = f" (at {frames[-1].filename}:{frames[-1].lineno} in {frames[-1].name})" if frames else ""
        task = getattr(callback, "__self__", None)
        if isinstance(task, asyncio.Task):
            if task.done() and not task.cancelled():
                task.exception()  # said in the sample's row, not logged again as never retrieved
            reason = f"called sys.exit({exc.code!r}) in a task it started{at}"
        else:
            called = _callback_name(callback, args)
            reason = f"scheduled {called} on the event loop, which raised SystemExit({exc.code!r}){at}"
        self.fault(owner, reason)

    def fault(self, owner: str | None, reason: str) -> None:
        """``owner``'s sample fails with ``reason``; with no sample in flight to hold it, the run stops."""
        future = self.samples.get(owner) if owner is not None else None
        if future is not None:
            if not future.done():  # the first reason is kept
                future.set_exception(StrategyEscape(f"{reason} (a strategy cannot end or stop the run)"))
            return
        whose = f"for sample {owner}, after that sample ended" if owner is not None else "outside any sample"
        stop = StrategyStoppedRun(
            f"{self.who}: {reason} {whose}; the run stops (exit {EXIT_STRATEGY}): the samples already finished "
            "are kept, rerun the same command to resume once the strategy is fixed"
        )
        if self.run_fault is not None and not self.run_fault.done():
            self.run_fault.set_exception(stop)
        elif self.stray is None:
            self.stray = stop

    @contextlib.contextmanager
    def sample(self, key: str):
        """The future that fails while ``key`` is attempted, once its strategy escapes."""
        future = self.loop.create_future()
        self.samples[key] = future
        try:
            yield future
        finally:
            if self.samples.get(key) is future:
                del self.samples[key]
            if future.done():
                future.exception()  # retrieved: it was said in the row (or the sample ended first)

    def open_run(self) -> asyncio.Future:
        self.run_fault = self.loop.create_future()
        return self.run_fault

    def close_run(self) -> None:
        self.run_fault = None  # an escape from now on is kept for run_guarded (``stray``)


def leftover_tasks(files: set[str]) -> list[asyncio.Task]:
    """Tasks started for samples, still running, whose coroutine is defined in one of ``files`` (the
    strategy's module): not a backend's or a library's, which a sample may have started too."""
    found = []
    for task in asyncio.all_tasks():
        if isinstance(task, GuardedTask) and task._harness_owner is not None and not task.done():
            code = getattr(task.get_coro(), "cr_code", None)
            if code is not None and code.co_filename in files:
                found.append(task)
    return found


def run_guarded(make: Callable[[], Awaitable[Any]]) -> Any:
    """``asyncio.run`` for a command that runs strategies: the work runs in a guarded task, Ctrl-C
    and a kill (SIGTERM) cancel it (interrupted, as before); a cancel of the main task from anywhere
    else (a strategy cancelling every task) is ignored: the work goes on. A SystemExit that still
    leaves the loop, or an escape no run claimed, is StrategyStoppedRun (one line, exit 5)."""

    async def main() -> Any:
        loop = asyncio.get_running_loop()
        guard = LoopGuard.install(loop)
        main_task = asyncio.current_task()
        work = loop.create_task(make())
        interrupts = 0

        def stop() -> None:
            guard.stopping = True
            work.cancel()

        def on_sigint(signum: int, frame: Any) -> None:  # as asyncio.run's own: the second Ctrl-C raises
            nonlocal interrupts
            interrupts += 1
            if interrupts > 1:
                raise KeyboardInterrupt
            stop()
            loop.call_soon_threadsafe(lambda: None)  # wakes the loop

        in_main = threading.current_thread() is threading.main_thread()
        previous = signal.getsignal(signal.SIGINT) if in_main else None
        if in_main:
            signal.signal(signal.SIGINT, on_sigint)
            loop.add_signal_handler(signal.SIGTERM, stop)
        try:
            while True:
                try:
                    result = await asyncio.shield(work)
                    break
                except asyncio.CancelledError:
                    if work.done():
                        raise
                    # not ours (ours cancel ``work``): a strategy cancelling every task
                    uncancel = getattr(main_task, "uncancel", None)
                    if uncancel is not None:
                        uncancel()
        finally:
            if in_main:
                loop.remove_signal_handler(signal.SIGTERM)
                signal.signal(signal.SIGINT, previous)
            stray = guard.stray
            guard.uninstall()
        if stray is not None:
            raise stray
        return result

    try:
        return asyncio.run(main())
    except SystemExit as exc:
        raise StrategyStoppedRun(
            f"sys.exit({exc.code!r}) was called on the run's event loop outside any sample (by a strategy or "
            f"another plugin); the run stopped (exit {EXIT_STRATEGY}): the samples already finished are kept, "
            "rerun the same command to resume"
        ) from None
