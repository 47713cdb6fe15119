"""``harness table`` and the tables, Holm adjustment and smallest-p notes of ``harness compare``:
scripted runs (fast), their cells read back against results.json; Holm checked against
statsmodels; a run that answered nothing reads as failed, never as 0."""

from __future__ import annotations

import asyncio
import csv
import io
import json
import re
import shutil
import subprocess

import numpy as np
import pytest
from statsmodels.stats.multitest import multipletests

from harness.analysis.compare import _adjust, compare_runs, comparison_figure, format_comparison, load_run
from harness.analysis.grid import Cell, Column, Grid, latex_escape, mark_best, render
from harness.analysis.table import RunTable, TableRow, build_table, table_grid
from harness.cli import main
from harness.datasets import load_dataset
from harness.errors import HarnessError
from harness.execution.config import build_config
from harness.execution.runner import Run
from harness.models.scripted import register_script, unregister_script
from harness.scoring import stats
from harness.scoring.display import lower_is_better

HOTPOT = load_dataset("hotpotqa:dev").samples
GOLD = {s.question: (i, s.answer) for i, s in enumerate(HOTPOT)}
MODEL = "tab_model%v1#2"  # LaTeX specials in the model's name


def _gold(messages):
    return next(v for q, v in GOLD.items() if q in messages[0]["content"])


SCRIPTS = {
    MODEL: lambda messages, *_: _gold(messages)[1],  # right on every question
    "tab-wrong": lambda *_: "no idea",
    "tab-half": lambda messages, *_: _gold(messages)[1] if _gold(messages)[0] % 2 == 0 else "no idea",
    "tab-broken": lambda *_: (_ for _ in ()).throw(ValueError("no answer today")),
    "tab-topi": lambda *_: "Britain, Christopher Lee",  # F1 23.6 over four turns of one conversation
}


def _run(out, script, dataset="hotpotqa:dev", limit=5):
    config = build_config({"model": f"scripted/{script}", "dataset": dataset, "out": str(out), "limit": limit, "cache": False})
    asyncio.run(Run(config, show_progress=False).execute())
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    for name, fn in SCRIPTS.items():
        register_script(name, fn)
    root = tmp_path_factory.mktemp("table")
    made = {
        "right": _run(root / "results" / "right", MODEL),
        "wrong": _run(root / "results" / "wrong", "tab-wrong"),
        "half": _run(root / "results" / "half", "tab-half"),
        "broken": _run(root / "results" / "broken", "tab-broken", limit=3),
        "topi": _run(root / "other" / "topi", "tab-topi", dataset="topiocqa:dev", limit=4),
    }
    yield root, made
    for name in SCRIPTS:
        unregister_script(name)


def results(path):
    return json.loads((path / "results.json").read_text())


def md_rows(text):
    """A markdown table's rows as lists of cells (header first, the rule left out)."""
    lines = [line for line in text.splitlines() if line.startswith("|")]
    return [[c.strip() for c in line.strip("|").split(" | ")] for i, line in enumerate(lines) if i != 1]


# ---------------------------------------------------------------------------- Holm, smallest p
def random_p_values(rng, trial):
    m = int(rng.integers(1, 40))
    p = rng.random(m) ** rng.uniform(0.3, 4)
    if trial % 3 == 0:  # ties, exact 0 and 1, values at the thresholds
        p = np.round(p, 1)
        p[rng.integers(0, m)] = rng.choice([0.0, 1.0, 0.05])
    return p


def test_holm_equals_statsmodels_on_random_p_values(monkeypatch):
    import gc

    monkeypatch.setattr(gc, "collect", lambda *args: 0)  # multipletests collects garbage on every call (60 ms)
    rng = np.random.default_rng(7)
    for trial in range(1000):
        p = random_p_values(rng, trial)
        assert np.array_equal(stats.holm(p.tolist()), multipletests(p, method="holm")[1]), p
    assert stats.holm([]) == []
    assert stats.holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])  # 3 x 0.01, then 2 x 0.03 twice


def test_smallest_p_of_each_test():
    five = stats.mcnemar_exact([1] * 5 + [0] * 3, [0] * 5 + [0] * 3)  # 5 discordant, all one way
    assert five["p"] == stats.smallest_p(five)["p"] == 0.0625
    assert stats.smallest_p(five)["n"] == 5 and stats.smallest_p(five)["unit"] == "question"
    flips = stats.sign_flip_test([1, 2, 3, 4, 5, 0, 0])
    assert flips["p"] == stats.smallest_p(flips)["p"] == 2 / 32 and stats.smallest_p(flips)["n"] == 5
    clustered = stats.sign_flip_test([1, 1, 2, 2, 3], clusters=["a", "a", "b", "b", "c"])
    assert stats.smallest_p(clustered) == {"p": 0.25, "n": 3, "unit": "cluster"}
    many = stats.sign_flip_test(np.r_[np.full(30, 0.5), -np.full(5, 0.5)])  # Monte Carlo
    assert stats.smallest_p(many)["p"] == 1 / (1 + many["permutations"])
    rows_a, rows_b = [{"x": 1}, {"x": 2}, {"x": 3}, {"x": 4}], [{"x": 1}, {"x": 5}, {"x": 6}, {"x": 7}]
    swap = stats.swap_test(rows_a, rows_b, lambda rows: sum(r["x"] for r in rows))
    assert swap["n_differing"] == 3 and stats.smallest_p(swap)["p"] == 0.25
    assert stats.smallest_p(stats.swap_test(rows_a, rows_a, len))["p"] == 1.0
    assert stats.smallest_p(stats.sign_flip_test([0, 0]))["p"] == 1.0


def test_significance_is_by_the_holm_adjusted_p():
    diffs = [{"p": p} for p in (0.01, 0.04, 0.03)]
    out = {"metrics": {"m.a": {"diffs": diffs[:2]}, "m.b": {"diffs": [diffs[2], {"p": None, "failed": "x"}]}}}
    _adjust(out)
    assert [d["p_holm"] for d in diffs] == pytest.approx([0.03, 0.06, 0.06])
    assert [d["significant"] for d in diffs] == [True, False, False]  # each raw p < 0.05
    assert out["multiple_testing"] == {"method": "holm", "n_tests": 3, "alpha": 0.05}


# ---------------------------------------------------------------------------- compare
def test_compare_adjusts_over_every_test_and_says_when_05_is_out_of_reach(runs, capsys):
    _, r = runs
    result = compare_runs([load_run(r["right"]), load_run(r["wrong"]), load_run(r["half"])])
    tests = [d for e in result["metrics"].values() for d in e["diffs"]]
    assert result["multiple_testing"]["n_tests"] == len(tests) > 4  # every number, not only the headline
    expected = multipletests([d["p"] for d in tests], method="holm")[1]
    assert [d["p_holm"] for d in tests] == list(expected)  # the same floats
    em = result["metrics"]["em-f1.em"]["diffs"][0]  # 5 right vs 5 wrong: McNemar's best is 2/2^5
    assert em["test"] == "McNemar exact" and em["p"] == 0.0625 and em["p_min"]["p"] == 0.0625
    text = format_comparison(result)
    assert f"p adjusted over {len(tests)} tests (Holm)" in text
    assert "n=5 paired questions that differ: the smallest p this test can reach is 0.0625 > 0.05" in text
    assert "Holm p = " in text
    # the same in the markdown table's notes; the table has p and Holm's p
    md = render(comparison_grid_of(result), "md")
    assert "| p | p (Holm) |" in md and f"p adjusted over {len(tests)} tests (Holm)" in md
    assert "EM, B vs A: n=5 paired questions that differ: the smallest p this test can reach is 0.0625 > 0.05" in md


def comparison_grid_of(result):
    from harness.analysis.compare import comparison_grid

    return comparison_grid(result)


def test_compare_names_every_run_in_its_text_table_and_figure(runs, tmp_path):
    _, r = runs
    twin = tmp_path / "twin"  # the same model and setting as "right": told apart by folder
    shutil.copytree(r["right"], twin)
    result = compare_runs([load_run(r["right"]), load_run(twin), load_run(r["half"]), load_run(r["broken"], failed_ok=True)])
    labels = [run["label"] for run in result["runs"]]
    assert labels[0].endswith("(right)") and labels[1].endswith("(twin)") and labels[0] != labels[1]
    assert labels[2].startswith("tab-half closed-book")
    text = format_comparison(result)
    for letter, label in zip("ABCD", labels):
        assert f"  {letter}: " in text and label in text
    fig, keys = comparison_figure(result)
    try:
        ax = fig.axes[0]
        assert labels[0] in ax.get_title() and "baseline" in ax.get_title()
        legend = [t.get_text() for t in fig.legends[0].get_texts()]
        assert legend == [
            f"B - A: {labels[1]}",
            f"C - A: {labels[2]}",
            f"D - A: {labels[3]} (failed, not compared)",
        ]
        ticks = [t.get_text() for t in ax.get_yticklabels()]
        assert "EM (B)" in ticks and "EM (D: failed)" in ticks and "em-f1.em" not in ticks  # display names
        assert len(ax.containers) == 2 * len(keys)  # an interval for B and C, none for D
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)
    csv_rows = list(csv.DictReader(io.StringIO(render(comparison_grid_of(result), "csv"))))
    broken = [row for row in csv_rows if row["path"] == str(r["broken"])]
    assert broken and all(row["status"] == "failed" and row["value"] == row["p"] == "n/a" for row in broken)


# ---------------------------------------------------------------------------- table
def test_table_cells_intervals_n_and_failed(runs, capsys):
    root, r = runs
    assert main(["table", str(root / "results")]) == 0
    rows = md_rows(capsys.readouterr().out)
    assert rows[0] == ["Model", "Setting", "Agent", "Context", "EM", "F1", "n", "Failed"]
    by_model = {row[0]: row for row in rows[1:]}
    assert list(by_model) == ["tab-broken", "tab-half", MODEL, "tab-wrong"]  # the folders, sorted
    for name, path in (("tab-half", r["half"]), (MODEL, r["right"]), ("tab-wrong", r["wrong"])):
        res = results(path)
        for col, key in ((4, "em-f1.em"), (5, "em-f1.f1")):
            value, ci = res["scores"]["em-f1"][key.split(".")[1]], res["scores"]["uncertainty"][key]["ci95"]
            cell = by_model[name][col].replace("**", "")
            # F1 all 1 or all 0 (a mean, no spread): no interval; EM (a share) keeps Wilson's at 5 of 5, 0 of 5
            shown = "[n/a]" if ci is None else f"[{ci[0]:.3f}, {ci[1]:.3f}]"
            assert cell == f"{value:.3f} {shown}", (name, key)
            assert (ci is None) == (key == "em-f1.f1" and name != "tab-half"), (name, key)
        assert by_model[name][6] == str(res["scores"]["meta"]["n_answered"]) == "5"
        assert by_model[name][7] == "0" and by_model[name][3] == str(res["model"]["context_size"])
    assert by_model[MODEL][4].startswith("**1.000**")  # the best EM, bold
    assert not by_model["tab-half"][4].startswith("**") and not by_model["tab-wrong"][4].startswith("**")
    # every question failed: failed, never 0; n counts answered questions; why in the notes
    assert by_model["tab-broken"][4:] == ["failed", "failed", "0", "3"]
    text = render(table_grid(build_table([root / "results"])), "md")
    assert "tab-broken closed-book" in text and "failed, no number: the run answered nothing (0 of 3 samples" in text


def test_table_latex_booktabs_bold_and_escaping(runs, tmp_path):
    root, r = runs
    twin = tmp_path / "twin"  # a tie for the best EM: both bold
    shutil.copytree(r["right"], twin)
    out = tmp_path / "table.tex"
    assert main(["table", str(r["right"]), str(twin), str(r["half"]), str(r["broken"]), "--format", "latex", "--out", str(out)]) == 0
    tex = out.read_text()
    lines = tex.splitlines()
    fit = "\\resizebox{\\ifdim\\width>\\linewidth\\linewidth\\else\\width\\fi}{!}{%"  # scaled down only where wider
    assert lines[1:3] == [fit, "\\begin{tabular}{lllrrrrr}"]
    assert lines[-1].startswith("%") and "\\end{tabular}}" in lines
    assert [line for line in lines if line in ("\\toprule", "\\midrule", "\\bottomrule")] == ["\\toprule", "\\midrule", "\\bottomrule"]
    assert "Model & Setting & Agent & Context & EM & F1 & n & Failed \\\\" in lines
    body = [line for line in lines if line.endswith("\\\\") and not line.startswith("Model")]
    assert len(body) == 4
    escaped = "tab\\_model\\%v1\\#2"
    assert body[0].startswith(escaped + " & ") and body[1].startswith(escaped + " & ")
    assert body[0].count("\\textbf{1.000}") == 2 and body[1].count("\\textbf{1.000}") == 2  # EM and F1, tied
    assert "\\textbf" not in body[2] and "\\textbf" not in body[3]
    # the interval on the value's second line, braced so that \\ does not take it for its [space]
    assert body[2].split(" & ")[4] == "\\begin{tabular}[t]{@{}r@{}}0.600\\\\ {[0.231, 0.882]}\\end{tabular}"
    assert body[3].split(" & ")[4:] == ["failed", "failed", "0", "3 \\\\"]
    assert latex_escape("a_b & 50% #1 {x} ~ ^ \\ ≥") == (
        "a\\_b \\& 50\\% \\#1 \\{x\\} \\textasciitilde{} \\textasciicircum{} \\textbackslash{} $\\geq$"
    )


def test_table_csv_columns_and_values(runs, capsys):
    root, r = runs
    assert main(["table", str(r["half"]), str(r["broken"]), "--format", "csv"]) == 0
    captured = capsys.readouterr()
    reader = csv.DictReader(io.StringIO(captured.out))
    assert reader.fieldnames == [
        "path", "dataset", "model", "setting", "agent", "context_size",
        "em-f1.em", "em-f1.em.ci_low", "em-f1.em.ci_high", "em-f1.f1", "em-f1.f1.ci_low", "em-f1.f1.ci_high",
        "n", "failed", "status",
    ]  # fmt: skip
    half, broken = list(reader)
    res = results(r["half"])
    assert float(half["em-f1.f1"]) == res["scores"]["em-f1"]["f1"]  # unformatted: every digit
    assert [float(half["em-f1.f1.ci_low"]), float(half["em-f1.f1.ci_high"])] == res["scores"]["uncertainty"]["em-f1.f1"]["ci95"]
    assert half["path"] == str(r["half"]) and half["n"] == "5" and half["failed"] == "0"
    assert broken["em-f1.em"] == broken["em-f1.em.ci_low"] == "n/a" and broken["n"] == "0" and broken["failed"] == "3"
    assert "note: " in captured.err and "answered nothing" in captured.err  # the file stays data


def test_table_of_two_datasets_and_chosen_metrics(runs, capsys):
    root, r = runs
    table = build_table([r["right"], r["topi"]])
    assert table.keys == ["em-f1.em", "em-f1.f1", "topiocqa.f1"]
    md = render(table_grid(table), "md")
    rows = md_rows(md)
    assert rows[0] == ["Dataset", "Model", "Setting", "Agent", "Context", "EM", "F1 (em-f1)", "F1 (topiocqa)", "n", "Failed"]
    hotpot, topi = rows[1], rows[2]
    assert hotpot[7] == "" and topi[5] == topi[6] == ""  # another dataset's number: blank, not 0 or n/a
    res = results(r["topi"])
    assert res["scores"]["uncertainty"]["topiocqa.f1"]["note"] == "one cluster: no between-cluster spread"
    assert topi[7] == f"{res['scores']['topiocqa']['f1']:.1f} [n/a]" == "23.6 [n/a]"  # 0-100: one decimal
    assert "F1 (topiocqa): no interval (one cluster: no between-cluster spread)" in md
    # --metric: a key, or a metric's headline
    assert build_table([r["right"]], ["fanoutqa-string.acc.strict", "em-f1"]).keys == ["fanoutqa-string.acc.strict", "em-f1.f1"]
    with pytest.raises(HarnessError, match=r"^--metric nope: not a metric of these runs \(available: fanoutqa-string.acc.loose, "):
        build_table([r["right"]], ["nope"])
    assert main(["table", str(r["right"]), "--metric", "nope"]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_folders_links_and_each_run_once(runs, tmp_path, capsys):
    root, r = runs
    papers = tmp_path / "papers"
    (papers / "linked").mkdir(parents=True)
    (papers / "linked" / "half-link").symlink_to(r["half"], target_is_directory=True)
    (papers / "other-link").symlink_to(root / "other", target_is_directory=True)
    (papers / "loop").symlink_to(papers, target_is_directory=True)  # walked once, not forever
    (papers / "corrupt").mkdir()
    (papers / "corrupt" / "results.json").write_text('{"run_id": "x", ')
    table = build_table([papers, r["half"], root / "results" / "half" / "results.json"])
    assert [row.path for row in table.rows] == [str(papers / "linked" / "half-link"), str(papers / "other-link" / "topi")]
    assert len(table.skipped) == 1 and "corrupt" in table.skipped[0] and table.skipped[0].endswith("skipped")
    empty = tmp_path / "empty"
    (empty / "sub").mkdir(parents=True)
    for bad in (empty, papers / "corrupt", tmp_path / "missing"):
        assert main(["table", str(bad)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and err.count("\n") == 1 and str(bad) in err
    assert "not a run directory and no run under it" in (main(["table", str(empty)]), capsys.readouterr().err)[1]


def test_best_is_lowest_for_spending_and_n_a_is_never_bold():
    assert lower_is_better("agent.cost") and lower_is_better("agent.tokens") and lower_is_better("agent.rounds")
    assert not lower_is_better("agent.evidence_recall") and not lower_is_better("em-f1.f1")

    def row(name, cost, recall, note=None):
        return TableRow(
            path=name, label=name, dataset="d", model=name, setting="open-book", agent="react", context_size=None,
            status="complete", n=5, failed=0, failed_reason=None, headline=[],
            values={"agent.cost": cost, "agent.evidence_recall": recall},
            ci95={"agent.evidence_recall": [0.1, 0.9]}, notes={"agent.evidence_recall": note} if note else {},
        )  # fmt: skip

    table = RunTable(
        keys=["agent.cost", "agent.evidence_recall"],
        rows=[row("a", 0.5, 0.4), row("b", 0.25, None, "judge unavailable"), row("c", 0.25, 0.3)],
    )
    rows = md_rows(render(table_grid(table), "md"))
    assert rows[0][4:6] == ["Cost (USD)", "Evidence recall"]
    assert [r[4] for r in rows[1:]] == ["0.5000 [n/a]", "**0.2500** [n/a]", "**0.2500** [n/a]"]  # lowest, tied
    assert [r[5] for r in rows[1:]] == ["**0.400** [0.100, 0.900]", "n/a", "0.300 [0.100, 0.900]"]
    assert "- b: Evidence recall n/a: judge unavailable" in render(table_grid(table), "md")
    grid = Grid(columns=[Column(key="x", title="x", kind="score", best="high")], rows=[[Cell(value=None)], [Cell(value=0.2)]])
    mark_best(grid)  # one value: nothing to be best among
    assert not any(c.bold for row in grid.rows for c in row)


# ---------------------------------------------------------------------------- bold, LaTeX on a page
def test_bold_only_among_runs_scored_on_the_same_questions(runs, tmp_path):
    """Three runs of HotpotQA over other questions (the first 3; 5 with one failed, so 4 scored)
    and TopiOCQA scored with em-f1 too: no two are over the same questions, nothing is bold; the
    notes say which runs share questions."""
    root, r = runs
    fewer = _run(tmp_path / "fewer", "tab-half", limit=3)
    register_script("tab-flaky", lambda messages, *_: _gold(messages)[1] if _gold(messages)[0] != 1 else 1 / 0)
    try:
        flaky = _run(tmp_path / "flaky", "tab-flaky")
    finally:
        unregister_script("tab-flaky")
    config = build_config(
        {"model": "scripted/tab-topi", "dataset": "topiocqa:dev", "out": str(tmp_path / "topi-em"), "limit": 4,
         "cache": False, "metrics": ["em-f1", "topiocqa"]}
    )  # fmt: skip
    asyncio.run(Run(config, show_progress=False).execute())
    table = build_table([r["half"], fewer, flaky, tmp_path / "topi-em"], ["em-f1.f1"])
    assert [row.n for row in table.rows] == [5, 3, 4, 4] and len({row.questions for row in table.rows}) == 4
    md = render(table_grid(table), "md")
    assert "**" not in md  # the flaky run's 1.000 over 4 questions was bold over 0.600 over 5
    assert "bold compares only runs scored on the same questions" in md
    # the same 5 questions: compared; the 3 of another selection stand apart
    rows = md_rows(render(table_grid(build_table([r["right"], r["half"], fewer])), "md"))
    assert [row[4].startswith("**") for row in rows[1:]] == [True, False, False]
    assert rows[3][4].startswith("0.667")  # better than half's 0.600, over other questions: not bold
    # a results.json without per-question scores: its selection and how many were answered
    from harness.analysis.table import question_set
    from harness.execution.record import read_results

    def without_raw(path):
        results = read_results(path)
        results.scores.raw = []
        return question_set(results)

    assert without_raw(r["right"]) == without_raw(r["half"]) != without_raw(fewer)
    assert without_raw(flaky).startswith("4 questions #") and without_raw(flaky) != without_raw(r["half"])


def test_a_column_where_every_run_agrees_has_no_bold(runs, tmp_path):
    root, r = runs
    twin = tmp_path / "twin"  # the same answers: every number equal, 0.000 EM on every row
    shutil.copytree(r["wrong"], twin)
    rows = md_rows(render(table_grid(build_table([r["wrong"], twin])), "md"))
    assert [row[4] for row in rows[1:]] == ["0.000 [0.000, 0.434]"] * 2  # no best where all agree
    assert "**" not in "".join(map("".join, rows))
    rows = md_rows(render(table_grid(build_table([r["right"], twin, r["wrong"]])), "md"))
    assert [row[4].startswith("**") for row in rows[1:]] == [True, False, False]  # a best among unequal values


def pdflatex(tex: str, tmp_path, name: str) -> tuple[str, float, float]:
    """Compile ``tex`` as the table float of an article page; the log, and the table's width in pt
    as typeset and at its own size (without the scaling to the line width), each measured in a box."""
    body = "\n".join(line for line in tex.splitlines() if not line.startswith("%"))
    lines = body.splitlines()
    assert lines[0].startswith("\\resizebox{") and lines[-1] == "\\end{tabular}}"
    natural = "\n".join([*lines[1:-1], "\\end{tabular}"])
    document = (
        "\\documentclass{article}\n\\usepackage{booktabs}\n\\usepackage{graphicx}\n\\newsavebox\\tb\n"
        "\\begin{document}\n\\begin{table}\n\\centering\n" + body + "\n\\end{table}\n"
        "\\sbox\\tb{" + body + "}\\typeout{TYPESET=\\the\\wd\\tb}\n"
        "\\sbox\\tb{" + natural + "}\\typeout{NATURAL=\\the\\wd\\tb}\n\\end{document}\n"
    )
    (tmp_path / f"{name}.tex").write_text(document)
    done = subprocess.run(
        ["pdflatex", "-interaction=nonstopmode", "-halt-on-error", f"{name}.tex"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    log = (tmp_path / f"{name}.log").read_text(errors="replace")
    assert done.returncode == 0, log[-2000:]
    typeset, natural_width = (float(re.search(rf"{k}=([0-9.]+)pt", log).group(1)) for k in ("TYPESET", "NATURAL"))
    return log, typeset, natural_width


@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="pdflatex absent (Debian: texlive-latex-base)")
def test_latex_tables_fit_an_article_page(runs, tmp_path):
    """One dataset (it overflowed an article page by 169 pt) and two (408 pt), compiled: no
    overfull line, scaled to the text width (345 pt); a table that fits keeps its own size. Two
    datasets print as a section each with its own columns, as wide as one dataset's table."""
    root, r = runs
    widths = {}
    for name, paths, metrics in (
        ("one", [r["right"], r["half"], r["broken"]], None),
        ("two", [r["right"], r["topi"], r["half"]], None),
        ("narrow", [r["half"]], ["em-f1.em"]),
    ):
        log, typeset, natural = pdflatex(render(table_grid(build_table(paths, metrics)), "latex"), tmp_path, name)
        assert "Overfull \\hbox" not in log, (name, re.findall(r"Overfull \\hbox \(([0-9.]+pt) too wide\)", log))
        assert typeset == pytest.approx(min(natural, 345.0), abs=0.01), name  # scaled down, never up
        widths[name] = natural
    # intervals on a second line: the scale a page needs is 345/455 (0.76; it was 345/514); two
    # datasets in sections 345/467 (0.74; 345/753 = 0.46 with a Dataset column and each other's
    # columns blank, 345/694 = 0.50 with intervals on a second line): only TopiOCQA's longer agent
    # name ("conversational") is wider
    assert widths["one"] > 345 and widths["narrow"] < 345
    assert widths["one"] < widths["two"] < widths["one"] + 20


def test_latex_of_two_datasets_has_a_section_each_with_its_columns(runs):
    """HotpotQA and TopiOCQA runs: the dataset a heading, not a column; each section's header only
    the numbers its runs have (short names where the section has one F1), no blank score cell; n
    and Failed under one another; markdown and CSV keep one table of every column."""
    root, r = runs
    tex = render(table_grid(build_table([r["right"], r["topi"], r["half"]])), "latex")
    lines = [line for line in tex.splitlines() if not line.startswith("%")]
    assert lines[1] == "\\begin{tabular}{lllrrrrr}"
    heads = [i for i, line in enumerate(lines) if line.startswith("\\multicolumn")]
    assert [lines[i] for i in heads] == [
        "\\multicolumn{8}{@{}l}{\\textit{hotpotqa:dev@distractor-first100}} \\\\",
        "\\multicolumn{8}{@{}l}{\\textit{topiocqa:dev@719c4548}} \\\\",
    ]
    assert lines[heads[0] + 1] == "Model & Setting & Agent & Context & EM & F1 & n & Failed \\\\"
    assert lines[heads[1] + 1] == "Model & Setting & Agent & Context & F1 &  & n & Failed \\\\"
    hotpot = lines[heads[0] + 3 : heads[0] + 5]  # its runs together, in the order given
    assert [row.split(" & ")[0] for row in hotpot] == ["tab\\_model\\%v1\\#2", "tab-half"]
    assert all(" &  & " not in row for row in hotpot)  # no other dataset's blank column
    topi = lines[heads[1] + 3].split(" & ")
    assert topi[4] == "\\begin{tabular}[t]{@{}r@{}}23.6\\\\ {[n/a]}\\end{tabular}" and topi[5:] == ["", "4", "0 \\\\"]
    assert [line for line in lines if line in ("\\toprule", "\\midrule", "\\bottomrule")] == [
        "\\toprule", "\\midrule", "\\midrule", "\\midrule", "\\bottomrule"
    ]  # fmt: skip
    assert md_rows(render(table_grid(build_table([r["right"], r["topi"]])), "md"))[0][0] == "Dataset"
