"""``harness run``: a thin layer over ``harness.api.run`` (flags -> options -> results)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from harness.execution.record import RunResults, Scores
from harness._version import pip_install

# Knobs that were global flags before strategies declared their own: `--max-rounds 3` gets a hint.
MOVED_TO_KNOBS = frozenset(
    {
        "search_style", "chunk_size", "ranking_query", "budget_fraction", "max_similar", "bm25_k1", "bm25_b",
        "bm25_delta", "max_rounds", "context_policy", "evidence_reserve", "repeat_question", "text_protocol_strict",
        "loose_text_protocol", "retriever", "retrieval_k", "passage_kind", "question_representation",
        "classify_doc_tokens", "history",
    }
)  # fmt: skip


def add_parser(sub) -> None:
    p = sub.add_parser(
        "run",
        description=(
            "Run a model on a dataset in one setting. Writes DIR/samples.jsonl (one line per finished "
            "sample, appended as it finishes) and DIR/results.json. Running the same command again "
            "continues the run: finished samples are skipped, failed ones retried. Exit status: 0 every "
            "sample finished; 1 some failed (scored over the answered ones; rerun to retry); 4 none was answered "
            "(every one failed or was never asked: no scores, n/a, never 0; or every finished one ended without "
            "an answer, e.g. at max_steps: scored as wrong, the metrics' rule); 2 bad input or a stop such as a "
            "rejected API key; 3 a process the run needs died; 5 the strategy ended or froze the run from outside "
            "its samples (one line names it); 6 every sample finished but logging to a --log-to tracker failed (the "
            "run's files are written; rerun the same command to log again); 130 interrupted."
        ),
        argument_default=argparse.SUPPRESS,
    )
    add_run_options(p)
    from harness.argtypes import number
    from harness.commands.ray_launcher import parse_launcher

    g = p.add_argument_group("many machines")
    g.add_argument(
        "--shards",
        type=number(int, 1, 1_000_000),
        metavar="K",
        help="run as K shards started by --launcher, each into OUT/shards/shard-IofK, merged into --out when all "
        "are done (as harness merge); refused without --launcher",
    )
    g.add_argument(
        "--launcher",
        type=parse_launcher,
        metavar="ray[=ADDRESS]",
        help="what starts the --shards: ray, as Ray tasks on the cluster at ADDRESS (ray.init's address: "
        "HOST:PORT or auto) or, without one, on a local Ray instance; a task whose node dies is "
        "retried and its shard resumes. OUT and every path given must be on storage every node sees. Needs "
        f"{pip_install('ray')}; recorded (config.launcher), not hashed",
    )
    g = p.add_argument_group("experiment trackers")
    g.add_argument(
        "--log-to",
        dest="log_to",
        action="append",
        metavar="wandb|mlflow",
        help="when the run finishes (a resume that finishes it too), log it to Weights & Biases or MLflow (repeat, "
        "or comma-separated): its configuration, every score with its 95%% interval and n, the per-question table, "
        "the HTML report, and the run directory's path, run id and harness version; where to is the tracker's "
        "own environment (WANDB_MODE, WANDB_PROJECT; MLFLOW_TRACKING_URI, MLFLOW_EXPERIMENT_NAME). Needs pip "
        "install 'manyanswer-harness[wandb]' or '[mlflow]', checked before anything runs; recorded "
        "(config.log_to), not hashed",
    )


def _names(registry) -> str:
    return ", ".join(registry.names())


def add_run_options(p) -> None:
    """Every ``harness run`` option (``harness ablate`` takes them too)."""
    from harness.datasets.base import DATASETS
    from harness.models.base import BACKENDS
    from harness.scoring.metrics import METRICS
    from harness.strategy import AGENTS, SETTINGS

    g = p.add_argument_group("what to run")
    g.add_argument(
        "--model",
        help=f"BACKEND/NAME, backends: {_names(BACKENDS)}; e.g. local/smollm2 (default), local/PATH.gguf, "
        "vllm/HF_ID, openai/MODEL; or FILE.py:Class/NAME, package.module:Class/NAME",
    )
    g.add_argument(
        "--setting",
        choices=list(SETTINGS),
        help="default: the strategy's first setting (closed-book without --agent)",
    )
    g.add_argument(
        "--agent",
        help=f"strategy: {_names(AGENTS)}; or FILE.py:NAME, package.module:NAME; default: the setting's "
        f"own ({', '.join(f'{s}: {a}' for s, a in SETTINGS.items())}); harness list agents -v shows their knobs",
    )
    g.add_argument(
        "--agent-arg",
        dest="agent_args",
        action="append",
        metavar="KEY=VALUE",
        help="a knob of the strategy (repeat), e.g. --agent-arg max_rounds=5; checked before any model call",
    )
    g.add_argument(
        "--dataset",
        help=f"NAME[:SPLIT][@VERSION], datasets: {_names(DATASETS)}; or FILE.py:Loader[:SPLIT]; default "
        "fanoutqa:dev (version nov23: the answers every published score used; @2026 for the corrected answers)",
    )
    g.add_argument(
        "--data-path", help="read the dataset from this file (its official format) instead of the vendored copy"
    )
    g.add_argument(
        "--limit",
        type=int,
        help="only the first N samples (after --sample-id, --sample-filter and --shuffle; with --stratify-by "
        "a proportional N)",
    )
    g.add_argument("--sample-id", dest="sample_ids", help="comma-separated sample ids to run")
    g.add_argument(
        "--sample-filter",
        dest="sample_filter",
        action="append",
        metavar="FIELD=VALUE",
        help="only samples whose group FIELD has VALUE (repeat: one field any of its values, several fields "
        "all of them); fields: FanOutQA category, QAMPARI type, QUEST template/domain, TopiOCQA turn_type; "
        "not hashed",
    )
    g.add_argument(
        "--shuffle",
        action="store_true",
        help="shuffle the samples before --limit (a random subset, the same for the same seed); not hashed",
    )
    g.add_argument("--shuffle-seed", type=int, help="seed of --shuffle (default: the --seed value)")
    g.add_argument(
        "--stratify-by",
        metavar="FIELD",
        help="with --limit N: N samples in proportion to FIELD's values (largest remainder; a sample "
        "counts in its first value); not hashed",
    )
    g.add_argument(
        "--only-failed",
        action="store_true",
        help="retry only the samples that failed earlier in this run directory (failures.jsonl, minus "
        "those finished since); start none that were never tried",
    )
    g.add_argument(
        "--shard",
        metavar="I/K|auto",
        help="run only shard I of K: the selected questions whose id hashes to I (each with all its epochs); "
        "the K shards are disjoint, together the whole selection, and share the run's key: run each into its "
        "own --out (default: the run's directory name + -shardIofK), then harness merge DIR... --out DIR. "
        "auto: I and K from the scheduler that started this process (a Slurm job array's SLURM_ARRAY_TASK_*, "
        "a Kubernetes Indexed Job's JOB_COMPLETION_INDEX with HARNESS_SHARD_COUNT, or HARNESS_SHARD_INDEX "
        "with HARNESS_SHARD_COUNT), the variables recorded in config.shard_env; missing or disagreeing "
        "ones are refused before anything runs",
    )
    g.add_argument(
        "--out",
        help="run directory (default: results/<dataset>-<model>-<setting>-<config hash>[-shardIofK])",
    )
    g.add_argument(
        "--config",
        help="YAML file of options (keys are these long flag names; an agent: section holds the strategy "
        "and its knobs); flags override it",
    )
    g.add_argument(
        "--snapshot", help="Wikipedia snapshot (SQLite) the strategies read pages from (harness snapshot build)"
    )
    g.add_argument(
        "--search-space",
        choices=["evidence-only"],
        help="evidence-only: searching a snapshot made of a dataset's evidence pages or contexts is meant (an "
        "open-book or retrieve-read run over one is refused without it); recorded, in the run key",
    )
    g.add_argument(
        "--search",
        choices=["snapshot", "mediawiki"],
        help="open-book: search the --snapshot (default), or ask the live MediaWiki API as FanOutQA's code does "
        "(full-text search, each page at its revision as of --search-date; polite, rate-limited, cached on disk; "
        "needs the network, refused in one line without it)",
    )
    g.add_argument(
        "--search-api-url", help="--search mediawiki: api.php URL (default https://en.wikipedia.org/w/api.php)"
    )
    g.add_argument("--search-date", help="--search mediawiki: pages as of this date (default 2023-11-20, FanOutQA's)")
    g.add_argument(
        "--search-rate-limit", type=float, help="--search mediawiki: requests per second (default 1; 0 = no limit)"
    )
    g.add_argument(
        "--search-url",
        metavar="URL",
        help="read pages and passage indexes from a search service (harness search serve SNAP.db) instead of "
        "--snapshot: one copy of the snapshot for many runs or shards; the same results and run key as the file; "
        "its snapshot identity is fetched from it and recorded; written without credentials",
    )
    g.add_argument(
        "--search-max-attempts",
        type=int,
        help="--search-url: tries per request (waits 0.25 s, 0.5 s, 1 s, ... between; default 4); past them the "
        "sample fails as search_unavailable and a rerun retries it",
    )
    add_scoring_options(p, METRICS)
    g = p.add_argument_group("prompt")
    g.add_argument("--current-date", help="'Current date' in the FanOutQA prompts (default 11-20-2023, the paper's)")
    g.add_argument("--prompt-template", help="template name in prompts/ or a .txt file (default: the strategy's)")
    g.add_argument(
        "--confidence",
        action="store_true",
        help="ask for a stated confidence with each answer (BrowseComp's 'Confidence: N%%' line): read and removed "
        "before scoring, scored by the calibration metric (added to the default metrics); in the run key",
    )
    g.add_argument(
        "--citations",
        action="store_true",
        help="ask each answer item to cite the Wikipedia pages it rests on as [Title] (BrowseComp-Plus's citations): "
        "read and removed before scoring, scored by the citations metric (added to the default metrics); in the run key",
    )
    g = p.add_argument_group("generation (greedy by default)")
    g.add_argument("--temperature", type=float, help="default 0")
    g.add_argument("--top-p", type=float, help="default 1")
    g.add_argument(
        "--max-tokens",
        type=int,
        help="answer length limit in tokens, reasoning included (default 512; a model whose facts entry gives "
        "default_max_tokens, that: 25000 for OpenAI's reasoning models; 128 for the embedded default model, "
        "measured in the README); where it came from: results.json max_tokens_source",
    )
    g.add_argument("--seed", type=int, help="default 0")
    g.add_argument(
        "--reasoning-effort",
        choices=["none", "minimal", "low", "medium", "high", "xhigh"],
        help="reasoning models (openai/ reasoning.effort, vLLM/compatible reasoning_effort): default none sent, "
        "the provider's own default; the efforts a model takes are in harness/models/model_facts.yaml",
    )
    g.add_argument(
        "--thinking-budget",
        type=int,
        help="anthropic/ models whose thinking is optional: extended thinking with this budget_tokens (>= 1024; "
        "--max-tokens must exceed it); default off. Models that always think take no budget",
    )
    g = p.add_argument_group("backend")
    g.add_argument(
        "--base-url", help="OpenAI-compatible server to talk to (openai/, vllm/: attach instead of launching)"
    )
    g.add_argument(
        "--context-size",
        type=int,
        help="context window in tokens (llama.cpp n_ctx, vLLM --max-model-len); "
        "default: what the model file or server reports",
    )
    g.add_argument("--n-threads", type=int, help="CPU threads for llama.cpp (default: all cores)")
    g.add_argument(
        "--weight-repack",
        choices=("auto", "on", "off"),
        help="llama.cpp's extra buffer types (CPU weight repacking) for local/ and llamacpp-server/; "
        "auto (default): off where llama.cpp or the CPU reports AMX (its AMX path crashes), on elsewhere",
    )
    g.add_argument(
        "--server-arg",
        dest="server_args",
        action="append",
        help="extra flag for a launched server (repeat; e.g. --server-arg=--gpu-memory-utilization=0.8)",
    )
    g.add_argument(
        "--tool-parser",
        help="vllm/ launched here: vLLM's --tool-call-parser for native tool calls (default: the model family's "
        "in harness/models/model_facts.yaml; 'none' to launch without)",
    )
    g.add_argument(
        "--reasoning-parser",
        help="vllm/ launched here: vLLM's --reasoning-parser (default: the family's where the table marks it "
        "thinking; 'none' to launch without)",
    )
    g = p.add_argument_group("batch APIs")
    g.add_argument(
        "--batch",
        action="store_const",
        const=True,
        help="send the requests through the provider's batch interface (openai/: the Batch API, also behind "
        "--base-url; anthropic/: Message Batches; vllm/: vllm run-batch), at its batch price; answers take up to "
        "24 h; the batches are recorded in RUN_DIR/batches.jsonl and a rerun resumes them; part of the run key",
    )
    g.add_argument(
        "--batch-window",
        type=float,
        help="seconds without a new request after which the gathered requests are sent as one batch (default 1)",
    )
    g.add_argument(
        "--batch-poll-interval", type=float, help="seconds between two looks at a batch in progress (default 30)"
    )
    g = p.add_argument_group("runner")
    g.add_argument("--max-connections", type=int, help="samples in flight at once (default 4)")
    g.add_argument(
        "--epochs",
        type=int,
        help="run each question N times (epoch E uses seed --seed + E - 1; use --temperature > 0); "
        "more epochs later resume the same run (default 1)",
    )
    g.add_argument(
        "--epoch-reducer",
        choices=["mean", "max", "mode"],
        help="a question's score over its epochs: mean (default), max (pass@N-like), mode",
    )
    g.add_argument(
        "--request-timeout",
        type=float,
        help="seconds per model request, its whole reply included; past it the request is retried (default 600)",
    )
    g.add_argument(
        "--max-response-bytes",
        type=int,
        help="largest reply body read from a model server, decompressed; a larger one is a failed "
        "request, retried within --max-attempts (default 16777216, 16 MiB)",
    )
    g.add_argument(
        "--http-client",
        choices=["auto", "aiohttp", "httpx"],
        help="the API backends' HTTP transport: aiohttp (openai/, vllm/, llamacpp-server/ send on it directly, "
        "anthropic/ through its SDK; fastest at many connections) or httpx (through the SDKs); auto (default): "
        "aiohttp where installed; recorded, not hashed",
    )
    g.add_argument("--sample-timeout", type=float, help="seconds per sample (default 600, the paper's)")
    g.add_argument(
        "--freeze-grace",
        type=float,
        help="a strategy blocking the event loop past --sample-timeout plus this many seconds ends the run "
        "(exit 5; the samples finished are kept; default 60)",
    )
    g.add_argument("--max-attempts", type=int, help="tries per request on 429/5xx/timeouts/malformed replies (default 6)")
    g.add_argument("--retry-max-wait", type=float, help="longest back-off between tries, seconds (default 120)")
    g.add_argument("--startup-timeout", type=float, help="seconds to wait for a launched server (default 300)")
    g.add_argument("--no-cache", dest="cache", action="store_false", help="do not read or write the response cache")
    g.add_argument(
        "--no-prompt-cache",
        dest="prompt_cache",
        action="store_const",
        const=False,
        help="anthropic/: send no cache_control breakpoints (default: on the shared prompt prefix; cache reads "
        "and writes are priced at their own rates); OpenAI's prompt cache is automatic; not hashed",
    )
    g.add_argument("--cache-path", help="SQLite response cache (default $HARNESS_CACHE_DIR or ~/.cache/harness)")
    g = p.add_argument_group("cost")
    g.add_argument(
        "--max-cost",
        type=float,
        help="budget in USD: a request whose worst case could pass it is not sent, the run stops "
        "(rerun with a higher budget to resume); not hashed",
    )
    g.add_argument("--price-table", help="price table YAML, USD per 1M tokens (default: harness/prices.yaml)")


def add_scoring_options(p, metrics=None, suppress: bool = True) -> None:
    if metrics is None:
        from harness.scoring.metrics import METRICS as metrics
    g = p.add_argument_group("scoring")
    extra = {"default": argparse.SUPPRESS} if suppress else {}
    g.add_argument(
        "--metrics",
        help=f"comma-separated metrics (default: the dataset's): {_names(metrics)}; or FILE.py:NAME, "
        "package.module:NAME",
        **extra,
    )
    g.add_argument(
        "--judge",
        action="append",
        metavar="MODEL",
        help="model for the LLM judge, e.g. openai/gpt-4o-2024-11-20 (FanOutQA's); no judge runs unless named. "
        "Several (comma-separated or repeated): each question gets the majority's verdict (a tie counts 0), "
        "each judge's share and the judges' agreement (Krippendorff's alpha) are reported",
        **extra,
    )
    if suppress:  # `harness run` (not `harness score`, which scores in one batch)
        g.add_argument(
            "--stream-scoring",
            choices=["auto", "on", "off"],
            help="score each sample in a worker process as it finishes (default auto: from 64 samples)",
        )
        g.add_argument(
            "--metric-timeout",
            type=float,
            help="seconds one plugin metric may take scoring (default 600); past it, or if it raises, that metric "
            "fails alone (scores.meta.failed_metrics) and the others are scored",
        )
    g.add_argument(
        "--cluster-by",
        help="sample field whose questions are not independent, for the error bars (e.g. category for FanOutQA; "
        "TopiOCQA clusters by Conversation_no unless 'none'); never changes a score",
        **extra,
    )
    g.add_argument(
        "--no-strip-reasoning",
        dest="strip_reasoning",
        action="store_const",
        const=False,
        help="score answers as written, <think>/<reasoning> blocks included (default: removed before scoring)",
        **({"default": argparse.SUPPRESS} if suppress else {"default": None}),
    )
    g.add_argument(
        "--bleurt-checkpoint",
        help="BLEURT checkpoint directory (--metrics bleurt needs one)",
        **extra,
    )
    g.add_argument(
        "--metric-option",
        dest="metric_options",
        action="append",
        metavar="NAME.KEY=VALUE",
        help="an option of a metric (repeat), e.g. --metric-option quest.light=true, set-f1.clean_items=true; "
        "defaults are the official values; harness list metrics -v shows each metric's options",
        **extra,
    )
    g.add_argument(
        "--max-answer-chars",
        type=int,
        help="longer answers are scored on their first this-many characters (kept whole; default 100000)",
        **extra,
    )


def options_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The flags given, as API options (``harness.api.run`` keywords)."""
    return {k: v for k, v in vars(args).items() if k not in ("command", "verbose")}


def command(args: argparse.Namespace) -> int:
    from harness.api import build_run_config, run_in_dir, tracked
    from harness.errors import ConfigError

    options = options_from_args(args)
    shards = options.pop("shards", None)
    address = None
    if options.get("launcher") is not None:
        from harness.commands.ray_launcher import split_launcher

        options["launcher"], address = split_launcher(options["launcher"])
    config = build_run_config(options)
    if shards is not None:
        if config.launcher is None:
            raise ConfigError(
                f"--shards {shards} needs a launcher to start the shards: add --launcher ray (or ray=ADDRESS); "
                "without one, run each --shard I/K yourself and join them with harness merge"
            )
        if config.shard:
            raise ConfigError(
                f"--shards {shards} starts every shard; --shard {config.shard} runs one: give one of them"
            )
        from harness.commands.ray_launcher import launch

        launched = launch(shard_argv(args), config, shards, address)
        if isinstance(launched, int):
            return launched
        record, run_dir = launched
        print_summary(record)
        return logged_status(exit_status(record), run_dir, config.log_to)
    if config.launcher is not None and not config.shard:
        raise ConfigError(f"--launcher {config.launcher} starts the shards of --shards K: add --shards K")
    if address is not None:
        raise ConfigError(f"--launcher ray={address}: a cluster's address is for --shards K, not for one --shard")

    from harness.execution.guard import run_guarded

    try:
        # A kill (SIGTERM) unwinds like Ctrl-C: servers stopped, results.json written; a strategy
        # cancelling the run's tasks does not (harness.execution.guard)
        record, run_dir = run_guarded(lambda: run_in_dir(config))
    except (KeyboardInterrupt, asyncio.CancelledError):
        print("interrupted: run the same command again to resume", file=sys.stderr)
        return 130
    print_summary(record)
    return logged_status(exit_status(record), run_dir, record.config.log_to if tracked(record.config) else None)


EXIT_NOT_LOGGED = 6  # the run is done and its files written; logging it to a tracker failed


def logged_status(status: int, run_dir, trackers: list[str] | None) -> int:
    """The finished run logged to its trackers (--log-to); the exit status: the run's own, or 6 where
    it is 0 and a tracker failed (each failure is one line on stderr; the run's files are untouched)."""
    if not trackers:
        return status
    from harness.analysis.trackers import log_run

    failures = log_run(run_dir, trackers)
    if failures and status == 0:
        print(
            f"the run is complete and its files are written; rerun the same command to log it again (exit status "
            f"{EXIT_NOT_LOGGED})",
            file=sys.stderr,
        )
        return EXIT_NOT_LOGGED
    return status


# the options the launcher sets for each shard itself
LAUNCHER_SETS = ("shards", "launcher", "shard", "out")


def shard_argv(args: argparse.Namespace) -> list[str]:
    """The run's options as given (``args`` holds only those: the run parser suppresses defaults) as
    ``harness run`` arguments for each launched shard, less those the launcher sets per shard."""
    parser = argparse.ArgumentParser(add_help=False)
    add_parser(parser.add_subparsers())
    run = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices["run"]
    given = vars(args)
    argv = ["run", "-v"] if given.get("verbose") else ["run"]
    for action in run._actions:
        if not action.option_strings or action.dest not in given or action.dest in LAUNCHER_SETS:
            continue
        flag, value = max(action.option_strings, key=len), given[action.dest]
        if action.nargs == 0:  # store_true / store_false / store_const
            if value == action.const:
                argv.append(flag)
        elif isinstance(action, argparse._AppendAction):
            argv += [f"{flag}={v}" for v in value]
        else:  # FLAG=VALUE: a value that starts with '-' stays the flag's
            argv.append(f"{flag}={value}")
    return argv


EXIT_SOME_FAILED = 1  # scores over the questions answered; a rerun retries the others
# no answer at all: none finished (no scores, n/a, never 0), or every finished sample ended without
# one (max_steps, refused, ...: scored as wrong, the metrics' rule, and said)
EXIT_NONE_ANSWERED = 4


def exit_status(record: RunResults) -> int:
    """0: every sample finished; 1: some failed; 4: no sample produced an answer (every one failed or
    was never asked, or every finished one ended without an answer)."""
    from harness.analysis.row import Outcomes

    if Outcomes.of(record).none_answered:
        return EXIT_NONE_ANSWERED
    return 0 if record.counts.failed == 0 else EXIT_SOME_FAILED


def print_summary(results: dict[str, Any] | RunResults, file=None) -> None:
    """Counts, then one line per metric with its aggregate numbers (every metric the run scored)."""
    from harness.analysis.row import Outcomes

    record = results if isinstance(results, RunResults) else RunResults.model_validate(results)
    file = file or sys.stdout
    c = record.counts
    outcomes = Outcomes.of(record)  # answered: finished with an answer (harness.analysis.row)
    print(outcomes.counts_line(), file=file)
    if record.search_space is not None:  # what the numbers below were searched over
        print(f"search space: {record.search_space.label}", file=file)
    print_scores(record.scores, file)
    if outcomes.unanswered and not outcomes.no_answer:  # beside the numbers: how many of them are no answer, and why
        print(outcomes.note(), file=file)
    cost = record.cost
    if cost is not None and cost.spent_usd:
        print(f"cost: ${cost.spent_usd:.6f} spent (list price of the finished samples ${cost.model_usd:.6f})")
    if record.stopped_on_budget and cost is not None:
        print(
            f"stopped on budget: ${cost.spent_usd:.6f} spent of --max-cost ${cost.max_cost_usd:g}; "
            f"{c.pending} sample(s) not started; rerun with a higher --max-cost to resume",
            file=sys.stderr,
        )
    elif c.failed:
        failures = [f.model_dump(mode="json") for f in record.failures.values()]
        print(failure_line(c.failed, failures), file=sys.stderr)
    if outcomes.none_answered:
        print(f"{outcomes.none_answered_line()}; exit status {EXIT_NONE_ANSWERED}", file=sys.stderr)


def print_scores(scores: Scores | None, file) -> None:
    """One line per metric, the clustering of the error bars, the breakdowns."""
    if scores is None:
        return
    for line in scores.summary_lines():
        print(f"  {line}", file=file)
    if scores.cluster_by:
        print(f"  (errors clustered by {scores.cluster_by}: {scores.n_clusters} clusters)", file=file)
    for line in scores.breakdown_lines():
        print(f"  {line}", file=file)
    line = oversized_line(scores)
    if line:
        print(line, file=file)


def oversized_line(scores: Scores | dict[str, Any]) -> str | None:
    """One line on the answers scored only in part (longer than max_answer_chars), or None."""
    scores = Scores.of(scores)
    n = scores.n_oversized_answers
    if not n:
        return None
    cap = scores.recorded_options("max_answer_chars").get("max_answer_chars")
    first = f"{cap:,}" if isinstance(cap, int) else "max_answer_chars"
    return (
        f"{n} answer{'s' if n != 1 else ''} longer than max_answer_chars {'were' if n != 1 else 'was'} scored on "
        f"{'their' if n != 1 else 'its'} first {first} characters (--max-answer-chars)"
    )


# failures a rerun of the same command cannot fix, and what can
NOT_RETRYABLE = {
    "missing_evidence": "evidence pages missing from the snapshot: rebuild it with those pages",
    "no_evidence_packed": "no evidence fits the prompt: pass a larger --context-size",
    "truncated": "the reply stopped at --max-tokens before any answer: raise --max-tokens or lower --reasoning-effort",
}


def failure_line(n_failed: int, failures: list[dict[str, Any]]) -> str:
    """One line on the failed samples: an example, and whether rerunning the same command can help
    (a timeout or an unavailable server may pass next time; a page missing from the snapshot cannot)."""
    first = failures[0] if failures else {}
    line = f"{n_failed} sample(s) failed (e.g. {first.get('type')}: {first.get('error')}); see failures.jsonl"
    stuck: dict[str, int] = {}
    for f in failures:
        if f.get("type") in NOT_RETRYABLE:
            stuck[f["type"]] = stuck.get(f["type"], 0) + 1
    retryable = n_failed - sum(stuck.values())
    if retryable > 0:
        line += f"; rerun the same command to retry {'them' if not stuck else f'the other {retryable}'}"
    for kind, count in stuck.items():
        line += f"; {count} {kind} (a rerun cannot fix: {NOT_RETRYABLE[kind]})"
    return line
