"""Text UTF-8 cannot encode, one policy for every writer.

A Python string can hold a lone surrogate (U+D800..U+DFFF): JSON's ``"\\ud800"`` escape decodes to
one (a server's reply, a dataset file), and so does a byte of argv that is not UTF-8 (PEP 383). UTF-8
has no bytes for it, so writing such a string raises ``UnicodeEncodeError``. What each writer does:

- JSON files (rows, results.json, config.json, the response cache, batch records): the
  surrogate is written as JSON's own escape ``\\udXXX``; reading the file back gives the same string
  (a high surrogate followed by a low one reads back as the one character the pair encodes, as
  JSON defines it). The escape is made by a codec error handler (``JSON_ERRORS``), so text
  without a surrogate costs nothing more.
- Logs and the terminal: Python's ``backslashreplace`` (``LOG_ERRORS``), the same escape as text.
- Documents (report HTML, tables in Markdown/LaTeX/CSV, ablation tables): U+FFFD, counted and said
  on stderr (``document_bytes``): an escape there would be read as markup (LaTeX's ``\\u...``).
- Requests to a model: U+FFFD, counted (``sendable``; the backend records the count and says it once).
  The SDKs' JSON writers cannot encode a lone surrogate, and JSON readers may refuse its escape
  (RFC 8259 section 8.2: how software treats an unpaired surrogate is "unpredictable"; pydantic-core
  2.14's parser refuses it: "unexpected end of hex escape").
- Hashes take the string's ``surrogatepass`` bytes (``hash_bytes``): never written, the same as UTF-8
  for every other string, so keys already made do not change.
- argv that is not UTF-8: refused in one line before any work (``argv_problem``).
"""

from __future__ import annotations

import codecs
import re
import sys
from typing import Any

JSON_ERRORS = "harness-json-escape"
LOG_ERRORS = "backslashreplace"
REPLACEMENT = "\ufffd"
_SURROGATE = re.compile("[\ud800-\udfff]")


def _json_escape(exc: UnicodeError) -> tuple[str, int]:
    # only a surrogate has no UTF-8 form; inside JSON text it can only stand in a string, where
    # \udXXX is the escape a JSON reader decodes back to it
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    return "".join(f"\\u{ord(c):04x}" for c in exc.object[exc.start : exc.end]), exc.end


codecs.register_error(JSON_ERRORS, _json_escape)


def json_bytes(text: str) -> bytes:
    """JSON ``text`` (``json.dumps(..., ensure_ascii=False)``) as UTF-8, lone surrogates escaped."""
    return text.encode("utf-8", JSON_ERRORS)


def json_text(text: str) -> str:
    """JSON ``text`` with lone surrogates escaped, as a string (for SQLite, which encodes it itself)."""
    if encodable(text):
        return text
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def hash_bytes(text: str) -> bytes:
    """``text``'s bytes for a hash: UTF-8, a lone surrogate kept as its own 3 bytes (never written)."""
    return text.encode("utf-8", "surrogatepass")


def encodable(text: str) -> bool:
    """Whether UTF-8 can write ``text`` (no lone surrogate). Encoding is the quick test: ~3 ns a
    character against ~9 for a regex search (``isascii`` first: most text is)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def plain_text(text: str) -> tuple[str, int]:
    """``text`` with each lone surrogate replaced by U+FFFD, and how many were (``text`` itself: none)."""
    if encodable(text):
        return text, 0
    return _SURROGATE.subn(REPLACEMENT, text)


def sendable(value: Any) -> tuple[Any, int]:
    """A request's JSON-like ``value`` (messages, tools) with each lone surrogate replaced by U+FFFD,
    and how many were; ``value`` itself when none is there (nothing copied)."""
    if isinstance(value, str):
        return plain_text(value)
    if isinstance(value, dict):
        count, items = 0, []
        for k, v in value.items():
            k2, n1 = sendable(k) if isinstance(k, str) else (k, 0)
            v2, n2 = sendable(v)
            count += n1 + n2
            items.append((k2, v2))
        return (dict(items), count) if count else (value, 0)
    if isinstance(value, (list, tuple)):
        walked = [sendable(v) for v in value]
        count = sum(n for _, n in walked)
        return ([v for v, _ in walked], count) if count else (value, 0)
    return value, 0


def document_bytes(text: str, where: object) -> bytes:
    """A document's ``text`` as UTF-8; lone surrogates become U+FFFD and a warning line counts them."""
    if encodable(text):
        return text.encode("utf-8")
    replaced, n = plain_text(text)
    print(
        f"warning: {where}: {n} character{'s' if n != 1 else ''} UTF-8 cannot encode (lone surrogate"
        f"{'s' if n != 1 else ''}, from a \\udXXX escape in the run's text) written as U+FFFD",
        file=sys.stderr,
    )
    return replaced.encode("utf-8")


def argv_problem(argv: list[str]) -> str | None:
    """Why ``argv`` cannot be taken (a word that is not UTF-8: a path or value no file can record),
    said in one line with the word's bytes; None when all are text."""
    for i, word in enumerate(argv):
        if not encodable(word):
            try:
                raw = word.encode("utf-8", "surrogateescape")
            except UnicodeEncodeError:  # a surrogate that was never a byte (an API caller's string)
                raw = word.encode("utf-8", "backslashreplace")
            if word.startswith("--") and "=" in word:
                what = f"the value of {word.partition('=')[0]}"
            elif i and argv[i - 1].startswith("-"):
                what = f"the value of {argv[i - 1]}"
            else:
                what = f"argument {i + 1}"
            return f"{what} is not UTF-8 text ({raw!r}); pass paths and values as UTF-8"
    return None


__all__ = [
    "JSON_ERRORS",
    "LOG_ERRORS",
    "argv_problem",
    "encodable",
    "document_bytes",
    "hash_bytes",
    "json_bytes",
    "json_text",
    "plain_text",
    "sendable",
]
