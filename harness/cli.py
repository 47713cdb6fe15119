"""``harness`` command line: run, score."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

from harness import __version__
from harness.errors import HarnessError

EXIT_BAD_INPUT = 2
# command -> the module that defines it (add_parser(sub), command(args)): one file per feature
FEATURE_COMMANDS = {
    "leaderboard": "harness.leaderboard",
    "export": "harness.export",
    "ablate": "harness.ablate",
    "report": "harness.report",
    "index": "wiki_snapshot.index_cli",
    "retrieval-eval": "harness.retrieval_eval",
}


def _run_parser(sub) -> None:
    p = sub.add_parser(
        "run",
        help="generate answers for a dataset and score them",
        description=(
            "Run a model on a dataset in one setting. Writes DIR/samples.jsonl (one line per finished "
            "sample, appended as it finishes) and DIR/results.json. Running the same command again "
            "continues the run: finished samples are skipped, failed ones retried."
        ),
        argument_default=argparse.SUPPRESS,
    )
    _run_options(p)


def _run_options(p) -> None:
    """Every ``harness run`` option (``harness ablate`` takes them too)."""
    g = p.add_argument_group("what to run")
    g.add_argument(
        "--model",
        help="PREFIX/NAME: local/smollm2 (default), local/PATH.gguf, llamacpp-server/PATH.gguf, "
        "vllm/HF_ID, openai/MODEL, anthropic/MODEL",
    )
    g.add_argument("--setting", help="closed-book (default), open-book, evidence-provided, retrieve-read")
    g.add_argument(
        "--agent",
        help="strategy: closed-book, open-book-native (open-book default), open-book-text "
        "(the paper's <search> protocol), evidence-provided, retrieve-read-joint (retrieve-read default), "
        "retrieve-read-each, retrieve-classify; default: the setting's own",
    )
    g.add_argument(
        "--dataset",
        help="NAME[:SPLIT][@VERSION]; default fanoutqa:dev (version nov23: the answers "
        "every published score used; @2026 for the corrected answers)",
    )
    g.add_argument(
        "--data-path", help="read the dataset from this file (its official format) instead of the vendored copy"
    )
    g.add_argument("--limit", type=int, help="only the first N samples (after --sample-id)")
    g.add_argument("--sample-id", dest="sample_ids", help="comma-separated sample ids to run")
    g.add_argument("--out", help="run directory (default: results/<dataset>-<model>-<setting>-<config hash>)")
    g.add_argument("--config", help="YAML file of options (keys are these long flag names); flags override it")
    _scoring_options(p)
    g = p.add_argument_group("prompt")
    g.add_argument("--current-date", help="'Current date' in the FanOutQA prompts (default 11-20-2023, the paper's)")
    g.add_argument("--prompt-template", help="template name in prompts/ or a .txt file (default: the setting's)")
    g.add_argument(
        "--history",
        choices=["original", "all-history"],
        help="conversational datasets (TopiOCQA): the question alone, or with every previous turn "
        "and its gold answer (default all-history)",
    )
    g = p.add_argument_group("generation (greedy by default)")
    g.add_argument("--temperature", type=float, help="default 0")
    g.add_argument("--top-p", type=float, help="default 1")
    g.add_argument("--max-tokens", type=int, help="answer length limit in tokens (default 512)")
    g.add_argument("--seed", type=int, help="default 0")
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
        "--server-arg",
        dest="server_args",
        action="append",
        help="extra flag for a launched server (repeat; e.g. --server-arg=--gpu-memory-utilization=0.8)",
    )
    g = p.add_argument_group("runner")
    g.add_argument("--max-connections", type=int, help="samples in flight at once (default 4)")
    g.add_argument("--request-timeout", type=float, help="seconds per model request (default 600)")
    g.add_argument("--sample-timeout", type=float, help="seconds per sample (default 600, the paper's)")
    g.add_argument("--max-attempts", type=int, help="tries per request on 429/5xx/timeouts (default 6)")
    g.add_argument("--retry-max-wait", type=float, help="longest back-off between tries, seconds (default 120)")
    g.add_argument("--startup-timeout", type=float, help="seconds to wait for a launched server (default 300)")
    g.add_argument("--no-cache", dest="cache", action="store_false", help="do not read or write the response cache")
    g.add_argument("--cache-path", help="SQLite response cache (default $HARNESS_CACHE_DIR or ~/.cache/harness)")
    g = p.add_argument_group("cost")
    g.add_argument(
        "--max-cost",
        type=float,
        help="budget in USD: a request whose worst case could pass it is not sent, the run stops "
        "(rerun with a higher budget to resume); not hashed",
    )
    g.add_argument("--price-table", help="price table YAML, USD per 1M tokens (default: harness/prices.yaml)")
    _retrieval_options(p)
    from harness.retrieval_eval import add_retrieve_read_options

    add_retrieve_read_options(p)


def _scoring_options(p, suppress: bool = True) -> None:
    g = p.add_argument_group("scoring")
    extra = {"default": argparse.SUPPRESS} if suppress else {}
    g.add_argument(
        "--metrics",
        help="comma-separated metrics (default: the dataset's): fanoutqa-string, em-f1, "
        "set-f1, quest, topiocqa, bleurt, llm-judge",
        **extra,
    )
    g.add_argument(
        "--judge",
        help="model for the LLM judge, e.g. openai/gpt-4o-2024-11-20 (FanOutQA's); no judge runs unless named",
        **extra,
    )
    g.add_argument(
        "--bleurt-checkpoint",
        help="BLEURT checkpoint directory (without it BLEURT is reported unavailable, never 0)",
        **extra,
    )


def _retrieval_options(p) -> None:
    g = p.add_argument_group("open-book and evidence-provided (defaults: FanOutQA's benchmark code)")
    g.add_argument("--snapshot", help="Wikipedia snapshot (SQLite) to read pages from (harness snapshot build)")
    g.add_argument("--search-style", choices=["fanoutqa", "paper-2024"], help="search tool replies (default fanoutqa)")
    g.add_argument("--chunk-size", type=int, help="characters per chunk (default 1024)")
    g.add_argument(
        "--ranking-query",
        choices=["question", "query"],
        help="rank a page's chunks by the question (default) or by the search query",
    )
    g.add_argument(
        "--budget-fraction", type=float, help="share of the context one search result may fill (default 0.5)"
    )
    g.add_argument("--max-similar", type=int, help="similar titles offered for an unknown title (default 10)")
    g.add_argument("--bm25-k1", type=float, help="BM25+ k1 (default 1.5)")
    g.add_argument("--bm25-b", type=float, help="BM25+ b (default 0.75)")
    g.add_argument("--bm25-delta", type=float, help="BM25+ delta (default 1)")
    g.add_argument("--max-rounds", type=int, help="model turns per sample in open-book (default 20)")
    g.add_argument(
        "--context-policy",
        choices=["stop", "drop-oldest"],
        help="when the conversation fills the context: stop the sample (default) or blank the oldest results",
    )
    g.add_argument(
        "--evidence-reserve", type=int, help="tokens kept free for the answer in evidence-provided (default 520)"
    )
    g.add_argument(
        "--repeat-question",
        action="store_true",
        default=argparse.SUPPRESS,
        help="repeat the question after each search result (paper appendix F.2)",
    )
    g.add_argument(
        "--loose-text-protocol",
        dest="text_protocol_strict",
        action="store_false",
        help="accept <search> anywhere in the reply, not only at its start",
    )


def _score_parser(sub) -> None:
    p = sub.add_parser(
        "score",
        help="score saved generations (no model call)",
        description=(
            "Score generations without calling any model. Either re-score a finished run "
            "(harness score RUN_DIR), or score a file in FanOutQA's official submission format, one "
            '{"id", "answer"} object per line (harness score --dataset fanoutqa:dev@nov23 --generations FILE.jsonl).'
        ),
    )
    p.add_argument(
        "run_dir",
        nargs="?",
        help="a run directory to re-score on its own dataset, with its own metrics and options unless given "
        "(rewrites its results.json scores)",
    )
    p.add_argument("--dataset", help="NAME[:SPLIT][@VERSION] the generations answer")
    p.add_argument(
        "--data-path",
        help="read the dataset from this file instead of the vendored copy; with RUN_DIR, where the run's "
        "--data-path file is now (its sha256 must match)",
    )
    p.add_argument("--generations", help='JSONL file of {"id", "answer"} lines')
    p.add_argument("--out", help="write the scores JSON here (default: print it)")
    _scoring_options(p, suppress=False)
    p.add_argument(
        "--only-answered",
        action="store_true",
        help="score only questions that have an answer (official only_score_answered); default counts them as 0",
    )


def _ceiling_parser(sub) -> None:
    p = sub.add_parser(
        "ceiling",
        help="answerability ceiling of evidence-provided at several context sizes (no model call)",
        description=(
            "For each context size, pack each question's evidence exactly as --setting evidence-provided would and "
            "measure, with FanOutQA's string accuracy, how much of the gold answer the packed documents contain."
        ),
        argument_default=argparse.SUPPRESS,
    )
    p.add_argument("--context-sizes", required=True, help="comma-separated sizes in tokens, e.g. 2048,4096,8192")
    p.add_argument("--setting", help="evidence-provided (the only one with a fixed packing)")
    p.add_argument("--dataset", help="NAME[:SPLIT][@VERSION] (default fanoutqa:dev)")
    p.add_argument("--data-path", help="read the dataset from this file")
    p.add_argument("--model", help="whose tokenizer counts the tokens (default local/smollm2)")
    p.add_argument("--limit", type=int, help="only the first N samples")
    p.add_argument("--sample-id", dest="sample_ids", help="comma-separated sample ids")
    p.add_argument("--current-date", help="'Current date' in the prompt")
    p.add_argument("--out", help="write the JSON result here (default: print the table only)")
    _retrieval_options(p)


class OneLineErrorParser(argparse.ArgumentParser):
    """Usage errors as one line and exit 2, like every other bad input (sub-parsers inherit it)."""

    def error(self, message: str):
        self.exit(EXIT_BAD_INPUT, f"error: {self.prog}: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineErrorParser(
        prog="harness",
        description="Evaluate LLMs and agents on many-answer, many-document QA over Wikipedia (FanOutQA, ...).",
    )
    parser.add_argument("--version", action="version", version=f"harness {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log retries and server activity")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    _run_parser(sub)
    _score_parser(sub)
    _ceiling_parser(sub)
    from wiki_snapshot.cli import add_snapshot_parser

    add_snapshot_parser(sub)
    for module in FEATURE_COMMANDS.values():
        importlib.import_module(module).add_parser(sub)
    _add_verbose(sub)  # `harness run -v` as well as `harness -v run`
    return parser


def _add_verbose(sub) -> None:
    for command in sub.choices.values():
        command.add_argument(
            "-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help="log retries and server activity"
        )
        for action in command._actions:
            if isinstance(action, argparse._SubParsersAction):
                _add_verbose(action)


# commands -------------------------------------------------------------------------
def cmd_run(args: argparse.Namespace) -> int:
    from harness.config import build_config, load_yaml
    from harness.runner import Run

    given = {k: v for k, v in vars(args).items() if k not in ("command", "verbose", "config")}
    flat: dict[str, Any] = load_yaml(args.config) if getattr(args, "config", None) else {}
    flat = {k.replace("-", "_"): v for k, v in flat.items()}
    flat.update(given)
    config = build_config(flat)

    async def main() -> dict[str, Any]:
        task = asyncio.current_task()
        loop = asyncio.get_running_loop()
        # A kill (SIGTERM) unwinds like Ctrl-C: servers stopped, results.json written.
        loop.add_signal_handler(signal.SIGTERM, task.cancel)
        return await Run(config).execute()

    try:
        results = asyncio.run(main())
    except (KeyboardInterrupt, asyncio.CancelledError):
        print("interrupted: run the same command again to resume", file=sys.stderr)
        return 130
    _print_summary(results)
    return 0 if results["counts"]["failed"] == 0 else 1


def _print_summary(results: dict[str, Any], file=None) -> None:
    """Counts, then one line per metric with its aggregate numbers (every metric the run scored)."""
    from harness.scoring.results import summary_lines

    file = file or sys.stdout
    c = results["counts"]
    print(f"finished {c['finished']}/{c['selected']}, failed {c['failed']}", file=file)
    for line in summary_lines(results.get("scores")):
        print(f"  {line}", file=file)
    cost = results.get("cost") or {}
    if cost.get("spent_usd"):
        print(f"cost: ${cost['spent_usd']:.6f} spent (list price of the finished samples ${cost['model_usd']:.6f})")
    if results.get("stopped_on_budget"):
        print(
            f"stopped on budget: ${cost['spent_usd']:.6f} spent of --max-cost ${cost['max_cost_usd']:g}; "
            f"{c['pending']} sample(s) not started; rerun with a higher --max-cost to resume",
            file=sys.stderr,
        )
    elif c["failed"]:
        first = next(iter(results.get("failures", {}).values()), {})
        print(
            f"{c['failed']} sample(s) failed (e.g. {first.get('type')}: {first.get('error')}); "
            "see failures.jsonl; rerun the same command to retry them",
            file=sys.stderr,
        )


def cmd_score(args: argparse.Namespace) -> int:
    from harness.datasets import load_dataset
    from harness.records import iter_jsonl, write_json_atomic
    from harness.scoring.metrics import ScoringOptions, score_answers

    metrics = [m for m in args.metrics.split(",") if m] if args.metrics else None
    given = {"judge": args.judge, "bleurt_checkpoint": args.bleurt_checkpoint}
    given = {k: v for k, v in given.items() if v is not None}
    if args.run_dir:
        if args.generations or args.dataset:
            raise HarnessError("a run is re-scored on its own dataset: give RUN_DIR, or --dataset and --generations")
        from harness.scoring.run_scoring import rescore_run

        scores, saved = rescore_run(args.run_dir, metrics, given, args.only_answered, args.data_path)
        if not saved:
            print(f"warning: {args.run_dir} has no results.json: scores printed, not saved", file=sys.stderr)
    else:
        if not args.dataset or not args.generations:
            raise HarnessError("score needs a RUN_DIR, or --dataset and --generations")
        dataset = load_dataset(args.dataset, args.data_path)
        answers = []
        seen: set[str] = set()
        for lineno, record in iter_jsonl(args.generations):
            if not isinstance(record.get("id"), str) or "answer" not in record:
                raise HarnessError(f"{args.generations}:{lineno}: each line needs 'id' (string) and 'answer'")
            if record["id"] in seen:
                raise HarnessError(f"{args.generations}:{lineno}: duplicate id {record['id']!r}")
            seen.add(record["id"])
            answers.append({"id": record["id"], "answer": record["answer"]})
        known = dataset.by_id()
        unknown = [a["id"] for a in answers if a["id"] not in known]
        if unknown:
            print(
                f"warning: {len(unknown)} id(s) not in {dataset.info.spec()} ignored (e.g. {unknown[0]})",
                file=sys.stderr,
            )
        options = ScoringOptions(**given)
        scores = score_answers(dataset, dataset.samples, answers, metrics, args.only_answered, options)
    if args.out:
        write_json_atomic(args.out, scores)
        print(f"wrote {args.out}", file=sys.stderr)
    else:
        print(json.dumps(scores, indent=2))
    summary = {
        "counts": {"finished": scores["meta"]["n_answered"], "selected": scores["meta"]["n_questions"], "failed": 0},
        "scores": scores,
    }
    _print_summary(summary, file=sys.stdout if args.out else sys.stderr)  # stdout stays JSON when it is JSON
    return 0


def cmd_ceiling(args: argparse.Namespace) -> int:
    from harness.ceiling import compute_ceiling, format_table
    from harness.config import build_config
    from harness.records import write_json_atomic

    flat = {k: v for k, v in vars(args).items() if k not in ("command", "verbose", "context_sizes", "out")}
    flat.setdefault("setting", "evidence-provided")
    from harness.ablate import parse_sizes

    sizes = parse_sizes(args.context_sizes)
    config = build_config(flat)
    result = asyncio.run(compute_ceiling(config, sizes))
    result["config"] = config.model_dump(mode="json")
    if getattr(args, "out", None):
        write_json_atomic(args.out, result)
        print(f"wrote {args.out}", file=sys.stderr)
    print(format_table(result))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    from harness.redact import install_log_filter, redact

    install_log_filter()
    if not args.command:
        parser.print_help()
        return EXIT_BAD_INPUT
    from wiki_snapshot.cli import cmd_snapshot

    handlers = {"run": cmd_run, "score": cmd_score, "ceiling": cmd_ceiling, "snapshot": cmd_snapshot}
    for name, module in FEATURE_COMMANDS.items():
        handlers[name] = importlib.import_module(module).command
    try:
        _check_common_paths(args)
        return handlers[args.command](args)
    except HarnessError as exc:
        print(f"error: {_one_line(redact(exc))}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - last resort: one line, traceback only on request
        if os.environ.get("HARNESS_DEBUG"):
            raise
        print(
            f"internal error: {type(exc).__name__}: {_one_line(redact(exc))} (set HARNESS_DEBUG=1 for the traceback)",
            file=sys.stderr,
        )
        return 1


# commands whose --out is a folder; every other --out is a file
OUT_IS_FOLDER = {"run", "ablate", "export"}


def _check_common_paths(args: argparse.Namespace) -> None:
    """Paths every command treats alike, checked before any work so a bad one costs nothing."""
    from harness.records import check_output_path

    if getattr(args, "out", None):
        check_output_path(args.out, "--out", directory=args.command in OUT_IS_FOLDER)
    checkpoint = getattr(args, "bleurt_checkpoint", None)
    if checkpoint and not Path(checkpoint).is_dir():
        what = "is a file" if Path(checkpoint).exists() else "not found"
        raise HarnessError(f"--bleurt-checkpoint {checkpoint}: {what}, expected a checkpoint folder")


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


if __name__ == "__main__":
    raise SystemExit(main())
