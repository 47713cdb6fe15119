"""A sample's lists (evidence, gold_evidence, needed_titles) held packed (harness.datasets.packed.PackedList),
and its groups as a PackedRecord: equal to what the loaders built, read like lists, a fraction of the memory."""

from __future__ import annotations

import copy
import dataclasses
import enum
import gc
import json
import pickle
import tracemalloc

import pytest
from test_packed_record import same_json

from harness.datasets import Sample, base, load_dataset
from harness.datasets.packed import EMPTY, EMPTY_LIST, PackedList, PackedRecord, pack_list, pack_sublist

SPECS = [
    "fanoutqa:dev", "fanoutqa:test", "fanoutqa:dev@2026", "fanoutqa:test@2026", "qampari:sample",
    "quest:train-sample", "topiocqa:dev", "hotpotqa:dev",
]  # fmt: skip
FIELDS = ("evidence", "gold_evidence", "needed_titles", "groups")


def plain(value):
    return value.unpack() if isinstance(value, (PackedList, PackedRecord)) else value


@pytest.fixture
def unpacked_loads(monkeypatch):
    """Loads with Sample's fields kept as the loaders built them (raw still packed, as on main)."""

    def keep(self):
        if not isinstance(self.raw, PackedRecord):
            self.raw = PackedRecord(self.raw) if self.raw else EMPTY

    def load(spec):
        with monkeypatch.context() as m:
            m.setattr(base.Sample, "__post_init__", keep)
            return load_dataset(spec)

    return load


@pytest.mark.parametrize("spec", SPECS)
def test_every_shipped_sample_round_trips(spec, unpacked_loads):
    packed, given = load_dataset(spec), unpacked_loads(spec)
    assert len(packed.samples) == len(given.samples)
    kinds = set()
    for p, g in zip(packed.samples, given.samples):
        for name in FIELDS:
            got, want = getattr(p, name), getattr(g, name)
            kinds.add((name, type(got).__name__))
            assert same_json(plain(got), want), (spec, p.id, name)
            assert got == want and want == got
        assert (p.id, p.question, p.answer, p.history) == (g.id, g.question, g.answer, g.history)
        assert p == g
    assert ("evidence", "list") not in kinds and ("groups", "dict") not in kinds
    if spec.startswith("quest"):  # QUEST's needed titles are its answer list: not held a second time
        assert all(s.needed_titles is s.answer for s in packed.samples)
    else:
        assert ("needed_titles", "list") not in kinds


def test_gold_evidence_is_held_in_the_evidence():
    fanout = load_dataset("fanoutqa:dev").samples
    assert all(s.gold_evidence is s.evidence for s in fanout)  # the same list: the same object
    hotpot = load_dataset("hotpotqa:dev").samples
    # every supporting title is a context title: positions in it, or all of it (hotpot-dev-027)
    held = [s.gold_evidence is s.evidence or s.gold_evidence._base is s.evidence for s in hotpot]
    assert all(held) and 0 < sum(s.gold_evidence is s.evidence for s in hotpot) < len(hotpot)
    s = hotpot[0]
    titles = [e["title"] for e in s.evidence]
    assert [e["title"] for e in s.gold_evidence] == list(s.needed_titles)
    assert all(t in titles for t in s.needed_titles)
    assert len(s.gold_evidence) == len(s.needed_titles)


def test_sublists():
    a, b, c = {"title": "A", "pageid": 1}, {"title": "B"}, {"title": "C", "revid": 2.0}
    ev = [a, b, c]
    packed = pack_list(ev)
    assert pack_sublist(ev, ev, packed) is packed
    assert pack_sublist([a, b, c], ev, packed) is packed  # all of it, in order
    sub = pack_sublist([c, a], ev, packed)
    assert sub._base is packed and sub == [c, a] and same_json(sub.unpack(), [c, a])
    assert len(sub) == 2 and sub[-1] == a and sub[:1] == [c] and list(reversed(sub)) == [a, c]
    assert sub != [a, c] and sub == PackedList([c, a]) and PackedList([c, a]) == sub
    back = pickle.loads(pickle.dumps((packed, sub)))
    assert back[1]._base is back[0] and back[1] == [c, a]  # the base pickled once, shared
    assert PackedList.picks(sub, b"\x01")._base is packed and PackedList.picks(sub, b"\x01") == [a]
    equal_not_same = {"title": "A", "pageid": 1}
    own = pack_sublist([equal_not_same], ev, packed)  # an entry of its own: packed by itself
    assert own._base is None and own == [a]
    assert pack_sublist([{"t": (1,)}], ev, packed) == [{"t": (1,)}]  # kept as given
    assert pack_sublist([], ev, packed) is EMPTY_LIST
    unpackable = [{"t": (1,)}]
    assert pack_sublist(unpackable, unpackable, unpackable) is unpackable
    long = [{"n": i} for i in range(300)]
    far = pack_sublist([long[299]], long, pack_list(long))
    assert far._base is None and far == [{"n": 299}]  # past one byte a position: its own bytes


def test_sequence_api(monkeypatch):
    items = [{"title": "A", "pageid": 7}, "x", 1, 2.5, None, True, [1, [2]], "x"]
    p = PackedList(items)
    assert p[0] == {"title": "A", "pageid": 7} and p[-1] == "x" and p[-2] == [1, [2]]
    with pytest.raises(IndexError):
        p[8]
    assert p[1:3] == ["x", 1] and type(p[1:3]) is list and p[::-1] == items[::-1] and p[5:2] == []
    assert list(p) == items and len(p) == 8 and list(reversed(p)) == items[::-1]
    assert "x" in p and {"title": "A", "pageid": 7} in p and "y" not in p
    assert p.index("x") == 1 and p.index("x", 2) == 7 and p.count("x") == 2
    with pytest.raises(ValueError):
        p.index("y")
    assert p + ["z"] == items + ["z"] and ["z"] + p == ["z"] + items and p + p == items + items
    with pytest.raises(TypeError):
        p + ("z",)
    assert repr(p) == f"PackedList({items!r})"
    assert bool(p) and not PackedList([]) and not EMPTY_LIST and len(EMPTY_LIST) == 0 and list(EMPTY_LIST) == []
    assert PackedList(p) == items and PackedList(iter(items)) == items

    calls = []
    real = PackedList.unpack
    monkeypatch.setattr(PackedList, "unpack", lambda self: calls.append(1) or real(self))
    sub = PackedList.picks(p, b"\x00\x02")
    assert bool(p) and not EMPTY_LIST and bool(sub) and len(sub) == 2
    assert calls == []  # truth (and the length of positions) without decoding
    for read in (iter, list, reversed, lambda x: "x" in x, lambda x: x.index(1), lambda x: x.count(1)):
        calls.clear()
        read(p)
        assert len(calls) == 1, read


def test_equality_is_the_lists():
    items = [1, "a", {"b": [2]}]
    p = PackedList(items)
    assert p == items and items == p and not (p != items) and p == PackedList(list(items))
    assert p == PackedList([1.0, "a", {"b": [2]}])  # equal values, other bytes (as the lists are)
    assert p != [1, "a"] and p != [1, "a", {"b": [3]}] and p != PackedList([1])
    assert p != tuple(items) and tuple(items) != p  # a list is not equal to a tuple
    assert p != "1a" and p is not None and p != {"b": 1}
    assert EMPTY_LIST == [] and [] == EMPTY_LIST and EMPTY_LIST != ()
    with pytest.raises(TypeError):
        hash(p)
    with pytest.raises(TypeError):
        {p}


def test_read_only_and_fresh_values():
    p = PackedList([{"a": [1]}])
    with pytest.raises(TypeError):
        p[0] = 2
    with pytest.raises(TypeError):
        del p[0]
    with pytest.raises(AttributeError):
        p.append(1)
    with pytest.raises(AttributeError):
        p.other = 1
    p[0]["a"].append(2)
    got = p.unpack()
    got.append(3)
    assert p.unpack() == [{"a": [1]}]
    assert copy.copy(p) is p and copy.deepcopy(p) is p


def test_pickle_and_compression():
    sample = load_dataset("fanoutqa:dev").samples[0]
    ev = sample.evidence
    data = pickle.dumps(ev, protocol=pickle.HIGHEST_PROTOCOL)
    back = pickle.loads(data)
    assert type(back) is PackedList and back.packed_bytes == ev.packed_bytes and back == ev
    text = json.dumps(ev.unpack(), ensure_ascii=False, separators=(",", ":")).encode()
    assert ev.packed_bytes[0] == 0x78 and len(ev.packed_bytes) < len(text)  # zlib, where it shrinks
    assert PackedList(["a"]).packed_bytes == b'["a"]'  # kept plain where compressing would not shrink it
    again = pickle.loads(pickle.dumps(sample))  # as the scoring worker gets it
    assert again == sample and again.gold_evidence is again.evidence
    assert type(again.needed_titles) is PackedList and type(again.groups) is PackedRecord


def test_tricky_values_round_trip():
    items = [0.1, -0.0, 1e308, float("inf"), 2**70, "Zürich 東京 😀 \u2028 \x00", "\ud800", [], {}, [[{"": None}]]]
    p = PackedList(items)
    assert same_json(p.unpack(), items) and same_json(pickle.loads(pickle.dumps(p)).unpack(), items)


class Color(enum.IntEnum):
    RED = 1


class Name(str):
    pass


def test_values_json_would_not_give_back_are_kept_as_given():
    for odd in (
        [(1, 2)],  # a tuple would come back a list
        [{1: "int key"}],
        [Color.RED],
        [Name("x")],
        [{1, 2}],
        [object()],
        [10**5000],
    ):
        s = Sample(id="q", question="?", answer=None, evidence=odd, needed_titles=odd, gold_evidence=odd)
        assert s.evidence is odd and s.needed_titles is odd and s.gold_evidence is odd
        with pytest.raises((TypeError, ValueError)):
            PackedList(odd)
    for not_a_list in ((1, 2), "ab", {"a": 1}):
        s = Sample(id="q", question="?", answer=None, needed_titles=not_a_list)
        assert s.needed_titles is not_a_list
    with pytest.raises(TypeError):
        PackedList("ab")
    with pytest.raises(TypeError):
        PackedList({"a": 1})
    cyclic: list = []
    cyclic.append(cyclic)
    assert pack_list(cyclic) is cyclic
    odd_groups = {"g": ("a",)}
    assert Sample(id="q", question="?", answer=None, groups=odd_groups).groups is odd_groups


def test_sample_defaults_and_replace():
    s = Sample(id="q", question="?", answer=None)
    assert s.evidence is EMPTY_LIST and s.gold_evidence is EMPTY_LIST and s.needed_titles is EMPTY_LIST
    assert s.groups is EMPTY and s.history == []
    ev = [{"title": "A"}, {"title": "B"}]
    s = Sample(id="q", question="?", answer=None, evidence=ev, gold_evidence=[ev[1]], groups={"g": ["x"]})
    assert s.gold_evidence._base is s.evidence and s.gold_evidence == [{"title": "B"}]
    moved = dataclasses.replace(s, evidence=[{"title": "C"}])
    assert moved.evidence == [{"title": "C"}] and moved.gold_evidence == [{"title": "B"}]
    assert type(moved.evidence) is PackedList and moved.gold_evidence is s.gold_evidence
    assert dataclasses.replace(s) == s
    grown = dataclasses.replace(s, evidence=s.evidence + [{"title": "D"}])  # to change: a new list
    assert grown.evidence == ev + [{"title": "D"}]
    asdict = dataclasses.asdict(s)
    assert asdict["evidence"] == ev and asdict["groups"] == {"g": ["x"]}


def test_evidence_recall_writes_a_list():
    from harness.agents._search import evidence_recall

    sample = load_dataset("fanoutqa:dev").samples[0]

    class Snapshot:
        def resolve_title(self, title):
            return None

    got = evidence_recall(Snapshot(), sample.needed_titles, [sample.needed_titles[0]])
    assert type(got["needed"]) is list and got["needed"] == sample.needed_titles
    assert json.loads(json.dumps(got))["found"] == [sample.needed_titles[0]]


def held_per_sample(spec: str) -> float:
    load_dataset(spec)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        dataset = load_dataset(spec)
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    return held / len(dataset.samples)


def test_fanoutqa_memory_per_question_went_down(monkeypatch):
    """FanOutQA dev: ~2.7 KB a question with the lists packed, ~5.3 KB with them as lists and dicts."""
    packed = held_per_sample("fanoutqa:dev")

    def raw_only(self):
        if not isinstance(self.raw, PackedRecord):
            self.raw = PackedRecord(self.raw) if self.raw else EMPTY

    monkeypatch.setattr(base.Sample, "__post_init__", raw_only)
    lists = held_per_sample("fanoutqa:dev")
    assert packed < 4 * 1024 and packed < lists - 1.5 * 1024, (packed, lists)


def test_epoch_breakdown_counts_decode_each_question_once(monkeypatch):
    from harness.scoring.epochs import _count_groups

    qs = [
        Sample(id="a", question="?", answer=None, groups={"cat": ["x", "y"], "t": ["1"]}),
        Sample(id="b", question="?", answer=None, groups={"cat": ["x", "x"]}),
        Sample(id="c", question="?", answer=None),
        Sample(id="d", question="?", answer=None, groups={"cat": ["z"]}),
    ]
    breakdown = {"cat": {"x": {"n": 9}, "y": {"n": 9}, "w": {"n": 9}}, "t": {"1": {"n": 9}}}
    calls = []
    real = PackedRecord.unpack
    monkeypatch.setattr(PackedRecord, "unpack", lambda self: calls.append(1) or real(self))
    _count_groups(breakdown, qs)
    assert breakdown == {"cat": {"x": {"n": 2}, "y": {"n": 1}, "w": {"n": 0}}, "t": {"1": {"n": 1}}}
    assert len(calls) == 3  # one decode a question with groups (c has none: the shared EMPTY)
