"""``harness ablate``: the context-length sweep (the logic: harness.analysis.ablate)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

from harness.analysis.ablate import (
    ABLATION_JSON,
    ABLATION_MD,
    ABLATION_PNG,
    SETTINGS,
    ceiling_config,
    format_table,
    max_supported_context,
    parse_sizes,
    run_ablation,
)
from harness.commands.run import add_run_options, failure_line
from harness.errors import ConfigError
from harness.records import slug


def add_parser(sub) -> None:
    p = sub.add_parser(
        "ablate",
        description=(
            "Run the same configuration once per context size (DIR/ctx-<size>/, ordinary resumable runs), compute "
            "the answerability ceiling at those sizes, and write DIR/ablation.json (every number), DIR/ablation.md "
            "(the headline metrics per size) and DIR/ablation.png (a panel per headline metric; `harness figure "
            "ablation DIR ...` redraws it, with other metrics, several folders, as SVG or PDF). Takes every "
            "`harness run` option; --out is the ablation folder."
        ),
        argument_default=argparse.SUPPRESS,
    )
    p.add_argument("--context-sizes", required=True, help="comma-separated sizes in tokens, e.g. 2048,4096,8192")
    add_run_options(p)


def command(args) -> int:
    from harness.api import build_run_config
    from harness.execution.config import load_yaml
    from harness.strategy import create_agent

    given = {k: v for k, v in vars(args).items() if k not in ("command", "verbose", "config", "context_sizes")}
    flat: dict[str, Any] = load_yaml(args.config) if getattr(args, "config", None) else {}
    flat = {k.replace("-", "_"): v for k, v in flat.items()}
    flat.update(given)
    sizes = parse_sizes(args.context_sizes)
    if flat.pop("context_size", None) is not None:
        raise ConfigError("ablate sets the context size of each run: give the sizes with --context-sizes only")
    flat.setdefault("model", "local/smollm2")
    if flat.get("log_to"):  # from a --config file: its runs would go unlogged without a word
        raise ConfigError("log_to: ablate's runs are not logged to trackers; log a run with harness run --log-to")
    if flat.get("setting") not in SETTINGS:
        raise ConfigError(f"ablate needs --setting {' or '.join(SETTINGS)} (got {flat.get('setting')!r})")
    # every option and knob checked before the first run; the sizes must leave room for the answer
    # both in the runs and in the ceiling (evidence-provided's packing at the same sizes)
    config = build_run_config(flat)
    reserve = max(
        getattr(create_agent(config).knobs, "evidence_reserve", 0),
        create_agent(ceiling_config(config, flat)).knobs.evidence_reserve,
    )
    if sizes[0] <= reserve:
        raise ConfigError(f"context sizes must each exceed the answer reserve (--agent-arg evidence_reserve={reserve})")
    supported = max_supported_context(flat["model"])
    if supported is not None and sizes[-1] > supported:
        raise ConfigError(f"context size {sizes[-1]} is larger than {flat['model']} supports ({supported} tokens)")
    default_out = (
        Path("results")
        / f"ablation-{slug(flat.get('dataset', 'fanoutqa:dev'))}-{slug(flat['model'])}-{flat['setting']}"
    )
    out = Path(flat.pop("out", None) or default_out)

    from harness.execution.guard import run_guarded

    try:  # a kill (SIGTERM) unwinds like Ctrl-C; a strategy cancelling the run's tasks does not
        ablation = run_guarded(lambda: run_ablation(flat, sizes, out))
    except (KeyboardInterrupt, asyncio.CancelledError):
        print("interrupted: run the same command again to resume", file=sys.stderr)
        return 130
    print(format_table(ablation), end="")
    print(f"wrote {out / ABLATION_JSON}, {out / ABLATION_MD}, {out / ABLATION_PNG}", file=sys.stderr)
    failed_rows = [r for r in ablation["rows"] if r["counts"]["failed"]]
    for r in failed_rows:
        print(f"ctx-{r['context_size']}: {ablation_failure_line(r)}", file=sys.stderr)
    if failed_rows:
        return 1
    return 0


def ablation_failure_line(row: dict[str, Any]) -> str:
    """The run command's failure line for one size, its path under the sweep's directory."""
    summary = row.get("failures") or {"types": {}, "example": {}}
    example = summary["example"]
    rest = dict(summary["types"])
    if example.get("type") in rest:
        rest[example["type"]] -= 1
    failures = [example] + [{"type": t} for t, n in rest.items() for _ in range(n)]
    return failure_line(row["counts"]["failed"], failures).replace(
        "see failures.jsonl", f"see ctx-{row['context_size']}/failures.jsonl"
    )
