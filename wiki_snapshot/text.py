"""Lone surrogates, the primitives: what ``harness.text`` states as its policy, here because this
package imports nothing from ``harness`` (the harness re-exports these; there is one copy).

A Python string can hold a lone surrogate (U+D800..U+DFFF: JSON's ``"\\ud800"`` escape, a byte of a
path that is not UTF-8); UTF-8 has no bytes for it, so SQLite's text binding, ``httpx``'s query
encoder, libzim, matplotlib's fonts and every UTF-8 writer raise on it. Text that is *used* (a query,
a title stored in a snapshot, text counted in tokens) takes U+FFFD in its place, one for one
(``plain_text``); JSON *written* keeps it recoverably as JSON's own ``\\udXXX`` escape
(``JSON_ERRORS``, ``json_bytes``, ``json_text``).
"""

from __future__ import annotations

import codecs
import re
from typing import Any

JSON_ERRORS = "harness-json-escape"
REPLACEMENT = "\ufffd"
_SURROGATE = re.compile("[\ud800-\udfff]")


def _json_escape(exc: UnicodeError) -> tuple[str, int]:
    # only a surrogate has no UTF-8 form; inside JSON text it can only stand in a string, where
    # \udXXX is the escape a JSON reader decodes back to it
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    return "".join(f"\\u{ord(c):04x}" for c in exc.object[exc.start : exc.end]), exc.end


codecs.register_error(JSON_ERRORS, _json_escape)


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


def plain_value(value: Any) -> tuple[Any, int]:
    """A JSON-like ``value`` (dicts, lists, tuples, strings) with each lone surrogate replaced by
    U+FFFD, and how many were; ``value`` itself when none is there (nothing copied)."""
    if isinstance(value, str):
        return plain_text(value)
    if isinstance(value, dict):
        count, items = 0, []
        for k, v in value.items():
            k2, n1 = plain_value(k) if isinstance(k, str) else (k, 0)
            v2, n2 = plain_value(v)
            count += n1 + n2
            items.append((k2, v2))
        return (dict(items), count) if count else (value, 0)
    if isinstance(value, (list, tuple)):
        walked = [plain_value(v) for v in value]
        count = sum(n for _, n in walked)
        return ([v for v, _ in walked], count) if count else (value, 0)
    return value, 0


def json_bytes(text: str) -> bytes:
    """JSON ``text`` (``json.dumps(..., ensure_ascii=False)``) as UTF-8, lone surrogates escaped."""
    return text.encode("utf-8", JSON_ERRORS)


def json_text(text: str) -> str:
    """JSON ``text`` with lone surrogates escaped, as a string (for SQLite, which encodes it itself)."""
    if encodable(text):
        return text
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


__all__ = ["JSON_ERRORS", "REPLACEMENT", "encodable", "json_bytes", "json_text", "plain_text", "plain_value"]
