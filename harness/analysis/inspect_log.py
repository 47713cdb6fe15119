"""``harness export inspect RUN_DIR``: a run as an Inspect AI eval log (the ``.eval`` zip, or ``.json``),
which ``inspect view`` and ``inspect_ai.log.read_eval_log`` open. The run is read through its typed
records (``read_results``, ``load_rows``) and never scored again: every value is one the run recorded.

What maps where (Inspect's types: inspect_ai/log/_log.py, model/_chat_message.py, model/_model_output.py
of inspect-ai 0.3.285):

* ``EvalSpec``: task ``DATASET/SETTING``, the run id, ``created`` = the run's start, the whole
  ``RunConfig`` as ``task_args``, the strategy as ``solver`` (its knobs as ``solver_args``), the
  decoding knobs as ``model_generate_config``, the backend options as ``model_args``, the harness
  version in ``packages`` and ``metadata``;
* one ``EvalSample`` per finished or failed (question, epoch): the question as ``input``, the gold
  answer as ``target`` (a list: one line per item, ``gold_text``), the transcript as ``messages``
  (tool calls, tool results and reasoning as Inspect's types), the answer scored as ``output`` with
  the sample's tokens and cost as ``ModelUsage``; a failed one carries its error, never a score;
  questions never asked are not samples (``results.total_samples`` counts them);
* each metric's per-question values (results.json ``scores.raw``) as one ``Score`` per metric, its
  numeric leaves the value (a dict), its other leaves the score's metadata; with ``--epochs`` above 1
  the run records values per question (reduced over epochs), not per epoch: they go in ``reductions``
  and the epochs' samples carry none;
* every aggregate number as an ``EvalScore`` named ``METRIC.LEAF`` (the dataset's headline first,
  also ``headline_metric``), its value as ``accuracy`` (a share), ``mean`` (a mean of per-question
  values) or ``value`` (anything else), its standard error as ``stderr`` and its 95% interval as
  ``ci95_low``/``ci95_high``, the method, kind and clustering in the metric's metadata;
* ``EvalStats``: the run's start and end, its tokens per model (``input_tokens`` without the prompt
  cache's reads and writes, as Inspect counts them) and the list price of its finished samples.

The status: complete -> success; incomplete (samples failed), error, budget_exhausted -> error (the
reason as the log's error); interrupted -> cancelled; running, or no results.json yet (killed in its
first invocation) -> started, with the samples written so far and no results.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from harness._version import DISTRIBUTION, pip_install
from harness.analysis.runs import load_rows
from harness.errors import HarnessError
from harness.execution.record import RunClaim, RunResults, SampleRow
from harness.execution.lock import writer_of
from harness.records import check_output_path, write_atomic
from harness.scoring.display import dataset_headline, display_name, kind_of
from harness.scoring.gold import gold_text
from harness.scoring.scores import Interval
from harness.scoring.shape import value_leaves
from harness.text import sendable

INSTALL = pip_install("inspect")
DEFAULT_FILE = "inspect.eval"
FORMATS = {".eval": "eval", ".json": "json"}

# the harness's run status -> Inspect's EvalStatus ("started", "success", "cancelled", "error")
STATUS = {
    "complete": "success",
    "incomplete": "error",
    "error": "error",
    "budget_exhausted": "error",
    "interrupted": "cancelled",
    "running": "started",
}
# a reply's finish_reason (OpenAI's words, which every backend records) -> Inspect's StopReason
STOP_REASONS = {"stop": "stop", "length": "max_tokens", "tool_calls": "tool_calls", "content_filter": "content_filter"}


def require_inspect() -> None:
    import sys

    try:
        import inspect_ai  # noqa: F401
    except ImportError:
        python = " (inspect-ai needs Python 3.11 or later)" if sys.version_info < (3, 11) else ""
        raise HarnessError(
            f"harness export inspect needs inspect-ai, which is not installed: {INSTALL}{python}"
        ) from None


def log_format(out: str | Path) -> str:
    """``eval`` or ``json`` by the file's name; any other name is refused (Inspect reads those two)."""
    suffix = Path(out).suffix.lower()
    if suffix not in FORMATS:
        raise HarnessError(f"--out {out}: name it FILE.eval (Inspect's log format, the default) or FILE.json")
    return FORMATS[suffix]


def export_inspect(run_dir: str | Path, out: str | Path | None = None) -> tuple[Path, dict[str, Any]]:
    """Write ``run_dir``'s Inspect log to ``out`` (default RUN_DIR/inspect.eval), atomically: the log
    is written into a temporary folder beside it, then copied over ``out`` by ``write_atomic``.
    Returns the path and a summary (status, samples, warnings)."""
    run_dir = Path(run_dir)
    _check_run_dir(run_dir)
    out = Path(out) if out is not None else run_dir / DEFAULT_FILE
    fmt = log_format(out)
    check_output_path(out, "--out")  # the default too, before any work
    require_inspect()
    log, summary = build_eval_log(run_dir)
    writer = writer_of(run_dir)
    if writer is not None:
        summary["warnings"].append(f"{run_dir} is in use by {writer}: the log holds what was written so far")

    from inspect_ai.log import write_eval_log

    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{out.name}.", dir=out.parent) as tmp:
        written = Path(tmp) / f"log.{fmt}"
        write_eval_log(log, str(written), format=fmt)

        def copy(f) -> None:
            with open(written, "rb") as src:
                shutil.copyfileobj(src, f, 1 << 20)

        write_atomic(out, copy)
    return out, summary


def _check_run_dir(run_dir: Path) -> None:
    """A run directory (results.json or config.json there) or one line, before anything is imported."""
    from harness.execution.scoring import read_run_files

    if not run_dir.exists():
        raise HarnessError(f"RUN_DIR {run_dir}: no such run directory")
    if not run_dir.is_dir():
        raise HarnessError(f"RUN_DIR {run_dir}: not a folder (give the run directory)")
    read_run_files(run_dir)  # a folder of neither, or a damaged file: named in one line


# --------------------------------------------------------------------------- the log
def build_eval_log(run_dir: str | Path):
    """The run as an ``inspect_ai.log.EvalLog`` (nothing written), and a summary."""
    from inspect_ai import __version__ as inspect_version
    from inspect_ai.log import EvalLog, EvalSampleReductions, EvalSampleScore, EvalStats

    from harness.execution.scoring import read_run_files, run_config

    run_dir = Path(run_dir)
    results, claim = read_run_files(run_dir)  # one line where neither results.json nor config.json is there
    config = run_config(results, claim)
    rows = load_rows(run_dir)
    warnings: list[str] = []
    questions = _dataset_samples(results, claim, run_dir, warnings)
    model = config.model
    epochs = config.epochs
    # the log is a document: a lone surrogate (a \udXXX escape in the run's text) is written as U+FFFD,
    # counted and said (harness.text's policy), as Inspect's JSON writer cannot encode one
    per_question, replaced = sendable(_per_question(results))

    samples = []
    order = _sample_order(results, rows)
    for key in order:
        row, n = _plain_row(rows.finished.get(key) or rows.failed[key])
        gold, m = sendable(_gold(questions.get(row.id)))
        replaced += n + m
        sample_scores = per_question.get(row.id, {}) if epochs == 1 and key in rows.finished else {}
        samples.append(_sample(row, key in rows.finished, gold, sample_scores, model, _run_id(results, claim)))
    if replaced:
        warnings.append(
            f"{replaced} character{'s' if replaced != 1 else ''} UTF-8 cannot encode (lone surrogates, from a "
            "\\udXXX escape in the run's text) written as U+FFFD"
        )

    reductions = None
    if per_question:
        by_metric: dict[str, list[Any]] = {}
        for qid, metrics in per_question.items():
            for metric, values in metrics.items():
                value, meta = _score_value(values)
                by_metric.setdefault(metric, []).append(EvalSampleScore(value=value, metadata=meta, sample_id=qid))
        reducer = config.epoch_reducer if epochs > 1 else None
        reductions = [EvalSampleReductions(scorer=m, reducer=reducer, samples=s) for m, s in by_metric.items()]

    status = STATUS.get(results.status, "started") if results is not None else "started"
    started = _started(results, rows)
    eval_results, headline = _results(results) if results is not None else (None, None)
    log = EvalLog(
        status=status,
        eval=_spec(results, claim, config, started, headline, inspect_version),
        plan=_plan(results, claim, config),
        results=eval_results,
        stats=EvalStats(
            started_at=started or "",
            completed_at=(results.ended_at or "") if results is not None and status != "started" else "",
            model_usage=_run_usage(results, rows, model),
        ),
        error=_error(results) if status == "error" else None,
        samples=samples,
    )
    # set after: EvalLog's before-validator copies `reductions` into `results` as dicts only
    log.reductions = reductions
    summary = {
        "status": status,
        "run_status": results.status if results is not None else "running (no results.json yet)",
        "samples": len(samples),
        "failed": sum(1 for k in order if k not in rows.finished),
        "warnings": warnings,
    }
    return log, summary


def _run_id(results: RunResults | None, claim: RunClaim | None) -> str:
    if results is not None:
        return results.run_id
    return str((claim.model_extra or {}).get("run_id") or claim.config_hash[:12]) if claim is not None else ""


def _sample_order(results: RunResults | None, rows) -> list[str]:
    """Work keys epoch by epoch, each in the run's question order (then any row the order lacks)."""
    keys = [*rows.finished, *rows.failed]
    ids = list(results.sample_ids) if results is not None and results.sample_ids else []
    ids += [i for i in dict.fromkeys((rows.finished.get(k) or rows.failed[k]).id for k in keys) if i not in set(ids)]
    position = {qid: i for i, qid in enumerate(ids)}

    def sort_key(key: str) -> tuple[int, int]:
        row = rows.finished.get(key) or rows.failed[key]
        return (row.epoch, position.get(row.id, len(position)))

    return sorted(keys, key=sort_key)


def _dataset_samples(
    results: RunResults | None, claim: RunClaim | None, run_dir: Path, warnings: list[str]
) -> dict[str, Any]:
    """The run's questions by id (for the gold answers), loaded as ``harness score RUN_DIR`` loads them;
    where they cannot be, each target is empty and a warning says why."""
    from harness.execution.scoring import load_run_dataset

    try:
        dataset = load_run_dataset(results, claim, run_dir=run_dir)
    except HarnessError as exc:
        warnings.append(f"targets left empty: {exc}")
        return {}
    return {s.id: s for s in dataset.samples}


def _per_question(results: RunResults | None) -> dict[str, dict[str, Any]]:
    """{question id: {metric: its per-question values}} as results.json records them (``scores.raw``)."""
    if results is None or results.scores is None:
        return {}
    return results.scores.rows_by_question()


# --------------------------------------------------------------------------- samples
def _text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _target(gold: Any) -> str | list[str]:
    """A gold answer as Inspect's target: text as it is, a list as one text per item, a dict (FanOutQA's
    key -> value answers) as one ``KEY - VALUE`` per entry (``gold_text``'s reading)."""
    if gold is None:
        return ""
    if isinstance(gold, (list, tuple)):
        return [gold_text(item) for item in gold]
    if isinstance(gold, dict) and "answer_text" not in gold:
        return [f"{key} - {gold_text(value)}" for key, value in gold.items()]
    return gold_text(gold)


def _score_value(values: Any) -> tuple[Any, dict[str, Any] | None]:
    """A metric's per-question values as an Inspect Score value: its numbers and booleans (dotted
    names), with text and lists moved to the score's metadata (an Inspect value holds scalars only)."""
    if not isinstance(values, dict):
        if values is None or isinstance(values, (bool, int, float, str)):
            return values, None
        return None, {"value": values}
    flat: dict[str, Any] = {}
    other: dict[str, Any] = {}

    def walk(node: dict[str, Any], prefix: str) -> None:
        for key, value in node.items():
            name = f"{prefix}{key}"
            if isinstance(value, dict) and value:
                walk(value, name + ".")
            elif value is None or isinstance(value, (bool, int, float)):
                flat[name] = value
            else:
                other[name] = value

    walk(values, "")
    return flat, other or None


def _usage(usage, cost_usd: float | None):
    """Our usage (cache reads and writes are parts of prompt_tokens) as Inspect's ``ModelUsage``
    (``input_tokens`` excludes them: inspect_ai/model/_model_output.py, ModelUsage)."""
    from inspect_ai.model import ModelUsage

    cache = usage.cache_read_tokens + usage.cache_write_tokens
    return ModelUsage(
        input_tokens=max(usage.prompt_tokens - cache, 0),
        output_tokens=usage.completion_tokens,
        total_tokens=usage.prompt_tokens + usage.completion_tokens,
        input_tokens_cache_read=usage.cache_read_tokens or None,
        input_tokens_cache_write=usage.cache_write_tokens or None,
        reasoning_tokens=usage.reasoning_tokens or None,
        total_cost=cost_usd,
    )


def _plain_row(row: SampleRow) -> tuple[SampleRow, int]:
    """``row`` with each lone surrogate of its text as U+FFFD, and how many were (``row`` when none)."""
    data, n = sendable(row.model_dump())
    return (SampleRow.model_validate(data), n) if n else (row, 0)


def _gold(question: Any) -> dict[str, Any] | None:
    """What a sample shows of its dataset question: its text, gold answer and breakdown groups."""
    if question is None:
        return None
    return {"question": question.question, "answer": question.answer, "groups": dict(question.groups.items())}


def _sample(
    row: SampleRow, finished: bool, gold: dict[str, Any] | None, scores: dict[str, Any], model: str, run_id: str
):
    from inspect_ai.log import EvalError, EvalSample
    from inspect_ai.model import ChatCompletionChoice, ChatMessageAssistant, ModelOutput
    from inspect_ai.scorer import Score

    from harness.records import work_key

    key = work_key(row.id, row.epoch)
    answer = _text(row.answer)
    usage = _usage(row.usage, row.cost_usd)
    if finished:
        message = ChatMessageAssistant(id=f"{key}#output", content=answer, model=model, source="generate")
        stop = STOP_REASONS.get(row.finish_reason or "", "unknown")
        output = ModelOutput(
            model=model,
            choices=[ChatCompletionChoice(message=message, stop_reason=stop)],
            completion=answer,
            usage=usage,
            time=row.latency_s,
        )
    else:
        output = ModelOutput(model=model, usage=usage, time=row.latency_s)
    sample_scores = {}
    for metric, values in scores.items():
        value, meta = _score_value(values)
        sample_scores[metric] = Score(value=value, answer=answer, metadata=meta)
    metadata: dict[str, Any] = {
        "outcome": row.outcome or ("answered" if finished else None),
        "finish_reason": row.finish_reason,
        "truncated_output": row.truncated_output,
        "model_calls": row.model_calls,
        "cache_hits": row.cache_hits,
        "cost_usd": row.cost_usd,
        "spent_usd": row.spent_usd,
        "invocation": row.invocation,
    }
    if gold is not None:
        metadata["gold"] = gold["answer"]
        if gold["groups"]:
            metadata["groups"] = gold["groups"]
    if row.extra:
        metadata["extra"] = row.extra  # what the strategy recorded: its searches, evidence, ...
    total = None if row.latency_s is None else row.latency_s + (row.waited_s or 0.0)
    error = None if finished else EvalError(message=f"{row.error_type}: {row.error}", traceback="", traceback_ansi="")
    return EvalSample(
        id=row.id,
        epoch=row.epoch,
        input=_text(row.question if row.question is not None else (gold or {}).get("question")),
        target=_target(gold["answer"]) if gold is not None else "",
        messages=messages_of(row.transcript(), model, key),
        output=output,
        scores=sample_scores or None,
        metadata=metadata,
        model_usage={model: usage},
        started_at=row.started_at,
        completed_at=row.finished_at,
        total_time=total,
        working_time=row.latency_s,
        uuid=f"{run_id}/{key}",
        error=error,
    )


# --------------------------------------------------------------------------- messages
def messages_of(transcript: list[Any], model: str, key: str) -> list[Any]:
    """A transcript (OpenAI chat messages, as every strategy records them) as Inspect's ChatMessages:
    an assistant's ``tool_calls`` as ToolCalls (arguments parsed from their JSON text), a ``tool``
    message as ChatMessageTool with the function of the call it answers, ``reasoning_items``
    (Anthropic thinking blocks, OpenAI Responses reasoning items) or ``reasoning_content`` as
    ContentReasoning, a ``refusal`` as refusal text. Keys no Inspect field holds go in the message's
    metadata. Text-protocol tool calls (tags in the text) stay text: they were no API tool calls."""
    from inspect_ai.model import ChatMessageAssistant, ChatMessageSystem, ChatMessageTool, ChatMessageUser

    out = []
    functions: dict[str, str] = {}  # tool call id -> its function
    for i, message in enumerate(transcript):
        mid = f"{key}#{i}"
        if not isinstance(message, dict):
            out.append(ChatMessageUser(id=mid, content=_text(message), metadata={"not_a_message": True}))
            continue
        role = message.get("role")
        content = _content(message.get("content"))
        known = {"role", "content"}
        if role == "assistant":
            known |= {"tool_calls", "reasoning_content", "reasoning_items", "refusal"}
            calls = [_tool_call(c, f"{mid}.{j}") for j, c in enumerate(message.get("tool_calls") or [])]
            functions.update({c.id: c.function for c in calls})
            reasoning, texts = _reasoning(message), _parts(content) if content else []
            refusal = _text(message.get("refusal"))
            if refusal:  # the model declined: its text marked so (Inspect's ContentText.refusal)
                from inspect_ai.model import ContentText

                same = [t for t in texts if t.type == "text" and t.text == refusal]
                for t in same:
                    t.refusal = True
                texts += [] if same else [ContentText(text=refusal, refusal=True)]
            body = [*reasoning, *texts] if reasoning or refusal else content
            out.append(
                ChatMessageAssistant(
                    id=mid, content=body, tool_calls=calls or None, model=model, source="generate",
                    metadata=_rest(message, known),
                )  # fmt: skip
            )
        elif role == "tool":
            known |= {"tool_call_id", "name"}
            call_id = message.get("tool_call_id")
            function = functions.get(call_id) or message.get("name")
            out.append(
                ChatMessageTool(
                    id=mid, content=content, tool_call_id=call_id, function=function, metadata=_rest(message, known)
                )
            )
        elif role == "system":
            out.append(ChatMessageSystem(id=mid, content=content, metadata=_rest(message, known)))
        else:
            meta = _rest(message, known) or {}
            if role != "user":
                meta["role"] = role
            out.append(ChatMessageUser(id=mid, content=content, source="input", metadata=meta or None))
    return out


def _rest(message: dict[str, Any], known: set[str]) -> dict[str, Any] | None:
    rest = {k: v for k, v in message.items() if k not in known and v is not None}
    return rest or None


def _content(content: Any) -> Any:
    """Text as it is; a list of parts (``{"type": "text", "text"}``) as Inspect's ContentText, any
    other part as its JSON text."""
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):
        from inspect_ai.model import ContentText

        return [ContentText(text=p["text"] if _is_text_part(p) else _text(p)) for p in content]
    return _text(content)


def _is_text_part(part: Any) -> bool:
    return isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)


def _parts(content: Any) -> list[Any]:
    from inspect_ai.model import ContentText

    return list(content) if isinstance(content, list) else [ContentText(text=content)]


def _reasoning(message: dict[str, Any]) -> list[Any]:
    """The assistant's reasoning as ContentReasoning: each provider block it kept (``reasoning_items``),
    else its ``reasoning_content``. An Anthropic ``thinking`` block keeps its text and signature; a
    ``redacted_thinking`` block its data, redacted; an OpenAI Responses ``reasoning`` item its summary
    text (its encrypted content, redacted, where it has no summary) and its id as the signature."""
    from inspect_ai.model import ContentReasoning

    parts = []
    for item in message.get("reasoning_items") or []:
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind == "thinking" and isinstance(item.get("thinking"), str):
            parts.append(ContentReasoning(reasoning=item["thinking"], signature=item.get("signature")))
        elif kind == "redacted_thinking" and isinstance(item.get("data"), str):
            parts.append(ContentReasoning(reasoning=item["data"], redacted=True))
        elif kind == "reasoning":
            summary = "\n".join(
                s["text"] for s in item.get("summary") or [] if isinstance(s, dict) and isinstance(s.get("text"), str)
            )
            encrypted = item.get("encrypted_content") if isinstance(item.get("encrypted_content"), str) else None
            parts.append(
                ContentReasoning(
                    reasoning=summary or encrypted or "", summary=summary or None,
                    signature=item.get("id") if isinstance(item.get("id"), str) else None,
                    redacted=not summary and encrypted is not None,
                )  # fmt: skip
            )
    reasoning = message.get("reasoning_content")
    if not parts and isinstance(reasoning, str) and reasoning:
        parts.append(ContentReasoning(reasoning=reasoning))
    return parts


def _tool_call(call: Any, fallback_id: str):
    """``{"id", "type": "function", "function": {"name", "arguments": JSON text}}`` as Inspect's
    ToolCall; arguments that are not a JSON object are kept as text with a ``parse_error``."""
    from inspect_ai.tool import ToolCall

    call = call if isinstance(call, dict) else {}
    function = call.get("function") if isinstance(call.get("function"), dict) else {}
    raw = function.get("arguments")
    arguments, error = raw, None
    if isinstance(raw, str):
        try:
            arguments = json.loads(raw) if raw.strip() else {}
        except ValueError as exc:
            arguments, error = {}, f"arguments are not JSON ({exc}): {raw}"
    if not isinstance(arguments, dict):
        arguments, error = {}, f"arguments are not a JSON object: {_text(raw)}"
    return ToolCall(
        id=str(call.get("id") or fallback_id),
        function=str(function.get("name") or call.get("name") or ""),
        arguments=arguments,
        parse_error=error,
    )


# --------------------------------------------------------------------------- spec, plan, results, stats


def _spec(
    results: RunResults | None, claim: RunClaim | None, config, started: str | None, headline, inspect_version: str
):
    from inspect_ai.log import EvalConfig, EvalDataset, EvalSpec
    from inspect_ai.model import GenerateConfig

    from harness._version import __version__

    dataset = results.dataset if results is not None else None
    spec_text = dataset.spec if dataset is not None else ((claim.dataset_resolved if claim else None) or config.dataset)
    name = dataset.name if dataset is not None else spec_text.split(":")[0]
    setting = results.setting if results is not None else (config.setting or "")
    run_id = _run_id(results, claim)
    config_hash = results.config_hash if results is not None else claim.config_hash
    created = started or _now()
    generation = config.generation
    agent = results.agent if results is not None else None
    identity = (claim.model_extra or {}).get("agent_identity") if claim is not None else None
    agent_name = (agent.name if agent is not None else None) or (identity or {}).get("name") or config.agent
    knobs = (agent.knobs if agent is not None else (identity or {}).get("knobs")) or {}
    return EvalSpec(
        eval_id=_short_hash(f"{run_id}/{created}"),
        run_id=run_id,
        created=created,
        task=f"{name}/{setting}" if setting else name,
        task_id=config_hash[:22],
        task_version=(dataset.version if dataset is not None and dataset.version else 0),
        task_display_name=f"{spec_text} {setting}".strip(),
        task_args=config.model_dump(mode="json"),
        solver=agent_name,
        solver_args=dict(knobs),
        tags=[t for t in (spec_text, setting, agent_name) if t],
        dataset=EvalDataset(
            name=spec_text,
            location=dataset.path if dataset is not None else config.data_path,
            samples=dataset.n_total if dataset is not None else None,
            sample_ids=list(results.sample_ids) if results is not None and results.sample_ids else None,
            shuffled=config.shuffle,
        ),
        model=config.model,
        model_generate_config=GenerateConfig(
            temperature=generation.temperature,
            top_p=generation.top_p,
            max_tokens=generation.max_tokens,
            seed=generation.seed,
            reasoning_effort=generation.reasoning_effort,
            reasoning_tokens=generation.thinking_budget,
            max_connections=config.max_connections,
        ),
        model_base_url=results.model.endpoint if results is not None and results.model is not None else None,
        model_args=config.backend.model_dump(mode="json"),
        config=EvalConfig(
            limit=config.limit,
            sample_id=list(config.sample_ids) if config.sample_ids else None,
            epochs=config.epochs,
            epochs_reducer=[config.epoch_reducer],
            fail_on_error=False,  # a failed sample is recorded and the run goes on
            cost_limit=config.max_cost,
        ),
        packages={DISTRIBUTION: (results.harness.version if results is not None else None) or __version__,
                  "inspect_ai": inspect_version},  # fmt: skip
        metadata=_spec_metadata(results, claim),
        headline_metric=headline,
    )


def _spec_metadata(results: RunResults | None, claim: RunClaim | None) -> dict[str, Any]:
    """What the run records that no EvalSpec field holds (kept so nothing is lost in the viewer)."""
    if results is None:
        return {"exported_from": "config.json only: the run wrote no results.json (still running, or killed first)"}
    meta: dict[str, Any] = {
        "harness": results.harness.model_dump(mode="json"),
        "run_status": results.status,
        "config_hash": results.config_hash,
        "counts": results.counts.model_dump(mode="json"),
        "outcomes": results.outcomes,
        "agent": results.agent.model_dump(mode="json") if results.agent is not None else None,
        "model": results.model.model_dump(mode="json") if results.model is not None else None,
        "decoding": results.decoding().label(),
        "cost": results.cost.model_dump(mode="json") if results.cost is not None else None,
        "search_space": results.search_space_label,
        "snapshot": results.snapshot.model_dump(mode="json") if results.snapshot is not None else None,
        "failures": {k: v.model_dump(mode="json") for k, v in results.failures.items()},
        "invocations": [i.model_dump(mode="json", exclude={"attempted_ids"}) for i in results.invocations],
    }
    return {k: v for k, v in meta.items() if v not in (None, {}, [])}


def _plan(results: RunResults | None, claim: RunClaim | None, config):
    from inspect_ai.log import EvalPlan, EvalPlanStep

    agent = results.agent if results is not None else None
    identity = (claim.model_extra or {}).get("agent_identity") if claim is not None else None
    name = (agent.name if agent is not None else None) or (identity or {}).get("name") or config.agent or "strategy"
    knobs = (agent.knobs if agent is not None else (identity or {}).get("knobs")) or {}
    return EvalPlan(steps=[EvalPlanStep(solver=name, params=dict(knobs))])


def _value_metric_name(key: str, interval: Interval | None) -> str:
    """Inspect's name for a number: ``accuracy`` for a share of questions (Inspect's accuracy() is the
    mean of 0/1 values), ``mean`` for a mean of per-question values, ``value`` for anything else (a
    corpus-level number, a count of things)."""
    kind = kind_of(key)
    if ((interval.kind_name if interval is not None else None) or kind.name) == "share":  # as computed (epochs: a mean)
        return "accuracy"
    if interval is not None and interval.per_question and not kind.total:
        return "mean"
    return "value"


def _leaves(values: dict[str, Any]) -> dict[str, Any]:
    """Every number of an aggregate (None kept), a bool as 0.0/1.0 (Inspect's metric values are numbers)."""
    return {k: float(v) if isinstance(v, bool) else v for k, v in value_leaves(values).items()}


def _results(results: RunResults):
    """Every aggregate number as an EvalScore (the dataset's headline first), and the headline."""
    from inspect_ai.log import EvalMetric, EvalResults, EvalScore, HeadlineMetric

    scores = results.scores
    counts = results.counts
    if scores is None:
        return EvalResults(total_samples=counts.selected, completed_samples=counts.finished), None
    numbers: dict[str, tuple[str, Any]] = {}  # METRIC.LEAF -> (metric, value)
    for metric, aggregate in scores.metric_aggregates().items():
        for leaf, value in _leaves(aggregate).items():
            numbers[f"{metric}.{leaf}"] = (metric, value)
    headline_keys = [k for k in dataset_headline(results.dataset.name, scores.metric_names()) if k in numbers]
    order = [*headline_keys, *(k for k in numbers if k not in headline_keys)]
    meta = scores.meta
    unscored = (meta.n_failed or 0) + (meta.n_pending or 0)
    reducer = results.config.epoch_reducer if results.config.epochs > 1 else None
    eval_scores, no_value = [], {}
    for key in order:
        metric, value = numbers[key]
        interval = scores.interval(key)
        if value is None:
            no_value[key] = (interval.note if interval is not None else None) or "no value (n/a)"
            continue
        kind = kind_of(key)
        name = _value_metric_name(key, interval)
        info = {"display_name": display_name(key), "kind": (interval.kind_name if interval is not None else None) or kind.name,
                "scale": kind.perfect, "unit": kind.unit}  # fmt: skip
        if interval is not None:
            info.update(method=interval.method, n=interval.n, n_clusters=interval.n_clusters, note=interval.note)
            if scores.cluster_by:
                info["clustered_by"] = scores.cluster_by
        metrics = {name: EvalMetric(name=name, value=value, metadata={k: v for k, v in info.items() if v is not None})}
        if interval is not None and interval.stderr is not None:
            metrics["stderr"] = EvalMetric(name="stderr", value=interval.stderr)
        if interval is not None and interval.bounds is not None:
            metrics["ci95_low"] = EvalMetric(name="ci95_low", value=interval.bounds[0])
            metrics["ci95_high"] = EvalMetric(name="ci95_high", value=interval.bounds[1])
        eval_scores.append(
            EvalScore(
                name=key, scorer=metric, reducer=reducer, metrics=metrics,
                scored_samples=interval.n if interval is not None and interval.n is not None else meta.n_answered,
                unscored_samples=unscored,
            )  # fmt: skip
        )
    headline = None
    if eval_scores:
        first = eval_scores[0]
        headline = HeadlineMetric(
            scorer=first.scorer, score=first.name, metric=next(iter(first.metrics)), reducer=first.reducer
        )
    extra = {
        "no_value": no_value,
        "breakdown": scores.breakdown_values(),
        "epochs": {"n": scores.n_epochs, "reducer": scores.epoch_reducer} if scores.n_epochs else None,
        "clustering": {"by": scores.cluster_by, "n_clusters": scores.n_clusters} if scores.cluster_by else None,
        "failed_metrics": scores.failed_metrics(),
        "not_scored": meta.not_scored,
        "aggregation": scores.aggregations(),
        "scoring_note": results.scoring_note,
    }
    return (
        EvalResults(
            total_samples=counts.selected,
            completed_samples=counts.finished,
            scores=eval_scores,
            headline=headline,
            metadata={k: v for k, v in extra.items() if v not in (None, {}, [])} or None,
        ),
        headline,
    )


def _started(results: RunResults | None, rows) -> str | None:
    if results is not None and (results.invocations or results.started_at):
        return results.invocations[0].started_at if results.invocations else results.started_at
    times = [r.started_at for r in [*rows.finished.values(), *rows.failed.values()] if r.started_at]
    return min(times) if times else None


def _run_usage(results: RunResults | None, rows, model: str) -> dict[str, Any]:
    """The run's tokens (results.json ``tokens``: its finished samples) and their list price; without
    results.json, the sum of the finished rows'."""
    from inspect_ai.model import ModelUsage

    from harness.execution.record import Usage

    if results is not None and results.tokens is not None:
        t = results.tokens
        usage = Usage(
            prompt_tokens=t.prompt, completion_tokens=t.completion, cache_read_tokens=t.cache_read,
            cache_write_tokens=t.cache_write, reasoning_tokens=t.reasoning,
        )  # fmt: skip
        return {model: _usage(usage, results.cost.model_usd if results.cost is not None else None)}
    total = ModelUsage()
    for row in rows.finished.values():
        total = total + _usage(row.usage, row.cost_usd)
    return {model: total} if rows.finished else {}


def _error(results: RunResults | None):
    """Why the run is not a success, as the log's EvalError (Inspect shows it on the log's page)."""
    from inspect_ai.log import EvalError

    from harness.execution.scoring import stopped_reason

    if results is None:
        return None
    counts = results.counts
    if results.status == "incomplete":
        kinds = ", ".join(f"{k} ({v.type})" for k, v in list(results.failures.items())[:5])
        text = f"incomplete: {counts.failed} of {counts.selected} samples failed (not scored)"
        text += f": {kinds}" if kinds else ""
    else:
        last = results.invocations[-1].error if results.invocations else None
        text = f"{results.status}: {stopped_reason(results.status, last)}; "
        text += f"{counts.pending} of {counts.selected} samples never asked"
    return EvalError(message=text, traceback="", traceback_ansi="")


def _short_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:22]


def _now() -> str:
    from datetime import datetime, timezone

    return datetime.now(timezone.utc).isoformat(timespec="seconds")
