"""Argument checks shared by every public entry point (one rule each, clear messages)."""

from __future__ import annotations

import math
from typing import Any, Literal, overload


def check_int(name: str, value: Any, *, minimum: int = 1) -> int:
    """``value`` as int if it is an integer >= ``minimum`` (bools refused)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        rule = "a positive integer" if minimum == 1 else "a non-negative integer" if minimum == 0 else f"an integer >= {minimum}"
        raise ValueError(f"{name} must be {rule}, but got {name}={value!r}.")
    return int(value)


def check_positive(name: str, value: Any, unit: str = "") -> float:
    """``value`` as float if it is a finite number > 0 (bools refused)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        what = f"a positive number of {unit}" if unit else "a positive number"
        raise ValueError(f"{name} must be {what}, but got {name}={value!r}.")
    return float(value)


def check_in_range(name: str, value: Any, low: float, high: float) -> float:
    """``value`` as float if it is a finite number in ``[low, high]`` (bools refused)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or not low <= value <= high:
        raise ValueError(f"{name} must be a finite number in [{low:g}, {high:g}], but got {name}={value!r}.")
    return float(value)


@overload
def check_fraction(name: str, value: Any, upper: float, *, optional: Literal[False] = False,
                   lowest: float | None = None) -> float: ...


@overload
def check_fraction(name: str, value: Any, upper: float, *, optional: Literal[True],
                   lowest: float | None = None) -> float | None: ...


def check_fraction(name: str, value: Any, upper: float, *, optional: bool = False,
                   lowest: float | None = None) -> float | None:
    """``value`` as float if it is a finite number in ``(0, upper)``, or ``[lowest, upper)`` when ``lowest`` is given
    (bools refused); ``None`` passes with ``optional``."""
    if optional and value is None:
        return None
    ok = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value) and value < upper \
        and (0 < value if lowest is None else lowest <= value)
    if not ok:
        span = f"(0, {upper:g})" if lowest is None else f"[{lowest:g}, {upper:g})"
        raise ValueError(f"{name} must be {'None or ' if optional else ''}a number in {span}, but got {name}={value!r}.")
    return float(value)


def check_bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, but got {name}={value!r}.")
    return value
