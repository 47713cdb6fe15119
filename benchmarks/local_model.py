"""Local model throughput: ``harness run --model local/smollm2`` vs raw llama.cpp on the same GGUF.

    python benchmarks/local_model.py [--limit 20] [--max-tokens 512] [--repeats 3] [--threads N] [--model smollm2|PATH.gguf]
                                     [--weight-repack auto|on|off] [--no-amx]

Both get the first ``--limit`` FanOutQA dev questions (closed book, the harness's
``prompts/closed_book.txt`` filled the same way), greedy (temperature 0, top_p 1, seed 0), the same
``--max-tokens``, one after the other, through llama-cpp-python's ``create_chat_completion`` on the
same GGUF with the same context (the model's trained length) and ``--threads`` (default all cores;
1 is steadier on a shared machine, where llama.cpp's threads wait on each other).

- harness: the whole ``harness run --no-cache`` command (imports, model load, records, scoring);
  completion tokens from its results.json.
- raw: a fresh Python process that imports llama_cpp, loads ``Llama`` and calls
  ``create_chat_completion`` per question (also timed without the load, for reference).

``--weight-repack`` is given to both (the harness flag; the raw child sets llama.cpp's
``use_extra_bufts`` the same way). ``--no-amx`` runs both under ``benchmarks/no_amx.py``: on a CPU
with AMX, llama.cpp then takes the paths it takes on a CPU without it (how the on/off choice of
``--weight-repack auto`` was measured). The raw child also times prompt processing alone: one
prompt of about ``--prefill-tokens`` tokens (the questions joined), one token generated, in
``--repeats`` runs of their own (not part of the timed runs).

Rate = completion tokens / whole wall clock of the child process. One untimed warm-up of each (one
question), then ``--repeats`` timed runs alternating which goes first; the medians are compared.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from overhead import CURRENT_DATE, DEV_FILE, timed  # benchmarks/overhead.py

GOAL_RATIO = 0.9


def prompts(limit: int) -> list[str]:
    from harness.templates import load_template

    template = load_template("closed_book")[0]
    rows = json.loads(DEV_FILE.read_text(encoding="utf-8"))[:limit]
    return [template.format(question=r["question"], current_date=CURRENT_DATE) for r in rows]


def raw(model: str, limit: int, max_tokens: int, threads: int, weight_repack: str, prefill: int, out: Path) -> None:
    """The child: plain llama-cpp-python, nothing of the harness but the GGUF's path and the
    weight-repack decision (the harness's own function, so both decide alike)."""
    t0 = time.perf_counter()
    from llama_cpp import Llama

    from harness.models.llama_child import decide_and_apply
    from harness.models.local import resolve_gguf

    decision = decide_and_apply(weight_repack)
    llm = Llama(model_path=str(resolve_gguf(model)), n_ctx=0, n_threads=threads, seed=0, verbose=False)
    t1 = time.perf_counter()
    tokens = 0
    for prompt in prompts(limit):
        out_ = llm.create_chat_completion(
            messages=[{"role": "user", "content": prompt}], temperature=0.0, top_p=1.0, max_tokens=max_tokens, seed=0
        )
        tokens += out_["usage"]["completion_tokens"]
    t2 = time.perf_counter()
    prefill_rate = None
    if prefill:  # prompt processing alone: the questions joined to about ``prefill`` tokens
        rows = json.loads(DEV_FILE.read_text(encoding="utf-8"))
        text = " ".join(r["question"] for r in rows)
        ids = llm.tokenize(text.encode("utf-8"), add_bos=False)[:prefill]
        prompt = llm.detokenize(ids).decode("utf-8", errors="ignore")
        llm.reset()
        t3 = time.perf_counter()
        res = llm.create_completion(prompt, max_tokens=1, temperature=0.0, seed=0)
        prefill_rate = res["usage"]["prompt_tokens"] / (time.perf_counter() - t3)
    out.write_text(
        json.dumps(
            {"tokens": tokens, "load_s": t1 - t0, "gen_s": t2 - t1, "prefill_tok_s": prefill_rate, "decision": decision}
        )
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--limit", type=int, default=20, help="FanOutQA dev questions (the first N)")
    ap.add_argument("--max-tokens", type=int, default=512, help="max completion tokens per question (harness default)")
    ap.add_argument("--repeats", type=int, default=3, help="timed runs of each")
    ap.add_argument("--model", default="smollm2", help="packaged model name or a .gguf path (harness local/NAME)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="llama.cpp threads, both")
    ap.add_argument("--no-warmup", action="store_true", help="skip the untimed one-question warm-up")
    ap.add_argument("--weight-repack", choices=("auto", "on", "off"), default="auto", help="both (harness flag)")
    ap.add_argument("--no-amx", action="store_true", help="both as on a CPU without AMX (benchmarks/no_amx.py)")
    ap.add_argument("--prefill-tokens", type=int, default=1024, help="raw: prompt-processing probe size (0: none)")
    ap.add_argument("--_raw", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args._raw:
        return raw(
            args.model, args.limit, args.max_tokens, args.threads, args.weight_repack, args.prefill_tokens, Path(args._raw)
        )

    work = Path(tempfile.mkdtemp(prefix="harness-local-"))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HARNESS_CACHE_DIR": str(work / "cache")}
    wrap = [sys.executable, str(Path(__file__).with_name("no_amx.py"))] if args.no_amx else []

    def run_one(which: str, tag: str, limit: int, prefill: int = 0) -> dict:
        if which == "harness":
            out = work / f"harness-{tag}"
            cmd = wrap + [
                sys.executable,
                "-m",
                "harness",
                "run",
                "--model",
                f"local/{args.model}",
                "--dataset",
                "fanoutqa:dev",
            ]
            cmd += ["--setting", "closed-book", "--limit", str(limit), "--max-tokens", str(args.max_tokens)]
            cmd += ["--n-threads", str(args.threads), "--weight-repack", args.weight_repack]
            cmd += ["--no-cache", "--out", str(out)]
            r = timed(cmd, work, env, work / f"{which}-{tag}.log")
            results = json.loads((out / "results.json").read_text())
            if results["counts"]["finished"] != limit:
                sys.exit(f"harness finished {results['counts']['finished']} of {limit}; see {out}")
            r["tokens"] = results["tokens"]["completion"]
            r["decision"] = (results.get("model") or {}).get("weight_repack")
        else:
            stats = work / f"raw-{tag}.json"
            cmd = wrap + [sys.executable, __file__, "--_raw", str(stats), "--model", args.model]
            cmd += ["--limit", str(limit), "--max-tokens", str(args.max_tokens), "--threads", str(args.threads)]
            cmd += ["--weight-repack", args.weight_repack, "--prefill-tokens", str(prefill)]
            r = timed(cmd, work, env, work / f"{which}-{tag}.log")
            r.update(json.loads(stats.read_text()))
        r["rate"] = r["tokens"] / r["wall"] if limit else 0.0
        return r

    if not args.no_warmup:
        for which in ("harness", "raw"):
            run_one(which, "warmup", 1)
    runs: dict[str, list[dict]] = {"harness": [], "raw": []}
    for rep in range(args.repeats):
        for which in ("harness", "raw") if rep % 2 == 0 else ("raw", "harness"):
            r = run_one(which, f"rep{rep}", args.limit)
            runs[which].append(r)
            print(
                f"  rep {rep} {which:<8} wall {r['wall']:7.2f} s  {r['tokens']} tokens  {r['rate']:6.1f} tok/s",
                file=sys.stderr,
            )

    print(
        f"\nlocal/{args.model}, {args.limit} FanOutQA dev questions (closed book), max_tokens {args.max_tokens}, "
        f"greedy, {args.threads} threads, {args.repeats} runs each, --weight-repack {args.weight_repack}"
        f"{' (as without AMX: no_amx.py)' if args.no_amx else ''}"
    )
    decided = {json.dumps(r.get("decision"), sort_keys=True) for rs in runs.values() for r in rs}
    print(f"extra buffer types: {'; '.join(sorted(decided))}\n")
    print(
        f"{'':<26} | {'wall med s':>10} | {'tokens':>7} | {'tok/s whole wall':>16} | {'CPU s':>7} | {'peak RSS MB':>11}"
    )
    med = {}
    for which, name in (("harness", "harness run"), ("raw", "raw llama-cpp-python")):
        rs = runs[which]
        med[which] = statistics.median(r["rate"] for r in rs)
        print(
            f"{name:<26} | {statistics.median(r['wall'] for r in rs):10.2f} | {rs[0]['tokens']:7d} | "
            f"{med[which]:16.1f} | {statistics.median(r['cpu'] for r in rs):7.2f} | {max(r['rss_mb'] for r in rs):11.0f}"
        )
    gen = statistics.median(r["tokens"] / r["gen_s"] for r in runs["raw"])
    load = statistics.median(r["load_s"] for r in runs["raw"])
    print(
        f"{'  raw, generation only':<26} | {'':>10} | {'':>7} | {gen:16.1f} |   (import + load {load:.2f} s excluded)"
    )
    # prompt processing alone, in runs of their own (not in the timed walls above)
    if args.prefill_tokens:
        prefill = [run_one("raw", f"prefill{i}", 0, args.prefill_tokens)["prefill_tok_s"] for i in range(args.repeats)]
        print(f"{'  raw, prompt processing':<26} | {'':>10} | {'':>7} | {statistics.median(prefill):16.1f} |   "
              f"({args.prefill_tokens}-token prompt, 1 token out; median)")
    same = {r["tokens"] for r in runs["harness"]} == {r["tokens"] for r in runs["raw"]}
    print(f"\nsame completion tokens (greedy, same prompts): {same}")
    ratio = med["harness"] / med["raw"]
    print(
        f"goal: harness >= {GOAL_RATIO}x raw llama.cpp (whole-wall token rate): {ratio:.3f}x "
        f"{'PASS' if ratio >= GOAL_RATIO else 'FAIL'}"
    )
    import shutil

    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
