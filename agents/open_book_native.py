"""Open-book with native tool calling (OpenAI, Anthropic, OpenAI-compatible servers, llama.cpp).

The model gets the paper's function-calling prompt and a `search` tool, and loops until it
answers without calling the tool, runs out of rounds, or fills its context (both recorded).
llama.cpp cannot let the model choose with tool_choice "auto" (it never returns tool calls), so
for backends that say so the first turn names the tool and later turns are "auto"; the policy
used is recorded in the sample.
"""

from __future__ import annotations

import uuid

from harness.agents._tool_loop import ToolLoop
from harness.models.base import ToolCall


class OpenBookNative(ToolLoop):
    default_template = "open_book_native"
    protocol = "native"

    def prepare(self, model, snapshot) -> None:
        super().prepare(model, snapshot)
        self.force_first = not getattr(model, "supports_auto_tool_choice", True)

    def request_tools(self):
        return [self.tool.openai_schema()]

    def tool_choice(self, round_no: int):
        if self.force_first and round_no == 1:
            return {"type": "function", "function": {"name": self.tool.name}}
        return "auto"

    def read_reply(self, response):
        return response.as_message(), response.tool_calls or None

    def send_results(self, calls, session):
        # malformed calls get an error the model can read (counted by the session)
        return [
            {"role": "tool", "tool_call_id": call.id, "content": session.call(call.name, call.arguments)}
            for call in calls
        ]

    def adopt_text_calls(self, response, calls, session):
        # kept as the native calls they stand for, so the conversation stays well formed
        native = [ToolCall(id=f"call_text_{uuid.uuid4().hex[:12]}", name=n, arguments=a) for n, a in calls]
        kept = response.model_copy(update={"content": "", "tool_calls": native}).as_message()
        return kept, self.send_results(native, session)

    def text_call_correction(self):
        return (
            "Error: your reply looks like a call of the search tool written as text, and it could not be "
            'read. Call the search tool with JSON arguments like {"query": "Page title"}, or give your final answer.'
        )

    def loop_extra(self):
        return {"tool_choice_policy": "first-forced" if self.force_first else "auto"}
