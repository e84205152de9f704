"""Argument types for the CLI: numbers with their ranges, and choices taken from the code's enums.

A wrong value is refused by argparse with one line naming the flag, the value and what is allowed,
never silently replaced by a default (``--context 0`` once meant 2048) or passed on to a query that
then finds nothing (``--status failed`` once printed "(no rows)").
"""

from __future__ import annotations

import argparse
import enum
import math
from collections.abc import Callable, Iterable


def int_range(low: int = 1, high: int | None = None, what: str = "") -> Callable[[str], int]:
    """An argparse type: a whole number in ``[low, high]``."""
    unit = f" {what}" if what else ""
    of_unit = f" of{unit}" if what else ""

    def parse(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid int value: {text!r} (a whole number{of_unit})") from None
        if low == 1 and high is None and value < 1:
            raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number")
        if value < low or (high is not None and value > high):
            allowed = f"at least {low}" if high is None else f"from {low} to {high}"
            raise argparse.ArgumentTypeError(f"{text!r} is out of range; {allowed}{unit}")
        return value

    parse.__name__ = "int"  # argparse names the type in some messages
    return parse


def float_range(low: float = 0.0, high: float | None = None, low_open: bool = False,
                what: str = "") -> Callable[[str], float]:
    """An argparse type: a finite number ``>= low`` (``> low`` when ``low_open``), ``<= high`` if given."""
    unit = f" {what}" if what else ""

    def parse(text: str) -> float:
        try:
            value = float(text.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid number: {text!r}") from None
        too_low = value <= low if low_open else value < low
        if not math.isfinite(value) or too_low or (high is not None and value > high):
            bound = f"more than {low:g}" if low_open else f"{low:g} or more"
            if high is not None:
                bound += f" and at most {high:g}"
            raise argparse.ArgumentTypeError(f"{text!r} is out of range; it must be {bound}{unit}")
        return value

    parse.__name__ = "float"
    return parse


positive_int = int_range(1)
non_negative_float = float_range(0.0)
positive_float = float_range(0.0, low_open=True)


def enum_values(kind: type[enum.Enum]) -> tuple[str, ...]:
    """The values of an enum, for ``choices=`` (argparse then lists them in --help and in its error)."""
    return tuple(str(member.value) for member in kind)


def comma_list(text: str) -> tuple[str, ...]:
    """``a,b, c`` as ('a', 'b', 'c'); empty items dropped."""
    return tuple(item.strip() for item in text.split(",") if item.strip())


def joined(values: Iterable[str]) -> str:
    return ", ".join(values) or "(none)"
