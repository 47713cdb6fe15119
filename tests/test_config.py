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
