"""Figures for papers: a context-length ablation (one or several sweeps, a line each), runs'
scores (a dot with its 95% interval per run), one panel per metric, and runs' effort curves
(accuracy against searches, tokens, model calls or cost per question, a line per run).

A figure is built in two steps: its data as a typed ``FigureSpec`` (panels -> lines -> points, the
labels, the ceiling, the value axis from the metric's scale), then the drawing of that spec with
matplotlib. Tests read both; nothing is checked by its pixels. Names, scales and headline metrics
come from ``harness.scoring.display``. A value that does not exist (a run that answered nothing,
a metric with no value) is ``None`` in the spec: a gap in a line or an absent dot, never 0.
"""

from __future__ import annotations

import io
import math
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from harness.analysis.ceiling import ceiling_of
from harness.errors import HarnessError
from harness.execution.record import RunResults, metric_names_of
from harness.records import write_bytes_atomic
from harness.scoring.display import chosen_keys, dataset_headline, display_name, scale_of
from harness.text import plain_value, replaced_warning

FORMATS = {".png": "png", ".svg": "svg", ".pdf": "pdf"}
PNG_DPI = 150
PANEL_IN = (4.2, 3.2)  # one ablation panel, inches
MAX_COLUMNS = 3
# matplotlib settings for every figure: labels are text, never mathtext (a model named "a$b" stays
# as written); SVG text stays text (no glyph paths) and its ids are reproducible
RC = {"text.parse_math": False, "svg.fonttype": "none", "svg.hashsalt": "harness-figure", "font.size": 9}


# --------------------------------------------------------------------------- the spec
class Point(BaseModel):
    x: float  # its position: a context size, or a run's row
    y: float | None  # the value; None: no value (a gap, or no dot), never 0
    lo: float | None = None  # the 95% interval, where there is one
    hi: float | None = None
    note: str | None = None  # why there is no value: "failed" (nothing answered), "n/a"
    n: int | None = None  # the questions behind it (an effort bin)


class Line(BaseModel):
    label: str
    role: Literal["series", "ceiling"]
    color: str
    source: str | None = None  # the folder or run it was read from (None: a ceiling several share)
    points: list[Point]


class Panel(BaseModel):
    key: str  # the metric key (fanoutqa-string.acc.loose)
    title: str  # its display name
    scale: float | None  # a perfect score (1 or 100); None: unbounded
    value_label: str
    value_lim: tuple[float, float] | None  # from the scale; None: matplotlib's own
    position_label: str
    positions: list[float]
    position_labels: list[str]
    log2: bool = False  # context sizes: a doubling per step
    horizontal: bool = False  # scores: values along x, one row per run
    ceiling: Literal["loose", "strict"] | None = None  # which ceiling the dashed lines are
    lines: list[Line]


class FigureSpec(BaseModel):
    kind: Literal["ablation", "scores", "effort"]
    panels: list[Panel]
    legend: bool
    notes: list[str] = []  # what is not drawn and why (a run that failed)
    caption: str | None = None  # a condition every value shares (the search space), drawn above the panels


class SweepPoint(BaseModel):
    """One context size of an ablation."""

    context_size: int
    values: dict[str, float | None]
    intervals: dict[str, tuple[float, float]] = {}
    ceiling: dict[str, float | None] | None = None  # {"loose", "strict"}: shares of the answer present
    answered: int | None = None  # questions answered; 0: the run failed and has no value


class Sweep(BaseModel):
    """One ablation folder, as a figure reads it (``harness.analysis.ablate.read_sweep``)."""

    source: str
    model: str | None = None
    agent: str | None = None
    setting: str | None = None
    dataset: str | None = None
    headline: list[str]
    keys: list[str]  # every metric key of any size
    points: list[SweepPoint]


# --------------------------------------------------------------------------- choices
def value_limits(scale: float | None) -> tuple[float, float] | None:
    """The whole scale with a 2% margin, so a line at 0 or at the top stays visible."""
    return None if scale is None else (-0.02 * scale, 1.02 * scale)


def choose_keys(requested: list[str] | None, available: list[str], headlines: list[list[str]]) -> list[str]:
    """The panels' metric keys: each ``--metric`` as a full key, a metric name (its headline
    keys) or a key's end (``acc.strict``); without any, the sources' headline keys. An unknown one is a one-line error naming
    what there is."""
    if not requested:
        keys = list(dict.fromkeys(k for h in headlines for k in h))
        if not keys:
            raise HarnessError(f"no headline metric to draw; choose one with --metric ({_listing(available)})")
        return keys
    return chosen_keys(requested, available)


def _listing(available: list[str]) -> str:
    return "available: " + (", ".join(available) if available else "none")


def labels_for(parts: list[list[tuple[str, Any]]], sources: list[str], given: list[str] | None) -> list[str]:
    """One label per source: its first part (the model), then each other part that differs
    between sources; sources still alike get their folder's name. ``given`` (``--label``) wins."""
    if given:
        if len(given) != len(sources):
            raise HarnessError(
                f"--label given {len(given)} times for {len(sources)} inputs: give one per input, in order"
            )
        return list(given)
    labels = []
    for own in parts:
        shown = [str(own[0][1])]
        for i, (name, value) in enumerate(own[1:], 1):
            if value is not None and len({str(p[i][1]) for p in parts}) > 1:
                shown.append(f"{name} {value}" if name else str(value))
        labels.append(", ".join(shown))
    for label in set(labels):
        alike = [i for i, other in enumerate(labels) if other == label]
        if len(alike) > 1:
            for i in alike:
                labels[i] = f"{label} ({_folder_name(sources[i])})"
    seen: dict[str, int] = {}
    for i, label in enumerate(labels):  # the same folder name twice: numbered
        seen[label] = seen.get(label, 0) + 1
        if seen[label] > 1:
            labels[i] = f"{label} #{seen[label]}"
    return labels


def _folder_name(source: str) -> str:
    path = Path(source)
    return (path.parent if path.suffix == ".json" else path).resolve().name or source


def short_size(size: float) -> str:
    """2048 -> 2k, 131072 -> 128k (k = 1024, as context windows are named), 1500 -> 1500."""
    size = int(size)
    return f"{size // 1024}k" if size >= 1024 and size % 1024 == 0 else str(size)


# --------------------------------------------------------------------------- ablation
def ablation_spec(sweeps: list[Sweep], metrics: list[str] | None = None, labels: list[str] | None = None) -> FigureSpec:
    """One panel per metric (default: the sweeps' headline), one line per sweep with its interval
    band, the answerability ceiling dashed (one black line where the sweeps share it) on the panels
    of the metric it bounds (``harness.analysis.ceiling.BOUNDS``: FanOutQA's accuracy) and no other."""
    if not sweeps:
        raise HarnessError("no ablation to draw")
    available = list(dict.fromkeys(k for s in sweeps for k in [*s.keys, *s.headline]))
    keys = choose_keys(metrics, available, [s.headline for s in sweeps])
    names = labels_for(
        [[("", s.model), ("", s.agent), ("", s.setting), ("", s.dataset)] for s in sweeps],
        [s.source for s in sweeps],
        labels,
    )
    positions = sorted({p.context_size for s in sweeps for p in s.points})
    panels = []
    for key in keys:
        scale = scale_of(key)
        lines = []
        for i, (sweep, name) in enumerate(zip(sweeps, names)):
            points = []
            for p in sweep.points:
                value = p.values.get(key) if p.answered != 0 else None  # nothing answered: no value
                interval = p.intervals.get(key) if value is not None else None
                points.append(
                    Point(
                        x=p.context_size,
                        y=value,
                        lo=interval[0] if interval else None,
                        hi=interval[1] if interval else None,
                    )
                )
            lines.append(Line(label=name, role="series", color=f"C{i % 10}", source=sweep.source, points=points))
        ceilings = _ceilings(sweeps, names, key, scale)
        panels.append(
            Panel(
                key=key,
                title=display_name(key),
                scale=scale,
                value_label=display_name(key),
                value_lim=value_limits(scale),
                position_label="Context size (tokens; k = 1024)",
                positions=positions,
                position_labels=[short_size(x) for x in positions],
                log2=len(positions) > 1,
                ceiling=ceiling_of(key) if ceilings else None,
                lines=lines + ceilings,
            )
        )
    notes = [
        f"{name}: context size {p.context_size} answered nothing: no value drawn"
        for s, name in zip(sweeps, names)
        for p in s.points
        if p.answered == 0
    ]
    return FigureSpec(kind="ablation", panels=panels, legend=True, notes=notes)


def _ceilings(sweeps: list[Sweep], names: list[str], key: str, scale: float | None) -> list[Line]:
    kind = ceiling_of(key)
    if kind is None or scale is None:  # the ceiling is not this metric's measure: drawn there, it would mislead
        return []
    series = []
    for i, sweep in enumerate(sweeps):
        values = {
            p.context_size: p.ceiling[kind] * scale
            for p in sweep.points
            if p.ceiling and p.ceiling.get(kind) is not None
        }
        if values:
            series.append((i, values))
    if not series:
        return []
    merged: dict[int, float] = {}
    for _, values in series:
        for size, value in values.items():
            merged.setdefault(size, value)
    if len(series) == len(sweeps) and all(
        math.isclose(merged[s], v) for _, values in series for s, v in values.items()
    ):
        # the same packing (the same tokenizer and knobs): one line over every size
        points = [Point(x=size, y=merged[size]) for size in sorted(merged)]
        return [Line(label="Answerability ceiling", role="ceiling", color="black", points=points)]
    return [
        Line(
            label=f"{names[i]} (ceiling)",
            role="ceiling",
            color=f"C{i % 10}",
            source=sweeps[i].source,
            points=[Point(x=size, y=values[size]) for size in sorted(values)],
        )
        for i, values in series
    ]


# --------------------------------------------------------------------------- scores
def scores_spec(
    runs: list[tuple[str, RunResults]], metrics: list[str] | None = None, labels: list[str] | None = None
) -> FigureSpec:
    """One panel per metric (default: each run's dataset headline), one row per run: its value
    with its 95% interval. A run that answered nothing is marked failed, with no dot."""
    if not runs:
        raise HarnessError("no run to draw")
    values = [r.scores.score_values() if r.scores is not None else {} for _, r in runs]
    headlines = [dataset_headline(r.dataset.name, metric_names_of(r.scores)) for _, r in runs]
    available = list(dict.fromkeys(k for v, h in zip(values, headlines) for k in [*v, *h]))
    keys = choose_keys(metrics, available, headlines)
    names = labels_for(
        [
            [
                ("", r.config.model),
                ("", r.setting),
                ("", r.agent_name),
                ("", r.dataset.spec),
                ("context", r.context_size),
                ("searched", r.search_space_label),  # shown on each row where the runs' spaces differ
            ]
            for _, r in runs
        ],
        [source for source, _ in runs],
        labels,
    )
    failed = [r.counts.finished == 0 for _, r in runs]
    panels = []
    for key in keys:
        scale = scale_of(key)
        points, ticks = [], []
        for row, ((_, results), name, vals, dead) in enumerate(zip(runs, names, values, failed)):
            value = None if dead else vals.get(key)
            found = results.scores.interval(key) if value is not None and results.scores is not None else None
            interval = found.ci95 if found is not None else None
            note = "failed" if dead else "n/a" if value is None else None
            points.append(
                Point(
                    x=row,
                    y=value,
                    lo=interval[0] if interval else None,
                    hi=interval[1] if interval else None,
                    note=note,
                )
            )
            ticks.append(f"{name} (failed)" if dead else name)
        panels.append(
            Panel(
                key=key,
                title=display_name(key),
                scale=scale,
                value_label=display_name(key) + ("" if scale is None else f" (0–{scale:g})"),
                value_lim=value_limits(scale),
                position_label="",
                positions=list(range(len(runs))),
                position_labels=ticks,
                horizontal=True,
                lines=[Line(label="score (95% interval)", role="series", color="C0", points=points)],
            )
        )
    notes = [f"{name}: answered nothing (failed): no value drawn" for name, dead in zip(names, failed) if dead]
    spaces = {r.search_space_label for _, r in runs}
    # one space for every run: said once, above the panels (a row label shows it only where they differ)
    caption = f"search space: {next(iter(spaces))}" if len(spaces) == 1 and None not in spaces else None
    return FigureSpec(kind="scores", panels=panels, legend=False, notes=notes, caption=caption)


# --------------------------------------------------------------------------- effort
# what a question spent, as read from its sample row (harness.scoring.agent_metrics reads the same)
EFFORT_AXES = {
    "searches": "Searches per question",
    "tokens": "Tokens per question",
    "model_calls": "Model calls per question",
    "cost": "Cost per question (USD)",
}


def effort_of_rows(rows: Any) -> dict[str, dict[str, float | None]]:
    """{question id: {axis: what it spent}} from a run's finished sample rows (``SampleRow``s or
    their dicts), the mean over its epochs; an axis a row does not record (no search tool, no price)
    is None for that question."""
    spent: dict[str, dict[str, list[float | None]]] = {}
    for row in rows:
        r = row if isinstance(row, dict) else row.model_dump()
        extra = r.get("extra") if isinstance(r.get("extra"), dict) else {}
        usage = r.get("usage") if isinstance(r.get("usage"), dict) else {}
        values = {
            "searches": float(len(extra["searches"])) if isinstance(extra.get("searches"), list) else None,
            "tokens": float((usage.get("prompt_tokens") or 0) + (usage.get("completion_tokens") or 0)),
            "model_calls": float((r.get("model_calls") or 0) + (r.get("cache_hits") or 0)),
            "cost": None if r.get("cost_usd") is None else float(r["cost_usd"]),
        }
        own = spent.setdefault(r["id"], {axis: [] for axis in EFFORT_AXES})
        for axis, value in values.items():
            own[axis].append(value)
    return {
        qid: {a: (None if not v or None in v else sum(v) / len(v)) for a, v in axes.items()}  # type: ignore[arg-type]
        for qid, axes in spent.items()
    }


def effort_bin(x: float) -> int:
    """The bin of an effort: 0 alone, then doublings (1, 2-3, 4-7, ... for counts; the same powers of
    two for tokens and USD), so a handful of searches and a million tokens both spread out."""
    return 0 if x <= 0 else math.floor(math.log2(x)) + 1_000  # 1_000: every positive bin after 0's


def _per_question(results: RunResults, key: str) -> tuple[dict[str, float], Any, float]:
    """({question id: its value of ``key``, on the number's scale}, the kind, its factor): the
    per-question values a mean number is the mean of (``declared_sources``); a number that is no
    such mean (corpus BLEU, a ratio) is a one-line error."""
    from harness.scoring.display import kind_of, metric_of
    from harness.scoring.kinds import key_path
    from harness.scoring.uncertainty import declared_sources, leaf, plan_leaf

    scores = results.scores
    name, _, rest = key.partition(".")
    aggregate = scores.aggregate(name) if scores is not None else None
    if not isinstance(aggregate, dict):
        raise HarnessError(f"--metric {key}: not scored in run {results.run_id}")
    path = key_path(rest)
    metric = metric_of(name)
    kind = metric.kind_of(path) if metric is not None else kind_of(key)
    rows = scores.metric_rows(name)  # {question id: its values of this metric}
    plan = plan_leaf(path, leaf(aggregate, path), list(rows.values()), declared_sources(metric, aggregate), kind)
    if not plan or plan["kind"] != "mean":
        raise HarnessError(f"--metric {key}: not a mean of per-question values, so it has no value per question to bin")
    values = {}
    for qid, row in rows.items():
        value = leaf(row, plan["source"])
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            values[qid] = float(value)
    return values, kind, plan["scale"]


def effort_spec(
    runs: list[tuple[str, RunResults, dict[str, dict[str, float | None]]]],
    metrics: list[str] | None = None,
    axes: list[str] | None = None,
    labels: list[str] | None = None,
) -> FigureSpec:
    """One panel per (metric, effort axis): each run a line of its questions binned by what they spent
    (``effort_bin``), a point per bin at the bin's mean effort and the questions' mean value, with
    its 95% interval as the metric's kind asks (Wilson for a share, else the normal interval); the
    questions a point stands for are its ``n``. ``runs``: (source, results, ``effort_of_rows``).
    Default axes: searches and tokens; default metric: the dataset headline."""
    from harness.scoring.scores import Interval
    from harness.scoring.uncertainty import leaf_interval

    if not runs:
        raise HarnessError("no run to draw")
    axes = list(dict.fromkeys(axes or ["searches", "tokens"]))
    unknown = [a for a in axes if a not in EFFORT_AXES]
    if unknown:
        raise HarnessError(f"--x {unknown[0]}: not an effort axis (axes: {', '.join(EFFORT_AXES)})")
    values = [r.scores.score_values() if r.scores is not None else {} for _, r, _ in runs]
    headlines = [dataset_headline(r.dataset.name, metric_names_of(r.scores)) for _, r, _ in runs]
    available = list(dict.fromkeys(k for v, h in zip(values, headlines) for k in [*v, *h]))
    keys = choose_keys(metrics, available, headlines)
    names = labels_for(
        [[("", r.config.model), ("", r.setting), ("", r.agent_name), ("", r.dataset.spec), ("context", r.context_size),
          ("searched", r.search_space_label)] for _, r, _ in runs],  # fmt: skip
        [source for source, _, _ in runs],
        labels,
    )
    notes: list[str] = []
    panels = []
    for key in keys:
        scale = scale_of(key)
        per_run = [
            None if results.counts.finished == 0 or key not in own else _per_question(results, key)
            for (_, results, _), own in zip(runs, values)
        ]
        for axis in axes:
            lines = []
            for i, ((_, results, spent), name, found) in enumerate(zip(runs, names, per_run)):
                if found is None:
                    notes.append(f"{name}: no {display_name(key)} (failed or not scored): no line")
                    continue
                by_question, kind, times = found
                bins: dict[int, list[tuple[float, float]]] = {}
                missing = 0
                for qid, value in by_question.items():
                    x = (spent.get(qid) or {}).get(axis)
                    if x is None:
                        missing += 1
                        continue
                    bins.setdefault(effort_bin(x), []).append((x, value))
                if not bins:
                    notes.append(f"{name}: records no {axis} per question: no line on the {axis} panel")
                    continue
                if missing:
                    notes.append(f"{name}: {missing} question(s) without a {axis} record left out of the {axis} panel")
                points = []
                for b in sorted(bins):
                    xs, ys = zip(*bins[b])
                    interval = Interval.model_validate(leaf_interval(kind, list(ys), None, times)).ci95
                    points.append(
                        Point(
                            x=sum(xs) / len(xs),
                            y=times * sum(ys) / len(ys),
                            lo=interval[0] if interval else None,
                            hi=interval[1] if interval else None,
                            n=len(ys),
                        )
                    )
                lines.append(Line(label=name, role="series", color=f"C{i % 10}", source=runs[i][0], points=points))
            xs = [p.x for line in lines for p in line.points]
            panels.append(
                Panel(
                    key=key,
                    title=f"{display_name(key)} by {axis.replace('_', ' ')}",
                    scale=scale,
                    value_label=display_name(key) + ("" if scale is None else f" (0–{scale:g})"),
                    value_lim=value_limits(scale),
                    position_label=EFFORT_AXES[axis],
                    positions=[],
                    position_labels=[],
                    log2=bool(xs) and min(xs) > 0 and axis in ("tokens", "cost"),
                    lines=lines,
                )
            )
    caption = "questions binned by effort (0, then doublings), each point at its bin's mean; bands: 95% intervals"
    return FigureSpec(kind="effort", panels=panels, legend=True, notes=list(dict.fromkeys(notes)), caption=caption)


# --------------------------------------------------------------------------- drawing
def _grid(n: int) -> tuple[int, int]:
    cols = min(n, MAX_COLUMNS)
    return (n + cols - 1) // cols, cols


def figure_size(spec: FigureSpec) -> tuple[float, float]:
    rows, cols = _grid(max(1, len(spec.panels)))
    if spec.kind == "scores":
        n_runs = max((len(p.positions) for p in spec.panels), default=1)
        longest = max((len(t) for p in spec.panels for t in p.position_labels), default=10)
        width = cols * 3.2 + min(4.0, 0.07 * longest)
        return width, rows * (1.0 + 0.32 * n_runs)
    legend = 0.25 * (1 + len({line.label for p in spec.panels for line in p.lines}) // 2) if spec.legend else 0.0
    return cols * PANEL_IN[0], rows * PANEL_IN[1] + legend


def draw(spec: FigureSpec):
    """The spec drawn on a matplotlib ``Figure`` (no pyplot, no display). Call it inside
    ``matplotlib.rc_context(RC)`` for the labels to stay plain text (``save`` and ``figure_svg`` do)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=figure_size(spec), layout="constrained")
    rows, cols = _grid(max(1, len(spec.panels)))
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax in axes[len(spec.panels) :]:
        ax.remove()
    if spec.caption:
        fig.suptitle(spec.caption, fontsize="small")

    def nan(v: float | None) -> float:
        return math.nan if v is None else v

    for index, (ax, panel) in enumerate(zip(axes, spec.panels)):
        drawn = False
        for line in panel.lines:
            xs = [p.x for p in line.points]
            ys = [nan(p.y) for p in line.points]
            drawn = drawn or any(p.y is not None for p in line.points)
            if line.role == "ceiling":
                ax.plot(xs, ys, linestyle="--", color=line.color, linewidth=1.2, label=line.label)
                continue
            if panel.horizontal:  # a dot per run, its interval as an error bar
                for p in line.points:
                    if p.y is None:  # said in the row, where the dot would be
                        x0 = panel.value_lim[0] if panel.value_lim else 0.0
                        ax.text(
                            x0, p.x, f" {p.note or 'n/a'}", va="center", ha="left", color="dimgray", fontsize="small"
                        )
                        continue
                    err = [[p.y - p.lo], [p.hi - p.y]] if p.lo is not None and p.hi is not None else None
                    ax.errorbar([p.y], [p.x], xerr=err, fmt="o", color=line.color, capsize=3, label=line.label)
                continue
            ax.plot(xs, ys, marker="o", markersize=4, color=line.color, label=line.label)
            lo = [nan(p.lo) for p in line.points]
            hi = [nan(p.hi) for p in line.points]
            banded = [p.lo is not None and p.hi is not None for p in line.points]
            if any(banded):
                ax.fill_between(xs, lo, hi, where=banded, color=line.color, alpha=0.15, linewidth=0)
        ax.set_title(panel.title)
        if panel.horizontal:
            # the runs' names once, on the left of each row of panels
            ax.set_yticks(panel.positions, panel.position_labels if index % cols == 0 else [])
            ax.set_ylim(len(panel.positions) - 0.5, -0.5)  # the first run on top
            ax.set_xlabel(panel.value_label)
            if panel.value_lim:
                ax.set_xlim(*panel.value_lim)
            ax.grid(True, axis="x", alpha=0.3)
        else:
            if panel.log2:
                ax.set_xscale("log", base=2)
            if panel.positions:
                ax.set_xticks(panel.positions, panel.position_labels)
                ax.minorticks_off()
            elif panel.log2:  # an effort panel: matplotlib's ticks, written as plain numbers (no mathtext)
                from matplotlib.ticker import FuncFormatter

                ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
                ax.minorticks_off()
            ax.set_xlabel(panel.position_label)
            ax.set_ylabel(panel.value_label)
            if panel.value_lim:
                ax.set_ylim(*panel.value_lim)
            ax.grid(True, alpha=0.3)
        if not drawn and not panel.horizontal:
            ax.text(0.5, 0.5, "no value", transform=ax.transAxes, ha="center", va="center", color="dimgray")
    if spec.legend:
        handles: dict[str, Any] = {}
        for ax in axes[: len(spec.panels)]:
            for handle, label in zip(*ax.get_legend_handles_labels()):
                handles.setdefault(label, handle)
        if handles:
            fig.legend(
                list(handles.values()),
                list(handles),
                loc="outside lower center",
                ncols=min(3, len(handles)),
                frameon=False,
            )
    return fig


def output_format(path: str | Path) -> str:
    """png, svg or pdf, from the file's suffix; anything else is a one-line error."""
    fmt = FORMATS.get(Path(path).suffix.lower())
    if fmt is None:
        raise HarnessError(f"--out {path}: the file name must end in .png, .svg or .pdf (the figure's format)")
    return fmt


def plain_spec(spec: FigureSpec, where: object) -> FigureSpec:
    """``spec`` with each lone surrogate in its text (a model name, a run folder read back from its
    ``\\udXXX`` escape) as U+FFFD, said and counted like a document's (``harness.text``):
    matplotlib's fonts raise on one. ``spec`` itself when there is none."""
    dumped = spec.model_dump()
    clean, n = plain_value(dumped)
    if not n:
        return spec
    replaced_warning(where, n)
    return FigureSpec.model_validate(clean)


def render(spec: FigureSpec, fmt: str, where: object = "figure") -> bytes:
    """The figure's file content in ``fmt`` (png, svg, pdf); reproducible for svg. ``where``: named
    in the warning when some text had to be replaced (``plain_spec``)."""
    import matplotlib

    spec = plain_spec(spec, where)

    buffer = io.BytesIO()
    with matplotlib.rc_context(RC):
        fig = draw(spec)
        # no creation date: the same figure is the same file
        metadata = {"Date": None} if fmt == "svg" else {"CreationDate": None} if fmt == "pdf" else {}
        fig.savefig(buffer, format=fmt, dpi=PNG_DPI, metadata=metadata)
    return buffer.getvalue()


def save(spec: FigureSpec, path: str | Path) -> Path:
    """Write the figure to ``path`` (its format from the suffix), whole or not at all."""
    data = render(spec, output_format(path), path)
    write_bytes_atomic(path, data)
    return Path(path)


def figure_svg(spec: FigureSpec, where: object = "the report's figure") -> str:
    """The figure as an ``<svg>`` element to put inside an HTML page: no XML prolog, doctype or
    metadata, no namespace declarations (HTML places ``<svg>`` in the SVG namespace itself), so it
    names no URL at all and nothing is fetched; its text is text, escaped by matplotlib."""
    text = render(spec, "svg", where).decode("utf-8")
    text = text[text.index("<svg") :]
    text = re.sub(r"<metadata>.*?</metadata>", "", text, flags=re.DOTALL)
    head_end = text.index(">")
    head = re.sub(r'\s+xmlns(?::\w+)?="[^"]*"', "", text[:head_end])
    return head + text[head_end:]
