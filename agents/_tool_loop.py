"""The open-book loop both search protocols share: the model searches until it answers without a
search, runs out of rounds (``max_rounds``) or fills its context (``context_policy``), and every
sample records the same outcome fields (outcome, rounds, dropped results, searches, evidence recall).

A protocol subclass supplies the hooks: ``read_reply`` (which part of a reply is kept and which
searches it asks for; none means the reply is the answer), ``send_results`` (how results go back),
``adopt_text_calls`` / ``text_call_correction`` (tool calls written as text), and, for native tool
calling, ``request_tools`` / ``tool_choice`` and ``loop_extra`` fields.

A reply that asks for no search but holds a tool call written as text (``harness.agents._text_calls``:
bare JSON, a ```json fence, ``<tool_call>`` tags) is never the answer: readable calls are run as the
calls they are (counted in ``text_tool_calls``, the replies kept in ``text_tool_call_replies``);
call-shaped text that cannot be read is counted in ``malformed_tool_calls`` and the model is asked
again (a round, like any other).
"""

from __future__ import annotations

from typing import Any, ClassVar

from harness.agents._knobs import SearchKnobs
from harness.agents._search import ContextGuard, SearchSession, build_search_tool, clean, summarize_records
from harness.agents._text_calls import read_text_tool_calls
from harness.errors import ContextOverflowError
from harness.models.base import ModelResponse
from harness.strategy import Agent, AgentContext, SampleResult


class ToolLoop(Agent):
    settings = ("open-book",)
    Knobs = SearchKnobs
    needs_context_size = True
    needs_snapshot = True
    searches_wiki = True
    protocol: ClassVar[str]  # recorded in results.json
    records = ("searches", "evidence_recall")
    takes_answer_instructions = True  # the first prompt carries them; the reply without a search is the answer

    def prepare(self, model, snapshot) -> None:
        super().prepare(model, snapshot)
        self.tool = build_search_tool(self.knobs, model, snapshot)

    def summarize(self, extras: list[dict[str, Any]]) -> dict[str, Any] | None:
        return summarize_records(extras)

    # hooks --------------------------------------------------------------------------------
    def first_prompt(self, sample) -> str:
        return self.prompt(sample.question)

    def final_answer(self, content: str) -> str:
        return content

    def request_tools(self) -> list[dict[str, Any]] | None:
        """Tool schemas sent with every request (and counted by the context guard)."""
        return None

    def tool_choice(self, round_no: int) -> Any:
        return None

    def read_reply(self, response: ModelResponse) -> tuple[dict[str, Any], list | None]:
        """(the assistant message kept, the searches it asks for; None: the reply is the answer)."""
        raise NotImplementedError

    def send_results(self, calls: list, session: SearchSession) -> list[dict[str, Any]]:
        """Run the searches (through ``session``, which records them) and return the messages
        that carry the results back to the model."""
        raise NotImplementedError

    def adopt_text_calls(
        self, response: ModelResponse, calls: list[tuple[str, str]], session: SearchSession
    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """(the assistant message kept, the result messages) for the (name, arguments) calls the
        model wrote as text; each goes through ``session.call`` (a wrong name or arguments: an
        error the model can read, counted as malformed)."""
        raise NotImplementedError

    def text_call_correction(self) -> str:
        """The user turn sent after a reply that looks like a tool call but cannot be read."""
        raise NotImplementedError

    def loop_extra(self) -> dict[str, Any]:
        """Protocol facts recorded per sample, after ``rounds``."""
        return {}

    # the loop -----------------------------------------------------------------------------
    async def solve(self, sample, ctx: AgentContext) -> SampleResult:
        session = SearchSession(self.tool, sample.question, self.knobs.repeat_question)
        ctx.partial["searches"] = session.searches  # kept by a sample that fails midway (failures.jsonl)
        guard = ContextGuard(self.model, ctx.params.max_tokens, self.knobs.context_policy)
        tools = self.request_tools()
        messages = [{"role": "user", "content": self.first_prompt(sample)}]
        answer, outcome, rounds = None, "max_rounds", 0
        for rounds in range(1, self.knobs.max_rounds + 1):
            if not guard.ensure(messages, tools):
                outcome = "context_full"
                break
            try:
                response = await ctx.generate(clean(messages), tools=tools, tool_choice=self.tool_choice(rounds))
            except ContextOverflowError:
                outcome = "context_full"
                break
            kept, calls = self.read_reply(response)
            if calls:
                messages.append(kept)
                messages.extend(self.send_results(calls, session))
                continue
            written = read_text_tool_calls(response.content)
            if written is None:
                messages.append(kept)
                answer, outcome = self.final_answer(response.content or ""), "answered"
                break
            # a tool call written as text: never the answer
            session.text_calls += len(written.calls)
            session.malformed_calls += written.unreadable
            session.text_call_replies.append(response.content or "")
            if written.calls:
                kept, results = self.adopt_text_calls(response, written.calls, session)
                messages.append(kept)
                messages.extend(results)
            else:
                messages.append(kept)
                messages.append({"role": "user", "content": self.text_call_correction()})
        extra = {
            "rounds": rounds,
            **self.loop_extra(),
            "dropped_results": guard.dropped,
            **session.record(self.snapshot, sample.needed_titles),
        }
        return SampleResult(answer=answer, messages=clean(messages), extra=extra, outcome=outcome)
