"""Evidence-provided: every evidence page of the question, chunked, ranked by the question (BM25+),
packed as <document> blocks until the prompt reaches the context size minus a reserve (paper:
520 tokens), with the paper's prompt (appendix H.4). What was packed and cut is recorded."""

from __future__ import annotations

from typing import Any, Callable

from harness.agents._knobs import RankingKnobs, ReserveKnobs
from harness.agents._search import summarize_records
from harness.errors import ConfigError, MissingEvidenceError, NoEvidencePackedError
from harness.strategy import Agent, AgentContext, SampleResult, budget_tokens


def format_document(title: str, content: str) -> str:
    return f"<document>\n<title>{title}</title>\n<content>{content}</content>\n</document>\n"


def pack(
    chunks: list[tuple[str, str]], make_prompt: Callable[[str], str], count_tokens: Callable[[str], int], budget: int
) -> tuple[str, int, int]:
    """The longest best-first prefix of ``chunks`` whose prompt fits ``budget`` tokens, as the
    paper's loop (add until one does not fit, then stop) finds it; binary search keeps the number
    of full-prompt token counts logarithmic. Returns (prompt, chunks packed, prompt tokens)."""
    blocks = [format_document(t, c) for t, c in chunks]

    def tokens(k: int) -> int:
        return count_tokens(make_prompt("".join(blocks[:k])))

    lo, hi = 0, len(blocks)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if tokens(mid) <= budget:
            lo = mid
        else:
            hi = mid - 1
    prompt = make_prompt("".join(blocks[:lo]))
    return prompt, lo, count_tokens(prompt)


def evidence_pages(snapshot, pages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(title, text) of each page entry ({"title", "pageid"?}); MissingEvidenceError if any is missing."""
    docs, missing = [], []
    for ev in pages:
        page = snapshot.get_page(ev["pageid"]) if ev.get("pageid") else None
        page = page or snapshot.resolve_title(ev["title"])
        if page is None:
            missing.append(ev["title"])
        else:
            docs.append((page.title, page.text))
    if missing:
        raise MissingEvidenceError(missing)
    return docs


def ranked_chunks(knobs: RankingKnobs, docs: list[tuple[str, str]], question: str) -> list[tuple[str, str]]:
    from harness.scoring.normalize import tokenize_fanoutqa
    from harness.wiki_snapshot.ranking import rank_documents

    return rank_documents(
        docs,
        question,
        chunk_size=knobs.chunk_size,
        k1=knobs.bm25_k1,
        b=knobs.bm25_b,
        delta=knobs.bm25_delta,
        tokenize=tokenize_fanoutqa,
    )


def check_budget(context_size: int | None, reserve: int) -> None:
    """Before the run: a context the reserve fills leaves no room for a single document."""
    if budget_tokens(context_size, reserve) <= 0:
        raise ConfigError(
            f"the context size ({context_size} tokens) leaves no room for evidence after the "
            f"{reserve} tokens kept for the answer: pass a larger --context-size, or --agent-arg evidence_reserve=N"
        )


def no_evidence_message(record: dict[str, Any], context_size: int | None, reserve: int) -> str:
    """Why a sample had not one document packed (``record``: the strategy's evidence record)."""
    if not record["chunks_total"]:
        return "no evidence to pack: no document was found for the question"
    return (
        f"not one of {record['chunks_total']} documents fits the prompt budget of {record['budget_tokens']} tokens "
        f"(context {context_size} - reserve {reserve}): pass a larger --context-size"
    )


class EvidenceProvided(Agent):
    settings = ("evidence-provided",)
    default_template = "evidence_provided"
    template_fields = ("documents",)
    needs_context_size = True
    needs_snapshot = True
    records = ("evidence",)
    takes_answer_instructions = True  # one reply, the answer

    class Knobs(ReserveKnobs, RankingKnobs):
        pass

    def describe(self):
        return {**super().describe(), "ranking": "BM25+ by the question"}

    def summarize(self, extras: list[dict[str, Any]]) -> dict[str, Any] | None:
        return summarize_records(extras)

    def check_backend(self, model) -> None:
        check_budget(model.context_size(), self.knobs.evidence_reserve)

    def budget(self) -> int:
        return budget_tokens(self.model.context_size(), self.knobs.evidence_reserve)

    def pages(self, sample) -> list[dict[str, Any]]:
        """The page entries packed for ``sample``: all its evidence pages."""
        return sample.evidence

    def ranked_evidence(self, sample) -> list[tuple[str, str]]:
        """The sample's pages as (title, chunk), best first; MissingEvidenceError if a page is missing."""
        return ranked_chunks(self.knobs, evidence_pages(self.snapshot, self.pages(sample)), sample.question)

    @staticmethod
    def packed_documents(chunks: list[tuple[str, str]], packed: int) -> str:
        """The document blocks of the first ``packed`` chunks, as the prompt holds them."""
        return "".join(format_document(t, c) for t, c in chunks[:packed])

    def build_prompt(self, sample, budget: int | None = None, chunks=None) -> tuple[str, dict[str, Any]]:
        """The packed prompt and what went into it; ``budget`` overrides the model's (ceiling sweeps),
        ``chunks`` reuses a ranking already computed for this sample."""
        budget = self.budget() if budget is None else budget
        if chunks is None:
            chunks = self.ranked_evidence(sample)
        prompt, packed, tokens = pack(
            chunks, lambda documents: self.prompt(sample.question, documents=documents), self.model.count_tokens, budget
        )
        record = {
            "evidence_pages": sorted({t for t, _ in chunks}),
            "chunks_total": len(chunks),
            "chunks_packed": packed,
            "prompt_tokens": tokens,
            "budget_tokens": budget,
            "cut": packed < len(chunks),  # some evidence did not fit: recorded, never silent
            "packed_titles": sorted({t for t, _ in chunks[:packed]}),
        }
        return prompt, record

    async def solve(self, sample, ctx: AgentContext) -> SampleResult:
        prompt, record = self.build_prompt(sample)
        if record["chunks_packed"] == 0:  # the model would answer blind: a failure, never an answer
            raise NoEvidencePackedError(
                no_evidence_message(record, self.model.context_size(), self.knobs.evidence_reserve)
            )
        messages = [{"role": "user", "content": prompt}]
        response = await ctx.generate(messages)
        messages.append(response.as_message())
        return SampleResult(answer=response.content or "", messages=messages, extra={"evidence": record})
