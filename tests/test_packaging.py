"""The package as it installs: one import namespace (``harness.agents``, ``harness.tools``,
``harness.prompts``, ``harness.wiki_snapshot``; harness/_namespace.py), the old top-level names as
deprecated aliases of the same modules, the distribution's name and version from one place, every
data file of the tree in pyproject's package data, and (slow) the built wheel's file list.

The fast checks run fresh interpreters (an import is once per process); the slow one builds the
wheel from a copy of the tree. .ci/wheel_check.sh installs that wheel in a clean environment and runs
evaluations from it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
SETUPTOOLS = PYPROJECT["tool"]["setuptools"]
MAPPED = ("agents", "tools", "prompts", "wiki_snapshot")


def python(code: str, cwd: Path, path: str | None = None) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter at ``cwd`` with PYTHONPATH=``path`` (default: this tree)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT) if path is None else path, "HARNESS_CACHE_DIR": str(cwd / "cache")}
    proc = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def source_dir(package: str) -> Path:
    """A package's folder in this tree (pyproject's package-dir mapping)."""
    mapped = SETUPTOOLS["package-dir"]
    parts = package.split(".")
    for k in range(len(parts), 0, -1):
        head = ".".join(parts[:k])
        if head in mapped:
            return ROOT / mapped[head] / Path(*parts[k:])
    return ROOT / Path(*parts)


def tree_files() -> dict[str, Path]:
    """Every file the installed package must hold, by its path in the wheel (``harness/agents/react.py``)."""
    out = {}
    for top in ("harness", *MAPPED):
        for path in (ROOT / top).rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                inside = path.relative_to(ROOT)
                out[str(inside if top == "harness" else Path("harness") / inside)] = path
    return out


def test_the_distribution_is_named_and_versioned_in_one_place():
    from harness._version import DISTRIBUTION, __version__, pip_install

    assert PYPROJECT["project"]["name"] == DISTRIBUTION == "manyanswer-harness"
    assert "version" not in PYPROJECT["project"] and PYPROJECT["project"]["dynamic"] == ["version"]
    assert SETUPTOOLS["dynamic"]["version"] == {"attr": "harness._version.__version__"}
    assert PYPROJECT["project"]["scripts"] == {"harness": "harness.cli:main"}  # the command keeps its name
    assert pip_install("analysis") == "pip install 'manyanswer-harness[analysis]'"
    assert __version__ and all(part.isdigit() for part in __version__.split("."))


def test_pyproject_lists_every_package_and_every_data_file_of_the_tree():
    """What ``packages`` and ``package-data`` name is exactly the tree: a new sub-package or data file
    left out of pyproject fails here, not in a user's site-packages."""
    packages = SETUPTOOLS["packages"]
    found = {".".join(("harness", *p.relative_to(ROOT).parts[:-1])) if p.parts[len(ROOT.parts)] in MAPPED
             else ".".join(p.relative_to(ROOT).parts[:-1])
             for top in ("harness", *MAPPED) for p in (ROOT / top).rglob("__init__.py")}  # fmt: skip
    assert sorted(packages) == sorted(found)
    assert SETUPTOOLS["package-dir"] == {f"harness.{n}": n for n in MAPPED}
    covered = set()
    for package, patterns in SETUPTOOLS["package-data"].items():
        assert package in packages, package
        for pattern in patterns:
            matched = [p for p in source_dir(package).glob(pattern) if p.is_file()]
            assert matched, f"{package}: {pattern} matches nothing"
            covered.update(matched)
    data = {p for p in tree_files().values() if p.suffix != ".py"}
    assert data - covered == set(), "data files not in package-data"


def test_the_four_folders_are_this_trees_harness_subpackages(tmp_path):
    """From a source tree on PYTHONPATH (cwd elsewhere), harness.agents ... are this tree's folders, not
    those of another tree's editable install; no top-level name is imported for them."""
    code = (
        "import json, sys, harness.agents.react, harness.tools.search, harness.prompts, harness.wiki_snapshot.store\n"
        "from harness.templates import packaged_text\n"
        "print(json.dumps({'files': [sys.modules[m].__file__ for m in ('harness.agents.react', 'harness.tools.search',"
        " 'harness.prompts', 'harness.wiki_snapshot.store')], 'top': sorted(m for m in sys.modules if m.split('.')[0]"
        " in ('agents', 'tools', 'prompts', 'wiki_snapshot')), 'judge': len(packaged_text('fanoutqa/judge_system.txt'))}))"
    )
    out = json.loads(python(code, tmp_path).stdout)
    assert out["files"] == [str(ROOT / f) for f in ("agents/react.py", "tools/search.py", "prompts/__init__.py", "wiki_snapshot/store.py")]
    assert out["top"] == [] and out["judge"] > 0


def test_a_tree_on_pythonpath_wins_over_another_trees_editable_install(tmp_path):
    """setuptools' editable finder (appended to sys.meta_path by its .pth) maps harness.agents to the
    installed tree's folder; the tree on PYTHONPATH still gets its own (as in its finder's source)."""
    other = tmp_path / "other"
    (other / "agents").mkdir(parents=True)
    (other / "agents" / "__init__.py").write_text("", encoding="utf-8")
    code = f"""
import importlib.machinery, sys

class Editable:
    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        if fullname == "harness.agents":
            return importlib.machinery.PathFinder.find_spec("agents", [{str(other)!r}])
        return None

sys.meta_path.append(Editable)
import harness.agents
print(harness.agents.__file__)
"""
    assert python(code, tmp_path).stdout.strip() == str(ROOT / "agents" / "__init__.py")


OLD_PLUGIN = '''
from agents.single_prompt import ClosedBook
from tools import TOOLS
from wiki_snapshot import Snapshot
from wiki_snapshot.store import normalize_title
import prompts


class OldStyle(ClosedBook):
    """A closed-book strategy written against the import paths before one namespace."""

    name = "old-style"
'''


def test_a_plugin_on_the_old_import_paths_gets_the_same_modules(tmp_path):
    """A plugin file importing ``agents``, ``tools``, ``wiki_snapshot`` and ``prompts`` loads through the
    registry, runs, and sees the very objects of harness.*: one module per file (the tool registry is
    not doubled), one FutureWarning per old package naming the new path."""
    (tmp_path / "old_style.py").write_text(OLD_PLUGIN, encoding="utf-8")
    code = """
import json, sys, warnings
warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    from harness.cli import main
    code = main(["run", "--agent", "old_style.py:OldStyle", "--model", "scripted/echo", "--dataset", "hotpotqa:dev",
                 "--limit", "1", "--metrics", "em-f1", "--out", "run"])
import harness.agents.single_prompt, harness.tools, harness.wiki_snapshot, harness.wiki_snapshot.store, harness.prompts
plugin = next(m for n, m in sys.modules.items() if n.startswith("harness_plugin_") and n.endswith("old_style"))
by_file = {}
for name, module in list(sys.modules.items()):
    if getattr(module, "__file__", None):
        by_file.setdefault(module.__file__, set()).add(id(module))
print(json.dumps({
    "code": code,
    "same": [plugin.ClosedBook is harness.agents.single_prompt.ClosedBook, plugin.TOOLS is harness.tools.TOOLS,
             plugin.Snapshot is harness.wiki_snapshot.store.Snapshot, plugin.prompts is harness.prompts,
             plugin.normalize_title is harness.wiki_snapshot.store.normalize_title,
             sys.modules["wiki_snapshot.store"] is harness.wiki_snapshot.store],
    "spec": harness.wiki_snapshot.store.__spec__.name,
    "doubled": sorted(f for f, ids in by_file.items() if len(ids) > 1),
    "warnings": sorted(str(w.message) for w in caught if w.category is FutureWarning),
    "where": sorted({w.filename for w in caught if w.category is FutureWarning}),
}))
"""
    out = json.loads(python(code, tmp_path).stdout.strip().splitlines()[-1])
    assert out["code"] == 0 and all(out["same"]) and out["doubled"] == []
    assert out["spec"] == "harness.wiki_snapshot.store"  # the module keeps its own spec, not the alias's
    assert out["warnings"] == [
        f"the top-level package `{n}` is deprecated: import `harness.{n}` (`{n}.X` is `harness.{n}.X`); "
        "the old name goes in the next release"
        for n in ("agents", "prompts", "tools", "wiki_snapshot")
    ]
    assert out["where"] == [str(tmp_path / "old_style.py")]  # the line is the plugin's import
    record = json.loads((tmp_path / "run" / "results.json").read_text(encoding="utf-8"))
    assert record["agent"]["plugin"]["file"].endswith("old_style.py")
    from harness._version import __version__

    assert record["harness"]["version"] == __version__  # every results.json says which harness wrote it


def test_a_users_own_top_level_tools_wins_over_the_alias(tmp_path):
    """A project with its own ``tools/`` on sys.path keeps it; the harness keeps harness.tools; and a
    clone's root on sys.path (cwd) gives the alias, never a second copy of the same files."""
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "__init__.py").write_text("MINE = True\n", encoding="utf-8")
    (tmp_path / "tools" / "search.py").write_text("WHOSE = 'mine'\n", encoding="utf-8")
    code = """
import json, warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import harness
    import tools, tools.search
    import harness.tools, harness.tools.search
    from harness.tools import TOOLS
print(json.dumps([getattr(tools, "MINE", False), tools.search.WHOSE, harness.tools.search.__file__, "search" in TOOLS,
                  [str(w.message) for w in caught if w.category is FutureWarning]]))
"""
    mine, whose, search_file, registered, warned = json.loads(python(code, tmp_path).stdout)
    assert (mine, whose, registered, warned) == (True, "mine", True, [])
    assert search_file == str(ROOT / "tools" / "search.py")
    # the clone's own root first on sys.path: its tools/ is ours, so the alias answers (one module)
    code = "import json, harness, tools, harness.tools; print(json.dumps(tools is harness.tools))"
    assert json.loads(python(code, ROOT).stdout) is True


def test_an_old_name_that_never_existed_fails_as_before(tmp_path):
    code = """
import harness
try:
    import agents.no_such_strategy
except ModuleNotFoundError as exc:
    print(exc.name)
"""
    assert python(code, tmp_path).stdout.strip() == "agents.no_such_strategy"


@pytest.mark.slow  # builds the wheel (setuptools, a copy of the tree)
def test_the_wheel_holds_every_file_of_the_tree_under_harness_only(tmp_path):
    """The built wheel's top-level names are ``harness`` and its dist-info; it holds every module and
    every data file of the tree (prompts/*.txt, the datasets' data, prices.yaml, model_facts.yaml ...)."""
    tree = tmp_path / "tree"
    shutil.copytree(ROOT, tree, ignore=shutil.ignore_patterns(".git", "results", "build", "dist", "*.egg-info",
                                                             "__pycache__", ".venv*", "tests", "benchmarks", "docs"))  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", str(tree), "-w", str(tmp_path / "dist")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    from harness._version import __version__

    assert wheel.name == f"manyanswer_harness-{__version__}-py3-none-any.whl"
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names} == {"harness", f"manyanswer_harness-{__version__}.dist-info"}
    missing = sorted(set(tree_files()) - set(names))
    assert missing == []
    metadata = zipfile.ZipFile(wheel).read(f"manyanswer_harness-{__version__}.dist-info/METADATA").decode()
    assert "Name: manyanswer-harness" in metadata and f"Version: {__version__}" in metadata


# outputs and provenance --------------------------------------------------------------------------


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()


def test_git_commit_is_dirty_for_changes_only_and_none_outside_the_harnesss_own_clone(tmp_path):
    from harness.execution.summary import git_commit

    clone = tmp_path / "clone"
    (clone / "harness").mkdir(parents=True)
    (clone / "harness" / "__init__.py").write_text("")
    (clone / ".gitignore").write_text("/results/*\n.venv/\n")
    git(clone, "init", "-q")
    git(clone, "add", ".")
    git(clone, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x")
    head = git(clone, "rev-parse", "HEAD")
    (clone / "results" / "run").mkdir(parents=True)
    (clone / "results" / "run" / "results.json").write_text("{}")  # a run's default output: ignored
    assert git_commit(clone / "harness") == head
    (clone / "hotpot.db").write_text("")  # an output git does not ignore
    assert git_commit(clone / "harness") == head + "-dirty"
    # an installed wheel inside another project's repository: that commit is not the harness's
    site = clone / ".venv" / "lib" / "site-packages" / "harness"
    site.mkdir(parents=True)
    assert git_commit(site) is None
    assert git_commit(tmp_path / "nowhere" / "harness") is None


def tour_outputs() -> list[str]:
    """Every path the README's tour and the docs' runnable blocks write (``--out``, ``report``'s folder)."""
    import re
    import shlex

    blocks = re.findall(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(encoding="utf-8"), re.S)[2:]
    blocks += re.findall(r"<!-- run -->\n```bash\n(.*?)```", (ROOT / "docs" / "getting-started.md").read_text(encoding="utf-8"), re.S)
    outs = []
    for line in "\n".join(blocks).splitlines():
        argv = shlex.split(line, comments=True)
        if argv[:1] != ["harness"]:
            continue
        outs += [argv[i + 1] for i, a in enumerate(argv) if a == "--out"]
        if argv[1] == "report":
            outs.append(argv[2])
    return outs


def test_the_tour_writes_only_where_git_ignores():
    outs = tour_outputs()
    assert len(outs) >= 8 and "results/hotpot.db" in outs
    proc = subprocess.run(["git", "check-ignore", "--no-index", *outs], cwd=ROOT, capture_output=True, text=True)
    assert proc.stdout.split() == outs, f"not ignored: {sorted(set(outs) - set(proc.stdout.split()))}"


def test_what_the_trackers_write_by_default_is_ignored():
    """--log-to's trackers write into the current folder unless told otherwise (W&B: ./wandb/; MLflow:
    ./mlflow.db and ./mlruns/, its defaults): run from the clone, that must not make it -dirty."""
    outs = ["wandb/offline-run-1/run.wandb", "mlruns/0/artifacts/report.html", "mlflow.db"]
    proc = subprocess.run(["git", "check-ignore", "--no-index", *outs], cwd=ROOT, capture_output=True, text=True)
    assert proc.stdout.split() == outs


@pytest.mark.slow  # a clone and a run
def test_a_run_with_default_outputs_in_a_clean_clone_is_not_dirty(tmp_path):
    """A run inside a fresh clone with the default output folder records the clone's commit without
    ``-dirty``: what a run writes there is ignored."""
    from harness._version import __version__

    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", "--shared", str(ROOT), str(clone))
    env = {**os.environ, "PYTHONPATH": str(clone), "HARNESS_CACHE_DIR": str(tmp_path / "cache")}
    argv = [sys.executable, "-m", "harness", "run", "--model", "scripted/echo", "--dataset", "hotpotqa:dev", "--limit", "2"]
    proc = subprocess.run(argv, cwd=clone, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run,) = (clone / "results").glob("hotpotqa-*")
    record = json.loads((run / "results.json").read_text(encoding="utf-8"))
    assert record["harness"]["git_commit"] == git(clone, "rev-parse", "HEAD")
    assert record["harness"]["version"] == __version__  # pyproject's version, read where the build reads it
    assert git(clone, "status", "--porcelain") == ""
