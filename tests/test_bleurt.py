"""The bleurt metric through bleurt-pytorch: a tiny randomly initialised checkpoint of the BLEURT
architecture is written here (BLEURT-20 cannot be downloaded), loaded back from disk by the metric, and
used on real FanOutQA dev references, checking the metric's scores against the model called directly."""

import re

import pytest

from harness.datasets import load_dataset
from harness.scoring.bleurt import str_answer
from harness.scoring.metrics import ScoringOptions, get_metric, score_answers

SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def bleurt_modules():
    try:
        import torch
        from bleurt_pytorch import BleurtConfig, BleurtForSequenceClassification, BleurtTokenizer
    except ImportError as exc:  # only when torch / bleurt-pytorch could not be installed
        pytest.skip(f"BLEURT needs torch and bleurt-pytorch (pip install -e .[bleurt]): {exc}")
    return torch, BleurtConfig, BleurtForSequenceClassification, BleurtTokenizer


@pytest.fixture(scope="module")
def dataset():
    return load_dataset("fanoutqa:dev")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, dataset):
    torch, BleurtConfig, BleurtForSequenceClassification, _ = bleurt_modules()
    from bleurt_pytorch.bleurt.tokenization_bleurt_fast import BleurtTokenizerFast

    directory = tmp_path_factory.mktemp("bleurt-tiny")
    # a WordPiece vocabulary of real words: those of the first FanOutQA dev questions and references
    text = " ".join(q.question + " " + str_answer(q.answer) for q in dataset.samples[:20]).lower()
    words = sorted(set(re.findall(r"[a-z]+|\d|[^\sa-z\d]", text)))
    vocab = SPECIAL + words + ["##" + c for c in "abcdefghijklmnopqrstuvwxyz0123456789"]
    vocab_file = directory / "vocab-src.txt"
    vocab_file.write_text("\n".join(vocab) + "\n")

    torch.manual_seed(1234)
    config = BleurtConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
        initializer_range=0.2,
        num_labels=1,
    )
    model = BleurtForSequenceClassification(config)
    model.save_pretrained(directory)
    tokenizer = BleurtTokenizerFast(vocab_file=str(vocab_file), do_lower_case=True, model_max_length=128)
    tokenizer.save_pretrained(directory)
    vocab_file.unlink()
    return directory


def answers_for(samples):
    """Answer 0: the reference itself; 1: a wrong answer; 2: missing; 3: None; 4: very long (truncated)."""
    return [
        {"id": samples[0].id, "answer": str_answer(samples[0].answer)},
        {"id": samples[1].id, "answer": "The answer is 42."},
        {"id": samples[3].id, "answer": None},
        {"id": samples[4].id, "answer": " ".join([str_answer(samples[4].answer)] * 60)},
    ]


def direct_scores(checkpoint, references, candidates):
    """The model and tokenizer loaded here and called one pair at a time."""
    torch, _, BleurtForSequenceClassification, BleurtTokenizer = bleurt_modules()
    model = BleurtForSequenceClassification.from_pretrained(str(checkpoint))
    tokenizer = BleurtTokenizer.from_pretrained(str(checkpoint))
    model.eval()
    out = []
    with torch.no_grad():
        for ref, cand in zip(references, candidates):
            inputs = tokenizer([ref], [cand], truncation=True, max_length=128, return_tensors="pt")
            out.append(model(**inputs).logits.flatten().tolist()[0])
    return out


@pytest.mark.slow
def test_bleurt_with_a_checkpoint(checkpoint, dataset):
    samples = dataset.samples[:5]
    answers = answers_for(samples)
    options = ScoringOptions(bleurt_checkpoint=str(checkpoint))
    first = score_answers(dataset, samples, answers, ["bleurt"], options=options)
    second = score_answers(dataset, samples, answers, ["bleurt"], options=options)

    scores = [row["bleurt"]["bleurt"] for row in first["raw"]]
    assert all(isinstance(s, float) for s in scores)
    assert scores == [row["bleurt"]["bleurt"] for row in second["raw"]], "not deterministic"
    assert first["bleurt"]["bleurt"] == pytest.approx(sum(scores) / 5)

    by_id = {a["id"]: a["answer"] for a in answers}
    references = [str_answer(q.answer) for q in samples]
    candidates = [str_answer(by_id.get(q.id)) for q in samples]
    assert candidates[2] == "" and candidates[3] == ""
    assert scores == pytest.approx(direct_scores(checkpoint, references, candidates), rel=1e-5, abs=1e-6)

    # random weights still read the input: reference vs itself differs from reference vs ""
    assert scores[0] != pytest.approx(direct_scores(checkpoint, references[:1], [""])[0], abs=1e-6)
    # unanswered (missing, or None) both score the empty candidate
    assert scores[2] == pytest.approx(direct_scores(checkpoint, references[2:3], [""])[0], rel=1e-5, abs=1e-6)

    info = first["meta"]["metric_info"]["bleurt"]
    assert info["available"] is True and info["checkpoint"] == str(checkpoint.resolve())
    assert len(info["config_sha256"]) == 64 and info["num_hidden_layers"] == 2
    assert info["versions"]["torch"] and info["versions"]["bleurt-pytorch"] and info["versions"]["transformers"]
    assert info["n_unanswered"] == 2 and info["max_length"] == 128


@pytest.mark.slow
def test_bleurt_only_answered(checkpoint, dataset):
    samples = dataset.samples[:5]
    answers = answers_for(samples)
    result = get_metric("bleurt")(samples, answers, True, options=ScoringOptions(bleurt_checkpoint=str(checkpoint)))
    assert set(result["raw"]) == {a["id"] for a in answers}
    assert result["aggregate"]["bleurt"] == pytest.approx(sum(r["bleurt"] for r in result["raw"].values()) / 4)


def test_bleurt_without_checkpoint(dataset):
    samples = dataset.samples[:3]
    scores = score_answers(dataset, samples, [{"id": samples[0].id, "answer": "x"}], ["bleurt"])
    assert scores["bleurt"] == {"bleurt": None}
    assert all(row["bleurt"] == {"bleurt": None} for row in scores["raw"])
    info = scores["meta"]["metric_info"]["bleurt"]
    assert info["available"] is False and "--bleurt-checkpoint" in info["reason"]


@pytest.mark.slow  # imports torch and transformers
def test_bad_checkpoint_is_a_clear_error(tmp_path, dataset):
    bleurt_modules()
    from harness.errors import HarnessError

    (tmp_path / "empty").mkdir()
    for path in (tmp_path / "missing", tmp_path / "empty"):
        with pytest.raises(HarnessError, match="--bleurt-checkpoint"):
            score_answers(
                dataset, dataset.samples[:1], [], ["bleurt"], options=ScoringOptions(bleurt_checkpoint=str(path))
            )


def test_missing_packages_report_none(monkeypatch, dataset):
    import sys

    monkeypatch.setitem(sys.modules, "bleurt_pytorch", None)  # import fails as if not installed
    samples = dataset.samples[:2]
    options = ScoringOptions(bleurt_checkpoint="/nonexistent")
    result = get_metric("bleurt")(samples, [], False, options=options)
    assert result["aggregate"] == {"bleurt": None}
    assert result["raw"] == {q.id: {"bleurt": None} for q in samples}
    assert result["info"]["available"] is False
    assert "bleurt-pytorch" in result["info"]["reason"] and "\n" not in result["info"]["reason"]
