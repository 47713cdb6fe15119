"""Issue 42: ``harness figure effort``: accuracy against the searches (tokens, model calls, cost) each
question took, a line per run with 95% intervals, from scripted open-book runs over the real HotpotQA
snapshot; the same figure in the report."""

from __future__ import annotations

import asyncio

import pytest

from harness.analysis.figures import effort_bin, effort_of_rows, effort_spec
from harness.analysis.report import write_report
from harness.analysis.runs import load_rows
from harness.cli import main
from harness.datasets import load_dataset
from harness.errors import HarnessError
from harness.execution.config import build_config
from harness.execution.record import read_results
from harness.execution.runner import Run
from harness.models.scripted import register_script, unregister_script
from harness.scoring.stats import wilson_interval

HOTPOT = load_dataset("hotpotqa:dev")
GOLD = {s.question: (i, s) for i, s in enumerate(HOTPOT.samples)}


def _script(wrong_when: int):
    """Question i makes i % 4 searches (a gold page, then "Terry Richardson"), then answers right
    unless i % 4 == ``wrong_when``."""

    def script(messages, tools, tool_choice, params):
        i, sample = next(v for q, v in GOLD.items() if q in messages[0]["content"])
        plan = [sample.needed_titles[0], "Terry Richardson", sample.needed_titles[-1]][: i % 4]
        done = sum(1 for m in messages if m["role"] == "assistant")
        if done < len(plan):
            return {"content": "", "tool_calls": [{"name": "search", "arguments": {"query": plan[done]}}]}
        return "Zzyzx" if i % 4 == wrong_when else sample.answer

    return script


def _run(tmp_path, name, wrong_when, snapshot, setting="open-book"):
    register_script(name, _script(wrong_when))
    try:
        options = {"model": f"scripted/{name}", "dataset": "hotpotqa:dev", "setting": setting, "limit": 12,
                   "out": str(tmp_path / name), "cache": False, "snapshot": str(snapshot),
                   "search_space": "evidence-only", "metrics": ["em-f1", "agent"]}  # fmt: skip
        asyncio.run(Run(build_config(options), show_progress=False).execute())
    finally:
        unregister_script(name)
    return tmp_path / name


def test_effort_bins():
    assert [effort_bin(x) for x in (0, 1, 2, 3, 4, 7, 8)] == [0, 1000, 1001, 1001, 1002, 1002, 1003]
    assert effort_bin(0.003) < effort_bin(0.01) < effort_bin(1)  # USD: the same doublings


def test_effort_lines_bins_intervals_cli_and_report(hotpot_snapshot, tmp_path):
    a = _run(tmp_path, "eff-a", 3, hotpot_snapshot)  # wrong after 3 searches
    b = _run(tmp_path, "eff-b", 0, hotpot_snapshot)  # wrong without a search
    runs = [(str(d), read_results(d), effort_of_rows(load_rows(d).finished.values())) for d in (a, b)]
    spent = runs[0][2]
    assert sorted({v["searches"] for v in spent.values()}) == [0.0, 1.0, 2.0, 3.0]
    spec = effort_spec(runs, ["em-f1.em"], ["searches", "tokens"])
    assert [p.title for p in spec.panels] == ["EM by searches", "EM by tokens"]
    line_a, line_b = spec.panels[0].lines
    # bins 0, 1, 2-3: three points; run a is right at 0, 1, 2 searches and wrong at 3
    assert [p.x for p in line_a.points] == [0.0, 1.0, 2.5] and [p.n for p in line_a.points] == [3, 3, 6]
    assert [p.y for p in line_a.points] == [1.0, 1.0, 0.5] and [p.y for p in line_b.points] == [0.0, 1.0, 1.0]
    lo, hi = wilson_interval(3, 6)  # em is a share: Wilson, as the scores' own
    assert (line_a.points[2].lo, line_a.points[2].hi) == pytest.approx((lo, hi))
    assert all(p.n for p in spec.panels[1].lines[0].points) and sum(p.n for p in spec.panels[1].lines[0].points) == 12
    # a closed-book run records no searches: said, no line; a number that is no mean cannot be binned
    c = _run(tmp_path, "eff-c", 9, hotpot_snapshot, setting="closed-book")
    closed = (str(c), read_results(c), effort_of_rows(load_rows(c).finished.values()))
    spec = effort_spec([runs[0], closed], ["em-f1.em"], ["searches"])
    assert len(spec.panels[0].lines) == 1 and any("records no searches" in n for n in spec.notes)
    with pytest.raises(HarnessError, match="x cost2|not an effort axis"):
        effort_spec(runs, ["em-f1.em"], ["cost2"])
    # the command: a figure file, one line per run; a bad metric is one line and exit 2
    out = tmp_path / "effort.svg"
    assert main(["figure", "effort", str(a), str(b), "--metric", "em", "--x", "searches", "--out", str(out)]) == 0
    assert "EM by searches" in out.read_text()
    assert main(["figure", "effort", str(a), "--metric", "nope", "--out", str(tmp_path / "x.png")]) == 2
    # the report draws the headline by searches and tokens
    html = write_report(a).read_text()
    assert '<section id="effort">' in html and "EM by searches" in html and "F1 by tokens" in html
