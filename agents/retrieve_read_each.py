"""retrieve-read-each: QAMPARI's PIG reader ("passage-independent generator") with an LLM. Each of
the top-K passages is read on its own, in a prompt that offers an explicit abstain answer
(``NO ANSWER``); the answers of all passages are unioned in rank order and de-duplicated (case and
whitespace folded), one per line. Every passage's output is recorded, and a passage whose prompt
cannot fit the context is recorded as skipped, never cut. K defaults to 200: the depth QAMPARI's
retriever runs keep for their readers (``simple_index.py --k 200``); each passage costs one model call.
"""

from __future__ import annotations

import re

from harness.agents._knobs import ReserveKnobs, RetrievalKnobs, passage_knob, retrieval_k_knob
from harness.agents._retrieve import RetrievalAgent
from harness.agents.evidence_provided import pack
from harness.strategy import budget_tokens
from harness.strategy import AgentContext, SampleResult

ABSTAIN = "NO ANSWER"
_BULLET = re.compile(r"^\s*(?:[-*•]\s+|\(?\d+[.)]\s+)")


def _fold(text: str) -> str:
    return " ".join(text.split()).casefold()


def parse_answers(output: str, abstain: str = ABSTAIN) -> tuple[list[str], bool]:
    """Answer lines of one reading (bullets and numbering stripped) and whether it abstained: a line
    that starts with the abstain answer is no answer."""
    answers = []
    abstained = False
    for line in (output or "").splitlines():
        line = _BULLET.sub("", line).strip().strip("\"'").strip()
        if not line:
            continue
        if _fold(line).startswith(_fold(abstain)):
            abstained = True
            continue
        answers.append(line)
    return answers, abstained or not answers


def union(readings: list[list[str]]) -> list[str]:
    """All answers in rank order, the first spelling of each (case and whitespace folded) kept."""
    seen: dict[str, str] = {}
    for answers in readings:
        for a in answers:
            seen.setdefault(_fold(a), a)
    return list(seen.values())


K_SOURCE = "QAMPARI: the retriever depth its readers get (simple_index.py --k 200)"


class RetrieveReadEach(RetrievalAgent):
    default_template = "retrieve_read_each"
    template_fields = ("documents", "abstain")
    needs_context_size = True
    k_source = K_SOURCE

    class Knobs(ReserveKnobs, RetrievalKnobs):
        retrieval_k: int = retrieval_k_knob(200, K_SOURCE)
        passage_kind: str = passage_knob("words100")

    def describe(self):
        return {
            **super().describe(),
            "reader": "each passage alone, answers unioned (PIG)",
            "abstain_answer": ABSTAIN,
            "dedupe": "case and whitespace folded, first spelling in rank order",
        }

    async def solve(self, sample, ctx: AgentContext) -> SampleResult:
        query, question, rewrite, transcript = await self.question_for(sample, ctx)
        hits = self.retrieve(query)
        budget = budget_tokens(self.model.context_size(), self.knobs.evidence_reserve)

        async def read(rank: int, hit):
            prompt, packed, tokens = pack(
                [(hit.title, hit.text)],
                lambda documents: self.prompt(question, documents=documents, abstain=ABSTAIN),
                self.model.count_tokens,
                budget,
            )
            reading = {"rank": rank + 1, **hit.record(), "prompt_tokens": tokens}
            if packed == 0:
                return {**reading, "skipped": "the passage does not fit the context"}, []
            messages = [{"role": "user", "content": prompt}]
            response = await ctx.generate(messages)
            answers, abstained = parse_answers(response.content or "")
            reading.update(
                {
                    "output": response.content or "",
                    "answers": answers,
                    "abstained": abstained,
                    "finish_reason": response.finish_reason,  # "length": the reading hit --max-tokens
                }
            )
            return reading, messages + [response.as_message()]

        done = await self.gather_limited(read(i, h) for i, h in enumerate(hits))
        readings = [r for r, _ in done]
        for _, exchange in done:  # each pair is its own request, in rank order
            transcript = transcript + exchange
        answers = union([r.get("answers", []) for r in readings])
        extra = {
            **self.retrieval_extra(sample, query, hits, rewrite),
            "readings": readings,
            "passages_read": sum(1 for r in readings if "skipped" not in r),
            "passages_skipped": sum(1 for r in readings if "skipped" in r),
            "passages_abstained": sum(1 for r in readings if r.get("abstained")),
        }
        outcome = "answered" if answers else "all_abstained"
        return SampleResult(answer="\n".join(answers), messages=transcript, extra=extra, outcome=outcome)
