"""Conversational closed-book QA (TopiOCQA): one model call answering the current turn.

The prompt (``prompts/conversational_closed_book.txt``) is ours, not the paper's: TopiOCQA's
baselines are fine-tuned DPR/FiD readers that read the question representation directly. With
``history: all-history`` (the default) the prompt carries every previous question and gold answer,
one ``Q1:`` / ``A1:`` line each (``format_history(..., style="prompt")``) under a
``[Conversation so far]:`` header; with ``history: original`` the history block is empty and the
model sees the current question alone. The answer is the reply's first non-empty line, stripped.
"""

from __future__ import annotations

from agents import Agent, AgentContext, SampleResult, register_agent
from harness.datasets.topiocqa import format_history


def history_block(sample, representation: str) -> str:
    turns = format_history(sample, representation, style="prompt", include_question=False)
    return f"[Conversation so far]:\n{turns}\n\n" if turns else ""


def first_line(text: str) -> str:
    for line in (text or "").splitlines():
        if line.strip():
            return line.strip()
    return ""


@register_agent("conversational")
class Conversational(Agent):
    default_template = "conversational_closed_book"
    template_fields = ("history",)

    def describe(self):
        return {**super().describe(), "history": self.config.history}

    async def solve(self, sample, ctx: AgentContext) -> SampleResult:
        history = history_block(sample, self.config.history)
        messages = [{"role": "user", "content": self.prompt(sample.question, history=history)}]
        response = await ctx.generate(messages)
        messages.append(response.as_message())
        return SampleResult(answer=first_line(response.content or ""), messages=messages)
