"""Lazy registries: name -> "module:attr", imported on first use, for strategies, metrics, backends
and datasets.

Three ways in, one lookup:
- built in: the registry's own table of names and "module:attr" references;
- installed plugins: entry points in the group ``harness.agents`` / ``harness.metrics`` /
  ``harness.backends`` / ``harness.datasets`` (``[project.entry-points."harness.agents"]`` in the
  plugin's pyproject), read from package metadata without importing the plugin;
- a reference given where a name is expected: ``FILE.py:NAME`` or ``package.module:NAME``.

Every resolved entry carries its identity: nothing for built-ins (they are the harness's own
code), the package and version for entry points and importable modules, the sha256 of the file
for a ``FILE.py``. Runs record it, and hash it into the run key, so a changed plugin never resumes
an old run.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
import types
from typing import Any, Callable, Generic, Literal, TypeVar, Union, get_args, get_origin

from harness.errors import HarnessError

T = TypeVar("T")

ENTRY_POINT_GROUP = "harness.{kind}s"
# FILE.py:NAME (a path, may hold / and .) or dotted.module:NAME; NAME is a Python attribute
_FILE_REF = re.compile(r"^(?P<module>.+\.py):(?P<attr>[A-Za-z_][A-Za-z0-9_]*)$")
_MODULE_REF = re.compile(r"^(?P<module>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+):(?P<attr>[A-Za-z_]\w*)$")


def is_reference(text: str) -> bool:
    """``FILE.py:NAME`` or ``package.module:NAME`` (a bare ``name:x`` is not: datasets use it for splits)."""
    return bool(_FILE_REF.match(text) or _MODULE_REF.match(text))


def split_reference(text: str) -> tuple[str, str] | None:
    """The leading reference of a longer spec and what follows it: ``p.py:Loader:dev@v1`` ->
    (``p.py:Loader``, ``:dev@v1``); ``p.py:Echo/model`` -> (``p.py:Echo``, ``/model``)."""
    m = re.match(r"^(?P<ref>(?:.+?\.py|[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+):[A-Za-z_]\w*)(?P<rest>(?:[:/@].*)?)$", text)
    return (m["ref"], m["rest"]) if m else None


@dataclass
class Entry(Generic[T]):
    """A resolved registry entry: what to call, and where it came from."""

    name: str
    obj: T
    source: str  # builtin | entry-point | file | module | registered
    ref: str | None = None  # "module:attr" or "FILE.py:attr"
    identity: dict[str, Any] = field(default_factory=dict)

    def record(self) -> dict[str, Any]:
        """What results.json records of it."""
        out: dict[str, Any] = {"name": self.name, "source": self.source}
        if self.ref and self.source != "builtin":
            out["ref"] = self.ref
        out.update(self.identity)
        return out


class Registry(Generic[T]):
    """name -> object, with built-ins and entry points imported only when looked up."""

    def __init__(
        self,
        kind: str,
        builtins: dict[str, str] | None = None,
        validate: Callable[[Any, str], None] | None = None,
        name_attribute: str | None = None,
        group: str | None = None,
        coerce: Callable[[Any, str], T] | None = None,
    ):
        self.kind = kind
        self.name_attribute = name_attribute  # a class registered under a name learns it there
        self.group = group or ENTRY_POINT_GROUP.format(kind=kind)
        self._builtins = dict(builtins or {})
        self._registered: dict[str, T] = {}
        self._given: dict[str, Any] = {}  # what was registered, before coerce
        self._loaded: dict[str, Entry[T]] = {}
        self._validate = validate
        # what every object becomes where it is registered or looked up (a metric function: a Metric)
        self._coerce = coerce
        self._entry_points: dict[str, Any] | None = None

    # registration -------------------------------------------------------------
    def register(self, name: str) -> Callable[[T], T]:
        """Decorator for objects registered in-process (tests, notebooks)."""

        def decorator(obj: T) -> T:
            given = obj
            if self._coerce is not None:
                obj = self._coerce(obj, name)
            if self.name_attribute and isinstance(obj, type):
                setattr(obj, self.name_attribute, name)
            builtin = self._builtins.get(name)
            if builtin is not None:  # a built-in module registering itself is fine; a stand-in is not
                if getattr(obj, "__module__", None) != builtin.partition(":")[0]:
                    raise ValueError(f"{self.kind} {name!r} is built in ({builtin}); register under another name")
                return obj
            if name in self._registered and self._registered[name] is not obj and self._given.get(name) is not given:
                raise ValueError(f"{self.kind} {name!r} registered twice")
            if self._given.get(name) is given:  # the same object again: the same registration
                return self._registered[name]
            self._registered[name] = obj
            self._given[name] = given
            self._loaded.pop(name, None)
            return obj

        return decorator

    def unregister(self, name: str) -> None:
        self._registered.pop(name, None)
        self._given.pop(name, None)
        self._loaded.pop(name, None)

    # lookup ---------------------------------------------------------------------
    def entry_points(self) -> dict[str, Any]:
        if self._entry_points is None:
            from importlib.metadata import entry_points

            self._entry_points = {ep.name: ep for ep in entry_points(group=self.group)}
        return self._entry_points

    def names(self) -> list[str]:
        """Every known name, without importing anything."""
        return sorted(set(self._builtins) | set(self._registered) | set(self.entry_points()))

    def __contains__(self, name: str) -> bool:
        return name in self._registered or name in self._builtins or name in self.entry_points()

    def resolve(self, name_or_ref: str) -> Entry[T]:
        """Look up a name or load a ``FILE.py:NAME`` / ``module:NAME`` reference."""
        key = name_or_ref.strip()
        if key in self._loaded:
            return self._loaded[key]
        if key in self._builtins:
            entry = Entry(key, _import_ref(self._builtins[key], self.kind, key), "builtin", self._builtins[key])
        elif key in self._registered:
            entry = Entry(key, self._registered[key], "registered")
        elif key in self.entry_points():
            ep = self.entry_points()[key]
            try:
                obj = ep.load()
            except Exception as exc:  # a broken plugin: one line naming it, not a traceback
                raise HarnessError(
                    f"{self.kind} {key!r} (entry point {ep.value}): cannot load: {_short(exc)}"
                ) from None
            dist = getattr(ep, "dist", None)
            identity = {"package": dist.name, "version": dist.version} if dist is not None else {}
            entry = Entry(key, obj, "entry-point", ep.value, identity)
        elif is_reference(key):
            obj, source, identity = load_reference(key, self.kind)
            entry = Entry(getattr(obj, "name", None) or key.rpartition(":")[2], obj, source, key, identity)
        else:
            raise HarnessError(
                f"unknown {self.kind} {key!r} (known: {', '.join(self.names()) or 'none'}; "
                f"or FILE.py:NAME, package.module:NAME)"
            )
        if self._coerce is not None:
            entry.obj = self._coerce(entry.obj, key)
        if self._validate is not None:
            self._validate(entry.obj, key)
        if entry.source != "file":  # a file is read again each time: an edited plugin is new code (notebooks)
            self._loaded[key] = entry
        return entry

    def get(self, name_or_ref: str) -> T:
        return self.resolve(name_or_ref).obj

    def source_of(self, name: str) -> str:
        if name in self._builtins:
            return "builtin"
        if name in self._registered:
            return "registered"
        if name in self.entry_points():
            ep = self.entry_points()[name]
            dist = getattr(ep, "dist", None)
            return f"entry point ({dist.name} {dist.version})" if dist is not None else "entry point"
        return "reference"


def _short(exc: BaseException) -> str:
    return " ".join(f"{type(exc).__name__}: {exc}".split())[:300]


def _import_ref(ref: str, kind: str, name: str) -> Any:
    module, _, attr = ref.partition(":")
    mod = importlib.import_module(module)
    try:
        return getattr(mod, attr)
    except AttributeError:
        raise HarnessError(f"{kind} {name!r}: {module} has no {attr!r}") from None


_FILE_MODULES: dict[str, Any] = {}  # resolved path -> module: a file is executed once per process


def load_reference(ref: str, kind: str) -> tuple[Any, str, dict[str, Any]]:
    """(object, source, identity) for ``FILE.py:NAME`` or ``package.module:NAME``."""
    m = _FILE_REF.match(ref)
    if m:
        path = Path(m["module"]).expanduser()
        if not path.is_file():
            what = "is a folder, not a Python file" if path.is_dir() else "not found"
            raise HarnessError(f"{kind} {ref}: {path} {what}")
        data = path.read_bytes()
        sha256 = hashlib.sha256(data).hexdigest()
        key = str(path.resolve())
        module = _FILE_MODULES.get(key)
        if module is None or module.__harness_sha256__ != sha256:
            stem = re.sub(r"\W", "_", path.stem)
            module_name = f"harness_plugin_{sha256[:12]}_{stem}"
            spec = importlib.util.spec_from_file_location(module_name, path)
            if spec is None or spec.loader is None:
                raise HarnessError(f"{kind} {ref}: cannot import {path}")
            module = importlib.util.module_from_spec(spec)
            module.__harness_sha256__ = sha256
            sys.modules[module_name] = module  # dataclasses and pickling look modules up by name
            try:
                spec.loader.exec_module(module)
            except Exception as exc:
                sys.modules.pop(module_name, None)
                raise HarnessError(f"{kind} {ref}: importing {path} failed: {_short(exc)}") from None
            _FILE_MODULES[key] = module
        try:
            obj = getattr(module, m["attr"])
        except AttributeError:
            raise HarnessError(f"{kind} {ref}: {path} defines no {m['attr']!r}") from None
        return obj, "file", {"file": str(path), "sha256": sha256}
    m = _MODULE_REF.match(ref)
    if not m:
        raise HarnessError(f"{kind} {ref!r}: expected FILE.py:NAME or package.module:NAME")
    try:
        module = importlib.import_module(m["module"])
    except Exception as exc:
        raise HarnessError(f"{kind} {ref}: cannot import {m['module']}: {_short(exc)}") from None
    try:
        obj = getattr(module, m["attr"])
    except AttributeError:
        raise HarnessError(f"{kind} {ref}: {m['module']} defines no {m['attr']!r}") from None
    return obj, "module", module_identity(module)


def module_identity(module: Any) -> dict[str, Any]:
    """The installed package and version that provide a module, else the sha256 of its file."""
    from importlib.metadata import packages_distributions, version

    top = module.__name__.split(".")[0]
    dists = packages_distributions().get(top) or []
    if dists:
        return {"package": dists[0], "version": version(dists[0])}
    path = getattr(module, "__file__", None)
    if path and Path(path).is_file():
        return {"file": path, "sha256": hashlib.sha256(Path(path).read_bytes()).hexdigest()}
    return {}


def type_text(hint: Any) -> str:
    """A declared type (a knob's, a metric option's, a gold answer's) as listings and docs show it:
    ``int``, ``str | None``, ``a|b`` for a Literal, ``list[QampariEntity]``, ``Any``."""
    if hint is None or hint is type(None):
        return "None"
    if hint is Any:
        return "Any"
    origin = get_origin(hint)
    if origin is Union or origin is types.UnionType:
        return " | ".join(type_text(arg) for arg in get_args(hint))
    if origin is Literal:
        return "|".join(map(str, get_args(hint)))
    if origin is not None:
        return f"{getattr(origin, '__name__', str(origin))}[{', '.join(type_text(a) for a in get_args(hint))}]"
    return getattr(hint, "__name__", None) or str(hint).replace("typing.", "")
