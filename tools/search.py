"""FanOutQA's open-book ``search`` tool over a Wikipedia backend (a snapshot, a ZIM, the live API).

Reproduces the benchmark's search function (the FanOutQA authors' open-book code). Which query is a
hit is the *hit rule* (``SearchConfig.hit_rule``):

- ``"search-results"``: FanOutQA's own tool (zhudotexe/redel ``redel/tools/fanoutqa/impl.py`` at
  32b485e3): ``fanoutqa.wiki_search(query.strip())`` gives the top 10 full-text results
  (``list=search``, ``fanoutqa/wiki.py``), and the query is a hit only when one result's
  ``title.lower() == query.lower()`` (Python's ``str.lower``, as there; not ``casefold``). A
  redirect ("USA") or a title the engine does not rank in the top results is a miss that lists
  those results. The page is then read with ``resolve_title(result title)``.
- ``"title"``: the query looked up as a title (exact, case-insensitive, redirects: whatever
  ``resolve_title`` does), a miss listing ``similar_titles``; close to the paper's 2024 code
  (``reference/paper_benchmarks/run_openbook.py``: ``DatedPage(title=query, redirect=True)``, on a
  miss ``wikipedia.search(query)``).
- ``"auto"`` (default): ``"search-results"`` for the ``fanoutqa`` style over a backend with a real
  full-text search (``backend.full_text_search``), else ``"title"``. The rule that decided is
  recorded (``describe()``, each search).

A miss returns similar titles. A hit returns the whole page if it fits the token budget
(half the model's context by default), otherwise the page's 1024-character chunks ranked by
BM25+ against the question being answered (``harness.wiki_snapshot.ranking``: the same order as
``fanoutqa.retrieval.Corpus``), packed best first until the next fragment would pass the budget.
Tokens are counted with the model's own counter on the whole text the model would see, after
every fragment, as the reference does.

Two output styles:

- ``"fanoutqa"`` (default): the FanOutQA authors' later search tool (zhudotexe/redel,
  ``redel/tools/fanoutqa.py``). A miss lists ``- Title`` lines; a page that fits is returned whole
  in ``<content>``.
- ``"paper-2024"``: the paper's code (zhudotexe/fanoutqa, ``reference/paper_benchmarks/
  run_openbook.py``). A miss lists ``<search>Title</search>`` lines; a hit is always returned as
  ranked ``<fragment>``s, even when the whole page would fit.
  (Its "That may refer to multiple pages" disambiguation reply has no counterpart: a snapshot
  resolves a title to one page or none.)
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

from harness.scoring.normalize import tokenize_fanoutqa
from harness.templates import packaged_text
from harness.text import plain_text
from harness.tools.registry import function_schema, register_tool
from harness.wiki_snapshot.chunking import chunk_text
from harness.wiki_snapshot.ranking import BM25PlusRanker

STYLES = ("fanoutqa", "paper-2024")
HIT_RULES = ("auto", "search-results", "title")
RANKING_QUERIES = ("question", "query")

# The reply to a miss, per style: a template with one field, {titles} (data in prompts/fanoutqa/, with its
# source and licence in prompts/README.md); each style lists the similar titles in its own markup.
NOT_FOUND = {
    "fanoutqa": packaged_text("fanoutqa/search_not_found.txt"),
    "paper-2024": packaged_text("fanoutqa/search_not_found_paper_2024.txt"),
}
TITLE_LINE = {"fanoutqa": "- {}", "paper-2024": "<search>{}</search>"}


@dataclass
class SearchConfig:
    """Every field is recorded in results."""

    style: str = "fanoutqa"  # or "paper-2024"
    chunk_size: int = 1024  # characters per chunk (fanoutqa's Corpus(doc_len=1024))
    ranking_query: str = "question"  # rank fragments by the question being answered, or by the call's "query"
    budget_fraction: float = 0.5  # share of the model's context one search result may use
    max_similar: int = 10  # similar titles listed on a miss
    hit_rule: str = "auto"  # "search-results" (redel's tool), "title" (resolve_title), "auto": see the module doc
    search_results: int = 10  # full-text results the search-results rule reads (fanoutqa.wiki_search: 10)
    bm25_k1: float = 1.5
    bm25_b: float = 0.75
    bm25_delta: float = 1.0

    def __post_init__(self) -> None:
        if self.style not in STYLES:
            raise ValueError(f"search style must be one of {STYLES}, got {self.style!r}")
        if self.ranking_query not in RANKING_QUERIES:
            raise ValueError(f"ranking_query must be one of {RANKING_QUERIES}, got {self.ranking_query!r}")
        if self.chunk_size <= 0:
            raise ValueError(f"chunk_size must be positive, got {self.chunk_size}")
        if not 0 < self.budget_fraction <= 1:
            raise ValueError(f"budget_fraction must be in (0, 1], got {self.budget_fraction}")
        if self.hit_rule not in HIT_RULES:
            raise ValueError(f"hit_rule must be one of {HIT_RULES}, got {self.hit_rule!r}")
        if self.search_results < 1:
            raise ValueError(f"search_results must be >= 1, got {self.search_results}")
        if self.max_similar < 0:
            raise ValueError(f"max_similar must be >= 0, got {self.max_similar}")
        if not self.bm25_k1 > 0:
            raise ValueError(f"bm25_k1 must be positive, got {self.bm25_k1}")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class SearchResult:
    text: str  # what the model sees
    found_title: str | None  # resolved page title, None if not found
    similar_titles: list[str] = field(default_factory=list)
    fragments: int = 0  # fragments returned (0 when the whole page was returned or nothing was found)
    whole_page: bool = False
    tokens: int = 0  # tokens of `text` by the model's counter
    truncated: bool = False  # some of the page did not fit the budget
    hit_rule: str = "title"  # the rule that decided hit or miss ("search-results" or "title")
    matched_title: str | None = None  # search-results: the result equal to the query (even if unreadable)
    replaced_surrogates: int = 0  # lone surrogates in the query, looked up as U+FFFD (harness.text)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def not_found_message(similar: Sequence[str], style: str = "fanoutqa") -> str:
    return NOT_FOUND[style].format(titles="\n".join(TITLE_LINE[style].format(t) for t in similar))


def resolve_hit_rule(rule: str, style: str, backend) -> str:
    """The rule ``"auto"`` stands for over ``backend``; an explicit rule as given."""
    if rule != "auto":
        return rule
    return "search-results" if style == "fanoutqa" and bool(getattr(backend, "full_text_search", False)) else "title"


def rank_chunks(
    chunks_with_titles: Sequence[tuple[str, str]], query: str, config: SearchConfig | None = None
) -> list[int]:
    """Indices of ``(title, chunk)`` pairs, best first for ``query``: fanoutqa's ``Corpus.best`` order.

    Only chunk text is scored (titles are carried along, as in the reference). Shared with the
    evidence-provided setting, which ranks all of a question's evidence chunks together.
    """
    config = config or SearchConfig()
    if not chunks_with_titles:
        return []
    ranker = BM25PlusRanker(
        tokenize_fanoutqa(chunk for _, chunk in chunks_with_titles),
        k1=config.bm25_k1,
        b=config.bm25_b,
        delta=config.bm25_delta,
    )
    return ranker.rank(tokenize_fanoutqa([query])[0])


class _PageIndex:
    """What one page costs to prepare, kept across searches: chunks, BM25 index, whole-page tokens."""

    __slots__ = ("chunks", "ranker", "whole_tokens")

    def __init__(self) -> None:
        self.chunks: list[str] | None = None
        self.ranker: BM25PlusRanker | None = None
        self.whole_tokens: int | None = None


@register_tool
class SearchTool:
    name = "search"
    description = packaged_text("fanoutqa/search_description.txt")  # FanOutQA's, see prompts/README.md
    # As the reference's kani ai_function declares it: one required string, no description.
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"query": {"type": "string"}},
        "required": ["query"],
    }

    def __init__(
        self,
        snapshot,
        config: SearchConfig,
        count_tokens: Callable[[str], int],
        context_size: int,
        cache_pages: int = 64,
    ):
        """``snapshot``: anything with ``resolve_title(title) -> Page | None`` (Page: pageid, revid,
        title, text) and ``similar_titles(query, k) -> list[str]``; for the search-results rule also
        ``search(query, k) -> [(title, score)]`` and ``full_text_search``. ``cache_pages``: how many pages'
        chunks and indexes to keep (least recently used are dropped; results do not depend on it)."""
        if not context_size or context_size <= 0:
            raise ValueError(f"the search tool needs the model's context size, got {context_size!r}")
        self.snapshot = snapshot
        self.config = config
        self.hit_rule = resolve_hit_rule(config.hit_rule, config.style, snapshot)
        if self.hit_rule == "search-results" and not getattr(snapshot, "full_text_search", False):
            raise ValueError(
                "hit_rule search-results needs a backend with a full-text search; this one has none "
                "(use hit_rule=title, or a snapshot built with FTS5, a ZIM with a full-text index, --search mediawiki)"
            )
        self.count_tokens = count_tokens
        self.context_size = int(context_size)
        self.budget = int(self.context_size * config.budget_fraction)
        self.cache_pages = max(1, cache_pages)
        self._pages: OrderedDict[tuple, _PageIndex] = OrderedDict()
        self._lock = threading.Lock()

    def openai_schema(self) -> dict[str, Any]:
        return function_schema(self.name, self.description, self.parameters)

    def describe(self) -> dict[str, Any]:
        """Recorded in results: the knobs and what they resolve to for this model."""
        return {
            "tool": self.name,
            **self.config.as_dict(),
            "hit_rule_resolved": self.hit_rule,
            "context_size": self.context_size,
            "budget_tokens": self.budget,
            "ranker": "bm25+ (rank_bm25.BM25Plus order, fanoutqa tokens)",
        }

    # ---------------------------------------------------------------------------------------
    def __call__(self, query: str, question: str) -> SearchResult:
        # a lone surrogate in the model's query ("\ud800" in its call): looked up as U+FFFD, counted
        query, replaced = plain_text("" if query is None else str(query))
        title_query = query.strip()
        rule, matched = self.hit_rule, None
        if rule == "search-results":
            hits = self.snapshot.search(title_query, self.config.search_results) if title_query else []
            results = [t for t, _ in hits]
            key = title_query.lower()  # the reference compares str.lower() of both, not casefold()
            matched = next((t for t in results if t.lower() == key), None)
            page = self.snapshot.resolve_title(matched) if matched is not None else None
            similar = results
        else:
            page = self.snapshot.resolve_title(title_query) if title_query else None
            similar = None
        if page is None:
            if similar is None:
                similar = self.snapshot.similar_titles(title_query, self.config.max_similar) if title_query else []
                similar = list(similar)
            similar = similar[: self.config.max_similar]
            text = not_found_message(similar, self.config.style)
            return SearchResult(
                text,
                None,
                similar,
                tokens=self.count_tokens(text),
                hit_rule=rule,
                matched_title=matched,
                replaced_surrogates=replaced,
            )

        entry = self._entry(page)
        head = f"<document>\n<title>{page.title}</title>\n"
        tail = "</document>"

        if self.config.style == "fanoutqa":
            full = f"{head}<content>\n{page.text}\n</content>\n{tail}"
            if entry.whole_tokens is None:
                entry.whole_tokens = self.count_tokens(full)
            if entry.whole_tokens <= self.budget:
                return SearchResult(
                    full,
                    page.title,
                    whole_page=True,
                    tokens=entry.whole_tokens,
                    hit_rule=rule,
                    matched_title=matched,
                    replaced_surrogates=replaced,
                )

        if entry.ranker is None:
            chunks = chunk_text(page.text, self.config.chunk_size)
            ranker = BM25PlusRanker(
                tokenize_fanoutqa(chunks), k1=self.config.bm25_k1, b=self.config.bm25_b, delta=self.config.bm25_delta
            )
            entry.chunks = chunks  # chunks before ranker: a concurrent call that sees the ranker sees both
            entry.ranker = ranker
        ranking_text = question if self.config.ranking_query == "question" else title_query
        order = entry.ranker.rank(tokenize_fanoutqa(["" if ranking_text is None else str(ranking_text)])[0])

        body, used, tokens = "", 0, None
        for i in order:
            formatted = f"<fragment>\n{entry.chunks[i]}\n</fragment>\n"
            n = self.count_tokens(head + body + formatted + tail)
            if n > self.budget:
                break
            body += formatted
            used += 1
            tokens = n
        text = head + body + tail
        if tokens is None:
            tokens = self.count_tokens(text)
        return SearchResult(
            text,
            page.title,
            fragments=used,
            tokens=tokens,
            truncated=used < len(entry.chunks),
            hit_rule=rule,
            matched_title=matched,
            replaced_surrogates=replaced,
        )

    def _entry(self, page) -> _PageIndex:
        key = (page.pageid, page.revid, page.title, self.config.chunk_size)
        with self._lock:
            entry = self._pages.get(key)
            if entry is None:
                entry = self._pages[key] = _PageIndex()
                while len(self._pages) > self.cache_pages:
                    self._pages.popitem(last=False)
            else:
                self._pages.move_to_end(key)
            return entry


__all__ = [
    "HIT_RULES",
    "NOT_FOUND",
    "SearchConfig",
    "SearchResult",
    "SearchTool",
    "not_found_message",
    "rank_chunks",
    "resolve_hit_rule",
]
