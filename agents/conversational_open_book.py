"""Conversational QA open-book (TopiOCQA with --snapshot): the open-book tool-calling loop with the
conversation history in the first prompt (``--history original|all-history``). The prompt is ours
(TopiOCQA's baselines are retriever + fine-tuned reader pipelines); the search tool, its knobs and
every recorded outcome are those of ``open-book-native``."""

from __future__ import annotations

from agents import register_agent
from agents.conversational import first_line, history_block
from agents.open_book_native import OpenBookNative


@register_agent("conversational-open-book")
class ConversationalOpenBook(OpenBookNative):
    default_template = "conversational_open_book"
    template_fields = ("history",)

    def describe(self):
        return {**super().describe(), "history": self.config.history}

    def first_prompt(self, sample) -> str:
        return self.prompt(sample.question, history=history_block(sample, self.config.history))

    def final_answer(self, content: str) -> str:
        return first_line(content)
