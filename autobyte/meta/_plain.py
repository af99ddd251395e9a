"""Plain types for the tuner's state and one range check, shared by its policies (numpy only)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from autobyte.core.space import Config


def _cfg(c: Config) -> list[int]:
    return [c.partition_bytes, c.credit_bytes]


def _check_range(name: str, value: object, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or not low <= value <= high:
        raise ValueError(f"{name} must be a number in [{low:g}, {high:g}], but got {name}={value!r}.")
    return float(value)


def _arr(a: np.ndarray) -> dict[str, Any]:
    """A numpy array as plain types; float values survive JSON exactly (shortest repr round-trips)."""
    a = np.asarray(a)
    return {"dtype": a.dtype.str, "shape": list(a.shape), "data": a.ravel().tolist()}


def _unarr(d: dict[str, Any]) -> np.ndarray:
    return np.asarray(d["data"], dtype=np.dtype(d["dtype"])).reshape(d["shape"])
