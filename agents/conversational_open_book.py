"""Conversational QA open-book (TopiOCQA with --snapshot): the open-book tool-calling loop with the
conversation history in the first prompt (knob ``history``: original | all-history). The prompt is
ours (TopiOCQA's baselines are retriever + fine-tuned reader pipelines); the search tool, its knobs
and every recorded outcome are those of ``open-book-native``; the answer is the reply's first line."""

from __future__ import annotations

from harness.agents._knobs import HistoryKnobs, SearchKnobs
from harness.agents.conversational import history_block
from harness.agents.open_book_native import OpenBookNative
from harness.datasets.conversation import first_line


class ConversationalOpenBook(OpenBookNative):
    default_template = "conversational_open_book"
    template_fields = ("history",)
    takes_answer_instructions = False  # the answer is the reply's first line

    class Knobs(HistoryKnobs, SearchKnobs):
        pass

    def first_prompt(self, sample) -> str:
        return self.prompt(sample.question, history=history_block(sample, self.knobs.history))

    def final_answer(self, content: str) -> str:
        return first_line(content)
