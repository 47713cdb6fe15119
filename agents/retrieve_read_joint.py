"""retrieve-read-joint: the top-K passages of a corpus-level index (BM25 or dense over the whole
snapshot) read together in one prompt. The prompt and packing are evidence-provided's: passages
best first as <document> blocks, as many as fit the context minus ``evidence_reserve`` tokens;
what was packed and what was cut is recorded, never truncated silently. This is the seed papers'
retrieve-then-read baseline with an LLM reader (QAMPARI's zero-shot LLM over the top 15 BM25
passages, hence K = 15 by default; FiD's "read the top passages jointly")."""

from __future__ import annotations

from harness.agents._knobs import ReserveKnobs, RetrievalKnobs, passage_knob, retrieval_k_knob
from harness.agents._retrieve import RetrievalAgent
from harness.agents.evidence_provided import check_budget, no_evidence_message, pack
from harness.errors import NoEvidencePackedError
from harness.strategy import budget_tokens
from harness.strategy import AgentContext, SampleResult

K_SOURCE = "QAMPARI: zero-shot LLM reader over the top 15 BM25 passages"


class RetrieveReadJoint(RetrievalAgent):
    default_template = "evidence_provided"
    template_fields = ("documents",)
    needs_context_size = True
    records = ("evidence_recall", "evidence")
    k_source = K_SOURCE
    takes_answer_instructions = True

    class Knobs(ReserveKnobs, RetrievalKnobs):
        retrieval_k: int = retrieval_k_knob(15, K_SOURCE)
        passage_kind: str = passage_knob("words100")

    def describe(self):
        return {**super().describe(), "reader": "joint (one prompt)"}

    def check_backend(self, model) -> None:
        check_budget(model.context_size(), self.knobs.evidence_reserve)

    async def solve(self, sample, ctx: AgentContext) -> SampleResult:
        query, question, rewrite, transcript = await self.question_for(sample, ctx)
        hits = self.retrieve(query)
        budget = budget_tokens(self.model.context_size(), self.knobs.evidence_reserve)
        prompt, packed, tokens = pack(
            [(h.title, h.text) for h in hits],
            lambda documents: self.prompt(question, documents=documents),
            self.model.count_tokens,
            budget,
        )
        evidence = {
            "chunks_total": len(hits),
            "chunks_packed": packed,
            "prompt_tokens": tokens,
            "budget_tokens": budget,
            "cut": packed < len(hits),  # retrieved passages that did not fit: recorded, never silent
            "packed_passages": [h.passage_id for h in hits[:packed]],
            "packed_titles": sorted({h.title for h in hits[:packed]}),
        }
        if packed == 0:  # the reader would answer blind: a failure, never an answer
            raise NoEvidencePackedError(
                no_evidence_message(evidence, self.model.context_size(), self.knobs.evidence_reserve)
            )
        messages = [{"role": "user", "content": prompt}]
        response = await ctx.generate(messages)
        extra = {**self.retrieval_extra(sample, query, hits, rewrite), "evidence": evidence}
        return SampleResult(
            answer=response.content or "", messages=transcript + messages + [response.as_message()], extra=extra
        )
