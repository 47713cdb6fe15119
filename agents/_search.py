"""Shared by the open-book strategies: the search tool for one run, per-sample search records,
evidence recall, and the context guard that never lets a conversation be cut silently."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from harness.agents._knobs import SearchToolKnobs


def build_search_tool(knobs: SearchToolKnobs, model, snapshot):
    from harness.tools.search import SearchConfig, SearchTool

    search_config = SearchConfig(
        style=knobs.search_style,
        chunk_size=knobs.chunk_size,
        ranking_query=knobs.ranking_query,
        budget_fraction=knobs.budget_fraction,
        max_similar=knobs.max_similar,
        bm25_k1=knobs.bm25_k1,
        bm25_b=knobs.bm25_b,
        bm25_delta=knobs.bm25_delta,
        hit_rule=knobs.hit_rule,
        search_results=knobs.search_results,
    )
    try:
        return SearchTool(snapshot, search_config, model.count_tokens, model.context_size())
    except ValueError as exc:  # a hit rule this backend cannot follow: one line, before any question
        from harness.errors import ConfigError

        raise ConfigError(f"--agent-arg hit_rule: {exc}") from None


def canonical_title(snapshot, title: str) -> str:
    page = snapshot.resolve_title(title) if snapshot is not None else None
    return (page.title if page else title).casefold()


def evidence_recall(snapshot, needed: Sequence[str], returned: list[str]) -> dict[str, Any]:
    """Share of the pages a question needs that the agent's searches actually returned; with the
    distinct pages returned and those of them needed (``relevant``: the agent metric's precision)."""
    needed = list(needed)  # Sample.needed_titles is a PackedList: decoded once, and written as a list
    distinct: dict[str, str] = {}  # casefolded -> its first spelling, in order
    for t in returned:
        distinct.setdefault(t.casefold(), t)
    if not needed:
        return {"needed": [], "found": [], "recall": None, "returned": list(distinct.values()), "relevant": []}
    got = {t.casefold() for t in returned}
    canonical = {canonical_title(snapshot, t) for t in needed}
    found = [t for t in needed if canonical_title(snapshot, t) in got]
    relevant = [t for key, t in distinct.items() if key in canonical]
    record = {"needed": needed, "found": found, "recall": len(found) / len(needed)}
    return {**record, "returned": list(distinct.values()), "relevant": relevant}


class SearchSession:
    """One sample's calls to the search tool, with what each returned."""

    def __init__(self, tool, question: str, repeat_question: bool):
        self.tool = tool
        self.question = question
        self.repeat_question = repeat_question
        self.searches: list[dict[str, Any]] = []
        self.malformed_calls = 0
        self.text_calls = 0  # tool calls the model wrote as text (read and run as calls)
        self.text_call_replies: list[str] = []  # those replies as written

    def search(self, query: str) -> str:
        result = self.tool(query, self.question)
        replaced = getattr(result, "replaced_surrogates", 0)  # a plugin tool's result may not say
        self.searches.append(
            {
                "query": query,
                "found_title": result.found_title,
                "whole_page": result.whole_page,
                "fragments": result.fragments,
                "tokens": result.tokens,
                "truncated": result.truncated,
                "similar_titles": result.similar_titles,
                # the rule that decided (the knob's "auto" resolved); a plugin tool's result may not say
                "hit_rule": getattr(result, "hit_rule", None),
                "matched_title": getattr(result, "matched_title", None),
                # lone surrogates in the query, looked up as U+FFFD ("query" keeps them: its escape)
                **({"replaced_surrogates": replaced} if replaced else {}),
            }
        )
        text = result.text
        if self.repeat_question:  # paper appendix F.2: remind the model what it is answering
            text += f"\n\n[Question]: {self.question}"
        return text

    def call(self, name: str, arguments: str) -> str:
        """A native tool call; malformed ones get an error the model can read, and are counted."""
        if name != self.tool.name:
            self.malformed_calls += 1
            return f"Error: there is no tool named {name!r}; the only tool is {self.tool.name!r}."
        try:
            args = json.loads(arguments or "{}")
            query = args["query"]
            if not isinstance(query, str) or not query.strip():
                raise ValueError
        except (ValueError, KeyError, TypeError):
            self.malformed_calls += 1
            return 'Error: call search with JSON arguments like {"query": "Page title"}.'
        return self.search(query)

    def record(self, snapshot, needed_titles: Sequence[str]) -> dict[str, Any]:
        returned = [s["found_title"] for s in self.searches if s["found_title"]]
        return {
            "searches": self.searches,
            "malformed_tool_calls": self.malformed_calls,
            "text_tool_calls": self.text_calls,
            "text_tool_call_replies": self.text_call_replies,
            "evidence_recall": evidence_recall(snapshot, needed_titles, returned),
        }


class ContextGuard:
    """Keeps the next request inside the context window, or says it cannot.

    policy "stop": the sample ends, recorded as context_full (scored as unanswered).
    policy "drop-oldest": the oldest search results are blanked (kept as placeholders so tool
    calls stay paired) until the request fits; each drop is recorded.
    """

    PER_MESSAGE_OVERHEAD = 8  # role and separator tokens of chat templates

    def __init__(self, model, max_tokens: int, policy: str):
        self.model = model
        self.max_tokens = max_tokens
        self.policy = policy
        self.dropped = 0

    def tokens(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> int:
        total = sum(self.model.count_tokens(m.get("content") or "") + self.PER_MESSAGE_OVERHEAD for m in messages)
        for m in messages:
            for call in m.get("tool_calls") or []:
                total += self.model.count_tokens(call["function"]["arguments"])
        if tools:
            total += self.model.count_tokens(json.dumps(tools))
        return total

    def ensure(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> bool:
        limit = self.model.context_size()
        if not limit:
            return True
        while self.tokens(messages, tools) + self.max_tokens > limit:
            if self.policy != "drop-oldest" or not self._drop_one(messages):
                return False
        return True

    def _drop_one(self, messages: list[dict[str, Any]]) -> bool:
        # never the first message (the question) nor the last (the newest result)
        for m in messages[1:-1]:
            if m["role"] in ("tool", "user") and not m.get("_dropped"):
                m["content"] = "[search result removed: the context was full]"
                m["_dropped"] = True
                self.dropped += 1
                return True
        return False


def clean(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages as sent (bookkeeping keys removed)."""
    return [{k: v for k, v in m.items() if not k.startswith("_")} for m in messages]


def summarize_records(extras: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The search, retrieve-read and evidence strategies' ``summarize``: evidence recall and searches
    (open-book, retrieve-read), tool calls that could not be read (open-book loops) and packing facts
    (evidence-provided), over the answered samples' records."""
    recalls = [e["evidence_recall"]["recall"] for e in extras if (e.get("evidence_recall") or {}).get("recall") is not None]
    packed = [e["evidence"] for e in extras if e.get("evidence")]
    looped = [e for e in extras if "malformed_tool_calls" in e]
    if not recalls and not packed and not looped:
        return None
    out: dict[str, Any] = {}
    if looped:  # open-book loops: tool calls that could not be read, and those written as text
        out["malformed_tool_calls"] = sum(e["malformed_tool_calls"] for e in looped)
        out["text_tool_calls"] = sum(e.get("text_tool_calls", 0) for e in looped)
    if recalls:
        searches = [len(e.get("searches", [])) for e in extras if "searches" in e]
        out["evidence_recall_mean"] = sum(recalls) / len(recalls)
        out["evidence_recall_n"] = len(recalls)
        if searches:  # open-book agents search; retrieve-read agents query an index once
            out["searches_mean"] = sum(searches) / len(searches)
    if packed:
        out["evidence_cut"] = sum(1 for p in packed if p["cut"])
        out["chunks_packed_mean"] = sum(p["chunks_packed"] for p in packed) / len(packed)
        out["prompt_tokens_mean"] = sum(p["prompt_tokens"] for p in packed) / len(packed)
    return out
