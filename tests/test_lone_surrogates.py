"""Text UTF-8 cannot encode never crashes a writer (issue 45, item 1).

JSON's grammar allows a lone surrogate (``"\\ud800"``, RFC 8259 section 8.2) and Python decodes it to a string
UTF-8 has no bytes for. Before: such a string in a server's reply, a dataset question or a
strategy's answer reached ``JsonlAppender.append`` and ended the run with ``internal error:
UnicodeEncodeError``, rc 1, every sample in flight lost; with the response cache on the sample
failed as ``exception``; a 0xff byte in ``--out`` or ``--current-date`` did the same. Now (one
policy, ``harness/text.py``): JSON files keep it as its escape and read back the same string,
requests and documents carry U+FFFD and count it, argv that is not UTF-8 is one line and exit 2.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import harness_cmd

from harness.cli import main
from harness.datasets import load_dataset
from harness.models.base import GenerationParams, ModelResponse
from harness.models.cache import ResponseCache, cache_key
from harness.models.scripted import last_user, register_script, unregister_script
from harness.records import HeldRows, JsonlAppender, iter_jsonl, read_json, write_bytes_atomic, write_json_atomic
from harness.strategy import AGENTS, Agent, SampleResult, register_agent
from harness.text import argv_problem, json_bytes, json_text, sendable

LONE = "\ud800"  # what json.loads makes of the text "\ud800"
FIXTURE = Path(__file__).resolve().parent / "fixtures" / "hotpot_dev_distractor_first100.json"
SAMPLES = load_dataset("hotpotqa:dev").samples


def rows(path: Path) -> list[dict]:
    return [record for _, record in iter_jsonl(path)] if path.exists() else []


# ---- the policy, writer by writer ------------------------------------------------------------------
def test_json_writers_keep_a_lone_surrogate_as_its_escape_and_read_it_back(tmp_path):
    record = {"id": f"q{LONE}", "answer": f"Par{LONE}is", LONE: ["\udcff"], "messages": [{"content": "é" + LONE}]}
    appender = JsonlAppender(tmp_path / "samples.jsonl")
    appender.append(record)
    appender.close()
    raw = (tmp_path / "samples.jsonl").read_bytes()
    raw.decode("utf-8")  # valid UTF-8: any reader takes the file
    assert b'"answer": "Par\\ud800is"' in raw and "é".encode() in raw  # only the surrogate is escaped
    assert rows(tmp_path / "samples.jsonl") == [record]

    write_json_atomic(tmp_path / "results.json", record)
    assert read_json(tmp_path / "results.json") == record

    held = HeldRows(tmp_path)
    held["k"] = record
    assert held["k"] == record and held.take(["k"]) == [record]
    held.close()

    # the same escape as a string (SQLite encodes it itself); a surrogate-free text is left alone
    text = json.dumps(record, ensure_ascii=False)
    assert json_text(text) == json_bytes(text).decode()
    text = json.dumps({"a": "Zürich"}, ensure_ascii=False)
    assert json_text(text) is text


def test_the_response_cache_stores_and_returns_a_reply_with_a_lone_surrogate(tmp_path):
    cache = ResponseCache(tmp_path / "responses.sqlite")
    messages = [{"role": "user", "content": f"Who{LONE}?"}]
    key = cache_key({"backend": "openai", "model": "m"}, messages, GenerationParams(temperature=0), None, None)
    cache.put(key, ModelResponse(content=f"Par{LONE}is", finish_reason="stop"))
    hit = cache.get(key)
    cache.close()
    assert hit is not None and hit.content == f"Par{LONE}is" and hit.cached


def test_a_document_writes_u_fffd_and_counts_each_one(tmp_path, capsys):
    write_bytes_atomic(tmp_path / "table.md", f"| Par{LONE}is | \udcff |\n")
    assert (tmp_path / "table.md").read_text(encoding="utf-8") == "| Par\ufffdis | \ufffd |\n"
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"warning: {tmp_path / 'table.md'}: 2 characters UTF-8 cannot encode")
    assert line.endswith("written as U+FFFD")


def test_a_request_carries_u_fffd_counted_and_the_same_object_when_clean():
    messages = [{"role": "user", "content": f"a{LONE}b"}, {"role": "assistant", "content": "\udcff\udcfe"}]
    sent, n = sendable(messages)
    assert n == 3 and sent[0]["content"] == "a\ufffdb" and sent[1]["content"] == "\ufffd\ufffd"
    assert messages[0]["content"] == f"a{LONE}b"  # the strategy's own conversation is not changed
    clean = [{"role": "user", "content": "Zürich"}]
    assert sendable(clean) == (clean, 0) and sendable(clean)[0] is clean


# ---- argv ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "extra, said",
    [
        (["--out", "run\udcff"], "the value of --out"),
        (["--current-date", "2023\udcff"], "the value of --current-date"),
        (["--out=run\udcff"], "the value of --out"),
    ],
)
def test_argv_that_is_not_utf8_is_one_line_and_exit_2_before_anything(tmp_path, monkeypatch, capsys, extra, said):
    monkeypatch.chdir(tmp_path)
    code = main(["run", "--model", "scripted/echo", "--dataset", "hotpotqa:dev", "--limit", "1", *extra])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert err.startswith(f"error: harness: {said} is not UTF-8 text (b'") and "\\xff" in err
    assert list(tmp_path.iterdir()) == []  # nothing written, no model asked


def test_a_0xff_byte_in_real_argv_is_one_line(tmp_path):
    # the bytes as a shell passes them: Python decodes argv with surrogateescape (PEP 383)
    out = bytes(tmp_path / "run") + b"\xff"
    argv = [a.encode() for a in harness_cmd("run", "--model", "scripted/echo", "--dataset", "hotpotqa:dev")]
    proc = subprocess.run([*argv, b"--out", out], capture_output=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.decode().strip().startswith("error: harness: the value of --out is not UTF-8 text")
    assert len(proc.stderr.splitlines()) == 1 and not Path(out.decode("utf-8", "surrogateescape")).exists()


def test_argv_problem_names_a_positional_by_its_place():
    assert argv_problem(["report", "dir\udcff"]) == (
        "argument 2 is not UTF-8 text (b'dir\\xff'); pass paths and values as UTF-8"
    )
    assert argv_problem(["run", "--out", "x"]) is None


# ---- whole runs ------------------------------------------------------------------------------------
class SurrogateAnswer(Agent):
    """A plugin strategy whose answer, extra and (for one sample) exception hold lone surrogates."""

    settings = ("closed-book",)

    async def solve(self, sample, ctx):
        reply = (await ctx.generate([{"role": "user", "content": sample.question}])).content
        if sample.id == SAMPLES[2].id:
            raise ValueError(f"cannot read {LONE} here")
        return SampleResult(f"{reply} {LONE}", [], extra={"note": f"x{LONE}"})


@pytest.fixture
def surrogate_agent():
    register_agent("surrogate-answer")(SurrogateAnswer)  # for this test only: never in `harness list`
    yield
    AGENTS.unregister("surrogate-answer")


def test_a_strategy_answer_with_a_lone_surrogate_is_kept_scored_resumed_merged_reported(
    tmp_path, capsys, surrogate_agent
):
    run = ["run", "--model", "scripted/answer=Paris", "--dataset", "hotpotqa:dev", "--limit", "4",
           "--agent", "surrogate-answer", "--no-cache"]  # fmt: skip
    assert main([*run, "--out", str(tmp_path / "run")]) == 1  # one sample failed (its exception), not a crash
    err = capsys.readouterr().err
    assert "internal error" not in err
    ok = rows(tmp_path / "run" / "samples.jsonl")
    assert len(ok) == 3 and {r["answer"] for r in ok} == {f"Paris {LONE}"} and ok[0]["extra"] == {"note": f"x{LONE}"}
    (failed,) = rows(tmp_path / "run" / "failures.jsonl")
    assert failed["id"] == SAMPLES[2].id and f"cannot read {LONE} here" in failed["error"]
    assert "cannot read \\ud800 here" in (tmp_path / "run" / "errors.log").read_text(encoding="utf-8")
    results = read_json(tmp_path / "run" / "results.json")
    assert results["counts"]["finished"] == 3

    # resumed: the rows read back are finished (only the failed one is asked again)
    assert main([*run, "--out", str(tmp_path / "run")]) == 1
    assert len(rows(tmp_path / "run" / "samples.jsonl")) == 3
    assert main(["score", str(tmp_path / "run")]) in (0, 1)
    assert main(["report", str(tmp_path / "run"), "--out", str(tmp_path / "report.html")]) == 0
    assert main(["table", str(tmp_path / "run"), "--out", str(tmp_path / "table.md")]) == 0
    err = capsys.readouterr().err
    assert "internal error" not in err and "report.html: " in err and "written as U+FFFD" in err
    assert "Paris \ufffd" in (tmp_path / "report.html").read_text(encoding="utf-8")

    # two shards merged: the rows and their surrogates come through
    for i in (1, 2):
        main([*run, "--shard", f"{i}/2", "--out", str(tmp_path / f"s{i}")])
    capsys.readouterr()
    code = main(["merge", str(tmp_path / "s1"), str(tmp_path / "s2"), "--out", str(tmp_path / "merged")])
    assert code in (0, 1) and "internal error" not in capsys.readouterr().err
    merged = rows(tmp_path / "merged" / "samples.jsonl")
    assert len(merged) == 3 and {r["answer"] for r in merged} == {f"Paris {LONE}"}


def hotpot_file(tmp_path: Path) -> Path:
    """The shipped HotpotQA questions, the first with lone surrogates in its id, question and answer."""
    records = json.loads(FIXTURE.read_text(encoding="utf-8"))[:2]
    first = records[0]
    first["_id"] = f"q{LONE}"
    first["question"] = first["question"].replace("Scott Derrickson", f"Scott{LONE} Derrickson")
    first["answer"] = f"ye{LONE}s"
    path = tmp_path / "hotpot.json"
    path.write_text(json.dumps(records), encoding="ascii")  # json.dumps escapes it: "\ud800"
    return path


def test_a_dataset_question_with_a_lone_surrogate_is_sent_as_u_fffd_and_kept_in_the_row(tmp_path, capsys, caplog):
    sent = []

    def answer(messages, tools, tool_choice, params):
        sent.append(last_user(messages))
        return f"yes{LONE}"  # a reply holding one too

    register_script("surrogates", answer)
    try:
        code = main(["run", "--model", "scripted/surrogates", "--dataset", "hotpotqa:dev", "--limit", "2", "--no-cache",
                     "--data-path", str(hotpot_file(tmp_path)), "--out", str(tmp_path / "run")])  # fmt: skip
    finally:
        unregister_script("surrogates")
    assert code == 0, capsys.readouterr().err
    (said,) = [m for m in caplog.messages if "lone surrogate" in m]  # said once
    assert said.startswith("scripted/surrogates: a request held 1 lone surrogate(s)")
    assert any("Scott\ufffd Derrickson" in text for text in sent) and not any(LONE in text for text in sent)
    by_id = {r["id"]: r for r in rows(tmp_path / "run" / "samples.jsonl")}
    first = by_id[f"q{LONE}"]
    assert f"Scott{LONE} Derrickson" in first["question"] and first["answer"] == f"yes{LONE}"
    results = read_json(tmp_path / "run" / "results.json")
    assert results["model"]["replaced_surrogates"] == 1
    assert main(["score", str(tmp_path / "run")]) == 0


# ---- a server's reply (a loopback OpenAI-protocol server) --------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("transport", ["httpx", "aiohttp"])
def test_a_server_reply_with_a_lone_surrogate_is_kept_with_and_without_the_cache(tmp_path, capsys, transport):
    from fault_server import FaultServer, run_args

    extra = ("--retry-max-wait", "0.05", "--request-timeout", "5", "--http-client", transport)
    with FaultServer(answer=f"Par{LONE}is") as server:
        # the server's body holds the six characters \ud800 (json.dumps escapes it, as JSON allows)
        assert b"Par\\ud800is" in server.completion({}, f"Par{LONE}is")
        assert main(run_args(server.url, tmp_path / "nocache", *extra)) == 0
        cached = [a for a in run_args(server.url, tmp_path / "cached", *extra) if a != "--no-cache"]
        cached += ["--cache-path", str(tmp_path / "responses.sqlite")]
        assert main(cached) == 0
        assert server.served == ["ok", "ok"]
        # the same run elsewhere: answered from the cache, the same string
        again = [a if a != str(tmp_path / "cached") else str(tmp_path / "again") for a in cached]
        assert main(again) == 0
        assert server.served == ["ok", "ok"]
    assert "internal error" not in capsys.readouterr().err
    for name in ("nocache", "cached", "again"):
        (row,) = rows(tmp_path / name / "samples.jsonl")
        assert row["answer"] == f"Par{LONE}is" and row["status"] == "ok"
    assert rows(tmp_path / "again" / "samples.jsonl")[0]["cache_hits"] == 1


@pytest.mark.slow
@pytest.mark.parametrize("transport", ["httpx", "aiohttp"])
def test_a_dataset_question_with_a_lone_surrogate_reaches_a_server_as_u_fffd(tmp_path, capsys, transport):
    from fault_server import FaultServer, run_args

    extra = ("--retry-max-wait", "0.05", "--request-timeout", "5", "--http-client", transport)
    with FaultServer() as server:
        data = ("--data-path", str(hotpot_file(tmp_path)))
        code = main(run_args(server.url, tmp_path / "run", *extra, *data, limit="2"))
    assert code == 0, capsys.readouterr().err
    (asked,) = [b["messages"][-1]["content"] for b in server.bodies if "Derrickson" in b["messages"][-1]["content"]]
    assert "Scott\ufffd Derrickson" in asked
    assert read_json(tmp_path / "run" / "results.json")["model"]["replaced_surrogates"] == 1
    assert {r["id"] for r in rows(tmp_path / "run" / "samples.jsonl")} == {f"q{LONE}", "hotpot-dev-001"}
