"""Requests in flight, adapted to a provider that throttles: halved on a 429 (at least 1), raised
by one after a full window of answers without one (AIMD, as TCP does), never above the start.

One 429 wave halves once: a 429 of a request sent before the last cut was already answered by
that cut (the requests in flight then were sent at the old limit). Not bound to an event loop
(no asyncio primitives are kept between calls), so a backend can be used under several
``asyncio.run``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator

log = logging.getLogger(__name__)

MAX_CHANGES_RECORDED = 200  # a long throttled run must not bloat results.json


class AdaptiveLimit:
    def __init__(self, maximum: int, *, clock=time.monotonic):
        if maximum < 1:
            raise ValueError("maximum must be at least 1")
        self.maximum = maximum
        self.limit = maximum
        self.in_flight = 0
        self._clock = clock
        self._started = clock()
        self._last_cut = float("-inf")
        self._ok_since_change = 0
        self._waiters: list[asyncio.Future] = []
        self.min_reached = maximum
        self.reductions = 0
        self.increases = 0
        self.throttled_requests = 0
        self.changes: list[dict[str, Any]] = []
        self.changes_not_recorded = 0

    # ------------------------------------------------------------------ slots
    @asynccontextmanager
    async def slot(self) -> AsyncIterator[float]:
        """Hold one of ``limit`` slots for one request; yields when it was sent (for ``throttled``)."""
        while self.in_flight >= self.limit:
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
        self.in_flight += 1
        try:
            yield self._clock()
        finally:
            self.in_flight -= 1
            self._wake()

    def _wake(self) -> None:
        # every waiter re-checks the limit; few waiters (at most --max-connections), so waking all is cheap
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    # ------------------------------------------------------------------ feedback
    def throttled(self, sent_at: float) -> None:
        """A request sent at ``sent_at`` got a 429."""
        self.throttled_requests += 1
        self._ok_since_change = 0
        if sent_at < self._last_cut or self.limit == 1:
            return
        self._last_cut = self._clock()
        old, self.limit = self.limit, max(1, self.limit // 2)
        self.reductions += 1
        self.min_reached = min(self.min_reached, self.limit)
        self._record(old, "429")
        log.warning("the provider is throttling (429): requests in flight %d -> %d", old, self.limit)

    def succeeded(self) -> None:
        if self.limit >= self.maximum:
            return
        self._ok_since_change += 1
        if self._ok_since_change >= self.limit:  # a full window answered without a 429
            self._ok_since_change = 0
            old, self.limit = self.limit, self.limit + 1
            self.increases += 1
            self._record(old, "no 429 for a full window")
            log.info("no 429 for %d requests: requests in flight %d -> %d", old, old, self.limit)
            self._wake()

    def _record(self, old: int, why: str) -> None:
        if len(self.changes) >= MAX_CHANGES_RECORDED:
            self.changes_not_recorded += 1
            return
        self.changes.append(
            {"at_s": round(self._clock() - self._started, 3), "from": old, "to": self.limit, "why": why}
        )

    def facts(self) -> dict[str, Any]:
        """Recorded in results.json with the invocation."""
        facts: dict[str, Any] = {
            "max_in_flight": self.maximum,
            "final_in_flight": self.limit,
            "min_in_flight": self.min_reached,
            "throttled_requests": self.throttled_requests,
            "reductions": self.reductions,
            "increases": self.increases,
            "changes": list(self.changes),
        }
        if self.changes_not_recorded:
            facts["changes_not_recorded"] = self.changes_not_recorded
        return facts


__all__ = ["AdaptiveLimit"]
