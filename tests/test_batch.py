"""--batch against a loopback fake of the providers' batch endpoints (tests/fake_batch.py): the same
answers as one request at a time, the record that lets a killed run resume its batches without
sending them again, failures with reasons and retries as new batches, the batch price, the budget."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import harness_cmd, run_harness
from fake_batch import FakeBatchServer, answer_for

import harness
from harness.errors import ModelError
from harness.execution.config import build_config
from harness.models.batch import BATCHES_FILE
from harness.execution.record import results_dict

# each test starts a loopback server (or runs whole CLI runs in subprocesses): the slow tier
pytestmark = pytest.mark.slow

BATCH = {"batch_window": 0.2, "batch_poll_interval": 0.05}
OPENAI = "openai/gpt-test"
ANTHROPIC = "anthropic/claude-sonnet-4-5"  # in the facts table: its sampling known, no probe
PRICE_IN, PRICE_OUT = 1.0, 10_000.0  # USD per 1M tokens: the fake's 100 + 10 tokens cost 0.1001 a request
FULL_COST = (100 * PRICE_IN + 10 * PRICE_OUT) / 1e6


@pytest.fixture
def prices(tmp_path):
    path = tmp_path / "prices.yaml"
    path.write_text(
        "source: test\nretrieved: today\nbatch_discount: {openai: 0.5, anthropic: 0.5}\nmodels:\n"
        f"  {OPENAI}: {{input: {PRICE_IN}, output: {PRICE_OUT}}}\n"
        f"  {ANTHROPIC}: {{input: {PRICE_IN}, output: {PRICE_OUT}}}\n"
    )
    return path


@pytest.fixture
def anthropic_key(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-anthropic-key")


def base_url(fake, model):
    return fake.url + "/v1" if model.startswith("openai/") else fake.url


def run(fake, out, model=OPENAI, batch=True, limit=10, **options):
    options = {**(BATCH if batch else {}), **options}
    return results_dict(harness.run(  # the JSON written
        model=model, base_url=base_url(fake, model), batch=batch or None, limit=limit, out=str(out), cache=False,
        show_progress=False, max_tokens=16, retry_max_wait=0.05, **options,
    ))  # fmt: skip


def rows(out, name="samples.jsonl"):
    path = Path(out) / name
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def events(out):
    return [json.loads(x) for x in (Path(out) / BATCHES_FILE).read_text().splitlines()]


def answers(out):
    return {r["id"]: r["answer"] for r in rows(out)}


# ------------------------------------------------------------------------------- the same answers
@pytest.mark.parametrize("model", [OPENAI, ANTHROPIC])
def test_a_batch_run_answers_as_the_run_without_batch(model, tmp_path, prices, anthropic_key):
    with FakeBatchServer(finish_after=3) as fake:
        single = run(fake, tmp_path / "single", model, batch=False, price_table=str(prices))
        assert fake.chat_calls == 10 and fake.creates == 0
        batched = run(fake, tmp_path / "batched", model, price_table=str(prices))
        assert fake.chat_calls == 10  # nothing more went one by one
        assert fake.creates == 1 and fake.batch_sizes == [10]  # all ten first requests in one batch
        lines = next(iter(fake.batches.values()))["lines"]
    assert single["counts"]["finished"] == batched["counts"]["finished"] == 10
    assert answers(tmp_path / "batched") == answers(tmp_path / "single")
    # each answer is the one for its own question: custom_ids mapped back to the right samples
    for row in rows(tmp_path / "batched"):
        assert row["answer"] == answer_for(row["messages"][-2]["content"])
    if model == OPENAI:
        assert all(x["method"] == "POST" and x["url"] == "/v1/chat/completions" for x in lines)
        assert {x["body"]["model"] for x in lines} == {"gpt-test"} and all(x["body"]["max_tokens"] == 16 for x in lines)
    else:
        assert {x["params"]["model"] for x in lines} == {"claude-sonnet-4-5"}
        assert all(x["params"]["max_tokens"] == 16 and x["params"]["temperature"] == 0 for x in lines)
    log = events(tmp_path / "batched")
    kinds = [e["event"] for e in log]
    assert kinds[:3] == ["prepared", "submitted", "ended"] and kinds.count("used") == 10
    prepared = log[0]["requests"]
    assert {(r["sample"], r["epoch"]) for r in prepared.values()} == {(r["id"], 1) for r in rows(tmp_path / "batched")}
    facts = batched["model"]["batches"]
    assert facts["submitted"] == 1 and facts["requests_sent"] == 10 and facts["ended"] == {
        ("completed" if model == OPENAI else "ended"): 1
    }
    assert batched["model"]["batch"]["provider"] == model.split("/")[0]


def test_multi_turn_strategies_run_in_waves(tmp_path):
    """Each round of every open sample is one batch."""
    from harness.strategy import AGENTS, Agent, SampleResult, register_agent

    class Twice(Agent):
        settings = ("closed-book",)

        async def solve(self, sample, ctx):
            messages = [{"role": "user", "content": sample.question}]
            first = await ctx.generate(messages)
            messages += [first.as_message(), {"role": "user", "content": "Again: " + sample.question}]
            second = await ctx.generate(messages)
            return SampleResult(second.content, [*messages, second.as_message()])

    register_agent("batch-twice")(Twice)
    try:
        with FakeBatchServer() as fake:
            result = run(fake, tmp_path / "run", agent="batch-twice", limit=6)
            assert fake.batch_sizes == [6, 6]
    finally:
        AGENTS.unregister("batch-twice")
    assert result["counts"]["finished"] == 6
    for row in rows(tmp_path / "run"):
        assert row["answer"] == answer_for(row["messages"][-2]["content"]) and row["model_calls"] == 2


# ------------------------------------------------------------------------------- kill -9 and resume
def start_killable(fake, out, model=OPENAI, extra=()):
    args = [
        "run", "--model", model, "--base-url", base_url(fake, model), "--batch", "--batch-window", "0.2",
        "--batch-poll-interval", "0.05", "--limit", "10", "--out", str(out), "--no-cache", "--max-tokens", "16",
        *extra,
    ]  # fmt: skip
    return subprocess.Popen(harness_cmd(*args), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def wait_for(condition, proc, timeout=120):
    deadline = time.monotonic() + timeout
    while not condition():
        assert proc.poll() is None, proc.stderr.read()
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def kill9(proc):
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(30)
    assert proc.returncode == -signal.SIGKILL


@pytest.mark.parametrize("model", [OPENAI, ANTHROPIC])
def test_kill_9_after_submit_resumes_the_same_batch(model, tmp_path, prices, anthropic_key):
    """Killed while the batch is in progress; it completes while nothing runs; the rerun downloads
    and uses it and sends nothing again."""
    out = tmp_path / "run"
    with FakeBatchServer(hold=True) as fake:
        proc = start_killable(fake, out, model, ["--price-table", str(prices)])
        wait_for(lambda: fake.polls >= 3, proc)  # polling: the batch id is on disk by now
        kill9(proc)
        assert [e["event"] for e in events(out)] == ["prepared", "submitted"]
        assert rows(out) == []
        fake.release()  # the batch finishes while the harness is dead
        first = run(fake, out, model, price_table=str(prices), limit=4)  # 4 of its answers taken, 6 left
        assert first["counts"]["finished"] == 4
        assert first["model"]["batches"]["unused"] == {"requests": 6, "prompt_tokens": 600, "completion_tokens": 60}
        # the 6 answers no sample took are billed all the same: spent counts the whole batch
        assert first["cost"]["spent_usd"] == pytest.approx(10 * FULL_COST / 2)
        result = run(fake, out, model, price_table=str(prices))
        assert fake.creates == 1 and fake.uploads == (1 if model == OPENAI else 0) and fake.chat_calls == 0
    assert result["counts"]["finished"] == 10 and result["status"] == "complete"
    facts = result["model"]["batches"]
    assert facts["resumed"] == 0 and facts["submitted"] == 0 and facts["results_reused"] == 6
    assert facts["unused"]["requests"] == 0
    assert first["model"]["batches"]["resumed"] == 1
    for row in rows(out):
        assert row["answer"] == answer_for(row["messages"][-2]["content"])
        assert row["model_calls"] == 1 and row["spent_usd"] == pytest.approx(FULL_COST / 2)  # paid once, counted once
    assert result["cost"]["spent_usd"] == pytest.approx(10 * FULL_COST / 2)


def test_kill_9_between_create_and_its_reply_adopts_the_batch(tmp_path):
    """The provider created the batch but the harness died before recording its id: the rerun finds
    it by the key in its metadata instead of creating another."""
    out = tmp_path / "run"
    with FakeBatchServer(block_create=True) as fake:
        proc = start_killable(fake, out)
        wait_for(lambda: fake.creates == 1, proc)
        kill9(proc)
        assert [e["event"] for e in events(out)] == ["prepared"]
        fake.create_gate.set()
        result = run(fake, out)
        assert fake.creates == 1
    assert result["counts"]["finished"] == 10
    assert result["model"]["batches"]["adopted"] == 1
    assert [e["event"] for e in events(out) if e["event"] != "used"] == ["prepared", "submitted", "ended"]


def kill_between_create_and_record(fake, out, model=OPENAI):
    """Killed while the provider is answering the create call: the batch exists, its id is not on disk."""
    proc = start_killable(fake, out, model)
    wait_for(lambda: fake.creates == 1, proc)
    kill9(proc)
    assert [e["event"] for e in events(out)] == ["prepared"]
    fake.create_gate.set()


# every list call of the rerun, the probe's first, meets these in turn
@pytest.mark.parametrize(
    "model, faults",
    [(OPENAI, [429, 429]), (OPENAI, [503, 500, 502]), (OPENAI, [503, "timeout"]), (OPENAI, [503, "drop", 503]),
     (ANTHROPIC, [529, 429, "timeout"])],
)  # fmt: skip
def test_a_failing_batch_list_is_retried_so_the_batch_is_paid_once(model, faults, tmp_path, prices, anthropic_key):
    """The search for a batch created just before a kill meets 429s, 5xx, a timeout, a dropped
    connection: it is retried (the policy of any call), finds the batch and sends nothing again."""
    out = tmp_path / "run"
    with FakeBatchServer(block_create=True) as fake:
        kill_between_create_and_record(fake, out, model)
        fake.fault_sleep = 1.5
        fake.list_faults = list(faults)
        result = run(fake, out, model, price_table=str(prices), request_timeout=0.5)
        assert fake.creates == 1 and fake.lists >= len(faults) + 1 and not fake.list_faults
    assert result["counts"]["finished"] == 10 and result["model"]["batches"]["adopted"] == 1
    assert [e["event"] for e in events(out) if e["event"] != "used"] == ["prepared", "submitted", "ended"]
    assert result["cost"]["spent_usd"] == pytest.approx(10 * FULL_COST / 2)


def test_a_search_that_cannot_finish_stops_the_run_and_a_rerun_searches_again(tmp_path):
    out = tmp_path / "run"
    with FakeBatchServer(block_create=True) as fake:
        kill_between_create_and_record(fake, out)
        fake.list_faults = [503] * 3  # the probe's, then both tries of the search
        proc = run_harness(
            "run", "--model", OPENAI, "--base-url", fake.url + "/v1", "--batch", "--batch-window", "0.2",
            "--limit", "10", "--out", str(out), "--no-cache", "--max-tokens", "16", "--max-attempts", "2",
            "--retry-max-wait", "0.05",
        )  # fmt: skip
        lines = [x for x in proc.stderr.splitlines() if x.startswith("error")]
        assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
        assert "batch list could not be read" in lines[0] and "503" in lines[0] and "never paid twice" in lines[0]
        assert fake.creates == 1 and [e["event"] for e in events(out)] == ["prepared"]  # nothing sent, nothing given up
        result = run(fake, out)
        assert fake.creates == 1
    assert result["counts"]["finished"] == 10 and result["model"]["batches"]["adopted"] == 1


@pytest.mark.parametrize("created", [True, False])
def test_only_the_whole_list_read_says_not_there(created, tmp_path):
    """250 newer batches of others (three pages): the batch is found on the last page, or, never
    created, is sent again only once every page was read."""
    out = tmp_path / "run"
    with FakeBatchServer(block_create=created, block_before_create=not created) as fake:
        if created:
            kill_between_create_and_record(fake, out)
        else:
            proc = start_killable(fake, out)
            wait_for(lambda: (out / BATCHES_FILE).exists() and fake.uploads == 1, proc)
            time.sleep(0.3)  # the create call is waiting at the fake's gate
            kill9(proc)
            assert [e["event"] for e in events(out)] == ["prepared"] and fake.creates == 0
            fake.before_create_gate.set()
        fake.add_foreign("openai", 250)
        fake.lists = 0
        result = run(fake, out)
        assert fake.lists == 1 + 3  # the probe, then every page
        assert fake.creates == 1
    assert result["counts"]["finished"] == 10
    facts = result["model"]["batches"]
    assert (facts["adopted"], facts["abandoned"]) == ((1, 0) if created else (0, 1))


def test_anthropic_a_batch_of_another_size_is_not_ours_and_one_of_the_same_size_is_checked(tmp_path, anthropic_key):
    """Message batches name no key: the candidate is one of as many requests created since; one
    whose results carry none of our custom_ids was a wrong guess, and our requests go again."""
    out = tmp_path / "run"
    with FakeBatchServer(block_before_create=True) as fake:
        proc = start_killable(fake, out, ANTHROPIC)
        wait_for(lambda: (out / BATCHES_FILE).exists(), proc)
        time.sleep(0.5)  # the create call is waiting at the fake's gate
        kill9(proc)
        fake.before_create_gate.set()
        fake.add_foreign("anthropic", 3, requests=7)
        fake.add_foreign("anthropic", 1, requests=10)  # the same size: taken, then refuted by its results
        result = run(fake, out, ANTHROPIC)
        assert fake.creates == 1 and fake.batch_sizes == [10]
    assert result["counts"]["finished"] == 10
    facts = result["model"]["batches"]
    assert facts["adopted"] == 1 and facts["requests_resent"] == 10
    for row in rows(out):
        assert row["answer"] == answer_for(row["messages"][-2]["content"])


@pytest.mark.parametrize("model", [OPENAI, ANTHROPIC])
def test_a_create_call_answered_502_after_creating_is_found_not_sent_again(model, tmp_path, anthropic_key):
    with FakeBatchServer() as fake:
        fake.create_faults = [502]
        result = run(fake, tmp_path / "run", model)
        assert fake.creates == 1
    assert result["counts"]["finished"] == 10 and result["model"]["batches"]["submitted"] == 1


def test_a_result_a_row_has_counted_is_not_reused_but_an_uncounted_one_is(tmp_path):
    """Resume picks recorded results by (sample, epoch, request hash) and never twice into the cost."""
    from harness.models.batch import BatchStore

    out = tmp_path / "run"
    with FakeBatchServer() as fake:
        run(fake, out, limit=2)
    store = BatchStore(out, invocation=2)
    sample = rows(out)[0]["id"]
    digest = next(r["hash"] for r in events(out)[0]["requests"].values() if r["sample"] == sample)
    assert store.claim((sample, 1), digest) is None  # used in invocation 1, whose row counted it
    (out / "samples.jsonl").write_text("")  # as if killed before the row was written
    store = BatchStore(out, invocation=2)
    batch, cid = store.claim((sample, 1), digest)
    assert batch.requests[cid]["sample"] == sample and store.result(batch, cid)["status"] == 200
    assert store.claim((sample, 1), digest) is None  # each recorded request answers once
    assert store.claim((sample, 2), digest) is None and store.claim((sample, 1), "0" * 64) is None


# ------------------------------------------------------------------------------- failures, retries
@pytest.mark.parametrize("model", [OPENAI, ANTHROPIC])
@pytest.mark.parametrize("outcome, reason", [("expired", "expired"), ("failed", "fake"), ("cancelled", "cancel")])
def test_a_batch_that_did_not_complete_is_sent_again_then_fails_with_its_reason(
    model, outcome, reason, tmp_path, anthropic_key
):
    with FakeBatchServer(outcomes=[outcome]) as fake:
        result = run(fake, tmp_path / "retried", model)
        assert fake.creates == 2 and fake.batch_sizes == [10, 10]  # a new batch, not the old one again
    assert result["counts"]["finished"] == 10
    assert result["model"]["batches"]["requests_resent"] == 10
    assert all(r["model_calls"] == 1 for r in rows(tmp_path / "retried"))
    with FakeBatchServer(outcomes=[outcome]) as fake:
        result = run(fake, tmp_path / "once", model, max_attempts=1)
        assert fake.creates == 1
        assert result["counts"]["failed"] == 10 and result["status"] == "incomplete"
        for failure in rows(tmp_path / "once", "failures.jsonl"):
            assert failure["error_type"] == "model_unavailable"
            assert reason in failure["error"] and ("batch_1" in failure["error"] or "msgbatch_1" in failure["error"])
        again = run(fake, tmp_path / "once", model, max_attempts=1)  # a rerun sends them in a new batch
        assert fake.creates == 2
    assert again["counts"]["finished"] == 10


@pytest.mark.parametrize("model", [OPENAI, ANTHROPIC])
def test_a_batch_the_provider_no_longer_knows_is_sent_again(model, tmp_path, anthropic_key):
    with FakeBatchServer(outcomes=["vanished"]) as fake:
        result = run(fake, tmp_path / "run", model)
        assert fake.creates == 2
    assert result["counts"]["finished"] == 10
    assert [e.get("status") for e in events(tmp_path / "run") if e["event"] == "ended"] == [
        "failed", "completed" if model == OPENAI else "ended",
    ]  # fmt: skip


def test_a_batch_that_cannot_be_polled_is_never_sent_again_and_a_rerun_resumes_it(tmp_path):
    with FakeBatchServer() as fake:
        fake.poll_failures = 10**6
        result = run(fake, tmp_path / "run", max_attempts=2)
        assert fake.creates == 1
        assert result["counts"]["failed"] == 10
        for failure in rows(tmp_path / "run", "failures.jsonl"):
            assert "batch_1 could not be followed" in failure["error"] and "a rerun resumes it" in failure["error"]
        fake.poll_failures = 0
        again = run(fake, tmp_path / "run", max_attempts=2)
        assert fake.creates == 1  # the same batch, resumed
    assert again["counts"]["finished"] == 10 and again["model"]["batches"]["resumed"] == 1


def test_a_server_without_batch_endpoints_is_refused_before_the_run(tmp_path):
    with FakeBatchServer(batch_endpoints=False) as server:
        proc = run_harness(
            "run", "--model", OPENAI, "--base-url", server.url + "/v1", "--batch", "--batch-window", "0.1",
            "--limit", "2", "--out", str(tmp_path / "run"), "--no-cache",
        )  # fmt: skip
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert "has no batch endpoints (GET /batches answered 404)" in lines[0]
    assert not (tmp_path / "run" / "config.json").exists()  # refused before the run began


@pytest.mark.parametrize("model", [OPENAI, ANTHROPIC])
def test_per_request_errors_are_sent_again_alone(model, tmp_path, anthropic_key):
    def line_error(batch, line, custom_id):
        return (500, "the fake server broke on this one") if batch == 1 and line in (0, 3) else None

    with FakeBatchServer(line_error=line_error) as fake:
        result = run(fake, tmp_path / "retried", model)
        assert fake.batch_sizes == [10, 2]
    assert result["counts"]["finished"] == 10
    with FakeBatchServer(line_error=line_error) as fake:
        result = run(fake, tmp_path / "once", model, max_attempts=1)
    assert result["counts"] == {**result["counts"], "finished": 8, "failed": 2}
    for failure in rows(tmp_path / "once", "failures.jsonl"):
        assert "the fake server broke on this one" in failure["error"] and "500" in failure["error"]


def test_a_model_the_table_does_not_know_is_probed_before_its_batches(tmp_path, anthropic_key):
    """Its sampling parameters are found by the pre-flight probe (one request, refused as the API
    refuses), so no batch line carries one it refuses; a known model's lines are never probed for."""
    with FakeBatchServer(refuses=("temperature",)) as fake:
        result = run(fake, tmp_path / "run", "anthropic/claude-test", max_attempts=1, limit=3)
        lines = fake.batches["msgbatch_1"]["lines"]
        assert fake.chat_calls == 1 and fake.batch_sizes == [3]  # the probe, then one batch
    assert result["counts"]["finished"] == 3
    assert all("temperature" not in x["params"] for x in lines)
    assert result["model"]["probe"]["refuses"] == ["temperature"]
    # the table says it takes a temperature: a 400 for it stops the run (one line), never a lesson
    with FakeBatchServer(refuses=("temperature",)) as fake:
        with pytest.raises(ModelError, match="`temperature` is deprecated for this model"):
            run(fake, tmp_path / "known", ANTHROPIC, max_attempts=1, limit=3)
        assert fake.chat_calls == 0 and fake.batch_sizes == [3]  # not probed, not sent again without it


def test_a_per_request_prompt_too_long_is_a_context_overflow(tmp_path):
    def line_error(batch, line, custom_id):
        return (400, "This model's maximum context length is 8 tokens") if line == 1 else None

    with FakeBatchServer(line_error=line_error) as fake:
        result = run(fake, tmp_path / "run")
        assert fake.creates == 1  # not sent again: it would not fit the next time either
    assert result["counts"]["finished"] == 9
    (failure,) = rows(tmp_path / "run", "failures.jsonl")
    assert failure["error_type"] == "context_overflow" and "maximum context length" in failure["error"]


# ------------------------------------------------------------------------------- cost and budget
def test_cost_is_the_batch_price_and_recorded(tmp_path, prices):
    with FakeBatchServer() as fake:
        single = run(fake, tmp_path / "single", batch=False, price_table=str(prices))
        batched = run(fake, tmp_path / "batched", price_table=str(prices))
    for row in rows(tmp_path / "single"):
        assert row["cost_usd"] == pytest.approx(FULL_COST) and row["spent_usd"] == pytest.approx(FULL_COST)
    for row in rows(tmp_path / "batched"):
        assert row["cost_usd"] == pytest.approx(FULL_COST / 2) and row["spent_usd"] == pytest.approx(FULL_COST / 2)
    assert batched["cost"]["model_usd"] == pytest.approx(single["cost"]["model_usd"] / 2)
    price = batched["cost"]["price"]
    assert price["batch_discount"] == 0.5 and price["input_usd_per_mtok"] == PRICE_IN / 2
    assert price["output_usd_per_mtok"] == PRICE_OUT / 2 and "batch_discount" not in single["cost"]["price"]
    assert batched["config"]["backend"]["batch"] is True


def test_the_default_price_table_has_half_price_batches():
    from harness.execution.cost import DEFAULT_PRICE_TABLE, load_price_table, pricing_for

    table = load_price_table(DEFAULT_PRICE_TABLE)
    assert table.batch_discount == {"openai": 0.5, "anthropic": 0.5}
    full, half = pricing_for("openai/gpt-4o", table), pricing_for("openai/gpt-4o", table, batch=True)
    assert (half.input_per_mtok, half.output_per_mtok) == (full.input_per_mtok / 2, full.output_per_mtok / 2)
    assert pricing_for("vllm/x", table, batch=True).free


def test_budget_is_reserved_for_the_whole_batch_before_it_is_sent(tmp_path, prices):
    """A request's worst case here is about 0.08 USD at the batch price (16 tokens at 5,000/M), its
    cost 0.05005: a budget below one worst case sends nothing; 0.25 lets 3 into the first batch."""
    with FakeBatchServer() as fake:
        result = run(fake, tmp_path / "none", price_table=str(prices), max_cost=0.05)
        assert fake.creates == 0 and fake.uploads == 0
    assert result["status"] == "budget_exhausted" and result["counts"]["finished"] == 0
    assert all(r["error_type"] == "budget_exhausted" for r in rows(tmp_path / "none", "failures.jsonl"))
    assert not (tmp_path / "none" / BATCHES_FILE).exists()

    with FakeBatchServer() as fake:
        result = run(fake, tmp_path / "some", price_table=str(prices), max_cost=0.25)
        sizes = fake.batch_sizes
    assert sizes[0] == 3 and max(sizes) <= 3  # never more in flight than the budget's worst cases
    assert result["status"] == "budget_exhausted" and result["counts"]["finished"] == sum(sizes)
    assert result["cost"]["spent_usd"] <= 0.25


# ------------------------------------------------------------------------------- refused before anything
def test_batch_is_in_the_run_key_its_timings_are_not():
    plain = build_config({"model": OPENAI}).config_hash()
    batch = build_config({"model": OPENAI, "batch": True}).config_hash()
    timed = build_config({"model": OPENAI, "batch": True, "batch_window": 9, "batch_poll_interval": 1}).config_hash()
    assert plain != batch == timed
    assert build_config({"model": OPENAI, "batch": False}).config_hash() == plain  # neutral: old keys kept


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--model", "scripted/echo"], "scripted/ has none"),
        (["--model", "openai/gpt-test", "--base-url", "http://127.0.0.1:9/v1,http://127.0.0.1:8/v1"], "one --base-url"),
        (["--model", "vllm/some-model", "--base-url", "http://127.0.0.1:9/v1"], "vllm run-batch"),
        (["--model", "vllm/some-model"], "needs vLLM"),
        (["--model", "openai/gpt-test", "--price-table", "NOTABLE"], "no batch discount for openai/"),
    ],
)
def test_refused_in_one_line_before_anything_is_sent(args, needle, tmp_path):
    table = tmp_path / "prices.yaml"
    table.write_text("models:\n  openai/gpt-test: {input: 1, output: 2}\n")
    args = [str(table) if a == "NOTABLE" else a for a in args]
    proc = run_harness("run", "--batch", *args, "--limit", "1", "--out", str(tmp_path / "run"))
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], proc.stderr
    assert not (tmp_path / "run" / BATCHES_FILE).exists()


FAKE_VLLM = """#!{python}
import json, sys
sys.path.insert(0, {tests!r})
from fake_batch import completion
args = sys.argv[1:]
open({argv!r}, "a").write(json.dumps(args) + "\\n")
assert args[0] == "run-batch"
source, target = args[args.index("-i") + 1], args[args.index("-o") + 1]
with open(target, "w") as out:
    for text in open(source):
        line = json.loads(text)
        assert line["url"] == "/v1/chat/completions" and line["method"] == "POST"
        reply = {{"status_code": 200, "request_id": "q", "body": completion(line["body"])}}
        out.write(json.dumps({{"id": "r", "custom_id": line["custom_id"], "response": reply, "error": None}}) + "\\n")
"""


def test_vllm_run_batch_end_to_end_with_a_stand_in_executable(tmp_path, monkeypatch):
    """``vllm run-batch`` cannot run here: a stand-in on PATH takes its arguments and answers in its
    output format, so the command, the JSONL in and out and the mapping back are the real ones."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    argv_log = tmp_path / "argv.jsonl"
    script = bin_dir / "vllm"
    script.write_text(FAKE_VLLM.format(python=sys.executable, tests=str(Path(__file__).parent), argv=str(argv_log)))
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    out = tmp_path / "run"
    result = harness.run(
        model="vllm/org/model-x", batch=True, limit=4, out=str(out), cache=False, show_progress=False, max_tokens=16,
        context_size=2048, server_args=["--dtype=half"], **BATCH,
    )  # fmt: skip
    assert result.counts.finished == 4 and result.model.model_dump()["batch"]["provider"] == "vllm"
    for row in rows(out):
        assert row["answer"] == answer_for(row["messages"][-2]["content"])
    (args,) = [json.loads(x) for x in argv_log.read_text().splitlines()]
    assert args[0] == "run-batch" and args[args.index("--model") + 1] == "org/model-x"
    assert args[-5:] == ["--max-model-len", "2048", "--seed", "0", "--dtype=half"]
    assert list((out / "logs").glob("vllm-run-batch-*.log"))


def test_vllm_run_batch_command():
    from harness.models import BackendOptions, GenerationParams, create_backend

    backend = create_backend(
        "vllm/Qwen/Qwen2.5-7B", BackendOptions(batch=True, context_size=4096, server_args=["--dtype=half"])
    )
    argv = backend.provider.command("/usr/bin/vllm", "/tmp/in.jsonl", "/tmp/out.jsonl")
    assert argv == [
        "/usr/bin/vllm", "run-batch", "-i", "/tmp/in.jsonl", "-o", "/tmp/out.jsonl", "--model", "Qwen/Qwen2.5-7B",
        "--max-model-len", "4096", "--seed", "0", "--dtype=half",
    ]  # fmt: skip
    body = backend.provider.body([{"role": "user", "content": "Hi"}], GenerationParams(max_tokens=7), None, None)
    line = backend.provider.line("k-0", body)
    assert line == {"custom_id": "k-0", "method": "POST", "url": "/v1/chat/completions", "body": body}
    assert body["model"] == "Qwen/Qwen2.5-7B" and body["max_tokens"] == 7


# ------------------------------------------------------------------------------- vllm run-batch's processes
def alive(pid: int) -> bool:
    """A process that still runs (a zombie waiting for its parent to reap it runs no more)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 :][:1] != b"Z"


def stand_in_env(tmp_path, **extra) -> dict[str, str]:
    """The stand-in ``vllm`` (tests/fake_batch.py) first on PATH, temporary folders under tmp_path/tmp."""
    from fake_batch import write_vllm_stand_in

    write_vllm_stand_in(tmp_path / "bin")
    (tmp_path / "tmp").mkdir()
    path = f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}"
    return {**os.environ, "PATH": path, "TMPDIR": str(tmp_path / "tmp"), **extra}


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGINT])
def test_vllm_run_batch_stops_whole_with_the_run_and_leaves_no_prompts(stop, tmp_path):
    """run-batch (a stand-in that starts two workers, as vLLM's engine processes, then never ends):
    the run killed -9, or stopped with Ctrl-C, leaves no process of it and no temporary folder."""
    record = tmp_path / "workers.json"
    env = stand_in_env(tmp_path, FAKE_VLLM_WORKERS=str(record), FAKE_VLLM_HANG="1")
    args = [
        "run", "--model", "vllm/org/model-x", "--batch", "--batch-window", "0.2", "--batch-poll-interval", "0.05",
        "--limit", "4", "--out", str(tmp_path / "run"), "--no-cache", "--max-tokens", "16",
    ]  # fmt: skip
    proc = subprocess.Popen(harness_cmd(*args), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wait_for(record.exists, proc)
    pids = json.loads(record.read_text())  # the stand-in's, then its workers'
    assert all(alive(pid) for pid in pids) and len(list((tmp_path / "tmp").glob("harness-run-batch-*"))) == 1
    os.kill(proc.pid, stop)
    proc.wait(60)
    deadline = time.monotonic() + 30
    while any(alive(pid) for pid in pids) or any((tmp_path / "tmp").iterdir()):
        assert time.monotonic() < deadline, ([pid for pid in pids if alive(pid)], list((tmp_path / "tmp").iterdir()))
        time.sleep(0.05)
    assert proc.returncode == (-signal.SIGKILL if stop == signal.SIGKILL else 130), proc.stderr.read()


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_vllm_run_batch_that_ends_leaves_no_worker_and_no_prompts(tmp_path, monkeypatch):
    record = tmp_path / "workers.json"
    for key, value in stand_in_env(tmp_path, FAKE_VLLM_WORKERS=str(record)).items():
        monkeypatch.setenv(key, value)
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # read TMPDIR again
    result = harness.run(
        model="vllm/org/model-x", batch=True, limit=4, out=str(tmp_path / "run"), cache=False, show_progress=False,
        max_tokens=16, **BATCH,
    )  # fmt: skip
    assert result.counts.finished == 4
    pids = json.loads(record.read_text())
    assert not [pid for pid in pids if alive(pid)] and not list((tmp_path / "tmp").iterdir())
