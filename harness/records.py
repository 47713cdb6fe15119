"""Run files: samples.jsonl is appended one flushed line per finished sample; JSON files are
replaced atomically, so a kill at any moment leaves every file whole."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Iterator

from harness.errors import HarnessError


def _read_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# Read once at import: os.umask can only be read by setting it, which is not thread-safe later on.
_UMASK = _read_umask()


def write_json_atomic(path: str | Path, data: Any) -> None:
    write_bytes_atomic(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def write_bytes_atomic(path: str | Path, data: bytes | str) -> None:
    """Any file (JSON, HTML, PNG, JSONL) written whole or not at all: a temp file, fsync, then rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        # mkstemp makes the file private; results are meant to be shared, as a plain open() would make them
        os.chmod(tmp, 0o666 & ~_UMASK)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_json(path: str | Path) -> Any:
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise HarnessError(f"file not found: {path}") from None
    except json.JSONDecodeError as exc:
        raise HarnessError(f"{path}: not valid JSON ({exc})") from None


class JsonlAppender:
    """Appends records as single ``write`` calls followed by flush + fsync."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        repair_jsonl_tail(self.path)
        self._file = open(self.path, "a", encoding="utf-8")

    def append(self, record: dict[str, Any]) -> None:
        self._file.write(json.dumps(record, ensure_ascii=False) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()


def repair_jsonl_tail(path: Path) -> None:
    """Drop a last line left incomplete by a kill mid-write (no trailing newline)."""
    if not path.exists() or path.stat().st_size == 0:
        return
    with open(path, "rb+") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        f.seek(size - 1)
        if f.read(1) == b"\n":
            return
        # scan back to the last newline
        pos = size - 1
        chunk = 4096
        while pos > 0:
            start = max(0, pos - chunk)
            f.seek(start)
            data = f.read(pos - start)
            idx = data.rfind(b"\n")
            if idx != -1:
                f.truncate(start + idx + 1)
                return
            pos = start
        f.truncate(0)


def iter_jsonl(path: str | Path, *, strict: bool = True) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (line number, record). With ``strict`` a bad line is a one-line HarnessError naming it."""
    path = Path(path)
    try:
        f = open(path, encoding="utf-8")
    except FileNotFoundError:
        raise HarnessError(f"file not found: {path}") from None
    with f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                if strict:
                    raise HarnessError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from None
                continue
            if not isinstance(record, dict):
                if strict:
                    raise HarnessError(f"{path}:{lineno}: expected a JSON object")
                continue
            yield lineno, record
