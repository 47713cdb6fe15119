"""harness figure ablation|scores (harness.analysis.figures): each figure checked by its data, the
spec and the matplotlib Figure drawn from it (panels, lines, labels, values, scales), never by pixels."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import matplotlib
import pytest

from harness.analysis.ablate import format_table, read_sweep
from harness.analysis.figures import RC, ablation_spec, draw, figure_svg, scores_spec
from harness.cli import main
from harness.errors import HarnessError
from harness.execution.record import RunResults, read_results

HOTPOT = ["em-f1.em", "em-f1.f1"]  # HotpotQA's headline (its loader's)


def sweep_row(size: int, em: float, f1: float, *, finished: int = 3, ceiling: float | None = 0.5) -> dict:
    """One row of ablation.json as harness ablate writes it."""
    metrics = {"em-f1.em": em, "em-f1.f1": f1, "fanoutqa-string.acc.loose": f1, "fanoutqa-string.acc.strict": em}
    return {
        "context_size": size,
        "run_dir": f"ctx-{size}",
        "run_id": f"r{size}",
        "status": "complete",
        "counts": {"selected": 3, "finished": finished, "failed": 3 - finished, "pending": 0},
        "metrics": metrics,
        "uncertainty": {
            k: {"stderr": 0.1, "ci95": [max(0.0, v - 0.2), min(1.0, v + 0.2)], "method": "wilson", "note": None}
            for k, v in metrics.items()
        },
        "step": None,
        "tokens": {"prompt": 1, "completion": 1, "total": 2},
        "cost_usd": None,
        "outcomes": {},
        "retrieval": None,
        "ceiling": None if ceiling is None else {"loose": ceiling, "strict": ceiling / 2},
        "failures": None,
    }


def write_ablation(folder: Path, model: str, rows: list[dict], *, new_fields: bool = True) -> Path:
    ablation = {
        "model": model,
        "setting": "evidence-provided",
        "agent": "evidence-provided",
        "dataset": "hotpotqa:dev@1.0",
        "n_samples": 3,
        "context_sizes": [r["context_size"] for r in rows],
        "metrics": list(rows[0]["metrics"]),
        "rows": rows,
        "ceiling_note": "evidence-provided packing",
        "ceiling": None,
        "config": {},
        "files": {"table": "ablation.md", "plot": "ablation.png"},
    }
    if new_fields:  # what ablate records since the figures (older files derive them)
        ablation |= {"dataset_name": "hotpotqa", "metric_names": ["fanoutqa-string", "em-f1"], "headline": HOTPOT}
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "ablation.json").write_text(json.dumps(ablation))
    return folder


@pytest.fixture
def two_sweeps(tmp_path):
    """A small model whose 4096 run answered nothing, and a larger one at two sizes."""
    a = write_ablation(
        tmp_path / "small",
        "local/smollm2",
        [sweep_row(1024, 0.2, 0.3), sweep_row(2048, 0.4, 0.5), sweep_row(4096, 0.0, 0.0, finished=0)],
    )
    b = write_ablation(
        tmp_path / "large",
        "openai/gpt-4o",
        [sweep_row(1024, 0.5, 0.6, ceiling=0.6), sweep_row(2048, 0.7, 0.8, ceiling=0.9)],
    )
    return a, b


def drawn(spec):
    with matplotlib.rc_context(RC):
        return draw(spec)


def series_lines(ax):
    return {line.get_label(): line for line in ax.get_lines() if not line.get_label().startswith("_")}


def same(xs, ys) -> bool:
    return all((math.isnan(x) and y is None) or x == pytest.approx(y) for x, y in zip(xs, ys, strict=True))


def test_ablation_figure_of_two_folders(two_sweeps):
    spec = ablation_spec([read_sweep(f) for f in two_sweeps])
    assert [p.key for p in spec.panels] == HOTPOT and [p.title for p in spec.panels] == ["EM", "F1"]
    em = spec.panels[0]
    assert em.positions == [1024, 2048, 4096] and em.position_labels == ["1k", "2k", "4k"] and em.log2
    assert em.value_lim == (-0.02, 1.02) and em.ceiling is None and spec.panels[1].ceiling is None  # not their measure
    small, large = em.lines
    assert (small.label, large.label) == ("local/smollm2", "openai/gpt-4o")
    # the size that answered nothing is a gap, not the 0.0 its row holds
    assert [p.y for p in small.points] == [0.2, 0.4, None]
    assert (small.points[0].lo, small.points[0].hi) == (0.0, pytest.approx(0.4))
    assert small.points[2].lo is None and "context size 4096 answered nothing" in spec.notes[0]
    # different ceilings (each model's tokenizer packs its own): one dashed line each, in its colour,
    # on the strict accuracy panel
    strict = ablation_spec([read_sweep(f) for f in two_sweeps], metrics=["fanoutqa-string.acc.strict"]).panels[0]
    assert strict.ceiling == "strict" and [line.color for line in strict.lines[:2]] == [small.color, large.color]
    assert [(c.label, c.color, [p.y for p in c.points]) for c in strict.lines[2:]] == [
        ("local/smollm2 (ceiling)", small.color, [0.25, 0.25, 0.25]),
        ("openai/gpt-4o (ceiling)", large.color, [0.3, 0.45]),
    ]
    lines = series_lines(drawn(spec.model_copy(update={"panels": [strict]})).get_axes()[0])
    assert list(lines) == ["local/smollm2", "openai/gpt-4o", "local/smollm2 (ceiling)", "openai/gpt-4o (ceiling)"]
    assert lines["local/smollm2 (ceiling)"].get_linestyle() == "--" and lines["local/smollm2"].get_linestyle() == "-"

    fig = drawn(spec)
    axes = fig.get_axes()
    assert [ax.get_title() for ax in axes] == ["EM", "F1"] and [ax.get_ylabel() for ax in axes] == ["EM", "F1"]
    lines = series_lines(axes[0])
    assert list(lines) == ["local/smollm2", "openai/gpt-4o"]
    assert same(lines["local/smollm2"].get_ydata(), [0.2, 0.4, None])
    assert same(series_lines(axes[1])["openai/gpt-4o"].get_ydata(), [0.6, 0.8])
    assert axes[0].get_ylim() == pytest.approx((-0.02, 1.02)) and axes[0].get_xscale() == "log"
    assert [t.get_text() for t in axes[0].get_xticklabels()] == ["1k", "2k", "4k"]
    assert len(axes[0].collections) == 2  # an interval band per model
    assert [t.get_text() for t in fig.legends[0].get_texts()] == list(lines)


def test_a_shared_ceiling_is_one_black_line_and_the_metric_keeps_its_scale(tmp_path):
    sweeps = []
    for name in ("react", "ircot"):
        rows = [sweep_row(1024, 0.2, 0.3), sweep_row(2048, 0.4, 0.5)] + (
            [sweep_row(4096, 0.4, 0.5)] if name == "ircot" else []
        )
        for r in rows:  # TopiOCQA's F1 is on 0-100
            r["metrics"]["topiocqa.f1"] = r["metrics"]["em-f1.f1"] * 100
        folder = write_ablation(tmp_path / name, "local/smollm2", rows)
        data = json.loads((folder / "ablation.json").read_text())
        data["agent"], data["metrics"] = name, list(rows[0]["metrics"])
        (folder / "ablation.json").write_text(json.dumps(data))
        sweeps.append(read_sweep(folder))
    spec = ablation_spec(sweeps, metrics=["topiocqa.f1", "fanoutqa-string.acc.loose"])
    f1, accuracy = spec.panels
    assert f1.value_lim == (-2.0, 102.0) and f1.title == "F1" and f1.ceiling is None  # 0-100, no ceiling
    # the same model, two agents: the agent names the line; one ceiling (they agree where both
    # have a size) over every size
    assert [line.label for line in f1.lines] == ["local/smollm2, react", "local/smollm2, ircot"]
    assert [line.label for line in accuracy.lines] == [
        "local/smollm2, react",
        "local/smollm2, ircot",
        "Answerability ceiling",
    ]
    ceiling = accuracy.lines[-1]
    assert ceiling.color == "black" and [(p.x, p.y) for p in ceiling.points] == [
        (1024, 0.5),
        (2048, 0.5),
        (4096, 0.5),
    ]
    f1_ax, accuracy_ax = drawn(spec).get_axes()
    assert f1_ax.get_ylim() == pytest.approx((-2.0, 102.0))
    assert same(series_lines(f1_ax)["local/smollm2, react"].get_ydata(), [30.0, 50.0])
    assert series_lines(accuracy_ax)["Answerability ceiling"].get_linestyle() == "--"


def test_metric_choice_labels_and_older_files(tmp_path, two_sweeps):
    sweeps = [read_sweep(f) for f in two_sweeps]
    by_name = ablation_spec(sweeps, metrics=["fanoutqa-string"])  # a metric name: its headline
    assert [p.key for p in by_name.panels] == ["fanoutqa-string.acc.loose"] and by_name.panels[
        0
    ].title == "Accuracy (loose)"
    full = ablation_spec(sweeps, metrics=["fanoutqa-string.acc.strict", "em-f1.em", "acc.loose", "em"])
    assert [p.title for p in full.panels] == ["Accuracy (strict)", "EM", "Accuracy (loose)"]
    with pytest.raises(HarnessError, match=r"^--metric rouge: not a metric of these runs \(available: em-f1.em, "):
        ablation_spec(sweeps, metrics=["rouge"])
    with pytest.raises(HarnessError, match="--label given 1 times for 2 inputs"):
        ablation_spec(sweeps, labels=["only one"])
    assert [line.label for line in ablation_spec(sweeps, labels=["A", "B"]).panels[0].lines[:2]] == ["A", "B"]

    # an ablation.json from before the figures (no headline recorded), twice the same model
    old = [
        write_ablation(tmp_path / n, "local/smollm2", [sweep_row(1024, 0.2, 0.3)], new_fields=False) for n in ("x", "y")
    ]
    spec = ablation_spec([read_sweep(old[0]), read_sweep(old[1] / "ablation.json")])
    assert [p.key for p in spec.panels] == HOTPOT and spec.panels[0].log2 is False
    assert [line.label for line in spec.panels[0].lines[:2]] == ["local/smollm2 (x)", "local/smollm2 (y)"]


def test_ablation_table_is_the_headline_with_display_names(two_sweeps):
    ablation = json.loads((two_sweeps[0] / "ablation.json").read_text())
    lines = [line for line in format_table(ablation).splitlines() if line.startswith("|")]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    assert head == [
        "context size", "EM", "F1", "ceiling (loose)", "ceiling (strict)", "n", "failed", "no answer",
        "change from the previous size (* significant at 0.05, Holm over the step's numbers)",
    ]  # fmt: skip
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in lines[2:]]
    assert rows[0][:7] == ["1024", "0.2000 ± 0.1000", "0.3000 ± 0.1000", "0.5000", "0.2500", "3", "0"]
    assert rows[2][:7] == ["4096", "n/a (failed)", "n/a (failed)", "0.5000", "0.2500", "0", "3"]  # never 0.0000


def write_run(
    folder: Path, model: str, em: float | None, *, finished: int = 3, setting: str = "closed-book", space: str | None = None
) -> Path:
    aggregate = {"em": em, "f1": None if em is None else em + 0.1}
    uncertainty = {
        f"em-f1.{k}": {"stderr": 0.1, "ci95": [v - 0.1, v + 0.1], "method": "wilson"}
        for k, v in aggregate.items()
        if v is not None
    }
    results = RunResults.model_validate(
        {
            "run_id": folder.name,
            "config_hash": folder.name,
            "status": "complete",
            "dataset": {"name": "hotpotqa", "spec": "hotpotqa:dev@1.0", "n_total": 3, "n_selected": 3},
            "setting": setting,
            "config": {"dataset": "hotpotqa:dev", "model": model},
            "counts": {"selected": 3, "finished": finished, "failed": 3 - finished, "pending": 0},
            "scores": {
                "results_format": 3,
                "em-f1": aggregate,
                "uncertainty": uncertainty,
                "meta": {"metrics": ["em-f1"]},
            },
            **({"search_space": {"label": space, "evidence_only": space.startswith("evidence")}} if space else {}),
        }
    )
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "results.json").write_text(json.dumps(results.to_json()))
    return folder


@pytest.fixture
def three_runs(tmp_path):
    return [
        write_run(tmp_path / "a", "local/smollm2", 0.3),
        write_run(tmp_path / "b", "openai/gpt-4o", 0.6, setting="open-book"),
        write_run(tmp_path / "c", "openai/gpt-4o", 0.0, finished=0),  # every question failed
    ]


def test_scores_figure_marks_a_failed_run(three_runs):
    spec = scores_spec([(str(p), read_results(p)) for p in three_runs])
    assert [p.key for p in spec.panels] == HOTPOT and not spec.legend
    em = spec.panels[0]
    assert em.horizontal and em.value_label == "EM (0–1)" and em.value_lim == (-0.02, 1.02)
    labels = ["local/smollm2, closed-book", "openai/gpt-4o, open-book", "openai/gpt-4o, closed-book (failed)"]
    assert em.position_labels == labels
    points = em.lines[0].points
    assert [p.y for p in points] == [0.3, 0.6, None] and points[2].note == "failed"  # not its stored 0.0
    assert (points[0].lo, points[0].hi) == (pytest.approx(0.2), pytest.approx(0.4))

    fig = drawn(spec)
    axes = fig.get_axes()
    assert [ax.get_title() for ax in axes] == ["EM", "F1"] and axes[0].get_xlim() == pytest.approx((-0.02, 1.02))
    assert [t.get_text() for t in axes[0].get_yticklabels()] == labels
    assert [t.get_text() for t in axes[1].get_yticklabels()] == ["", "", ""]  # the names once, on the left
    dots = [line for line in axes[0].get_lines() if line.get_marker() == "o"]
    assert [(list(d.get_xdata()), list(d.get_ydata())) for d in dots] == [([0.3], [0]), ([0.6], [1])]
    assert [t.get_text().strip() for t in axes[0].texts] == ["failed"]


def test_a_missing_value_is_n_a_not_zero(tmp_path):
    runs = [write_run(tmp_path / "a", "m1", 0.5), write_run(tmp_path / "b", "m2", None)]
    spec = scores_spec([(str(p), read_results(p)) for p in runs], metrics=["em-f1.em"])
    assert [(p.y, p.note) for p in spec.panels[0].lines[0].points] == [(0.5, None), (None, "n/a")]
    assert spec.panels[0].position_labels == ["m1", "m2"]
    alike = [write_run(tmp_path / name, "m", 0.5) for name in ("x", "y")]  # named by their folders
    spec = scores_spec([(str(p / "results.json"), read_results(p)) for p in alike])
    assert spec.panels[0].position_labels == ["m (x)", "m (y)"]


def test_the_search_space_is_said_where_the_scores_are(tmp_path):
    tiny = "evidence-only: hotpotqa:dev contexts, 991 pages (gold 19%)"
    whole = "whole source: records synth.jsonl, 100,991 pages (gold 0.19%)"
    runs = [write_run(tmp_path / "a", "m", 0.3, setting="open-book", space=tiny)]
    runs.append(write_run(tmp_path / "b", "m", 0.2, setting="open-book", space=whole))
    spec = scores_spec([(str(p), read_results(p)) for p in runs])
    # the spaces differ: each row says its own, and no caption claims one for all
    assert spec.panels[0].position_labels == [f"m, searched {tiny}", f"m, searched {whole}"] and spec.caption is None
    spec = scores_spec([(str(runs[0]), read_results(runs[0]))])
    assert spec.caption == f"search space: {tiny}"  # one space: said once, above the panels
    assert drawn(spec)._suptitle.get_text() == f"search space: {tiny}"
    closed = write_run(tmp_path / "c", "m2", 0.1)  # a run that searched nothing beside one that did
    spec = scores_spec([(str(p), read_results(p)) for p in (runs[0], closed)])
    assert spec.caption is None and spec.panels[0].position_labels[0].endswith(tiny)


def test_inline_svg_names_no_url_and_escapes_labels(three_runs):
    spec = scores_spec(
        [(str(three_runs[0]), read_results(three_runs[0]))], labels=['<script>alert(1)</script> $x$ & "q"']
    )
    svg = figure_svg(spec)
    assert svg.startswith("<svg ") and "<?xml" not in svg and "<!DOCTYPE" not in svg
    assert not re.search(r"https?://", svg) and "<script" not in svg and "<image" not in svg
    assert "&lt;script&gt;alert(1)&lt;/script&gt; $x$ &amp;" in svg  # text as text, no mathtext
    assert svg == figure_svg(spec)  # reproducible: no date, fixed ids


def test_figure_command_formats_and_errors(two_sweeps, three_runs, tmp_path, capsys):
    magic = {"png": b"\x89PNG", "pdf": b"%PDF", "svg": b"<?xml"}
    for fmt, head in magic.items():
        out = tmp_path / f"fig.{fmt}"
        assert main(["figure", "ablation", *map(str, two_sweeps), "--metric", "em-f1.f1", "--out", str(out)]) == 0
        assert out.read_bytes().startswith(head)
    assert "wrote" in capsys.readouterr().err
    out = tmp_path / "scores.svg"
    assert main(["figure", "scores", *map(str, three_runs), "--out", str(out)]) == 0
    assert "openai/gpt-4o, closed-book (failed)" in out.read_text()
    assert not list(tmp_path.glob(".*.tmp"))  # written whole: no temp file left
    capsys.readouterr()
    cases = [
        (["ablation", str(two_sweeps[0]), "--out", str(tmp_path / "f.jpg")], "error: --out "),
        (["ablation", str(tmp_path), "--out", str(tmp_path / "f.png")], f"error: {tmp_path}: not an ablation folder"),
        (
            ["ablation", str(two_sweeps[0]), "--metric", "nope", "--out", str(tmp_path / "f.png")],
            "error: --metric nope: ",
        ),
        (["scores", str(tmp_path), "--out", str(tmp_path / "f.png")], f"error: {tmp_path}: not a run directory"),
    ]
    for argv, message in cases:
        assert main(["figure", *argv]) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(message), (argv, err)
    assert not (tmp_path / "f.png").exists() and not (tmp_path / "f.jpg").exists()


def test_the_report_draws_the_run_s_scores_inline(three_runs):
    from harness.analysis.report import _figure_section

    section = _figure_section(read_results(three_runs[0]))
    assert section.startswith('<section id="figures">') and "<svg " in section and ">EM</text>" in section
    assert not re.search(r"https?://", section)
    assert "(failed)" in _figure_section(read_results(three_runs[2]))


def test_the_ceiling_is_drawn_only_against_the_measure_it_is(tmp_path):
    """The answerability ceiling is FanOutQA's string accuracy of the packed documents: it is drawn
    on the accuracy panels (loose against loose, strict against strict) and on no other, since
    F1, EM, ROUGE and TopiOCQA's F1 match differently. The issue's sweep: F1 0.083 at 1k where not
    one answer item was packed (ceiling 0.000)."""
    rows = [sweep_row(1024, 0.0, 0.083, ceiling=0.0), sweep_row(2048, 0.2, 0.4, ceiling=0.5)]
    for r in rows:
        r["metrics"]["fanoutqa-string.rouge.rouge1.fscore"] = r["metrics"]["em-f1.f1"]
        r["metrics"]["topiocqa.f1"] = r["metrics"]["em-f1.f1"] * 100
    sweep = read_sweep(write_ablation(tmp_path / "one", "local/smollm2", rows))
    keys = ["fanoutqa-string.acc.loose", "fanoutqa-string.acc.strict", "em-f1.f1", "em-f1.em"]
    keys += ["fanoutqa-string.rouge.rouge1.fscore", "topiocqa.f1"]
    spec = ablation_spec([sweep], metrics=keys)
    by_key = {p.key: p for p in spec.panels}
    assert [by_key[k].ceiling for k in keys] == ["loose", "strict", None, None, None, None]
    for key in keys[2:]:
        assert [line.role for line in by_key[key].lines] == ["series"], key
    loose = by_key["fanoutqa-string.acc.loose"].lines[-1]
    assert loose.role == "ceiling" and [(p.x, p.y) for p in loose.points] == [(1024, 0.0), (2048, 0.5)]
    assert [p.y for p in by_key["fanoutqa-string.acc.strict"].lines[-1].points] == [0.0, 0.25]
    axes = drawn(spec).get_axes()
    assert [list(series_lines(ax)) for ax in axes[2:]] == [["local/smollm2"]] * 4  # no dashed line, no legend entry
