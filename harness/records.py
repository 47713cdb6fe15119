"""Run files: samples.jsonl is appended one flushed line per finished sample; JSON files are
replaced atomically, so a kill at any moment leaves every file whole."""

from __future__ import annotations

import io
import json
import re
import math
import os
import stat
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from harness.errors import HarnessError
from harness.redact import dumps_redacted, redact_data
from harness.text import JSON_ERRORS, document_bytes


# The files of a run directory
SAMPLES_FILE = "samples.jsonl"
FAILURES_FILE = "failures.jsonl"
RESULTS_FILE = "results.json"
RETRIEVAL_FILE = "retrieval.json"  # harness retrieval-eval --out-dir: a retriever alone, no reader
CONFIG_FILE = "config.json"
ERROR_LOG = "errors.log"
LOG_DIR = "logs"  # logs of the processes a backend starts (model worker, launched server)


# Size caps of input files, checked before reading: /dev/zero or a runaway file is one line, not a
# MemoryError. Data (datasets, generations, run files) may be large; option files are small by nature.
MAX_DATA_BYTES = 4 * 2**30  # 4 GiB: dataset files, --generations, results.json / samples.jsonl
MAX_SMALL_BYTES = 16 * 2**20  # 16 MiB: --config, --price-table, --metadata, --prompt-template


def _read_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# Read once at import: os.umask can only be read by setting it, which is not thread-safe later on.
_UMASK = _read_umask()


def to_json(data: Any, **kwargs: Any) -> str:
    """Strict JSON: NaN/inf (invalid JSON for every other reader) are written as null. A lone
    surrogate stays in the text as it is: written with ``JSON_ERRORS`` (``harness.text``), as JSON's
    escape."""
    try:
        return json.dumps(data, ensure_ascii=False, allow_nan=False, **kwargs)
    except ValueError:
        return json.dumps(_finite(data), ensure_ascii=False, allow_nan=False, **kwargs)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def write_json_atomic(path: str | Path, data: Any) -> None:
    """``data`` as indented JSON, written whole or not at all (``write_bytes_atomic``); encoded
    straight into the file, so a large results.json is never also held as one string."""
    data = redact_data(data)

    def write(f) -> None:
        text = io.TextIOWrapper(f, encoding="utf-8", errors=JSON_ERRORS, newline="\n", write_through=False)
        try:
            json.dump(data, text, ensure_ascii=False, allow_nan=False, indent=2)
        except ValueError:  # NaN/inf: written again, as null
            text.flush()
            f.seek(0)
            f.truncate()
            json.dump(_finite(data), text, ensure_ascii=False, allow_nan=False, indent=2)
        text.write("\n")
        text.flush()
        text.detach()

    write_atomic(path, write)


def file_kind(mode: int) -> str:
    """What a non-regular file is, for messages: ``a FIFO``, ``a character device``, ..."""
    for test, name in (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def _output_target(path: Path) -> tuple[Path, os.stat_result | None]:
    """Where writing ``path`` lands (symlinks resolved: a link is written through, never replaced)
    and what is there now (None: nothing yet)."""
    target = Path(os.path.realpath(path))
    if target.is_symlink():  # realpath stops at a loop
        raise HarnessError(f"{path}: a symbolic link loop")
    try:
        return target, os.stat(target)
    except FileNotFoundError:
        return target, None
    except NotADirectoryError:
        return target, None  # a file where a folder should be: reported by the caller
    except OSError as exc:
        raise HarnessError(f"{path}: cannot write ({exc.strerror or exc})") from None


def write_bytes_atomic(path: str | Path, data: bytes | str) -> None:
    """Any file (JSON, HTML, PNG, JSONL) written whole or not at all: a temp file, fsync, then rename.
    Only a regular file (or a new path) is written: a rename would replace a device, a FIFO or a
    folder with a file (/dev/null as root). A symlink is followed and its target replaced. Text
    (``str``) is a document: a lone surrogate in it is written as U+FFFD and counted on stderr
    (``harness.text.document_bytes``); JSON is passed as ``json_bytes(text)``, escaping it instead."""
    data = document_bytes(data, path) if isinstance(data, str) else data
    write_atomic(path, lambda f: f.write(data))


def write_atomic(path: str | Path, write: Callable[[Any], None]) -> None:
    """``write(f)`` into a temp file beside ``path`` (binary), fsync, rename over ``path``."""
    path = Path(path)
    target, st = _output_target(path)
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise HarnessError(f"{path}: is a directory, cannot write a file there")
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise HarnessError(f"{path}: is {file_kind(st.st_mode)}, not a regular file; not written")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as exc:
        raise HarnessError(f"cannot write {path}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        # mkstemp makes the file private; results are meant to be shared, as a plain open() would make them
        os.chmod(tmp, 0o666 & ~_UMASK)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def check_output_path(path: str | Path, option: str, directory: bool = False) -> Path:
    """Refuse, before any work, an output that cannot be written: a folder where a file goes (or the
    reverse), a device, FIFO or socket (only regular files are written), or a place below a file or
    in a folder this user cannot write. A symlink is judged by what it points at. A file's name
    ending in "/" names a folder (``Path`` would drop the slash and write the file)."""
    if not directory and str(path).endswith(("/", os.sep)):
        raise HarnessError(f"{option} {path}: ends in '/', so names a folder; name the file to write")
    path = Path(path)
    try:
        target, st = _output_target(path)
    except HarnessError as exc:
        raise HarnessError(f"{option} {exc}") from None
    if st is not None:
        if directory and not stat.S_ISDIR(st.st_mode):
            what = "a file" if stat.S_ISREG(st.st_mode) else file_kind(st.st_mode)
            raise HarnessError(f"{option} {path}: is {what}, not a folder")
        if not directory and stat.S_ISDIR(st.st_mode):
            raise HarnessError(f"{option} {path}: is a folder, not a file")
        if not directory and not stat.S_ISREG(st.st_mode):
            raise HarnessError(f"{option} {path}: is {file_kind(st.st_mode)}; only regular files are written")
    # a file is replaced (a new one made beside it): its folder must be writable
    ancestor = target if st is not None and directory else target.parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise HarnessError(f"{option} {path}: cannot be created ({ancestor} is a file)")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise HarnessError(f"{option} {path}: cannot be written (no permission in {ancestor})")
    return path


def plain_file_name(value: str, option: str) -> str:
    """A name that can only land inside the folder it is joined to: no separators, no '..', no hidden
    or option-like names (``--file-name ../../x`` must not write outside ``--out``)."""
    bad = (
        not value
        or value in (".", "..")
        or any(c in value for c in "/\\\0")
        or value.startswith((".", "-"))
        or len(value) > 200
        or any(ord(c) < 32 for c in value)
    )
    if bad:
        raise HarnessError(f"{option} {value!r}: must be a plain file name (no '/', '..' or leading '.')")
    return value


def _size(n: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:g} {unit}"
    return f"{n} bytes"


def open_input(
    path: str | Path, option: str = "", error: type[HarnessError] = HarnessError, max_bytes: int = MAX_DATA_BYTES
):
    """An input file opened for binary reading, or one line naming ``option``: missing, a folder, not
    a regular file (a FIFO would block the open, /dev/zero never ends: neither is opened), or larger
    than ``max_bytes``."""
    where = f"{option} {path}" if option else str(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise error(f"{where}: file not found") from None
    except OSError as exc:  # a file where a folder should be, no permission
        raise error(f"{where}: cannot read ({exc.strerror or exc})") from None
    if stat.S_ISDIR(st.st_mode):
        raise error(f"{where}: is a folder, not a file")
    if not stat.S_ISREG(st.st_mode):
        raise error(f"{where}: is {file_kind(st.st_mode)}; only regular files are read")
    if st.st_size > max_bytes:
        raise error(f"{where}: {_size(st.st_size)}, larger than the {_size(max_bytes)} limit")
    try:
        # O_NONBLOCK: a FIFO swapped in after the stat still cannot block the open (refused below)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise error(f"{where}: cannot read ({exc.strerror or exc})") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise error(f"{where}: not a regular file; only regular files are read")
    return os.fdopen(fd, "rb")


def read_input(
    path: str | Path, option: str = "", error: type[HarnessError] = HarnessError, max_bytes: int = MAX_DATA_BYTES
) -> bytes:
    """An input file's bytes; a missing, unreadable, non-regular or oversized file is one line naming
    ``option`` (see ``open_input``)."""
    where = f"{option} {path}" if option else str(path)
    with open_input(path, option, error, max_bytes) as f:
        # read(max_bytes + 1) would allocate the whole limit (4 GiB) up front: asked for the size
        # seen plus one byte, then more while it keeps coming (the file may have grown since)
        chunks, size = [], 0
        want = os.fstat(f.fileno()).st_size + 1
        try:
            while size <= max_bytes:
                chunk = f.read(min(max(want - size, 2**20), max_bytes + 1 - size))
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
        except OSError as exc:
            raise error(f"{where}: cannot read ({exc.strerror or exc})") from None
    data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
    if len(data) > max_bytes:
        raise error(f"{where}: larger than the {_size(max_bytes)} limit")
    return data


def read_yaml_table(
    path: str | Path, option: str, error: type[HarnessError], shape: str
) -> tuple[bytes, dict[str, Any]]:
    """A YAML table of ``models`` (the price table, the model facts): its bytes (for the sha256 a run
    records) and its mapping; unreadable, not YAML or without a ``models`` mapping: one line, ``shape``
    saying what an entry looks like."""
    import yaml

    raw = read_input(path, option, error, MAX_SMALL_BYTES)
    where = f"{option} {path}"  # which option named the file, as read_input's own errors say
    try:
        data = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        raise error(f"{where}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(data, dict) or not isinstance(data.get("models"), dict):
        raise error(f"{where}: expected a mapping with 'models: {{{shape}}}'")
    return raw, data


def read_input_text(
    path: str | Path, option: str = "", error: type[HarnessError] = HarnessError, max_bytes: int = MAX_DATA_BYTES
) -> str:
    try:
        return read_input(path, option, error, max_bytes).decode("utf-8")
    except UnicodeDecodeError:
        raise error(f"{option + ' ' if option else ''}{path}: not UTF-8 text") from None


def slug(text: str) -> str:
    """``text`` as a short file-name part (run directory names)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_")[:60]


def read_json(
    path: str | Path, option: str = "", error: type[HarnessError] = HarnessError, max_bytes: int = MAX_DATA_BYTES
) -> Any:
    return parse_json(read_input_text(path, option, error, max_bytes), path, option, error)


def parse_json(text: str, path: str | Path, option: str = "", error: type[HarnessError] = HarnessError) -> Any:
    """``text`` (read from ``path``) parsed, or ``error`` naming the file and where the JSON breaks."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise error(f"{option + ' ' if option else ''}{path}: not valid JSON ({exc})") from None


class JsonlAppender:
    """Appends records as single ``write`` calls, each flushed to the OS at once (a killed process
    loses nothing written). ``fsync`` (surviving a power loss) is grouped: at most every
    ``sync_every`` seconds and at close, instead of one per record (1,240 fsyncs cost seconds)."""

    def __init__(self, path: str | Path, sync_every: float = 0.5):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        _, st = _output_target(self.path)
        if st is not None and not stat.S_ISREG(st.st_mode):  # opening a FIFO to append would block
            raise HarnessError(f"{self.path}: is {file_kind(st.st_mode)}; only regular files are written")
        repair_jsonl_tail(self.path)
        # a lone surrogate in a record (a "\ud800" in a reply) is written as that escape, read back the same
        self._file = open(self.path, "a", encoding="utf-8", errors=JSON_ERRORS)
        self.sync_every = sync_every
        self._synced = time.monotonic()
        self._unsynced = False

    def append(self, record: dict[str, Any]) -> None:
        self._file.write(dumps_redacted(record, to_json) + "\n")
        self._file.flush()
        self._unsynced = True
        if time.monotonic() - self._synced >= self.sync_every:
            self.sync()

    def sync(self) -> None:
        if self._unsynced and not self._file.closed:
            os.fsync(self._file.fileno())
            self._unsynced = False
        self._synced = time.monotonic()

    def close(self) -> None:
        if not self._file.closed:
            self.sync()
            self._file.close()


def repair_jsonl_tail(path: Path) -> None:
    """Drop a last line left incomplete by a kill mid-write (no trailing newline)."""
    if not path.is_file() or path.stat().st_size == 0:  # is_file: a FIFO is never opened
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


def iter_jsonl(
    path: str | Path,
    *,
    strict: bool = True,
    torn_tail: bool = False,
    option: str = "",
    max_bytes: int = MAX_DATA_BYTES,
) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (line number, record). With ``strict`` a bad line (not UTF-8, not JSON, not an object) is
    a one-line HarnessError naming ``file:line``; without, it is skipped. ``torn_tail`` (a run's own
    rows): a bad last line without its newline is skipped all the same, as a kill mid-append leaves
    one (the run's writer cuts it off when it opens the file again); a bad line anywhere else is no
    kill's doing and is refused. The file is checked as ``open_input`` checks it (a regular file
    within ``max_bytes``)."""
    path = Path(path)
    with open_input(path, option, max_bytes=max_bytes) as f:
        lineno = 0
        while True:
            try:
                raw = f.readline()
            except OSError as exc:
                raise HarnessError(f"{path}: cannot read ({exc.strerror or exc})") from None
            if not raw:
                break
            lineno += 1
            try:
                line = raw.decode("utf-8", "strict" if strict else "replace")
            except UnicodeDecodeError:
                problem = "not UTF-8 text"
            else:
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as exc:
                    problem = f"not valid JSON ({exc.msg})"
                except RecursionError:
                    problem = "not valid JSON (nested too deep to read)"
                else:
                    if isinstance(record, dict):
                        yield lineno, record
                        continue
                    problem = "expected a JSON object"
            if not strict or (torn_tail and not raw.endswith(b"\n")):
                continue
            if torn_tail:
                problem += (
                    "; not a last line cut short by a kill (those are skipped): this line is damaged, "
                    "remove or repair it and run the command again"
                )
            raise HarnessError(f"{path}:{lineno}: {problem}")


def work_key(sample_id: str, epoch: int = 1) -> str:
    """A sample's key in a run: its id for epoch 1 (a run without --epochs is keyed as it always
    was), ``ID@E`` for epoch E."""
    return sample_id if epoch == 1 else f"{sample_id}@{epoch}"


def record_epoch(record: dict[str, Any]) -> int:
    """The epoch of a sample record (1 when it has none: runs without --epochs)."""
    epoch = record.get("epoch", 1)
    return epoch if isinstance(epoch, int) and not isinstance(epoch, bool) and epoch >= 1 else 1


class HeldRows:
    """The finished rows a run holds until its end, by work key, each as its compact JSON text in an
    unnamed file beside the run's own (the kernel drops it when the run ends, kill -9 included), so a
    run's memory stays flat while 100,000 samples finish (issue 25): what stays in memory is a key
    and a file position per row (~0.1 KB), not the row (~0.4 KB packed, ~2 KB as dicts). Rows are
    JSON values already (each was written to samples.jsonl), so a row read back equals the row held."""

    __slots__ = ("_at", "_dir", "_file", "_end")

    def __init__(self, spool_dir: str | os.PathLike | None = None) -> None:
        self._at: dict[str, int] = {}  # key -> offset << 32 | length in the spool
        self._dir = spool_dir  # None: the system's temporary directory
        self._file: Any = None  # opened at the first row
        self._end = 0

    def __contains__(self, key: object) -> bool:
        return key in self._at

    def __len__(self) -> int:
        return len(self._at)

    def __iter__(self) -> Iterator[str]:
        return iter(self._at)

    def __setitem__(self, key: str, row: dict[str, Any]) -> None:
        data = json.dumps(row, ensure_ascii=False, separators=(",", ":")).encode("utf-8", JSON_ERRORS)
        if len(data) >= 2**32:
            raise ValueError(f"a row of {len(data):,} bytes is over what a held row may be (4 GiB)")
        if self._file is None:
            # O_TMPFILE where the file system has it: no name, nothing left behind by any death
            self._file = tempfile.TemporaryFile(prefix=".held-rows-", dir=self._dir)
        self._file.write(data)  # an update appends: the row's earlier text is left unread
        self._at[key] = self._end << 32 | len(data)
        self._end += len(data)

    def _read(self, at: int) -> bytes:
        return os.pread(self._file.fileno(), at & 0xFFFFFFFF, at >> 32)

    def __getitem__(self, key: str) -> dict[str, Any]:
        at = self._at[key]
        self._file.flush()
        return json.loads(self._read(at))

    def get(self, key: str, default: Any = None) -> Any:
        return self[key] if key in self._at else default

    def update(self, key: str, **fields: Any) -> None:
        """Add ``fields`` to the row held under ``key`` (a streamed score arriving after its row)."""
        if key in self._at:
            self[key] = {**self[key], **fields}

    def close(self) -> None:
        """Let go of the spool (rows not taken are gone)."""
        if self._file is not None:
            self._file.close()
            self._file = None
        self._at.clear()
        self._end = 0

    def take(self, keys: list[str]) -> list[dict[str, Any]]:
        """The rows of ``keys`` (those held), in that order, each let go as it is decoded: the end of
        a run never holds a row twice. Decoded a thousand at a time (fewer where they pass 8 MiB), in
        one JSON text: the decoder shares the key strings of the rows it reads at once (one call per
        row made each row's keys anew, ~0.8 KB a row of score values). The spool is closed once no
        row is left in it."""
        held = [k for k in keys if k in self._at]
        rows: list[dict[str, Any]] = []
        shared: dict[str, str] = {}
        floats: dict[str, float] = {}

        def shared_float(text: str) -> float:  # score values repeat (0.0, 1.0, 0.5): one object each
            try:
                return floats[text]
            except KeyError:
                value = float(text)
                if len(floats) < 4096:
                    floats[text] = value
                return value

        if held:
            self._file.flush()
        at = 0
        while at < len(held):
            batch, size = [], 0
            while at < len(held) and len(batch) < 1000 and (not batch or size < self.BATCH_BYTES):
                batch.append(self._read(self._at.pop(held[at])))
                size += len(batch[-1])
                at += 1
            packed = b"[" + b",".join(batch) + b"]"
            del batch
            chunk = json.loads(packed, parse_float=shared_float)
            del packed
            for row in chunk:  # values most rows repeat: one string, not one a row
                for field in self.REPEATED:
                    value = row.get(field)
                    if isinstance(value, str):
                        row[field] = shared.setdefault(value, value)
            rows.extend(chunk)
        if not self._at:
            self.close()
        return rows

    REPEATED = ("status", "outcome", "scored_with")
    # a batch's text, held thrice while it is decoded (bytes, text, values): rows of answers near
    # --max-response-bytes (16 MiB) were decoded a thousand at a time, 48 MiB each at once (issue 45)
    BATCH_BYTES = 8 * 2**20


def load_finished(
    run_dir: Path,
    keep: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    into: HeldRows | dict[str, dict[str, Any]] | None = None,
) -> Any:
    """Finished sample records keyed by ``work_key`` (the first record of each wins); ``keep``: what
    of each record to hold (applied as each is read, so the whole records are never all in memory);
    ``into``: where to hold them (a ``HeldRows``: packed), a dict by default."""
    finished: Any = {} if into is None else into
    path = run_dir / SAMPLES_FILE
    if not path.exists():
        return finished
    repair_jsonl_tail(path)
    for _, record in iter_jsonl(path, torn_tail=True):
        if record.get("status") == "ok" and isinstance(record.get("id"), str):
            key = work_key(record["id"], record_epoch(record))
            if key not in finished:
                finished[key] = record if keep is None else keep(record)
    return finished


# A transcript message holding this key has the record's ``answer`` as its content (written once).
CONTENT_FROM = "content_from"


def answer_stored_once(messages: list[dict[str, Any]], answer: Any) -> list[dict[str, Any]]:
    """``messages`` with the last assistant message, when its content is ``answer`` itself, pointing
    to the record's ``answer`` field instead (``content: null, content_from: "answer"``): a long answer
    is written once, not twice. ``transcript_of`` puts it back."""
    if not isinstance(answer, str) or not answer:
        return messages
    for i in range(len(messages) - 1, -1, -1):
        message = messages[i]
        if isinstance(message, dict) and message.get("role") == "assistant":
            if message.get("content") != answer:
                return messages
            out = list(messages)
            out[i] = {**message, "content": None, CONTENT_FROM: "answer"}
            return out
    return messages


def transcript_of(record: dict[str, Any]) -> list[dict[str, Any]]:
    """A record's messages as sent and received: a message that points to the answer gets it back."""
    messages = record.get("messages") or []
    if not any(isinstance(m, dict) and m.get(CONTENT_FROM) == "answer" for m in messages):
        return messages
    out = []
    for m in messages:
        if isinstance(m, dict) and m.get(CONTENT_FROM) == "answer":
            m = {k: v for k, v in m.items() if k != CONTENT_FROM} | {"content": record.get("answer")}
        out.append(m)
    return out
