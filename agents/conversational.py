"""Conversational closed-book QA (TopiOCQA): one model call answering the current turn.

The prompt (``prompts/conversational_closed_book.txt``) is ours, not the paper's: TopiOCQA's
baselines are fine-tuned DPR/FiD readers that read the question representation directly. With
``history: all-history`` (the default) the prompt carries every previous question and gold answer,
one ``Q1:`` / ``A1:`` line each (``format_history(..., style="prompt")``) under a
``[Conversation so far]:`` header; with ``history: original`` the history block is empty and the
model sees the current question alone. The answer is the reply's first non-empty line, stripped.
"""

from __future__ import annotations

from harness.agents._knobs import HistoryKnobs
from harness.agents.single_prompt import SinglePrompt
from harness.datasets.conversation import first_line, format_history


def history_block(sample, representation: str) -> str:
    turns = format_history(sample, representation, style="prompt", include_question=False)
    return f"[Conversation so far]:\n{turns}\n\n" if turns else ""


class Conversational(SinglePrompt):
    settings = ("closed-book",)
    Knobs = HistoryKnobs
    default_template = "conversational_closed_book"
    template_fields = ("history",)
    takes_answer_instructions = False  # the answer is the reply's first line

    def fields(self, sample):
        return {"history": history_block(sample, self.knobs.history)}

    def final_answer(self, content: str) -> str:
        return first_line(content)
