"""A dataset's own record (``Sample.raw``) and a sample's lists (``evidence``, ``gold_evidence``,
``needed_titles``) held as compact JSON bytes and decoded when read.

Loaders keep each question's record untouched for the few readers that need more than the parsed
fields (clustering, FanOutQA's hops, retrieval evaluation, snapshot evidence). As Python objects a
FanOutQA dev record costs ~7 KB; as its JSON, zlib-compressed, ~0.75 KB. A read decodes the whole
record (~23 us for FanOutQA dev), so a reader that wants several keys calls ``unpack()`` once.
``PackedList`` does the same for a list: FanOutQA's evidence entries are ~3 KB of dicts a question,
~0.2 KB as bytes; a sublist of another (gold evidence among the evidence) is held as positions.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

# zlib level 1: FanOutQA dev records shrink to a third of their JSON (2.47 -> 0.75 KB; a loaded sample
# 7.0 -> 5.3 KB, 170 MB at 100,000) for ~25 us a record at load (+3 s at 100,000) and ~8 us a read,
# and reads are few (clustering, hops, retrieval evaluation). Kept plain where it would not shrink.
# A plain record starts with "{" (a list with "["), a zlib stream with 0x78: the first byte tells them apart.
_LEVEL = 1
_PLAIN = ord("{")
_PLAIN_LIST = ord("[")
# Shorter JSON is kept plain without trying: zlib's 6 bytes of frame leave next to nothing to gain there
# (a FanOutQA question's groups, ~36 bytes, never shrink), and each try costs ~3 us.
_SHORT = 64
_SCALARS = frozenset({str, int, float, bool, type(None)})


def _encode(record: Mapping[str, Any] | list[Any]) -> bytes:
    text = json.dumps(record, ensure_ascii=False, separators=(",", ":"))
    # "surrogatepass": a lone surrogate (a "\ud800" escape in the file) survives, as json.loads keeps it
    data = text.encode("utf-8", "surrogatepass")
    if len(data) < _SHORT:
        return data
    packed = zlib.compress(data, _LEVEL)
    return packed if len(packed) < len(data) else data


def _decode(data: bytes, plain: int) -> Any:
    if data[0] != plain:
        data = zlib.decompress(data)
    return json.loads(data.decode("utf-8", "surrogatepass"))


def _exact(record: dict | list) -> bool:
    """Whether JSON gives ``record`` back as it is: only dicts with str keys, lists, str, int, float,
    bool and None, of exactly those types (a tuple would come back a list, an int key a str, an
    IntEnum a plain int)."""
    stack = [record]
    while stack:
        cur = stack.pop()
        if type(cur) is dict:
            for key in cur:
                if type(key) is not str:
                    return False
            values = cur.values()
        else:
            values = cur
        for value in values:
            kind = type(value)
            if kind is dict or kind is list:
                stack.append(value)
            elif kind not in _SCALARS:
                return False
    return True


class PackedRecord(Mapping[str, Any]):
    """A read-only mapping over a JSON object kept as compact bytes. Every read decodes the whole
    record: ``keys()``, ``items()``, ``values()`` and ``unpack()`` decode once, ``record[key]``,
    ``get`` and ``in`` once each; ``dict(record)`` decodes once per key, so use ``unpack()``. What a
    read returns is a fresh object: changing it changes nothing here."""

    __slots__ = ("_data",)
    __hash__ = None  # like the dict it stands for

    def __init__(self, record: Mapping[str, Any]):
        """``record``: a dict of JSON values (what ``json.loads`` gives). Anything JSON would not
        give back exactly (tuples, non-str keys, subclasses, objects) raises TypeError; a cycle or an
        int too long to write raises ValueError."""
        if isinstance(record, PackedRecord):
            self._data = record._data
            return
        if not isinstance(record, Mapping):
            raise TypeError(f"PackedRecord holds a mapping, not {type(record).__name__}")
        if type(record) is not dict:
            record = dict(record.items())
        data = _encode(record)  # first: it refuses cycles, which _exact would walk forever
        if not _exact(record):
            raise TypeError("the record holds values JSON would not give back as they are")
        self._data = data

    @classmethod
    def parsed(cls, record: dict[str, Any]) -> PackedRecord:
        """A record ``json.loads`` (or ``JSONDecoder.raw_decode``) just gave, packed without the walk
        that checks its types (JSON gives only its own; ~12 us of a FanOutQA dev record's ~60)."""
        if type(record) is not dict:
            raise TypeError(f"PackedRecord holds a JSON object, not {type(record).__name__}")
        obj = cls.__new__(cls)
        obj._data = _encode(record)
        return obj

    @classmethod
    def from_bytes(cls, data: bytes) -> PackedRecord:
        """A record from what ``packed_bytes`` gave (pickling)."""
        obj = cls.__new__(cls)
        obj._data = bytes(data)
        return obj

    @property
    def packed_bytes(self) -> bytes:
        """The stored form: the record's compact JSON, zlib-compressed where that is smaller."""
        return self._data

    def unpack(self) -> dict[str, Any]:
        """The record as a fresh dict (one decode)."""
        return _decode(self._data, _PLAIN)

    def __getitem__(self, key: str) -> Any:
        return self.unpack()[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.unpack().get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self.unpack()

    def __iter__(self) -> Iterator[str]:
        return iter(self.unpack())

    def __len__(self) -> int:
        return len(self.unpack())

    def __bool__(self) -> bool:
        return self._data != b"{}"  # the empty record is never compressed (it would grow)

    def keys(self):  # type: ignore[override]
        return self.unpack().keys()

    def items(self):  # type: ignore[override]
        return self.unpack().items()

    def values(self):  # type: ignore[override]
        return self.unpack().values()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PackedRecord):
            return self._data == other._data or self.unpack() == other.unpack()
        if isinstance(other, dict):
            return self.unpack() == other
        if isinstance(other, Mapping):
            return self.unpack() == dict(other.items())
        return NotImplemented

    def __repr__(self) -> str:
        return f"PackedRecord({self.unpack()!r})"

    def __reduce__(self):
        return (_from_bytes, (self._data,))

    def __copy__(self) -> PackedRecord:
        return self  # immutable

    def __deepcopy__(self, memo: dict) -> PackedRecord:
        return self


def _from_bytes(data: bytes) -> PackedRecord:
    return PackedRecord.from_bytes(data)


EMPTY = PackedRecord({})


def pack_record(record: Any) -> Any:
    """``record`` as a PackedRecord where JSON holds it exactly (a dict of JSON values), else as it is
    (a plugin's record with tuples or objects in it stays a dict); an empty dict is the shared EMPTY."""
    if type(record) is not dict:
        return record
    if not record:
        return EMPTY
    try:
        return PackedRecord(record)
    except (TypeError, ValueError, UnicodeError):
        return record


class PackedList(Sequence[Any]):
    """A read-only sequence over a JSON list kept as compact bytes (zlib-compressed where that is
    smaller), or over some entries of another PackedList, kept as their positions in it. It compares
    equal to the list it stands for (``==`` with a list or another PackedList), and every read decodes
    the whole list: ``iter``, ``list(x)``, ``in``, ``index``, ``count``, ``reversed``, ``+`` and
    ``unpack()`` decode once, ``x[i]`` once each (so a reader that walks it several times takes
    ``unpack()`` or ``list(x)`` first); ``len`` and ``bool`` decode nothing. What a read returns is
    fresh: changing it changes nothing here. Not JSON-serialisable as it is: write ``unpack()``."""

    # _data: the JSON bytes, or (picks) one byte a position into _base; _len: the length, kept so that
    # len() (which list(x) asks first) need not decode
    __slots__ = ("_data", "_base", "_len")
    __hash__ = None  # like the list it stands for

    def __init__(self, items: Iterable[Any]):
        """``items``: a list of JSON values (what ``json.loads`` gives); any other iterable is read as
        a list first. Anything JSON would not give back exactly raises TypeError, a cycle or an int too
        long to write ValueError."""
        if isinstance(items, PackedList):
            self._data, self._base, self._len = items._data, items._base, items._len
            return
        if isinstance(items, (str, bytes, Mapping)):
            raise TypeError(f"PackedList holds a list, not {type(items).__name__}")
        if type(items) is not list:
            items = list(items)
        data = _encode(items)  # first: it refuses cycles, which _exact would walk forever
        if not _exact(items):
            raise TypeError("the list holds values JSON would not give back as they are")
        self._data, self._base, self._len = data, None, len(items)

    @classmethod
    def from_bytes(cls, data: bytes, length: int | None = None) -> PackedList:
        """A list from what ``packed_bytes`` gave (pickling); ``length``: its length where known."""
        obj = cls.__new__(cls)
        obj._data, obj._base = bytes(data), None
        obj._len = len(_decode(obj._data, _PLAIN_LIST)) if length is None else length
        return obj

    @classmethod
    def picks(cls, base: PackedList, positions: bytes) -> PackedList:
        """The entries of ``base`` at ``positions`` (each 0-255), in that order."""
        if base._base is not None:  # positions into positions: resolve to the stored list
            positions, base = bytes(base._data[i] for i in positions), base._base
        obj = cls.__new__(cls)
        obj._data, obj._base = bytes(positions), base
        obj._len = len(obj._data)
        return obj

    @property
    def packed_bytes(self) -> bytes:
        """The list's compact JSON, zlib-compressed where that is smaller (picks: encoded here)."""
        return self._data if self._base is None else _encode(self.unpack())

    def unpack(self) -> list[Any]:
        """The list, fresh (one decode)."""
        base = self._base
        if base is None:
            return _decode(self._data, _PLAIN_LIST)
        items = base.unpack()
        return [items[i] for i in self._data]

    def __getitem__(self, index):  # an int: the entry; a slice: a list, as a list's slice is
        return self.unpack()[index]

    def __len__(self) -> int:
        return self._len

    def __bool__(self) -> bool:
        return self._len > 0

    def __iter__(self) -> Iterator[Any]:
        return iter(self.unpack())

    def __reversed__(self) -> Iterator[Any]:
        return reversed(self.unpack())

    def __contains__(self, value: object) -> bool:
        return value in self.unpack()

    def index(self, value: Any, *args: Any) -> int:
        return self.unpack().index(value, *args)

    def count(self, value: Any) -> int:
        return self.unpack().count(value)

    def __add__(self, other: Any) -> list[Any]:
        if isinstance(other, PackedList):
            other = other.unpack()
        return self.unpack() + other if isinstance(other, list) else NotImplemented

    def __radd__(self, other: Any) -> list[Any]:
        return other + self.unpack() if isinstance(other, list) else NotImplemented

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PackedList):
            if self._base is other._base and self._data == other._data:
                return True
            return self.unpack() == other.unpack()
        if isinstance(other, list):
            return self.unpack() == other
        return NotImplemented  # as a list, unequal to a tuple

    def __repr__(self) -> str:
        return f"PackedList({self.unpack()!r})"

    def __reduce__(self):
        if self._base is None:
            return (_list_from_bytes, (self._data, self._len))
        return (PackedList.picks, (self._base, self._data))  # pickle keeps the base shared

    def __copy__(self) -> PackedList:
        return self  # immutable

    def __deepcopy__(self, memo: dict) -> PackedList:
        return self


def _list_from_bytes(data: bytes, length: int | None = None) -> PackedList:
    return PackedList.from_bytes(data, length)


EMPTY_LIST = PackedList([])


def pack_list(items: Any) -> Any:
    """``items`` as a PackedList where JSON holds it exactly (a list of JSON values), else as it is;
    an empty list is the shared EMPTY_LIST."""
    if type(items) is not list:
        return items
    if not items:
        return EMPTY_LIST
    try:
        return PackedList(items)
    except (TypeError, ValueError, UnicodeError):
        return items


def pack_sublist(items: Any, source: Any, packed: Any) -> Any:
    """``items`` packed (``pack_list``); where ``source`` is a list, ``packed`` it as a PackedList and
    every entry of ``items`` one of ``source``'s (the same object), held as positions into ``packed``
    (or as ``packed`` itself where it is all of it, in order): gold evidence is stored once, in the
    evidence."""
    if type(items) is not list or not items or type(source) is not list or not isinstance(packed, PackedList):
        return pack_list(items)
    if items is source:
        return packed
    if len(source) > 256:  # a position is one byte
        return pack_list(items)
    where: dict[int, int] = {}
    for n, entry in enumerate(source):
        where.setdefault(id(entry), n)
    try:
        positions = bytes(where[id(entry)] for entry in items)
    except KeyError:  # an entry of its own
        return pack_list(items)
    if len(positions) == len(source) and positions == bytes(range(len(source))):
        return packed
    return PackedList.picks(packed, positions)
