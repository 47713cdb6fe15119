"""FanOutQA's LLM-as-judge ("GPT judge"): the behaviour of fanoutqa==1.1.1 ``eval/llm.py`` and
``eval/scorer.py`` (``Scorer.score_gpt``), restated; its prompt texts are data in ``prompts/fanoutqa/``.

The judge reads the question, the reference (``str_answer(reference)``) and the submission in the
official factuality prompt, reasons, and ends with a letter A-F. ``result.strip()[-1].lower()`` in
"bce" scores 1, anything else 0. Unanswered questions score 0 without a request; an answer longer
than 4000 is cut to 4000 as the official scorer cuts it (``len`` and a slice: a text's characters, a
list's items, before the list is written into the prompt). Temperature 0, seed 31415.

The judge is never run unless ``--judge MODEL`` names one (FanOutQA used ``gpt-4-0613``; the
current leaderboard uses ``gpt-4o-2024-11-20``). Every judge response goes through the harness's
SQLite response cache, so re-scoring the same answers never asks again.

Several judges (``--judge A,B,C``): every judge asks about every answer; a question records each
verdict and scores the majority's (AGGREGATE_RULE), each judge's own share is kept (``by_judge``)
and the judges' agreement with each other and with string accuracy is reported (``agreement``,
``harness.scoring.agreement``). One judge's numbers and fields are exactly as above.
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
from harness.scoring.kinds import share
from harness.scoring.metrics import FANOUTQA_SHAPES, ScoringOptions, aggregates, declare, discrete_values
from harness.templates import packaged_text

# FanOutQA's judge prompt, kept as data in prompts/fanoutqa/ (source, commit and licence in prompts/README.md)
factuality_system = packaged_text("fanoutqa/judge_system.txt")
FACTUALITY_TEMPLATE = packaged_text("fanoutqa/judge_factuality.txt")  # fields {question} {reference} {answer}


def factuality_prompt(question: str, reference: str, answer: str) -> str:
    """The judge's user turn: the template filled (the filled values are never parsed as fields)."""
    return FACTUALITY_TEMPLATE.format(question=question, reference=reference, answer=answer)


MAX_ANSWER_LEN = 4000  # scorer.py cuts longer answers (degenerate, repeating text) to this length
# The official engine: OpenAIEngine(model=..., temperature=0, seed=31415) with no max_tokens, i.e. as
# long as the model likes. A cap is needed here; 2048 leaves room for the step-by-step reasoning.
JUDGE_PARAMS = GenerationParams(temperature=0.0, top_p=1.0, max_tokens=2048, seed=31415)
NO_JUDGE_MESSAGE = (
    "the llm-judge metric needs --judge MODEL (e.g. openai/gpt-4o-2024-11-20, FanOutQA's); "
    "it is never run by default because it costs money"
)


def prompt_sha256() -> str:
    """Identifies the judge prompt in results: the system text, a newline, the template (fields unfilled)."""
    return hashlib.sha256((factuality_system + "\n" + FACTUALITY_TEMPLATE).encode()).hexdigest()


def cut_answer(answer: Any) -> tuple[Any, bool]:
    """scorer.py (``Scorer.score_gpt``): ``if len(answer) > 4000: answer = answer[:4000]``, on the
    answer as submitted: a text keeps its first 4000 characters, a list its first 4000 items (a list of
    fewer items is sent whole, however long it is written out). Other values have no length there (a
    dict of over 4000 keys cannot be sliced): they are sent whole. Returns (answer, whether it was cut)."""
    if isinstance(answer, (str, list)) and len(answer) > MAX_ANSWER_LEN:
        return answer[:MAX_ANSWER_LEN], True
    return answer, False


def judge_messages(question: str, reference: Any, answer: Any) -> list[dict[str, Any]]:
    """The chat kani sends: the system prompt, then one user turn, the answer cut as scorer.py cuts it
    and written as the official f-string writes it (``str``: a list as its Python repr)."""
    answer, _ = cut_answer(answer)
    return [
        {"role": "system", "content": factuality_system},
        {"role": "user", "content": factuality_prompt(question, gold_text(reference), str(answer))},
    ]


def judge_score(output: str | None) -> int:
    """scorer.py: ``mc = result.strip()[-1].lower()``; B, C, E = 1, anything else 0.
    (An empty output would raise IndexError there; it scores 0 here.)"""
    text = (output or "").strip()
    if not text:
        return 0
    return 1 if text[-1].lower() in "bce" else 0


async def _judge_all(
    pairs: list[tuple[str, list[dict[str, Any]]]], options: ScoringOptions, judges: list[str]
) -> list[tuple[dict[str, ModelResponse], dict[str, Any]]]:
    """Every judge on every pair, the judges at once (each with ``judge_max_connections`` requests in
    flight): per judge, ({question id: response}, its stats)."""
    from harness.models.cache import ResponseCache

    cache = ResponseCache(options.cache_path)  # made in this thread: sqlite objects stay in their thread
    tasks = [asyncio.ensure_future(_judge_one(pairs, options, judge, cache)) for judge in judges]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:  # one judge failed: the others stopped (their backends closed) before the cache
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    finally:
        cache.close()


async def _judge_one(
    pairs: list[tuple[str, list[dict[str, Any]]]], options: ScoringOptions, judge: str, cache: Any
) -> tuple[dict[str, ModelResponse], dict[str, Any]]:
    from harness.models.cache import cache_key
    from harness.models import create_backend

    backend = create_backend(judge)
    tokens = ("prompt_tokens", "completion_tokens", "cache_read_tokens", "cache_write_tokens")
    stats: dict[str, Any] = {"calls": 0, "cache_hits": 0, **dict.fromkeys(tokens, 0)}
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
        await backend.close()
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
    """Before any model call: each judge's backend can be made (a known backend) and, for an API,
    its key is set; nothing is started."""
    from harness.errors import ModelError
    from harness.models import create_backend

    for judge in judge_names(options):
        backend = create_backend(judge)
        if callable(getattr(backend, "api_key", None)):
            try:
                backend.api_key()
            except ModelError as exc:
                raise ModelError(f"--judge {judge}: {exc}") from None


# several judges: each question's verdict is the majority's
AGGREGATE_RULE = (
    "majority vote per question: 1 when more than half of the judges score it 1, else 0 (a tie counts 0: "
    "a question counts as right only when most judges say so)"
)
AGREEMENT_METHOD = (
    "Krippendorff's alpha (nominal) over the questions x judges matrix of 0/1 verdicts, over the questions "
    "judged (unanswered ones score 0 with no request and are left out); percent agreement pooled over the "
    "pairs of judges; unanimous: the share of questions every judge scores alike"
)
# the string metric each judge's 0/1 is set against when it is scored in the same run, first found:
# (metric, per-question leaf, label); strict accuracy (every gold part found) is closest to the judge's
# B/C/E (the submission holds all the expert answer's facts)
STRING_MEASURES = (
    ("fanoutqa-string", "acc==1", "fanoutqa-string strict", "1 when every gold answer part is found (acc == 1)"),
    ("em-f1", "em", "em-f1 em", "HotpotQA exact match"),
)


def judge_names(options: ScoringOptions) -> list[str]:
    from harness.scoring.metrics import judge_list

    return judge_list(options.judge)


def majority(scores: list[int]) -> int:
    """AGGREGATE_RULE: 1 when more than half of the verdicts are 1; a tie is 0."""
    return 1 if 2 * sum(scores) > len(scores) else 0


def _judged(row: dict[str, Any]) -> dict[str, int | None]:
    """{judge: its 0/1 verdict, None where it gave none (unanswered)} of one per-question row."""
    if "verdicts" in row:
        return {j: v["score"] if v.get("output") is not None else None for j, v in row["verdicts"].items()}
    return {"": row["llm_judge"] if row.get("judge_output") is not None else None}


def aggregate_verdicts(rows: list[dict[str, Any]], n: float) -> dict[str, Any]:
    """The aggregate of per-question rows (the metric's, a breakdown group's, a bootstrap draw's):
    the share judged right (``n`` questions) and, with several judges, each judge's own share."""
    out: dict[str, Any] = {"llm_judge": sum(r["llm_judge"] for r in rows) / (n or 1)}
    judges = list(dict.fromkeys(j for r in rows for j in r.get("verdicts") or {}))
    if judges:
        out["by_judge"] = {
            j: sum(r["verdicts"][j]["score"] for r in rows if j in r.get("verdicts", {})) / (n or 1) for j in judges
        }
    return out


def per_question_paths(aggregate: dict[str, Any]) -> dict[tuple[str, ...], tuple[str, ...]]:
    """Each judge's share is the mean of its per-question verdicts (judge names may hold dots)."""
    return {("by_judge", j): ("verdicts", j, "score") for j in aggregate.get("by_judge") or {}}


def agreement_of(rows: list[dict[str, Any]], name: str = "llm-judge", judge: str | None = None) -> dict[str, Any]:
    """The agreement section from full per-question rows ({metric: values}; with epochs, every epoch's
    rows: each answer a unit): with several judges theirs (AGREEMENT_METHOD); when a string metric
    (STRING_MEASURES) is in the rows, each judge's (and the majority's) with its 0/1. Over the
    questions judged: an unanswered one has no verdict. ``judge``: the name of a single judge."""
    from harness.scoring.agreement import pair_agreement, raters_agreement
    from harness.scoring.uncertainty import leaf

    mine = [r.get(name) for r in rows if isinstance(r.get(name), dict)]
    judged = [_judged(r) for r in mine]
    judges = list(dict.fromkeys(j for d in judged for j in d))
    out: dict[str, Any] = {}
    if len(judges) > 1:
        out["judges"] = raters_agreement({j: [d.get(j) for d in judged] for j in judges}, "judges")
    found = next((m for m in STRING_MEASURES if any(m[0] in r for r in rows)), None)
    if found is None or not judges:
        return out
    metric, path, label, _ = found
    values = [leaf(r.get(metric) or {}, (path,)) for r in rows if isinstance(r.get(name), dict)]
    string = [float(v) if isinstance(v, (bool, int, float)) else None for v in values]
    section: dict[str, Any] = {"string": label, "by_judge": {}}
    for j in judges:
        section["by_judge"][j or judge or "judge"] = pair_agreement([d.get(j) for d in judged], string)
    if len(judges) > 1:
        votes = [r["llm_judge"] if any(v is not None for v in d.values()) else None for r, d in zip(mine, judged)]
        section["majority"] = pair_agreement(votes, string)
    out["with_string"] = section
    return out


def with_other_metrics(
    aggregate: dict[str, Any], info: dict[str, Any], rows: list[dict[str, Any]], name: str = "llm-judge"
) -> tuple[dict[str, Any], dict[str, Any]]:
    """After every metric of the run is scored (``rows``: full per-question rows): the agreement
    section again, now with string accuracy when a string metric was scored too."""
    found = agreement_of(rows, name, info.get("judge"))
    aggregate = {k: v for k, v in aggregate.items() if k != "agreement"}
    if found:
        aggregate["agreement"] = found
    if "with_string" in found:
        label = found["with_string"]["string"]
        meaning = next(m[3] for m in STRING_MEASURES if m[2] == label)
        info = {
            **info,
            "agreement_with_string": f"each judge's 0/1 against {label} ({meaning}), over the questions judged",
        }
    return aggregate, info


# the expert answer is gold_text(reference): FanOutQA's str_answer, QAMPARI entities by their answer text
# each verdict is 0 or 1 (the majority's too): every number a share, each judge's (by_judge) included
@declare(
    accepts=(*FANOUTQA_SHAPES, "entity_list"),
    needs=("judge",),
    check=check_judge,
    headline=("llm_judge",),
    labels={"llm_judge": "LLM judge"},
    kind=share(),
)
@aggregates(aggregate_verdicts, per_question_paths=per_question_paths, with_other_metrics=with_other_metrics)
@discrete_values
def llm_judge(
    questions: list[Sample], answers: list[dict[str, Any]], only_answered: bool, options: ScoringOptions | None = None
) -> dict[str, Any]:
    """FanOutQA's GPT-as-judge accuracy: the share of questions the judge grades B, C or E. With
    several judges, the share the majority grades so (AGGREGATE_RULE), each judge's own, and their
    agreement."""
    options = options or ScoringOptions()
    if not options.judge:
        raise HarnessError(NO_JUDGE_MESSAGE)
    judges = judge_names(options)
    by_id = {a["id"]: a.get("answer") for a in answers}
    pool = [q for q in questions if q.id in by_id] if only_answered else questions
    pairs: list[tuple[str, list[dict[str, Any]]]] = []
    trimmed: list[str] = []
    for q in pool:
        answer = by_id.get(q.id)
        if answer is None:
            continue  # unanswered: 0, no request
        if cut_answer(answer)[1]:
            trimmed.append(q.id)
        pairs.append((q.id, judge_messages(q.question, q.answer, answer)))

    empty = ({}, {"calls": 0, "cache_hits": 0})
    judged = _run(_judge_all(pairs, options, judges)) if pairs else [empty for _ in judges]
    outputs = [{qid: response.content or "" for qid, response in responses.items()} for responses, _ in judged]
    raw: dict[str, dict[str, Any]] = {}
    for q in pool:
        texts = [each.get(q.id) for each in outputs]
        scores = [judge_score(text) if text is not None else 0 for text in texts]
        if len(judges) == 1:  # the official shape
            raw[q.id] = {"llm_judge": scores[0], "judge_output": texts[0]}
        else:
            verdicts = {j: {"score": s, "output": t} for j, s, t in zip(judges, scores, texts)}
            raw[q.id] = {"llm_judge": majority(scores), "verdicts": verdicts}
    shared = {
        "params": JUDGE_PARAMS.model_dump(),
        "n_judged": len(pairs),
        "n_unanswered": len(pool) - len(pairs),
        "trimmed_to_4000_chars": trimmed,  # the key as before; a list is cut to 4000 items (cut_answer)
        "prompt_sha256": prompt_sha256(),
        "rule": 'result.strip()[-1].lower() in "bce" -> 1, else 0',
        "reference": "fanoutqa eval/llm.py",
    }
    each = [_judge_info(judge, stats) for judge, (_, stats) in zip(judges, judged)]
    if len(judges) == 1:  # the keys in their order before several judges
        one = each[0]
        info = {
            "judge": one.pop("judge"),
            "backend": one.pop("backend"),
            "params": shared.pop("params"),
            **one,
            **shared,
        }
    else:
        info = {
            "judges": judges,
            **{key: sum(e[key] for e in each) for key in TOTALS},
            **shared,
            "by_judge": dict(zip(judges, each)),
            "aggregate_rule": AGGREGATE_RULE,
            "agreement": AGREEMENT_METHOD,
        }
    aggregate = aggregate_verdicts(list(raw.values()), len(pool))
    if len(judges) > 1:
        aggregate["agreement"] = agreement_of([{"llm-judge": r} for r in raw.values()])
    return {"aggregate": aggregate, "raw": raw, "info": info}


TOTALS = (
    "calls", "cache_hits", "judge_prompt_tokens", "judge_completion_tokens", "judge_cache_read_tokens",
    "judge_cache_write_tokens",
)


def _judge_info(judge: str, stats: dict[str, Any]) -> dict[str, Any]:
    return {
        "judge": judge,
        "backend": stats.get("backend"),
        "calls": stats["calls"],
        "cache_hits": stats["cache_hits"],
        # the judge's own tokens (requests actually sent), kept apart from the model under test
        "judge_prompt_tokens": stats.get("prompt_tokens", 0),
        "judge_completion_tokens": stats.get("completion_tokens", 0),
        # of judge_prompt_tokens: read from and written to the provider's prompt cache
        "judge_cache_read_tokens": stats.get("cache_read_tokens", 0),
        "judge_cache_write_tokens": stats.get("cache_write_tokens", 0),
    }

