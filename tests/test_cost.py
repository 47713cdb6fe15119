"""Cost accounting and --max-cost against a local server speaking the OpenAI protocol, with a
price table of our own: per-sample and per-run cost, money spent, the budget stop and resume."""

from __future__ import annotations

import asyncio
import json

import pytest
from conftest import run_harness
from test_api_backends import FakeServer

from harness.cli import main
from harness.execution.cost import DEFAULT_PRICE_TABLE, Budget, BudgetExhausted, load_price_table, pricing_for
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
    table = load_price_table(DEFAULT_PRICE_TABLE)
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


def test_budget_waits_for_requests_in_flight_and_refuses_only_when_none_is():
    table = load_price_table(DEFAULT_PRICE_TABLE)
    pricing = pricing_for("openai/gpt-4o", table)  # 2.5 / 10 USD per 1M
    params = GenerationParams(max_tokens=40)  # worst output 0.0004
    messages = [{"role": "user", "content": "one two three"}]  # 3 + 8 + 3 = 14 tokens, 0.000035
    worst = (14 * 2.5 + 40 * 10) / 1e6  # 0.000435
    cost = (14 * 2.5 + 1 * 10) / 1e6  # what one really costs: 1 completion token

    async def go():
        budget = Budget(0.001, pricing)
        reserve = lambda: budget.reserve(_Counter(), messages, None, params)  # noqa: E731
        first, second = await reserve(), await reserve()
        assert first == pytest.approx(worst) and budget.in_flight == 2
        # two in flight hold 0.00087: a third could pass 0.001 if both cost their worst, so it waits
        third = asyncio.ensure_future(reserve())
        await asyncio.sleep(0.01)
        assert not third.done() and not budget.exhausted
        budget.settle(first, {"prompt_tokens": 14, "completion_tokens": 1})
        assert await asyncio.wait_for(third, 1) == pytest.approx(worst)  # 0.000045 + 2 x 0.000435 fits
        fourth = asyncio.ensure_future(reserve())  # 0.000045 spent + 0.00087 in flight: it waits too
        await asyncio.sleep(0.01)
        assert not fourth.done()
        budget.settle(second, None)  # a failed request costs nothing: its reservation comes back
        assert await asyncio.wait_for(fourth, 1) == pytest.approx(worst)
        return budget

    budget = asyncio.run(go())
    assert budget.in_flight == 2 and budget.reserved == pytest.approx(2 * worst)
    assert budget.spent == pytest.approx(cost) and not budget.exhausted

    async def stop():
        budget = Budget(0.001, pricing, spent_before=0.0002)
        reserve = lambda: budget.reserve(_Counter(), messages, None, params)  # noqa: E731
        held = await reserve()  # 0.0002 + 0.000435
        waiting = [asyncio.ensure_future(reserve()) for _ in range(3)]
        await asyncio.sleep(0.01)
        assert not any(w.done() for w in waiting)
        budget.settle(held, {"prompt_tokens": 14, "completion_tokens": 40})  # cost its worst: 0.000635 spent
        results = await asyncio.gather(*waiting, return_exceptions=True)
        return budget, results

    budget, results = asyncio.run(stop())
    # nothing in flight and 0.000635 + 0.000435 > 0.001: the first waiter is refused, the others with it
    assert all(isinstance(r, BudgetExhausted) for r in results)
    assert "would exceed --max-cost $0.001" in str(results[0]) and "stopped at its budget" in str(results[1])
    assert budget.exhausted and budget.refused["worst_usd"] == pytest.approx(worst)
    assert budget.spent_total == pytest.approx(0.0002 + worst) and budget.in_flight == 0 and budget.reserved == 0
    with pytest.raises(BudgetExhausted):  # once stopped, stopped
        asyncio.run(budget.reserve(_Counter(), [{"role": "user", "content": "x"}], None, GenerationParams()))
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


@pytest.fixture
def priced_script(tmp_path):
    """A scripted model with a price: 5-word answers after 2-22 ms (fixed per question), so requests
    overlap and finish out of order; it counts the requests in flight."""
    state = {"now": 0, "most": 0}

    async def answer(messages, tools, tool_choice, params):
        state["now"] += 1
        state["most"] = max(state["most"], state["now"])
        try:
            await asyncio.sleep(0.002 + sum(map(ord, messages[-1]["content"])) % 21 / 1000)
            return "one two three four five"
        finally:
            state["now"] -= 1

    register_script("cost-many", answer)
    prices = tmp_path / "prices.yaml"
    prices.write_text("models:\n  scripted/cost-many: {input: 1.0, output: 1000.0}\n")
    yield prices, state
    unregister_script("cost-many")


def test_max_cost_at_64_connections_spends_nearly_all_of_it(tmp_path, priced_script):
    """A request's worst case (32 tokens out) is about six times what it costs (5 out); reserving
    the worst case of every request in flight and refusing the first that did not fit stopped at
    64 connections after 15% of the budget. Waiting for requests in flight to settle instead, the
    run spends all but less than one worst case (0.032 of 0.4), and never more than the budget."""
    from harness.execution.config import build_config
    from harness.execution.runner import Run

    prices, state = priced_script
    budget = 0.4
    config = build_config(
        {
            "model": "scripted/cost-many", "dataset": "hotpotqa:dev", "out": str(tmp_path / "run"), "cache": False,
            "max_connections": 64, "max_cost": budget, "price_table": str(prices), "max_tokens": 32,
        }
    )  # fmt: skip
    results = asyncio.run(Run(config, show_progress=False).execute())
    spent = results.cost.spent_usd
    assert 0.9 * budget <= spent <= budget, spent
    assert results.status == "budget_exhausted" and state["most"] > 8  # many requests were in flight
    worst = results.cost.budget["refused_request"]["worst_usd"]
    assert spent + worst > budget  # stopped only when the next request could not fit
    counts = results.counts
    assert counts.finished == len(lines(tmp_path / "run" / "samples.jsonl")) > 70
    # the samples that waited when the budget ran out fail unsent, to be retried by a rerun
    failures = lines(tmp_path / "run" / "failures.jsonl")
    assert failures and all(f["error_type"] == "budget_exhausted" and f["model_calls"] == 0 for f in failures)
    assert counts.finished + counts.failed + counts.pending == 100
    assert spent == pytest.approx(sum(s["spent_usd"] for s in lines(tmp_path / "run" / "samples.jsonl")))


# --------------------------------------------------------------------------- prompt-size tiers
TIERED = (
    "models:\n"
    "  scripted/cost-tiered:\n"
    "    {input: 1.0, cached_input: 0.1, output: 2.0, source: test,\n"
    "     tiers: [{above: 100000, input: 5.0, cached_input: 0.5, output: 10.0}]}\n"
)


def test_a_tiered_price_bills_each_request_by_its_own_prompt(tmp_path):
    """Haiku 5.5: every token of a request whose prompt is above 100,000 tokens at 5x, output included."""
    haiku = pricing_for("anthropic/claude-haiku-5-5", load_price_table(DEFAULT_PRICE_TABLE))
    assert haiku.tiered and [t.above for t in haiku.tiers] == [100000]
    assert haiku.cost(100_000, 1000) == pytest.approx((100_000 * 0.10 + 1000 * 0.50) / 1e6)
    assert haiku.cost(100_001, 1000) == pytest.approx((100_001 * 0.50 + 1000 * 2.50) / 1e6)
    # cache reads count in the prompt that picks the tier, and take that tier's cache rate
    assert haiku.cost(100_001, 0, cache_read=100_000) == pytest.approx((1 * 0.50 + 100_000 * 0.05) / 1e6)
    # summed usage has lost each request's prompt size: unpriced, never priced at one tier
    assert haiku.usage_cost({"prompt_tokens": 150_000, "completion_tokens": 10}) is None
    assert haiku.request_cost({"prompt_tokens": 50_000, "completion_tokens": 10}) == pytest.approx(
        (50_000 * 0.10 + 10 * 0.50) / 1e6
    )
    # the budget's worst case takes the dearest tier: the estimated prompt does not pick it
    assert haiku.worst_cost(1000, 100) == pytest.approx((1000 * 0.625 + 100 * 2.50) / 1e6)
    described = haiku.describe()
    assert described["tiers"][0]["above"] == 100000 and "per request" in described["tiered_note"]
    path = tmp_path / "p.yaml"
    path.write_text("models:\n  openai/m: {input: 1, output: 1, tiers: [{above: 9, input: 2, output: 2}, {above: 5, input: 3, output: 3}]}\n")
    with pytest.raises(ConfigError, match="smallest first"):
        load_price_table(path)


class _Replies:
    """A backend stand-in answering with fixed usage."""

    def __init__(self, usages):
        self.usages = list(usages)

    async def generate(self, messages, params, tools=None, tool_choice=None):
        from harness.models.base import ModelResponse, Usage

        return ModelResponse(content="x", usage=Usage(**self.usages.pop(0)))


def test_a_samples_cost_is_priced_reply_by_reply(tmp_path):
    """Two replies of 60,000 prompt tokens each: each below the 100,000 tier, their sum above it."""
    from harness.execution.cost import run_cost
    from harness.strategy import AgentContext

    path = tmp_path / "prices.yaml"
    path.write_text(TIERED)
    table = load_price_table(path)
    pricing = pricing_for("scripted/cost-tiered", table)
    one = {"prompt_tokens": 60_000, "completion_tokens": 10}
    ctx = AgentContext(_Replies([one, one]), GenerationParams(), None, None, pricing)

    async def two():
        await ctx.generate([{"role": "user", "content": "q"}])
        await ctx.generate([{"role": "user", "content": "q"}])

    asyncio.run(two())
    each = (60_000 * 1.0 + 10 * 2.0) / 1e6
    assert ctx.cost_usd == pytest.approx(2 * each) and ctx.spent_usd == pytest.approx(2 * each)
    assert pricing.usage_cost(ctx.usage) is None  # 120,000 summed: would have been billed at 5x
    rows = [{"usage": ctx.usage.model_dump(), "cost_usd": ctx.cost_usd}] * 3
    cost = run_cost(pricing, table, rows, rows, None, None, None)
    assert cost["model_usd"] == pytest.approx(6 * each) and cost["price"]["price_source"].startswith("price table")
    assert cost["price"]["tiers"] and "each request priced at its own tier" in cost["definitions"]["model_usd"]
    # a row without a price (written unpriced) leaves the total unknown, never 0
    assert run_cost(pricing, table, [*rows, {"usage": {}, "cost_usd": None}], rows, None, None, None)["model_usd"] is None
    # no pricing given: nothing is priced
    assert AgentContext(_Replies([]), GenerationParams(), None).cost_usd is None


def test_a_tiered_run_records_per_request_prices(tmp_path):
    """End to end through the runner: each sample's one request is below the tier, the run's sum above."""
    from harness.execution.config import build_config
    from harness.execution.runner import Run

    register_script("cost-tiered", lambda m, t, c, p: {"content": "Paris", "usage": {"prompt_tokens": 60_000, "completion_tokens": 10}})
    try:
        path = tmp_path / "prices.yaml"
        path.write_text(TIERED)
        config = build_config(
            {"model": "scripted/cost-tiered", "dataset": "hotpotqa:dev", "out": str(tmp_path / "run"), "cache": False,
             "limit": 3, "price_table": str(path), "max_cost": 5.0, "metrics": ["em-f1"]}
        )  # fmt: skip
        results = asyncio.run(Run(config, show_progress=False).execute())
    finally:
        unregister_script("cost-tiered")
    rows = lines(tmp_path / "run" / "samples.jsonl")
    each = (60_000 * 1.0 + 10 * 2.0) / 1e6
    assert len(rows) == 3 and all(r["cost_usd"] == pytest.approx(each) for r in rows)
    cost = results.cost
    assert cost.model_usd == pytest.approx(3 * each) and cost.spent_usd == pytest.approx(3 * each)
    assert cost.price["price_source"] == f"price table {path} sha256:{load_price_table(path).sha256[:12]}"


# --------------------------------------------------------------------------- who bills per token
def test_whether_an_unpriced_model_is_free_is_its_backends():
    from harness.models.base import BACKENDS, ModelBackend

    flags = {name: BACKENDS.resolve(name).obj.bills_per_token for name in BACKENDS.names() if BACKENDS.resolve(name).source == "builtin"}
    assert flags == {"local": False, "llamacpp-server": False, "vllm": False, "openai": True, "anthropic": True,
                     "scripted": False}  # fmt: skip
    table = load_price_table(DEFAULT_PRICE_TABLE)

    class Metered(ModelBackend):  # a plugin backend says nothing: it bills
        async def _generate(self, *a, **k): ...

    class OnPrem(Metered):
        bills_per_token = False

    metered = pricing_for("metered/model-x", table, backend=Metered)
    assert not metered.priced and metered.cost(10, 10) is None and "not in the price table" in metered.reason
    with pytest.raises(ConfigError, match="--max-cost needs a price"):
        Budget(1.0, metered)
    assert pricing_for("onprem/model-x", table, backend=OnPrem).free
    # without a backend: resolved from the prefix; one that cannot be resolved is taken to bill
    assert pricing_for("local/smollm2", table).free and not pricing_for("nosuchbackend/m", table).priced
    # a price-table entry prices any backend's model
    assert pricing_for("openai/gpt-4o", table, backend=OnPrem).input_per_mtok == 2.5


@pytest.mark.slow
def test_a_plugin_backend_that_bills_is_never_priced_as_free(tmp_path):
    plugin = tmp_path / "metered.py"
    plugin.write_text(
        "from harness.models.scripted import ScriptedBackend\n\n\n"
        "class Metered(ScriptedBackend):\n    bills_per_token = True  # a hosted service behind the script\n"
    )
    model = f"{plugin}:Metered/answer=Paris"
    out = tmp_path / "run"
    proc = run_harness("run", "--model", model, "--limit", "1", "--max-cost", "1", "--out", str(out))
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "--max-cost needs a price for" in proc.stderr and not out.exists()
    proc = run_harness("run", "--model", model, "--limit", "1", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert lines(out / "samples.jsonl")[0]["cost_usd"] is None
    cost = read(out / "results.json")["cost"]
    assert cost["model_usd"] is None and "not in the price table" in cost["price"]["reason"]


# --------------------------------------------------------------------------- the default source: genai-prices
def test_without_genai_prices_the_shipped_table_prices_alone(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "genai_prices", None)  # as if not installed: its import fails
    table = load_price_table()
    assert table.describe()["role"] == "the price source (genai-prices is not installed)"
    price = pricing_for("openai/gpt-5.5", table)
    assert price.price_source.startswith(f"price table {DEFAULT_PRICE_TABLE}") and price.tiers[0].above == 272000


def test_genai_prices_is_the_default_source_and_the_shipped_table_its_fallback():
    genai_prices = pytest.importorskip("genai_prices")
    table = load_price_table()
    label = f"genai-prices {genai_prices.__version__}"
    assert table.describe()["default_source"]["version"] == genai_prices.__version__
    gpt = pricing_for("openai/gpt-5.5-2026-04-23", table)
    assert gpt.entry == "openai/gpt-5.5" and gpt.price_source.startswith(label)
    assert gpt.cached_input_per_mtok == pytest.approx(gpt.input_per_mtok / 10)  # GPT-5+: cached input at 10%
    assert [t.above for t in gpt.tiers] == [272000] and gpt.tiers[0].input == 2 * gpt.input_per_mtok
    haiku = pricing_for("anthropic/claude-haiku-5-5", table)
    assert [t.above for t in haiku.tiers] == [100000] and haiku.tiers[0].input == pytest.approx(5 * haiku.input_per_mtok)
    for name in ("anthropic/claude-sonnet-5-5", "anthropic/claude-opus-5-5"):  # cache reads at 5%
        p = pricing_for(name, table)
        assert p.cached_input_per_mtok == pytest.approx(p.input_per_mtok / 20), name
    # what the package lacks, the shipped table prices; what neither knows is unpriced, never 0
    mythos = pricing_for("anthropic/claude-mythos-5", table)
    assert mythos.priced and mythos.price_source.startswith("price table")
    unknown = pricing_for("openai/gpt-5.7", table)
    assert not unknown.priced and label in unknown.reason
    # --batch: the package's own batch price; a model it has none for is refused, not billed at list price
    batch = pricing_for("anthropic/claude-haiku-5-5", table, batch=True)
    assert batch.input_per_mtok == pytest.approx(haiku.input_per_mtok / 2) and batch.tiers[0].above == 100000
    with pytest.raises(ConfigError, match="no batch price for anthropic/claude-opus-4-1"):
        pricing_for("anthropic/claude-opus-4-1", table, batch=True)
    # --price-table FILE: that file alone
    assert pricing_for("openai/gpt-5.5", load_price_table(DEFAULT_PRICE_TABLE)).price_source.startswith("price table")


def test_the_shipped_table_agrees_with_genai_prices():
    """The offline table and the default source give the same figures wherever both price a model;
    a newer genai-prices (a deliberate bump of its pin) that changes a price fails here until the
    table is refreshed."""
    pytest.importorskip("genai_prices")
    both, shipped = load_price_table(), load_price_table(DEFAULT_PRICE_TABLE)
    compared, differ = 0, []
    for name in shipped.models:
        hit = both.lookup(name)
        if hit is None or hit.from_table:
            continue
        compared += 1
        ours, theirs = pricing_for(name, shipped), pricing_for(name, both)
        for attr in ("input_per_mtok", "output_per_mtok", "cached_input_per_mtok", "cache_write_per_mtok"):
            if getattr(ours, attr) != pytest.approx(getattr(theirs, attr)):
                if not (attr == "cache_write_per_mtok" and name.startswith("openai/")):  # OpenAI lists no writes before 5.6
                    differ.append((name, attr, getattr(ours, attr), getattr(theirs, attr)))
        if [(t.above, t.input, t.output) for t in ours.tiers] != [(t.above, t.input, t.output) for t in theirs.tiers]:
            differ.append((name, "tiers", ours.tiers, theirs.tiers))
    assert compared > 50 and differ == []
