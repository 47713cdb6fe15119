"""Bad input: one clear line on stderr, exit code 2, no traceback, nothing half-written."""

import json

import pytest
from conftest import run_harness


def assert_clean_error(proc, *needles):
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.mark.parametrize(
    "args, needles",
    [
        (["--model", "nosuch/thing"], ["unknown model backend 'nosuch'", "local"]),
        (["--model", "smollm2"], ["PREFIX/NAME"]),
        (["--model", "local/missing.gguf"], ["model file not found"]),
        (["--setting", "telepathy"], ["invalid choice: 'telepathy'", "closed-book"]),
        (["--dataset", "nosuchset:dev"], ["unknown dataset 'nosuchset'"]),
        (["--dataset", "fanoutqa:dev@1999"], ["unknown version '1999'", "nov23", "2026"]),
        (["--dataset", "fanoutqa:train"], ["unknown split 'train'"]),
        (["--dataset", "fanoutqa dev"], ["NAME[:SPLIT][@VERSION]"]),
        (["--sample-id", "nosuchid"], ["unknown sample id", "nosuchid"]),
        (["--limit", "0"], ["limit"]),
        (["--model", "openai/gpt-4o"], ["OPENAI_API_KEY"]),
        (["--model", "anthropic/claude-3-5-sonnet-20241022"], ["ANTHROPIC_API_KEY"]),
    ],
)
def test_bad_run_arguments(tmp_path, args, needles):
    out = tmp_path / "run"
    proc = run_harness("run", "--limit", "1", "--out", str(out), *args)
    assert_clean_error(proc, *needles)
    assert not (out / "samples.jsonl").exists()


def test_unreachable_server(tmp_path):
    proc = run_harness(
        "run",
        "--limit",
        "1",
        "--out",
        str(tmp_path / "run"),
        "--model",
        "openai/gpt-4o",
        "--base-url",
        "http://127.0.0.1:9/v1",
        "--max-attempts",
        "1",
        env={"OPENAI_API_KEY": "sk-test-not-real"},
    )
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    assert "127.0.0.1:9" in proc.stderr
    assert "sk-test-not-real" not in proc.stderr
    for path in (tmp_path / "run").glob("*"):
        assert "sk-test-not-real" not in path.read_text(), f"API key written to {path}"


def test_malformed_generations_names_the_line(tmp_path):
    gens = tmp_path / "gens.jsonl"
    gens.write_text('{"id": "7dcbbbdc7f1120cd", "answer": "x"}\n{"id": oops}\n')
    proc = run_harness(
        "score", "--dataset", "fanoutqa:dev", "--generations", str(gens), "--out", str(tmp_path / "s.json")
    )
    assert_clean_error(proc, f"{gens}:2", "not valid JSON")
    assert not (tmp_path / "s.json").exists()

    gens.write_text('{"id": "7dcbbbdc7f1120cd"}\n')
    proc = run_harness("score", "--dataset", "fanoutqa:dev", "--generations", str(gens))
    assert_clean_error(proc, f"{gens}:1", "'answer'")


def test_malformed_dataset_file(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"id": "a", "question": "q?", "answer": "x"}, {"question": "no id"}]))
    proc = run_harness("run", "--data-path", str(bad), "--limit", "1", "--out", str(tmp_path / "run"))
    assert_clean_error(proc, "question #2", "'id'")


def test_bad_yaml_and_unknown_option(tmp_path):
    cfg = tmp_path / "run.yaml"
    cfg.write_text("model: [unclosed\n")
    assert_clean_error(run_harness("run", "--config", str(cfg)), "not valid YAML")
    cfg.write_text("modle: local/smollm2\n")
    assert_clean_error(run_harness("run", "--config", str(cfg)), "modle")
    assert_clean_error(run_harness("run", "--config", str(tmp_path / "none.yaml")), "--config", "file not found")


@pytest.mark.slow
def test_out_dir_of_another_configuration_is_refused(tmp_path):
    out = tmp_path / "run"
    assert run_harness("run", "--limit", "1", "--out", str(out), "--max-tokens", "8").returncode == 0
    before = (out / "samples.jsonl").read_bytes()
    proc = run_harness("run", "--limit", "1", "--out", str(out), "--max-tokens", "9")
    assert_clean_error(proc, "different configuration", "--out")
    assert (out / "samples.jsonl").read_bytes() == before


def test_help_explains_every_option():
    proc = run_harness("run", "--help")
    assert proc.returncode == 0
    for flag in (
        "--model",
        "--setting",
        "--dataset",
        "--limit",
        "--sample-id",
        "--max-connections",
        "--config",
        "--out",
        "--current-date",
        "--temperature",
        "--seed",
        "--max-tokens",
        "--base-url",
        "--no-cache",
    ):
        assert flag in proc.stdout
    assert "--generations" in run_harness("score", "--help").stdout
