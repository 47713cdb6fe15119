"""``harness ablate``: the context-length study (FanOutQA paper, appendix F.1) as one command.

One ordinary run per context size (``DIR/ctx-<size>/``: resumable, and the response cache makes a
repeat free), then the answerability ceiling (``harness ceiling``) at the same sizes, then
``DIR/ablation.json``, ``DIR/ablation.md`` (the table) and ``DIR/ablation.png`` (each metric against
the context size, the ceiling as dashed lines, each metric's 95% interval as a band; the table says whether each
step's change is significant, by a paired test on the questions both sizes scored). The ceiling is evidence-provided's packing; for an
open-book sweep it is drawn too, as the best a perfect reader of the gold evidence could do.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from harness.errors import ConfigError
from harness.analysis.leaderboard import is_headline
from harness.records import write_bytes_atomic
from harness.execution.record import FailureNote, RunResults, read_results
from harness.scoring.results import score_values

SETTINGS = ("evidence-provided", "open-book")
ABLATION_JSON, ABLATION_MD, ABLATION_PNG = "ablation.json", "ablation.md", "ablation.png"
PLOT_SIZE_IN, PLOT_DPI = (10.0, 6.0), 100  # 1000 x 600 pixels


def parse_sizes(text: str) -> list[int]:
    try:
        sizes = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise ConfigError(f"--context-sizes must be comma-separated integers, not {text!r}") from None
    if not sizes or sizes[0] <= 0 or sizes[-1] > 100_000_000:
        raise ConfigError(f"--context-sizes must be integers from 1 to 100000000, not {text!r}")
    return sizes


def max_supported_context(model: str) -> int | None:
    """The longest context the model supports, as its backend knows it before starting (None: the
    server decides when it starts)."""
    from harness.models import BackendOptions, create_backend

    return create_backend(model, BackendOptions()).max_context_size()


def _row(size: int, run_dir: Path, results: RunResults, ceiling_row: dict[str, Any] | None) -> dict[str, Any]:
    metrics = score_values(results.scores_dict())  # counts (topiocqa.turns) are not plotted
    errors = results.scores.uncertainty if results.scores is not None else {}
    return {
        "context_size": size,
        "run_dir": str(run_dir),
        "run_id": results.run_id,
        "status": results.status,
        "counts": results.counts.model_dump(mode="json", exclude_unset=True),
        "metrics": metrics,
        "uncertainty": {
            m: {k: errors[m].get(k) for k in ("stderr", "ci95", "method", "note")} for m in metrics if m in errors
        },
        "step": None,  # the change from the previous size, filled by add_steps
        "tokens": results.tokens.model_dump(mode="json") if results.tokens is not None else None,
        "cost_usd": results.cost.total_usd if results.cost is not None else None,
        "outcomes": results.outcomes,
        "retrieval": results.retrieval,
        "ceiling": {"loose": ceiling_row["loose"], "strict": ceiling_row["strict"]} if ceiling_row else None,
        "failures": _failure_summary(results.failures),
    }


def _failure_summary(failures_by_key: dict[str, FailureNote]) -> dict[str, Any] | None:
    """Failures by type and one example: at small sizes ``no_evidence_packed`` is expected, and the
    console says which failures a rerun can fix."""
    failures = list(failures_by_key.values())
    if not failures:
        return None
    types: dict[str, int] = {}
    for f in failures:
        types[f.type] = types.get(f.type, 0) + 1
    return {"types": types, "example": failures[0].model_dump(mode="json")}


def add_steps(rows: list[dict[str, Any]], results: list[RunResults]) -> None:
    """Each row's ``step``: per headline metric, the paired difference from the previous size on the
    questions both runs scored, its interval, p-value and whether it is significant (harness.analysis.compare)."""
    from harness.analysis.compare import LoadedRun, compare_runs
    from harness.errors import HarnessError

    runs = [LoadedRun.of(r["run_dir"], res) for r, res in zip(rows, results)]
    for i in range(1, len(rows)):
        if not runs[i - 1].scores.get("raw") or not runs[i].scores.get("raw"):
            continue
        try:
            result = compare_runs([runs[i - 1], runs[i]])
        except HarnessError as exc:
            rows[i]["step"] = {"error": str(exc)}
            continue
        if result["runs"][1].get("failed"):  # nothing answered at this size: no change to measure
            rows[i]["step"] = {"error": f"not compared: {result['runs'][1]['failed']}"}
            continue
        keys = ("diff", "ci95", "p", "p_holm", "p_mc_error", "test", "significant")
        rows[i]["step"] = {
            m: {k: e["diffs"][0].get(k) for k in keys}
            for m, e in result["metrics"].items()
            if is_headline(m)
        }
        rows[i]["step_n_shared"] = result["n_shared"]


def _step_text(step: dict[str, Any] | None) -> str:
    if not step:
        return "—"
    if "error" in step:
        return step["error"]
    parts = [
        f"{m.split('.', 1)[-1]} {s['diff']:+.4f} p={s['p']:.3g}"
        + (f"±{s['p_mc_error']:.1g}" if s.get("p_mc_error") else "")  # a Monte Carlo p's error
        + (f" (Holm {s['p_holm']:.3g})" if s.get("p_holm") is not None and s["p_holm"] != s["p"] else "")
        + (" *" if s["significant"] else "")
        for m, s in step.items()
    ]
    return "; ".join(parts) or "—"


def format_table(ablation: dict[str, Any]) -> str:
    metrics = [m for m in ablation["metrics"] if is_headline(m)]
    head = ["context size", *metrics, "ceiling loose", "ceiling strict", "finished", "failed", "tokens", "cost USD"]
    head.append("change from the previous size (* significant at 0.05, Holm over the step's numbers)")
    lines = [
        (
            f"Context-length ablation: {ablation['model']}, {ablation['setting']}, {ablation['dataset']} "
            f"({ablation['n_samples']} questions). Ceiling: {ablation['ceiling_note']}"
        ),
        "",
        "| " + " | ".join(head) + " |",
        "|" + "|".join("---:" for _ in head) + "|",
    ]

    def num(value: Any, digits: int = 4) -> str:
        return "—" if value is None else f"{value:.{digits}f}"

    for r in ablation["rows"]:
        ceiling = r["ceiling"] or {}
        errors = r.get("uncertainty") or {}
        cells = [str(r["context_size"])]
        for m in metrics:
            se, note = (errors.get(m) or {}).get("stderr"), (errors.get(m) or {}).get("note")
            cells.append(num(r["metrics"].get(m)) + (f" ± {se:.4f}" if se is not None else " ± n/a" if note else ""))
        cells += [num(ceiling.get("loose")), num(ceiling.get("strict"))]
        cells += [str(r["counts"]["finished"]), str(r["counts"]["failed"]), str((r["tokens"] or {}).get("total"))]
        cells.append(num(r["cost_usd"], 6))
        cells.append(_step_text(r.get("step")).replace("|", "\\|"))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot(ablation: dict[str, Any], path: Path) -> list[str]:
    """Each headline metric against the context size on one axes (all are shares in [0, 1]), the
    ceiling loose/strict dashed. Returns the metrics plotted."""
    import io

    import matplotlib

    matplotlib.use("Agg")  # no display; must precede pyplot
    import matplotlib.pyplot as plt

    rows = ablation["rows"]
    sizes = [r["context_size"] for r in rows]
    plotted = []
    fig, ax = plt.subplots(figsize=PLOT_SIZE_IN, dpi=PLOT_DPI)
    try:
        for metric in ablation["metrics"]:
            values = [r["metrics"].get(metric) for r in rows]
            # only shares: metrics on another scale (x100 EM, BLEU) would flatten the rest
            if not is_headline(metric) or any(v is None or not 0 <= v <= 1 for v in values):
                continue
            line = ax.plot(sizes, values, marker="o", label=metric)[0]
            bands = [((r.get("uncertainty") or {}).get(metric) or {}).get("ci95") for r in rows]
            if all(bands):  # the 95% interval as a band in the line's colour
                ax.fill_between(sizes, [b[0] for b in bands], [b[1] for b in bands], color=line.get_color(), alpha=0.15)
            plotted.append(metric)
        for key, style, color in (("loose", "--", "black"), ("strict", ":", "dimgray")):
            values = [(r["ceiling"] or {}).get(key) for r in rows]
            if all(v is not None for v in values):
                ax.plot(sizes, values, linestyle=style, color=color, label=f"answerability ceiling ({key})")
        if len(set(sizes)) > 1:
            ax.set_xscale("log", base=2)
        ax.set_xticks(sizes, [str(s) for s in sizes])
        ax.set_ylim(-0.02, 1.02)  # a line at 0 stays visible
        ax.set_xlabel("context size (tokens)")
        ax.set_ylabel("score")
        ax.set_title(f"{ablation['model']} — {ablation['setting']} — {ablation['dataset']} (n={ablation['n_samples']})")
        ax.grid(True, alpha=0.3)
        ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize="small")
        fig.subplots_adjust(left=0.07, right=0.68, top=0.92, bottom=0.1)
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=PLOT_DPI)  # no bbox_inches: the size stays exact
    finally:
        plt.close(fig)
    write_bytes_atomic(path, buffer.getvalue())
    return plotted


def _ceiling_note(setting: str, computed: bool) -> str:
    if not computed:
        return "not computed (the dataset has no reference answers)"
    note = "evidence-provided packing of the gold evidence (FanOutQA string accuracy of the packed documents)"
    if setting == "open-book":
        note += "; shown for open-book too, as the best a perfect reader of that evidence could do"
    return note


async def run_ablation(flat: dict[str, Any], sizes: list[int], out: Path) -> dict[str, Any]:
    from harness.analysis.ceiling import compute_ceiling
    from harness.execution.config import build_config
    from harness.records import write_json_atomic
    from harness.execution.runner import Run

    base = build_config(flat)
    # Every run is set up (and so checked) before the first one spends anything.
    runs = {size: Run(build_config({**flat, "context_size": size, "out": str(out / f"ctx-{size}")})) for size in sizes}
    results: dict[int, RunResults] = {}
    for size, run in runs.items():
        print(f"ablate: context size {size} -> {run.config.out}", file=sys.stderr)
        await run.execute()
        results[size] = read_results(run.run_dir)  # as every reader reads a run: its results.json, typed

    first = results[sizes[0]]
    ceiling = None
    if first.scores is not None:  # the ceiling needs reference answers
        ceiling = await compute_ceiling(ceiling_config(base, flat), sizes)
    by_size = {r["context_size"]: r for r in (ceiling or {}).get("rows", [])}
    rows = [_row(size, out / f"ctx-{size}", results[size], by_size.get(size)) for size in sizes]
    add_steps(rows, [results[size] for size in sizes])
    metrics: list[str] = []
    for r in rows:
        metrics += [m for m in r["metrics"] if m not in metrics]
    ablation = {
        "model": base.model,
        "setting": base.setting,
        "agent": first.agent_name,
        "dataset": first.dataset.spec,
        "n_samples": first.counts.selected,
        "context_sizes": sizes,
        "metrics": metrics,
        "rows": rows,
        "ceiling_note": _ceiling_note(base.setting, ceiling is not None),
        "ceiling": {k: v for k, v in ceiling.items() if k != "per_sample"} if ceiling else None,
        "config": base.model_dump(mode="json"),
        "files": {"table": ABLATION_MD, "plot": ABLATION_PNG},
    }
    ablation["plotted_metrics"] = plot(ablation, out / ABLATION_PNG)
    write_bytes_atomic(out / ABLATION_MD, format_table(ablation).encode())
    write_json_atomic(out / ABLATION_JSON, ablation)
    return ablation


def ceiling_config(base, flat: dict[str, Any]):
    """The sweep's options for the ceiling: evidence-provided's packing, with those of the sweep's
    knobs that evidence-provided has (an open-book sweep's max_rounds is not one)."""
    from harness.execution.config import build_config
    from harness.strategy import AGENTS

    fields = AGENTS.get("evidence-provided").Knobs.model_fields
    knobs = {k: v for k, v in base.agent_args.items() if k in fields}
    ceiling_flat = {k: v for k, v in flat.items() if k not in ("agent", "agent_args", "out", "prompt_template")}
    return build_config({**ceiling_flat, "agent_args": knobs, "setting": "evidence-provided"})
