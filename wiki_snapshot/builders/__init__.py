"""Snapshot builders: one file per source kind, registered by name.

A builder is constructed with the source (a path, or for ``api`` an optional evidence file) and
its options, validates them (raising :class:`SnapshotError` with one line), and then streams
:class:`~harness.wiki_snapshot.store.Page` and :class:`Redirect` items from :meth:`Builder.items`.
:func:`build_snapshot` drives any builder into a :class:`~harness.wiki_snapshot.store.SnapshotWriter`,
reporting pages/s to stderr.
"""

from __future__ import annotations

import importlib
import os
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Iterable, Iterator, TextIO

from harness.wiki_snapshot.errors import SnapshotError
from harness.wiki_snapshot.space import SCOPE_SOURCE
from harness.wiki_snapshot.store import BuildLock, Page, SnapshotWriter


class BuilderRegistry:
    """Source kind -> builder class. The kinds are fixed (the modules below), so a plain dict:
    no plugins, and no dependency on the harness's registry."""

    def __init__(self) -> None:
        self._kinds: dict[str, type[Builder]] = {}

    def register(self, name: str):
        def decorator(cls):
            self._kinds[name] = cls
            return cls

        return decorator

    def names(self) -> list[str]:
        return sorted(self._kinds)

    def __contains__(self, name: str) -> bool:
        return name in self._kinds

    def get(self, name: str) -> type[Builder]:
        try:
            return self._kinds[name]
        except KeyError:
            raise SnapshotError(f"unknown snapshot source kind {name!r} (known: {', '.join(self.names())})") from None


BUILDERS = BuilderRegistry()

_BUILDER_MODULES = (
    "harness.wiki_snapshot.builders.mediawiki_dump",
    "harness.wiki_snapshot.builders.zim",
    "harness.wiki_snapshot.builders.fanoutqa_cache",
    "harness.wiki_snapshot.builders.records",
    "harness.wiki_snapshot.builders.mediawiki_api",
)


@dataclass(frozen=True)
class Redirect:
    title: str
    target: str


class Builder:
    """Subclasses set ``name`` and implement ``items``; ``__init__`` validates source and options."""

    name: ClassVar[str]
    description: ClassVar[str] = ""

    def __init__(self, source: str | None, **options: Any):
        self.source = source
        self.options = options
        self.stats: dict[str, Any] = {}

    def items(self) -> Iterator[Page | Redirect]:
        raise NotImplementedError

    # What the snapshot's metadata records.
    def recorded_options(self) -> dict[str, Any]:
        return {k: v for k, v in self.options.items() if v is not None}

    def source_label(self) -> str:
        return str(self.source)

    def source_description(self) -> str:
        return self.description

    def revision_date(self) -> str | None:
        return None

    def scope(self) -> tuple[str, str | None]:
        """``(scope, dataset)`` the snapshot records (``harness.wiki_snapshot.space``): all the source held,
        unless the builder knows it fetched a dataset's evidence or contexts."""
        return SCOPE_SOURCE, None

    def bytes_read(self) -> int | None:
        """Input bytes consumed so far (for progress), when known."""
        return None

    def input_size(self) -> int | None:
        if self.source and os.path.isfile(self.source):
            return os.path.getsize(self.source)
        return None


def load_builders() -> None:
    for module in _BUILDER_MODULES:
        importlib.import_module(module)


def get_builder(kind: str) -> type[Builder]:
    load_builders()
    return BUILDERS.get(kind)


def require_file(source: str | None, what: str) -> Path:
    if not source:
        raise SnapshotError(f"{what}: no source given (--from)")
    p = Path(source)
    if not p.exists():
        raise SnapshotError(f"{p}: not found")
    if not p.is_file():  # is_file: a regular file; never a FIFO or a device
        raise SnapshotError(f"{p}: not a regular file ({what} expected)")
    return p


def read_small_file(path: str | Path, what: str, max_bytes: int = 1 << 30) -> bytes:
    """A small input file's bytes (an evidence or titles list): only a regular file (a FIFO would
    block, /dev/zero never ends), at most ``max_bytes`` (1 GiB)."""
    p = Path(path)
    if not p.exists():
        raise SnapshotError(f"{what} {p}: not found")
    if not p.is_file():
        raise SnapshotError(f"{what} {p}: not a regular file")
    if p.stat().st_size > max_bytes:
        raise SnapshotError(f"{what} {p}: larger than the {max_bytes >> 20} MiB limit")
    try:
        with open(p, "rb") as f:
            data = f.read(max_bytes + 1)  # it may have grown since the stat
    except OSError as exc:
        raise SnapshotError(f"{what} {p}: cannot read ({exc.strerror or exc})") from None
    if len(data) > max_bytes:
        raise SnapshotError(f"{what} {p}: larger than the {max_bytes >> 20} MiB limit")
    return data


def detect_kind(source: str) -> str:
    """The builder for a source, from its extension, or its first bytes."""
    p = Path(source)
    if not p.exists():
        raise SnapshotError(f"{p}: not found")
    if p.is_dir():
        if any(p.glob("*-dated.md")):
            return "fanoutqa-cache"
        raise SnapshotError(f"{p}: a directory without *-dated.md files (not a FanOutQA page cache); give --kind")
    if not p.is_file():  # a FIFO would block the read below, a device never ends
        raise SnapshotError(f"{p}: not a regular file (a device, FIFO or socket)")
    name = p.name.lower()
    if name.endswith((".xml", ".xml.bz2", ".xml.gz", ".xml.bz")):
        return "dump"
    if name.endswith(".zim"):
        return "zim"
    if name.endswith((".json", ".jsonl", ".ndjson", ".json.gz", ".jsonl.gz")):
        return "records"
    with open(p, "rb") as f:
        head = f.read(64)
    if head.startswith(b"BZh") or head.lstrip().startswith(b"<"):
        return "dump"
    if head[:4] == b"ZIM\x04":
        return "zim"
    if head.lstrip()[:1] in (b"[", b"{"):
        return "records"
    raise SnapshotError(
        f"{p}: cannot tell what kind of source this is; give --kind (dump, zim, fanoutqa-cache, records, api)"
    )


class Progress:
    """Prints 'N pages, M redirects, X pages/s' to a stream every ``every`` seconds."""

    def __init__(self, stream: TextIO | None = sys.stderr, every: float = 2.0, total_bytes: int | None = None):
        self.stream = stream
        self.every = every
        self.total_bytes = total_bytes
        self.start = time.perf_counter()
        self._last = self.start

    def line(self, pages: int, redirects: int, bytes_read: int | None) -> str:
        elapsed = max(time.perf_counter() - self.start, 1e-9)
        text = f"{pages:,} pages, {redirects:,} redirects, {pages / elapsed:,.1f} pages/s"
        if bytes_read is not None:
            text += f", {bytes_read / 1e6:,.1f} MB read"
            if self.total_bytes:
                text += f" ({100 * bytes_read / self.total_bytes:.0f}%)"
        return text

    def tick(self, pages: int, redirects: int, bytes_read: int | None = None) -> None:
        now = time.perf_counter()
        if self.stream is not None and now - self._last >= self.every:
            self._last = now
            print(f"snapshot: {self.line(pages, redirects, bytes_read)}", file=self.stream, flush=True)


def build_snapshot(
    source: str | None,
    out: str | os.PathLike,
    *,
    kind: str | None = None,
    overwrite: bool = False,
    progress: TextIO | None = sys.stderr,
    fts5: bool | None = None,
    **options: Any,
) -> dict[str, Any]:
    """Build a snapshot at ``out`` from ``source``; returns a summary (and the metadata)."""
    if kind is None:
        if not source:
            raise SnapshotError("give --from SOURCE (or --kind api)")
        kind = detect_kind(source)
    out = Path(out)
    # taken before the builder reads its source: a second build of the same file is refused at once
    lock = BuildLock.take(out, overwrite)
    try:
        return _build(source, out, kind, lock, overwrite, progress, fts5, options)
    finally:
        lock.release()  # the writer releases it on finishing; this covers a builder that failed first


def _build(source, out: Path, kind: str, lock: BuildLock, overwrite, progress, fts5, options) -> dict[str, Any]:
    builder = get_builder(kind)(source, **options)
    started = time.perf_counter()
    prog = Progress(progress, total_bytes=builder.input_size())
    pages = redirects = 0
    with SnapshotWriter(
        out,
        source=builder.source_label(),
        options=builder.recorded_options(),
        overwrite=overwrite,
        builder=kind,
        source_description=builder.source_description(),
        revision_date=builder.revision_date(),
        fts5=fts5,
        lock=lock,
    ) as writer:
        for item in builder.items():
            if isinstance(item, Page):
                writer.add_page(item)
                pages += 1
            else:
                writer.add_redirect(item.title, item.target)
                redirects += 1
            prog.tick(pages, redirects, builder.bytes_read())
        convert_seconds = time.perf_counter() - started
        # Builders may learn these while streaming (a dump's siteinfo, a ZIM's metadata).
        if builder.revision_date():
            writer.set_metadata("revision_date", builder.revision_date())
        writer.set_metadata("source_description", builder.source_description())
        writer.set_metadata("stats", builder.stats)
        scope, scope_dataset = builder.scope()  # what the space is made of: read by every run over it
        writer.set_metadata("scope", scope)
        writer.set_metadata("scope_dataset", scope_dataset)
        finish_started = time.perf_counter()
        meta = writer.finish()
        index_seconds = time.perf_counter() - finish_started
    seconds = time.perf_counter() - started
    size = builder.input_size()
    return {
        "out": str(out),
        "kind": kind,
        "pages": meta["pages"],
        "redirects": meta["redirects"],
        "items_read": {"pages": pages, "redirects": redirects},
        "seconds": round(seconds, 3),
        "convert_seconds": round(convert_seconds, 3),  # reading + converting + inserting
        "index_seconds": round(index_seconds, 3),  # FTS indexes, title index, hash
        "pages_per_s": round(meta["pages"] / seconds, 1) if seconds > 0 else None,
        "input_bytes": size,
        "output_bytes": out.stat().st_size,
        "metadata": meta,
    }


# shared helpers ----------------------------------------------------------------------------
def collect_evidence(obj: Any, out: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Every ``{pageid, title[, revid, url]}`` mapping anywhere inside ``obj`` (FanOutQA's
    decomposition ``evidence``, nested sub-decompositions, test ``necessary_evidence``), in order."""
    if out is None:
        out = []
    stack = [obj]
    while stack:
        cur = stack.pop()
        if isinstance(cur, Mapping) and not isinstance(cur, dict):
            cur = dict(cur.items())  # e.g. a Sample.raw PackedRecord: decoded once, not once a key
        if isinstance(cur, dict):
            if "pageid" in cur and "title" in cur and isinstance(cur.get("title"), str):
                out.append({k: cur.get(k) for k in ("pageid", "revid", "title", "url")})
            stack.extend(reversed(list(cur.values())))
        elif isinstance(cur, list):
            stack.extend(reversed(cur))
    return out


def unique_evidence(evidence: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Evidence deduplicated by (pageid, revid), first occurrence first."""
    seen: set[tuple] = set()
    out = []
    for ev in evidence:
        key = (ev.get("pageid"), ev.get("revid"))
        if key not in seen:
            seen.add(key)
            out.append(ev)
    return out


def html_to_markdown(html: str) -> str:
    """HTML -> markdown as the ``fanoutqa`` package renders Wikipedia pages (its ``markdownify`` in
    ``fanoutqa/utils.py`` of fanoutqa 1.1.1, zhudotexe/fanoutqa at commit 5e19c279, MIT), restated:
    markdownify with ATX headings, and its own rules for four kinds of tag: a link is its text
    alone, an image is ``![ALT](image)`` (ALT empty when missing), a div is its text stripped plus
    a newline (nothing when that is empty), and script and style elements vanish. Every other tag
    renders as markdownify renders it. One addition: a whole document's ``<head>`` vanishes (a Kiwix
    page's ``<title>`` would otherwise print the title twice); the API's parse HTML that fanoutqa
    renders has no head, and redel's Kiwix client drops it too (html_to_markdown, default_title=False)."""
    return _md_converter().convert(html)


_MD = None


def _md_converter():
    global _MD
    if _MD is None:
        from markdownify import MarkdownConverter

        # markdownify calls convert_<tag>(el, text, ...); its third parameter changed name across
        # versions (convert_as_inline, then parent_tags), hence *_ and **__ on every rule.
        def link_text(self, el, text, *_, **__):
            return text

        def image_stub(self, el, text, *_, **__):
            alt = el.attrs.get("alt") or ""
            return f"![{alt}](image)"

        def block_line(self, el, text, *_, **__):
            stripped = text.strip()
            return stripped + "\n" if stripped else ""

        def dropped(self, *_, **__):
            return ""

        rules = {
            "convert_a": link_text,
            "convert_img": image_stub,
            "convert_div": block_line,
            "convert_script": dropped,
            "convert_style": dropped,
            "convert_head": dropped,
        }
        _MD = type("FanOutQAMarkdown", (MarkdownConverter,), rules)(heading_style="atx")
    return _MD


__all__ = [
    "BUILDERS",
    "Builder",
    "Redirect",
    "build_snapshot",
    "collect_evidence",
    "detect_kind",
    "get_builder",
    "html_to_markdown",
    "unique_evidence",
]
