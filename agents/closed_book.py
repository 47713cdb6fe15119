"""Closed-book: the question alone, one model call, the paper's prompt (FanOutQA appendix H.4)."""

from __future__ import annotations

from agents import Agent, AgentContext, SampleResult, register_agent


@register_agent("closed-book")
class ClosedBook(Agent):
    default_template = "closed_book"

    async def solve(self, sample, ctx: AgentContext) -> SampleResult:
        messages = [{"role": "user", "content": self.prompt(sample.question)}]
        response = await ctx.generate(messages)
        messages.append(response.as_message())
        return SampleResult(answer=response.content or "", messages=messages)
