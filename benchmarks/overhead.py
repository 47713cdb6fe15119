"""Harness overhead vs Inspect AI on an instant local OpenAI-protocol server.

    python benchmarks/overhead.py [--copies 4] [--repeats 3] [--max-connections 10] [--limit N]

Both evaluate the same samples: FanOutQA dev (closed book, the vendored nov23 file) repeated
``--copies`` times with unique ids (4 x 310 = 1,240 requests), each prompt the harness's
``prompts/closed_book.txt`` filled the same way (question, current date 11-20-2023), one user
message, greedy, max_tokens 512, seed 0, ``--max-connections`` samples and connections in flight.
The server (``tests/fault_server.py`` in its own process) answers every request at once with the
same short answer.

- harness: ``harness run --model openai/NAME --base-url URL --no-cache --data-path FILE``, the
  whole command: startup, requests, per-sample records, official FanOutQA scoring, results.json.
- Inspect AI 0.3.285 (its own venv, ``benchmarks/.venv-inspect``, made on first use): ``inspect eval``
  of a one-``generate()`` task with the ``includes()`` scorer, ``--model openai/NAME
  --model-base-url URL -M responses_api=false`` (chat completions, as the harness),
  ``--max-connections N --max-samples N``, ``--display none``.

Each is a child process of this script, timed with ``os.wait4``: wall clock, CPU (user+sys, the
child and its reaped children) and peak RSS (the largest process). One small untimed warm-up run
of each, then ``--repeats`` timed runs alternating which goes first.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

INSPECT_VERSION = "0.3.285"
INSPECT_VENV = ROOT / "benchmarks" / ".venv-inspect"
DEV_FILE = ROOT / "harness" / "datasets" / "data" / "fanoutqa" / "nov23" / "fanout-final-dev.json"
CURRENT_DATE = "11-20-2023"  # the harness default (--current-date)
GOAL_RATIO = 0.35

INSPECT_TASK = """
from inspect_ai import Task, task
from inspect_ai.dataset import json_dataset
from inspect_ai.scorer import includes
from inspect_ai.solver import generate


@task
def fanoutqa_closed_book(data: str):
    return Task(dataset=json_dataset(data), solver=generate(), scorer=includes())
"""


# ---- the instant server (a child process) ---------------------------------------------------------
def serve(answer: str) -> None:
    sys.path.insert(0, str(ROOT / "tests"))
    from fault_server import FaultServer

    with FaultServer(answer=answer) as server:
        print(server.url, flush=True)
        sys.stdin.read()  # until the parent closes our stdin


def start_server(answer: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, __file__, "--_serve", answer], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    return proc, proc.stdout.readline().strip()


# ---- Inspect's venv ----------------------------------------------------------------------------
def inspect_bin() -> Path:
    exe = INSPECT_VENV / "bin" / "inspect"
    if exe.exists():
        return exe
    print(f"creating {INSPECT_VENV} (inspect-ai=={INSPECT_VERSION}) ...", file=sys.stderr)
    venv.create(INSPECT_VENV, with_pip=True)
    pip = [str(INSPECT_VENV / "bin" / "python"), "-m", "pip", "install", "-q"]
    proc = subprocess.run(
        [*pip, f"inspect-ai=={INSPECT_VERSION}", "openai"], check=False, capture_output=True, text=True
    )
    if proc.returncode:
        sys.exit(f"pip install inspect-ai failed:\n{proc.stderr[-3000:]}")
    return exe


# ---- the samples ---------------------------------------------------------------------------------
def write_data(work: Path, copies: int, limit: int | None) -> tuple[Path, Path, int]:
    """The dev set ``copies`` times (ids ``ID~k`` for k > 0): the harness's FanOutQA file and
    Inspect's JSONL of the same prompts."""
    from harness.scoring import str_answer
    from harness.templates import load_template

    template = load_template("closed_book")[0]
    rows = json.loads(DEV_FILE.read_text(encoding="utf-8"))[:limit]
    dup = [{**r, "id": r["id"] if k == 0 else f"{r['id']}~{k}"} for k in range(copies) for r in rows]
    harness_file, inspect_file = work / "fanoutqa-dev-x.json", work / "inspect.jsonl"
    harness_file.write_text(json.dumps(dup), encoding="utf-8")
    with open(inspect_file, "w", encoding="utf-8") as f:
        for r in dup:
            prompt = template.format(question=r["question"], current_date=CURRENT_DATE)
            f.write(json.dumps({"id": r["id"], "input": prompt, "target": str_answer(r["answer"])}) + "\n")
    return harness_file, inspect_file, len(dup)


# ---- one timed child ----------------------------------------------------------------------------
def timed(cmd: list[str], cwd: Path, env: dict[str, str], log: Path) -> dict:
    with open(log, "w") as out:
        t = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
        _, status, ru = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        sys.exit(f"{cmd[0]} ... exited {proc.returncode}; see {log}:\n{log.read_text()[-3000:]}")
    return {"wall": wall, "cpu": ru.ru_utime + ru.ru_stime, "rss_mb": ru.ru_maxrss / 1024}


def harness_cmd(args, url: str, data: Path, out: Path, limit: int | None) -> list[str]:
    cmd = [sys.executable, "-m", "harness", "run", "--model", f"openai/{args.model_name}", "--base-url", url]
    cmd += ["--dataset", "fanoutqa:dev", "--data-path", str(data), "--setting", "closed-book", "--no-cache"]
    cmd += ["--max-connections", str(args.max_connections), "--out", str(out)]
    return cmd + (["--limit", str(limit)] if limit else [])


def inspect_cmd(args, url: str, data: Path, task: Path, logs: Path, limit: int | None) -> list[str]:
    cmd = [str(inspect_bin()), "eval", task.name, "-T", f"data={data}", "--model", f"openai/{args.model_name}"]
    # chat completions, as the harness sends (Inspect takes unknown model names for frontier ones: Responses API)
    cmd += ["--model-base-url", url, "-M", "responses_api=false", "--max-connections", str(args.max_connections)]
    cmd += ["--max-samples", str(args.max_connections), "--temperature", "0", "--top-p", "1", "--max-tokens", "512"]
    cmd += ["--seed", "0", "--display", "none", "--log-dir", str(logs)]
    return cmd + (["--limit", str(limit)] if limit else [])


def check_harness(out: Path, n: int) -> None:
    results = json.loads((out / "results.json").read_text())
    if results["counts"]["finished"] != n:
        sys.exit(f"harness finished {results['counts']['finished']} of {n} samples; see {out}")


def check_inspect(logs: Path, n: int) -> None:
    py = INSPECT_VENV / "bin" / "python"
    code = (
        "import sys; from inspect_ai.log import list_eval_logs, read_eval_log\n"
        "log = read_eval_log(list_eval_logs(sys.argv[1])[0], header_only=True)\n"
        "print(log.status, log.results.completed_samples if log.results else 0)"
    )
    status, done = subprocess.run(
        [py, "-c", code, str(logs)], check=False, capture_output=True, text=True
    ).stdout.split()
    if status != "success" or int(done) != n:
        sys.exit(f"Inspect: status {status}, {done} of {n} samples; see {logs}")


def summary(runs: list[dict], n: int) -> dict:
    walls = [r["wall"] for r in runs]
    return {
        "min": min(walls),
        "median": statistics.median(walls),
        "rps": n / statistics.median(walls),
        "cpu": statistics.median(r["cpu"] for r in runs),
        "rss": max(r["rss_mb"] for r in runs),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--copies", type=int, default=4, help="times the dev set is repeated (4: 1,240 samples)")
    ap.add_argument("--limit", type=int, help="first N dev questions only (before copying), for quick checks")
    ap.add_argument("--repeats", type=int, default=3, help="timed runs of each (>= 3 for the reported figures)")
    ap.add_argument("--max-connections", type=int, default=10, help="samples/connections in flight, both")
    ap.add_argument("--model-name", default="gpt-4o-mini", help="model name sent to the server")
    ap.add_argument("--answer", default="Paris", help="the server's fixed answer")
    ap.add_argument("--warmup", type=int, default=20, help="samples in the untimed warm-up run of each (0: none)")
    ap.add_argument("--keep", action="store_true", help="keep the work folder (run dirs, Inspect logs)")
    ap.add_argument("--_serve", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args._serve:
        return serve(args._serve)

    inspect_bin()
    work = Path(tempfile.mkdtemp(prefix="harness-overhead-"))
    task = work / "inspect_task.py"
    task.write_text(INSPECT_TASK)
    harness_data, inspect_data, n = write_data(work, args.copies, args.limit)
    # a dummy key: nothing real reaches the local server; PYTHONPATH: this checkout's harness
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "INSPECT_"))}
    env.update(OPENAI_API_KEY="bench-dummy", PYTHONPATH=str(ROOT), HARNESS_CACHE_DIR=str(work / "cache"))

    server, url = start_server(args.answer)
    runs: dict[str, list[dict]] = {"harness": [], "inspect": []}
    try:

        def run_one(which: str, tag: str, limit: int | None = None) -> dict:
            if which == "harness":
                out = work / f"harness-{tag}"
                r = timed(harness_cmd(args, url, harness_data, out, limit), work, env, work / f"{which}-{tag}.log")
                check_harness(out, limit or n)
            else:
                logs = work / f"inspect-{tag}"
                r = timed(
                    inspect_cmd(args, url, inspect_data, task, logs, limit), work, env, work / f"{which}-{tag}.log"
                )
                check_inspect(logs, limit or n)
            return r

        if args.warmup:
            for which in runs:
                run_one(which, "warmup", min(args.warmup, n))
        for rep in range(args.repeats):
            order = ("harness", "inspect") if rep % 2 == 0 else ("inspect", "harness")
            for which in order:
                r = run_one(which, f"rep{rep}")
                runs[which].append(r)
                print(
                    f"  rep {rep} {which:<8} wall {r['wall']:7.2f} s  cpu {r['cpu']:7.2f} s  rss {r['rss_mb']:6.0f} MB",
                    file=sys.stderr,
                )
    finally:
        server.stdin.close()
        server.wait(timeout=10)

    h, i = summary(runs["harness"], n), summary(runs["inspect"], n)
    print(
        f"\n{n:,} samples (FanOutQA dev closed-book x{args.copies}{f', first {args.limit}' if args.limit else ''}), "
        f"max-connections {args.max_connections}, instant server, {args.repeats} runs each\n"
    )
    print(
        f"{'':<22} | {'wall min s':>10} | {'wall med s':>10} | {'req/s (med)':>11} | {'CPU s (med)':>11} | {'peak RSS MB':>11}"
    )
    for name, s in (("harness", h), (f"Inspect AI {INSPECT_VERSION}", i)):
        print(
            f"{name:<22} | {s['min']:10.2f} | {s['median']:10.2f} | {s['rps']:11.0f} | {s['cpu']:11.2f} | {s['rss']:11.0f}"
        )
    ratio = h["median"] / i["median"]
    verdict = "PASS" if ratio <= GOAL_RATIO else "FAIL"
    scale = "" if n == 1240 else f" (measured at {n:,} samples, not 1,240)"
    print(f"\ngoal: harness/Inspect wall <= {GOAL_RATIO} at 1,240 samples: {ratio:.3f} (median walls){scale} {verdict}")
    print(f"      min walls: {h['min'] / i['min']:.3f}; CPU: {h['cpu'] / i['cpu']:.3f}")
    if args.keep:
        print(f"work folder: {work}")
    else:
        import shutil

        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
