"""``harness ablate``: the context-length study (FanOutQA paper, appendix F.1) as one command.

One ordinary run per context size (``DIR/ctx-<size>/``: resumable, and the response cache makes a
repeat free), then the answerability ceiling (``harness ceiling``) at the same sizes, then
``DIR/ablation.json`` (every number), ``DIR/ablation.md`` (the headline metrics per size; the table
says whether each step's change is significant, by a paired test on the questions both sizes
scored) and ``DIR/ablation.png``: the figure ``harness figure ablation DIR`` draws
(harness.analysis.figures: a panel per headline metric with its 95% band, the ceiling dashed).
The ceiling is evidence-provided's packing; for an open-book sweep it is drawn too, as the best a
perfect reader of the gold evidence could do."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from harness.analysis.figures import Sweep, SweepPoint, ablation_spec, save
from harness.analysis.leaderboard import is_headline
from harness.analysis.row import RunRow
from harness.errors import ConfigError, HarnessError
from harness.execution.record import FailureNote, RunResults, metric_names_of, read_results
from harness.records import read_json, write_bytes_atomic
from harness.scoring.scores import Interval
from harness.scoring.display import dataset_headline, display_name

SETTINGS = ("evidence-provided", "open-book")
ABLATION_JSON, ABLATION_MD, ABLATION_PNG = "ablation.json", "ablation.md", "ablation.png"


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
    row = RunRow.of(results, run_dir)
    metrics = row.metrics  # counts (topiocqa.turns) are not plotted; nothing scored: null, never 0
    errors = results.scores.intervals() if results.scores is not None else {}
    return {
        "context_size": size,
        "run_dir": str(run_dir),
        "run_id": results.run_id,
        "status": results.status,
        "counts": results.counts.model_dump(mode="json", exclude_unset=True),
        # questions scored (0: nothing to measure), samples answered, and those without an answer, said
        "scored": row.scored,
        "answered": row.answered,
        "no_answer": row.outcomes.unanswered,
        "no_answer_note": row.outcomes.note(),
        "metrics": metrics,
        "uncertainty": {m: errors[m].model_dump(include=_INTERVAL_KEYS) for m in metrics if m in errors},
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

    runs = [LoadedRun.of(r["run_dir"], res) for r, res in zip(rows, results)]
    for i in range(1, len(rows)):
        if not runs[i - 1].scores.question_ids() or not runs[i].scores.question_ids():
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


def _step_text(step: dict[str, Any] | None, keys: list[str]) -> str:
    if not step:
        return "—"
    if "error" in step:
        return step["error"]
    parts = [
        f"{display_name(m)} {s['diff']:+.4f} p={s['p']:.3g}"
        + (f"±{s['p_mc_error']:.1g}" if s.get("p_mc_error") else "")  # a Monte Carlo p's error
        + (f" (Holm {s['p_holm']:.3g})" if s.get("p_holm") is not None and s["p_holm"] != s["p"] else "")
        + (" *" if s["significant"] else "")
        for m, s in step.items()
        if m in keys and s.get("diff") is not None and s.get("p") is not None
    ]
    return "; ".join(parts) or "—"


def format_table(ablation: dict[str, Any]) -> str:
    """The sweep as a markdown table: per size, the headline metrics (display names) with their
    standard errors, the ceiling, questions scored and failed, samples without an answer (why in the
    notes under it), the change from the previous size. Every other number is in ablation.json. A
    size that answered nothing has no value (n/a)."""
    keys = headline_of(ablation)
    head = ["context size", *(display_name(k) for k in keys), "ceiling (loose)", "ceiling (strict)", "n", "failed"]
    head.append("no answer")
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

    def num(value: Any) -> str:
        return "n/a" if value is None else f"{value:.4f}"

    rows = ablation["rows"]
    notes = [f"context size {r['context_size']}: {r['no_answer_note']}" for r in rows if r.get("no_answer_note")]
    for r in ablation["rows"]:
        ceiling = r["ceiling"] or {}
        errors = _intervals(r)
        answered = _scored(r)
        cells = [str(r["context_size"])]
        for m in keys:
            value = r["metrics"].get(m) if answered else None  # nothing answered: no score, never 0
            se, note = (errors[m].stderr, errors[m].note) if m in errors else (None, None)
            if value is None:
                cells.append("n/a (failed)" if not answered else "n/a")
            else:
                cells.append(num(value) + (f" ± {se:.4f}" if se is not None else " ± n/a" if note else ""))
        cells += [num(ceiling.get("loose")), num(ceiling.get("strict"))]
        cells += [str(answered), str(r["counts"]["failed"]), str(r.get("no_answer", "—"))]
        cells.append(_step_text(r.get("step"), keys).replace("|", "\\|"))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join([*lines, *([""] + notes if notes else [])]) + "\n"


def _scored(row: dict[str, Any]) -> int:
    """The questions behind a size's numbers (0: nothing to measure): recorded since the typed run
    row; an ablation.json from before it, its finished samples."""
    scored = row.get("scored")
    return scored if isinstance(scored, int) else (row.get("counts") or {}).get("finished") or 0


def _metric_names(ablation: dict[str, Any]) -> list[str]:
    """The scoring metrics of the sweep (recorded since the figures; before, read off the keys)."""
    if ablation.get("metric_names"):
        return list(ablation["metric_names"])
    return list(dict.fromkeys(k.split(".", 1)[0] for k in ablation.get("metrics") or []))


def headline_of(ablation: dict[str, Any]) -> list[str]:
    """The sweep's headline keys: recorded, or (an ablation.json from before) its dataset's."""
    if ablation.get("headline"):
        return list(ablation["headline"])
    name = ablation.get("dataset_name") or str(ablation.get("dataset") or "").split(":", 1)[0]
    return dataset_headline(name or None, _metric_names(ablation))


_INTERVAL_KEYS = {"stderr", "ci95", "method", "note"}  # what a row of ablation.json keeps of each Interval


def _intervals(row: dict[str, Any]) -> dict[str, Interval]:
    """A row's recorded uncertainty (ablation.json ``uncertainty``), typed."""
    return {m: Interval.model_validate(e) for m, e in (row.get("uncertainty") or {}).items() if isinstance(e, dict)}


def sweep_of(ablation: dict[str, Any], source: str | Path) -> Sweep:
    """An ablation (as written to ablation.json, any version) as the figures read it."""
    points = []
    for r in ablation["rows"]:
        errors = _intervals(r)
        points.append(
            SweepPoint(
                context_size=r["context_size"],
                values=r.get("metrics") or {},
                intervals={m: e.bounds for m, e in errors.items() if e.bounds is not None},
                ceiling=r.get("ceiling"),
                answered=_scored(r),
            )
        )
    return Sweep(
        source=str(source),
        model=ablation.get("model"),
        agent=ablation.get("agent"),
        setting=ablation.get("setting"),
        dataset=ablation.get("dataset"),
        headline=headline_of(ablation),
        keys=list(ablation.get("metrics") or []),
        points=points,
    )


def read_sweep(folder: str | Path) -> Sweep:
    """An ablation folder's (or its ablation.json's) sweep; one line when it is not one."""
    path = Path(folder)
    file = path / ABLATION_JSON if path.is_dir() else path
    if path.is_dir() and not file.exists():
        raise HarnessError(f"{folder}: not an ablation folder (no {ABLATION_JSON}; harness ablate writes it)")
    data = read_json(file)
    try:
        return sweep_of(data, path if path.is_dir() else path.parent)
    except (KeyError, TypeError, AttributeError, IndexError, ValidationError):
        raise HarnessError(f"{file}: not an ablation.json this harness can read") from None


def draw_ablation(ablation: dict[str, Any], path: Path) -> list[str]:
    """The sweep's figure (harness.analysis.figures: one panel per headline metric) as a PNG;
    returns the metrics drawn."""
    spec = ablation_spec([sweep_of(ablation, path.parent)])
    save(spec, path)
    return [panel.key for panel in spec.panels]


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
        "dataset_name": first.dataset.name,
        "metric_names": metric_names_of(first.scores),
        "headline": dataset_headline(first.dataset.name, metric_names_of(first.scores)),
        "n_samples": first.counts.selected,
        "context_sizes": sizes,
        "metrics": metrics,
        "rows": rows,
        "ceiling_note": _ceiling_note(base.setting, ceiling is not None),
        "ceiling": {k: v for k, v in ceiling.items() if k != "per_sample"} if ceiling else None,
        "config": base.model_dump(mode="json"),
        "files": {"table": ABLATION_MD, "plot": ABLATION_PNG},
    }
    ablation["plotted_metrics"] = draw_ablation(ablation, out / ABLATION_PNG)
    write_bytes_atomic(out / ABLATION_MD, format_table(ablation))
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
