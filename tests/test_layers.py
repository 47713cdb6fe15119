"""One-way layers and no import circle, checked over the import graph (every import statement, module level or inside a
function, read with ast; nothing is imported).

    The folders agents/ tools/ prompts/ wiki_snapshot/ are the modules harness.agents ... (pyproject's
    package-dir; harness/_namespace.py in a clone); our code imports them by those names only.

    version         harness._version: the version string, imported by any layer
    wiki_snapshot   a library: imports nothing of ours but the version
    prompts         data: imports nothing of ours
    harness core    may use wiki_snapshot; never agents/, tools/ or the commands. Inside it, from the bottom:
        base        errors, redact, registry, records (run files), templates, argtypes, _namespace
        models      harness.models (backends, the answer cache)       | each on base only
        datasets    harness.datasets (loaders, conversation history)  |
        strategy    harness.strategy: the strategy interface (models, datasets)
        scoring     harness.scoring: metrics, error bars, statistics (models for the judge, datasets)
        execution   harness.execution: config, the run loop, selection, lock, cost, re-scoring a run
        analysis    harness.analysis: reading finished runs (compare, report, leaderboard, ...)
        api         harness.api and the package itself: the Python entry points
    tools           may use the core and wiki_snapshot; never agents/ or the commands
    agents          strategies only: may use the core, tools and wiki_snapshot; never the commands
    commands        harness/commands/ and harness/cli.py: the top, may import anything

A module imports only its own layer and those below it. Strategies, backends, datasets and metrics reach
the core only by name through its registries ("module:attr" references), so the core never imports agents/.
"""

from __future__ import annotations

import ast
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("harness", "agents", "tools", "wiki_snapshot", "prompts")  # the repository's folders
MAPPED = PACKAGES[1:]  # each is harness.NAME
OLD_NAMES = set(MAPPED)  # their top-level names before one namespace: never in our code
TOP = ("harness.commands", "harness.cli", "harness.__main__")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    if parts[0] in MAPPED:
        parts.insert(0, "harness")
    return ".".join(parts)


CORE_LAYERS = {  # harness sub-package or module -> its layer (any other harness module is base)
    "harness.models": "models",
    "harness.datasets": "datasets",
    "harness.strategy": "strategy",
    "harness.scoring": "scoring",
    "harness.execution": "execution",
    "harness.analysis": "analysis",
    "harness.api": "api",
}


def layer(module: str) -> str:
    if module == "harness":
        return "api"  # the package's __init__ re-exports the API
    if module == "harness._version":
        return "version"
    parts = module.split(".")
    if parts[0] == "harness" and len(parts) > 1 and parts[1] in MAPPED:
        return parts[1]
    if module.startswith("harness."):
        if any(module == t or module.startswith(t + ".") for t in TOP):
            return "commands"
        for prefix, name in CORE_LAYERS.items():
            if module == prefix or module.startswith(prefix + "."):
                return name
        return "base"
    return "old name" if parts[0] in OLD_NAMES else parts[0]


CORE = ("base", "models", "datasets", "strategy", "scoring", "execution", "analysis", "api")
_BELOW_EXECUTION = {"base", "models", "datasets", "strategy", "scoring", "wiki_snapshot"}
# layer -> the layers it may import
ALLOWED = {
    "version": set(),
    "wiki_snapshot": {"wiki_snapshot", "version"},
    "prompts": set(),
    "base": {"base", "wiki_snapshot"},
    "models": {"base", "models", "wiki_snapshot"},
    "datasets": {"base", "datasets", "wiki_snapshot"},
    "strategy": {"base", "models", "datasets", "strategy", "wiki_snapshot"},
    "scoring": {"base", "models", "datasets", "scoring", "wiki_snapshot"},
    "execution": _BELOW_EXECUTION | {"execution"},
    "analysis": _BELOW_EXECUTION | {"execution", "analysis"},
    "api": {*CORE, "wiki_snapshot"},
    "tools": {"tools", *CORE, "wiki_snapshot"},
    "agents": {"agents", "tools", *CORE, "wiki_snapshot"},
    "commands": {"commands", *CORE, "agents", "tools", "wiki_snapshot", "prompts"},
}
for _allowed in ALLOWED.values():
    if _allowed:
        _allowed.add("version")


def our_imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif isinstance(node, ast.ImportFrom):
            raise AssertionError(f"{path}:{node.lineno}: relative import; use the absolute module name")
        else:
            continue
        found.extend((node.lineno, n) for n in names if n.split(".")[0] in PACKAGES)  # an old name is ours too
    return found


def source_files() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py") if "__pycache__" not in p.parts)


def find_violations(files: list[tuple[str, Path]]) -> list[str]:
    out = []
    for name, path in files:
        here = layer(name)
        for lineno, target in our_imports(path):
            there = layer(target)
            if there not in ALLOWED[here]:
                out.append(f"{name}:{lineno} ({here}) imports {target} ({there})")
    return out


def module_edges(files: list[tuple[str, Path]]) -> dict[str, set[str]]:
    """{module: the modules of ours it imports}, every import statement (function level included);
    ``from PKG import NAME`` is an edge to ``PKG.NAME`` when that is a module, else to ``PKG``."""
    known = {name for name, _ in files}
    edges: dict[str, set[str]] = {name: set() for name in known}
    for name, path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in known else node.module for a in node.names]
            else:
                continue
            edges[name].update(t for t in targets if t in known and t != name)
    return edges


def import_circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Each set of modules that import each other, directly or around a loop (Tarjan's strongly
    connected components with more than one module), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles = []

    def visit(start: str) -> None:  # iterative: deep import chains never hit the recursion limit
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                members = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    members.append(top)
                    if top == node:
                        break
                if len(members) > 1:
                    circles.append(sorted(members))

    for module in sorted(edges):
        if module not in index:
            visit(module)
    return sorted(circles)


def test_no_import_circle_anywhere():
    circles = import_circles(module_edges([(module_name(p), p) for p in source_files()]))
    assert not circles, "import circles:\n" + "\n".join(" <-> ".join(c) for c in circles)


def test_the_circle_check_catches_a_circle_through_a_function_level_import(tmp_path):
    files = {
        "pkg.a": "from pkg.b import helper\n",
        "pkg.b": "def helper():\n    from pkg import c\n",  # function level, and `from PKG import MODULE`
        "pkg.c": "import pkg.a\n",
        "pkg.d": "import pkg.a\n",  # imports into the circle without closing one
        "pkg": "",
    }
    paths = []
    for name, text in files.items():
        path = tmp_path / f"{name}.py"
        path.write_text(text, encoding="utf-8")
        paths.append((name, path))
    edges = module_edges(paths)
    assert edges["pkg.b"] == {"pkg.c"}
    assert import_circles(edges) == [["pkg.a", "pkg.b", "pkg.c"]]


def test_every_import_follows_the_layers():
    violations = find_violations([(module_name(p), p) for p in source_files()])
    assert not violations, "layer violations:\n" + "\n".join(violations)


def test_the_checker_catches_violations(tmp_path):
    """The rules are live: a core module importing a strategy, and wiki_snapshot importing the core."""
    core = tmp_path / "probe_core.py"
    core.write_text("import json\n\ndef f():\n    from harness.agents.single_prompt import ClosedBook\n", encoding="utf-8")
    lib = tmp_path / "probe_lib.py"
    lib.write_text("from harness.errors import HarnessError\nfrom harness._version import __version__\n", encoding="utf-8")
    old = tmp_path / "probe_old.py"
    old.write_text("from tools import TOOLS\n", encoding="utf-8")  # the deprecated top-level name
    found = find_violations(
        [("harness.probe", core), ("harness.wiki_snapshot.probe", lib), ("harness.commands.probe", core), ("harness.agents.probe", old)]
    )
    assert found == [
        "harness.probe:4 (base) imports harness.agents.single_prompt (agents)",
        "harness.wiki_snapshot.probe:1 (wiki_snapshot) imports harness.errors (base)",
        "harness.agents.probe:1 (agents) imports tools (old name)",
    ]


def test_the_checker_catches_an_upward_import_inside_the_core(tmp_path):
    """Scoring reaching up into the run loop, a backend into the datasets, the run loop into analysis: each
    named; the same imports downward pass."""
    up = tmp_path / "up.py"
    up.write_text("def f():\n    from harness.execution.runner import Run\n", encoding="utf-8")
    sideways = tmp_path / "sideways.py"
    sideways.write_text("from harness.datasets.base import Sample\n", encoding="utf-8")
    analysis = tmp_path / "analysis.py"
    analysis.write_text("import harness.analysis.compare\n", encoding="utf-8")
    found = find_violations(
        [
            ("harness.scoring.probe", up),
            ("harness.models.probe", sideways),
            ("harness.execution.probe", analysis),
            ("harness.analysis.probe", up),  # downward: allowed
            ("harness.strategy", sideways),  # downward: allowed
        ]
    )
    assert found == [
        "harness.scoring.probe:2 (scoring) imports harness.execution.runner (execution)",
        "harness.models.probe:1 (models) imports harness.datasets.base (datasets)",
        "harness.execution.probe:1 (execution) imports harness.analysis.compare (analysis)",
    ]


def test_agents_holds_strategies_only():
    """agents/__init__.py defines nothing, and each public module of agents/ is a registered strategy's."""
    from harness.strategy import AGENTS

    init = ast.parse((ROOT / "agents" / "__init__.py").read_text(encoding="utf-8"))
    assert all(isinstance(n, ast.Expr) or isinstance(n, ast.ImportFrom) and n.module == "__future__" for n in init.body)
    registered = {AGENTS._builtins[n].partition(":")[0] for n in AGENTS._builtins}
    public = {module_name(p) for p in (ROOT / "agents").glob("[!_]*.py")}
    assert public == registered


def test_core_imports_no_strategy_at_import_time():
    """Importing the core (runner, API, scoring) loads no strategy module and no SDK."""
    import subprocess
    import sys

    code = (
        "import sys, harness.execution.runner, harness.api, harness.scoring.metrics;"
        "heavy = ('harness.agents', 'harness.tools', 'agents', 'tools', 'openai', 'anthropic', 'llama_cpp');"
        "print(sorted(m for m in sys.modules if m.startswith(heavy)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]"
