"""``harness list agents|metrics|backends|datasets``: what is available, one line each."""

from __future__ import annotations

import argparse
import inspect

KINDS = ("agents", "metrics", "backends", "datasets")


def add_parser(sub) -> None:
    p = sub.add_parser(
        "list",
        description="One line each: name, where it comes from (built in, an installed package's entry point, "
        "registered in-process, a file), and what it is. -v adds each strategy's knobs, and what each metric "
        "scores, needs and its options (--metric-option NAME.KEY=VALUE). A plugin file is shown as a built-in "
        "is: harness list agents -v FILE.py:NAME.",
    )
    # one positional list (argparse cannot take more positionals after -v once KIND was matched)
    p.add_argument(
        "what",
        nargs="*",
        metavar="KIND [NAME]",
        help=f"KIND: only this kind ({', '.join(KINDS)}; default: all four); then NAMEs: only these, each a name "
        "or a plugin reference (FILE.py:NAME, package.module:NAME) loaded as a run would",
    )
    p.set_defaults(trailing_positionals="what")  # `harness list agents -v NAME`: NAME joins `what` (harness.cli.main)
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


def source_label(name: str, entry, registry) -> str:
    """Where an entry comes from: the registry's word for a name, a plugin reference's identity
    (its file and sha256, or its package and version) for a reference."""
    if entry is None or entry.source not in ("file", "module"):
        return registry.source_of(name)
    identity = entry.identity
    if "sha256" in identity:
        return f"{entry.source} {identity.get('file', '?')}, sha256 {identity['sha256'][:12]}"
    if "package" in identity:
        return f"{entry.source} ({identity['package']} {identity.get('version', '?')})"
    return entry.source


def describe(kind: str, name: str, registry, entry=None) -> list[str]:
    """The line for one entry (and knob lines for strategies with -v); a broken plugin is a line too."""
    if entry is None:
        try:
            entry = registry.resolve(name)
        except Exception as exc:  # noqa: BLE001 - listing must go on past a broken plugin
            return [f"{name}  [{registry.source_of(name)}]  cannot load: {' '.join(str(exc).split())}"]
    obj = entry.obj
    facts = []
    if kind == "agents":
        facts.append("settings: " + ", ".join(obj.settings))
    if kind == "metrics" and entry.name != name:  # a reference: its scores go under the metric's own name
        facts.append(f"scored as {entry.name}")
    if kind == "datasets":
        facts.append(f"splits: {', '.join(obj.splits)}; versions: {', '.join(obj.versions)}")
        if getattr(obj, "answer_types", None):
            facts.append(f"answers: {', '.join(obj.answer_types)}")
        if getattr(obj, "default_agents", None):
            facts.append("agents: " + ", ".join(f"{s} {a}" for s, a in obj.default_agents.items()))
    text = summary(obj.fn if kind == "metrics" else obj)
    if len(text) > 160:
        text = text[:157] + "..."
    extra = f" ({'; '.join(facts)})" if facts else ""
    return [f"{name}  [{source_label(name, entry, registry)}]{extra}  {text}"]


def command(args: argparse.Namespace) -> int:
    from harness.errors import HarnessError
    from harness.strategy import knob_help

    verbose = getattr(args, "verbose", False)
    kind, *names = args.what or [None]
    if kind is not None and kind not in KINDS:
        raise HarnessError(f"harness list {kind}: not a kind ({', '.join(KINDS)}); a name comes after its kind")
    kinds = [kind] if kind else list(KINDS)
    for kind in kinds:
        registry = registries()[kind]
        indent = "  " if len(kinds) > 1 else ""
        if len(kinds) > 1:
            print(f"{kind}:")
        # named ones are loaded as a run loads them: one that cannot be is an error, not a line
        named = {name: registry.resolve(name) for name in names}
        for name in names or registry.names():
            lines = describe(kind, name, registry, named.get(name))
            for line in lines:
                print(indent + line)
            if "cannot load" in lines[0]:
                continue
            obj = (named.get(name) or registry.resolve(name)).obj
            if verbose and kind == "agents":
                for knob in knob_help(obj):
                    print(indent + f"    --agent-arg {knob}")
            if verbose and kind == "metrics":
                for line in metric_help(name, obj):
                    print(indent + f"    {line}")
        if verbose and kind == "metrics" and not names:
            for line in retrieval_help():
                print(("  " if len(kinds) > 1 else "") + line)
    return 0


def option_lines(prefix: str, model) -> list[str]:
    """One line per option of a pydantic options model: name, type, default, help."""
    from harness.registry import type_text

    lines = []
    for key, info in model.model_fields.items():
        kind = type_text(info.annotation)
        help_text = f": {info.description}" if info.description else ""
        lines.append(f"--metric-option {prefix}.{key} ({kind}, default {info.get_default()!r}){help_text}")
    return lines


def metric_help(name: str, fn) -> list[str]:
    """What a metric scores and needs, and its options (``harness list metrics -v``)."""
    from harness.scoring.metrics import NEEDS

    d = fn.declaration  # a metric that declares nothing: any gold and answer, no needs, no options
    kinds = kind_lines(fn)
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
    return lines + kinds


def kind_lines(metric) -> list[str]:
    """What its numbers are (``harness.scoring.kinds``), as it declares them: the error bars follow."""
    parts = [f"{'.'.join(path)} {_kind_text(kind)}" for path, kind in metric.kinds.leaves]
    default = _kind_text(metric.kinds.default)
    return [f"numbers: {default}" + (f"; {', '.join(parts)}" if parts else "")]


def _kind_text(kind) -> str:
    scale = f" 0-{kind.scale:g}" if kind.scale is not None else ""
    unit = f" ({kind.unit}{', a total' if kind.total else ''})" if kind.unit else ""
    return f"{kind.name}{scale}{unit}"


def retrieval_help() -> list[str]:
    """The options of harness retrieval-eval's metrics."""
    from harness.scoring.retrieval_metrics import RETRIEVAL_OPTIONS

    lines = ["retrieval-eval metrics (harness retrieval-eval --metric-option NAME.KEY=VALUE):"]
    for name, model in RETRIEVAL_OPTIONS.items():
        lines.append(f"  {name}  {model.__doc__.strip().splitlines()[0]}")
        lines += [f"    {line}" for line in option_lines(name, model)]
    return lines
