"""``harness list agents|metrics|backends|datasets``: what is available, one line each."""

from __future__ import annotations

import argparse
import inspect

KINDS = ("agents", "metrics", "backends", "datasets")


def add_parser(sub) -> None:
    p = sub.add_parser(
        "list",
        description="One line each: name, where it comes from (built in, an installed package's entry point, "
        "registered in-process), and what it is. -v adds each strategy's knobs.",
    )
    p.add_argument("kind", nargs="?", choices=KINDS, help="only this kind (default: all four)")
    p.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help="strategies: their knobs")


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
    return 0
