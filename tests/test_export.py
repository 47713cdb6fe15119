"""harness export fanoutqa-submission: the official leaderboard layout and metadata template
(zhudotexe/fanoutqa leaderboard-submissions/), from a real local-model run on 2 test questions and
from a scripted model over the whole test set; dev-set and non-FanOutQA runs are refused."""

from __future__ import annotations

import json

import pytest
from conftest import run_harness
from fake_openai import FakeServer, scripted_search_model

from harness.datasets import load_dataset
from harness.analysis.export import SubmissionMetadata

# the fields of hydrate.py's SubmissionMetadata, in the order of the official metadata files
OFFICIAL_FIELDS = [
    "name",
    "authors",
    "url",
    "citation",
    "type",
    "context",
    "is_trained_for_function_calling",
    "details",
    "closedbook_generations",
    "openbook_generations",
    "evidenceprovided_generations",
]
N_TEST = len(load_dataset("fanoutqa:test").samples)
IDENTITY = [
    "--name",
    "SmolLM2 135M (harness)",
    "--authors",
    "A. Tester",
    "--citation",
    "Tester, 2026",
    "--type",
    "foundation",
]


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def local_test_run(tmp_path_factory):
    """The real default model on the first 2 test questions (the test split has no answers)."""
    out = tmp_path_factory.mktemp("export") / "test-run"
    proc = run_harness("run", "--dataset", "fanoutqa:test", "--limit", "2", "--max-tokens", "16", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.mark.slow
def test_partial_run_is_refused_then_exported_with_allow_partial(local_test_run, tmp_path):
    out = tmp_path / "submission"
    proc = run_harness("export", "fanoutqa-submission", str(local_test_run), "--out", str(out), *IDENTITY)
    assert proc.returncode == 2 and not out.exists()
    assert proc.stderr.strip().splitlines() == [
        f"error: {local_test_run} answers 2 of {N_TEST} test questions: finish the run (rerun it) or pass --allow-partial"
    ]

    proc = run_harness(
        "export", "fanoutqa-submission", str(local_test_run), "--out", str(out), *IDENTITY, "--allow-partial"
    )
    assert proc.returncode == 0, proc.stderr
    assert "the leaderboard scores the missing ones 0" in proc.stderr
    generations = read_jsonl(out / "closedbook-generations" / "smollm2-135m-harness.jsonl")
    samples = {s["id"]: s for s in read_jsonl(local_test_run / "samples.jsonl")}
    test_ids = [s.id for s in load_dataset("fanoutqa:test").samples]
    assert [g["id"] for g in generations] == test_ids[:2]
    assert all(set(g) == {"id", "answer"} and g["answer"] == samples[g["id"]]["answer"] for g in generations)

    metadata_text = (out / "metadata" / "smollm2-135m-harness.json").read_text()
    metadata = json.loads(metadata_text)
    assert list(metadata) == OFFICIAL_FIELDS
    results = json.loads((local_test_run / "results.json").read_text())
    assert metadata == {
        "name": "SmolLM2 135M (harness)",
        "authors": "A. Tester",
        "url": None,
        "citation": "Tester, 2026",
        "type": "FOUNDATION",
        "context": results["model"]["context_size"],
        "is_trained_for_function_calling": False,
        "details": "local/smollm2",
        "closedbook_generations": "smollm2-135m-harness.jsonl",
        "openbook_generations": None,
        "evidenceprovided_generations": None,
    }
    assert metadata["context"] == 8192  # SmolLM2's GGUF context length
    SubmissionMetadata(**metadata)


def test_metadata_file_and_overrides(local_test_run, tmp_path):
    meta = tmp_path / "meta.yaml"
    meta.write_text(
        "name: My System\nauthors: Ada, Bob\nurl: https://example.org/sys\ncitation: Ada et al., 2026\n"
        "type: PROMPT\ndetails: smollm2 q4_1\n"
    )
    out = tmp_path / "sub"
    args = ["export", "fanoutqa-submission", str(local_test_run), "--out", str(out), "--allow-partial"]
    proc = run_harness(*args, "--metadata", str(meta), "--context", "4096", "--trained-for-function-calling")
    assert proc.returncode == 0, proc.stderr
    metadata = json.loads((out / "metadata" / "my-system.json").read_text())
    assert metadata["url"] == "https://example.org/sys" and metadata["type"] == "PROMPT"
    assert metadata["context"] == 4096 and metadata["is_trained_for_function_calling"] is True
    assert metadata["details"] == "smollm2 q4_1" and metadata["closedbook_generations"] == "my-system.jsonl"

    bad = tmp_path / "bad.yaml"
    bad.write_text("name: X\nauthor: typo\n")
    proc = run_harness(*args, "--metadata", str(bad))
    assert proc.returncode == 2 and "unknown field(s) author" in proc.stderr
    proc = run_harness(*args, "--name", "X")
    assert proc.returncode == 2 and "needs --authors, --citation, --type" in proc.stderr
    proc = run_harness(*args, *IDENTITY, "--context", "0")
    assert proc.returncode == 2 and "--context: must be >= 1" in proc.stderr


@pytest.mark.slow
def test_dev_and_non_fanoutqa_runs_are_refused(tmp_path):
    dev = tmp_path / "dev"
    assert run_harness("run", "--limit", "1", "--max-tokens", "8", "--out", str(dev)).returncode == 0
    proc = run_harness("export", "fanoutqa-submission", str(dev), "--out", str(tmp_path / "s"), *IDENTITY)
    assert proc.returncode == 2 and not (tmp_path / "s").exists()
    expected = (
        f"error: {dev}: a fanoutqa:dev@nov23 run; the leaderboard takes test-set generations "
        "(run with --dataset fanoutqa:test)"
    )
    assert proc.stderr.strip().splitlines() == [expected]
    hotpot = tmp_path / "hotpot"
    with FakeServer(scripted_search_model({})) as server:
        proc = run_harness(
            "run",
            "--model",
            "openai/scripted",
            "--base-url",
            server.url + "/v1",
            "--dataset",
            "hotpotqa:dev",
            "--limit",
            "1",
            "--out",
            str(hotpot),
        )
    assert proc.returncode == 0, proc.stderr
    proc = run_harness("export", "fanoutqa-submission", str(hotpot), "--out", str(tmp_path / "s"), *IDENTITY)
    assert proc.returncode == 2 and "the FanOutQA leaderboard takes FanOutQA runs" in proc.stderr
    proc = run_harness("export", "fanoutqa-submission", str(tmp_path), "--out", str(tmp_path / "s"), *IDENTITY)
    assert proc.returncode == 2 and "not a run directory" in proc.stderr


@pytest.mark.slow
def test_whole_test_set_exports_without_allow_partial(tmp_path):
    """A scripted model answers all test questions: the export needs no --allow-partial; two runs of
    one setting, or of two models, are refused."""
    full, other = tmp_path / "full", tmp_path / "other"
    with FakeServer(scripted_search_model({})) as server:
        for out, model in ((full, "openai/scripted"), (other, "openai/other")):
            proc = run_harness(
                "run",
                "--model",
                model,
                "--base-url",
                server.url + "/v1",
                "--dataset",
                "fanoutqa:test",
                "--max-connections",
                "16",
                "--max-tokens",
                "16",
                "--out",
                str(out),
            )
            assert proc.returncode == 0, proc.stderr
    sub = tmp_path / "sub"
    proc = run_harness("export", "fanoutqa-submission", str(full), "--out", str(sub), *IDENTITY, "--context", "8192")
    assert proc.returncode == 0, proc.stderr
    generations = read_jsonl(sub / "closedbook-generations" / "smollm2-135m-harness.jsonl")
    assert len(generations) == N_TEST == 725 and len({g["id"] for g in generations}) == N_TEST
    assert all(g["answer"] == "I do not know" for g in generations)
    # the openai backend does not know a context size for "scripted": it must be given
    proc = run_harness("export", "fanoutqa-submission", str(full), "--out", str(sub), *IDENTITY)
    assert proc.returncode == 2 and "pass --context N" in proc.stderr

    proc = run_harness("export", "fanoutqa-submission", str(full), str(full), "--out", str(sub), *IDENTITY)
    assert proc.returncode == 2 and "two closed-book runs" in proc.stderr
    proc = run_harness("export", "fanoutqa-submission", str(full), str(other), "--out", str(sub), *IDENTITY)
    assert proc.returncode == 2 and "different models (openai/other, openai/scripted)" in proc.stderr
