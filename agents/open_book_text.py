"""Open-book with the paper's text protocol for models without native tool calling.

The model writes <search>QUERY</search>; the harness answers with the search result as a user
turn. Like the paper's parser, the search must open the reply (``text_protocol_strict``, on by
default) and anything after </search> is cut from the kept reply.
"""

from __future__ import annotations

import re

from harness.agents._knobs import SearchKnobs
from harness.agents._tool_loop import ToolLoop
from harness.strategy import knob

SEARCH = re.compile(r"<search>(.+?)</search>")


class OpenBookText(ToolLoop):
    default_template = "open_book_text"
    protocol = "text"

    class Knobs(SearchKnobs):
        text_protocol_strict: bool = knob(True, "<search> must open the reply (the paper's parser)")

    def read_reply(self, response):
        content = response.content or ""
        match = SEARCH.match(content) if self.knobs.text_protocol_strict else SEARCH.search(content)
        if not match:
            return {"role": "assistant", "content": content}, None
        return {"role": "assistant", "content": content[: match.end()]}, [match[1]]

    def send_results(self, queries, session):
        return [{"role": "user", "content": session.search(q)} for q in queries]

    def adopt_text_calls(self, response, calls, session):
        # a JSON tool call instead of <search>: run it, results as the protocol's user turns
        kept = {"role": "assistant", "content": response.content or ""}
        return kept, [{"role": "user", "content": session.call(name, args)} for name, args in calls]

    def text_call_correction(self):
        return (
            "Your reply looks like a tool call, and it could not be read. To search, reply with "
            "<search>Page title</search>; otherwise give your final answer."
        )
