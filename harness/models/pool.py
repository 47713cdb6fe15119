"""Several OpenAI-compatible servers behind one run (``--base-url URL1,URL2``).

Each request goes to the server in service with the fewest requests outstanding. A server that
fails (connection refused or dropped, timeout, 5xx) is taken out for a cool-down (1 s, doubled at
each failure in a row, at most 60 s); once it is over, a health check (``GET /models``) puts it
back, or keeps it out for longer. The backend retries a request that failed on a dead server on
another one at once, so the server failing costs no sample.

Not bound to an event loop (plain counters, no asyncio primitives), like the backend it serves.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

from harness.errors import TransientModelError
from harness.redact import strip_credentials

log = logging.getLogger(__name__)

FIRST_COOLDOWN_S = 1.0
MAX_COOLDOWN_S = 60.0


@dataclass(eq=False)
class Endpoint:
    url: str  # as given: may hold credentials, so never recorded (``shown`` is)
    outstanding: int = 0
    requests: int = 0
    failures: int = 0
    taken_out: int = 0
    taken_back: int = 0
    health_checks_failed: int = 0
    out_until: float | None = None  # monotonic time; None: in service
    cooldown: float = FIRST_COOLDOWN_S
    probing: bool = False
    last_error: str | None = field(default=None, repr=False)

    @property
    def shown(self) -> str:
        return strip_credentials(self.url) or ""

    @property
    def in_service(self) -> bool:
        return self.out_until is None

    def facts(self) -> dict[str, Any]:
        return {
            "url": self.shown,
            "requests": self.requests,
            "failures": self.failures,
            "taken_out": self.taken_out,
            "taken_back": self.taken_back,
            "health_checks_failed": self.health_checks_failed,
            "in_service_at_end": self.in_service,
        }


class ServerPool:
    """``health(endpoint) -> bool`` answers whether a server taken out may come back."""

    def __init__(
        self,
        urls: list[str],
        health: Callable[[Endpoint], Awaitable[bool]],
        *,
        first_cooldown: float = FIRST_COOLDOWN_S,
        max_cooldown: float = MAX_COOLDOWN_S,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.endpoints = [Endpoint(url, cooldown=first_cooldown) for url in urls]
        self._health = health
        self.first_cooldown = first_cooldown
        self.max_cooldown = max_cooldown
        self._clock = clock

    # ------------------------------------------------------------------ choosing
    async def acquire(self, exclude: set[Endpoint] | frozenset = frozenset()) -> Endpoint:
        """The server for the next request (its ``outstanding`` counted until ``release``).

        Raises TransientModelError when every server is out (the caller's retry waits and asks
        again) or every server in service was already tried for this request (``exclude``)."""
        now = self._clock()
        for ep in self.endpoints:  # cool-downs that are over: check health before use
            if not ep.in_service and ep.out_until <= now and ep not in exclude:
                await self._probe(ep)
        ready = [ep for ep in self.endpoints if ep.in_service and ep not in exclude]
        if not ready:
            # everyone out: check the one due soonest now rather than fail the attempt blind
            waiting = sorted((ep for ep in self.endpoints if not ep.in_service and ep not in exclude),
                             key=lambda ep: ep.out_until)  # fmt: skip
            if waiting and await self._probe(waiting[0]):
                ready = [waiting[0]]
        if not ready:
            shown = ", ".join(ep.shown for ep in self.endpoints)
            raise TransientModelError(f"no server in service ({shown}): every one failed its last request or check")
        # fewest outstanding; then fewest served, so idle servers share the work evenly
        ep = min(ready, key=lambda e: (e.outstanding, e.requests))
        ep.outstanding += 1
        ep.requests += 1
        return ep

    def release(self, ep: Endpoint, *, failed: bool = False, server_fault: bool = False, error: str = "") -> None:
        """The request on ``ep`` ended; ``server_fault`` (refused, dropped, timeout, 5xx) takes it out."""
        ep.outstanding -= 1
        if failed:
            ep.failures += 1
            ep.last_error = error
        if server_fault:
            self.take_out(ep, error)
        elif not failed and ep.in_service:
            ep.cooldown = self.first_cooldown  # a good answer ends a run of failures

    def take_out(self, ep: Endpoint, why: str = "") -> None:
        if not ep.in_service:
            return  # already out: requests sent before it went out fail one after another
        ep.taken_out += 1
        ep.out_until = self._clock() + ep.cooldown
        log.warning("server %s taken out for %.0f s: %s", ep.shown, ep.cooldown, why or "failed")
        ep.cooldown = min(ep.cooldown * 2, self.max_cooldown)

    async def _probe(self, ep: Endpoint) -> bool:
        if ep.probing:  # another request is checking it right now
            return False
        ep.probing = True
        try:
            ok = await self._health(ep)
        except Exception:  # noqa: BLE001 - a check that cannot run is a failed check
            ok = False
        finally:
            ep.probing = False
        if ep.in_service:
            return True
        if ok:
            ep.out_until = None
            ep.taken_back += 1
            log.warning("server %s passed its health check: back in service", ep.shown)
        else:
            ep.health_checks_failed += 1
            ep.out_until = self._clock() + ep.cooldown
            ep.cooldown = min(ep.cooldown * 2, self.max_cooldown)
        return ok

    def first_in_service(self) -> Endpoint:
        """For side requests (tokenizing): a server in service, else the first."""
        return next((ep for ep in self.endpoints if ep.in_service), self.endpoints[0])

    def facts(self) -> list[dict[str, Any]]:
        return [ep.facts() for ep in self.endpoints]


__all__ = ["Endpoint", "ServerPool"]
