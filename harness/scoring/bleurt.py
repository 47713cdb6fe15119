"""BLEURT as FanOutQA's official scorer uses it (fanoutqa==1.1.1 ``eval/scorer.py``, ``score_bleurt``):
``BleurtScorer("BLEURT-20").score(references=[str_answer(reference)], candidates=[str_answer(answer)])``,
an unanswered question scoring the candidate "", averaged over the questions.

The model runs in PyTorch through ``bleurt-pytorch`` (Luca Di Liello's port of the TensorFlow
checkpoints onto transformers: ``BleurtConfig``, ``BleurtForSequenceClassification``,
``BleurtTokenizer``); the score of a pair is the regression head's output on
``tokenizer(reference, candidate)``. The checkpoint (e.g. a converted BLEURT-20, such as
``lucadiliello/BLEURT-20``) cannot be downloaded from here, so it must be given as a directory
(``--bleurt-checkpoint DIR``). Without one, or without torch / transformers / bleurt-pytorch, the
metric reports None with the reason: never 0.

Install with ``pip install 'manyanswer-harness[bleurt]'`` (torch is pinned to one CPU build: an open range pulls CUDA).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from harness.datasets.base import Sample
from harness.errors import HarnessError
from harness.scoring.fanoutqa_metrics import str_answer
from harness.scoring.gold import gold_text
from harness.scoring.kinds import unbounded
from harness.scoring.metrics import FANOUTQA_SHAPES, ScoringOptions, _dist_version, declare
from harness._version import pip_install

BATCH_SIZE = 16  # bleurt.score.BleurtScorer's default batch size
NO_CHECKPOINT = (
    "no --bleurt-checkpoint given; BLEURT-20 cannot be downloaded here: pass a local directory holding a "
    "bleurt-pytorch checkpoint (e.g. lucadiliello/BLEURT-20) to score BLEURT"
)


def _unavailable(pool: list[Sample], reason: str) -> dict[str, Any]:
    return {
        "aggregate": {"bleurt": None},
        "raw": {q.id: {"bleurt": None} for q in pool},
        "info": {"available": False, "reason": reason},
    }


def load_bleurt(checkpoint: str | Path):
    """(model, tokenizer) from a bleurt-pytorch checkpoint directory, in eval mode on the CPU."""
    from bleurt_pytorch import BleurtForSequenceClassification, BleurtTokenizer

    path = Path(checkpoint)
    if not path.is_dir():
        raise HarnessError(f"--bleurt-checkpoint {checkpoint}: not a directory")
    try:
        model = BleurtForSequenceClassification.from_pretrained(str(path), local_files_only=True)
        tokenizer = BleurtTokenizer.from_pretrained(str(path), local_files_only=True)
    except (OSError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise HarnessError(f"--bleurt-checkpoint {checkpoint}: cannot load a BLEURT checkpoint ({first})") from None
    model.eval()
    return model, tokenizer


def max_length(model, tokenizer) -> int:
    limit = model.config.max_position_embeddings
    model_max = getattr(tokenizer, "model_max_length", None)
    if isinstance(model_max, int) and 0 < model_max < limit:
        limit = model_max
    return limit


def bleurt_scores(model, tokenizer, references: list[str], candidates: list[str], batch_size: int = BATCH_SIZE):
    """Scores of (reference, candidate) pairs, as bleurt-pytorch's README computes them: the pair
    encoded together (longest-first truncation to the model's length), the regression logit."""
    import torch

    limit = max_length(model, tokenizer)
    out: list[float] = []
    with torch.inference_mode():
        for start in range(0, len(references), batch_size):
            inputs = tokenizer(
                references[start : start + batch_size],
                candidates[start : start + batch_size],
                padding="longest",
                truncation=True,
                max_length=limit,
                return_tensors="pt",
            )
            out.extend(float(x) for x in model(**inputs).logits.flatten().tolist())
    return out


def checkpoint_info(checkpoint: str | Path, model, tokenizer) -> dict[str, Any]:
    path = Path(checkpoint)
    config_file = path / "config.json"
    config_sha = hashlib.sha256(config_file.read_bytes()).hexdigest() if config_file.exists() else None
    weights = sorted(p.name for p in path.iterdir() if p.suffix in (".safetensors", ".bin"))
    return {
        "checkpoint": str(path.resolve()),
        "config_sha256": config_sha,
        "name_or_path": getattr(model.config, "_name_or_path", None),
        "architectures": getattr(model.config, "architectures", None),
        "num_hidden_layers": model.config.num_hidden_layers,
        "hidden_size": model.config.hidden_size,
        "weights": weights,
        "tokenizer": type(tokenizer).__name__,
        "max_length": max_length(model, tokenizer),
    }


def check_installed(options: ScoringOptions) -> None:
    """Before any model call: the packages BLEURT runs on are installed."""
    from importlib.util import find_spec

    missing = [name for name in ("torch", "transformers", "bleurt_pytorch") if find_spec(name) is None]
    if missing:
        raise HarnessError(
            f"metric bleurt needs torch, transformers<5 and bleurt-pytorch ({pip_install('bleurt')}); "
            f"missing: {', '.join(missing)}"
        )


# references are read by gold_text (FanOutQA's str_answer; QAMPARI entities by their answer text)
# BLEURT-20's scores are roughly 0..1 but not bounded: unbounded
@declare(
    accepts=(*FANOUTQA_SHAPES, "entity_list"),
    needs=("bleurt_checkpoint",),
    check=check_installed,
    headline=("bleurt",),
    labels={"bleurt": "BLEURT"},
    kind=unbounded(),
)
def bleurt(
    questions: list[Sample], answers: list[dict[str, Any]], only_answered: bool, options: ScoringOptions | None = None
) -> dict[str, Any]:
    """BLEURT of the answer against the reference (as FanOutQA's str_answer prints them); unanswered -> ""."""
    options = options or ScoringOptions()
    by_id = {a["id"]: a.get("answer") for a in answers}
    pool = [q for q in questions if q.id in by_id] if only_answered else questions
    if not options.bleurt_checkpoint:
        return _unavailable(pool, NO_CHECKPOINT)
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
        from bleurt_pytorch import BleurtForSequenceClassification  # noqa: F401
    except ImportError as exc:  # not installed, or a transformers too new for bleurt-pytorch
        reason = f"BLEURT needs torch, transformers<5 and bleurt-pytorch ({pip_install('bleurt')}): {exc}"
        return _unavailable(pool, " ".join(reason.split()))

    model, tokenizer = load_bleurt(options.bleurt_checkpoint)
    references = [gold_text(q.answer) for q in pool]
    candidates = [str_answer(by_id.get(q.id)) for q in pool]  # missing or None -> ""
    scores = bleurt_scores(model, tokenizer, references, candidates) if pool else []
    raw = {q.id: {"bleurt": s} for q, s in zip(pool, scores)}
    info = {
        "available": True,
        **checkpoint_info(options.bleurt_checkpoint, model, tokenizer),
        "batch_size": BATCH_SIZE,
        "versions": {name: _dist_version(name) for name in ("torch", "transformers", "bleurt-pytorch")},
        "n_unanswered": sum(1 for q in pool if by_id.get(q.id) is None),
        "reference": "fanoutqa==1.1.1 eval.scorer score_bleurt (BLEURT-20 via bleurt-pytorch)",
    }
    aggregate = sum(scores) / len(pool) if pool else None
    return {"aggregate": {"bleurt": aggregate}, "raw": raw, "info": info}
