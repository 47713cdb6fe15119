"""What a number of a metric's aggregate is, as the metric declares it (``declare(kinds=...)``), never
guessed from the values it happens to take:

* ``share(scale)``: the share of questions for which a per-question indicator is 1 (EM, strict
  accuracy, a judge's verdict), times ``scale`` (1, or 100 for a percentage): the **Wilson** interval;
* ``mean(scale, per_question)``: a mean of per-question values bounded by 0 and a perfect score
  ``scale`` (F1, ROUGE, recall; TopiOCQA's x100 F1: ``mean(100, per_question=1)``, its values 0..1
  times 100): the normal interval, clipped to [0, scale];
* ``count(unit)``: a mean per question of things counted (searches, model calls, tokens), or with
  ``total=True`` a number of things (TopiOCQA's turns scored: no interval): never below 0;
* ``money(unit)``: a mean cost per question (USD): never below 0;
* ``unbounded()``: any other number (BLEURT; what a plugin that declares nothing gets): the normal
  interval, unclipped.

Whatever the kind, a number whose values have no spread (all equal, one value, one cluster) has no
standard error (``± n/a``); only a share keeps an interval then (Wilson's needs no spread: 0 of 20
is [0, 0.161], not certainty). A number that is no mean of per-question values (corpus BLEU) is
bootstrapped through the metric's own aggregate whatever its kind.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Literal

KindName = Literal["share", "mean", "count", "money", "unbounded"]
KIND_NAMES: tuple[str, ...] = ("share", "mean", "count", "money", "unbounded")


@dataclass(frozen=True)
class Kind:
    """One number's kind (see the module). ``scale``: a perfect score (share, mean); ``per_question``:
    the scale of the per-question values a mean averages (the number is ``scale / per_question``
    times their mean); ``unit``: what a count or money counts; ``total``: a count that is a number of
    things, not a mean per question (no interval)."""

    name: KindName
    scale: float | None = None
    per_question: float | None = None
    unit: str | None = None
    total: bool = False

    def __post_init__(self) -> None:
        if self.name not in KIND_NAMES:
            raise ValueError(f"unknown kind {self.name!r} (known: {', '.join(KIND_NAMES)})")
        bounded = self.name in ("share", "mean")
        if bounded and not (isinstance(self.scale, (int, float)) and math.isfinite(self.scale) and self.scale > 0):
            raise ValueError(f"a {self.name} needs a positive scale (a perfect score: 1 or 100), got {self.scale!r}")
        if not bounded and self.scale is not None:
            raise ValueError(f"a {self.name} has no scale (a perfect score); only a share or a mean has one")
        if self.per_question is not None and not (self.name == "mean" and self.per_question > 0):
            raise ValueError("per_question (the per-question values' scale) is a positive number, for a mean only")
        if self.total and self.name != "count":
            raise ValueError("total=True is for a count (a number of things, not a mean per question)")

    @property
    def times(self) -> float:
        """The number over the mean of its per-question values: 100 for TopiOCQA's x100 EM/F1, else 1."""
        if self.name == "share":
            return float(self.scale)
        if self.name == "mean" and self.per_question is not None:
            return float(self.scale) / float(self.per_question)
        return 1.0

    @property
    def bounds(self) -> tuple[float, float] | None:
        """The range the number lies in: [0, scale] for a share or a mean, [0, inf) for a count or
        money, None (the whole line) when unbounded."""
        if self.name in ("share", "mean"):
            return (0.0, float(self.scale))
        if self.name in ("count", "money"):
            return (0.0, math.inf)
        return None

    @property
    def perfect(self) -> float | None:
        """A perfect score (tables and figures draw their axes to it), None for a count, money, or unbounded."""
        return float(self.scale) if self.name in ("share", "mean") else None

    def record(self) -> dict[str, object]:
        """The kind as a results file records it (``Kind.from_record`` reads it back)."""
        out: dict[str, object] = {"name": self.name}
        for key in ("scale", "per_question", "unit"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.total:
            out["total"] = True
        return out

    @classmethod
    def from_record(cls, record: dict[str, object]) -> "Kind":
        return cls(**record)  # type: ignore[arg-type]

    def text(self) -> str:
        """How a table labels the number's scale: ``0-1``, ``0-100``, the unit, or ``unbounded``."""
        if self.name in ("share", "mean"):
            return f"0-{self.scale:g}"
        if self.name in ("count", "money"):
            return self.unit or self.name
        return "unbounded"


def share(scale: float = 1.0) -> Kind:
    """The share of questions whose per-question indicator is 1, times ``scale`` (Wilson)."""
    return Kind("share", float(scale))


def mean(scale: float = 1.0, per_question: float | None = None) -> Kind:
    """A mean of per-question values in [0, ``per_question``] (default: ``scale``), times
    ``scale / per_question``: it lies in [0, ``scale``]."""
    return Kind("mean", float(scale), None if per_question is None else float(per_question))


def count(unit: str = "items", total: bool = False) -> Kind:
    """Things counted: a mean per question (searches), or ``total`` a number of things (turns scored)."""
    return Kind("count", unit=unit, total=total)


def money(unit: str = "USD") -> Kind:
    """A mean cost per question."""
    return Kind("money", unit=unit)


def unbounded() -> Kind:
    """Any number with no declared range: what a metric that declares nothing gets."""
    return Kind("unbounded")


UNBOUNDED = unbounded()


def key_path(text: str) -> tuple[str, ...]:
    """A declared leaf's key path: split at each dot not followed by a digit (``acc.loose`` is two
    keys; set-f1's ``f1_ge_0.5`` and the indicator ``f1>=0.5`` are one)."""
    return tuple(re.split(r"\.(?!\d)", text))


@dataclass(frozen=True)
class Kinds:
    """A metric's declared kinds: ``default`` for every number, ``leaves`` for some (a key path of
    its aggregate, ``acc.strict``, or a prefix of several, ``rouge``, ``by_judge``; the longest
    declared prefix of a number's path decides)."""

    default: Kind = UNBOUNDED
    leaves: tuple[tuple[tuple[str, ...], Kind], ...] = field(default_factory=tuple)

    @classmethod
    def of(cls, default: Kind | None = None, leaves: dict[str, Kind] | None = None) -> "Kinds":
        found = []
        for path, kind in (leaves or {}).items():
            if not isinstance(kind, Kind):
                raise ValueError(f"the kind of {path!r}: {kind!r} is not a Kind (harness.scoring.kinds: share, mean, ...)")
            found.append((key_path(path), kind))
        if default is not None and not isinstance(default, Kind):
            raise ValueError(f"kind={default!r} is not a Kind (harness.scoring.kinds: share, mean, ...)")
        return cls(default or UNBOUNDED, tuple(found))

    def record(self) -> dict[str, object]:
        """As ``declare(kind=..., kinds=...)`` takes them, recorded (``Kinds.from_record``)."""
        return {"kind": self.default.record(), "kinds": {".".join(p): k.record() for p, k in self.leaves}}

    @classmethod
    def from_record(cls, record: dict[str, object]) -> "Kinds":
        leaves = record.get("kinds") or {}
        default = record.get("kind")
        return cls.of(
            Kind.from_record(default) if isinstance(default, dict) else None,
            {path: Kind.from_record(kind) for path, kind in leaves.items()},  # type: ignore[union-attr]
        )

    def of_path(self, path: tuple[str, ...] | list[str] | str) -> Kind:
        """The kind of the number at ``path`` (a key path, or its dotted text)."""
        parts = key_path(path) if isinstance(path, str) else tuple(path)
        best: tuple[int, Kind] = (-1, self.default)
        for declared, kind in self.leaves:
            if parts[: len(declared)] == declared and len(declared) > best[0]:
                best = (len(declared), kind)
        return best[1]
