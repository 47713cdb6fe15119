"""Bounded retries with exponential back-off that honour a server's Retry-After (tenacity's
jittered back-off)."""

from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Callable, TypeVar

from tenacity.wait import wait_exponential_jitter

from harness.errors import TransientModelError

log = logging.getLogger(__name__)
T = TypeVar("T")


class _Attempt:
    """What tenacity's wait strategies read of a retry: the number of the attempt that failed."""

    def __init__(self, attempt_number: int):
        self.attempt_number = attempt_number


def _wait(max_wait: float):
    backoff = wait_exponential_jitter(initial=1, max=max_wait, jitter=1)

    def wait(attempt: int, exc: TransientModelError) -> float:
        if exc.retry_after is not None:
            # The server said how long; waiting less only earns another 429.
            return min(max(exc.retry_after, 0.0), max_wait)
        return backoff(_Attempt(attempt))

    return wait


async def retrying(call: Callable[[], Awaitable[T]], max_attempts: int, max_wait: float) -> T:
    """Run ``call`` until it succeeds, retrying TransientModelError at most ``max_attempts`` times in
    all. A plain loop: tenacity's retry object per call cost more than the rest of a request's own
    work on a fast server; its back-off is the same (1 s doubling, plus up to 1 s of jitter)."""
    attempts = max(1, max_attempts)
    attempt = 1
    while True:
        try:
            return await call()
        except TransientModelError as exc:
            if attempt >= attempts:
                raise
            delay = _wait(max_wait)(attempt, exc)
            log.warning("request failed (attempt %d): %s; retrying in %.1fs", attempt, exc, delay)
            await asyncio.sleep(delay)
            attempt += 1
