"""``harness list agents|metrics|backends|datasets``: what is available, one line each."""

from __future__ import annotations

import argparse
import inspect

KINDS = ("agents", "metrics", "backends", "datasets")


def add_parser(sub) -> None:
    p = sub.add_parser(
        "list",
        description="One line each: name, where it comes from (built in, an installed package's entry point, "
        "registered in-process), and what it is. -v adds each strategy's knobs, and what each metric scores, "
        "needs and its options (--metric-option NAME.KEY=VALUE).",
    )
    p.add_argument("kind", nargs="?", choices=KINDS, help="only this kind (default: all four)")
    p.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        default=argparse.SUPPRESS,
        help="strategies: their knobs; metrics: what they score, need, and their options",
    )


def registries():
    from harness.datasets.base import DATASETS
    from harness.models.base import BACKENDS
    from harness.scoring.metrics import METRICS
    from harness.strategy import AGENTS

    return {"agents": AGENTS, "metrics": METRICS, "backends": BACKENDS, "datasets": DATASETS}


def summary(obj) -> str:
    """The first paragraph of the object's own docstring (not a base class's), else its module's."""
    own = obj.__dict__.get("__doc__") if isinstance(obj, type) else obj.__doc__
    doc = inspect.cleandoc(own or "") or inspect.getdoc(inspect.getmodule(obj)) or ""
    return " ".join(doc.split("\n\n")[0].split())


def describe(kind: str, name: str, registry) -> list[str]:
    """The line for one entry (and knob lines for strategies with -v); a broken plugin is a line too."""
    try:
        entry = registry.resolve(name)
    except Exception as exc:  # noqa: BLE001 - listing must go on past a broken plugin
        return [f"{name}  [{registry.source_of(name)}]  cannot load: {' '.join(str(exc).split())}"]
    obj = entry.obj
    facts = []
    if kind == "agents":
        facts.append("settings: " + ", ".join(obj.settings))
    if kind == "datasets":
        facts.append(f"splits: {', '.join(obj.splits)}; versions: {', '.join(obj.versions)}")
        if getattr(obj, "answer_types", None):
            facts.append(f"answers: {', '.join(obj.answer_types)}")
        if getattr(obj, "default_agents", None):
            facts.append("agents: " + ", ".join(f"{s} {a}" for s, a in obj.default_agents.items()))
    text = summary(obj)
    if len(text) > 160:
        text = text[:157] + "..."
    extra = f" ({'; '.join(facts)})" if facts else ""
    return [f"{name}  [{registry.source_of(name)}]{extra}  {text}"]


def command(args: argparse.Namespace) -> int:
    from harness.strategy import knob_help

    verbose = getattr(args, "verbose", False)
    kinds = [args.kind] if args.kind else list(KINDS)
    for kind in kinds:
        registry = registries()[kind]
        if len(kinds) > 1:
            print(f"{kind}:")
        for name in registry.names():
            lines = describe(kind, name, registry)
            for line in lines:
                print(("  " if len(kinds) > 1 else "") + line)
            if verbose and kind == "agents" and "cannot load" not in lines[0]:
                for knob in knob_help(registry.get(name)):
                    print(("  " if len(kinds) > 1 else "") + f"    --agent-arg {knob}")
            if verbose and kind == "metrics" and "cannot load" not in lines[0]:
                for line in metric_help(name, registry.get(name)):
                    print(("  " if len(kinds) > 1 else "") + f"    {line}")
        if verbose and kind == "metrics":
            for line in retrieval_help():
                print(("  " if len(kinds) > 1 else "") + line)
    return 0


def option_lines(prefix: str, model) -> list[str]:
    """One line per option of a pydantic options model: name, type, default, help."""
    from typing import Literal, get_args, get_origin

    lines = []
    for key, info in model.model_fields.items():
        if get_origin(info.annotation) is Literal:
            kind = "|".join(map(str, get_args(info.annotation)))
        else:
            kind = getattr(info.annotation, "__name__", None) or str(info.annotation).replace("typing.", "")
        help_text = f": {info.description}" if info.description else ""
        lines.append(f"--metric-option {prefix}.{key} ({kind}, default {info.get_default()!r}){help_text}")
    return lines


def metric_help(name: str, fn) -> list[str]:
    """What a metric scores and needs, and its options (``harness list metrics -v``)."""
    from harness.scoring.metrics import NEEDS, declaration_of

    declared = getattr(fn, "declaration", None)
    if declared is None:
        return ["no declaration: scores any gold and answer, needs nothing, has no options"]
    d = declaration_of(fn)
    facts = [
        f"golds: {', '.join(d.accepts) if d.accepts is not None else 'any'}",
        f"answers: {', '.join(d.answers) if d.answers is not None else 'any'}",
    ]
    if d.datasets is not None:
        facts.append(f"datasets: {', '.join(d.datasets)}")
    if d.needs:
        facts.append("needs: " + ", ".join(NEEDS.get(n, "--" + n.replace("_", "-")).split(" (")[0] for n in d.needs))
    lines = ["scores " + "; ".join(facts)]
    if d.options is not None:
        lines += option_lines(name, d.options)
    return lines


def retrieval_help() -> list[str]:
    """The options of harness retrieval-eval's metrics."""
    from harness.scoring.retrieval_metrics import RETRIEVAL_OPTIONS

    lines = ["retrieval-eval metrics (harness retrieval-eval --metric-option NAME.KEY=VALUE):"]
    for name, model in RETRIEVAL_OPTIONS.items():
        lines.append(f"  {name}  {model.__doc__.strip().splitlines()[0]}")
        lines += [f"    {line}" for line in option_lines(name, model)]
    return lines
