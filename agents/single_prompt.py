"""Single-prompt strategies: the template filled for the sample, one model call, the reply is the
answer. ``closed-book`` and ``entity-set`` differ only in their template; subclasses may fill more
template fields (``fields``) or cut the reply (``final_answer``)."""

from __future__ import annotations

from typing import Any

from harness.strategy import Agent, AgentContext, SampleResult


class SinglePrompt(Agent):
    takes_answer_instructions = True  # one reply, the answer (a subclass that cuts it says False)

    def fields(self, sample) -> dict[str, Any]:
        """Template fields besides {question} and {current_date} (declare them in ``template_fields``)."""
        return {}

    def final_answer(self, content: str) -> str:
        return content

    async def solve(self, sample, ctx: AgentContext) -> SampleResult:
        messages = [{"role": "user", "content": self.prompt(sample.question, **self.fields(sample))}]
        response = await ctx.generate(messages)
        messages.append(response.as_message())
        return SampleResult(answer=self.final_answer(response.content or ""), messages=messages)


class ClosedBook(SinglePrompt):
    """Closed-book: the question alone, the paper's prompt (FanOutQA appendix H.4)."""

    settings = ("closed-book",)
    default_template = "closed_book"


class EntitySet(SinglePrompt):
    """Entity-set (closed book): the query alone, asking for the Wikipedia page titles of every
    entity that satisfies it, one per line (QUEST-style set retrieval from memory)."""

    settings = ("closed-book",)
    default_template = "entity_set"
