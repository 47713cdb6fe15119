"""ZIM archives (Kiwix; e.g. ``wikipedia_en_all_nopic_2023-11.zim``) read with ``libzim``.

Every ``text/html`` entry becomes a page whose text is its HTML rendered to markdown the way the
``fanoutqa`` package renders Wikipedia pages (markdownify with FanOutQA's options); redirect
entries become redirects. ZIM files carry no MediaWiki page ids, so ``pageid`` is derived from
the title (:func:`harness.wiki_snapshot.store.stable_pageid`); every page's timestamp is the archive's
``Date`` metadata, which is also the snapshot's revision date.
"""

from __future__ import annotations

from typing import Any, Iterator

from harness.wiki_snapshot.builders import BUILDERS, Builder, Redirect, html_to_markdown, require_file
from harness.wiki_snapshot.errors import SnapshotError
from harness.wiki_snapshot.parallel import batched, default_workers, ordered_map
from harness.wiki_snapshot.store import Page, stable_pageid
from harness._version import pip_install

_META_KEYS = ("Title", "Name", "Description", "Language", "Date", "Creator", "Publisher", "Source", "Flavour")


def _import_libzim():
    try:
        from libzim.reader import Archive
    except ImportError:
        raise SnapshotError(f"reading ZIM archives needs the libzim package: {pip_install('zim')}") from None
    return Archive


@BUILDERS.register("zim")
class ZimBuilder(Builder):
    name = "zim"
    description = "ZIM archive"

    def __init__(self, source: str | None, *, workers: int | None = None, **options: Any):
        path = require_file(source, "a ZIM archive")
        self.workers = int(workers) if workers else default_workers()  # speed only: not recorded
        super().__init__(str(path), **options)
        Archive = _import_libzim()
        try:
            self.archive = Archive(str(path))
        except (RuntimeError, OSError, ValueError) as exc:
            raise SnapshotError(f"{path}: not a ZIM archive ({exc})") from None
        self.path = path
        self.zim_metadata: dict[str, str] = {}
        for key in _META_KEYS:
            try:
                if key in self.archive.metadata_keys:
                    self.zim_metadata[key] = bytes(self.archive.get_metadata(key)).decode("utf-8", "replace")
            except (RuntimeError, KeyError):
                pass
        self.stats = {"entries": 0, "html_pages": 0, "redirects": 0, "skipped_non_html": 0, "dangling_redirects": 0, "self_redirects": 0}
        self._done = 0

    def recorded_options(self) -> dict[str, Any]:
        return {
            "text": "markdownify as fanoutqa.utils.markdownify (heading_style=atx, links as text, images as alt, no <head>)",
            "zim_uuid": str(self.archive.uuid),
            "zim_metadata": self.zim_metadata,
        }

    def source_description(self) -> str:
        m = self.zim_metadata
        label = m.get("Title") or m.get("Name") or self.path.name
        extra = ", ".join(f"{k} {m[k]}" for k in ("Name", "Date", "Language") if m.get(k))
        return f"ZIM archive {self.path.name}: {label}" + (f" ({extra})" if extra else "")

    def revision_date(self) -> str | None:
        return self.zim_metadata.get("Date")

    def bytes_read(self) -> int | None:
        total = self.input_size() or 0
        n = self.archive.entry_count or 1
        return int(total * self._done / n)

    def _raw(self) -> Iterator[tuple[str, str, str]]:
        """("redirect", title, target) or ("page", title, html), in archive order."""
        archive = self.archive
        for i in range(archive.entry_count):
            self._done = i + 1
            try:
                entry = archive._get_entry_by_id(i)
            except (RuntimeError, IndexError) as exc:
                raise SnapshotError(f"{self.path}: cannot read entry {i} ({exc}); the archive is corrupt") from None
            self.stats["entries"] += 1
            title = entry.title or entry.path
            if entry.is_redirect:
                try:
                    target = entry.get_redirect_entry()
                    final = entry.get_item()  # the end of the redirect chain
                except (RuntimeError, KeyError):
                    self.stats["dangling_redirects"] += 1
                    continue
                target_title = target.title or target.path
                if not final.mimetype.startswith("text/html"):
                    # Kiwix archives alias files too (MWOffliner's "favicon" -> "favicon.png"): no page
                    self.stats["skipped_non_html"] += 1
                    continue
                if target_title == title:
                    # a path alias of the page under its own title ("Page" -> "Page.html"): nothing to add
                    self.stats["self_redirects"] += 1
                    continue
                self.stats["redirects"] += 1
                yield ("redirect", title, target_title)
                continue
            item = entry.get_item()
            if not item.mimetype.startswith("text/html"):
                self.stats["skipped_non_html"] += 1
                continue
            self.stats["html_pages"] += 1
            yield ("page", title, bytes(item.content).decode("utf-8", "replace"))

    def items(self) -> Iterator[Page | Redirect]:
        date = self.zim_metadata.get("Date")
        # HTML -> markdown (most of the time) in worker processes, results in archive order
        for converted in ordered_map(_convert_batch, batched(self._raw(), 32), self.workers):
            for kind, title, payload in converted:
                if kind == "redirect":
                    yield Redirect(title, payload)
                else:
                    yield Page(pageid=stable_pageid(title), revid=None, title=title, text=payload, timestamp=date)


def _convert_batch(batch: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    return [(k, t, html_to_markdown(p) if k == "page" else p) for k, t, p in batch]
