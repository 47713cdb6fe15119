"""Prompt caching: the providers' cache counts read from replies (OpenAI ``cached_tokens``, Anthropic
cache reads and writes), recorded per sample and per run and priced at the cached rates; Anthropic's
``cache_control`` breakpoints on the shared prefix (and none with ``--no-prompt-cache``), against the
loopback fakes; and which strategies' prompts put the part shared across questions first."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import string
from pathlib import Path

import pytest
from fake_openai import FakeServer, anthropic_search_model
from fault_server import FaultServer, run_args

from harness.cli import main
from harness.datasets.base import Sample
from harness.errors import ConfigError, TransientModelError
from harness.execution.cost import DEFAULT_PRICE_TABLE, Budget, judge_cost, load_price_table, pricing_for
from harness.models import BackendOptions, GenerationParams, create_backend
from harness.models.anthropic_api import min_cacheable_tokens, to_anthropic_request
from harness.models.openai_compat import response_from_completion
from harness.models.scripted import register_script, unregister_script
from harness.scoring.metrics import ScoringOptions, get_metric
from harness.strategy import AGENTS
from harness.templates import load_template

# each test starts a loopback server (or runs whole CLI runs in subprocesses): the slow tier
pytestmark = pytest.mark.slow

EPHEMERAL = {"type": "ephemeral"}


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def marks(kwargs: dict) -> list[tuple]:
    """Where a request carries cache_control: ("system",) or (message index, block index)."""
    found = []
    if isinstance(kwargs.get("system"), list):
        found += [("system",) for b in kwargs["system"] if b.get("cache_control")]
    for i, m in enumerate(kwargs["messages"]):
        if isinstance(m["content"], list):
            found += [(i, j) for j, b in enumerate(m["content"]) if b.get("cache_control") == EPHEMERAL]
    return found


# --------------------------------------------------------------------------- prices
def test_cached_rates_from_the_entry_or_the_tables_cache_defaults(tmp_path):
    table = load_price_table(DEFAULT_PRICE_TABLE)
    gpt4o = pricing_for("openai/gpt-4o-2024-08-06", table)  # OpenAI's documented cached rate
    assert (gpt4o.input_per_mtok, gpt4o.cached_input_per_mtok) == (2.5, 1.25)
    assert gpt4o.cost(1_000_000, 0, cache_read=400_000) == pytest.approx(0.6 * 2.5 + 0.4 * 1.25)
    sonnet = pricing_for("anthropic/claude-sonnet-4-5", table)
    assert (sonnet.cached_input_per_mtok, sonnet.cache_write_per_mtok) == (0.30, 3.75)
    # every OpenAI entry names its cached rate (OpenAI's discount differs by model); no cache read
    # costs more than the input price
    for name, price in table.models.items():
        if name.startswith("openai/"):
            assert price.cached_input is not None, name
        assert price.cached_input is None or price.cached_input <= price.input, name
    # the 5.5 models read the cache at 5% (Fable/Mythos 5.1 at 2.5%), not Anthropic's usual 10%
    assert pricing_for("anthropic/claude-opus-5-5", table).cached_input_per_mtok == pytest.approx(0.05 * 4.0)
    assert pricing_for("anthropic/claude-sonnet-5-5", table).cached_input_per_mtok == pytest.approx(0.05 * 2.0)
    assert pricing_for("anthropic/claude-fable-5-1", table).cached_input_per_mtok == pytest.approx(0.025 * 10.0)
    # GPT-5 and later: cached input at 10% of input (5% on gpt-6.1)
    for name in ("openai/gpt-5", "openai/gpt-5.2", "openai/gpt-5.5", "openai/gpt-5.6-sol", "openai/gpt-6-sol"):
        p = pricing_for(name, table)
        assert p.cached_input_per_mtok == pytest.approx(p.input_per_mtok / 10), name

    path = tmp_path / "prices.yaml"
    body = (
        "models:\n  openai/m: {input: 2.0, output: 8.0}\n  anthropic/m: {input: 4.0, output: 20.0}\n"
        "  scripted/m: {input: 1.0, output: 1.0}\n  anthropic/w: {input: 4.0, cached_input: 1.0, output: 20.0}\n"
    )
    path.write_text(body)
    bare = load_price_table(path)
    # no cache rate in the entry and no cache_defaults: the input price, read or written, and it says so
    for model in ("openai/m", "anthropic/m"):
        p = pricing_for(model, bare)
        assert (p.cached_input_per_mtok, p.cache_write_per_mtok) == (p.input_per_mtok, p.input_per_mtok)
        assert p.describe()["cache_rates"]["cached_input"] == "none given: the input price"

    path.write_text(
        body + "cache_defaults:\n  anthropic: {cached_input: 0.1, cache_write_input: 1.25, source: the provider's page}\n"
    )
    table = load_price_table(path)
    openai, anthropic = pricing_for("openai/m", table), pricing_for("anthropic/m", table)
    assert (openai.cached_input_per_mtok, openai.cache_write_per_mtok) == (2.0, 2.0)  # no rule for openai/
    assert (anthropic.cached_input_per_mtok, anthropic.cache_write_per_mtok) == (0.4, 5.0)
    rates = anthropic.describe()["cache_rates"]
    assert rates["cached_input"] == "0.1 x input (anthropic cache_defaults: the provider's page)"
    # no discount known for another prefix: the input price
    assert pricing_for("scripted/m", table).cost(100, 0, cache_read=60, cache_write=40) == pytest.approx(100e-6)
    mixed = pricing_for("anthropic/w", table)
    assert (mixed.cached_input_per_mtok, mixed.cache_write_per_mtok) == (1.0, 5.0)
    assert mixed.describe()["cache_rates"]["cached_input"] == "price table"
    # 100 uncached + 300 read + 600 written + 10 out
    assert anthropic.cost(1000, 10, 300, 600) == pytest.approx((100 * 4 + 300 * 0.4 + 600 * 5 + 10 * 20) / 1e6)
    path.write_text(body + "cache_defaults:\n  anthropic: {source: nothing}\n")
    with pytest.raises(ConfigError, match="cache_defaults.anthropic"):
        load_price_table(path)


class _Words:
    def count_tokens(self, text):
        return len(text.split())


def test_budget_reserves_prompts_at_the_dearest_input_rate():
    """A cache write costs 125% of Anthropic's input price: the worst case reserves that, so the
    budget still holds when a request writes its whole prompt to the cache."""
    table = load_price_table(DEFAULT_PRICE_TABLE)
    messages = [{"role": "user", "content": "one two three"}]  # 3 + 8 + 3 = 14 tokens estimated
    params = GenerationParams(max_tokens=10)

    async def worst(model):
        return await Budget(1.0, pricing_for(model, table)).reserve(_Words(), messages, None, params)

    assert asyncio.run(worst("anthropic/claude-sonnet-4-6")) == pytest.approx((14 * 3.75 + 10 * 15) / 1e6)
    assert asyncio.run(worst("openai/gpt-4o")) == pytest.approx((14 * 2.5 + 10 * 10) / 1e6)  # the full input price
    # under prompt-size tiers the estimate does not pick the tier: the dearest one (Sonnet 4.5 above 200K)
    assert asyncio.run(worst("anthropic/claude-sonnet-4-5")) == pytest.approx((14 * 7.5 + 10 * 22.5) / 1e6)

    budget = Budget(1.0, pricing_for("anthropic/claude-sonnet-4-5", table))
    held = asyncio.run(budget.reserve(_Words(), messages, None, params))
    budget.settle(held, {"prompt_tokens": 14, "completion_tokens": 10, "cache_read_tokens": 4, "cache_write_tokens": 0})
    assert budget.spent == pytest.approx((10 * 3 + 4 * 0.3 + 10 * 15) / 1e6)


def test_judge_cost_prices_its_cache_counts():
    info = {"judge": "anthropic/claude-sonnet-4-6", "judge_prompt_tokens": 1000, "judge_completion_tokens": 10,
            "judge_cache_read_tokens": 800, "judge_cache_write_tokens": 100}  # fmt: skip
    table = load_price_table(DEFAULT_PRICE_TABLE)
    cost = judge_cost({"meta": {"metric_info": {"llm-judge": info}}}, table)
    assert cost["cache_read_tokens"] == 800 and cost["cache_write_tokens"] == 100
    assert cost["usd"] == pytest.approx((100 * 3 + 800 * 0.3 + 100 * 3.75 + 10 * 15) / 1e6)
    # a judge whose price has prompt-size tiers: its tokens are summed, so it is left unpriced, saying why
    tiered = judge_cost({"meta": {"metric_info": {"llm-judge": dict(info, judge="anthropic/claude-sonnet-4-5")}}}, table)
    assert tiered["usd"] is None and "prompt size of each request" in tiered["note"]


def test_the_judge_records_its_cache_counts(tmp_path):
    usage = {"prompt_tokens": 100, "completion_tokens": 1, "cache_read_tokens": 60, "cache_write_tokens": 30}
    register_script("cache-judge", lambda messages, tools, tool_choice, params: {"content": "B", "usage": usage})
    try:
        questions = [Sample(id=f"q{i}", question=f"Question {i}?", answer=["ref"]) for i in range(2)]
        options = ScoringOptions(judge="scripted/cache-judge", cache_path=str(tmp_path / "judge.sqlite"))
        answers = [{"id": q.id, "answer": "ref"} for q in questions]
        info = get_metric("llm-judge")(questions, answers, False, options=options)["info"]
    finally:
        unregister_script("cache-judge")
    counts = (info["judge_prompt_tokens"], info["judge_cache_read_tokens"], info["judge_cache_write_tokens"])
    assert counts == (200, 120, 60)


def test_openai_cached_tokens_are_read_from_the_reply():
    def reply(usage):
        message = {"role": "assistant", "content": "Paris"}
        return {"choices": [{"message": message, "finish_reason": "stop"}], "usage": usage}

    usage = response_from_completion(
        reply({"prompt_tokens": 1200, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 1024}})
    ).usage
    assert (usage.prompt_tokens, usage.cache_read_tokens, usage.cache_write_tokens) == (1200, 1024, 0)
    # vLLM without --enable-prompt-tokens-details: null
    unreported = reply({"prompt_tokens": 5, "prompt_tokens_details": None})
    assert response_from_completion(unreported).usage.cache_read_tokens == 0
    # more cached than the whole prompt: read as all of it
    odd = {"prompt_tokens": 5, "prompt_tokens_details": {"cached_tokens": 9}}
    assert response_from_completion(reply(odd)).usage.cache_read_tokens == 5
    with pytest.raises(TransientModelError, match=r"usage.prompt_tokens_details.cached_tokens is -1, not a count"):
        response_from_completion(reply({"prompt_tokens": 5, "prompt_tokens_details": {"cached_tokens": -1}}))


# --------------------------------------------------------------------------- Anthropic breakpoints
LONG = "word " * 600  # 3000 bytes: above 1024 tokens only by the byte bound, below 4096 surely


def search_call(call_id: str) -> dict:
    call = {"id": call_id, "function": {"name": "search", "arguments": "{}"}}
    return {"role": "assistant", "content": "", "tool_calls": [call]}


TURNS = [
    {"role": "system", "content": "You answer questions. " + LONG},
    {"role": "user", "content": "Question one? " + LONG},
    search_call("c1"),
    {"role": "tool", "tool_call_id": "c1", "content": "first result " + LONG},
    search_call("c2"),
    {"role": "tool", "tool_call_id": "c2", "content": "second result"},
]


def request(messages, model="claude-sonnet-4-5", prompt_cache=True):
    return to_anthropic_request(model, messages, GenerationParams(), prompt_cache=prompt_cache)


def test_breakpoints_on_the_system_prompt_and_a_conversations_ends():
    kwargs = request(TURNS)
    # the system prompt; the end of the request before (its tool result, where it was cached); the end
    assert marks(kwargs) == [("system",), (2, 0), (4, 0)]
    assert kwargs["system"] == [{"type": "text", "text": TURNS[0]["content"], "cache_control": EPHEMERAL}]
    assert kwargs["messages"][4]["content"][0]["type"] == "tool_result"
    # the text is marked, never split or changed
    plain = request(TURNS, prompt_cache=False)
    assert "cache_control" not in json.dumps(plain) and plain["system"] == TURNS[0]["content"]
    strip = json.loads(json.dumps(kwargs["messages"]).replace(', "cache_control": {"type": "ephemeral"}', ""))
    assert strip == plain["messages"]
    assert TURNS[1]["content"] == "Question one? " + LONG  # the caller's messages are not touched

    # a single-turn request: only the system prompt (writing the rest would cost 25% more, read by none)
    assert marks(request(TURNS[:2])) == [("system",)]
    # a prefix whose bytes cannot reach the model's minimum gets none
    short = [{"role": "system", "content": "Be brief."}, *TURNS[1:]]
    assert marks(request(short)) == [(2, 0), (4, 0)]
    assert marks(request([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yes"},
                          {"role": "user", "content": "ok"}])) == []  # fmt: skip
    # Haiku 4.5 caches from 4096 tokens: 3000-byte prefixes are left alone, the 9000-byte whole is not
    assert min_cacheable_tokens("claude-haiku-4-5-20251001") == 4096  # the facts table's
    assert min_cacheable_tokens("claude-x") is None  # not in it: no minimum guessed ...
    assert marks(request(short, model="claude-x")) == [("system",), (2, 0), (4, 0)]  # ... every shared prefix marked
    assert marks(request(TURNS, model="claude-haiku-4-5")) == [(2, 0), (4, 0)]
    assert marks(request(TURNS, model="claude-3-haiku")) == [("system",), (2, 0), (4, 0)]  # 2048


def test_anthropic_requests_carry_breakpoints_unless_turned_off(monkeypatch):
    """Over the wire (the loopback fake): cache_control on the right blocks by default, none with
    prompt_cache off; the reply's cache reads and writes land in the usage."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    with FaultServer(usage=(3000, 5, 2000, 900)) as server:
        for prompt_cache in (True, False):
            options = BackendOptions(base_url=server.url[: -len("/v1")], prompt_cache=prompt_cache)
            backend = create_backend("anthropic/claude-sonnet-4-5", options)  # known: no probe request

            async def go(backend=backend):
                try:
                    return await backend.generate(TURNS, GenerationParams())
                finally:
                    await backend.close()

            response = asyncio.run(go())
            assert backend.describe()["prompt_cache"] == {"enabled": prompt_cache, "min_tokens": 1024}
    on, off = server.bodies
    assert marks(on) == [("system",), (2, 0), (4, 0)]
    assert "cache_control" not in json.dumps(off)
    usage = response.usage
    assert (usage.prompt_tokens, usage.cache_read_tokens, usage.cache_write_tokens) == (3000, 2000, 900)


# --------------------------------------------------------------------------- whole runs
def read_run(out: Path) -> tuple[list[dict], dict]:
    return lines(out / "samples.jsonl"), json.loads((out / "results.json").read_text())


@pytest.mark.slow
def test_openai_cache_hits_are_recorded_and_priced(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "cache"))
    prices = tmp_path / "prices.yaml"
    prices.write_text("models:\n  openai/fault-model: {input: 2.0, cached_input: 0.5, output: 8.0}\n")
    per_sample = (400 * 2.0 + 600 * 0.5 + 10 * 8.0) / 1e6  # 1000 prompt tokens, 600 of them cached
    with FaultServer(usage=(1000, 10, 600, 0)) as server:
        assert main(run_args(server.url, tmp_path / "a", "--price-table", str(prices), limit="2")) == 0
        assert main(run_args(server.url, tmp_path / "b", "--price-table", str(prices), "--no-prompt-cache")) == 0
    rows, results = read_run(tmp_path / "a")
    for row in rows:
        assert row["usage"] == {"prompt_tokens": 1000, "completion_tokens": 10, "cache_read_tokens": 600,
                                "cache_write_tokens": 0, "reasoning_tokens": 0}  # fmt: skip
        assert row["cost_usd"] == pytest.approx(per_sample) and row["spent_usd"] == pytest.approx(per_sample)
    assert results["tokens"] == {"prompt": 2000, "completion": 20, "total": 2020, "cache_read": 1200, "cache_write": 0,
                                 "reasoning": 0, "reasoning_failed": 0}  # fmt: skip
    cost = results["cost"]
    assert cost["model_usd"] == pytest.approx(2 * per_sample) and cost["spent_usd"] == pytest.approx(2 * per_sample)
    assert cost["price"]["cached_input_usd_per_mtok"] == 0.5
    # the knob is recorded, not hashed: it changes the bill, never the answer
    other = json.loads((tmp_path / "b" / "results.json").read_text())
    assert results["config"]["backend"]["prompt_cache"] is True and other["config"]["backend"]["prompt_cache"] is False
    assert results["config_hash"] == other["config_hash"]


@pytest.mark.slow
def test_anthropic_loop_caches_its_conversation_and_prices_reads_and_writes(tmp_path, monkeypatch, hotpot_snapshot):
    """open-book-native on Anthropic's protocol: the second round (search result in) marks the end of
    the first request and its own end; each reply's cache counts are priced at Anthropic's rates."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "cache"))
    prices = tmp_path / "prices.yaml"
    # no cache rates of its own: the provider's rule from the table's cache_defaults
    prices.write_text(
        "cache_defaults:\n  anthropic: {cached_input: 0.1, cache_write_input: 1.25, source: test}\n"
        "models:\n  anthropic/claude-sonnet-4-5: {input: 3.0, output: 15.0}\n"
    )
    script = {"Scott Derrickson": ("Scott Derrickson", "yes")}

    def run(out, *extra):
        argv = ["run", "--model", "anthropic/claude-sonnet-4-5", "--base-url", server.url, "--dataset", "hotpotqa:dev",
                "--snapshot", str(hotpot_snapshot), "--search-space", "evidence-only", "--setting", "open-book",
                "--context-size", "8192",
                "--limit", "1", "--max-tokens", "16", "--no-cache", "--price-table", str(prices),
                "--out", str(out), *extra]  # fmt: skip
        assert main(argv) == 0
        return read_run(out)

    with FakeServer(anthropic_search_model(script, usage=(5000, 10, 3000, 1500))) as server:
        (row,), results = run(tmp_path / "on")
        (_, results_off) = run(tmp_path / "off", "--no-prompt-cache")
    posts = [body for _, path, _, body in server.requests if path == "/v1/messages"]
    assert len(posts) == 4  # two rounds per run
    first, second = posts[0], posts[1]
    assert marks(first) == []  # a single-turn request: nothing later is known to extend it
    assert marks(second) == [(0, 0), (2, 0)]  # the question's prompt, then the search result
    assert second["messages"][2]["content"][0]["type"] == "tool_result"
    assert all("cache_control" not in json.dumps(body) for body in posts[2:])
    assert row["usage"] == {"prompt_tokens": 10000, "completion_tokens": 20, "cache_read_tokens": 6000,
                            "cache_write_tokens": 3000, "reasoning_tokens": 0}  # fmt: skip
    cost = 2 * (500 * 3.0 + 3000 * 0.3 + 1500 * 3.75 + 10 * 15.0) / 1e6
    assert row["cost_usd"] == pytest.approx(cost) and results["cost"]["model_usd"] == pytest.approx(cost)
    assert results["tokens"]["cache_read"] == 6000 and results["tokens"]["cache_write"] == 3000
    assert results["model"]["prompt_cache"] == {"enabled": True, "min_tokens": 1024}
    assert results_off["model"]["prompt_cache"]["enabled"] is False
    assert results["config_hash"] == results_off["config_hash"]


# --------------------------------------------------------------------------- shared prefixes
# Fields a template fills the same way for every question of a run.
RUN_CONSTANT = {"current_date"}
# Each template's first field that differs per question: what comes before it is the prefix every
# question's prompt shares (cacheable across questions). Where it is not the question, the order is
# a paper's (or a prompt too short for any cache to matter), kept: see the README, "Prompt caching".
FIRST_PER_QUESTION = {
    "closed_book": "question",
    "entity_set": "question",
    "open_book_native": "question",
    "open_book_text": "question",
    "react": "question",  # the instructions and both exemplars first
    "delegate": "question",
    "delegate_sub": "instructions",  # a sub-agent's task, last
    "conversational_closed_book": "history",  # the conversation so far, then the question
    "conversational_open_book": "history",
    "ircot": "documents",  # instructions and exemplars, then the question's paragraphs, then Q:
    "evidence_provided": "documents",  # FanOutQA's evidence-provided prompt: the documents first
    "retrieve_read_each": "documents",  # the same shape, one passage
    "retrieve_classify": "question",  # "Query: ..." opens it; its ~30-token instruction comes after
    "rewrite_question": "history",  # the instruction after it is ~40 tokens
}


def fields_in(template: str) -> list[str]:
    return [name for _, name, _, _ in string.Formatter().parse(template) if name]


def head(template: str) -> str:
    """The template's text before its first per-question field, run constants filled."""
    marker = "\x00"
    filled = {name: ("11-20-2023" if name in RUN_CONSTANT else marker) for name in fields_in(template)}
    return template.format(**filled).split(marker)[0]


def test_every_template_states_what_its_questions_share():
    names = sorted(p.stem for p in (Path(__file__).parents[1] / "prompts").glob("*.txt"))
    assert names == sorted(FIRST_PER_QUESTION)  # a new template says where its shared prefix ends
    for name in names:
        text = load_template(name)[0]
        first = next(f for f in fields_in(text) if f not in RUN_CONSTANT)
        assert first == FIRST_PER_QUESTION[name], name
        assert head(text).strip(), name  # every template opens with a shared part


HOTPOT = ("hotpot-dev-000", "hotpot-dev-001")
TOPIOCQA = ("1_2", "2_2")  # second turns of two conversations: each has a history
# strategy -> (dataset, snapshot: None | "plain" | "indexed", extra flags, reply ending the sample at once)
STRATEGIES = {
    "closed-book": ("hotpotqa:dev", None, [], "yes"),
    "entity-set": ("hotpotqa:dev", None, ["--metrics", "em-f1"], "yes"),
    "conversational": ("topiocqa:dev", None, [], "yes"),
    "open-book-native": ("hotpotqa:dev", "plain", [], "yes"),
    "open-book-text": ("hotpotqa:dev", "plain", [], "yes"),
    "react": ("hotpotqa:dev", "plain", [], "Thought 1: known.\nAction 1: Finish[yes]"),
    "delegate": ("hotpotqa:dev", "plain", [], "yes"),
    "conversational-open-book": ("topiocqa:dev", "plain", [], "yes"),
    "evidence-provided": ("hotpotqa:dev", "plain", [], "yes"),
    "ircot": ("hotpotqa:dev", "indexed", ["--agent-arg", "retrieval_k=2"], "So the answer is: yes."),
    "retrieve-read-joint": ("hotpotqa:dev", "indexed", ["--agent-arg", "retrieval_k=2"], "yes"),
    "retrieve-read-each": ("hotpotqa:dev", "indexed", ["--agent-arg", "retrieval_k=2"], "yes"),
    "retrieve-classify": (
        "hotpotqa:dev", "indexed", ["--agent-arg", "retrieval_k=2", "--agent-arg", "passage_kind=words100"], "no"
    ),
}
@pytest.fixture(scope="module")
def indexed(hotpot_snapshot, tmp_path_factory):
    path = tmp_path_factory.mktemp("prefix") / "hotpot.db"
    shutil.copyfile(hotpot_snapshot, path)
    assert main(["index", "build", str(path), "--kind", "bm25", "--workers", "1", "--quiet"]) == 0
    return path


def common_prefix(a: str, b: str) -> int:
    return len(os.path.commonprefix([a, b]))


@pytest.mark.slow
@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
def test_two_questions_prompts_share_the_prefix_before_the_question(strategy, tmp_path, request):
    """Each strategy run on two questions: their first prompts share the whole head of the template
    (instructions, exemplars); where the template's first per-question field is the question, all
    that comes before the question; where it is the question's own evidence or conversation
    (FIRST_PER_QUESTION), the prompts part before the question."""
    dataset, snapshot, extra, reply = STRATEGIES[strategy]
    name = f"prefix-{strategy}"
    script = register_script(name, lambda messages, tools, tool_choice, params: reply)
    ids = TOPIOCQA if dataset.startswith("topiocqa") else HOTPOT
    argv = ["run", "--model", f"scripted/{name}", "--agent", strategy, "--dataset", dataset, "--no-cache",
            "--sample-id", ",".join(ids), "--context-size", "8192", "--out", str(tmp_path / "run"), *extra]  # fmt: skip
    if snapshot:
        argv += ["--snapshot", str(request.getfixturevalue("indexed" if snapshot == "indexed" else "hotpot_snapshot"))]
        argv += ["--search-space", "evidence-only"]  # both hold HotpotQA's contexts only
    try:
        assert main(argv) == 0
    finally:
        unregister_script(name)
    rows = {r["id"]: r for r in lines(tmp_path / "run" / "samples.jsonl")}
    prompts = []
    for sample_id in ids:
        question = rows[sample_id]["question"]
        first = next(r for r in script.requests if any(question in str(m.get("content")) for m in r["messages"]))
        prompts.append((first["messages"][0]["content"], question))
    (a, question), (b, _) = prompts
    shared = common_prefix(a, b)
    template = AGENTS.get(strategy).default_template
    assert shared >= len(head(load_template(template)[0])), "the head is shared"
    if FIRST_PER_QUESTION[template] == "question":
        assert shared >= a.index(question)
    else:
        assert shared < a.index(question)
