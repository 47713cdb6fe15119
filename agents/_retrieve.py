"""Shared by the retrieve-read strategies: the passage index a run searches, the question
representation (conversations: original, all history, or rewritten by the model), and what is
recorded per sample (query, retrieved passage ids/titles/scores, evidence recall).

Knobs (``RetrievalKnobs``): ``retriever`` (bm25 | dense), ``retrieval_k`` and ``passage_kind``
(defaults: each strategy's paper values), ``question_representation``. The index is the one ``harness index build`` made beside the
snapshot; its identity (passages, build options, model weights) is part of the run's config hash.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any, ClassVar

from harness.agents._knobs import RetrievalKnobs
from harness.agents._search import evidence_recall, summarize_records
from harness.datasets.conversation import first_line, format_history
from harness.errors import ConfigError
from harness.strategy import Agent, AgentContext

_LABEL = re.compile(r"^\s*(?:rewritten question|question)\s*:\s*", re.IGNORECASE)


class RetrievalAgent(Agent):
    settings = ("retrieve-read",)
    Knobs = RetrievalKnobs  # subclasses add retrieval_k and passage_kind with their own defaults
    needs_snapshot = True
    searches_wiki = True
    records: ClassVar[tuple[str, ...]] = ("evidence_recall",)
    k_source: ClassVar[str]  # where the default K comes from (recorded)

    def __init__(self, config, knobs=None):
        super().__init__(config, knobs)
        self.retriever = None
        self._meta: dict[str, Any] | None = None
        self.rewrite_template = self.rewrite_source = self.rewrite_sha256 = None
        if self.knobs.question_representation == "rewritten":
            from harness.templates import load_template

            self.rewrite_template, self.rewrite_source, self.rewrite_sha256 = load_template("rewrite_question")

    def summarize(self, extras: list[dict[str, Any]]) -> dict[str, Any] | None:
        return summarize_records(extras)

    @property
    def k(self) -> int:
        return self.knobs.retrieval_k

    @property
    def passages(self) -> str:
        return self.knobs.passage_kind

    def index_meta(self) -> dict[str, Any]:
        """The index's metadata, checked against the snapshot before any model is started."""
        if self._meta is None and self.config.search_url:
            self._meta = self._served_meta()
        if self._meta is None:
            if not self.config.snapshot:
                raise ConfigError(
                    f"agent {self.name} searches a passage index: pass --snapshot SNAP.db (or --search-url URL)"
                )
            from harness.wiki_snapshot.retrieval import check_fresh, read_meta
            from harness.wiki_snapshot.store import Snapshot

            directory, meta = read_meta(self.config.snapshot, self.knobs.retriever, self.passages)
            with Snapshot.open(self.config.snapshot) as snapshot:
                check_fresh(meta, snapshot, directory, self.knobs.retriever, self.passages)
            self._meta = meta
        return self._meta

    def _served_meta(self) -> dict[str, Any]:
        """``--search-url``: the index's metadata as the service has it (checked fresh there)."""
        from harness.redact import strip_credentials
        from harness.wiki_snapshot.errors import SnapshotError
        from harness.wiki_snapshot.remote import RemoteWiki

        url, attempts = self.config.search_url, self.config.search_max_attempts
        try:
            with RemoteWiki.connect(url, shown=strip_credentials(url), attempts=attempts) as wiki:
                return wiki.index_meta(self.knobs.retriever, self.passages)
        except SnapshotError as exc:
            raise ConfigError(str(exc)) from None

    def identity(self) -> dict[str, Any]:
        meta = self.index_meta()
        index = {k: meta.get(k) for k in ("retriever", "passages", "n_passages", "splitter")}
        if "bm25" in meta:
            index["bm25"] = meta["bm25"]["options"]
        if "dense" in meta:
            index["dense"] = {k: meta["dense"][k] for k in ("model", "weights_sha256", "max_seq_length")}
            if meta["dense"].get("ann"):  # approximate search: its parameters change the results (exact keys unchanged)
                index["dense"]["ann"] = meta["dense"]["ann"]
        out = {**super().identity(), "index": index}
        if self.rewrite_sha256:
            out["rewrite_prompt_sha256"] = self.rewrite_sha256
        return out

    def describe(self) -> dict[str, Any]:
        default_k = type(self.knobs).model_fields["retrieval_k"].default
        out = {
            **super().describe(),
            "retrieval_k_default": {"value": default_k, "source": self.k_source},
            "index": self.retriever.describe() if self.retriever is not None else None,
        }
        if self.rewrite_source:
            out["rewrite_prompt"] = {"template": self.rewrite_source, "sha256": self.rewrite_sha256}
        return out

    def prepare(self, model, snapshot) -> None:
        super().prepare(model, snapshot)
        served = getattr(snapshot, "open_retriever", None)  # --search-url: the service's index
        if served is not None:
            self.retriever = served(self.knobs.retriever, self.passages)
            return
        from harness.wiki_snapshot.retrieval import open_retriever

        self.retriever = open_retriever(snapshot, self.knobs.retriever, self.passages)

    # question representation --------------------------------------------------------------
    async def question_for(self, sample, ctx: AgentContext) -> tuple[str, str, dict[str, Any] | None, list]:
        """(retrieval query, the question the reader sees, the rewrite record, the rewrite's messages).

        ``original``: the question. ``all-history``: the retriever gets ``q1 [SEP] a1 [SEP] ... qn``
        (TopiOCQA's official retriever input), the reader ``Q1: ... / A1: ... / Qn: ...`` lines.
        ``rewritten``: the model first rewrites the question to stand alone (one cached call, its
        transcript kept); both see the rewrite. Without previous turns all three are the question."""
        rep = self.knobs.question_representation
        if rep == "original" or not sample.history:
            return sample.question, sample.question, None, []
        if rep == "all-history":
            return (
                format_history(sample, "all-history", style="sep"),
                format_history(sample, "all-history", style="prompt"),
                None,
                [],
            )
        history = format_history(sample, "all-history", style="prompt", include_question=False)
        prompt = self.rewrite_template.format(
            history=history, question=sample.question, current_date=self.config.current_date
        )
        messages = [{"role": "user", "content": prompt}]
        response = await ctx.generate(messages)
        text = _LABEL.sub("", first_line(response.content or "")).strip().strip('"').strip()
        rewritten = text or sample.question
        record = {"question": sample.question, "rewritten": rewritten, "fell_back_to_question": not text}
        return rewritten, rewritten, record, messages + [response.as_message()]

    # retrieval and its record -------------------------------------------------------------
    def retrieve(self, query: str, k: int | None = None):
        return self.retriever.search(query, k or self.k)

    def retrieval_extra(self, sample, query: str, hits, rewrite: dict[str, Any] | None) -> dict[str, Any]:
        extra = {
            "retrieval": {
                "retriever": self.knobs.retriever,
                "passages": self.passages,
                "k": self.k,
                "query": query,
                "n_retrieved": len(hits),
                "hits": [h.record() for h in hits],
            },
            # the share of the pages the question needs that the retriever returned (any rank <= K)
            "evidence_recall": evidence_recall(self.snapshot, list(sample.needed_titles), [h.title for h in hits]),
            "question_representation": self.knobs.question_representation,
        }
        if rewrite is not None:
            extra["rewrite"] = rewrite
        return extra

    async def gather_limited(self, coros) -> list:
        """Run one sample's independent model calls, at most ``max_connections`` at a time, in order."""
        semaphore = asyncio.Semaphore(self.config.max_connections)

        async def one(coro):
            async with semaphore:
                return await coro

        return await asyncio.gather(*(one(c) for c in coros))
