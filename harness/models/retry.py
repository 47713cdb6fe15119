"""Bounded retries with exponential back-off that honour a server's Retry-After (tenacity)."""

from __future__ import annotations

import logging
from typing import Awaitable, Callable, TypeVar

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    stop_after_attempt,
)
from tenacity.wait import wait_exponential_jitter

from harness.errors import TransientModelError

log = logging.getLogger(__name__)
T = TypeVar("T")


def _wait(max_wait: float):
    backoff = wait_exponential_jitter(initial=1, max=max_wait, jitter=1)

    def wait(state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        if isinstance(exc, TransientModelError) and exc.retry_after is not None:
            # The server said how long; waiting less only earns another 429.
            return min(max(exc.retry_after, 0.0), max_wait)
        return backoff(state)

    return wait


def _log_retry(state: RetryCallState) -> None:
    exc = state.outcome.exception() if state.outcome else None
    log.warning("request failed (attempt %d): %s; retrying in %.1fs", state.attempt_number, exc, state.upcoming_sleep)


async def retrying(call: Callable[[], Awaitable[T]], max_attempts: int, max_wait: float) -> T:
    """Run ``call`` until it succeeds, retrying TransientModelError at most ``max_attempts`` times in all."""
    async for attempt in AsyncRetrying(
        retry=retry_if_exception_type(TransientModelError),
        stop=stop_after_attempt(max(1, max_attempts)),
        wait=_wait(max_wait),
        before_sleep=_log_retry,
        reraise=True,
    ):
        with attempt:
            return await call()
    raise AssertionError("unreachable")
