"""Sample.raw held packed (harness.datasets.packed.PackedRecord), and loaders that parse a file one
record at a time (harness.datasets.base.json_records / jsonl_records): the same records, the same
errors, a fraction of the memory."""

from __future__ import annotations

import copy
import enum
import gc
import json
import math
import pickle
import tracemalloc
from collections import OrderedDict
from pathlib import Path
from types import MappingProxyType

import pytest

from harness.datasets import Sample, load_dataset
from harness.datasets.base import json_records, jsonl_records, read_json, read_jsonl
from harness.datasets.packed import EMPTY, PackedRecord, pack_record
from harness.errors import DatasetError

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "harness" / "datasets" / "data"
FILES = sorted(p for p in DATA.rglob("*") if p.suffix in (".json", ".jsonl")) + [
    ROOT / "tests" / "fixtures" / "hotpot_dev_distractor_first100.json"
]


def records_of(path: Path) -> list[dict]:
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return json.loads(path.read_text(encoding="utf-8"))


def same_json(a, b) -> bool:
    """Equal with the same types all the way down (``1 == 1.0 == True`` for ``==`` alone)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same_json(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return a == b and (not isinstance(a, float) or math.copysign(1, a) == math.copysign(1, b))


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_shipped_record_round_trips(path):
    records = records_of(path)
    assert records
    for rec in records:
        packed = PackedRecord.parsed(rec)
        assert packed == rec and rec == packed
        assert same_json(packed.unpack(), rec)
        assert same_json(PackedRecord(rec).unpack(), rec)
        assert len(packed.packed_bytes) < len(json.dumps(rec, ensure_ascii=False).encode())


SPECS = [
    "fanoutqa:dev", "fanoutqa:test", "fanoutqa:dev@2026", "fanoutqa:test@2026", "qampari:sample",
    "quest:train-sample", "topiocqa:dev", "hotpotqa:dev",
]  # fmt: skip


@pytest.mark.parametrize("spec", SPECS)
def test_loaded_samples_hold_their_file_records_packed(spec):
    dataset = load_dataset(spec)
    records = records_of(Path(dataset.info.path))
    assert len(records) == len(dataset.samples)
    for rec, sample in zip(records, dataset.samples):
        assert type(sample.raw) is PackedRecord
        assert same_json(sample.raw.unpack(), rec)


def test_tricky_values_round_trip():
    rec = {
        "floats": [0.1, 1e-300, 1.7976931348623157e308, -0.0, 5e-324, 2.5, 1.0, float("inf"), -float("inf")],
        "ints": [0, -1, 2**63, -(2**70), True, False],
        "text": "Zürich – 東京 😀 e\u0301 \u2028 \x00 \"quoted\" \\ back",
        "lone surrogate": "\ud800 and \udfff",
        "nested": [[], [[{}]], {"a": [None, {"b": []}]}],
        "ключ 😀": None,
        "": "",
    }
    packed = PackedRecord(rec)
    assert same_json(packed.unpack(), rec)
    assert same_json(pickle.loads(pickle.dumps(packed)).unpack(), rec)
    nan = PackedRecord({"x": float("nan")}).unpack()["x"]
    assert math.isnan(nan)
    short = PackedRecord({"a": 1})
    assert short.packed_bytes == b'{"a":1}'  # kept plain where compressing would not shrink it


def test_mapping_api(monkeypatch):
    rec = {"id": "q1", "answer": [1, 2], "meta": {"k": "v"}, "none": None}
    p = PackedRecord(rec)
    assert p["id"] == "q1" and p["meta"] == {"k": "v"}
    with pytest.raises(KeyError):
        p["missing"]
    assert p.get("missing") is None and p.get("missing", 7) == 7 and p.get("none", 7) is None
    assert "answer" in p and "missing" not in p and 1 not in p
    assert list(p) == list(rec) and len(p) == 4
    assert list(p.keys()) == list(rec) and list(p.values()) == list(rec.values())
    assert list(p.items()) == list(rec.items())
    assert p.keys() & {"id", "x"} == {"id"}  # dict views
    assert repr(p) == f"PackedRecord({rec!r})"
    assert dict(p) == rec and {**p} == rec

    calls = []
    real = PackedRecord.unpack
    monkeypatch.setattr(PackedRecord, "unpack", lambda self: calls.append(1) or real(self))
    assert bool(p) and not bool(PackedRecord({})) and not EMPTY
    assert calls == []  # truth without decoding
    for view in (p.keys, p.values, p.items):
        calls.clear()
        list(view())
        assert len(calls) == 1, view


def test_equality():
    rec = {"a": 1, "b": [1.5, "x"]}
    p = PackedRecord(rec)
    assert p == rec and rec == p and not (p != rec)
    assert p == PackedRecord(dict(rec)) and p == OrderedDict(rec) and p == MappingProxyType(rec)
    assert p == PackedRecord({"a": 1.0, "b": [1.5, "x"]})  # equal values, other bytes
    assert p != {"a": 2, "b": [1.5, "x"]} and p != {"a": 1} and p != PackedRecord({"a": 1})
    assert p != [("a", 1)] and p != "{}" and p is not None
    with pytest.raises(TypeError):
        hash(p)


def test_read_only_and_fresh_values():
    p = PackedRecord({"a": [1]})
    with pytest.raises(TypeError):
        p["a"] = 2
    with pytest.raises(TypeError):
        del p["a"]
    with pytest.raises(AttributeError):
        p.other = 1
    got = p.unpack()
    got["a"].append(2)
    got["b"] = 3
    p["a"].append(9)
    assert p.unpack() == {"a": [1]}
    assert copy.copy(p) is p and copy.deepcopy(p) is p


def test_pickle_is_the_bytes():
    rec = records_of(DATA / "fanoutqa" / "nov23" / "fanout-final-dev.json")[0]
    p = PackedRecord(rec)
    data = pickle.dumps(p, protocol=pickle.HIGHEST_PROTOCOL)
    back = pickle.loads(data)
    assert type(back) is PackedRecord and back.packed_bytes == p.packed_bytes and back == rec
    assert len(data) < len(p.packed_bytes) + 120 < len(pickle.dumps(rec, protocol=pickle.HIGHEST_PROTOCOL)) / 2
    sample = Sample(id="q", question="?", answer="a", raw=rec)
    assert pickle.loads(pickle.dumps(sample)) == sample


class Color(enum.IntEnum):
    RED = 1


class Name(str):
    pass


def test_sample_packs_only_what_json_gives_back():
    rec = {"a": [1, {"b": "c"}]}
    s = Sample(id="q", question="?", answer=None, raw=rec)
    assert type(s.raw) is PackedRecord and s.raw == rec
    assert Sample(id="q", question="?", answer=None).raw is EMPTY
    assert Sample(id="q", question="?", answer=None, raw={}).raw is EMPTY
    already = PackedRecord(rec)
    assert Sample(id="q", question="?", answer=None, raw=already).raw is already
    for odd in (
        {"t": (1, 2)},  # a tuple would come back a list
        {1: "int key"},
        {"e": Color.RED},  # an IntEnum would come back a plain int (and print otherwise)
        {"s": Name("x")},
        {"set": {1}},
        {"obj": object()},
        {"big": 10**5000},  # longer than int->str allows
        OrderedDict(a=1),  # not a dict: left as given
    ):
        assert Sample(id="q", question="?", answer=None, raw=odd).raw is odd
        if type(odd) is dict:
            with pytest.raises((TypeError, ValueError)):
                PackedRecord(odd)
    cyclic: dict = {"a": []}
    cyclic["a"].append(cyclic)
    assert pack_record(cyclic) is cyclic
    with pytest.raises(TypeError):
        PackedRecord.parsed([1])


def test_dataset_memory_per_sample():
    """Loading FanOutQA dev holds ~5.3 KB a sample (11.3 KB with each record a dict)."""
    load_dataset("fanoutqa:dev")
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        dataset = load_dataset("fanoutqa:dev")
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held / len(dataset.samples) < 7 * 1024


# ---- json_records / jsonl_records: read_json / read_jsonl's records and errors, one at a time ----
GOOD_LISTS = [
    "[]", " [ ] ", '[{"a": 1}]', '\n[ {"a": 1} ,\t{"b": [2, {"c": null}]} ]\r\n', '[1, "x", [], {}]',
    '[{"a": NaN, "b": -Infinity}]',
]  # fmt: skip
BAD_LISTS = [
    "", "[", "[,]", '[{"a": 1},]', '[{"a": 1} {"b": 2}]', '[{"a": 1}] x', '[{"a": 1}]]', '[{"a": }]',
    '\ufeff[{"a": 1}]', '[{"a": 1}, {"b": 2}', "[1 2]",
]  # fmt: skip


@pytest.mark.parametrize("text", GOOD_LISTS)
def test_json_records_parse_like_json_loads(tmp_path, text):
    path = tmp_path / "d.json"
    path.write_text(text, encoding="utf-8")
    with json_records(path) as records:
        got = list(records)
    assert same_json(got, read_json(path))


@pytest.mark.parametrize("text", BAD_LISTS)
def test_json_records_fail_like_read_json(tmp_path, text):
    path = tmp_path / "d.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(DatasetError) as whole:
        read_json(path)
    with pytest.raises(DatasetError) as streamed:
        with json_records(path) as records:
            list(records)
    assert str(streamed.value) == str(whole.value)


def test_json_records_not_a_list(tmp_path):
    path = tmp_path / "d.json"
    path.write_text('{"id": "a"}', encoding="utf-8")
    with pytest.raises(DatasetError, match=r"d\.json: expected a JSON list of turns$"):
        json_records(path, "turns")


def test_a_json_error_further_on_is_reported_before_a_refused_record(tmp_path):
    """Read whole, a file that is not JSON fails as such even where its first record is refused: so
    it does read one record at a time."""
    path = tmp_path / "d.json"
    path.write_text('[{"question": "no id"}, {"id": "b", "question": "?", "answer": 1}, {"id": ]', encoding="utf-8")
    with pytest.raises(DatasetError) as whole:
        read_json(path)
    with pytest.raises(DatasetError) as loaded:
        load_dataset("fanoutqa:dev", str(path))
    assert str(loaded.value) == str(whole.value) and "not valid JSON" in str(loaded.value)
    path.write_text('[{"question": "no id"}, {"id": "b", "question": "?", "answer": 1}]', encoding="utf-8")
    with pytest.raises(DatasetError, match=r"question #1: needs string fields 'id' and 'question'"):
        load_dataset("fanoutqa:dev", str(path))

    lines = tmp_path / "q.jsonl"
    lines.write_text('{"docs": []}\n{"query": "q", "docs": ["A"], "metadata": {}}\n{"query": \n', encoding="utf-8")
    with pytest.raises(DatasetError) as whole:
        read_jsonl(lines)
    with pytest.raises(DatasetError) as loaded:
        load_dataset("quest:val", str(lines))
    assert str(loaded.value) == str(whole.value) == f"{lines}:3: not valid JSON (Expecting value)"


def test_jsonl_records_match_read_jsonl():
    path = DATA / "quest" / "train_sample.jsonl"
    with jsonl_records(path) as records:
        assert list(records) == read_jsonl(path)


def test_collect_evidence_reads_a_packed_record():
    from harness.wiki_snapshot.builders import collect_evidence

    sample = load_dataset("fanoutqa:dev").samples[0]
    found = collect_evidence(sample.raw)
    assert found and found == collect_evidence(sample.raw.unpack())
