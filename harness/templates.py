"""Plain-text prompt templates (``str.format`` fields) from ``prompts/``, by name, or from a file path;
and the fixed texts the harness fills itself (``packaged_text``)."""

from __future__ import annotations

import hashlib
from importlib import resources
from pathlib import Path

from harness.errors import ConfigError
from harness.records import MAX_SMALL_BYTES, read_input


def load_template(name_or_path: str) -> tuple[str, str, str]:
    """Return (template text, where it came from, sha256 of its bytes)."""
    path = Path(name_or_path)
    if path.suffix == ".txt" and path.is_file():
        data = read_input(path, "--prompt-template", ConfigError, MAX_SMALL_BYTES)
        where = str(path.resolve())
    else:
        resource = resources.files("harness.prompts") / f"{name_or_path}.txt"
        if not resource.is_file():
            raise ConfigError(f"--prompt-template {name_or_path!r}: not found (a name in prompts/ or a .txt file)")
        data = resource.read_bytes()
        where = f"prompts/{name_or_path}.txt"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"--prompt-template {where}: not UTF-8 text") from None
    if not text.strip():
        raise ConfigError(f"--prompt-template {where}: the template is empty")
    return text, where, hashlib.sha256(data).hexdigest()


def packaged_text(relative: str) -> str:
    """A text shipped under ``prompts/`` by its path there, e.g. ``"fanoutqa/judge_system.txt"``: the
    benchmark texts the harness fills itself (the judge's prompt, the search tool's replies), read
    as UTF-8, byte for byte (no newline added or stripped)."""
    node = resources.files("harness.prompts")
    for part in relative.split("/"):
        node = node / part
    return node.read_bytes().decode("utf-8")
