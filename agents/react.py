"""react: ReAct (Yao et al., ICLR 2023), the text protocol for any model. Each reply is one step,
``Thought k: ...`` then ``Action k: Search[query]`` or ``Action k: Finish[answer]``; the harness
answers a search with ``Observation k: ...``, the open-book search tool's result (a page by title,
its BM25+-ranked chunks within the token budget, or similar titles). Few-shot exemplars:
``prompts/react.txt``.

Step numbers and the ``Action:`` label of Search/Finish are optional when reading a reply; text the
model writes after its action (an observation of its own, further steps) is cut from the kept reply,
as the reference's stop sequence ``\\nObservation k:`` cuts it. A reply with no readable action is
counted (``malformed_steps``), answered with a one-line correction as its observation and never taken
as the answer. Every reply uses up a step: after ``max_steps`` (7, the reference's HotpotQA loop
``for i in range(1, 8)``) without Finish the sample ends unanswered, outcome ``max_steps``. The trace
of every step is the shared record ``trace`` (the report draws it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from harness.agents._knobs import SearchToolKnobs
from harness.agents._search import ContextGuard, SearchSession, build_search_tool, clean, evidence_recall, summarize_records
from harness.errors import ContextOverflowError
from harness.strategy import Agent, AgentContext, SampleResult, knob

MAX_STEPS_SOURCE = "ReAct's HotpotQA notebook (hotpotqa.ipynb: for i in range(1, 8)): 7 steps"
ACTIONS = ("search", "finish")

# an action opens a line: "Action k: Verb[" (any verb, so an unknown one can be named), or a bare
# "Search[" / "Finish[" with the label left out
_ACTION = re.compile(
    r"^[ \t]*(?:action(?:[ \t]*\d+)?[ \t]*:[ \t]*(?P<verb>[A-Za-z_]\w*)[ \t]*|(?P<bare>search|finish))\[",
    re.IGNORECASE | re.MULTILINE,
)
_ACTION_LABEL = re.compile(r"^[ \t]*action(?:[ \t]*\d+)?[ \t]*:", re.IGNORECASE | re.MULTILINE)
_CLOSE_AT_LINE_END = re.compile(r"\][ \t]*(?=\n|$)")
_THOUGHT_LABEL = re.compile(r"^\s*thought(?:[ \t]*\d+)?[ \t]*:\s*", re.IGNORECASE)
# where a reply goes on to another step: an argument never runs past it
_NEXT_LABEL = re.compile(r"^[ \t]*(?:thought|action|observation)(?:[ \t]*\d+)?[ \t]*:", re.IGNORECASE | re.MULTILINE)


@dataclass
class Step:
    """One reply read as a ReAct step."""

    thought: str
    action: str | None  # "search" | "finish"; None: no readable action
    argument: str | None  # the query or the answer
    kept: str  # the reply up to the end of its action (the whole reply when unreadable)
    error: str | None = None  # why the step cannot be taken
    cut: bool = False  # the model wrote on past its action; that text was dropped


def parse_step(text: str | None) -> Step:
    """Read one reply. The argument runs from ``[`` to the first ``]`` that ends a line (so an answer
    may hold brackets and span lines, one list item a line), else to the last ``]`` on the action's line."""
    text = text or ""
    match = _ACTION.search(text)
    if match is None:
        label = _ACTION_LABEL.search(text)
        error = "the Action is not Search[...] or Finish[...]" if label else "no Action line"
        # no action: a thought only where the reply labels one (the whole reply is recorded apart)
        head = text[: label.start()] if label else text
        thought = _thought(head) if _THOUGHT_LABEL.match(head) else ""
        return Step(thought=thought, action=None, argument=None, kept=text, error=error)
    verb = (match["verb"] or match["bare"]).lower()
    rest = text[match.end() :]
    following = _NEXT_LABEL.search(rest)
    if following is not None:
        rest = rest[: following.start()]
    close = _CLOSE_AT_LINE_END.search(rest)
    end = close.start() if close else rest.split("\n", 1)[0].rfind("]")
    thought = _thought(text[: match.start()])
    if end < 0:
        return Step(thought, None, None, text, f"{verb.capitalize()}[ has no closing ]")
    argument = rest[:end].strip()
    stop = match.end() + end + 1
    step = Step(thought, verb, argument, text[:stop], cut=bool(text[stop:].strip()))
    if verb not in ACTIONS:
        step.action, step.kept, step.cut = None, text, False
        step.error = f"unknown action {match['verb']}[...]; the actions are Search[query] and Finish[answer]"
    elif verb == "search" and (not argument or "\n" in argument):
        step.action, step.kept, step.cut = None, text, False
        step.error = "Search[...] needs a query on one line"
    elif verb == "finish" and not argument:
        step.action, step.kept, step.cut = None, text, False
        step.error = "Finish[...] needs the answer"
    return step


def _thought(text: str) -> str:
    return _THOUGHT_LABEL.sub("", text.strip(), count=1).strip()


def correction(step: int, error: str) -> str:
    """The observation a step with no readable action gets: one line."""
    n = step + 1
    return (
        f"Observation {step}: Invalid step ({error}). Reply with Thought {n}: ... then "
        f"Action {n}: Search[query] or Action {n}: Finish[answer]."
    )


class React(Agent):
    """ReAct: Thought / Action (Search[query], Finish[answer]) / Observation steps, as plain text."""

    settings = ("open-book",)
    default_template = "react"
    protocol = "text"
    needs_snapshot = True
    searches_wiki = True
    needs_context_size = True
    records = ("searches", "evidence_recall", "trace")

    class Knobs(SearchToolKnobs):
        max_steps: int = knob(7, f"model replies (steps) per sample; default 7: {MAX_STEPS_SOURCE}", ge=1, le=10_000)

    def prepare(self, model, snapshot) -> None:
        super().prepare(model, snapshot)
        self.tool = build_search_tool(self.knobs, model, snapshot)

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "max_steps_default": {
                "value": type(self.knobs).model_fields["max_steps"].default,
                "source": MAX_STEPS_SOURCE,
            },
            "actions": ["Search[query]", "Finish[answer]"],
        }

    def summarize(self, extras: list[dict[str, Any]]) -> dict[str, Any] | None:
        out = summarize_records(extras) or {}
        stepped = [e for e in extras if "steps" in e]
        if stepped:
            out["steps_mean"] = sum(e["steps"] for e in stepped) / len(stepped)
            out["steps"] = sum(e["steps"] for e in stepped)  # of which malformed_steps could not be read
            out["malformed_steps"] = sum(e["malformed_steps"] for e in stepped)
        return out or None

    async def solve(self, sample, ctx: AgentContext) -> SampleResult:
        session = SearchSession(self.tool, sample.question, self.knobs.repeat_question)
        trace: list[dict[str, Any]] = []
        ctx.partial.update(searches=session.searches, trace=trace)  # kept by a sample that fails midway
        guard = ContextGuard(self.model, ctx.params.max_tokens, self.knobs.context_policy)
        messages = [{"role": "user", "content": self.prompt(sample.question)}]
        answer, outcome, steps, malformed = None, "max_steps", 0, 0
        for step in range(1, self.knobs.max_steps + 1):
            if not guard.ensure(messages):
                outcome = "context_full"
                break
            try:
                response = await ctx.generate(clean(messages))
            except ContextOverflowError:
                outcome = "context_full"
                break
            steps = step
            parsed = parse_step(response.content)
            entry: dict[str, Any] = {"step": step, "thought": parsed.thought, "action": parsed.action}
            if response.finish_reason == "length":
                entry["cut_at_max_tokens"] = True
            if parsed.error is not None:  # never the answer: counted, corrected, asked again
                malformed += 1
                entry.update(error=parsed.error, reply=response.content or "")
                trace.append(entry)
                messages.append({"role": "assistant", "content": parsed.kept})
                messages.append({"role": "user", "content": correction(step, parsed.error)})
                continue
            if parsed.cut:
                entry["dropped_after_action"] = True
            messages.append({"role": "assistant", "content": parsed.kept})
            if parsed.action == "finish":
                entry["answer"] = parsed.argument
                trace.append(entry)
                answer, outcome = parsed.argument, "answered"
                break
            result = session.search(parsed.argument)
            found = session.searches[-1]["found_title"]
            entry.update(query=parsed.argument, observation_titles=[found] if found else [])
            if not found:
                entry["similar_titles"] = session.searches[-1]["similar_titles"]
            trace.append(entry)
            messages.append({"role": "user", "content": f"Observation {step}: {result}"})
        returned = [s["found_title"] for s in session.searches if s["found_title"]]
        extra = {
            "steps": steps,
            "malformed_steps": malformed,
            "trace": trace,
            "dropped_results": guard.dropped,
            "searches": session.searches,
            "evidence_recall": evidence_recall(self.snapshot, list(sample.needed_titles), returned),
        }
        return SampleResult(answer=answer, messages=clean(messages), extra=extra, outcome=outcome)
