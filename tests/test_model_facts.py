"""The model facts table (harness/models/model_facts.yaml): it loads, every entry names its source
and date, the names real services answered to resolve (or are left unknown on purpose), unknown
names stay unknown, and the defaults OpenAI's replies echo match the table."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from harness.errors import ConfigError
from harness.models import facts as facts_module
from harness.models.facts import DEFAULT_FACTS_PATH, FACTS_ENV, facts_for, load_facts

RECORDED = Path(__file__).parent / "fixtures" / "recorded" / "openai_responses_default_effort.json"

# Model names in pydantic-ai's recorded cassettes (tests/models/cassettes, commit 4fda3898): the
# names requests sent and replies echoed. Each resolves to the entry named, or is unknown on purpose.
RECORDED_NAMES = {
    "openai/gpt-5": "openai/gpt-5",
    "openai/gpt-5-2025-08-07": "openai/gpt-5",
    "openai/gpt-5-mini-2025-08-07": "openai/gpt-5-mini",
    "openai/gpt-5-pro-2025-10-06": "openai/gpt-5-pro",
    "openai/gpt-5.2-2025-12-11": "openai/gpt-5.2",
    "openai/gpt-5.4": "openai/gpt-5.4",
    "openai/gpt-5.4-mini-2026-03-17": "openai/gpt-5.4-mini",
    "openai/gpt-5.5": "openai/gpt-5.5",
    "openai/gpt-5.5-2026-04-23": "openai/gpt-5.5",
    "openai/gpt-5.6": "openai/gpt-5.6",
    "openai/gpt-5.6-sol": "openai/gpt-5.6-sol",
    "openai/o3-mini-2025-01-31": "openai/o3-mini",
    "openai/gpt-4o-2024-08-06": "openai/gpt-4o",
    "anthropic/claude-opus-5": "anthropic/claude-opus-5",
    "anthropic/claude-fable-5": "anthropic/claude-fable-5",
    "anthropic/claude-sonnet-5": "anthropic/claude-sonnet-5",
    "anthropic/claude-opus-4-8": "anthropic/claude-opus-4-8",
    "anthropic/claude-opus-4-7": "anthropic/claude-opus-4-7",
    "anthropic/claude-opus-4-6": "anthropic/claude-opus-4-6",
    "anthropic/claude-sonnet-4-6": "anthropic/claude-sonnet-4-6",
    "anthropic/claude-sonnet-4-5-20250929": "anthropic/claude-sonnet-4-5",
    "anthropic/claude-haiku-4-5-20251001": "anthropic/claude-haiku-4-5",
}
# real names no source read gives facts for (model_facts.yaml says so): probed at pre-flight instead
DELIBERATELY_UNKNOWN = [
    "anthropic/claude-mythos-5",
    "anthropic/claude-mythos-preview",
    "anthropic/claude-fable-5-2",
    "openai/gpt-6-sol",
    "openai/gpt-6-luna",
]


def _split(name: str) -> tuple[str, str]:
    prefix, _, rest = name.partition("/")
    return prefix, rest


def test_shipped_table_loads_and_every_entry_names_its_source_and_date():
    table = load_facts(DEFAULT_FACTS_PATH)
    assert len(table.models) > 60 and table.sha256
    for key, entry in table.models.items():
        assert entry.source.strip(), key
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", entry.retrieved), (key, entry.retrieved)
        assert "/" in key, key
        if entry.default_max_tokens is not None:
            assert entry.default_max_tokens_source, key
        if entry.reasoning_efforts and entry.default_reasoning_effort:
            assert entry.default_reasoning_effort in entry.reasoning_efforts, key
        if entry.max_input_tokens and entry.context_window:
            assert entry.max_input_tokens <= entry.context_window, key
    # templates (keys starting with ".") are not models
    raw = yaml.safe_load(DEFAULT_FACTS_PATH.read_text())["models"]
    assert any(k.startswith(".") for k in raw) and not any(k.startswith(".") for k in table.models)


@pytest.mark.parametrize("name,entry", sorted(RECORDED_NAMES.items()))
def test_recorded_names_resolve(name, entry):
    found = facts_for(*_split(name))
    assert found is not None and found.entry == entry


@pytest.mark.parametrize("name", DELIBERATELY_UNKNOWN + ["openai/gpt-5.7", "anthropic/claude-opus-4-9", "openai/gpt-6",
                                                         "openai/gpt-6-mini", "openai/gpt-5.6-sol-mini"])  # fmt: skip
def test_unknown_names_are_unknown_not_a_neighbours(name):
    assert facts_for(*_split(name)) is None


def test_gpt5_chat_latest_does_not_reason():
    chat = facts_for("openai", "gpt-5-chat-latest")
    assert chat.entry == "openai/gpt-5-chat" and not chat.reasoning and chat.thinking == "never"
    assert chat.takes("temperature") and chat.context_window == 128000
    # while the 5.1+ -chat-latest models always reason at a fixed medium effort
    newer = facts_for("openai", "gpt-5.2-chat-latest")
    assert newer.reasoning and newer.thinking == "always" and newer.reasoning_efforts == ["medium"]
    assert not newer.takes("temperature")


def test_todays_families():
    gpt5 = facts_for("openai", "gpt-5-mini")
    assert (gpt5.context_window, gpt5.max_input_tokens, gpt5.max_output_tokens) == (400000, 272000, 128000)
    for name in ("gpt-5.6-sol", "gpt-5.6-luna", "gpt-5.5", "gpt-5.4", "gpt-5.2", "gpt-6-astra"):
        assert facts_for("openai", name).tools_with_reasoning_on_chat is False, name
    assert facts_for("openai", "gpt-5.1").tools_with_reasoning_on_chat is True
    assert "minimal" not in facts_for("openai", "gpt-5.6-terra").reasoning_efforts
    for name in ("claude-opus-5", "claude-sonnet-5", "claude-fable-5", "claude-opus-5-5", "claude-haiku-5-5"):
        claude = facts_for("anthropic", name)
        assert claude.context_window == 1_000_000 and claude.max_output_tokens == 128000, name
        assert claude.sampling == [] and claude.min_thinking_budget is None, name  # no budget, no sampling
    assert facts_for("anthropic", "claude-fable-5-1").thinking == "always"
    assert facts_for("anthropic", "claude-sonnet-4-6").min_thinking_budget == 1024  # budgets still accepted


def test_recorded_default_efforts_match_the_table():
    """OpenAI echoes the effort it used: a request that sent none shows the model's default."""
    recorded = json.loads(RECORDED.read_text())
    assert recorded["origin"]["repository"] == "pydantic/pydantic-ai"
    seen = set()
    for it in recorded["interactions"]:
        sent = (it["request"].get("reasoning") or {}).get("effort")
        used = it["response"]["reasoning"]["effort"]
        assert it["status"] == 200
        request_facts = facts_for("openai", it["request"]["model"])
        reply_facts = facts_for("openai", it["response"]["model"])  # the dated snapshot answered
        assert request_facts.entry == reply_facts.entry
        if sent is None:
            assert request_facts.default_reasoning_effort == used, it["path"]
            seen.add(request_facts.entry)
        else:  # effort none with temperature 0.5 answered 200: none is one of its efforts
            assert sent == used and sent in request_facts.reasoning_efforts
            assert "temperature" in it["request"]
    assert seen == {"openai/gpt-5-pro", "openai/gpt-5.4", "openai/gpt-5.5", "openai/gpt-5.6-sol"}


@pytest.mark.parametrize(
    "text,where",
    [
        ("models: [1, 2\n", "not valid YAML"),
        ("models: 3\n", "expected a mapping"),
        ("models:\n  openai/x: {context_window: -5, source: s, retrieved: '2026-01-01'}\n", "openai/x.context_window"),
        ("models:\n  openai/x: {source: s, retrieved: '2026-01-01', colour: red}\n", "openai/x.colour"),
        ("models:\n  openai/x: {thinking: sometimes, source: s, retrieved: '2026-01-01'}\n", "openai/x.thinking"),
        ("models:\n  openai/x: {reasoning: true}\n", "openai/x.source"),
    ],
)
def test_a_malformed_user_file_is_one_clear_line(tmp_path, monkeypatch, text, where):
    path = tmp_path / "facts.yaml"
    path.write_text(text)
    monkeypatch.setenv(FACTS_ENV, str(path))
    facts_module._cached.cache_clear()
    try:
        with pytest.raises(ConfigError) as err:
            facts_for("openai", "x")
    finally:
        facts_module._cached.cache_clear()
    message = str(err.value)
    assert len(message.splitlines()) == 1 and str(path) in message and where in message and FACTS_ENV in message


def test_a_user_file_replaces_the_table(tmp_path, monkeypatch):
    path = tmp_path / "facts.yaml"
    path.write_text("models:\n  openai/gpt-5.7: {reasoning: true, thinking: always, source: mine, retrieved: '2026-11-26'}\n")
    monkeypatch.setenv(FACTS_ENV, str(path))
    facts_module._cached.cache_clear()
    try:
        assert facts_for("openai", "gpt-5.7").thinking == "always"
        assert facts_for("openai", "gpt-5") is None  # replaced, not merged
        missing = tmp_path / "absent.yaml"
        monkeypatch.setenv(FACTS_ENV, str(missing))
        with pytest.raises(ConfigError, match="HARNESS_MODEL_FACTS.*absent.yaml: file not found"):
            facts_for("openai", "gpt-5")
    finally:
        facts_module._cached.cache_clear()


def test_every_api_model_the_table_knows_has_a_shipped_price():
    """A model with facts is one a run can use: the offline price table prices it (never cost null)."""
    from harness.execution.cost import DEFAULT_PRICE_TABLE, load_price_table

    prices = load_price_table(DEFAULT_PRICE_TABLE)
    api = [k for k in load_facts(DEFAULT_FACTS_PATH).models if k.startswith(("openai/", "anthropic/"))]
    assert len(api) > 60 and [k for k in api if prices.lookup(k) is None] == []
