"""A provider's batch results file read line by line with caps (harness/models/batch_api.py): a line
over MAX_RESULT_LINE_BYTES is never held whole, its request goes again or fails with the reason;
the whole file is capped at MAX_RESULTS_BYTES as (decompressed) bytes arrive; line ends, a last line
without one and characters split across chunks read as they should."""

from __future__ import annotations

import asyncio
import gzip
import json
import logging
import os
import subprocess
import tracemalloc

import pytest
from fake_batch import FakeBatchServer, answer_for

from harness.errors import TransientModelError
from harness.models import batch_api
from harness.models.batch_api import LineSplitter, LongLine
from harness.execution.record import results_dict

MIB = 2**20


def split(data: bytes, cap: int, sizes) -> list:
    """``data`` fed to a splitter in chunks of the given sizes (cycled), then finished."""
    splitter, out, start, i = LineSplitter(cap), [], 0, 0
    while start < len(data):
        size = sizes[i % len(sizes)]
        out += splitter.feed(data[start : start + size])
        assert len(splitter.buf) <= cap  # never more than the cap held
        start, i = start + size, i + 1
    return out + splitter.finish()


# ------------------------------------------------------------------------------- the splitter (fast)
@pytest.mark.parametrize("sizes", [[1], [2, 3], [7], [10**6]])
def test_lines_whatever_the_chunks(sizes):
    text = '{"a": "é中🎉"}\r\n\n{"b": 2}\n  \r\n{"c": "ü"}'  # CRLF, empty lines, no newline at the end
    data = text.encode()
    got = split(data, 1000, sizes)
    assert got == [b'{"a": "\xc3\xa9\xe4\xb8\xad\xf0\x9f\x8e\x89"}', b"", b'{"b": 2}', b"  ", b'{"c": "\xc3\xbc"}']
    assert json.loads(got[0].decode()) == {"a": "é中🎉"}  # a character split across chunks is whole again
    assert split(b"x\n", 10, [1]) == [b"x"] and split(b"", 10, [1]) == [] and split(b"\n", 10, [1]) == [b""]


@pytest.mark.parametrize("sizes", [[1], [5, 3], [64], [10**6]])
def test_a_line_over_the_cap_is_skipped_and_counted_not_held(sizes):
    long = b'{"id": "req_9", "custom_id": "b1-r3", "response": {"body": "' + b"x" * 500 + b'"}}'
    data = b'{"n": 1}\n' + long + b'\r\n{"n": 2}\n' + b'{"custom_id": "r4", "text": "' + b"y" * 300
    got = split(data, 100, sizes)
    assert got == [
        b'{"n": 1}',
        LongLine(2, len(long) + 1, "b1-r3"),  # its \r counted: the bytes that were skipped
        b'{"n": 2}',
        LongLine(4, 29 + 300, "r4"),  # over the cap with no newline before the end (Anthropic's shape)
    ]


def test_a_long_lines_custom_id_is_named_only_when_it_leads_the_line():
    nested = b'{"response": {"custom_id": "someone-else"}, "x": "' + b"z" * 200 + b'"}\n'
    assert split(nested, 50, [7]) == [LongLine(1, len(nested) - 1, None)]
    exactly = b"a" * 50 + b"\n"
    assert split(exactly, 50, [3]) == [b"a" * 50]  # at the cap: kept


# ------------------------------------------------------------------------------- against the fake server
def api_for(fake, model="openai/gpt-test"):
    from harness.models import create_backend
    from harness.models.base import BackendOptions

    backend = create_backend(model, BackendOptions(base_url=fake.url + "/v1", max_response_bytes=2**20))
    return batch_api.provider_for(backend)


def serve(fake, data) -> str:
    """A results file of the fake whose body is ``data``: bytes, or a function giving chunks (each
    download streams them anew, with no Content-Length)."""
    fake.files["file-x"] = b"unused"
    fake.result_files.add("file-x")
    fake.results_transform = lambda provider, raw: data() if callable(data) else data
    return f"{fake.url}/v1/files/file-x/content"


def read_all(api, url) -> list:
    async def go():
        return [line async for line in api.lines(url)]

    return asyncio.run(go())


def padded(count: int, piece: bytes = b"x" * 65536):
    for _ in range(count):
        yield piece


@pytest.mark.slow
def test_a_20_mb_line_is_skipped_in_bounded_memory(monkeypatch, caplog):
    monkeypatch.setattr(batch_api, "MAX_RESULT_LINE_BYTES", MIB)

    head, tail = b'{"id": "req_1", "custom_id": "big", "response": {"body": "', b'"}}'

    def body():
        yield b'{"custom_id": "a"}\n' + head
        yield from padded(320)  # 20 MiB, streamed: the fake holds 64 KiB at a time
        yield tail + b'\n{"custom_id": "b"}\n'

    with FakeBatchServer() as fake:
        api = api_for(fake)
        url = serve(fake, body)
        tracemalloc.start()
        try:
            with caplog.at_level(logging.WARNING, logger="harness.models.batch_api"):
                got = read_all(api, url)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert peak < 5 * MIB, peak  # the line was 20 MiB; at most the 1 MiB cap of it is held (and copies)
    size = len(head) + 20 * MIB + len(tail)
    assert got == [{"custom_id": "a"}, LongLine(2, size, "big"), {"custom_id": "b"}]
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert f"line 2 (custom_id big) is {size} bytes, over the 1 MiB cap" in warning
    assert "127.0.0.1" in warning and "EMPTY" not in warning


@pytest.mark.slow
def test_a_line_over_the_cap_with_no_newline_until_the_end(monkeypatch):
    monkeypatch.setattr(batch_api, "MAX_RESULT_LINE_BYTES", MIB)

    def body():
        yield b'{"custom_id": "a"}\r\n\r\n{"custom_id": "tail", "result": "'
        yield from padded(40)

    with FakeBatchServer() as fake:
        got = read_all(api_for(fake), serve(fake, body))
    assert got == [{"custom_id": "a"}, LongLine(3, 33 + 40 * 65536, "tail")]


@pytest.mark.slow
def test_characters_split_across_chunks_and_a_torn_line():
    text = '{"custom_id": "é", "t": "中文🎉"}\n'.encode()
    chunks = [text[i : i + 1] for i in range(len(text))] + [b'{"custom_id": "torn', b"\xff\n", b'{"n": 1}']
    with FakeBatchServer() as fake:
        got = read_all(api_for(fake), serve(fake, lambda: iter(chunks)))
    assert got == [{"custom_id": "é", "t": "中文🎉"}, {"n": 1}]  # the torn line (and bad UTF-8) left out


@pytest.mark.slow
@pytest.mark.parametrize("encoding", [None, "gzip"])
def test_the_whole_file_is_capped_as_it_arrives(encoding, monkeypatch):
    """2 MiB cap, 3 MiB of good short lines; gzipped, the 3 MiB are ~40 KB on the wire and still cut."""
    monkeypatch.setattr(batch_api, "MAX_RESULTS_BYTES", 2 * MIB)
    count = 3 * MIB // 22
    data = b"".join(b'{"custom_id": "r%06d"}\n' % i for i in range(count))  # 22 bytes a line
    with FakeBatchServer() as fake:
        fake.results_encoding = encoding
        # plain: streamed with no Content-Length, so only the count as it arrives can stop it
        url = serve(
            fake, gzip.compress(data) if encoding else lambda: (data[i : i + 65536] for i in range(0, len(data), 65536))
        )
        with pytest.raises(TransientModelError, match=r"results file over 2 MiB"):
            read_all(api_for(fake), url)
        monkeypatch.setattr(batch_api, "MAX_RESULTS_BYTES", 4 * MIB)
        assert read_all(api_for(fake), url)[-1] == {"custom_id": "r%06d" % (count - 1)}  # under the cap: all of it


@pytest.mark.slow
def test_a_gzip_bomb_line_is_skipped(monkeypatch):
    monkeypatch.setattr(batch_api, "MAX_RESULT_LINE_BYTES", MIB)
    data = b'{"custom_id": "a"}\n{"custom_id": "bomb", "x": "' + b"0" * (20 * MIB) + b'"}\n{"custom_id": "b"}\n'
    with FakeBatchServer() as fake:
        fake.results_encoding = "gzip"
        url = serve(fake, gzip.compress(data))
        got = read_all(api_for(fake), url)
    assert got == [{"custom_id": "a"}, LongLine(2, 20 * MIB + 30, "bomb"), {"custom_id": "b"}]


# ------------------------------------------------------------------------------- a whole run
def long_line_instead_of(provider: str, data: bytes, index: int):
    """The results file with its line ``index`` replaced by a 20 MiB one for the same custom_id, streamed."""
    lines = data.splitlines(keepends=True)
    cid = json.loads(lines[index])["custom_id"]
    yield b"".join(lines[:index])
    if provider == "openai":
        yield (
            b'{"id": "r", "custom_id": "%s", "response": {"status_code": 200, "body": {"choices": [{"message": {"content": "'
            % cid.encode()
        )
        yield from padded(320)
        yield b'"}}]}}, "error": null}\n'
    else:
        yield (
            b'{"custom_id": "%s", "result": {"type": "succeeded", "message": {"content": [{"type": "text", "text": "'
            % cid.encode()
        )
        yield from padded(320)
        yield b'"}]}}}\n'
    yield b"".join(lines[index + 1 :])


@pytest.mark.slow
@pytest.mark.parametrize("model", ["openai/gpt-test", "anthropic/claude-test"])
def test_in_a_run_the_long_lines_request_is_sent_again_or_fails_with_the_reason(model, tmp_path, monkeypatch, caplog):
    import harness
    from test_batch import BATCH, base_url, events, rows

    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-anthropic-key")
    monkeypatch.setattr(batch_api, "MAX_RESULT_LINE_BYTES", MIB)

    def run(fake, out, **options):
        return results_dict(harness.run(  # the JSON written
            model=model, base_url=base_url(fake, model), batch=True, limit=10, out=str(out), cache=False,
            show_progress=False, max_tokens=16, retry_max_wait=0.05, **BATCH, **options,
        ))  # fmt: skip

    for out, attempts in (("retried", 6), ("once", 1)):
        served = []

        def transform(provider, data):
            served.append(provider)
            return long_line_instead_of(provider, data, 3) if len(served) == 1 else data

        caplog.clear()
        with FakeBatchServer() as fake, caplog.at_level(logging.WARNING):
            fake.results_transform = transform
            result = run(fake, tmp_path / out, max_attempts=attempts)
            sizes = fake.batch_sizes
        first = events(tmp_path / out)[0]["requests"]
        warnings = [r.getMessage() for r in caplog.records if r.name == batch_api.__name__]
        assert len(warnings) == 1 and "over the 1 MiB cap" in warnings[0], warnings  # said once
        cid = warnings[0].split("(custom_id ")[1].split(")")[0]
        sample = first[cid]["sample"]
        if attempts > 1:
            assert sizes == [10, 1] and result["counts"]["finished"] == 10  # it alone went again
            for row in rows(tmp_path / out):
                assert row["answer"] == answer_for(row["messages"][-2]["content"])
        else:
            assert sizes == [10] and result["counts"]["finished"] == 9 and result["counts"]["failed"] == 1
            (failure,) = rows(tmp_path / out, "failures.jsonl")
            assert failure["id"] == sample and failure["error_type"] == "model_unavailable"
            assert "result line of 20971" in failure["error"] and "over the 1 MiB cap on one result" in failure["error"]


def test_vllm_run_batch_s_output_file_is_read_with_the_same_line_cap(tmp_path, monkeypatch, caplog):
    """``vllm run-batch`` writes its results to a local file: a runaway line there is skipped unread
    (its request counts as unanswered, sent again) in bounded memory, the lines around it are read,
    and the batch's private folder is removed."""
    from types import SimpleNamespace

    from harness.models.batch_api import VLLMRunBatch

    monkeypatch.setattr(batch_api, "MAX_RESULT_LINE_BYTES", MIB)
    folder = tmp_path / "harness-run-batch-x"
    folder.mkdir()
    ok = {"custom_id": "a", "response": {"status_code": 200, "body": {"choices": []}}}
    with open(folder / "output.jsonl", "wb") as f:
        f.write(json.dumps(ok).encode() + b"\n")
        f.write(b'{"custom_id": "big", "response": {"body": "' + b"x" * (12 * MIB) + b'"}}\n')
        f.write(b"{torn\n")
        f.write(json.dumps({**ok, "custom_id": "b"}).encode())  # no newline at the end
    provider = VLLMRunBatch(SimpleNamespace(options=None))
    guard = subprocess.Popen(["true"])  # its guard, ended; the pipe the provider lets go of
    guard.wait()
    read_end, write_end = os.pipe()
    os.close(read_end)
    provider.procs["id"] = (guard, folder, write_end)

    async def read() -> list:
        return [r async for r in provider.results("id", None)]

    tracemalloc.start()
    try:
        with caplog.at_level(logging.WARNING, logger="harness.models.batch_api"):
            got = asyncio.run(read())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 5 * MIB, peak  # the line was 12 MiB
    assert [r["custom_id"] for r in got] == ["a", "big", "b"]
    assert got[0]["status"] == 200 and got[2]["status"] == 200
    assert got[1]["status"] is None and "over the 1 MiB cap on one result" in got[1]["error"]
    assert any("vllm run-batch: results line 2 (custom_id big)" in r.getMessage() for r in caplog.records)
    assert not folder.exists()
