"""delegate: recursive delegation as in ReDel (Zhu et al., 2024, "ReDel: A Toolkit for LLM-Powered
Recursive Multi-Agent Systems"; github.com/zhudotexe/redel). On FanOutQA dev ReDel's "full" system
(the root delegates only, gpt-4o everywhere) scored 0.494 GPTScore against 0.394 for one agent with
the search tool ("baseline").

The root agent gets the question and a ``delegate`` tool (one argument, ``instructions``); it has no
``search`` tool by default, as ReDel's best FanOutQA system (``root_search=true`` is ReDel's
"root-fc"). Each delegate call starts a sub-agent on the same model whose first message is the
instructions (``sub_template``); it has ``search`` and, while its depth is below ``max_depth``,
``delegate`` itself. Its final answer is the tool result. Delegate calls of one turn run
concurrently (the backend's limiter keeps requests within ``--max-connections``). Every node calls
the model through the sample's one ``AgentContext``, so the row's usage, cost and ``--max-cost``
count the whole tree.

A sub-agent has ``sub_max_rounds`` turns with tools, then one turn without, so it answers (ReDel's
DelegateOne runs helpers with kani's ``max_function_rounds=5``, after which kani offers no
functions). Instructions nearly the same as the delegating agent's own task are refused with a
message (ReDel: rapidfuzz ratio above 80; here difflib's ratio, ``max_similarity``).

The tree is the shared record ``delegation`` (the report draws it): one node per agent (id, parent,
depth, instructions, tools, messages, answer, outcome, rounds, tokens, cost, searches, malformed
calls). The other shared records: ``searches`` (every node's, in the order made, each with its
``node``) and ``evidence_recall`` over the pages the whole tree's searches returned.
"""

from __future__ import annotations

import asyncio
import difflib
import json
from typing import Any

from pydantic import ValidationInfo, field_validator

from harness.agents._knobs import SearchKnobs
from harness.agents._search import ContextGuard, SearchSession, build_search_tool, clean, evidence_recall, summarize_records
from harness.agents._text_calls import read_text_tool_calls
from harness.errors import ConfigError, ContextOverflowError
from harness.models.base import ModelResponse, ToolCall, Usage
from harness.strategy import Agent, AgentContext, SampleResult, knob
from harness.tools.registry import function_schema

DELEGATE = "delegate"
SEARCH = "search"

DELEGATE_DESCRIPTION = (
    "Ask a capable helper to find one piece of information or do one step of your task, and get its answer. "
    "Break a complex question into simpler steps and give each to a helper; helpers you call in the same turn "
    "work at the same time. Do not hand your whole task to a helper. Helpers cannot see your conversation: "
    "give each the context it needs."
)
DELEGATE_PARAMETERS = {
    "type": "object",
    "properties": {
        "instructions": {"type": "string", "description": "Detailed instructions on what the helper should do."}
    },
    "required": ["instructions"],
}

REFUSED = (
    "Error: these instructions repeat your own task. Do not delegate your whole task to a helper: handle it "
    "yourself, or break it into smaller steps and delegate those."
)
BAD_ARGUMENTS = 'Error: call delegate with JSON arguments like {"instructions": "Find the birth date of X."}.'
STOPPED = {
    "max_rounds": "Error: the helper used all its turns without giving an answer.",
    "context_full": "Error: the helper's context filled up before it gave an answer.",
}


class DelegateKnobs(SearchKnobs):
    max_rounds: int = knob(20, "model turns of the root agent (ReDel's root: unlimited)", ge=1, le=10_000)
    root_search: bool = knob(False, "the root has the search tool too (ReDel's best FanOutQA system: no)")
    max_depth: int = knob(
        8, "deepest sub-agent depth (root 0); agents at it get no delegate tool (ReDel max_delegation_depth 8)",
        ge=0, le=100,
    )  # fmt: skip
    sub_max_rounds: int = knob(
        5, "a sub-agent's turns with tools, then one without for its answer (ReDel: max_function_rounds=5)",
        ge=1, le=10_000,
    )  # fmt: skip
    sub_template: str = knob("delegate_sub", "a sub-agent's first message: a template in prompts/ or a .txt file")
    max_similarity: float = knob(
        0.8, "instructions more similar than this to the delegator's own task are refused (ReDel: 80%); 1: never",
        gt=0, le=1,
    )  # fmt: skip
    sub_model: str | None = knob(None, "sub-agents' model: only null (the run's model) is supported")

    @field_validator("sub_model")
    @classmethod
    def _same_model_only(cls, value: str | None) -> str | None:
        if value is not None:
            raise ValueError(
                "only null (sub-agents use the run's model): a second backend would need its own price, "
                "--max-cost accounting and lifecycle, which the harness does not have"
            )
        return value

    @field_validator("max_depth")
    @classmethod
    def _root_has_a_tool(cls, value: int, info: ValidationInfo) -> int:
        if value == 0 and not info.data.get("root_search"):
            raise ValueError("0 leaves the root no tool: set root_search=true too (then it is one agent)")
        return value


def _similarity(a: str, b: str) -> float:
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


class _Node:
    """One agent of the tree; ``rec`` is its record, kept current (a failed sample keeps it)."""

    def __init__(self, node_id: str, parent: _Node | None, task: str, first_prompt: str, tools: list[str]):
        self.id = node_id
        self.parent = parent
        self.depth = 0 if parent is None else parent.depth + 1
        self.task = task
        self.tools = tools
        self.children = 0
        self.text_replies: list[str] = []  # replies that wrote tool calls as text, as written
        self.messages: list[dict[str, Any]] = [{"role": "user", "content": first_prompt}]
        self.answer: str | None = None
        self.outcome = "running"
        self.session: SearchSession | None = None
        self.tokens = Usage().model_dump()  # a dict: the record is written as it stands
        self.rec: dict[str, Any] = {
            "id": node_id,
            "parent": None if parent is None else parent.id,
            "depth": self.depth,
            "instructions": task,
            "tools": tools,
            "messages": self.messages,
            "answer": None,
            "outcome": self.outcome,
            "rounds": 0,
            "requests": 0,
            "tokens": self.tokens,
            "cost": None,
            "searches": 0,
            "malformed_tool_calls": 0,
            "text_tool_calls": 0,
            "refused_delegations": 0,
            "dropped_results": 0,
        }

    def finish(self, outcome: str) -> None:
        self.outcome = self.rec["outcome"] = outcome

    def tool_result(self) -> str:
        """What the delegating agent reads."""
        if self.outcome == "answered":
            return self.answer if (self.answer or "").strip() else "Error: the helper gave an empty answer."
        return STOPPED.get(self.outcome, f"Error: the helper stopped ({self.outcome}).")

    def sort_key(self) -> tuple[int, ...]:
        return tuple(int(p) for p in self.id.split("."))


class _Tree:
    """One sample's tree of agents."""

    def __init__(self, agent: Delegate, sample, ctx: AgentContext):
        self.agent, self.sample, self.ctx = agent, sample, ctx
        self.knobs = agent.knobs
        self.nodes: list[_Node] = []
        self.searches: list[dict[str, Any]] = []  # every node's, as made, each with its node
        ctx.partial["searches"] = self.searches  # kept by a sample that fails midway (failures.jsonl)
        ctx.partial["delegation"] = {"nodes": []}

    # building -----------------------------------------------------------------------------
    def new_node(self, parent: _Node | None, task: str) -> _Node:
        depth = 0 if parent is None else parent.depth + 1
        can_delegate = depth < self.knobs.max_depth
        if parent is None:
            node_id = "0"
            tools = ([DELEGATE] if can_delegate else []) + ([SEARCH] if self.knobs.root_search else [])
            prompt = self.agent.prompt(task)
        else:
            parent.children += 1
            node_id = f"{parent.id}.{parent.children}"
            tools = [SEARCH] + ([DELEGATE] if can_delegate else [])
            prompt = self.agent.sub_prompt(task)
        node = _Node(node_id, parent, task, prompt, tools)
        if SEARCH in tools:
            node.session = SearchSession(self.agent.tool, task, self.knobs.repeat_question)
        self.nodes.append(node)
        self.ctx.partial["delegation"]["nodes"].append(node.rec)
        return node

    def schemas(self, node: _Node) -> list[dict[str, Any]]:
        out = []
        for name in node.tools:
            if name == SEARCH:
                out.append(self.agent.tool.openai_schema())
            else:
                out.append(function_schema(DELEGATE, DELEGATE_DESCRIPTION, DELEGATE_PARAMETERS))
        return out

    def tool_choice(self, node: _Node, turn: int) -> Any:
        # llama.cpp answers "auto" with no tool call: the first turn names one. The root names delegate
        # (its point); a sub-agent names search (naming delegate there would recurse to max_depth).
        if self.agent.force_first and turn == 1:
            name = DELEGATE if node.depth == 0 and DELEGATE in node.tools else SEARCH
            return {"type": "function", "function": {"name": name}}
        return "auto"

    # running ------------------------------------------------------------------------------
    async def generate(self, node: _Node, tools, tool_choice) -> ModelResponse:
        node.rec["requests"] += 1
        response = await self.ctx.generate(clean(node.messages), tools=tools, tool_choice=tool_choice)
        for key, value in response.usage.model_dump().items():
            node.tokens[key] += value
        pricing = self.agent.pricing  # each reply priced on its own (a price may change with its prompt size)
        if pricing is not None and pricing.priced:
            node.rec["cost"] = (node.rec["cost"] or 0.0) + pricing.request_cost(response.usage)
        return response

    async def run(self, node: _Node) -> None:
        try:
            await self._loop(node)
        except asyncio.CancelledError:
            node.finish("cancelled")
            raise
        except BaseException as exc:
            node.finish(getattr(exc, "error_type", None) or _error_type(exc))
            raise

    async def _loop(self, node: _Node) -> None:
        knobs = self.knobs
        root = node.parent is None
        tool_turns = knobs.max_rounds if root else knobs.sub_max_rounds
        turns = tool_turns if root else tool_turns + 1  # a sub-agent's last turn offers no tools
        schemas = self.schemas(node)
        guard = ContextGuard(self.agent.model, self.ctx.params.max_tokens, knobs.context_policy)
        outcome = "max_rounds"
        for turn in range(1, turns + 1):
            node.rec["rounds"] = turn
            offered = node.tools if turn <= tool_turns else []
            tools = schemas if offered else None
            if not guard.ensure(node.messages, tools):
                outcome = "context_full"
                break
            try:
                response = await self.generate(node, tools, self.tool_choice(node, turn) if tools else None)
            except ContextOverflowError:
                outcome = "context_full"
                break
            finally:
                node.rec["dropped_results"] = guard.dropped
            if response.tool_calls:
                node.messages.append(response.as_message())
                node.messages.extend(await self.run_calls(node, response.tool_calls, offered))
                continue
            written = read_text_tool_calls(response.content)
            if written is None:
                node.messages.append(response.as_message())
                node.answer = node.rec["answer"] = response.content or ""
                outcome = "answered"
                break
            # a tool call written as text: never the answer
            node.rec["text_tool_calls"] += len(written.calls)
            node.text_replies.append(response.content or "")
            node.rec["malformed_tool_calls"] += written.unreadable
            if written.calls:
                native = [ToolCall(id=f"call_text_{node.id}_{turn}_{i}", name=n, arguments=a)
                          for i, (n, a) in enumerate(written.calls)]  # fmt: skip
                node.messages.append(response.model_copy(update={"content": "", "tool_calls": native}).as_message())
                node.messages.extend(await self.run_calls(node, native, offered))
            else:
                node.messages.append(response.as_message())
                node.messages.append({"role": "user", "content": _correction(offered)})
        node.finish(outcome)

    async def run_calls(self, node: _Node, calls: list[ToolCall], offered: list[str]) -> list[dict[str, Any]]:
        """The tool messages answering ``calls``, in order: searches at once, the sub-agents of the
        delegate calls concurrently (one failing stops its siblings: the sample fails)."""
        results: list[str | _Node] = [self.prepare_call(node, call, offered) for call in calls]
        children = [r for r in results if isinstance(r, _Node)]
        if children:
            tasks = [asyncio.ensure_future(self.run(child)) for child in children]
            try:
                await asyncio.gather(*tasks)
            except BaseException:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                raise
        return [
            {"role": "tool", "tool_call_id": call.id, "content": r.tool_result() if isinstance(r, _Node) else r}
            for call, r in zip(calls, results)
        ]

    def prepare_call(self, node: _Node, call: ToolCall, offered: list[str]) -> str | _Node:
        """A search's result, an error the model can read, or the sub-agent a delegate call starts."""
        if call.name not in offered:
            node.rec["malformed_tool_calls"] += 1
            return self._no_such_tool(node, call.name, offered)
        if call.name == SEARCH:
            before = len(node.session.searches)
            malformed = node.session.malformed_calls
            text = node.session.call(call.name, call.arguments)
            node.rec["malformed_tool_calls"] += node.session.malformed_calls - malformed
            for search in node.session.searches[before:]:
                search["node"] = node.id
                self.searches.append(search)
            node.rec["searches"] = len(node.session.searches)
            return text
        try:
            instructions = json.loads(call.arguments or "{}")["instructions"]
            if not isinstance(instructions, str) or not instructions.strip():
                raise ValueError
        except (ValueError, KeyError, TypeError):
            node.rec["malformed_tool_calls"] += 1
            return BAD_ARGUMENTS
        if _similarity(instructions.strip(), node.task.strip()) > self.knobs.max_similarity:
            node.rec["refused_delegations"] += 1
            return REFUSED
        return self.new_node(node, instructions)

    def _no_such_tool(self, node: _Node, name: str, offered: list[str]) -> str:
        if not offered:
            return f"Error: no tools are available now (you called {name!r}); give your answer."
        have = " and ".join(repr(t) for t in offered)
        if name == DELEGATE and node.parent is not None and node.depth >= self.knobs.max_depth:
            why = f"you are at the delegation depth limit ({self.knobs.max_depth}), so you cannot delegate"
        else:
            why = f"there is no tool named {name!r} here"
        return f"Error: {why}; your tools: {have}."

    # the record ---------------------------------------------------------------------------
    def record(self, root: _Node) -> dict[str, Any]:
        nodes = sorted(self.nodes, key=_Node.sort_key)
        returned = [s["found_title"] for s in self.searches if s["found_title"]]
        replies = [r for n in nodes for r in n.text_replies]
        out_nodes = []
        for n in nodes:
            rec = dict(n.rec, messages=clean(n.messages), tokens=dict(n.tokens))
            out_nodes.append(rec)
        return {
            "rounds": root.rec["rounds"],
            "tool_choice_policy": "first-forced" if self.agent.force_first else "auto",
            "dropped_results": sum(n.rec["dropped_results"] for n in nodes),
            "searches": self.searches,
            "malformed_tool_calls": sum(n.rec["malformed_tool_calls"] for n in nodes),
            "text_tool_calls": sum(n.rec["text_tool_calls"] for n in nodes),
            "text_tool_call_replies": replies,
            "evidence_recall": evidence_recall(self.agent.snapshot, self.sample.needed_titles, returned),
            "delegation": {
                "subagents": len(nodes) - 1,
                "depth": max(n.depth for n in nodes),
                "refused_delegations": sum(n.rec["refused_delegations"] for n in nodes),
                "nodes": out_nodes,
            },
        }


def _error_type(exc: BaseException) -> str:
    name = type(exc).__name__
    return {"BudgetExhausted": "budget_exhausted", "TimeoutError": "timeout"}.get(name, f"error: {name}")


def _correction(offered: list[str]) -> str:
    if not offered:
        return "Error: your reply looks like a tool call, but no tools are available now. Give your answer."
    return (
        "Error: your reply looks like a tool call written as text, and it could not be read. Call "
        f"{' or '.join(offered)} with JSON arguments, or give your final answer."
    )


class Delegate(Agent):
    settings = ("open-book",)
    Knobs = DelegateKnobs
    default_template = "delegate"
    needs_context_size = True
    needs_snapshot = True
    searches_wiki = True
    protocol = "native"
    records = ("searches", "evidence_recall", "delegation")

    def __init__(self, config: Any, knobs: DelegateKnobs | None = None):
        super().__init__(config, knobs)
        from harness.templates import load_template

        try:
            self.sub_template, self.sub_template_source, self.sub_template_sha256 = load_template(
                self.knobs.sub_template
            )
        except ConfigError as exc:
            raise ConfigError(str(exc).replace("--prompt-template", "--agent-arg sub_template", 1)) from None
        self.pricing = None
        self.force_first = False

    def prepare(self, model, snapshot) -> None:
        super().prepare(model, snapshot)
        self.tool = build_search_tool(self.knobs, model, snapshot)
        self.force_first = not getattr(model, "supports_auto_tool_choice", True)
        # each node's cost, at the price the runner uses for the row (the same table and model)
        from harness.execution.cost import load_price_table, pricing_for

        model_name = getattr(self.config, "model", None)
        if model_name:
            table = load_price_table(getattr(self.config, "price_table", None))
            self.pricing = pricing_for(model_name, table, backend=model)

    def sub_prompt(self, instructions: str) -> str:
        return self.sub_template.format(instructions=instructions, current_date=self.config.current_date)

    def check_template(self, samples) -> None:
        super().check_template(samples)
        self.check_renders(
            lambda: self.sub_prompt(""), f"sub-agent template {self.sub_template_source}", ("instructions", "current_date")
        )

    def identity(self) -> dict[str, Any]:
        return {**super().identity(), "sub_prompt_sha256": self.sub_template_sha256}

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "sub_prompt_template": self.sub_template_source,
            "sub_prompt_sha256": self.sub_template_sha256,
        }

    def summarize(self, extras: list[dict[str, Any]]) -> dict[str, Any] | None:
        out = summarize_records(extras) or {}
        trees = [e["delegation"] for e in extras if e.get("delegation")]
        if trees:
            out["subagents_mean"] = sum(t["subagents"] for t in trees) / len(trees)
            out["delegation_depth_max"] = max(t["depth"] for t in trees)
            out["refused_delegations"] = sum(t["refused_delegations"] for t in trees)
        return out or None

    async def solve(self, sample, ctx: AgentContext) -> SampleResult:
        tree = _Tree(self, sample, ctx)
        root = tree.new_node(None, sample.question)
        await tree.run(root)
        return SampleResult(
            answer=root.answer, messages=clean(root.messages), extra=tree.record(root), outcome=root.outcome
        )
