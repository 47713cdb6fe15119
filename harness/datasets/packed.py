"""A dataset's own record (``Sample.raw``) held as compact JSON bytes and decoded when read.

Loaders keep each question's record untouched for the few readers that need more than the parsed
fields (clustering, FanOutQA's hops, retrieval evaluation, snapshot evidence). As Python objects a
FanOutQA dev record costs ~7 KB; as its JSON, zlib-compressed, ~0.75 KB. A read decodes the whole
record (~23 us for FanOutQA dev), so a reader that wants several keys calls ``unpack()`` once.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterator, Mapping
from typing import Any

# zlib level 1: FanOutQA dev records shrink to a third of their JSON (2.47 -> 0.75 KB; a loaded sample
# 7.0 -> 5.3 KB, 170 MB at 100,000) for ~25 us a record at load (+3 s at 100,000) and ~8 us a read,
# and reads are few (clustering, hops, retrieval evaluation). Kept plain where it would not shrink.
# A plain record starts with "{", a zlib stream with 0x78, so the first byte tells them apart.
_LEVEL = 1
_PLAIN = ord("{")
_SCALARS = frozenset({str, int, float, bool, type(None)})


def _encode(record: Mapping[str, Any]) -> bytes:
    text = json.dumps(record, ensure_ascii=False, separators=(",", ":"))
    # "surrogatepass": a lone surrogate (a "\ud800" escape in the file) survives, as json.loads keeps it
    data = text.encode("utf-8", "surrogatepass")
    packed = zlib.compress(data, _LEVEL)
    return packed if len(packed) < len(data) else data


def _exact(record: dict) -> bool:
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
        data = self._data
        if data[0] != _PLAIN:
            data = zlib.decompress(data)
        return json.loads(data.decode("utf-8", "surrogatepass"))

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
