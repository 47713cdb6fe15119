"""JSON / JSONL records of pages, and HotpotQA-style question files.

Accepted shapes:

- JSONL (``.jsonl``/``.ndjson``, streamed line by line) or a JSON list of records
  ``{"title", "text"}`` with optional ``pageid`` (or a numeric ``id``), ``revid``, ``timestamp``;
  an optional ``{"redirect": "Target"}`` field (instead of ``text``) makes a redirect;
- HotpotQA in the Hugging Face layout: a JSON list of questions whose ``context`` is
  ``{"title": [...], "sentences": [[...], ...]}`` (the original layout, ``context`` =
  ``[[title, [sentences]], ...]``, too). Each distinct title becomes a page whose text is its
  sentences joined with ``""`` (HotpotQA sentences carry their own leading spaces). The same
  title appears in many questions: the first occurrence wins; later ones with a different text
  are counted in ``stats["conflicting_texts"]``.

Pages without a pageid get a stable one derived from the title (positive, 63-bit).
JSON (not JSONL) files are read whole; use JSONL for very large inputs.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any, Iterator

from harness.wiki_snapshot.builders import BUILDERS, Builder, Redirect, require_file
from harness.wiki_snapshot.errors import SnapshotError
from harness.wiki_snapshot.space import SCOPE_CONTEXTS, SCOPE_SOURCE
from harness.wiki_snapshot.store import Page, normalize_title, stable_pageid


def _open_text(path: Path):
    if path.name.lower().endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8")
    return open(path, encoding="utf-8")


def _is_hotpot(rec: Any) -> bool:
    return isinstance(rec, dict) and "context" in rec and "question" in rec


def _int_or_none(value: Any) -> int | None:
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


@BUILDERS.register("records")
class RecordsBuilder(Builder):
    name = "records"
    description = "JSON records"

    def __init__(self, source: str | None, **options: Any):
        path = require_file(source, "a JSON or JSONL file of records")
        super().__init__(str(path), **options)
        self.path = path
        name = path.name.lower()
        self.jsonl = name.endswith((".jsonl", ".ndjson", ".jsonl.gz", ".ndjson.gz"))
        self.layout = "jsonl" if self.jsonl else None
        self.stats = {"records": 0, "pages": 0, "redirects": 0, "duplicate_titles": 0, "conflicting_texts": 0}
        self._bytes = 0
        self._data: Any = None
        if not self.jsonl:
            try:
                with _open_text(path) as f:
                    self._data = json.load(f)
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise SnapshotError(f"{path}: not valid JSON ({exc})") from None
            except (OSError, EOFError) as exc:
                raise SnapshotError(f"{path}: cannot read ({exc})") from None
            if isinstance(self._data, dict):
                for key in ("data", "records", "pages", "articles"):
                    if isinstance(self._data.get(key), list):
                        self._data = self._data[key]
                        break
            if not isinstance(self._data, list):
                raise SnapshotError(
                    f"{path}: expected a JSON list of records ({{title, text}}) or of HotpotQA questions"
                )
            self.layout = "hotpotqa" if self._data and _is_hotpot(self._data[0]) else "records"

    def recorded_options(self) -> dict[str, Any]:
        opts = {"layout": self.layout}
        if self.layout == "hotpotqa":
            opts["merge"] = "each distinct title once, first occurrence wins; text = sentences joined with ''"
        return opts

    def scope(self) -> tuple[str, str | None]:
        # HotpotQA's context paragraphs: each question's gold pages and its few distractors
        if self.layout == "hotpotqa":
            return SCOPE_CONTEXTS, f"hotpotqa ({self.path.name})"
        return SCOPE_SOURCE, None

    def source_description(self) -> str:
        if self.layout == "hotpotqa":
            return f"HotpotQA context paragraphs from {self.path.name} (one page per distinct title)"
        return f"{self.layout.upper() if self.layout == 'jsonl' else 'JSON'} page records from {self.path.name}"

    def bytes_read(self) -> int | None:
        return self._bytes if self.jsonl else None

    def _records(self) -> Iterator[tuple[str, dict]]:
        if self.jsonl:
            try:
                with _open_text(self.path) as f:
                    for lineno, line in enumerate(f, 1):
                        self._bytes += len(line.encode("utf-8"))
                        if not line.strip():
                            continue
                        try:
                            rec = json.loads(line)
                        except json.JSONDecodeError as exc:
                            raise SnapshotError(f"{self.path}:{lineno}: not valid JSON ({exc})") from None
                        yield f"{self.path}:{lineno}", rec
            except UnicodeDecodeError as exc:
                raise SnapshotError(f"{self.path}: not UTF-8 text ({exc})") from None
        else:
            for i, rec in enumerate(self._data):
                yield f"{self.path}: record #{i + 1}", rec

    def _hotpot_pages(self) -> Iterator[Page]:
        seen: dict[str, str] = {}
        for where, q in self._records():
            self.stats["records"] += 1
            ctx = q.get("context") if isinstance(q, dict) else None
            if isinstance(ctx, dict):
                pairs = zip(ctx.get("title") or [], ctx.get("sentences") or [])
            elif isinstance(ctx, list):
                pairs = ((c[0], c[1]) for c in ctx if isinstance(c, (list, tuple)) and len(c) == 2)
            else:
                raise SnapshotError(f"{where}: HotpotQA question without a context")
            for title, sentences in pairs:
                if not isinstance(title, str) or not isinstance(sentences, list):
                    raise SnapshotError(f"{where}: context titles must be strings and sentences lists")
                text = "".join(s for s in sentences if isinstance(s, str))
                key = normalize_title(title)
                if key in seen:
                    self.stats["duplicate_titles"] += 1
                    if seen[key] != text:
                        self.stats["conflicting_texts"] += 1
                    continue
                seen[key] = text
                self.stats["pages"] += 1
                yield Page(pageid=stable_pageid(title), revid=None, title=title, text=text, timestamp=None)

    def items(self) -> Iterator[Page | Redirect]:
        if self.layout == "hotpotqa":
            yield from self._hotpot_pages()
            return
        for where, rec in self._records():
            self.stats["records"] += 1
            if _is_hotpot(rec):
                raise SnapshotError(
                    f"{where}: a HotpotQA question in a records file (give the questions as a JSON list)"
                )
            if not isinstance(rec, dict) or not isinstance(rec.get("title"), str) or not rec["title"].strip():
                raise SnapshotError(f"{where}: each record needs a non-empty string 'title'")
            if isinstance(rec.get("redirect"), str):
                self.stats["redirects"] += 1
                yield Redirect(rec["title"], rec["redirect"])
                continue
            if not isinstance(rec.get("text"), str):
                raise SnapshotError(f"{where}: each record needs a string 'text' (or 'redirect')")
            pageid = _int_or_none(rec.get("pageid"))
            if pageid is None:
                pageid = _int_or_none(rec.get("id"))
            if pageid is None:
                pageid = stable_pageid(rec["title"])
            self.stats["pages"] += 1
            yield Page(
                pageid=pageid,
                revid=_int_or_none(rec.get("revid")),
                title=rec["title"],
                text=rec["text"],
                timestamp=rec.get("timestamp") if isinstance(rec.get("timestamp"), str) else None,
            )
