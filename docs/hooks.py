"""MkDocs hook: the build fails when a generated page (CLI reference, JSON Schemas) is stale."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from mkdocs.exceptions import PluginError


def on_pre_build(config, **kwargs) -> None:
    spec = importlib.util.spec_from_file_location("docs_gen", Path(__file__).with_name("gen.py"))
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    bad = gen.stale()
    if bad:
        raise PluginError(f"stale generated docs: {', '.join(bad)}; run python docs/gen.py")
