"""harness export inspect RUN_DIR: a run as an Inspect AI eval log, opened by inspect-ai itself
(``inspect_ai.log.read_eval_log``) and served by its viewer (``inspect view``), every value equal to
what the run recorded: samples, transcripts (tool calls, tool results, reasoning), per-question
scores, headline numbers with their intervals, token usage. Runs are real scripted runs (no network)."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from harness.analysis.runs import load_rows
from harness.cli import main
from harness.datasets import load_dataset
from harness.execution.record import read_results
from harness.models.base import ModelResponse
from harness.models.scripted import register_script, unregister_script
from harness.records import work_key
from harness.scoring.display import dataset_headline
from harness.scoring.gold import gold_text

sys.path.insert(0, str(Path(__file__).parent))
from scripted_runs import partial_answerer, scripted_run  # noqa: E402

HOTPOT = load_dataset("hotpotqa:dev")
BY_QUESTION = {s.question: (i, s) for i, s in enumerate(HOTPOT.samples)}
THOUGHT = "Both pages say it; the answer is the shared fact."


def searcher(messages, tools, tool_choice, params):
    """Searches the question's two gold titles (native tool calls), then answers its gold answer with an
    Anthropic thinking block beside it (the block's keys as harness/models/anthropic_api.py reads them:
    type, thinking, signature); the third question's server fails (a 500 on every attempt)."""
    i, sample = next(v for q, v in BY_QUESTION.items() if q in messages[0]["content"])
    if i == 2:
        raise RuntimeError("server said 500")
    done = sum(1 for m in messages if m["role"] == "assistant")
    if done < 2:
        return {"content": "", "tool_calls": [{"name": "search", "arguments": {"query": sample.needed_titles[done]}}]}
    block = {"type": "thinking", "thinking": THOUGHT, "signature": f"sig-{i}"}
    return ModelResponse(content=sample.answer, reasoning=THOUGHT, reasoning_items=[block], finish_reason="stop")


@pytest.fixture(scope="module")
def runs(tmp_path_factory, hotpot_snapshot):
    base = tmp_path_factory.mktemp("inspect-runs")
    closed = scripted_run(base / "closed", "inspect-partial", partial_answerer("hotpotqa:dev"), "hotpotqa:dev", 3)
    epochs = scripted_run(base / "epochs", "inspect-fq", partial_answerer("fanoutqa:dev"), "fanoutqa:dev", 2,
                          "--epochs", "2", "--temperature", "0.5")  # fmt: skip
    register_script("inspect-searcher", searcher)
    try:
        argv = ["run", "--model", "scripted/inspect-searcher", "--setting", "open-book", "--agent", "open-book-native",
                "--dataset", "hotpotqa:dev", "--snapshot", str(hotpot_snapshot), "--search-space", "evidence-only",
                "--limit", "3", "--no-cache", "--max-attempts", "1", "--out", str(base / "open")]  # fmt: skip
        assert main(argv) == 1  # two of three answered: the run ends incomplete (exit 1: samples failed)
    finally:
        unregister_script("inspect-searcher")
    return {"closed": closed, "epochs": epochs, "open": base / "open"}


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """One question, scored by em-f1 only: a run directory for the fast tests (about a second)."""
    out = tmp_path_factory.mktemp("inspect-tiny") / "run"
    return scripted_run(out, "inspect-yes", lambda *a: "yes", "hotpotqa:dev", 1, "--metrics", "em-f1")


@pytest.fixture
def inspect_ai():
    return pytest.importorskip("inspect_ai")


@pytest.fixture
def export(capsys):
    def run(run_dir: Path, *extra: str) -> tuple[int, str]:
        capsys.readouterr()
        code = main(["export", "inspect", str(run_dir), *extra])
        return code, capsys.readouterr().err

    return run


def read(path: Path):
    from inspect_ai.log import read_eval_log

    return read_eval_log(str(path))


def flat(values: dict, prefix: str = "") -> dict[str, float]:
    """The per-question numbers as ``METRIC.LEAF`` (bools 0/1), as ``Scores.per_question`` reads them."""
    out: dict[str, float] = {}
    for key, value in values.items():
        if isinstance(value, dict):
            out.update(flat(value, f"{prefix}{key}."))
        elif isinstance(value, (bool, int, float)):
            out[f"{prefix}{key}"] = float(value)
    return out


def assert_messages_equal_transcript(messages, transcript):
    """Each message: its role, its text, its tool calls (id, function, parsed arguments), the call a
    tool result answers, and the reasoning blocks kept."""
    from inspect_ai.model import ContentReasoning

    assert [m.role for m in messages] == [t["role"] for t in transcript]
    calls = {}
    for m, t in zip(messages, transcript):
        assert m.text == (t.get("content") or "")
        if t["role"] == "assistant":
            sent = t.get("tool_calls") or []
            want = [(c["id"], c["function"]["name"], json.loads(c["function"]["arguments"])) for c in sent]
            assert [(c.id, c.function, c.arguments) for c in m.tool_calls or []] == want
            calls.update({c[0]: c[1] for c in want})
            parts = m.content if isinstance(m.content, list) else []
            thoughts = [(p.reasoning, p.signature) for p in parts if isinstance(p, ContentReasoning)]
            assert thoughts == [(b["thinking"], b["signature"]) for b in t.get("reasoning_items") or []]
        if t["role"] == "tool":
            assert m.tool_call_id == t["tool_call_id"] and m.function == calls[t["tool_call_id"]]


def assert_headline_equals_results(log, results):
    scores = results.scores
    values = scores.metric_values()
    by_name = {s.name: s for s in log.results.scores}
    assert set(by_name) == {k for k, v in values.items() if v is not None}
    for key, score in by_name.items():
        first = next(iter(score.metrics.values()))
        assert first.value == values[key] and score.scorer == key.split(".")[0]
        entry = scores.uncertainty.get(key) or {}
        if entry.get("stderr") is None:
            assert "stderr" not in score.metrics
        else:
            assert score.metrics["stderr"].value == entry["stderr"]
        if entry.get("ci95") and None not in entry["ci95"]:
            assert [score.metrics["ci95_low"].value, score.metrics["ci95_high"].value] == entry["ci95"]
        else:
            assert "ci95_low" not in score.metrics
    headline = dataset_headline(results.dataset.name, scores.metric_names())[0]
    assert log.results.scores[0].name == headline == log.results.headline.score == log.eval.headline_metric.score
    assert log.results.total_samples == results.counts.selected
    assert log.results.completed_samples == results.counts.finished


# --------------------------------------------------------------------------- without inspect-ai, bad input
def test_missing_inspect_ai_is_one_line_with_the_install_hint(tiny_run, monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "inspect_ai", None)  # `import inspect_ai` raises ImportError
    assert main(["export", "inspect", str(tiny_run), "--out", str(tmp_path / "x.eval")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "inspect-ai" in err[0] and "pip install 'manyanswer-harness[inspect]'" in err[0]
    assert not (tmp_path / "x.eval").exists()


@pytest.mark.parametrize(
    "make, needle",
    [
        (lambda p: p / "missing", "no such run directory"),
        (lambda p: (p / "f.txt").write_text("x") and p / "f.txt", "not a folder"),
        (lambda p: p, "not a run directory"),
        (lambda p: (p / "results.json").write_text("{") and p, "results.json"),
    ],
    ids=["missing", "a-file", "not-a-run", "damaged-results"],
)
def test_bad_run_dir_is_one_line_exit_2(make, needle, tmp_path, capsys):
    run_dir = make(tmp_path)
    assert main(["export", "inspect", str(run_dir), "--out", str(tmp_path / "o.eval")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and needle in err[0], err
    assert not (tmp_path / "o.eval").exists()


def test_bad_out_name_and_submission_options_are_refused(tiny_run, tmp_path, capsys):
    for argv, needle in [
        (["--out", str(tmp_path / "log.txt")], "FILE.eval"),
        (["--out", str(tmp_path)], "is a folder"),
        (["--name", "X"], "--name"),
        (["--allow-partial"], "--allow-partial"),
        ([str(tiny_run)], "one RUN_DIR"),
    ]:
        assert main(["export", "inspect", str(tiny_run), *argv]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and needle in err[0], err
    assert main(["export", "fanoutqa-submission", str(tiny_run)]) == 2  # its --out is still required
    assert "--out DIR is required" in capsys.readouterr().err


# --------------------------------------------------------------------------- the log
@pytest.mark.slow  # imports inspect-ai (about 4 s) and makes three runs
def test_closed_book_run_maps_samples_scores_headline_and_usage(inspect_ai, runs, export, tmp_path):
    run_dir = runs["closed"]
    code, err = export(run_dir, "--out", str(tmp_path / "closed.eval"))
    assert code == 0, err
    log = read(tmp_path / "closed.eval")
    results = read_results(run_dir)
    rows = load_rows(run_dir).finished
    assert log.status == "success" and log.eval.run_id == results.run_id and log.eval.task == "hotpotqa/closed-book"
    assert log.eval.model == "scripted/inspect-partial" and log.eval.created == results.started_at
    assert log.eval.task_args == results.config.model_dump(mode="json")
    assert log.eval.model_generate_config.max_tokens == results.config.generation.max_tokens
    assert log.eval.packages["manyanswer-harness"] == results.harness.version
    assert sorted((s.id, s.epoch) for s in log.samples) == sorted((r.id, r.epoch) for r in rows.values())
    gold = {s.id: s for s in HOTPOT.samples}
    per_question = results.scores.per_question()
    for sample in log.samples:
        row = rows[work_key(sample.id, sample.epoch)]
        assert sample.input == row.question and sample.target == gold_text(gold[sample.id].answer)
        assert sample.output.completion == row.answer
        assert_messages_equal_transcript(sample.messages, row.transcript())
        scores = {f"{m}.{k}": float(v) for m, s in sample.scores.items() for k, v in s.value.items()}
        assert scores == per_question[sample.id] and all(s.answer == row.answer for s in sample.scores.values())
        usage = sample.model_usage["scripted/inspect-partial"]
        assert (usage.input_tokens, usage.output_tokens) == (row.usage.prompt_tokens, row.usage.completion_tokens)
    assert_headline_equals_results(log, results)
    usage = log.stats.model_usage["scripted/inspect-partial"]
    assert (usage.input_tokens, usage.output_tokens, usage.total_tokens) == (
        results.tokens.prompt, results.tokens.completion, results.tokens.total
    )
    assert (log.stats.started_at, log.stats.completed_at) == (results.started_at, results.ended_at)


@pytest.mark.slow  # imports inspect-ai (about 4 s) and makes three runs
def test_open_book_tool_calls_reasoning_and_a_failed_sample_map(inspect_ai, runs, export, tmp_path):
    """Native tool calls become ToolCalls, the search results ChatMessageTools answering them, the
    thinking block a ContentReasoning; the failed question is a sample with its error and no score;
    the incomplete run is an Inspect "error" log saying why. Written as .json this time."""
    run_dir = runs["open"]
    code, err = export(run_dir, "--out", str(tmp_path / "open.json"))
    assert code == 0, err
    assert json.loads((tmp_path / "open.json").read_text())["version"] == 2  # JSON, as the name says
    log = read(tmp_path / "open.json")
    results = read_results(run_dir)
    rows = load_rows(run_dir)
    assert results.status == "incomplete" and log.status == "error" and "1 of 3 samples failed" in log.error.message
    assert len(log.samples) == 3
    per_question = results.scores.per_question()
    n_calls = 0
    for sample in log.samples:
        key = work_key(sample.id, sample.epoch)
        row = rows.finished.get(key) or rows.failed[key]
        assert_messages_equal_transcript(sample.messages, row.transcript())
        if key in rows.failed:
            assert sample.error.message.startswith(f"{row.error_type}: ") and "server said 500" in sample.error.message
            assert sample.scores is None and sample.output.choices == []
            continue
        assert sample.error is None
        calls = [c for m in sample.messages if m.role == "assistant" for c in m.tool_calls or []]
        assert [c.function for c in calls] == ["search", "search"] and all(c.arguments["query"] for c in calls)
        tools = [m for m in sample.messages if m.role == "tool"]
        assert [m.tool_call_id for m in tools] == [c.id for c in calls] and all(m.text for m in tools)
        n_calls += len(calls)
        last = sample.messages[-1]
        assert last.content[0].reasoning == THOUGHT and last.text == row.answer
        assert sample.metadata["extra"]["searches"] == row.extra["searches"]
        scores = {f"{m}.{k}": float(v) for m, s in sample.scores.items() for k, v in s.value.items()}
        assert scores == per_question[sample.id]
    assert n_calls == 4
    assert_headline_equals_results(log, results)


@pytest.mark.slow  # imports inspect-ai (about 4 s) and makes three runs
def test_epochs_map_to_samples_per_epoch_and_reductions_per_question(inspect_ai, runs, export, tmp_path):
    """The run records each question's values reduced over its epochs, not each epoch's: they are the
    log's reductions (reducer as the run's), and the epochs' samples carry no score."""
    run_dir = runs["epochs"]
    code, err = export(run_dir, "--out", str(tmp_path / "epochs.eval"))
    assert code == 0, err
    log = read(tmp_path / "epochs.eval")
    results = read_results(run_dir)
    assert sorted((s.id, s.epoch) for s in log.samples) == sorted((q, e) for q in results.sample_ids for e in (1, 2))
    assert all(s.scores is None for s in log.samples)
    per_question = results.scores.per_question()
    (reduction,) = log.reductions
    assert reduction.scorer == "fanoutqa-string" and reduction.reducer == "mean"
    got = {s.sample_id: {f"fanoutqa-string.{k}": float(v) for k, v in s.value.items()} for s in reduction.samples}
    assert got == per_question
    assert log.eval.config.epochs == 2 and log.eval.config.epochs_reducer == ["mean"]
    assert_headline_equals_results(log, results)
    assert all(s.reducer == "mean" for s in log.results.scores)


@pytest.mark.slow  # imports inspect-ai (about 4 s) and makes three runs
def test_a_run_without_results_json_is_a_started_log_of_its_rows(inspect_ai, runs, export, tmp_path):
    """Killed in its first invocation (config.json and samples.jsonl, no results.json): an Inspect log
    with status "started", the samples written so far, and no results (nothing is scored here)."""
    run_dir = tmp_path / "killed"
    shutil.copytree(runs["closed"], run_dir)
    (run_dir / "results.json").unlink()
    code, err = export(run_dir)
    assert code == 0, err
    assert "status started" in err
    log = read(run_dir / "inspect.eval")  # the default --out
    rows = load_rows(run_dir).finished
    assert log.status == "started" and log.results is None and log.stats.completed_at == ""
    assert sorted(s.id for s in log.samples) == sorted(r.id for r in rows.values())
    assert all(s.scores is None and s.output.completion == rows[work_key(s.id, 1)].answer for s in log.samples)


@pytest.mark.slow  # imports inspect-ai (about 4 s) and makes three runs
def test_the_write_is_atomic(inspect_ai, runs, export, tmp_path, monkeypatch):
    """A write that fails half way leaves the earlier file as it was and no temporary file behind."""
    import inspect_ai.log

    out = tmp_path / "kept.eval"
    out.write_bytes(b"the earlier log")

    def half_then_fail(log, location, format="auto", **kwargs):
        Path(location).write_bytes(b"PK\x03\x04 half a zip")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(inspect_ai.log, "write_eval_log", half_then_fail)
    assert main(["export", "inspect", str(runs["closed"]), "--out", str(out)]) == 1
    assert out.read_bytes() == b"the earlier log"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.eval"]


@pytest.mark.slow  # imports inspect-ai (about 4 s)
def test_a_lone_surrogate_is_written_as_u_fffd_and_said(inspect_ai, export, tmp_path):
    """A reply holding a lone surrogate (JSON's "\\ud800" escape, which Python decodes to one) is kept
    in the run's rows as its escape; the log, a document, holds U+FFFD instead, counted on stderr
    (inspect-ai's JSON writer cannot encode a lone surrogate)."""
    reply = "ye\ud800s"
    run_dir = scripted_run(tmp_path / "run", "inspect-lone", lambda *a: reply, "hotpotqa:dev", 1, "--metrics", "em-f1")
    assert "\\ud800" in (run_dir / "samples.jsonl").read_text()
    code, err = export(run_dir)
    assert code == 0, err
    assert "warning: 2 characters UTF-8 cannot encode" in err  # the answer and the transcript's reply
    (sample,) = read(run_dir / "inspect.eval").samples
    assert sample.output.completion == "ye\ufffds" == sample.messages[-1].text


# --------------------------------------------------------------------------- the viewer
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=30) as reply:
        return reply.read()


@pytest.mark.slow  # imports inspect-ai and starts its viewer's server
def test_inspect_view_lists_and_reads_the_log(inspect_ai, runs, export, tmp_path):
    """``inspect view`` started on a folder of exported logs: its API (inspect_ai/_view/fastapi_server.py,
    mounted under /api by standalone_view_app in inspect-ai 0.3.285) lists the log (GET /api/logs), reads
    its header with the results (GET /api/log-headers?file=), the whole log (GET /api/logs/{log}) and
    the .eval zip's bytes as the browser viewer does (GET /api/log-size/{log}, /api/log-bytes/{log})."""
    logs = tmp_path / "logs"
    for name in ("closed", "open"):
        assert export(runs[name], "--out", str(logs / name / "run.eval"))[0] == 0
    port = _free_port()
    cmd = [sys.executable, "-m", "inspect_ai", "view", "start", "--log-dir", str(logs), "--port", str(port)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}/api"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                listing = json.loads(_get(f"{base}/logs"))
                break
            except OSError:
                assert proc.poll() is None, proc.stderr.read().decode()
                assert time.monotonic() < deadline, "inspect view did not answer in 60 s"
                time.sleep(0.3)
        names = {Path(urllib.parse.urlparse(f["name"]).path).relative_to(logs).as_posix(): f for f in listing["files"]}
        assert set(names) == {"closed/run.eval", "open/run.eval"}
        for rel, entry in names.items():
            results = read_results(runs[rel.split("/")[0]])
            assert entry["task"] == f"hotpotqa/{results.setting}"
            quoted = urllib.parse.quote(entry["name"], safe="")
            (header,) = json.loads(_get(f"{base}/log-headers?file={quoted}"))
            assert header["eval"]["run_id"] == results.run_id and header["results"]["scores"]
            whole = json.loads(_get(f"{base}/logs/{quoted}"))
            assert len(whole["samples"]) == results.counts.finished + results.counts.failed
            size = int(_get(f"{base}/log-size/{quoted}"))
            assert size == (logs / rel).stat().st_size
            assert _get(f"{base}/log-bytes/{quoted}?start=0&end=3") == b"PK\x03\x04"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# --------------------------------------------------------------------------- messages from recorded replies
RECORDED = Path(__file__).parent / "fixtures" / "recorded"


@pytest.mark.slow  # imports inspect-ai (about 4 s)
def test_recorded_replies_map_to_inspect_messages(inspect_ai):
    """Real replies as the backends record them in a transcript (``ModelResponse.as_message``), mapped:
    Anthropic's thinking block with its signature and a tool_use (tests/fixtures/recorded/anthropic/
    tool_with_thinking.yaml), its redacted_thinking block (model_thinking_part_redacted.yaml), its
    documented refusal (REFUSAL_REPLY of tests/test_anthropic_recorded.py), and an OpenAI Responses
    reasoning item with encrypted content and no summary (openai_responses_default_effort.json)."""
    import yaml
    from test_anthropic_recorded import REFUSAL_REPLY

    from harness.analysis.inspect_log import messages_of
    from harness.models.anthropic_api import from_anthropic_message
    from harness.models.openai_responses import response_from_responses

    def reply(name: str, i: int = 0) -> dict:
        return yaml.safe_load((RECORDED / "anthropic" / name).read_text())["interactions"][i]["response"]["parsed_body"]

    tool_turn = from_anthropic_message(reply("tool_with_thinking.yaml")).as_message()
    redacted = from_anthropic_message(reply("model_thinking_part_redacted.yaml")).as_message()
    refused = from_anthropic_message(REFUSAL_REPLY).as_message()
    recorded = json.loads((RECORDED / "openai_responses_default_effort.json").read_text())["interactions"][0]
    openai = response_from_responses(recorded["response"]).as_message()
    call_id = tool_turn["tool_calls"][0]["id"]
    transcript = [
        {"role": "user", "content": "Where am I?"}, tool_turn,
        {"role": "tool", "tool_call_id": call_id, "content": "Mexico"}, redacted, refused, openai,
    ]  # fmt: skip
    user, assistant, tool, hidden, refusal, encrypted = messages_of(transcript, "m", "q")
    (thought, text) = assistant.content
    block = tool_turn["reasoning_items"][0]
    assert (thought.reasoning, thought.signature, thought.redacted) == (block["thinking"], block["signature"], False)
    assert text.text == tool_turn["content"] and assistant.text == tool_turn["content"]
    (call,) = assistant.tool_calls
    assert (call.id, call.function, call.arguments) == (call_id, "get_user_country", {})
    assert (tool.tool_call_id, tool.function, tool.text) == (call_id, "get_user_country", "Mexico")
    kept = redacted["reasoning_items"][0]
    assert hidden.content[0].redacted and hidden.content[0].reasoning == kept["data"]
    assert hidden.text == redacted["content"]
    assert [(p.text, p.refusal) for p in refusal.content] == [
        ("Hello..", None), ("This request was declined because it could enable cyber harm.", True)
    ]  # the text said before the cut, then the classifier's explanation (our refusal field)
    item = recorded["response"]["output"][0]
    (reasoning, answer) = encrypted.content
    assert (reasoning.reasoning, reasoning.signature, reasoning.redacted, reasoning.summary) == (
        item["encrypted_content"], item["id"], True, None
    )
    assert answer.text == "Mexico City (Ciudad de México)." == encrypted.text
