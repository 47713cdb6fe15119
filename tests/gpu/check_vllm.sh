#!/usr/bin/env bash
# vLLM through the harness on a real GPU, with a small open tool-calling thinking model (Qwen3-0.6B):
#   1. open-book, native tool calls: the launched server gets --enable-auto-tool-choice
#      --tool-call-parser hermes --reasoning-parser qwen3 (harness/models/model_facts.yaml, hf/Qwen3);
#   2. closed-book: the reasoning parser splits <think> off, so no answer holds it;
#   3. closed-book --batch: the same through `vllm run-batch`.
# Skipped (exit 0, one "skipped: ..." line) without nvidia-smi and a GPU, without vLLM, or without a
# local model: the device machines have no model hub, so HARNESS_GPU_MODEL names a local copy
# (a directory holding config.json). Under ~5 minutes on one H100 (three server starts). See README.md.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PY="${PYTHON:-python3}"

if ! command -v nvidia-smi >/dev/null 2>&1; then
  echo "skipped: no GPU (nvidia-smi not found)"
  exit 0
fi
if ! nvidia-smi -L 2>/dev/null | grep -q "GPU"; then
  echo "skipped: no GPU (nvidia-smi lists none)"
  exit 0
fi
# the harness looks for vllm on PATH, then next to the interpreter
if ! (cd "$REPO" && "$PY" -c 'import sys; from harness.models.vllm import find_vllm_executable as f; sys.exit(0 if f() else 1)') 2>/dev/null; then
  echo "skipped: no vllm (neither on PATH nor next to $PY)"
  exit 0
fi
MODEL="${HARNESS_GPU_MODEL:-}"
if [ -z "$MODEL" ] || [ ! -f "$MODEL/config.json" ]; then
  echo "skipped: no local model (set HARNESS_GPU_MODEL to a local copy of Qwen/Qwen3-0.6B; no model hub here)"
  exit 0
fi
MODEL="$(cd "$MODEL" && pwd)"

OUT="${HARNESS_GPU_OUT:-$(mktemp -d)}"
mkdir -p "$OUT"
cd "$REPO"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
# small and quick: a 8k window, no CUDA graph capture, half the GPU
SERVER=(--context-size 8192 --server-arg=--enforce-eager --server-arg=--gpu-memory-utilization=0.5)
RUN=(--model "vllm/$MODEL" --dataset hotpotqa:dev --limit 3 --no-cache --max-tokens 2048 "${SERVER[@]}")

echo "== snapshot"
"$PY" -m harness snapshot build --from tests/fixtures/hotpot_dev_distractor_first100.json --out "$OUT/hotpot.db"

echo "== open-book, native tool calls"
timeout 150 "$PY" -m harness run "${RUN[@]}" --setting open-book --snapshot "$OUT/hotpot.db" --search-space evidence-only --out "$OUT/native"

echo "== closed-book"
timeout 120 "$PY" -m harness run "${RUN[@]}" --setting closed-book --out "$OUT/closed"

echo "== closed-book --batch (vllm run-batch)"
timeout 150 "$PY" -m harness run "${RUN[@]}" --setting closed-book --batch --batch-window 1 --batch-poll-interval 2 --out "$OUT/batch"

"$PY" - "$OUT" <<'PYCHECK'
import json, sys
from pathlib import Path

out = Path(sys.argv[1])
def rows(name):
    return [json.loads(x) for x in (out / name / "samples.jsonl").read_text().splitlines() if x.strip()]
def results(name):
    return json.loads((out / name / "results.json").read_text())

failed = []
def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failed.append(what)

native = results("native")["model"]
check(native.get("tool_parser", {}).get("name") == "hermes", f"open-book launched with --tool-call-parser hermes ({native.get('tool_parser')})")
check(native.get("reasoning_parser", {}).get("name") == "qwen3", f"and --reasoning-parser qwen3 ({native.get('reasoning_parser')})")
calls = [m for r in rows("native") for m in r.get("messages", []) if m.get("role") == "assistant" and m.get("tool_calls")]
check(len(calls) > 0, f"native tool calls came back parsed ({len(calls)} assistant turns with tool_calls)")
check(all("<tool_call>" not in (m.get("content") or "") for r in rows("native") for m in r["messages"]), "no raw <tool_call> text left in any reply")
for name in ("closed", "batch"):
    answered = rows(name)
    check(len(answered) == 3, f"{name}: 3 samples answered ({len(answered)})")
    check(all("<think>" not in (r.get("answer") or "") for r in answered), f"{name}: no <think> in the answers")
    check(any(m.get("reasoning_content") for r in answered for m in r.get("messages", [])), f"{name}: the thinking came back beside the answer")
check(results("batch")["model"].get("batch", {}).get("provider") == "vllm", "batch: answered through vllm run-batch")
if failed:
    sys.exit(f"{len(failed)} check(s) failed; runs kept in {out}")
print(f"all checks passed; runs in {out}")
PYCHECK
