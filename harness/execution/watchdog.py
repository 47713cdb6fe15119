"""The event loop's watchdog. Every sample runs on one event loop; a strategy that blocks it
(``time.sleep``, synchronous I/O in ``solve``) freezes every sample, and no timeout can fire while
it does. A ticker on the loop notes each tick; a thread notices when the ticks stop:

- once the loop has stood still ``after_s`` seconds (``min(10 s, --sample-timeout)``), one line on
  stderr names the sample whose task holds it, the strategy, and the line it is blocked at;
- each stall is charged to that sample: the others' clocks do not count it (``own_s``), so they are
  not timed out for it, while the blocking sample's own time includes it and it is a ``timeout``
  failure once the loop is free, if that took it past ``--sample-timeout``;
- a sample that holds the loop past ``--sample-timeout`` plus ``--freeze-grace`` in one stall (a
  call that never returns) ends the process: one line names the strategy, the sample and its line,
  exit status 5. Every row written is already whole in its file (``JsonlAppender`` writes and
  flushes a line at a time, and the loop thread, stuck in the strategy, writes none meanwhile), so
  the same command, rerun, resumes as after a kill.

Tasks a sample starts (``asyncio.gather`` inside ``solve``) are its own too: a task factory notes
the sample current (``SAMPLE``) where each task is created.
"""

from __future__ import annotations

import asyncio
import os
import sys
import sysconfig
import threading
import time
import weakref
from contextvars import ContextVar
from typing import Any, Callable

from harness.errors import StrategyStoppedRun

# Set by SampleAttempts around one sample; the tasks it starts inherit it.
SAMPLE: ContextVar[str | None] = ContextVar("harness_sample", default=None)

TICK_S = 0.1
SLACK_S = 0.1  # a tick later than this is a stall
_LIBRARY_DIRS = tuple({sysconfig.get_paths()[k] for k in ("stdlib", "purelib", "platlib")})


class LoopWatch:
    def __init__(
        self,
        after_s: float,
        who: str = "",
        stream: Any = None,
        tick_s: float = TICK_S,
        freeze_after_s: float | None = None,
        freeze_limit: str = "",
        on_freeze: Callable[[str], None] | None = None,
    ):
        self.after_s = after_s
        # one stall of a sample this long: the run ends (``freeze_limit`` says which options made it)
        self.freeze_after_s, self.freeze_limit = freeze_after_s, freeze_limit
        self.on_freeze = on_freeze or _end_process
        self.who = who  # "agent NAME": the strategy, for the line
        self.stream = stream
        self.tick_s = tick_s
        self.stalled_s = 0.0  # seconds the loop stood still (beyond a tick) since start, all stalls
        self.stalls: list[dict[str, Any]] = []  # each noticed holder of a stall: sample, seconds, where
        self._charged: dict[str | None, float] = {}  # sample -> seconds it held the loop
        self._seen: dict[str | None, list] = {}  # the stall going on: holder -> [seconds seen, where]
        self._lock = threading.Lock()
        self._owners: "weakref.WeakKeyDictionary[asyncio.Task, str]" = weakref.WeakKeyDictionary()
        self._last_tick = time.monotonic()
        self._said = False
        self._stop = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ticker: asyncio.Task | None = None
        self._previous_factory = None

    # on the loop ---------------------------------------------------------------------
    def start(self) -> "LoopWatch":
        self._loop = loop = asyncio.get_running_loop()
        self._thread_id = threading.get_ident()
        self._previous_factory = loop.get_task_factory()
        loop.set_task_factory(self._task_factory)
        self._last_tick = time.monotonic()
        self._ticker = loop.create_task(self._tick())
        threading.Thread(target=self._watch, name="loop-watchdog", daemon=True).start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.cancel()
        if self._loop is not None:
            self._loop.set_task_factory(self._previous_factory)

    def _task_factory(self, loop, coro, **kwargs):
        factory = self._previous_factory
        task = factory(loop, coro, **kwargs) if factory is not None else asyncio.Task(coro, loop=loop, **kwargs)
        owner = SAMPLE.get()
        if owner is not None:
            self._owners[task] = owner
        return task

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(self.tick_s)
            now = time.monotonic()
            with self._lock:
                self.stalled_s += self._pending(now)
                for owner, (seconds, where) in self._seen.items():
                    self._charged[owner] = self._charged.get(owner, 0.0) + seconds
                    self.stalls.append({"sample": owner, "seconds": round(seconds, 3), "at": where})
                self._seen = {}
                self._said = False
                self._last_tick = now

    def _pending(self, now: float) -> float:
        """The stall going on (the ticker has not run since), in seconds beyond a tick."""
        gap = now - self._last_tick - self.tick_s
        return gap if gap > SLACK_S else 0.0

    def stalled_total(self) -> float:
        return self.stalled_s + self._pending(time.monotonic())

    def charged_to(self, sample: str) -> float:
        """Seconds ``sample`` held the loop (in the stall going on too)."""
        with self._lock:
            return self._charged.get(sample, 0.0) + self._seen.get(sample, [0.0])[0]

    def blocked_at(self, sample: str) -> str:
        """Where ``sample`` last held the loop."""
        with self._lock:
            if sample in self._seen:
                return self._seen[sample][1]
        return next((s["at"] for s in reversed(self.stalls) if s["sample"] == sample), "an unknown place")

    # in the watchdog thread -------------------------------------------------------
    def _watch(self) -> None:
        looked = time.monotonic()
        while not self._stop.wait(self.tick_s):
            now = time.monotonic()
            idle = now - self._last_tick - self.tick_s
            if idle <= SLACK_S or self._loop is None:
                looked = now
                continue
            # who holds the loop now is charged the time since the last look (since the stall began, first)
            owner, where = self._culprit()
            with self._lock:
                seen = self._seen.setdefault(owner, [0.0, where])
                seen[0] += now - max(looked, self._last_tick + self.tick_s)
                seen[1] = where
                said, self._said = self._said, self._said or idle >= self.after_s
            looked = now
            if owner is not None and self.freeze_after_s is not None and idle >= self.freeze_after_s:
                self._stop.set()
                self.on_freeze(
                    f"error: {self.who or 'the strategy'} froze the run: sample {owner} has held the event loop "
                    f"{idle:.0f} s at {where}, past {self.freeze_limit or f'{self.freeze_after_s:g} s'}; no sample "
                    f"can go on, so the run stops here (exit {StrategyStoppedRun.exit_code}): the samples already "
                    "finished are kept; rerun the same command to resume once the strategy awaits instead of blocking"
                )
                return
            if idle >= self.after_s and not said:
                whose = f"sample {owner}" + (f" ({self.who})" if self.who else "") if owner else "the harness"
                print(
                    f"warning: the event loop has not run for {idle:.0f} s: {whose} blocks it at {where}; every "
                    "sample waits meanwhile (a strategy must await, not block: asyncio.sleep, asyncio.to_thread); "
                    "a sample past --sample-timeout fails once the loop is free",
                    file=self.stream or sys.stderr,
                    flush=True,
                )

    def _culprit(self) -> tuple[str | None, str]:
        task = asyncio.current_task(self._loop)
        owner = self._owners.get(task) if task is not None else None
        frame = sys._current_frames().get(self._thread_id)
        return owner, _where(frame)


def _end_process(line: str) -> None:
    """The loop thread is stuck in the strategy and never unwinds: the line, then the process ends
    at once (as a kill would: children die with it, harness.lifeline; rows are whole lines)."""
    from harness.redact import redact

    try:  # straight to the file descriptor: the stuck thread may hold sys.stderr's lock
        os.write(2, (redact(line) + "\n").encode("utf-8", "backslashreplace"))
    finally:
        os._exit(StrategyStoppedRun.exit_code)


def _where(frame) -> str:
    """``FILE:LINE in FUNCTION`` of the innermost frame outside the standard library and installed
    packages (the plugin's or the harness's own line), else the innermost."""
    innermost = frame
    while frame is not None:
        if not frame.f_code.co_filename.startswith(_LIBRARY_DIRS):
            break
        frame = frame.f_back
    frame = frame or innermost
    if frame is None:
        return "an unknown place"
    return f"{frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}"
