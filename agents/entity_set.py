"""Entity-set (closed book): the query alone, one model call, asking for the Wikipedia page titles
of every entity that satisfies it, one per line (QUEST-style set retrieval from memory)."""

from __future__ import annotations

from agents import Agent, AgentContext, SampleResult, register_agent


@register_agent("entity-set")
class EntitySet(Agent):
    default_template = "entity_set"

    async def solve(self, sample, ctx: AgentContext) -> SampleResult:
        messages = [{"role": "user", "content": self.prompt(sample.question)}]
        response = await ctx.generate(messages)
        messages.append(response.as_message())
        return SampleResult(answer=response.content or "", messages=messages)
