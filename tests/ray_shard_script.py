"""The scripted model of tests/test_ray_launcher.py, as a file (``--model scripted/tests/ray_shard_script.py:answer``):
a Ray task's shard is another process on another node, which loads the script by its path (its sha256 is in
the run key, so the one-machine run and the shards share it). Right, half right or wrong by question and
epoch, as tests/test_sharding.py's; ``RAY_SHARD_DELAY`` seconds per request, so a node can be killed
mid-shard; ``RAY_SHARD_REQUESTS`` (a file) gets one line per request: which pair was asked, by which process."""

import asyncio
import os

from harness.datasets import load_dataset

GOLD = {s.question: s.answer for s in load_dataset("hotpotqa:dev").samples}


async def answer(messages, tools, tool_choice, params):
    delay = float(os.environ.get("RAY_SHARD_DELAY") or 0)
    if delay:
        await asyncio.sleep(delay)
    prompt = " ".join(m["content"] for m in messages if isinstance(m.get("content"), str))
    question = next(q for q in GOLD if q in prompt)
    log = os.environ.get("RAY_SHARD_REQUESTS")
    if log:
        with open(log, "a") as f:  # one short line per append: whole lines from several processes
            f.write(f"{params.seed}\t{os.getpid()}\t{question}\n")
    turn = (len(question) + params.seed) % 3
    return GOLD[question] if turn == 0 else f"{GOLD[question]} or maybe something else" if turn == 1 else "no idea"
