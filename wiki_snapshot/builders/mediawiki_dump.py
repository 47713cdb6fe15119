"""MediaWiki XML dumps (``pages-articles.xml[.bz2|.gz]``), streamed with ``iterparse``.

Only the main namespace (ns 0) is kept. ``<redirect title=...>`` pages become redirects; other
pages keep their pageid, the revision's id and timestamp (the last ``<revision>`` of a page when
the dump has several), and their wikitext turned into plain text with ``mwparserfromhell``:

- templates, ``<ref>``s, comments, files/images, categories and interlanguage links dropped; a few
  inline templates that carry the sentence's content are rendered (``convert``, dates such as
  ``birth date``, ``nowrap``, ``lang``, dashes);
- headings kept as text lines, paragraphs separated by blank lines (so splitting on ``"\\n\\n"``,
  as FanOutQA's chunker does, splits paragraphs); list items as ``* item`` lines;
- tables as one line per row, cells joined by `` | ``.

Conversion runs in ``workers`` processes (default: every core) with a bounded number of batches
in flight, so memory stays flat whatever the dump's size; pages come back in dump order, so the
snapshot is the same for any number of workers.
"""

from __future__ import annotations

import bz2
import calendar
import gzip
import html as htmllib
import io
import re
import xml.etree.ElementTree as ET
from typing import Any, Iterator

from harness.wiki_snapshot.builders import BUILDERS, Builder, Redirect, require_file
from harness.wiki_snapshot.errors import SnapshotError
from harness.wiki_snapshot.parallel import batched, default_workers, ordered_map
from harness.wiki_snapshot.store import Page

# ---------------------------------------------------------------------------------------------
# wikitext -> plain text

_DROP_LINK_NS = {"file", "image", "media", "category"}
_INTERLANG = re.compile(r"^[a-z]{2,3}(-[a-z0-9]{2,8})*$")
_DROP_TAGS = {
    "ref", "references", "gallery", "math", "chem", "ce", "score", "timeline", "imagemap", "syntaxhighlight",
    "source", "pre", "templatedata", "graph", "mapframe", "maplink", "categorytree", "inputbox", "section",
    "script", "style", "indicator", "hiero", "charinsert", "templatestyles",
}  # fmt: skip
_CELL_TAGS = {"td", "th"}
_MAGIC = re.compile(r"__[A-Z]{2,}__")
_EMPTY_PARENS = re.compile(r"\(\s*(?:[,;:]\s*)*\)")
_SPACES = re.compile(r"[ \t\u00a0]{2,}")
_SPACE_BEFORE_PUNCT = re.compile(r" +([,.;:](?:\s|$))")
_BLANKS = re.compile(r"\n{3,}")
# Removed before parsing: dropped anyway, and citation templates inside refs are most of the
# parser's work (about 1.6x faster); an unbalanced ref also no longer derails the parse.
_PRESTRIP = re.compile(r"<ref\b[^>]*/\s*>|<ref\b[^>]*(?<!/)>.*?</ref\s*>|<!--.*?(?:-->|$)", re.S | re.I)
_LEFTOVER_QUOTES = re.compile(r"'{2,}")
_DASHES = {
    "ndash": "–",
    "mdash": "—",
    "snd": " – ",
    "spaced ndash": " – ",
    "spnd": " – ",
    "nbsp": " ",
    "-": "",
    "sndash": " – ",
}
# Inline templates whose arguments are the sentence's words (rendered instead of dropped).
_TEXT_TEMPLATES = {
    "nowrap", "nobr", "nobreak", "small", "big", "smaller", "larger", "nobold", "noitalic", "sic", "math", "mvar",
    "var", "abbr", "ill", "interlanguage link", "illm", "lang", "transl", "transliteration", "ipa",
}  # fmt: skip
_DATE_TEMPLATES = {
    "birth date", "death date", "start date", "end date", "birth date and age", "death date and age",
    "start date and age", "end date and age", "dob", "film date", "release date", "date",
}  # fmt: skip


def _params(tpl) -> list[str]:
    return [_render(p.value).strip() for p in tpl.params if not p.showkey]


def _template(tpl) -> str:
    name = " ".join(str(tpl.name).replace("_", " ").split()).lower()
    if name.startswith("template:"):
        name = name[len("template:") :].strip()
    if name in _DASHES:
        return _DASHES[name]
    args = _params(tpl)
    if name in ("convert", "cvt"):
        if len(args) >= 4 and args[1] in ("to", "-", "–", "and", "or", "x", "×", "by", "+/-", "±"):
            return f"{args[0]} {args[1]} {args[2]} {args[3]}"
        if len(args) >= 2:
            return f"{args[0]} {args[1]}"
        return args[0] if args else ""
    if name in _DATE_TEMPLATES:
        nums = [a for a in args if a.isdigit()]
        if len(nums) >= 3 and 1 <= int(nums[1]) <= 12:
            return f"{calendar.month_name[int(nums[1])]} {int(nums[2])}, {nums[0]}"
        if len(nums) >= 2 and 1 <= int(nums[1]) <= 12:
            return f"{calendar.month_name[int(nums[1])]} {nums[0]}"
        return nums[0] if nums else ""
    if name in _TEXT_TEMPLATES and args:
        if name in ("lang", "transl", "transliteration"):
            return args[-1]
        if name in ("ill", "interlanguage link", "illm"):
            return args[0]
        return " ".join(args)
    if name.startswith("lang-") and args:
        return args[0]
    return ""


def _table(tag) -> str:
    lines: list[str] = []
    row: list[str] = []

    def cell(node) -> str:
        return " ".join(_fix_raw(_render(node.contents)).split()) if node.contents is not None else ""

    def flush(cells: list[str]) -> None:
        if any(c for c in cells):
            lines.append(" | ".join(cells))

    if tag.contents is None:
        return ""
    for node in tag.contents.nodes:
        name = getattr(node, "tag", None)
        if name is None:
            continue
        name = str(name).strip().lower()
        if name == "tr":
            flush(row)
            row = []
            flush([cell(c) for c in node.contents.nodes if str(getattr(c, "tag", "")).strip().lower() in _CELL_TAGS])
        elif name in _CELL_TAGS:
            text = cell(node)
            if not row and text.startswith("+"):  # a |+ caption (parsed as a cell)
                lines.append(text[1:].strip())
            else:
                row.append(text)
        elif name == "caption":
            lines.append(cell(node))
    flush(row)
    return "\n\n" + "\n".join(lines) + "\n\n" if lines else "\n"


def _render(code) -> str:
    from mwparserfromhell.nodes import (
        Argument,
        Comment,
        ExternalLink,
        Heading,
        HTMLEntity,
        Tag,
        Template,
        Text,
        Wikilink,
    )

    out: list[str] = []
    for node in code.nodes:
        if isinstance(node, Text):
            out.append(node.value)
        elif isinstance(node, Wikilink):
            title = str(node.title).strip()
            colon = title.startswith(":")
            bare = title.lstrip(":").strip()
            prefix = bare.split(":", 1)[0].strip().lower() if ":" in bare else ""
            if not colon and (prefix in _DROP_LINK_NS or (prefix and node.text is None and _INTERLANG.match(prefix))):
                continue
            if node.text is not None and str(node.text).strip():
                out.append(_render(node.text))
            else:
                out.append(bare.split("#", 1)[0] if not bare.startswith("#") else bare[1:])
        elif isinstance(node, Template):
            out.append(_template(node))
        elif isinstance(node, Heading):
            out.append("\n\n" + " ".join(_render(node.title).split()) + "\n")
        elif isinstance(node, Tag):
            name = str(node.tag).strip().lower()
            if name in _DROP_TAGS:
                continue
            if name == "table":
                out.append(_table(node))
            elif name == "br":
                out.append("\n")
            elif name == "li":
                out.append("\n* " if not out or not out[-1].endswith("\n") else "* ")
            elif name in ("dd", "dt", "hr"):
                continue
            elif node.contents is not None:
                inner = _render(node.contents)
                if name in ("p", "div", "blockquote", "center", "poem"):
                    inner = f"\n\n{inner.strip()}\n\n"
                out.append(inner)
        elif isinstance(node, ExternalLink):
            if node.brackets:
                if node.title is not None:
                    out.append(_render(node.title))
            else:
                out.append(str(node.url))
        elif isinstance(node, HTMLEntity):
            out.append(node.normalize())
        elif isinstance(node, Argument):
            if node.default is not None:
                out.append(_render(node.default))
        elif isinstance(node, Comment):
            continue
        else:  # unknown node kinds: mwparserfromhell's own stripping
            stripped = node.__strip__(normalize=True, collapse=True, keep_template_params=False)
            if stripped:
                out.append(str(stripped))
    return "".join(out)


_RAW_DROP_LINK = re.compile(r"\[\[\s*(?:file|image|media|category)\s*:(?:[^\[\]]|\[\[[^\[\]]*\]\])*\]\]", re.I)
_RAW_PIPED_LINK = re.compile(r"\[\[[^\[\]|]*\|([^\[\]]*)\]\]")
_RAW_LINK = re.compile(r"\[\[:?([^\[\]|#]*)(?:#[^\[\]]*)?\]\]")
_RAW_TAG = re.compile(
    r"</?(?:li|ul|ol|dl|dd|dt|span|div|small|big|sup|sub|center|font|b|i|u|s|br|p|abbr|code|tt|blockquote|"
    r"nowiki|onlyinclude|includeonly|noinclude|poem|table|tr|td|th|caption)\b[^>]*>",
    re.I,
)
_CELL_ATTR = re.compile(r"^\s*(?:[\w-]+\s*=\s*(?:\"[^\"]*\"|'[^']*'|[^\s|]+)\s*)+\|(?!\|)")


def _fix_raw(text: str) -> str:
    """Markup the parser left as text (it gives up on some malformed or deeply nested regions):
    links, file links, raw tables (one line per row, cells joined by " | "), HTML tags, entities."""
    if "[[" in text:
        text = _RAW_DROP_LINK.sub("", text)
        text = _RAW_PIPED_LINK.sub(r"\1", text)
        text = _RAW_LINK.sub(r"\1", text)
    if "{|" in text:
        out: list[str] = []
        row: list[str] = []
        depth = 0
        for line in text.split("\n"):
            s = line.strip()
            if s.startswith("{|"):
                depth += 1
                out.append("")
                continue
            if depth and s.startswith("|}"):
                depth -= 1
                if row:
                    out.append(" | ".join(row))
                    row = []
                out.append("")
                continue
            if depth and s.startswith("|-"):
                if row:
                    out.append(" | ".join(row))
                row = []
                continue
            if depth and s.startswith("|+"):
                out.append(_CELL_ATTR.sub("", s[2:]).strip())
                continue
            if depth and s[:1] in ("|", "!"):
                sep = "!!" if s[0] == "!" else "||"
                for cell in s[1:].replace("||", sep).split(sep):
                    cell = _CELL_ATTR.sub("", cell).strip()
                    row.append(cell)
                continue
            if depth and row:
                row[-1] = (row[-1] + " " + s).strip()
                continue
            out.append(line)
        if row:
            out.append(" | ".join(row))
        text = "\n".join(out)
        text = text.replace("[[", "").replace("]]", "")  # halves of links the parser split
    if "<" in text:
        text = _RAW_TAG.sub(" ", text)
    if "&" in text:
        text = htmllib.unescape(text)
    return text


def _tidy(text: str) -> str:
    text = _fix_raw(_LEFTOVER_QUOTES.sub("", _MAGIC.sub("", text)))
    lines = []
    for line in text.split("\n"):
        line = _SPACES.sub(" ", _EMPTY_PARENS.sub("", line)).strip()
        line = _SPACE_BEFORE_PUNCT.sub(r"\1", line)
        lines.append(line)
    return _BLANKS.sub("\n\n", "\n".join(lines)).strip()


def wikitext_to_text(wikitext: str) -> str:
    """Plain text of an article's wikitext (see the module docstring for what is kept)."""
    import mwparserfromhell

    return _tidy(_render(mwparserfromhell.parse(_PRESTRIP.sub("", wikitext or ""))))


def _convert_batch(batch: list[tuple]) -> list[tuple]:
    """Worker: (kind, pageid, revid, title, timestamp, payload) -> text for pages."""
    out = []
    for kind, pageid, revid, title, ts, payload in batch:
        if kind == "page":
            try:
                payload = wikitext_to_text(payload)
                failed = False
            except Exception:  # noqa: BLE001 - pathological markup: keep the page, strip it the simple way
                import mwparserfromhell

                try:
                    payload = _tidy(mwparserfromhell.parse(payload).strip_code())
                except Exception:  # noqa: BLE001
                    payload = _tidy(payload)
                failed = True
            out.append((kind, pageid, revid, title, ts, payload, failed))
        else:
            out.append((kind, pageid, revid, title, ts, payload, False))
    return out


# ---------------------------------------------------------------------------------------------
# streaming the XML


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


class _CountingReader(io.RawIOBase):
    """Counts the compressed bytes read from the underlying file (for progress)."""

    def __init__(self, raw):
        self.raw = raw
        self.count = 0

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        n = self.raw.readinto(b)
        self.count += n or 0
        return n

    def close(self) -> None:
        self.raw.close()
        super().close()


@BUILDERS.register("dump")
class MediaWikiDumpBuilder(Builder):
    name = "dump"
    description = "MediaWiki XML dump"

    def __init__(
        self,
        source: str | None,
        *,
        namespaces: str | list[int] | None = None,
        workers: int | None = None,
        **options: Any,
    ):
        path = require_file(source, "a MediaWiki XML dump")
        if isinstance(namespaces, str):
            try:
                namespaces = [int(x) for x in namespaces.split(",") if x.strip()]
            except ValueError:
                raise SnapshotError(f"--namespaces must be comma-separated integers, got {namespaces!r}") from None
        self.namespaces = sorted(set(namespaces or [0]))
        self.workers = int(workers) if workers else default_workers()
        super().__init__(str(path), namespaces=self.namespaces, **options)
        self.path = path
        self._counter: _CountingReader | None = None
        self._siteinfo: dict[str, Any] = {}
        self.stats = {"pages_seen": 0, "skipped_namespace": 0, "redirects": 0, "articles": 0, "conversion_fallbacks": 0}
        self._check_is_dump()

    def recorded_options(self) -> dict[str, Any]:
        # workers changes speed, not content
        return {
            "namespaces": self.namespaces,
            "text": "mwparserfromhell plain text (harness.wiki_snapshot.builders.mediawiki_dump)",
        }

    def _open(self):
        raw = open(self.path, "rb")
        self._counter = _CountingReader(raw)
        buffered = io.BufferedReader(self._counter, 1 << 20)
        name = self.path.name.lower()
        with open(self.path, "rb") as f:
            magic = f.read(3)
        if name.endswith(".bz2") or magic == b"BZh":
            return bz2.BZ2File(buffered)
        if name.endswith(".gz") or magic[:2] == b"\x1f\x8b":
            return gzip.GzipFile(fileobj=buffered)
        return buffered

    def _check_is_dump(self) -> None:
        try:
            with self._open() as f:
                head = f.read(8192)
        except (OSError, EOFError, ValueError) as exc:
            raise SnapshotError(f"{self.path}: not a MediaWiki XML dump (cannot decompress: {exc})") from None
        text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
        if not text.startswith(b"<"):
            raise SnapshotError(f"{self.path}: not a MediaWiki XML dump (not XML)")
        if b"<mediawiki" not in head:
            raise SnapshotError(
                f"{self.path}: not a MediaWiki XML dump (no <mediawiki> root element in the first 8 KB)"
            )

    def bytes_read(self) -> int | None:
        return self._counter.count if self._counter else None

    def source_description(self) -> str:
        si = self._siteinfo
        parts = [f"MediaWiki XML dump {self.path.name}"]
        if si.get("dbname"):
            parts.append(f"of {si['dbname']}")
        if si.get("generator"):
            parts.append(f"({si['generator']})")
        return " ".join(parts) + "; main-namespace articles as plain text, redirects kept"

    def _raw_pages(self) -> Iterator[tuple]:
        """(kind, pageid, revid, title, timestamp, wikitext-or-target) per page, in dump order."""
        pages = 0
        ns_names: dict[str, int] = {}
        try:
            with self._open() as f:
                context = ET.iterparse(f, events=("start", "end"))
                root = None
                rev: dict[str, Any] = {}
                for event, elem in context:
                    tag = _local(elem.tag)
                    if event == "start":
                        if root is None:
                            root = elem
                            if tag != "mediawiki":
                                raise SnapshotError(f"{self.path}: not a MediaWiki XML dump (root element <{tag}>)")
                        continue
                    if tag == "revision":
                        rev = {}
                        for child in elem:
                            ctag = _local(child.tag)
                            if ctag in ("id", "timestamp", "text"):
                                rev[ctag] = child.text
                        elem.clear()
                    elif tag == "siteinfo":
                        for child in elem:
                            ctag = _local(child.tag)
                            if ctag in ("dbname", "generator", "sitename", "base"):
                                self._siteinfo[ctag] = child.text
                            elif ctag == "namespaces":
                                for ns in child:
                                    if ns.text:
                                        ns_names[ns.text.lower()] = int(ns.get("key", "0"))
                        root.clear()
                    elif tag == "page":
                        pages += 1
                        info: dict[str, Any] = {}
                        for child in elem:
                            ctag = _local(child.tag)
                            if ctag in ("title", "ns", "id"):
                                info[ctag] = child.text
                            elif ctag == "redirect":
                                info["redirect"] = child.get("title")
                        root.clear()
                        self.stats["pages_seen"] = pages
                        title = (info.get("title") or "").strip()
                        if info.get("ns") is not None:
                            ns = int(info["ns"])
                        else:
                            prefix = title.split(":", 1)[0].lower() if ":" in title else ""
                            ns = ns_names.get(prefix, 0)
                        if ns not in self.namespaces or not title:
                            self.stats["skipped_namespace"] += 1
                            rev = {}
                            continue
                        pageid = int(info["id"])
                        revid = int(rev["id"]) if rev.get("id") else None
                        if info.get("redirect") is not None:
                            target = info["redirect"]
                            if not target:  # very old dumps: <redirect /> and the target in the text
                                m = re.search(r"\[\[([^\]|]+)", rev.get("text") or "")
                                target = m.group(1) if m else ""
                            yield ("redirect", pageid, revid, title, rev.get("timestamp"), target)
                        else:
                            yield ("page", pageid, revid, title, rev.get("timestamp"), rev.get("text") or "")
                        rev = {}
        except ET.ParseError as exc:
            if pages == 0:
                raise SnapshotError(f"{self.path}: not a MediaWiki XML dump ({exc})") from None
            raise SnapshotError(
                f"{self.path}: XML error after {pages} pages ({exc}); the dump is truncated or corrupt"
            ) from None
        except (OSError, EOFError) as exc:
            raise SnapshotError(
                f"{self.path}: read error after {pages} pages ({exc}); the file is truncated or corrupt"
            ) from None

    def _converted(self) -> Iterator[tuple]:
        for converted in ordered_map(_convert_batch, batched(self._raw_pages(), 32), self.workers):
            yield from converted

    def items(self) -> Iterator[Page | Redirect]:
        for kind, pageid, revid, title, ts, payload, failed in self._converted():
            if kind == "redirect":
                self.stats["redirects"] += 1
                yield Redirect(title, payload)
            else:
                self.stats["articles"] += 1
                self.stats["conversion_fallbacks"] += int(failed)
                yield Page(pageid=pageid, revid=revid, title=title, text=payload, timestamp=ts)
