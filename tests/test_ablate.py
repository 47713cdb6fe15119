"""harness ablate: one run per context size, the answerability ceiling, a table and a PNG plot.
Evidence-provided with the real local model over the HotpotQA snapshot; open-book with a scripted
model behind a local OpenAI-protocol server."""

from __future__ import annotations

import pytest

import json
import re
import struct
from pathlib import Path

from conftest import run_harness
from fake_openai import FakeServer, scripted_search_model

from harness.analysis.ablate import read_sweep
from harness.analysis.figures import PNG_DPI, ablation_spec, figure_size
from harness.scoring.display import display_name
from harness.scoring.results import metric_values

SIZES = [1024, 2048]


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def table_rows(md: str) -> tuple[list[str], list[list[str]]]:
    lines = [line for line in md.splitlines() if line.startswith("|")]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    return head, [[c.strip() for c in line.strip("|").split("|")] for line in lines[2:]]


def check_outputs(out: Path, setting: str) -> dict:
    ablation = json.loads((out / "ablation.json").read_text())
    assert ablation["setting"] == setting and ablation["context_sizes"] == SIZES
    # the figure `harness figure ablation DIR` draws: a panel per headline metric (HotpotQA: EM, F1)
    assert ablation["headline"] == ablation["plotted_metrics"] == ["em-f1.em", "em-f1.f1"]
    spec = ablation_spec([read_sweep(out)])
    width, height = figure_size(spec)
    size = png_size(out / "ablation.png")
    assert abs(size[0] - width * PNG_DPI) < 1 and abs(size[1] - height * PNG_DPI) < 1
    assert [[p.y for p in line.points] for line in spec.panels[0].lines if line.role == "series"] == [
        [row["metrics"]["em-f1.em"] for row in ablation["rows"]]
    ]
    head, rows = table_rows((out / "ablation.md").read_text())
    assert [int(r[0]) for r in rows] == SIZES
    for size, row, cells in zip(SIZES, ablation["rows"], rows):
        results = json.loads((out / f"ctx-{size}" / "results.json").read_text())
        assert results["model"]["context_size"] == size and results["config"]["backend"]["context_size"] == size
        assert results["status"] == "complete" and results["counts"]["finished"] == 2
        metrics = metric_values(results["scores"])
        assert row["metrics"] == metrics  # the JSON holds every number of the run, unchanged
        for name in ablation["headline"]:  # the table: 4 decimals, then the standard error
            value = metrics[name]
            se, note = ((row["uncertainty"].get(name) or {}).get(k) for k in ("stderr", "note"))
            bar = f" ± {se:.4f}" if se is not None else " ± n/a" if note else ""  # n/a: no spread, said
            assert cells[head.index(display_name(name))] == f"{value:.4f}{bar}"
        assert cells[head.index("n")] == "2" and cells[head.index("failed")] == "0"
        assert cells[head.index("no answer")] == "0"
        assert cells[head.index("ceiling (loose)")] == f"{row['ceiling']['loose']:.4f}"
    assert head[:3] == ["context size", "EM", "F1"] and len(head) == 9  # the rest is in ablation.json
    return ablation


@pytest.mark.slow
def test_evidence_provided_sweep_real_model(hotpot_snapshot, tmp_path):
    out = tmp_path / "ablation"
    args = [
        "ablate",
        "--setting",
        "evidence-provided",
        "--dataset",
        "hotpotqa:dev",
        "--snapshot",
        str(hotpot_snapshot),
        "--context-sizes",
        ",".join(map(str, reversed(SIZES))),  # any order: sorted
        "--limit",
        "2",
        "--max-tokens",
        "16",
        "--out",
        str(out),
    ]
    proc = run_harness(*args)
    assert proc.returncode == 0, proc.stderr
    ablation = check_outputs(out, "evidence-provided")
    assert proc.stdout == (out / "ablation.md").read_text()
    # each run packed to its own size: the smaller one cuts the evidence
    small = [json.loads(line) for line in (out / "ctx-1024" / "samples.jsonl").read_text().splitlines()]
    assert all(s["extra"]["evidence"]["budget_tokens"] == 1024 - 520 for s in small)

    # the ceiling is harness ceiling's, for the same questions and sizes
    ceiling_out = tmp_path / "ceiling.json"
    proc = run_harness(
        "ceiling",
        "--dataset",
        "hotpotqa:dev",
        "--snapshot",
        str(hotpot_snapshot),
        "--context-sizes",
        "1024,2048",
        "--limit",
        "2",
        "--out",
        str(ceiling_out),
    )
    assert proc.returncode == 0, proc.stderr
    expected = {r["context_size"]: r for r in json.loads(ceiling_out.read_text())["rows"]}
    for row in ablation["rows"]:
        assert row["ceiling"] == {k: expected[row["context_size"]][k] for k in ("loose", "strict")}

    # Rerun: every run resumes finished, nothing is generated again.
    proc = run_harness(*args)
    assert proc.returncode == 0, proc.stderr
    for size in SIZES:
        results = json.loads((out / f"ctx-{size}" / "results.json").read_text())
        assert len(results["invocations"]) == 2 and results["invocations"][-1]["attempted"] == 0


@pytest.mark.slow
def test_open_book_sweep_with_ceiling(hotpot_snapshot, tmp_path):
    out = tmp_path / "ob"
    script = {
        "Scott Derrickson": ("Scott Derrickson", "yes"),
        "Corliss Archer": ("Shirley Temple", "Chief of Protocol"),
    }
    with FakeServer(scripted_search_model(script)) as server:
        proc = run_harness(
            "ablate",
            "--model",
            "openai/scripted",
            "--base-url",
            server.url + "/v1",
            "--setting",
            "open-book",
            "--dataset",
            "hotpotqa:dev",
            "--snapshot",
            str(hotpot_snapshot),
            "--search-space",
            "evidence-only",
            "--context-sizes",
            "1024,2048",
            "--limit",
            "2",
            "--max-tokens",
            "16",
            "--out",
            str(out),
        )
    assert proc.returncode == 0, proc.stderr
    ablation = check_outputs(out, "open-book")
    assert "shown for open-book too" in ablation["ceiling_note"]
    for row in ablation["rows"]:
        assert row["metrics"]["em-f1.em"] == 1.0  # both scripted answers are right at every size
        assert row["retrieval"]["evidence_recall_n"] == 2


@pytest.mark.slow
def test_bad_sweeps_are_one_line_errors(hotpot_snapshot, tmp_path):
    base = ["ablate", "--dataset", "hotpotqa:dev", "--snapshot", str(hotpot_snapshot), "--search-space", "evidence-only",
            "--out", str(tmp_path / "x")]  # fmt: skip
    cases = [
        (
            ["--setting", "evidence-provided", "--context-sizes", "4096,16384"],
            "error: context size 16384 is larger than local/smollm2 supports (8192 tokens)",
        ),
        (
            ["--setting", "closed-book", "--context-sizes", "2048"],
            "error: ablate needs --setting evidence-provided or open-book (got 'closed-book')",
        ),
        (
            ["--setting", "open-book", "--context-sizes", "2048", "--context-size", "4096"],
            "error: ablate sets the context size of each run: give the sizes with --context-sizes only",
        ),
        (
            ["--setting", "open-book", "--context-sizes", "2k"],
            "error: --context-sizes must be comma-separated integers",
        ),
        (
            ["--setting", "open-book", "--context-sizes", "512"],
            "error: context sizes must each exceed the answer reserve",
        ),
    ]
    for extra, message in cases:
        proc = run_harness(*base, *extra)
        assert proc.returncode == 2, (extra, proc.stderr)
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(message), (extra, lines)
    assert not (tmp_path / "x").exists()
    assert re.search(r"--context-sizes", run_harness("ablate", "--help").stdout)
