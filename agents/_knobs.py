"""Knob groups several strategies share (``--agent-arg KEY=VALUE`` / the YAML ``agent:`` section).

Types, bounds, defaults and help are those the options had as ``RunConfig`` fields, so a run
configured the old way asks the same questions.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ValidationInfo, field_validator

from harness.strategy import Knobs, knob


class RankingKnobs(Knobs):
    """How a page is cut into chunks and the chunks ranked (BM25+, FanOutQA's retriever)."""

    chunk_size: int = knob(1024, "characters per chunk (FanOutQA's chunker)", ge=64, le=10_000_000)
    bm25_k1: float = knob(1.5, "BM25+ k1", ge=0, le=100)
    bm25_b: float = knob(0.75, "BM25+ b", ge=0, le=1)
    bm25_delta: float = knob(1.0, "BM25+ delta", ge=0, le=100)


class ReserveKnobs(Knobs):
    """Strategies that pack documents into the context up to a token budget."""

    evidence_reserve: int = knob(520, "tokens kept free for the answer (paper: 520)", ge=0, le=10_000_000)


class SearchToolKnobs(RankingKnobs):
    """The open-book search tool, and what every loop around it shares (the context policy, the
    question repeated after each result)."""

    search_style: Literal["fanoutqa", "paper-2024"] = knob("fanoutqa", "search tool replies: fanoutqa | paper-2024")
    ranking_query: Literal["question", "query"] = knob(
        "question", "rank a page's chunks by the question or the tool's query"
    )
    budget_fraction: float = knob(0.5, "share of the context one search result may use", gt=0, le=1)
    max_similar: int = knob(10, "similar titles offered when a title is not found", ge=0, le=10_000)
    # "title" was the only rule before this knob: runs that set it keep their run keys
    hit_rule: Literal["auto", "search-results", "title"] = knob(
        "auto",
        "which query is a hit: search-results (FanOutQA's tool: a top full-text result whose title equals the "
        "query, lower-cased) | title (resolved as a title: case, redirects) | auto (search-results for "
        "search_style fanoutqa over a full-text search, else title)",
        neutral="title",
    )
    search_results: int = knob(
        10, "full-text results the search-results hit rule reads (fanoutqa.wiki_search: 10)", ge=1, le=500, neutral=10
    )
    context_policy: Literal["stop", "drop-oldest"] = knob(
        "stop", "when the conversation fills the context: stop | drop-oldest"
    )
    repeat_question: bool = knob(False, "repeat the question after each retrieval (paper F.2)")


class SearchKnobs(SearchToolKnobs):
    """The open-book search tool and the loop around it."""

    max_rounds: int = knob(20, "model turns per sample in the open-book loop", ge=1, le=10_000)


class HistoryKnobs(Knobs):
    """Conversational strategies: what the prompt carries of the previous turns."""

    history: Literal["original", "all-history"] = knob(
        "all-history", "conversational datasets: the question alone, or with all previous turns"
    )


class RetrievalKnobs(Knobs):
    """The retrieve-read strategies' passage index and question representation. Strategies set
    their own ``retrieval_k`` / ``passage_kind`` defaults with ``retrieval_k_knob`` / ``passage_knob``."""

    retriever: Literal["bm25", "dense"] = knob("bm25", "passage index the retrieve-read strategies search")
    question_representation: Literal["original", "all-history", "rewritten"] = knob(
        "all-history", "conversations: what retriever and reader see (TopiOCQA section 5.1.2)"
    )

    @field_validator("retrieval_k", "passage_kind", mode="before", check_fields=False)
    @classmethod
    def _none_is_default(cls, value: Any, info: ValidationInfo) -> Any:
        # these were "None = the strategy's own" options: null still means the strategy's default
        return cls.model_fields[info.field_name].default if value is None else value


def retrieval_k_knob(default: int, source: str) -> Any:
    return knob(default, f"passages (classify: entities) retrieved; default {default}: {source}", ge=1, le=1_000_000)


def passage_knob(default: str) -> Any:
    return knob(default, "words100 | chunk1024 | page", pattern=r"^(words\d+|chunk\d+|page)$")
