"""FanOutQA's open-book ``search`` tool over an offline Wikipedia snapshot.

Reproduces the benchmark's search function (the FanOutQA authors' open-book code): the query is
taken as a page title (exact, case-insensitive, redirects: whatever ``snapshot.resolve_title``
does). A miss returns similar titles. A hit returns the whole page if it fits the token budget
(half the model's context by default), otherwise the page's 1024-character chunks ranked by
BM25+ against the question being answered (``wiki_snapshot.ranking``: the same order as
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
from tools.registry import function_schema, register_tool
from wiki_snapshot.chunking import chunk_text
from wiki_snapshot.ranking import BM25PlusRanker

STYLES = ("fanoutqa", "paper-2024")
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

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def not_found_message(similar: Sequence[str], style: str = "fanoutqa") -> str:
    return NOT_FOUND[style].format(titles="\n".join(TITLE_LINE[style].format(t) for t in similar))


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
        title, text) and ``similar_titles(query, k) -> list[str]``. ``cache_pages``: how many pages'
        chunks and indexes to keep (least recently used are dropped; results do not depend on it)."""
        if not context_size or context_size <= 0:
            raise ValueError(f"the search tool needs the model's context size, got {context_size!r}")
        self.snapshot = snapshot
        self.config = config
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
            "context_size": self.context_size,
            "budget_tokens": self.budget,
            "ranker": "bm25+ (rank_bm25.BM25Plus order, fanoutqa tokens)",
        }

    # ---------------------------------------------------------------------------------------
    def __call__(self, query: str, question: str) -> SearchResult:
        query = "" if query is None else str(query)
        title_query = query.strip()
        page = self.snapshot.resolve_title(title_query) if title_query else None
        if page is None:
            similar = list(self.snapshot.similar_titles(title_query, self.config.max_similar)) if title_query else []
            similar = similar[: self.config.max_similar]
            text = not_found_message(similar, self.config.style)
            return SearchResult(text, None, similar, tokens=self.count_tokens(text))

        entry = self._entry(page)
        head = f"<document>\n<title>{page.title}</title>\n"
        tail = "</document>"

        if self.config.style == "fanoutqa":
            full = f"{head}<content>\n{page.text}\n</content>\n{tail}"
            if entry.whole_tokens is None:
                entry.whole_tokens = self.count_tokens(full)
            if entry.whole_tokens <= self.budget:
                return SearchResult(full, page.title, whole_page=True, tokens=entry.whole_tokens)

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
        return SearchResult(text, page.title, fragments=used, tokens=tokens, truncated=used < len(entry.chunks))

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


__all__ = ["NOT_FOUND", "SearchConfig", "SearchResult", "SearchTool", "not_found_message", "rank_chunks"]
