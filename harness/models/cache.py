"""SQLite response cache keyed by backend identity, messages, tools and generation parameters.

The key never includes an API key: ``cache_identity()`` of a backend names the backend, model
and endpoint only (credentials stripped). Requests that are not repeatable (sampling without a
seed) are not cached.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
from pathlib import Path
from typing import Any

from harness.errors import ConfigError
from harness.models.base import GenerationParams, ModelResponse
from harness.redact import dumps_redacted
from harness.records import file_kind
from harness.text import hash_bytes, json_text


def default_cache_path() -> Path:
    root = os.environ.get("HARNESS_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "harness")
    return Path(root) / "responses.sqlite"


def cache_key(
    identity: dict[str, Any],
    messages: list[dict[str, Any]],
    params: GenerationParams,
    tools: list[dict[str, Any]] | None,
    tool_choice: Any,
) -> str:
    payload = {
        "identity": identity,
        "messages": messages,
        "params": params.model_dump(mode="json"),
        "tools": tools,
        "tool_choice": tool_choice,
    }
    return hashlib.sha256(hash_bytes(json.dumps(payload, sort_keys=True, ensure_ascii=False))).hexdigest()


def is_cacheable(params: GenerationParams) -> bool:
    return params.temperature == 0 or params.seed is not None


class ResponseCache:
    def __init__(self, path: str | Path | None = None):
        self.path = Path(path) if path else default_cache_path()
        try:
            if self.path.is_dir():
                raise IsADirectoryError(21, "is a directory")
            if self.path.exists() and not self.path.is_file():  # SQLite would write /dev/null-wal beside a device
                raise OSError(22, f"{file_kind(self.path.stat().st_mode)}, not a regular file")
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            # no fsync per answer (it cost ~0.3 ms each): a crash loses nothing; a power loss at
            # worst the last answers, asked again (a cache; the database stays consistent)
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute("CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, response TEXT NOT NULL)")
        except (OSError, sqlite3.Error) as exc:
            reason = getattr(exc, "strerror", None) or str(exc)
            raise ConfigError(
                f"--cache-path {self.path}: unusable as the response cache ({reason}); "
                "pass another --cache-path or --no-cache"
            ) from None

    def get(self, key: str) -> ModelResponse | None:
        row = self._db.execute("SELECT response FROM responses WHERE key = ?", (key,)).fetchone()
        if row is None:
            return None
        text = row[0]
        # pydantic's JSON parser refuses the \udXXX escape of a lone surrogate (put): json.loads reads it
        if "\\ud" in text:
            response = ModelResponse.model_validate(json.loads(text))
        else:
            response = ModelResponse.model_validate_json(text)
        response.cached = True
        return response

    def put(self, key: str, response: ModelResponse) -> None:
        # an answer may echo a key (a server quoting the request's header): masked like the run's files
        # a lone surrogate (a "\ud800" in the reply) is stored as that escape: SQLite cannot encode it
        data = response.model_dump(mode="json")
        text = dumps_redacted(data, lambda value: json_text(json.dumps(value, ensure_ascii=False)))
        self._db.execute("INSERT OR REPLACE INTO responses (key, response) VALUES (?, ?)", (key, text))

    def close(self) -> None:
        self._db.close()
