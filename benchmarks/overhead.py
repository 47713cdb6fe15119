"""Harness overhead on an instant local OpenAI-protocol server: the request loop against the bare
HTTP clients' floors, whole closed-book runs, and Inspect AI where it is installed.

    python benchmarks/overhead.py --floors [--connections 4,64] [--requests 20000] [--inspect]
    python benchmarks/overhead.py --memory [--samples 10000,50000,100000]
    python benchmarks/overhead.py [--copies 4] [--repeats 3] [--max-connections 10] [--limit N] [--inspect]

``--floors`` (issue 25): an instant server (``tests/fault_server.py``'s ``serve_instant``: asyncio,
one canned chat completion, keep-alive; its own process) answers, at each of ``--connections``:

- bare httpx / bare aiohttp: ``--requests`` POSTs of one chat request body, that many in flight, each
  reply parsed as JSON: the floor of each client library;
- request loop: ``ModelBackend.generate`` of the openai/ backend on each ``--http-client`` (SDK,
  byte cap, deadline, reply checks, retry wrapper), the same requests in flight;
- end to end: ``harness run`` closed-book (FanOutQA dev repeated to ``--samples``), response cache
  on (fresh), ``--max-connections`` as given: generated, written, cached, scored; samples/s over
  the whole command, and its peak RSS;
- Inspect AI end to end (with ``--inspect``, or where ``benchmarks/.venv-inspect`` exists): ``inspect
  eval`` of the same questions (the same closed-book prompt), the same server and connections (below),
  printed beside the harness's run.

Each loop runs in a child process and is timed from after its first request (imports, the client,
the backend's start are not the loop's); the end-to-end runs are child processes timed with
``os.wait4`` (wall, CPU, peak RSS). The table puts each figure beside the bare aiohttp floor
measured in the same invocation. Goals (issue 25, 2-core machine): >= 1,000 closed-book samples/s
end to end at 64 connections, the request loop >= half the bare aiohttp floor, memory flat to
100,000 samples.

``--memory``: ``harness run`` closed-book at each of ``--samples`` (the largest of ``--connections``),
its RSS read when its dataset is loaded and at each progress line (every 10 %), its peak polled
(VmHWM) and from ``wait4`` (with its scoring worker); what the dataset alone adds to a fresh process
is measured apart, and the peak's growth per sample between sizes is split into the dataset's and
the run's own.

The older comparison with Inspect AI (below) runs only with ``--inspect`` or where
``benchmarks/.venv-inspect`` exists.

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
import threading
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


def start_server(answer: str, instant: bool = False) -> tuple[subprocess.Popen, str]:
    cmd = [sys.executable, __file__, "--_instant"] if instant else [sys.executable, __file__, "--_serve", answer]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    return proc, proc.stdout.readline().strip()

# ---- issue 25: the client floors, the request loop, memory --------------------------------------
def instant_server() -> None:
    """``tests/fault_server.py``'s instant server (asyncio, one canned completion, keep-alive)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from fault_server import serve_instant

    serve_instant()


def chat_body(model: str) -> dict:
    """The chat request the harness sends for the first dev question, closed-book."""
    from harness.templates import load_template

    row = json.loads(DEV_FILE.read_text(encoding="utf-8"))[0]
    prompt = load_template("closed_book")[0].format(question=row["question"], current_date=CURRENT_DATE)
    messages = [{"role": "user", "content": prompt}]
    return {"model": model, "messages": messages, "temperature": 0.0, "top_p": 1.0, "max_tokens": 512, "seed": 0}


async def _loop(which: str, url: str, conns: int, n: int, body: dict) -> dict:
    """``n`` requests, ``conns`` in flight, by ``which``: httpx, aiohttp, harness-httpx,
    harness-aiohttp; {"wall", "cpu"} of the loop alone. For each, one request first, untimed: the
    imports, the client and the first connection are not the loop's time (for the harness, the
    backend's start too: its reachability check and the server's context size)."""
    import asyncio

    left = n

    async def worker(call) -> None:
        nonlocal left
        while left > 0:
            left -= 1
            await call()

    async def timed(call) -> dict:
        nonlocal left
        await call()
        left -= 1
        t, c = time.perf_counter(), time.process_time()
        await asyncio.gather(*(worker(call) for _ in range(conns)))
        return {"wall": time.perf_counter() - t, "cpu": time.process_time() - c}

    data, headers = json.dumps(body).encode(), {"content-type": "application/json", "authorization": "Bearer x"}
    if which == "httpx":
        import httpx

        async with httpx.AsyncClient(limits=httpx.Limits(max_connections=conns)) as client:

            async def call():
                json.loads((await client.post(url + "/chat/completions", content=data, headers=headers)).content)

            return await timed(call)
    elif which == "aiohttp":
        import aiohttp

        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=conns)) as session:

            async def call():
                async with session.post(url + "/chat/completions", data=data, headers=headers) as r:
                    json.loads(await r.read())

            return await timed(call)
    else:
        from harness.models import BackendOptions, GenerationParams, create_backend

        backend = create_backend("openai/bench", BackendOptions(base_url=url, http_client=which.split("-")[1]))
        await backend.start()
        params = GenerationParams(temperature=0.0, top_p=1.0, max_tokens=512, seed=0)

        async def call():
            await backend.generate(body["messages"], params)

        try:
            return await timed(call)
        finally:
            await backend.close()


def floor_child(which: str, url: str, conns: int, n: int, model: str) -> None:
    import asyncio

    print(json.dumps(asyncio.run(_loop(which, url, conns, n, chat_body(model)))))


def floors(args, env: dict[str, str], work: Path) -> None:
    conns_list = [int(c) for c in args.connections.split(",")]
    samples_list = [int(s) for s in args.samples.split(",")]
    server, url = start_server("", instant=True)
    kinds = ["httpx", "aiohttp", "harness-httpx", "harness-aiohttp"]
    rows: dict[tuple[str, int], dict] = {}
    try:
        for conns in conns_list:
            for rep in range(args.repeats):
                for which in kinds if rep % 2 == 0 else kinds[::-1]:
                    cmd = [sys.executable, __file__, "--_floor", which, url, str(conns), str(args.requests)]
                    proc = subprocess.run(cmd + [args.model_name], env=env, capture_output=True, text=True)
                    if proc.returncode:
                        sys.exit(f"{which} at {conns}: {proc.stderr[-2000:]}")
                    r = json.loads(proc.stdout.strip().splitlines()[-1])
                    best = rows.get((which, conns))
                    if best is None or r["wall"] < best["wall"]:
                        rows[(which, conns)] = r
                    print(f"  {which:<16} {conns:>3} conns: {args.requests / r['wall']:8.0f} req/s", file=sys.stderr)
        ends: dict[tuple[int, int], dict] = {}
        inspects: dict[tuple[int, int], dict] = {}
        with_inspect = args.inspect or (INSPECT_VENV / "bin" / "inspect").exists()
        if with_inspect:
            inspect_bin()
            task = work / "inspect_task.py"
            task.write_text(INSPECT_TASK)
        for n in samples_list:
            data = dev_copies(work, n)
            for conns in conns_list:
                out = work / f"e2e-{n}-{conns}"
                cmd = [sys.executable, "-m", "harness", "run", "--model", f"openai/{args.model_name}", "--base-url", url]
                cmd += ["--dataset", "fanoutqa:dev", "--data-path", str(data), "--setting", "closed-book"]
                cmd += ["--max-connections", str(conns), "--out", str(out), "--http-client", args.e2e_client]
                cache_env = {**env, "HARNESS_CACHE_DIR": str(work / f"cache-{n}-{conns}")}
                ends[(n, conns)] = r = timed(cmd, work, cache_env, work / f"e2e-{n}-{conns}.log")
                check_harness(out, n)
                print(f"  end to end {n:>7,} samples {conns:>3} conns: {n / r['wall']:8.0f} samples/s", file=sys.stderr)
                if with_inspect:  # the same samples, server and connections, through Inspect AI
                    logs = work / f"inspect-{n}-{conns}"
                    cmd = inspect_cmd(args, url, inspect_jsonl(work, data), task, logs, None, conns)
                    inspects[(n, conns)] = r = timed(cmd, work, env, work / f"inspect-{n}-{conns}.log")
                    check_inspect(logs, n)
                    print(f"  Inspect AI {n:>7,} samples {conns:>3} conns: {n / r['wall']:8.0f} samples/s", file=sys.stderr)
    finally:
        server.stdin.close()
        server.wait(timeout=10)

    print(f"\ninstant loopback server; {args.requests:,} requests per loop, best of {args.repeats}; {os.cpu_count()} CPUs\n")
    names = {
        "httpx": "bare httpx",
        "aiohttp": "bare aiohttp",
        "harness-httpx": "harness loop, httpx",
        "harness-aiohttp": "harness loop, aiohttp",
    }
    print(f"{'':<24} | {'conns':>5} | {'req/s':>8} | {'CPU ms/req':>10} | {'vs bare aiohttp':>15}")
    for conns in conns_list:
        ref = args.requests / rows[("aiohttp", conns)]["wall"]
        for which in kinds:
            r = rows[(which, conns)]
            rps = args.requests / r["wall"]
            print(f"{names[which]:<24} | {conns:>5} | {rps:8.0f} | {1000 * r['cpu'] / args.requests:10.3f} | {rps / ref:15.2f}")
    print(f"\n{'end to end (closed-book)':<24} | {'conns':>5} | {'samples':>8} | {'samples/s':>10} | {'CPU s':>7} | {'peak RSS MB':>11}")
    for (n, conns), r in ends.items():
        print(f"{'harness run, ' + args.e2e_client:<24} | {conns:>5} | {n:8,} | {n / r['wall']:10.0f} | {r['cpu']:7.1f} | {r['rss_mb']:11.0f}")
        if (n, conns) in inspects:
            r = inspects[(n, conns)]
            print(f"{'Inspect AI ' + INSPECT_VERSION:<24} | {conns:>5} | {n:8,} | {n / r['wall']:10.0f} | {r['cpu']:7.1f} | {r['rss_mb']:11.0f}")
    loop64 = max(conns_list)
    ratio = rows[("harness-aiohttp", loop64)]["wall"] and (
        rows[("aiohttp", loop64)]["wall"] / rows[("harness-aiohttp", loop64)]["wall"]
    )
    print(f"\ngoal: request loop >= 0.5 x bare aiohttp at {loop64} connections: {ratio:.2f} {'PASS' if ratio >= 0.5 else 'FAIL'}")
    big = [(n, c) for (n, c) in ends if c == loop64]
    if big:
        n, c = big[0]
        rate = n / ends[(n, c)]["wall"]
        print(f"goal: >= 1,000 closed-book samples/s at {c} connections: {rate:.0f} {'PASS' if rate >= 1000 else 'FAIL'}")
    if len(samples_list) > 1:
        rss = [ends[(n, loop64)]["rss_mb"] for n in samples_list]
        print(f"peak RSS at {', '.join(f'{n:,}' for n in samples_list)} samples: {', '.join(f'{m:.0f}' for m in rss)} MB")


def dev_copies(work: Path, n: int) -> Path:
    """FanOutQA dev repeated to ``n`` questions (ids ``ID~k`` for k > 0)."""
    data = work / f"fanoutqa-dev-{n}.json"
    if not data.exists():
        rows = json.loads(DEV_FILE.read_text(encoding="utf-8"))
        copies = -(-n // len(rows))
        dup = [{**r, "id": r["id"] if k == 0 else f"{r['id']}~{k}"} for k in range(copies) for r in rows][:n]
        data.write_text(json.dumps(dup), encoding="utf-8")
    return data


def rss_mb(pid: int, field: str = "VmRSS") -> float:
    """A live process's resident memory (``VmRSS``) or its peak so far (``VmHWM``), MB."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def dataset_mb(data: Path, env: dict[str, str]) -> float:
    """RSS the loaded dataset adds to a fresh process (what any run of it holds), MB."""
    code = (
        "import sys; from harness.datasets import load_dataset\n"
        "def rss():\n    return int(open('/proc/self/statm').read().split()[1]) * 4096 / 2**20\n"
        "before = rss(); d = load_dataset('fanoutqa:dev', sys.argv[1]); print(rss() - before)"
    )
    out = subprocess.run([sys.executable, "-c", code, str(data)], env=env, capture_output=True, text=True, check=True)
    return float(out.stdout.strip())


def memory(args, env: dict[str, str], work: Path) -> None:
    """``harness run`` closed-book at each of ``--samples``: the run's RSS when its dataset is loaded
    (the "run ..." line), at each progress line (every 10%), and its peak; the dataset's own share
    measured apart."""
    import re

    samples_list = [int(s) for s in args.samples.split(",")]
    conns = max(int(c) for c in args.connections.split(","))
    server, url = start_server("", instant=True)
    rows = []
    try:
        for n in samples_list:
            data = dev_copies(work, n)
            out = work / f"mem-{n}"
            cmd = [sys.executable, "-m", "harness", "run", "--model", f"openai/{args.model_name}", "--base-url", url]
            cmd += ["--dataset", "fanoutqa:dev", "--data-path", str(data), "--setting", "closed-book"]
            cmd += ["--max-connections", str(conns), "--out", str(out), "--http-client", args.e2e_client]
            run_env = {**env, "HARNESS_CACHE_DIR": str(work / f"mem-cache-{n}")}
            t = time.perf_counter()
            proc = subprocess.Popen(cmd, cwd=work, env=run_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            loaded, marks, hwm, ended = float("nan"), {}, [0.0], threading.Event()

            def watch(pid: int = proc.pid) -> None:  # the run process's own peak (VmHWM) until it is reaped
                while not ended.wait(0.02):
                    peak = rss_mb(pid, "VmHWM")  # nan once it has exited
                    hwm[0] = peak if peak > hwm[0] else hwm[0]

            threading.Thread(target=watch, daemon=True).start()
            with open(work / f"mem-{n}.log", "w") as log:
                for line in proc.stderr:
                    log.write(line)
                    if line.startswith("run "):
                        loaded = rss_mb(proc.pid)
                    elif m := re.match(r"progress: (\d+)/(\d+) samples done", line):
                        marks[int(m.group(1))] = rss_mb(proc.pid)
            _, status, ru = os.wait4(proc.pid, 0)
            ended.set()
            if os.waitstatus_to_exitcode(status):
                sys.exit(f"harness run of {n} samples failed; see {work / f'mem-{n}.log'}")
            check_harness(out, n)
            rows.append((n, dataset_mb(data, env), loaded, marks, hwm[0], ru.ru_maxrss / 1024))
            print(f"  memory {n:>7,} samples: peak {hwm[0]:.0f} MB ({time.perf_counter() - t:.0f} s)", file=sys.stderr)
    finally:
        server.stdin.close()
        server.wait(timeout=10)
    print(f"\nmemory of `harness run` closed-book, {conns} connections, instant server; RSS in MB ({os.cpu_count()} CPUs)\n")
    print(f"{'samples':>8} | {'dataset':>7} | {'loaded':>7} | {'10%':>7} | {'50%':>7} | {'100%':>7} | {'peak':>7} | {'peak, worker too':>16}")
    for n, ds, loaded, marks, peak, peak_all in rows:
        done = sorted(marks)
        at = lambda share: marks[min(done, key=lambda d: abs(d - share * n))] if done else float("nan")  # noqa: E731
        print(f"{n:>8,} | {ds:7.0f} | {loaded:7.0f} | {at(0.1):7.0f} | {at(0.5):7.0f} | {at(1.0):7.0f} | {peak:7.0f} | {peak_all:16.0f}")
    for (n1, ds1, *_, p1, _), (n2, ds2, *_, p2, _) in zip(rows, rows[1:]):
        per, ds = (p2 - p1) * 1024 / (n2 - n1), (ds2 - ds1) * 1024 / (n2 - n1)
        print(f"from {n1:,} to {n2:,} samples: peak +{per:.1f} KB a sample, of which the dataset's rows {ds:.1f} KB, the run's own {per - ds:.1f} KB")
    print("\ndataset: what loading the data file adds to a fresh process (FanOutQA dev rows repeated, as Samples: each"
          "\nrow's parsed fields as Python objects, its own record packed, Sample.raw; the copies differ only in their id);"
          "\nloaded: the run's RSS once its dataset is loaded and its backend started; 10%..100%: at its progress lines;"
          "\npeak: the run process's own (VmHWM, polled); peak, worker too: wait4's, the larger of the run and its scoring worker.")


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
def inspect_jsonl(work: Path, data: Path) -> Path:
    """Inspect's JSONL of a FanOutQA file's questions: each prompt the harness's closed-book one."""
    from harness.scoring import str_answer
    from harness.templates import load_template

    out = work / f"{data.stem}-inspect.jsonl"
    if not out.exists():
        template = load_template("closed_book")[0]
        with open(out, "w", encoding="utf-8") as f:
            for r in json.loads(data.read_text(encoding="utf-8")):
                prompt = template.format(question=r["question"], current_date=CURRENT_DATE)
                f.write(json.dumps({"id": r["id"], "input": prompt, "target": str_answer(r["answer"])}) + "\n")
    return out


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


def inspect_cmd(
    args, url: str, data: Path, task: Path, logs: Path, limit: int | None, connections: int | None = None
) -> list[str]:
    conns = str(connections or args.max_connections)
    cmd = [str(inspect_bin()), "eval", task.name, "-T", f"data={data}", "--model", f"openai/{args.model_name}"]
    # chat completions, as the harness sends (Inspect takes unknown model names for frontier ones: Responses API)
    cmd += ["--model-base-url", url, "-M", "responses_api=false", "--max-connections", conns]
    cmd += ["--max-samples", conns, "--temperature", "0", "--top-p", "1", "--max-tokens", "512"]
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
    ap.add_argument("--floors", action="store_true", help="issue 25: client floors, request loop, end to end")
    ap.add_argument("--memory", action="store_true", help="issue 25: a run's RSS at its progress lines, per --samples")
    ap.add_argument("--connections", default="4,64", help="--floors: connections in flight, comma-separated")
    ap.add_argument("--requests", type=int, default=20000, help="--floors: requests per loop")
    ap.add_argument("--samples", default="10000", help="--floors: end-to-end samples, comma-separated (e.g. 10000,100000)")
    ap.add_argument("--e2e-client", default="auto", help="--floors: --http-client of the end-to-end runs")
    ap.add_argument("--inspect", action="store_true", help="compare with Inspect AI (its venv made on first use)")
    ap.add_argument("--_serve", help=argparse.SUPPRESS)
    ap.add_argument("--_instant", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--_floor", help=argparse.SUPPRESS)
    args, rest = ap.parse_known_args()
    if args._serve:
        return serve(args._serve)
    if args._instant:
        return instant_server()
    if args._floor:
        url, conns, n, model = rest
        return floor_child(args._floor, url, int(conns), int(n), model)
    # a dummy key: nothing real reaches the local server; PYTHONPATH: this checkout's harness first
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "INSPECT_"))}
    env.update(OPENAI_API_KEY="bench-dummy", PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    if args.floors or args.memory:
        work = Path(tempfile.mkdtemp(prefix="harness-floors-"))
        try:
            return (memory if args.memory else floors)(args, env, work)
        finally:
            if not args.keep:
                import shutil

                shutil.rmtree(work, ignore_errors=True)
    if not (args.inspect or (INSPECT_VENV / "bin" / "inspect").exists()):
        sys.exit("Inspect AI is not installed (benchmarks/.venv-inspect); --inspect makes it, --floors runs without it")
    inspect_bin()
    work = Path(tempfile.mkdtemp(prefix="harness-overhead-"))
    task = work / "inspect_task.py"
    task.write_text(INSPECT_TASK)
    harness_data, inspect_data, n = write_data(work, args.copies, args.limit)
    env["HARNESS_CACHE_DIR"] = str(work / "cache")

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
