"""What a gold answer is, per dataset (``harness.datasets.answers``), holds for every gold that ships:
each loader's ``answer_hint`` (the Python type of ``Sample.answer``) and ``answer_types`` (what
metrics are checked against) describe its data, and docs/datasets.md's table is theirs."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from pydantic import TypeAdapter, ValidationError

from harness.datasets import load_dataset
from harness.datasets.answers import ANSWER_SHAPES, ANSWER_TYPES, GoldAnswer, QampariAnswer, TopiOCQAAnswer
from harness.datasets.base import DATASETS
from harness.scoring.gold import answer_type

ROOT = Path(__file__).resolve().parents[1]
# every split that ships with its answers
SHIPPED = ["fanoutqa:dev@nov23", "fanoutqa:dev@2026", "hotpotqa:dev", "qampari:sample", "quest:train-sample", "topiocqa:dev"]
BUILTIN = sorted(DATASETS._builtins)


def test_every_builtin_loader_says_what_its_golds_are():
    assert {spec.split(":")[0] for spec in SHIPPED} == set(BUILTIN)
    for name in BUILTIN:
        loader = DATASETS.get(name)
        assert loader.answer_types and set(loader.answer_types) <= set(ANSWER_TYPES), name
        assert loader.answer_hint is not None and loader.answer_doc, name
    assert set(ANSWER_SHAPES) == set(ANSWER_TYPES)


@pytest.mark.parametrize("spec", SHIPPED)
def test_every_shipped_gold_has_its_datasets_type(spec):
    dataset = load_dataset(spec)
    loader = DATASETS.get(dataset.info.name)
    hint, gold = TypeAdapter(loader.answer_hint), TypeAdapter(GoldAnswer)
    seen = set()
    for sample in dataset.samples:
        hint.validate_python(sample.answer, strict=True)
        gold.validate_python(sample.answer, strict=True)
        kind = answer_type(sample.answer, dataset.answer_types)
        assert kind in loader.answer_types, (sample.id, kind)
        # the declared type's Python shape holds the value too
        TypeAdapter(ANSWER_SHAPES[kind]).validate_python(sample.answer, strict=True)
        seen.add(kind)
    assert seen  # (the types a split uses: a subset of what its dataset declares)


def test_the_types_refuse_other_shapes():
    """The check above has teeth: a shape a dataset does not have fails its type."""
    with pytest.raises(ValidationError):
        TypeAdapter(QampariAnswer).validate_python(["Paris"], strict=True)
    with pytest.raises(ValidationError):
        TypeAdapter(QampariAnswer).validate_python([{"answer_text": "Paris"}], strict=True)  # no aliases
    with pytest.raises(ValidationError):
        TypeAdapter(TopiOCQAAnswer).validate_python({"a": "b"}, strict=True)
    TypeAdapter(TopiOCQAAnswer).validate_python(["original", "additional"], strict=True)  # references


def test_the_docs_table_is_the_loaders():
    spec = importlib.util.spec_from_file_location("docs_gen", ROOT / "docs" / "gen.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    table = gen.gold_answers_markdown()
    for name in BUILTIN:
        loader = DATASETS.get(name)
        assert f"| `{name}` | {', '.join(loader.answer_types)} | `" in table and loader.answer_doc in table
    assert "| `qampari` | entity_list | `list[QampariEntity]` |" in table
    assert '`QampariEntity` is `{"answer_text": str, "aliases": list[str]}`' in table
    page = (ROOT / "docs" / "datasets.md").read_text(encoding="utf-8")
    assert gen.GOLD_START + "\n" + table + gen.GOLD_END in page  # as generated now
