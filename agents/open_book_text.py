"""Open-book with the paper's text protocol for models without native tool calling.

The model writes <search>QUERY</search>; the harness answers with the search result as a user
turn. Like the paper's parser, the search must open the reply (``text_protocol_strict``, on by
default) and anything after </search> is cut from the kept reply.
"""

from __future__ import annotations

import re

from agents import Agent, AgentContext, SampleResult, register_agent
from agents._search import ContextGuard, SearchSession, build_search_tool, clean, search_knobs
from harness.errors import ContextOverflowError

SEARCH = re.compile(r"<search>(.+?)</search>")


@register_agent("open-book-text")
class OpenBookText(Agent):
    default_template = "open_book_text"
    needs_context_size = True
    needs_snapshot = True

    def prepare(self, model, snapshot) -> None:
        super().prepare(model, snapshot)
        self.tool = build_search_tool(self.config, model, snapshot)

    def describe(self):
        return {
            **super().describe(),
            **search_knobs(self.config),
            "protocol": "text",
            "strict": self.config.text_protocol_strict,
        }

    async def solve(self, sample, ctx: AgentContext) -> SampleResult:
        session = SearchSession(self.tool, sample.question, self.config.repeat_question)
        guard = ContextGuard(self.model, ctx.params.max_tokens, self.config.context_policy)
        messages = [{"role": "user", "content": self.prompt(sample.question)}]
        answer, outcome, rounds = None, "max_rounds", 0
        for rounds in range(1, self.config.max_rounds + 1):
            if not guard.ensure(messages):
                outcome = "context_full"
                break
            try:
                response = await ctx.generate(clean(messages))
            except ContextOverflowError:
                outcome = "context_full"
                break
            content = response.content or ""
            match = SEARCH.match(content) if self.config.text_protocol_strict else SEARCH.search(content)
            if not match:
                messages.append({"role": "assistant", "content": content})
                answer, outcome = content, "answered"
                break
            messages.append({"role": "assistant", "content": content[: match.end()]})
            messages.append({"role": "user", "content": session.search(match[1])})
        extra = {
            "outcome": outcome,
            "rounds": rounds,
            "dropped_results": guard.dropped,
            **session.record(self.snapshot, sample.needed_titles),
        }
        return SampleResult(answer=answer, messages=clean(messages), extra=extra)
