"""Open-book with native tool calling (OpenAI, Anthropic, OpenAI-compatible servers, llama.cpp).

The model gets the paper's function-calling prompt and a `search` tool, and loops until it
answers without calling the tool, runs out of rounds, or fills its context (both recorded).
llama.cpp cannot let the model choose with tool_choice "auto" (it never returns tool calls), so
for backends that say so the first turn names the tool and later turns are "auto"; the policy
used is recorded in the sample.
"""

from __future__ import annotations

from agents import Agent, AgentContext, SampleResult, register_agent
from agents._search import ContextGuard, SearchSession, build_search_tool, clean, search_knobs
from harness.errors import ContextOverflowError


@register_agent("open-book-native")
class OpenBookNative(Agent):
    default_template = "open_book_native"
    needs_context_size = True
    needs_snapshot = True

    def prepare(self, model, snapshot) -> None:
        super().prepare(model, snapshot)
        self.tool = build_search_tool(self.config, model, snapshot)
        self.force_first = not getattr(model, "supports_auto_tool_choice", True)

    def describe(self):
        return {**super().describe(), **search_knobs(self.config), "protocol": "native"}

    def first_prompt(self, sample) -> str:
        return self.prompt(sample.question)

    def final_answer(self, content: str) -> str:
        return content

    async def solve(self, sample, ctx: AgentContext) -> SampleResult:
        session = SearchSession(self.tool, sample.question, self.config.repeat_question)
        guard = ContextGuard(self.model, ctx.params.max_tokens, self.config.context_policy)
        tools = [self.tool.openai_schema()]
        messages = [{"role": "user", "content": self.first_prompt(sample)}]
        answer, outcome, rounds = None, "max_rounds", 0
        for rounds in range(1, self.config.max_rounds + 1):
            if not guard.ensure(messages, tools):
                outcome = "context_full"
                break
            forced = self.force_first and rounds == 1
            choice = {"type": "function", "function": {"name": self.tool.name}} if forced else "auto"
            try:
                response = await ctx.generate(clean(messages), tools=tools, tool_choice=choice)
            except ContextOverflowError:
                outcome = "context_full"
                break
            messages.append(response.as_message())
            if not response.tool_calls:
                answer, outcome = self.final_answer(response.content or ""), "answered"
                break
            for call in response.tool_calls:
                content = session.call(call.name, call.arguments)
                messages.append({"role": "tool", "tool_call_id": call.id, "content": content})
        extra = {
            "outcome": outcome,
            "rounds": rounds,
            "tool_choice_policy": "first-forced" if self.force_first else "auto",
            "dropped_results": guard.dropped,
            **session.record(self.snapshot, sample.needed_titles),
        }
        return SampleResult(answer=answer, messages=clean(messages), extra=extra)
