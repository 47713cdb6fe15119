"""Bounded retries with exponential back-off that honour a server's Retry-After (tenacity's
jittered back-off).

The policy, per failed request (``TransientModelError``):

* the server said not to retry it (``x-should-retry: false``; ``should_retry`` False): it fails at
  once, as its sample's failure (``model_unavailable``, saying so); a rerun sends it again;
* the server asked for a wait (``retry-after-ms`` / ``Retry-After``, read in
  ``harness.models.openai_compat.parse_retry_after``) above 0 and at most ``--retry-max-wait``
  (default 120 s): that wait, exactly (waiting less only earns another 429);
* a wait longer than ``--retry-max-wait``: not retried, never cut short and never slept through
  silently: the request fails at once with a line saying how long the server asked to wait, so the
  sample fails as ``model_unavailable`` and rerunning the same command later resumes (or raise
  ``--retry-max-wait`` to wait it out). This is what the openai SDK (3.57.0, ``_should_retry``:
  no retry past ``MAX_RETRY_AFTER_DELAY``, 120 s) does; anthropic's (2.14.0) waits whatever it is
  told, which a run should not do without a word;
* no wait asked (or 0): back-off from 1 s, doubling, plus up to 1 s of jitter, capped at
  ``--retry-max-wait``;

at most ``--max-attempts`` tries in all.
"""

from __future__ import annotations

import asyncio
import logging
import math
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
        if exc.retry_after is not None and exc.retry_after > 0:
            # The server said how long (at most max_wait: a longer wait is refused before this).
            return min(exc.retry_after, max_wait)
        return backoff(_Attempt(attempt))

    return wait


def wait_too_long(exc: TransientModelError, max_wait: float) -> TransientModelError | None:
    """The failure to raise instead of retrying when the server asks for a wait past ``max_wait``."""
    asked = exc.retry_after
    if asked is None or asked <= max_wait:
        return None
    shown = "an unbounded time" if math.isinf(asked) else f"{asked:.0f} s"
    return TransientModelError(
        f"{exc}; the server asked to wait {shown} before retrying, longer than --retry-max-wait {max_wait:g} s: "
        "not retried (rerun the same command later to resume, or raise --retry-max-wait)",
        retry_after=asked,
        status=exc.status,
        should_retry=False,
    )


async def retrying(call: Callable[[], Awaitable[T]], max_attempts: int, max_wait: float) -> T:
    """Run ``call`` until it succeeds, retrying TransientModelError at most ``max_attempts`` times in
    all (the policy above). A plain loop: tenacity's retry object per call cost more than the rest of
    a request's own work on a fast server; its back-off is the same (1 s doubling, plus up to 1 s of
    jitter)."""
    attempts = max(1, max_attempts)
    attempt = 1
    wait = _wait(max_wait)
    while True:
        try:
            return await call()
        except TransientModelError as exc:
            if not exc.should_retry or attempt >= attempts:
                raise
            refused = wait_too_long(exc, max_wait)
            if refused is not None:
                raise refused from exc
            delay = wait(attempt, exc)
            log.warning("request failed (attempt %d): %s; retrying in %.1fs", attempt, exc, delay)
            await asyncio.sleep(delay)
            attempt += 1
