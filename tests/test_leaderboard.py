"""harness leaderboard: runs found under a folder (nested too), one row each with every metric and
the run's facts; runs sharing a key show the knobs that differ; non-runs ignored, a corrupt
results.json a one-line warning. The runs are real runs of scripted models behind a local server
speaking the OpenAI protocol (fast, exact token counts)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_harness
from fake_openai import FakeServer, scripted_search_model

from harness.analysis.leaderboard import column_labels, is_headline
from harness.scoring.results import metric_values


@pytest.fixture(scope="module")
def root(tmp_path_factory, hotpot_snapshot):
    root = tmp_path_factory.mktemp("lb") / "results"
    prices = root.parent / "prices.yaml"
    prices.write_text("models:\n  openai/gpt-test: {input: 3.0, output: 15.0}\n")
    snapshot = hotpot_snapshot
    script = {
        "Scott Derrickson": ("Scott Derrickson", "yes"),
        "Corliss Archer": ("Shirley Temple", "Chief of Protocol"),
    }
    with FakeServer(scripted_search_model(script)) as server:
        common = ["--base-url", server.url + "/v1", "--price-table", str(prices), "--limit", "2"]
        runs = [
            ("a", "openai/gpt-test", ["--max-tokens", "16"]),
            ("b", "openai/gpt-test", ["--max-tokens", "32"]),
            ("c", "openai/other", ["--max-tokens", "16"]),
            (
                "nested/deeper/d",
                "openai/gpt-test",
                ["--dataset", "hotpotqa:dev", "--setting", "open-book", "--snapshot", str(snapshot), "--search-space"]
                + ["evidence-only"]
                + ["--context-size", "4096"],
            ),
        ]
        for name, model, args in runs:
            proc = run_harness("run", "--model", model, *common, *args, "--out", str(root / name))
            assert proc.returncode == 0, proc.stderr
    (root / "notarun").mkdir()
    (root / "notarun" / "notes.txt").write_text("not a run")
    (root / "corrupt").mkdir()
    (root / "corrupt" / "results.json").write_text('{"run_id": "x", ')
    return root


def results_of(path):
    return json.loads((Path(path) / "results.json").read_text())


@pytest.mark.slow
def test_leaderboard_rows_json_and_markdown(root, tmp_path):
    out = tmp_path / "board" / "leaderboard.json"
    proc = run_harness("leaderboard", str(root), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    skipped = [line for line in proc.stderr.splitlines() if line.startswith("skipped ")]
    assert skipped == [  # each folder passed over, named with the reason
        f"skipped {root / 'notarun'}: not a run (no results.json)",
        f"skipped {root / 'corrupt'}: {root / 'corrupt' / 'results.json'}: not valid JSON "
        "(Expecting property name enclosed in double quotes: line 1 column 17 (char 16))",
    ]

    board = json.loads(out.read_text())
    rows = {Path(r["path"]).relative_to(root).as_posix(): r for r in board["rows"]}
    assert sorted(rows) == ["a", "b", "c", "nested/deeper/d"]
    for name, row in rows.items():
        results = results_of(root / name)
        assert row["metrics"] == metric_values(results["scores"])
        assert row["tokens"] == results["tokens"] and row["status"] == "complete"
        assert row["n_scored"] == results["scores"]["meta"]["n_questions"] == 2
        assert row["cost_usd"] == results["cost"]["total_usd"]
        assert row["cost_per_sample_usd"] == results["cost"]["per_sample_usd"]
        assert row["context_size"] == results["model"]["context_size"]
        assert (row["model"], row["dataset"], row["split"], row["version"]) == (
            results["config"]["model"],
            results["dataset"]["name"],
            results["dataset"]["split"],
            results["dataset"]["version"],
        )
    # same key, different knobs: the differing knob is shown, and only it
    assert rows["a"]["knobs"] == {"max_tokens": 16} and rows["b"]["knobs"] == {"max_tokens": 32}
    assert rows["c"]["knobs"] == {} and rows["nested/deeper/d"]["knobs"] == {}
    # priced model: list price of its tokens; unpriced one: null, never 0
    tokens = rows["a"]["tokens"]
    assert rows["a"]["cost_usd"] == pytest.approx((tokens["prompt"] * 3.0 + tokens["completion"] * 15.0) / 1e6)
    assert rows["c"]["cost_usd"] is None and "not in the price table" in rows["c"]["cost_note"]
    assert rows["nested/deeper/d"]["native_tool_calling"] is True and rows["a"]["native_tool_calling"] is False
    assert rows["nested/deeper/d"]["agent"] == "open-book-native" and rows["nested/deeper/d"]["context_size"] == 4096
    assert rows["nested/deeper/d"]["metrics"]["em-f1.em"] == 1.0

    # the markdown table: one line per row, the same numbers
    lines = [line for line in proc.stdout.splitlines() if line.startswith("|")]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    body = [[c.strip() for c in line.strip("|").split("|")] for line in lines[2:]]
    assert len(body) == 4
    # each metric column is labelled with its display name and its one scale
    labels = column_labels([m for m in board["metrics"] if is_headline(m)], board["scales"])
    assert set(labels.values()) <= set(head)
    by_path = {cells[head.index("path")]: cells for cells in body}
    for name, row in rows.items():
        cells = by_path[row["path"]]
        for metric, value in row["metrics"].items():
            if is_headline(metric):  # the value, then its standard error where it has one
                stderr, note = row["stderr"].get(metric), row["uncertainty_note"].get(metric)
                bar = f" ± {stderr:.4f}" if stderr is not None else " ± n/a" if note else ""
                want = f"{value:.4f}{bar}"
                assert cells[head.index(labels[metric])] == want
    assert by_path[str(root / "a")][head.index("knobs")] == "max_tokens=16"
    assert by_path[str(root / "c")][head.index("cost USD")] == "—"


def test_leaderboard_bad_input(tmp_path):
    proc = run_harness("leaderboard", str(tmp_path / "missing"))
    assert proc.returncode == 2 and proc.stderr.strip() == f"error: not a folder: {tmp_path / 'missing'}"
    proc = run_harness("leaderboard", str(tmp_path))
    assert proc.returncode == 2 and "no runs" in proc.stderr


def test_the_decoding_conditions_go_with_the_numbers(tmp_path):
    """A reasoning model's answer budget (from its facts entry), the effort it ran at and the facts entry
    are shown beside its numbers: in the leaderboard's JSON and markdown and in results.json."""
    prices = tmp_path / "prices.yaml"
    prices.write_text("models:\n  openai/gpt-5: {input: 1.25, output: 10.0}\n")
    with FakeServer(scripted_search_model({})) as server:
        for name, extra in (("default", []), ("low", ["--reasoning-effort", "low", "--max-tokens", "4000"])):
            proc = run_harness(
                "run", "--model", "openai/gpt-5", "--base-url", server.url + "/v1", "--price-table", str(prices),
                "--limit", "1", "--out", str(tmp_path / "runs" / name), *extra,
            )  # fmt: skip
            assert proc.returncode == 0, proc.stderr
        bodies = [body for _, path, _, body in server.requests if path.endswith("/chat/completions")]
    # behind --base-url: chat completions, the facts' length field, no sampling, effort only when asked
    assert bodies[0]["max_completion_tokens"] == 25000 and "reasoning_effort" not in bodies[0]
    assert bodies[1]["max_completion_tokens"] == 4000 and bodies[1]["reasoning_effort"] == "low"
    assert not {"temperature", "top_p", "max_tokens"} & (set(bodies[0]) | set(bodies[1]))
    out = tmp_path / "board.json"
    proc = run_harness("leaderboard", str(tmp_path / "runs"), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    rows = {Path(r["path"]).name: r for r in json.loads(out.read_text())["rows"]}
    default, low = rows["default"]["decoding"], rows["low"]["decoding"]
    assert default["max_tokens"] == 25000 and default["max_tokens_source"].startswith("model facts openai/gpt-5: ")
    assert default["reasoning_effort"] is None and default["provider_default_effort"] == "medium"
    assert default["facts"] == "openai/gpt-5" and default["api"] == "chat" and default["sampling_sent"] == []
    assert low["max_tokens"] == 4000 and low["max_tokens_source"] == "--max-tokens" and low["reasoning_effort"] == "low"
    markdown = out.with_suffix(".md").read_text() if out.with_suffix(".md").exists() else proc.stdout
    assert "max 25000 (model facts), effort medium (provider default), api chat" in markdown
    assert "max 4000 (--max-tokens), effort low, api chat" in markdown
