import pytest
import json

from conftest import run_harness

from harness.execution.config import build_config, load_yaml


def test_yaml_then_flags_override(tmp_path):
    cfg = tmp_path / "run.yaml"
    cfg.write_text("dataset: fanoutqa:dev@2026\nmax_tokens: 12\nmax-connections: 2\ncurrent_date: 01-01-2024\n")
    flat = load_yaml(cfg)
    flat["max_tokens"] = 7  # as if given on the command line
    config = build_config(flat)
    assert config.dataset == "fanoutqa:dev@2026"
    assert config.generation.max_tokens == 7
    assert config.max_connections == 2
    assert config.current_date == "01-01-2024"


def test_hash_ignores_operational_knobs_only():
    base = build_config({})
    assert base.config_hash() == build_config({"limit": 5, "max_connections": 9, "out": "x"}).config_hash()
    for knob in (
        {"max_tokens": 9},
        {"current_date": "x"},
        {"model": "local/x.gguf"},
        {"temperature": 0.5},
        {"context_size": 4096},
        {"dataset": "fanoutqa:dev@2026"},
    ):
        assert build_config(knob).config_hash() != base.config_hash(), knob


@pytest.mark.slow
def test_config_file_drives_a_real_run(tmp_path):
    cfg = tmp_path / "run.yaml"
    out = tmp_path / "run"
    cfg.write_text(f"limit: 1\nmax_tokens: 8\nout: {out}\ncurrent_date: 12-31-2025\nsample_ids: 2120afba8009bad3\n")
    proc = run_harness("run", "--config", str(cfg), "--max-tokens", "6")
    assert proc.returncode == 0, proc.stderr
    results = json.loads((out / "results.json").read_text())
    assert results["generation"]["max_tokens"] == 6
    assert results["config"]["current_date"] == "12-31-2025"
    sample = json.loads((out / "samples.jsonl").read_text())
    assert sample["id"] == "2120afba8009bad3"
    assert "Current date: 12-31-2025." in sample["messages"][0]["content"]
    assert sample["usage"]["completion_tokens"] <= 6


# ---- the answer budget where --max-tokens does not say, and where it came from -----------------------
REASONING_GUIDE = "https://platform.openai.com/docs/guides/reasoning"


@pytest.mark.parametrize(
    "model, tokens, source",
    [
        ("openai/o3", 25000, f"model facts openai/o3: {REASONING_GUIDE}"),
        ("openai/gpt-5-2025-08-07", 25000, f"model facts openai/gpt-5: {REASONING_GUIDE}"),  # a snapshot of it
        ("openai/gpt-4o", 512, "default 512"),  # listed, not reasoning: no default of its own
        ("openai/gpt-5.7", 512, "default 512"),  # unknown: never a neighbour's number
        ("vllm/Qwen/Qwen2.5-7B-Instruct", 512, "default 512"),
        ("local/smollm2", 128, "embedded default model, measured (README)"),
        ("nonsense", 512, "default 512"),  # refused by the backend later, in its own words
    ],
)
def test_the_default_answer_budget_comes_from_the_model_facts(model, tokens, source):
    config = build_config({"model": model})
    assert config.generation.max_tokens == tokens
    assert config.max_tokens_source.startswith(source), config.max_tokens_source
    given = build_config({"model": model, "max_tokens": 300})
    assert given.generation.max_tokens == 300 and given.max_tokens_source == "--max-tokens"


def test_a_claude_that_thinks_only_when_asked_keeps_512_without_a_thinking_budget():
    # anthropic/ entries carry a thinking default (16000); it applies only where thinking is on this run
    plain = build_config({"model": "anthropic/claude-sonnet-4-5"})
    assert plain.generation.max_tokens == 512 and plain.max_tokens_source == "default 512"
    thinking = build_config({"model": "anthropic/claude-sonnet-4-5", "thinking_budget": 2048})
    assert thinking.generation.max_tokens == 16000
    assert thinking.max_tokens_source.startswith("model facts anthropic/claude-sonnet-4-5: ")
    never = build_config({"model": "anthropic/claude-3-5-haiku", "thinking_budget": 2048})
    assert never.generation.max_tokens == 512  # refused later by check_params, in its own words


def test_the_budget_is_hashed_by_its_value_not_by_where_it_came_from():
    default = build_config({"model": "openai/o3"})
    assert default.config_hash() == build_config({"model": "openai/o3", "max_tokens": 25000}).config_hash()
    assert default.config_hash() != build_config({"model": "openai/o3", "max_tokens": 512}).config_hash()


def test_a_facts_table_entry_of_a_family_sets_the_budget(tmp_path, monkeypatch):
    table = tmp_path / "facts.yaml"
    table.write_text(
        "models:\n  hf/Thinker: {thinking: always, default_max_tokens: 3000, "
        "default_max_tokens_source: 'measured: 3000 fits its thinking', source: test, retrieved: '2026-01-01'}\n"
    )
    monkeypatch.setenv("HARNESS_MODEL_FACTS", str(table))
    config = build_config({"model": "vllm/org/Thinker-8B"})
    assert config.generation.max_tokens == 3000
    assert config.max_tokens_source == "model facts hf/Thinker: measured: 3000 fits its thinking"
