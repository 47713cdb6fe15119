"""One import namespace: ``harness.agents``, ``harness.tools``, ``harness.prompts`` and
``harness.wiki_snapshot``.

The repository keeps these four folders beside ``harness/``; the wheel puts them inside it
(pyproject's ``package-dir``), so site-packages holds no generic top-level name. Two finders, installed
by ``harness/__init__.py``:

- ``SourceTree`` (first on ``sys.meta_path``): run from a source tree (an editable install, or
  ``PYTHONPATH=CLONE``), ``harness.agents`` ... are that tree's own folders. It answers for exactly
  those four names, so a ``PYTHONPATH`` clone wins over another tree's editable install, whose
  finder would otherwise answer for the submodule ``harness.agents``.
- ``OldNames``: the old top-level names (``import agents``, ``from wiki_snapshot import ...``,
  ``tools``, ``prompts``) kept for one release as aliases of the same module objects (one module
  per file: a registry never doubles), each with one FutureWarning naming the new path. A top-level
  ``tools`` (or ``agents`` ...) that the rest of the import system finds elsewhere (a user's own
  folder on ``sys.path``, another distribution) wins: the alias stands in only where nothing else
  would be imported, or where what would be imported is this harness's own folder under its old name
  (a clone's root on ``sys.path``), which would otherwise load each file a second time.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import os
import sys
import warnings
from pathlib import Path

SUBPACKAGES = ("agents", "tools", "prompts", "wiki_snapshot")
_PKG = Path(__file__).resolve().parent
_ROOT = _PKG.parent


def source_tree_dirs() -> dict[str, Path]:
    """``{"harness.agents": ROOT/agents, ...}`` when this harness runs from a source tree (the
    folders beside ``harness/``, ``pyproject.toml`` at the root, none of them inside ``harness/``);
    empty for an installed wheel."""
    if not (_ROOT / "pyproject.toml").is_file():
        return {}
    found = {f"harness.{n}": _ROOT / n for n in SUBPACKAGES if (_ROOT / n / "__init__.py").is_file()}
    if len(found) != len(SUBPACKAGES) or any((_PKG / n).exists() for n in SUBPACKAGES):
        return {}
    return found


def own_dir(name: str) -> Path:
    """Where ``harness.NAME``'s files are: inside the package (a wheel) or beside it (a source tree)."""
    inside = _PKG / name
    return inside if inside.is_dir() else _ROOT / name


class SourceTree(importlib.abc.MetaPathFinder):
    _harness_namespace = True

    def __init__(self, dirs: dict[str, Path]):
        self.dirs = dirs

    def find_spec(self, fullname, path=None, target=None):
        where = self.dirs.get(fullname)
        if where is None:
            return None
        return importlib.util.spec_from_file_location(
            fullname, where / "__init__.py", submodule_search_locations=[str(where)]
        )


class _Alias(importlib.abc.Loader):
    """Loads an old name as the already imported ``harness.*`` module itself."""

    def __init__(self, module):
        self.module = module
        self.spec = module.__spec__

    def create_module(self, spec):
        return self.module

    def exec_module(self, module):
        module.__spec__ = self.spec  # the import system set the alias's; the module keeps its own
        old = self.module.__name__.removeprefix("harness.")
        if "." not in old:  # one line per old package (its submodules follow it)
            warnings.warn(
                f"the top-level package `{old}` is deprecated: import `{self.module.__name__}` "
                f"(`{old}.X` is `{self.module.__name__}.X`); the old name goes in the next release",
                FutureWarning,
                stacklevel=2,
            )


class OldNames(importlib.abc.MetaPathFinder):
    _harness_namespace = True

    def find_spec(self, fullname, path=None, target=None):
        top, _, rest = fullname.partition(".")
        if top not in SUBPACKAGES:
            return None
        if rest:  # a submodule: only below our own alias (a user's own `tools` keeps its own submodules)
            if top not in sys.modules or sys.modules[top] is not sys.modules.get(f"harness.{top}"):
                return None
        elif self._found_elsewhere(top):
            return None
        new = f"harness.{fullname}"
        try:
            module = importlib.import_module(new)
        except ModuleNotFoundError as exc:
            if exc.name == new:
                return None  # the import fails as it did, naming the old name
            raise
        return importlib.util.spec_from_loader(fullname, _Alias(module), is_package=hasattr(module, "__path__"))

    def _found_elsewhere(self, top: str) -> bool:
        """Whether the finders after this one would import something other than our own folder as ``top``."""
        ours = own_dir(top)
        for finder in sys.meta_path:
            if getattr(finder, "_harness_namespace", False) or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(top, None)
            if spec is None:
                continue
            places = list(spec.submodule_search_locations or [])
            if not places and spec.origin:
                places = [os.path.dirname(spec.origin)]
            return not any(Path(p).resolve() == ours for p in places)
        return False


def install() -> None:
    """Put the finders on ``sys.meta_path`` once per process (the source tree's only from one)."""
    if any(getattr(f, "_harness_namespace", False) for f in sys.meta_path):
        return
    dirs = source_tree_dirs()
    sys.meta_path.insert(0, OldNames())
    if dirs:
        sys.meta_path.insert(0, SourceTree(dirs))
