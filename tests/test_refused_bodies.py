"""A reply refused by the byte cap is let go of when it is refused (issue 45): the exception that
reports it holds no frame that still holds the body's bytes, and a failed sample's exception is not
kept alive by a cycle through its task. Each held 16 MiB per refused reply until a full garbage
collection: a run against a server refusing every reply grew to 6.4 GB after 400 samples.

No server here (the fast tier): the body is an endless stream on aiohttp's own interface
(``iter_any``), read by the harness's own request (``read_capped``, which held its pieces in its
frame). The httpx clients' reads keep theirs on a comprehension's stack, let go as the exception
leaves it (httpx and httpx2 ``Response.aread``), so no frame of theirs held a body. Whole runs on
both transports against a loopback server: tests/test_hostile_server.py
(``test_a_refused_reply_is_let_go_of_when_its_sample_fails``) and benchmarks/refused_replies.py."""

from __future__ import annotations

import asyncio
import gc
import types
import weakref

import pytest

from harness.errors import TransientModelError
from harness.execution.attempt import within_own_time
from harness.models import BackendOptions, create_backend
from harness.models.base import WaitClock
from harness.models.http_reply import ReplyTooLarge

MIB = 2**20
FILLER = b" " * 65536  # JSON whitespace, as a hostile server would send it


def held_bytes(value) -> int:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return len(value)
    if isinstance(value, (list, tuple)):
        return sum(len(v) for v in value if isinstance(v, (bytes, bytearray)))
    return 0


def frames_holding(exc: BaseException, at_least: int) -> list[str]:
    """Frames reachable from ``exc``'s chain (tracebacks of it, its causes and contexts) whose locals
    hold ``at_least`` bytes."""
    found, seen, chain = [], set(), [exc]
    while chain:
        e = chain.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        tb = e.__traceback__
        while tb is not None:
            frame: types.FrameType = tb.tb_frame
            size = sum(held_bytes(v) for v in frame.f_locals.values())
            if size >= at_least:
                found.append(f"{frame.f_code.co_name} ({frame.f_code.co_filename}:{tb.tb_lineno}): {size:,} bytes")
            tb = tb.tb_next
        chain += (e.__cause__, e.__context__)
    return found


# ---- the harness's own request (openai/ on --http-client aiohttp) ------------------------------
class _EndlessContent:
    async def iter_any(self):
        while True:
            yield FILLER


class _EndlessReply:
    status = 200
    headers = {"content-type": "application/json"}  # chunked: no Content-Length to refuse it by
    content_length = None
    content = _EndlessContent()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        return False


class _Session:
    def post(self, url, **kwargs):
        return _EndlessReply()


class _Sessions:
    def get(self):
        return _Session()


def test_an_endless_body_on_aiohttp_is_refused_holding_nothing_of_it():
    backend = create_backend("openai/m", BackendOptions(base_url="http://server.test/v1", max_response_bytes=MIB))
    backend._sessions = _Sessions()

    async def post():
        return await backend._post("http://server.test/v1/chat/completions", b"{}", {}, "the server")

    with pytest.raises(ReplyTooLarge, match="the server: reply body is over --max-response-bytes 1 MiB") as caught:
        asyncio.run(post())
    assert frames_holding(caught.value, MIB // 2) == []


# ---- a failed sample: its exception, frames and locals are freed by reference counting --------
class _Body:
    """Stands for a refused body a strategy's frame held (bytes take no weak reference)."""


def test_a_failed_sample_is_freed_without_the_garbage_collector():
    refs = []

    async def solve():
        body = _Body()
        refs.append(weakref.ref(body))
        await asyncio.sleep(0)
        raise TransientModelError("reply body is over --max-response-bytes 16 MiB (long); not read further")

    async def attempt():
        try:
            await within_own_time(solve(), 60, WaitClock())
        except TransientModelError:
            pass  # what SampleAttempts.attempt does: the row keeps the message only

    gc.disable()
    try:
        asyncio.run(attempt())
        # the task held what it raised, whose traceback held within_own_time's frame, which held the
        # task: a cycle only a collection of the oldest generation ended
        assert refs[0]() is None
    finally:
        gc.enable()
