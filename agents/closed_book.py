"""Closed-book: the question alone, one model call, the paper's prompt (FanOutQA appendix H.4)."""

from __future__ import annotations

from agents import Agent, AgentContext, SampleResult, register_agent
from prompts import load_template


@register_agent("closed-book")
class ClosedBook(Agent):
    default_template = "closed_book"

    def __init__(self, config):
        super().__init__(config)
        self.template, self.template_source, self.template_sha256 = load_template(
            config.prompt_template or self.default_template
        )

    def identity(self):
        return {"prompt_template": self.template_source, "prompt_sha256": self.template_sha256}

    def prompt(self, question: str) -> str:
        return self.template.format(question=question, current_date=self.config.current_date)

    async def solve(self, sample, ctx: AgentContext) -> SampleResult:
        messages = [{"role": "user", "content": self.prompt(sample.question)}]
        response = await ctx.generate(messages)
        messages.append(response.as_message())
        return SampleResult(answer=response.content or "", messages=messages)
