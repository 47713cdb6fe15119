"""What an open-book search runs over: one interface for every backend, and what a snapshot holds.

A *wiki backend* is anything the search tool and the strategies read pages from:

- :class:`harness.wiki_snapshot.store.Snapshot`: a SQLite snapshot (``harness snapshot build``);
- :class:`harness.wiki_snapshot.zim_archive.ZimWiki`: a Kiwix ZIM archive read in place;
- :class:`harness.wiki_snapshot.mediawiki_live.MediaWikiLive`: the live MediaWiki API (the paper's search).

:func:`harness.wiki_snapshot.backends.open_wiki` opens a path as the right one (this module stays a leaf:
the builders import its scopes). A snapshot's *scope* says what it was built from:
``"source"`` (all a dump, archive or record file held), ``"evidence"`` (a dataset's evidence list:
a space made of answers) or ``"dataset-contexts"`` (a dataset's own context paragraphs, such as
HotpotQA's distractor setting: gold pages plus a few distractors per question). Evidence and
dataset-contexts spaces are *evidence-only*: a number measured over one is not an open-book number
over Wikipedia, and a run must say it means it (``--search-space evidence-only``).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable


SCOPE_SOURCE = "source"
SCOPE_EVIDENCE = "evidence"
SCOPE_CONTEXTS = "dataset-contexts"
SCOPES = (SCOPE_SOURCE, SCOPE_EVIDENCE, SCOPE_CONTEXTS)
EVIDENCE_ONLY_SCOPES = frozenset({SCOPE_EVIDENCE, SCOPE_CONTEXTS})


@runtime_checkable
class WikiBackend(Protocol):
    """What the search tool and the strategies need of a Wikipedia source."""

    path: Any

    @property
    def metadata(self) -> dict[str, Any]: ...

    @property
    def full_text_search(self) -> bool:
        """True when :meth:`search` is a real full-text search over page text (not a fallback)."""
        ...

    def resolve_title(self, title: str): ...  # -> Page | None (exact, case-insensitive, redirects)

    def similar_titles(self, query: str, k: int = 10) -> list[str]: ...

    def search(self, query: str, k: int = 10) -> list[tuple[str, float]]: ...  # (title, score), best first

    def get_page(self, pageid: int): ...

    def close(self) -> None: ...


def scope_of(metadata: dict[str, Any]) -> tuple[str, str | None]:
    """``(scope, dataset)`` of a snapshot from its metadata. Snapshots written before the ``scope``
    key existed are read from what their builder recorded (an ``api`` or ``fanoutqa-cache`` build
    fetched a dataset's evidence list; a ``records`` build of HotpotQA's layout holds its contexts)."""
    scope = metadata.get("scope")
    if scope in SCOPES:
        return scope, metadata.get("scope_dataset")
    builder = metadata.get("builder")
    options = metadata.get("builder_options") or {}
    if builder == "api":
        return SCOPE_EVIDENCE, options.get("dataset") or metadata.get("source")
    if builder == "fanoutqa-cache" and not options.get("titles"):
        return SCOPE_EVIDENCE, options.get("dataset") or "fanoutqa"
    if builder == "records" and options.get("layout") == "hotpotqa":
        return SCOPE_CONTEXTS, "hotpotqa"
    return SCOPE_SOURCE, None


__all__ = [
    "EVIDENCE_ONLY_SCOPES",
    "SCOPES",
    "SCOPE_CONTEXTS",
    "SCOPE_EVIDENCE",
    "SCOPE_SOURCE",
    "WikiBackend",
    "scope_of",
]
