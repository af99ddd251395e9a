"""Configurations ``<partition_bytes, credit_bytes>`` (and the gradients' precision on the wire) and the candidate grid.

Units are bytes throughout, counted on the wire. The paper's "credit 4X" is
``credit_bytes = 4 * partition_bytes``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30

#: Largest partition or credit accepted (1 TiB): anything above is a unit mistake.
MAX_BYTES = 1 << 40

#: Credit value meaning "no limit on bytes in flight" (plain DDP's behaviour).
UNLIMITED = MAX_BYTES

#: Precisions gradients may travel in: their own (``"fp32"``, exact: the default) or 16 bits
#: (``"bf16"``, ``"fp16"``: cast per message, averaged, cast back, as DDP's compression hooks do).
WIRES = ("fp32", "bf16", "fp16")


def check_wire(value: object, name: str = "wire") -> str:
    """Validate a wire precision given by a user and return it.

    Raises:
        TypeError: ``value`` is not a string.
        ValueError: ``value`` is not one of :data:`WIRES`.
    """
    if not isinstance(value, str):
        raise TypeError(f"{name} must be one of 'fp32', 'bf16', 'fp16', but got {name}={value!r}.")
    if value not in WIRES:
        raise ValueError(f"{name} must be one of 'fp32', 'bf16', 'fp16', but got {name}={value!r}.")
    return value


def check_bytes(name: str, value: object) -> int:
    """Validate a byte count given by a user and return it as ``int``.

    Raises:
        TypeError: ``value`` is not an integer (floats, NaN, bools, strings).
        ValueError: ``value`` is not in ``[1, MAX_BYTES]``.
    """
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            raise TypeError(
                f"{name} must be a positive integer, but got {name}={value!r} "
                f"(a float); pass int({value!r})."
            )
        raise TypeError(
            f"{name} must be a positive integer, but got {name}={value!r}."
        )
    value = int(value)
    if value <= 0:
        raise ValueError(f"{name} must be a positive integer, but got {name}={value}.")
    if value > MAX_BYTES:
        raise ValueError(
            f"{name} must be at most {MAX_BYTES} bytes (1 TiB), but got {name}={value}; "
            "is the unit bytes?"
        )
    return value


@dataclass(frozen=True, order=True)
class Config:
    """One scheduling configuration.

    Args:
        partition_bytes: largest message the scheduler sends; bigger tensors are
            split, smaller neighbouring tensors are fused up to this size.
        credit_bytes: most bytes in flight at once (a lone message larger than
            the credit may still run alone).
        wire: the gradients' precision on the wire, one of :data:`WIRES`
            (default ``"fp32"``: the gradients' own, exact). Both sizes count
            bytes on the wire: at 16 bits a partition holds twice the elements.

    A configuration at the default wire compares, hashes, prints and
    serialises exactly as one of ``<partition_bytes, credit_bytes>`` alone:
    ``to_dict()`` and ``str()`` name the wire only when it is not ``"fp32"``.

    Raises:
        TypeError, ValueError: see :func:`check_bytes` and :func:`check_wire`.
    """

    partition_bytes: int
    credit_bytes: int
    wire: str = "fp32"

    def __post_init__(self) -> None:
        object.__setattr__(self, "partition_bytes", check_bytes("partition_bytes", self.partition_bytes))
        object.__setattr__(self, "credit_bytes", check_bytes("credit_bytes", self.credit_bytes))
        check_wire(self.wire)

    def __hash__(self) -> int:
        # the hash of the two-field configuration at the default wire: sets and dicts of
        # configurations iterate in the same order as before the wire existed
        if self.wire == "fp32":
            return hash((self.partition_bytes, self.credit_bytes))
        return hash((self.partition_bytes, self.credit_bytes, self.wire))

    def __repr__(self) -> str:
        wire = "" if self.wire == "fp32" else f", wire={self.wire!r}"
        return f"Config(partition_bytes={self.partition_bytes}, credit_bytes={self.credit_bytes}{wire})"

    @classmethod
    def from_multiple(cls, partition_bytes: int, credit_multiple: float, wire: str = "fp32") -> "Config":
        """``Config(partition, credit_multiple * partition)``, the paper's "credit kX"."""
        if not isinstance(credit_multiple, (int, float, np.number)) or not math.isfinite(credit_multiple) or credit_multiple <= 0:
            raise ValueError(f"credit_multiple must be a positive finite number, but got credit_multiple={credit_multiple!r}.")
        partition_bytes = check_bytes("partition_bytes", partition_bytes)
        return cls(partition_bytes, min(MAX_BYTES, max(1, int(round(partition_bytes * credit_multiple)))), wire)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Config":
        """Inverse of :meth:`to_dict`; a dict without ``"wire"`` (older records) is at ``"fp32"``."""
        return cls(d["partition_bytes"], d["credit_bytes"], d.get("wire", "fp32"))

    @property
    def credit_multiple(self) -> float:
        return self.credit_bytes / self.partition_bytes

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"partition_bytes": self.partition_bytes, "credit_bytes": self.credit_bytes}
        if self.wire != "fp32":
            out["wire"] = self.wire
        return out

    def __str__(self) -> str:
        wire = "" if self.wire == "fp32" else f", {self.wire}"
        return f"<partition {_human(self.partition_bytes)}, credit {self.credit_multiple:g}X{wire}>"


def _human(n: int) -> str:
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= size:
            return f"{n / size:g} {unit}"
    return f"{n} B"


#: ByteScheduler's defaults: partition 1M float32 parameters, credit 4M parameters.
BYTESCHEDULER_DEFAULT = Config(4 * 1_000_000, 4 * 4_000_000)
#: P3's defaults: 160 KB partitions, credit 1X.
P3_DEFAULT = Config(160_000, 160_000)
#: BytePS's default partition (4,096,000 bytes), credit 1X.
BYTEPS_DEFAULT = Config(4_096_000, 4_096_000)
#: Plain DDP's operating point: 25 MiB buckets, no credit limit.
DDP_DEFAULT = Config(25 * MiB, UNLIMITED)


def doublings(a: Config, b: Config) -> float:
    """Powers of two between ``a`` and ``b``: the larger of their partitions' and their credits' distances."""
    return max(abs(math.log2(a.partition_bytes / b.partition_bytes)), abs(math.log2(a.credit_bytes / b.credit_bytes)))


class SearchSpace:
    """A finite, ordered set of candidate configurations.

    Args:
        candidates: the configurations, at least one, no duplicates.

    Raises:
        ValueError: empty or duplicated candidates.
    """

    def __init__(self, candidates: Iterable[Config]) -> None:
        cands = tuple(candidates)
        if not cands:
            raise ValueError("candidates must hold at least one Config, but got an empty sequence.")
        for c in cands:
            if not isinstance(c, Config):
                raise TypeError(f"candidates must be Config objects, but got {c!r}.")
        if len(set(cands)) != len(cands):
            raise ValueError("candidates must not contain duplicates.")
        self.candidates = cands
        self._index = {c: i for i, c in enumerate(cands)}

    @classmethod
    def grid(cls, partitions: Sequence[int], credit_multiples: Sequence[float]) -> "SearchSpace":
        """Every partition in ``partitions`` crossed with every credit multiple."""
        return cls(dict.fromkeys(Config.from_multiple(p, m) for p in partitions for m in credit_multiples))

    @classmethod
    def default(cls) -> "SearchSpace":
        """The AutoByte space: partitions 4 KiB..1 GiB (powers of two), credit 1X..16X.

        This spans the paper's data-collection ranges (§III-B).
        """
        partitions = [4 * KiB << k for k in range(19)]  # 4 KiB .. 1 GiB
        return cls.grid(partitions, [1, 2, 3, 4, 6, 8, 12, 16])

    @classmethod
    def paper_grid_search(cls, max_partition_bytes: int = 32 * MiB, max_credit_multiple: int = 8) -> "SearchSpace":
        """The paper's ground-truth grid: partition step 2 MB, credit step 1X (§IV-C).

        The first point is 1 MiB (the paper's plots start at partition 1M).
        """
        max_partition_bytes = check_bytes("max_partition_bytes", max_partition_bytes)
        parts = [1 * MiB] + list(range(2 * MiB, max_partition_bytes + 1, 2 * MiB))
        return cls.grid(parts, list(range(1, int(max_credit_multiple) + 1)))

    def __len__(self) -> int:
        return len(self.candidates)

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self.candidates)

    def __getitem__(self, i: int) -> Config:
        return self.candidates[i]

    def __contains__(self, c: object) -> bool:
        return c in self._index

    def index(self, c: Config) -> int:
        try:
            return self._index[c]
        except KeyError:
            raise ValueError(f"config {c} is not in this search space of {len(self)} candidates.") from None

    def nearest(self, c: Config) -> Config:
        """The candidate closest to ``c`` in log-space (used to snap a user's start config)."""
        arr = self.to_array()
        d = np.abs(np.log2(arr[:, 0]) - math.log2(c.partition_bytes)) + np.abs(
            np.log2(arr[:, 1]) - math.log2(c.credit_bytes)
        )
        return self.candidates[int(np.argmin(d))]

    def grid_point(self, c: Config) -> Config | None:
        """The candidate ``c`` counts as: ``c`` itself in the space; outside it, the nearest candidate of its wire
        precision when less than half a grid step away in both knobs (ByteScheduler's default, 4,000,000 bytes,
        beside 4 MiB: the two run within the noise of each other, docs/benchmarks.md 2.23); ``None`` otherwise."""
        if c in self:
            return c
        n = self.nearest(c)
        return n if n.wire == c.wire and doublings(n, c) < 0.5 else None

    def to_array(self) -> np.ndarray:
        """``(len, 2)`` float64 array of ``[partition_bytes, credit_bytes]``."""
        return np.array([[c.partition_bytes, c.credit_bytes] for c in self.candidates], dtype=np.float64)
