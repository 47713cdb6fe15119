"""What a command imports: nothing heavy unless it is used. Checked by module lists, not by timing
(the timings are in benchmarks/overhead.py): `harness --help` builds no command, and scoring a
FanOutQA file (spaCy lemmas, ROUGE with nltk's stemmer) loads neither torch nor scikit-learn nor
scipy, which those libraries would otherwise probe for and import."""

from __future__ import annotations

import pytest

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "sklearn", "scipy", "tensorflow", "transformers", "sentence_transformers")

PROBE = """
import json, sys
from harness.cli import main
code = main(sys.argv[1:])
print(json.dumps({"code": code, "modules": sorted({m.split('.')[0] for m in sys.modules})}), file=sys.stderr)
"""


def loaded(*argv: str, cwd: Path = ROOT) -> tuple[int, set[str]]:
    proc = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, cwd=cwd, timeout=600)
    last = json.loads(proc.stderr.strip().splitlines()[-1])
    return last["code"], set(last["modules"])


def test_help_imports_no_command_and_no_library():
    proc = subprocess.run(
        [sys.executable, "-c", "import sys; from harness.cli import main\ntry:\n main(['--help'])\nexcept SystemExit:\n"
         " print(sorted(m for m in sys.modules if m.startswith(('harness.', 'pydantic', 'agents', 'tools', 'wiki_snapshot'))))"],
        capture_output=True, text=True, cwd=ROOT, check=True,
    )  # fmt: skip
    modules = eval(proc.stdout.strip().splitlines()[-1])  # noqa: S307 - our own printed list
    # harness.text: argv and the path variables are checked for UTF-8 before anything (issue 45)
    assert modules == [
        "harness._namespace", "harness._version", "harness.cli", "harness.commands", "harness.errors", "harness.text",
        "harness.wiki_snapshot", "harness.wiki_snapshot.errors", "harness.wiki_snapshot.text",  # harness.errors' bases
    ]  # fmt: skip


@pytest.mark.slow
def test_scoring_loads_no_heavy_library(tmp_path):
    """The scorer's libraries probe for torch (spaCy's thinc) and scikit-learn/scipy (nltk): hidden."""
    from harness.datasets import load_dataset

    gens = tmp_path / "gens.jsonl"
    samples = load_dataset("fanoutqa:dev").samples[:20]
    gens.write_text("".join(json.dumps({"id": s.id, "answer": "Paris, 1990 and the cats"}) + "\n" for s in samples))
    code, modules = loaded(
        "score", "--dataset", "fanoutqa:dev", "--generations", str(gens), "--out", str(tmp_path / "s")
    )
    assert code == 0
    assert {"spacy", "rouge_score", "nltk"} <= modules  # the scorer really ran
    assert not modules & set(HEAVY)


@pytest.mark.slow
def test_hidden_packages_are_importable_afterwards():
    """Hiding is only for the probing import: the dense retriever can still import torch later."""
    code = (
        "import sys; from harness.scoring.normalize import normalize; normalize('The cats ran');"
        "assert 'torch' not in sys.modules; import torch; print(torch.__name__)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "torch"
