"""Cost accounting and --max-cost against a local server speaking the OpenAI protocol, with a
price table of our own: per-sample and per-run cost, money spent, the budget stop and resume."""

from __future__ import annotations

import json

import pytest
from conftest import run_harness
from test_api_backends import FakeServer

from harness.cli import main
from harness.execution.cost import Budget, BudgetExhausted, load_price_table, pricing_for
from harness.errors import ConfigError
from harness.models.base import GenerationParams
from harness.models.scripted import register_script, unregister_script
from harness.scoring.llm_judge import factuality_system

PROMPT_TOKENS, COMPLETION_TOKENS = 150, 5
# USD per 1M tokens: output dominates, so a request's worst case (16 tokens) is 0.16 and its
# real cost (5 tokens) 0.05015 whatever the exact prompt length.
PRICE_IN, PRICE_OUT = 1.0, 10_000.0
COST = (PROMPT_TOKENS * PRICE_IN + COMPLETION_TOKENS * PRICE_OUT) / 1e6


def chat_handler(method, path, headers, body):
    if path.endswith("/chat/completions"):
        payload = {
            "id": "c",
            "object": "chat.completion",
            "created": 0,
            "model": body["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "Paris"}, "finish_reason": "stop"}],
            "usage": {
                "prompt_tokens": PROMPT_TOKENS,
                "completion_tokens": COMPLETION_TOKENS,
                "total_tokens": PROMPT_TOKENS + COMPLETION_TOKENS,
            },
        }
        return 200, {}, payload
    return 200, {}, {"object": "list", "data": []}


@pytest.fixture
def server():
    with FakeServer(chat_handler) as s:
        yield s


@pytest.fixture
def prices(tmp_path):
    path = tmp_path / "prices.yaml"
    path.write_text(
        "source: test\nretrieved: today\nmodels:\n"
        f"  openai/gpt-test: {{input: {PRICE_IN}, output: {PRICE_OUT}}}\n"
        "  openai/judge-test: {input: 2.0, output: 4.0}\n"
    )
    return path


def chat_posts(server):
    return [r for r in server.requests if r[1].endswith("/chat/completions")]


def run_api(server, out, *args, model="openai/gpt-test"):
    return run_harness(
        "run",
        "--model",
        model,
        "--base-url",
        server.url + "/v1",
        "--max-tokens",
        "16",
        "--max-connections",
        "1",
        "--out",
        str(out),
        *args,
    )


def read(path):
    return json.loads(path.read_text())


def lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.slow
def test_cost_per_sample_and_run(server, prices, tmp_path):
    out = tmp_path / "run"
    proc = run_api(server, out, "--limit", "3", "--price-table", str(prices))
    assert proc.returncode == 0, proc.stderr
    samples = lines(out / "samples.jsonl")
    assert len(samples) == 3
    for s in samples:
        assert s["cost_usd"] == pytest.approx(COST) and s["spent_usd"] == pytest.approx(COST)
    r = read(out / "results.json")
    cost = r["cost"]
    assert cost["model_usd"] == pytest.approx(3 * COST) and cost["spent_usd"] == pytest.approx(3 * COST)
    assert cost["per_sample_usd"] == pytest.approx(COST) and cost["total_usd"] == pytest.approx(3 * COST)
    assert cost["price"]["entry"] == "openai/gpt-test" and cost["price"]["input_usd_per_mtok"] == PRICE_IN
    assert cost["price_table"]["path"] == str(prices) and cost["judge"] is None
    assert r["config"]["price_table"] == str(prices)

    # Extended with a longer --limit: finished samples are not re-sent, only the new one costs.
    n_before = len(chat_posts(server))
    proc = run_api(server, out, "--limit", "4", "--price-table", str(prices))
    assert proc.returncode == 0, proc.stderr
    assert len(chat_posts(server)) == n_before + 1
    r = read(out / "results.json")
    assert r["cost"]["model_usd"] == pytest.approx(4 * COST) and r["cost"]["spent_usd"] == pytest.approx(4 * COST)


@pytest.mark.slow
def test_cached_answers_cost_nothing_to_spend(server, prices, tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    assert run_api(server, first, "--limit", "2", "--price-table", str(prices)).returncode == 0
    # a second run directory (another max-tokens would change the cache key; a new --out does not)
    proc = run_api(server, second, "--limit", "2", "--price-table", str(prices))
    assert proc.returncode == 0, proc.stderr
    samples = lines(second / "samples.jsonl")
    assert all(s["cache_hits"] == 1 and s["model_calls"] == 0 for s in samples)
    assert all(s["spent_usd"] == 0 and s["cost_usd"] == pytest.approx(COST) for s in samples)
    cost = read(second / "results.json")["cost"]
    assert cost["spent_usd"] == 0 and cost["model_usd"] == pytest.approx(2 * COST)


@pytest.mark.slow
def test_max_cost_stops_and_a_higher_budget_resumes(server, prices, tmp_path):
    out = tmp_path / "budget"
    # worst case 0.16 per request, real 0.05015: three requests fit in 0.27, the fourth would not
    proc = run_api(server, out, "--limit", "5", "--price-table", str(prices), "--max-cost", "0.27")
    assert proc.returncode == 1
    assert "stopped on budget" in proc.stderr and "higher --max-cost" in proc.stderr
    assert len(chat_posts(server)) == 3
    r = read(out / "results.json")
    assert r["status"] == "budget_exhausted" and r["stopped_on_budget"] is True
    assert r["counts"] == {"selected": 5, "finished": 3, "failed": 1, "pending": 1, "truncated_output": 0}
    assert [f["type"] for f in r["failures"].values()] == ["budget_exhausted"]
    failures = lines(out / "failures.jsonl")
    assert len(failures) == 1 and failures[0]["error_type"] == "budget_exhausted"
    assert failures[0]["model_calls"] == 0 and failures[0]["spent_usd"] == 0
    budget = r["cost"]["budget"]
    assert budget["stopped"] and budget["spent_usd"] == pytest.approx(3 * COST) and budget["spent_usd"] <= 0.27
    assert budget["spent_usd"] + budget["refused_request"]["worst_usd"] > 0.27
    assert budget["refused_request"]["max_tokens"] == 16
    assert r["cost"]["max_cost_usd"] == 0.27

    # The same budget again: what was spent before counts, so nothing is sent.
    proc = run_api(server, out, "--limit", "5", "--price-table", str(prices), "--max-cost", "0.27")
    assert proc.returncode == 1 and len(chat_posts(server)) == 3
    assert read(out / "results.json")["status"] == "budget_exhausted"

    # A higher budget resumes the same run directory (max_cost is not hashed).
    proc = run_api(server, out, "--limit", "5", "--price-table", str(prices), "--max-cost", "1.0")
    assert proc.returncode == 0, proc.stderr
    assert len(chat_posts(server)) == 5
    r = read(out / "results.json")
    assert r["status"] == "complete" and r["counts"]["finished"] == 5 and not r["stopped_on_budget"]
    assert r["cost"]["spent_usd"] == pytest.approx(5 * COST)
    assert r["cost"]["budget"]["stopped"] is False


@pytest.mark.slow
def test_unpriced_api_model(server, prices, tmp_path):
    out = tmp_path / "unpriced"
    proc = run_api(server, out, "--limit", "1", "--price-table", str(prices), model="openai/not-in-table")
    assert proc.returncode == 0, proc.stderr
    s = lines(out / "samples.jsonl")[0]
    assert s["cost_usd"] is None and s["spent_usd"] is None  # unknown, never 0
    cost = read(out / "results.json")["cost"]
    assert cost["model_usd"] is None and cost["total_usd"] is None and cost["spent_usd"] is None
    assert "not in the price table" in cost["price"]["reason"]

    # --max-cost cannot guard an unpriced model: refused before anything starts
    n = len(server.requests)
    proc = run_api(
        server, tmp_path / "x", "--limit", "1", "--price-table", str(prices), "--max-cost", "1", model="openai/nope"
    )
    assert proc.returncode == 2 and len(server.requests) == n
    expected = (
        f"error: --max-cost needs a price for openai/nope: openai/nope is not in the price table {prices}: "
        "add it there or pass --price-table"
    )
    assert proc.stderr.strip().splitlines() == [expected]
    assert not (tmp_path / "x").exists()


@pytest.mark.slow
def test_price_table_errors_are_one_line(server, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("models:\n  openai/gpt-test: {input: -1, output: 2}\n")
    proc = run_api(server, tmp_path / "r", "--limit", "1", "--price-table", str(bad))
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "models.openai/gpt-test.input" in proc.stderr
    proc = run_api(server, tmp_path / "r", "--limit", "1", "--price-table", str(tmp_path / "missing.yaml"))
    assert proc.returncode == 2 and "--price-table" in proc.stderr and "file not found" in proc.stderr


def test_shipped_price_table_and_lookup():
    table = load_price_table()
    assert table.source and table.retrieved and table.sha256
    assert pricing_for("openai/gpt-4o", table).input_per_mtok == 2.5
    # a dated snapshot falls back to its undated entry, unless it has its own
    assert pricing_for("openai/gpt-4o-2024-11-20", table).entry == "openai/gpt-4o"
    assert pricing_for("openai/gpt-4o-2024-05-13", table).output_per_mtok == 15.0
    assert pricing_for("anthropic/claude-3-5-haiku-20241022", table).entry == "anthropic/claude-3-5-haiku"
    local = pricing_for("local/smollm2", table)
    assert local.cost(1000, 1000) == 0 and "not priced" in local.note
    assert pricing_for("vllm/Qwen/Qwen2.5-7B", table).free
    assert pricing_for("openai/gpt-unknown", table).cost(1, 1) is None


class _Counter:
    def count_tokens(self, text):
        return len(text.split())


def test_budget_reserves_requests_in_flight():
    table = load_price_table()
    pricing = pricing_for("openai/gpt-4o", table)  # 2.5 / 10 USD per 1M
    budget = Budget(0.001, pricing)
    params = GenerationParams(max_tokens=40)  # worst output 0.0004
    messages = [{"role": "user", "content": "one two three"}]  # 3 + 8 + 3 = 14 tokens, 0.000035
    first = budget.reserve(_Counter(), messages, None, params)
    second = budget.reserve(_Counter(), messages, None, params)
    assert first == pytest.approx((14 * 2.5 + 40 * 10) / 1e6)
    # two in flight hold 0.00087: a third could pass 0.001 even though nothing is spent yet
    with pytest.raises(BudgetExhausted):
        budget.reserve(_Counter(), messages, None, params)
    assert budget.exhausted and budget.spent == 0
    budget.settle(first, {"prompt_tokens": 14, "completion_tokens": 1})
    budget.settle(second, None)  # a failed request costs nothing
    assert budget.reserved == pytest.approx(0) and budget.spent == pytest.approx((14 * 2.5 + 10) / 1e6)
    with pytest.raises(BudgetExhausted):  # once stopped, stopped
        budget.reserve(_Counter(), messages, None, params)
    with pytest.raises(ConfigError):
        Budget(1.0, pricing_for("openai/gpt-unknown", table))


@pytest.fixture
def judge():
    """A judge that always grades B; its requests are what gets priced, counted by its whitespace tokenizer."""
    yield register_script("cost-judge", lambda messages, tools, tool_choice, params: "reasoning\nB\nB")
    unregister_script("cost-judge")


@pytest.mark.slow
def test_judge_cost_is_kept_apart(server, prices, tmp_path, capsys, judge):
    """Re-scoring a run with a priced judge (in process: the judge script is registered here) adds
    the judge's cost apart from the model's, and to the total."""
    prices.write_text(prices.read_text() + "  scripted/cost-judge: {input: 2.0, output: 4.0}\n")
    out = tmp_path / "run"
    assert run_api(server, out, "--limit", "2", "--price-table", str(prices)).returncode == 0
    before = read(out / "results.json")["cost"]
    assert before["judge"] is None and before["total_usd"] == pytest.approx(2 * COST)
    code = main(["score", str(out), "--metrics", "fanoutqa-string,llm-judge", "--judge", "scripted/cost-judge"])
    assert code == 0, capsys.readouterr().err
    results = read(out / "results.json")
    cost = results["cost"]
    assert len(judge.requests) == 2  # two answers judged, with the judge prompt
    assert all(r["messages"][0]["content"] == factuality_system for r in judge.requests)
    # the scripted judge's usage: the words of the messages sent, and 3 words per reply
    prompt_tokens = sum(len(m["content"].split()) for r in judge.requests for m in r["messages"])
    judge_usd = (prompt_tokens * 2.0 + 2 * 3 * 4.0) / 1e6
    assert cost["judge"]["prompt_tokens"] == prompt_tokens and cost["judge"]["completion_tokens"] == 6
    assert cost["judge_usd"] == pytest.approx(judge_usd)
    assert cost["model_usd"] == pytest.approx(2 * COST)  # the model under test is unchanged
    assert cost["total_usd"] == pytest.approx(2 * COST + judge_usd)
    assert results["scores"]["llm-judge"]["llm_judge"] == 1.0
