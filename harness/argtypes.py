"""argparse types that refuse out-of-range numbers at parse time, with one line naming the option
(``harness run`` options are checked by the pydantic config instead, which YAML files go through too)."""

from __future__ import annotations

import argparse
import math


def number(kind: type, low: float | None = None, high: float | None = None, low_open: bool = False):
    """``type=number(int, 1, 10**6)``: a finite ``kind`` within [low, high] (``low_open``: > low)."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a{'n integer' if kind is int else ' number'}") from None
        if isinstance(value, float) and not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be a finite number, not {text!r}")
        if low is not None and (value <= low if low_open else value < low):
            raise argparse.ArgumentTypeError(f"must be {'>' if low_open else '>='} {low:g}, not {text}")
        if high is not None and value > high:
            raise argparse.ArgumentTypeError(f"must be <= {high:g}, not {text}")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in its messages
    return parse


def int_list(low: int = 1, high: int = 100_000_000):
    """``"2048,4096"`` -> [2048, 4096], each within [low, high]."""
    one = number(int, low, high)

    def parse(text: str) -> list[int]:
        items = [x.strip() for x in text.split(",") if x.strip()]
        if not items:
            raise argparse.ArgumentTypeError("expected comma-separated integers")
        return [one(x) for x in items]

    parse.__name__ = "list of integers"
    return parse


__all__ = ["int_list", "number"]
