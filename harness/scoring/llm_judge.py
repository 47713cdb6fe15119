"""FanOutQA's LLM-as-judge ("GPT judge"), reproduced from fanoutqa==1.1.1 ``eval/llm.py`` and
``eval/scorer.py`` (``Scorer.score_gpt``).

The judge reads the question, the reference (``str_answer(reference)``) and the submission in the
official factuality prompt, reasons, and ends with a letter A-F. ``result.strip()[-1].lower()`` in
"bce" scores 1, anything else 0. Unanswered questions score 0 without a request; answers longer
than 4000 characters are cut to 4000, as the official scorer does. Temperature 0, seed 31415.

The judge is never run unless ``--judge MODEL`` names one (FanOutQA used ``gpt-4-0613``; the
current leaderboard uses ``gpt-4o-2024-11-20``). Every judge response goes through the harness's
SQLite response cache, so re-scoring the same answers never asks again.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
from typing import Any

from harness.datasets.base import Sample
from harness.errors import HarnessError
from harness.models.base import GenerationParams, ModelResponse
from harness.scoring.gold import gold_text, str_answer  # noqa: F401 - FanOutQA's str_answer, as before
from harness.scoring.metrics import FANOUTQA_SHAPES, METRICS, ScoringOptions, declare, discrete_values

# --- copied byte for byte from fanoutqa==1.1.1 fanoutqa/eval/llm.py -----------------------------
factuality_system = "You are comparing a submitted answer to an expert answer on a given question."


def factuality_prompt(question: str, reference: str, answer: str):
    return (
        f"[BEGIN DATA]\n************\n[Question]: {question}\n************\n[Expert]:"
        f" {reference}\n************\n[Submission]: {answer}\n************\n[END DATA]\n\nCompare the factual content"
        " of the submitted answer with the expert answer. Ignore any differences in style, grammar, or"
        " punctuation.\nThe submitted answer may either be a subset or superset of the expert answer, or it may"
        " conflict with it. Determine which case applies. First, write out in a step by step manner your reasoning"
        " about the factual content to be sure that your conclusion is correct. Avoid simply stating the correct"
        ' answers at the outset. Then print only the single character "A", "B", "C", "D", "E", or "F" (without quotes'
        " or punctuation) on its own line corresponding to the correct answer. At the end, repeat just the letter"
        " again by itself on a new line.\n(A) The submitted answer is a subset of the expert answer and is fully"
        " consistent with it.\n(B) The submitted answer is a superset of the expert answer and is fully consistent"
        " with it.\n(C) The submitted answer contains all the same details as the expert answer.\n(D) There is a"
        " disagreement between the submitted answer and the expert answer.\n(E) The answers differ, but these"
        " differences don't matter from the perspective of factuality.\n(F) The submitted answer does not answer the"
        " question or is otherwise invalid."
    )


# --- end of the copy ---------------------------------------------------------------------------

MAX_ANSWER_CHARS = 4000  # scorer.py: "sometimes we have fun neural text degeneration, just cut it off"
# The official engine: OpenAIEngine(model=..., temperature=0, seed=31415) with no max_tokens, i.e. as
# long as the model likes. A cap is needed here; 2048 leaves room for the step-by-step reasoning.
JUDGE_PARAMS = GenerationParams(temperature=0.0, top_p=1.0, max_tokens=2048, seed=31415)
NO_JUDGE_MESSAGE = (
    "the llm-judge metric needs --judge MODEL (e.g. openai/gpt-4o-2024-11-20, FanOutQA's); "
    "it is never run by default because it costs money"
)


def prompt_sha256() -> str:
    """Identifies the judge prompt (system + template with placeholders) in results."""
    template = factuality_system + "\n" + factuality_prompt("{question}", "{reference}", "{answer}")
    return hashlib.sha256(template.encode()).hexdigest()


def judge_messages(question: str, reference: Any, answer: str) -> list[dict[str, Any]]:
    """The chat kani sends: the system prompt, then one user turn."""
    if len(answer) > MAX_ANSWER_CHARS:
        answer = answer[:MAX_ANSWER_CHARS]
    return [
        {"role": "system", "content": factuality_system},
        {"role": "user", "content": factuality_prompt(question, gold_text(reference), answer)},
    ]


def judge_score(output: str | None) -> int:
    """scorer.py: ``mc = result.strip()[-1].lower()``; B, C, E = 1, anything else 0.
    (An empty output would raise IndexError there; it scores 0 here.)"""
    text = (output or "").strip()
    if not text:
        return 0
    return 1 if text[-1].lower() in "bce" else 0


async def _judge_all(
    pairs: list[tuple[str, list[dict[str, Any]]]], options: ScoringOptions
) -> tuple[dict[str, ModelResponse], dict[str, Any]]:
    from harness.models.cache import ResponseCache, cache_key
    from harness.models import create_backend

    backend = create_backend(options.judge)
    tokens = ("prompt_tokens", "completion_tokens", "cache_read_tokens", "cache_write_tokens")
    stats: dict[str, Any] = {"calls": 0, "cache_hits": 0, **dict.fromkeys(tokens, 0)}
    cache = ResponseCache(options.cache_path)  # made in this thread: sqlite objects stay in their thread
    try:
        await backend.start()
        stats["backend"] = backend.describe()
        limit = asyncio.Semaphore(max(1, options.judge_max_connections))

        async def one(qid: str, messages: list[dict[str, Any]]) -> tuple[str, ModelResponse]:
            key = cache_key(backend.cache_identity(), messages, JUDGE_PARAMS, None, None)
            hit = cache.get(key)
            if hit is not None:
                stats["cache_hits"] += 1
                return qid, hit
            async with limit:
                response = await backend.generate(messages, JUDGE_PARAMS)
            stats["calls"] += 1
            for name in tokens:
                stats[name] += getattr(response.usage, name)
            cache.put(key, response)
            return qid, response

        done = await asyncio.gather(*(one(qid, messages) for qid, messages in pairs))
    finally:
        try:
            await backend.close()
        finally:
            cache.close()
    return dict(done), stats


def _run(coro):
    """Metrics are synchronous, but ``harness run`` scores from inside its event loop: there the
    judge runs in a worker thread with a loop of its own."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


def check_judge(options: ScoringOptions) -> None:
    """Before any model call: the judge's backend can be made (a known backend) and, for an API,
    its key is set; nothing is started."""
    from harness.errors import ModelError
    from harness.models import create_backend

    backend = create_backend(options.judge)
    if callable(getattr(backend, "api_key", None)):
        try:
            backend.api_key()
        except ModelError as exc:
            raise ModelError(f"--judge {options.judge}: {exc}") from None


# the expert answer is gold_text(reference): FanOutQA's str_answer, QAMPARI entities by their answer text
@declare(accepts=(*FANOUTQA_SHAPES, "entity_list"), needs=("judge",), check=check_judge)
@METRICS.register("llm-judge")
@discrete_values
def llm_judge(
    questions: list[Sample], answers: list[dict[str, Any]], only_answered: bool, options: ScoringOptions | None = None
) -> dict[str, Any]:
    """FanOutQA's GPT-as-judge accuracy: the share of questions the judge grades B, C or E."""
    options = options or ScoringOptions()
    if not options.judge:
        raise HarnessError(NO_JUDGE_MESSAGE)
    by_id = {a["id"]: a.get("answer") for a in answers}
    pool = [q for q in questions if q.id in by_id] if only_answered else questions
    pairs: list[tuple[str, list[dict[str, Any]]]] = []
    trimmed: list[str] = []
    for q in pool:
        answer = by_id.get(q.id)
        if answer is None:
            continue  # unanswered: 0, no request
        answer = answer if isinstance(answer, str) else str(answer)
        if len(answer) > MAX_ANSWER_CHARS:
            trimmed.append(q.id)
        pairs.append((q.id, judge_messages(q.question, q.answer, answer)))

    responses, stats = _run(_judge_all(pairs, options)) if pairs else ({}, {"calls": 0, "cache_hits": 0})
    raw: dict[str, dict[str, Any]] = {}
    for q in pool:
        if q.id in responses:
            text = responses[q.id].content or ""
            raw[q.id] = {"llm_judge": judge_score(text), "judge_output": text}
        else:
            raw[q.id] = {"llm_judge": 0, "judge_output": None}
    n = len(pool) or 1
    info = {
        "judge": options.judge,
        "backend": stats.get("backend"),
        "params": JUDGE_PARAMS.model_dump(),
        "calls": stats["calls"],
        "cache_hits": stats["cache_hits"],
        # the judge's own tokens (requests actually sent), kept apart from the model under test
        "judge_prompt_tokens": stats.get("prompt_tokens", 0),
        "judge_completion_tokens": stats.get("completion_tokens", 0),
        # of judge_prompt_tokens: read from and written to the provider's prompt cache
        "judge_cache_read_tokens": stats.get("cache_read_tokens", 0),
        "judge_cache_write_tokens": stats.get("cache_write_tokens", 0),
        "n_judged": len(pairs),
        "n_unanswered": len(pool) - len(pairs),
        "trimmed_to_4000_chars": trimmed,
        "prompt_sha256": prompt_sha256(),
        "rule": 'result.strip()[-1].lower() in "bce" -> 1, else 0',
        "reference": "fanoutqa eval/llm.py",
    }
    return {"aggregate": {"llm_judge": sum(r["llm_judge"] for r in raw.values()) / n}, "raw": raw, "info": info}
