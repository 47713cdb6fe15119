"""Memory of a run whose every reply is refused by the byte cap (issue 45), and of answers near it.

    python benchmarks/refused_replies.py [--samples 64,200,400] [--modes endless,gzip-bomb] [--http-client aiohttp]
    python benchmarks/refused_replies.py --near-cap [--connections 1,8,16] [--near-samples 32]

A loopback server (this script in a child process: asyncio, keep-alive) answers every chat request
with one hostile body:

- ``endless``: 200, ``Transfer-Encoding: chunked``, JSON whitespace 64 KiB a chunk for as long as the
  client reads (no Content-Length to refuse it by: the cap stops it after 16 MiB);
- ``gzip-bomb``: 200, ``Content-Encoding: gzip``, 64 MiB of JSON whitespace gzipped to 64 KB (the
  cap counts it inflated and stops it after 16 MiB);
- ``near-cap`` (``--near-cap``): a well-formed chat completion whose answer is ASCII text, the whole
  body 64 KiB under the default cap (16 MiB), with a Content-Length: a legitimate answer, read whole.

``harness run`` closed-book (small FanOutQA-format questions, ``--no-cache``, ``--max-attempts 1``:
one refused reply a sample, ``--max-connections 64``) runs as a child process; its peak RSS is
``os.wait4``'s ``ru_maxrss`` (the run, or its scoring worker if larger). Each row is printed beside
the issue's figure before the fix; the goal is a peak flat within 10 % from 64 to 400 samples
(memory bounded by connections, not by the count of refused replies).

``--near-cap`` runs ``--near-samples`` near-cap answers at each of ``--connections``, and the same
run with answers of one word (``small``), and prints the peaks while the requests go (``VmHWM`` at
the run's last progress line) and in all (the end of the run included): what answers near the cap
cost in flight (read, parsed, checked, written) and at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CAP = 16 * 2**20  # --max-response-bytes' default
CHUNK = 64 * 1024
# peak RSS (MB) before the fix, at 64 connections (issue 45): +16 MB per refused reply
BEFORE_MB = {64: 1150, 200: 3400, 400: 6400}

ENDLESS_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"
MODELS = json.dumps({"object": "list", "data": [{"id": "bench", "object": "model", "max_model_len": 32768}]}).encode()


def completion(content: str) -> bytes:
    return json.dumps(
        {
            "id": "chatcmpl-bench",
            "object": "chat.completion",
            "created": 0,
            "model": "bench",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12},
        }
    ).encode()


def near_cap_body() -> bytes:
    frame = len(completion(""))
    return completion("Paris is the capital of France. " * ((CAP - CHUNK - frame) // 32))


# ---- the server (a child process) ---------------------------------------------------------------
def serve(mode: str) -> None:
    """Answers GET with the model list, POST with ``mode``'s body, until stdin closes; prints its URL."""
    filler = b" " * CHUNK
    chunk = b"%x\r\n%s\r\n" % (len(filler), filler)
    bomb = gzip.compress(b" " * (4 * CAP), 9)
    near, small = near_cap_body(), completion("Paris")

    def reply(body: bytes, *head: str) -> bytes:
        lines = ["HTTP/1.1 200 OK", "content-type: application/json", f"content-length: {len(body)}", *head]
        return ("\r\n".join(lines) + "\r\n\r\n").encode() + body

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = (await reader.readuntil(b"\r\n\r\n")).lower()
                at = head.find(b"\r\ncontent-length:")
                if at >= 0:
                    await reader.readexactly(int(head[at + 17 :].split(b"\r\n", 1)[0]))
                if head.startswith(b"get"):
                    writer.write(reply(MODELS))
                elif mode == "gzip-bomb":
                    writer.write(reply(bomb, "content-encoding: gzip"))
                elif mode == "near-cap":
                    writer.write(reply(near))
                elif mode == "small":
                    writer.write(reply(small))
                else:  # endless: until the client hangs up
                    writer.write(ENDLESS_HEAD)
                    while True:
                        writer.write(chunk)
                        await writer.drain()
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        finally:
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=1024)
        print(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        threading.Thread(target=lambda: (sys.stdin.read(), loop.call_soon_threadsafe(stop.set)), daemon=True).start()
        await stop.wait()

    asyncio.run(main())


# ---- one run ------------------------------------------------------------------------------------
def questions(path: Path, n: int) -> Path:
    rows = [{"id": f"q{i}", "question": f"Which city is number {i}?", "answer": "Paris"} for i in range(n)]
    path.write_text(json.dumps(rows), encoding="utf-8")
    return path


def run(work: Path, url: str, n: int, conns: int, client: str, tag: str) -> dict:
    """``harness run`` of ``n`` samples: {"peak_mb", "wall", "failed"}."""
    out = work / f"{tag}-{n}-{conns}"
    cmd = [sys.executable, "-m", "harness", "run", "--model", "openai/bench", "--base-url", url]
    cmd += ["--dataset", "fanoutqa:dev", "--data-path", str(questions(work / f"q{n}.json", n))]
    cmd += ["--setting", "closed-book", "--no-cache", "--max-attempts", "1", "--request-timeout", "120"]
    cmd += ["--max-connections", str(conns), "--http-client", client, "--out", str(out)]
    env = {**os.environ, "OPENAI_API_KEY": "sk-bench", "PYTHONPATH": str(ROOT)}
    log = work / f"{tag}-{n}-{conns}.log"
    running = float("nan")
    with open(log, "w") as f:
        t = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=f, stderr=subprocess.PIPE, text=True)
        for line in proc.stderr:
            f.write(line)
            if line.startswith("progress: ") and " took " in line:  # the last sample done: the end begins
                running = vm_hwm_mb(proc.pid)
        _, status, ru = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t
    rc = os.waitstatus_to_exitcode(status)
    failures = out / "failures.jsonl"
    failed = len(failures.read_text().splitlines()) if failures.exists() else 0
    if rc not in (0, 4):  # 4: the run finished, its samples failed (every reply refused)
        sys.exit(f"harness run exited {rc}; see {log}:\n{log.read_text()[-3000:]}")
    return {"peak_mb": ru.ru_maxrss / 1024, "running_mb": running, "wall": wall, "failed": failed}


def vm_hwm_mb(pid: int) -> float:
    """A live process's peak RSS so far (``VmHWM``), MB."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def start_server(mode: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, __file__, "--_serve", mode], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    return proc, proc.stdout.readline().strip()


def refused(args, work: Path) -> None:
    sizes = [int(s) for s in args.samples.split(",")]
    rows = []
    for mode in args.modes.split(","):
        server, url = start_server(mode)
        try:
            for n in sizes:
                r = run(work, url, n, 64, args.http_client, mode)
                if r["failed"] != n:
                    sys.exit(f"{mode}: {r['failed']} of {n} samples failed; every reply should have been refused")
                rows.append((mode, n, r))
                print(f"  {mode} {n}: peak {r['peak_mb']:.0f} MB ({r['wall']:.0f} s)", file=sys.stderr)
        finally:
            server.stdin.close()
            server.wait(timeout=10)
    print(f"\npeak RSS of `harness run`, 64 connections, every reply refused at the 16 MiB cap, --max-attempts 1,"
          f" --http-client {args.http_client} ({os.cpu_count()} CPUs)\n")
    print("| reply | samples | peak RSS | before (issue 45) | vs the 64-sample peak | wall |")
    print("|---|---|---|---|---|---|")
    for mode in args.modes.split(","):
        mine = [(n, r) for m, n, r in rows if m == mode]
        base = mine[0][1]["peak_mb"]
        for n, r in mine:
            before = f"{BEFORE_MB[n]:,} MB" if n in BEFORE_MB else ""
            peak = r["peak_mb"]
            print(f"| {mode} | {n} | {peak:.0f} MB | {before} | {peak / base:.2f} | {r['wall']:.1f} s |")
        spread = max(r["peak_mb"] for _, r in mine) / min(r["peak_mb"] for _, r in mine)
        verdict = "flat within 10 %: met" if spread <= 1.10 else "NOT flat within 10 %"
        print(f"| {mode}: largest / smallest peak {spread:.2f} | | | | {verdict} | |")


def near_cap(args, work: Path) -> None:
    conns = [int(c) for c in args.connections.split(",")]
    n = args.near_samples
    rows = {}
    for mode in ("small", "near-cap"):
        server, url = start_server(mode)
        try:
            for c in conns:
                r = run(work, url, n, c, args.http_client, mode)
                if r["failed"]:
                    sys.exit(f"{mode}: {r['failed']} of {n} samples failed; see {work}")
                rows[mode, c] = r
                print(f"  {mode}, {c} connections: peak {r['running_mb']:.0f} MB running, {r['peak_mb']:.0f} MB in all"
                      f" ({r['wall']:.0f} s)", file=sys.stderr)
        finally:
            server.stdin.close()
            server.wait(timeout=10)
    size = len(near_cap_body()) / 2**20
    print(f"\npeak RSS of `harness run`, {n} answers of {size:.2f} MiB each (the cap: 16 MiB) or of one word,"
          f" --max-attempts 1, --http-client {args.http_client} ({os.cpu_count()} CPUs)\n")
    print("| connections | running: one word | near the cap | more | in all: one word | near the cap | more |")
    print("|---|---|---|---|---|---|---|")
    for c in conns:
        a, b = rows["small", c], rows["near-cap", c]
        more, more_all = b["running_mb"] - a["running_mb"], b["peak_mb"] - a["peak_mb"]
        print(f"| {c} | {a['running_mb']:.0f} MB | {b['running_mb']:.0f} MB | {more:.0f} MB"
              f" | {a['peak_mb']:.0f} MB | {b['peak_mb']:.0f} MB | {more_all:.0f} MB |")
    print("\nrunning: VmHWM of the run's process at its last progress line (every sample done);"
          "\nin all: os.wait4's ru_maxrss, the end (scores, results.json) and the scoring worker included.")


def main() -> None:
    if sys.argv[1:2] == ["--_serve"]:
        serve(sys.argv[2])
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", default="64,200,400")
    ap.add_argument("--modes", default="endless,gzip-bomb")
    ap.add_argument("--http-client", default="aiohttp", choices=["aiohttp", "httpx"])
    ap.add_argument("--near-cap", action="store_true")
    ap.add_argument("--connections", default="1,8,16", help="--near-cap: the connections of each run")
    ap.add_argument("--near-samples", type=int, default=32, help="--near-cap: samples a run")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="refused-") as tmp:
        (near_cap if args.near_cap else refused)(args, Path(tmp))


if __name__ == "__main__":
    main()
