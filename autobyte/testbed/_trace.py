"""Bandwidth traces: when each emulated link changes rate, and competing flows.

A trace is a finite list of events. Each event fires at ``at`` iterations
(``unit="it"``, counted by :func:`autobyte.testbed.notify_iteration`) or ``at``
seconds after the workers start (``unit="s"``). After the last rate change the
last rates stay in force.
"""

from __future__ import annotations

import json
import math
import os
import random
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

#: Accepted event units: iterations reported by rank 0, or seconds since start.
UNITS = ("it", "s")

#: Highest rate accepted, in Mbit/s (1 Tbit/s): anything above is a unit mistake.
MAX_MBIT = 1_000_000.0

#: How many phases a generated (step / random walk) trace has unless told.
DEFAULT_N_PHASES = 1000


def check_mbit(name: str, value: object) -> float:
    """Validate a rate in Mbit/s and return it as ``float``.

    Raises:
        TypeError: ``value`` is not a real number.
        ValueError: ``value`` is not finite, not positive, or above 1 Tbit/s.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a positive number of Mbit/s, but got {name}={value!r}.")
    value = float(value)
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive number of Mbit/s, but got {name}={value!r}.")
    if value > MAX_MBIT:
        raise ValueError(
            f"{name} must be at most {MAX_MBIT:g} Mbit/s (1 Tbit/s), but got {name}={value!r}; "
            "is the unit Mbit/s?"
        )
    return value


def _check_at(name: str, at: object, unit: object) -> tuple[float, str]:
    if unit not in UNITS:
        raise ValueError(f"{name}.unit must be one of {UNITS}, but got unit={unit!r}.")
    if isinstance(at, bool) or not isinstance(at, (int, float)) or not math.isfinite(at) or at < 0:
        raise ValueError(f"{name}.at must be a finite number >= 0, but got at={at!r}.")
    if unit == "it" and float(at) != int(at):
        raise ValueError(f"{name}.at must be a whole iteration number when unit='it', but got at={at!r}.")
    return (int(at) if unit == "it" else float(at)), str(unit)


def _check_ranks(name: str, ranks: object) -> tuple[int, ...] | None:
    if ranks is None:
        return None
    if isinstance(ranks, (str, bytes)) or not isinstance(ranks, Iterable):
        raise TypeError(f"{name}.ranks must be None or a list of ranks, but got ranks={ranks!r}.")
    out = tuple(ranks)
    if not out or any(isinstance(r, bool) or not isinstance(r, int) or r < 0 for r in out):
        raise ValueError(f"{name}.ranks must be a non-empty list of ranks >= 0, but got ranks={ranks!r}.")
    return out


@dataclass(frozen=True)
class RateChange:
    """Set the shaped rate of some workers' links at one point of the run.

    Args:
        at: iteration number (``unit="it"``) or seconds since the workers started
            (``unit="s"``) at which the change takes effect.
        up_mbit: rate from the worker to the switch (its upload), in Mbit/s.
        down_mbit: rate from the switch to the worker (its download); defaults
            to ``up_mbit``.
        unit: ``"it"`` or ``"s"`` (default ``"it"``).
        ranks: ranks whose links change; ``None`` (default) means every rank.

    Raises:
        TypeError, ValueError: a rate is not a positive number of Mbit/s, ``at``
            is negative or not whole for ``unit="it"``, ``unit`` is unknown.
    """

    at: float
    up_mbit: float
    down_mbit: float | None = None
    unit: str = "it"
    ranks: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        at, unit = _check_at("RateChange", self.at, self.unit)
        object.__setattr__(self, "at", at)
        object.__setattr__(self, "unit", unit)
        object.__setattr__(self, "up_mbit", check_mbit("up_mbit", self.up_mbit))
        down = self.up_mbit if self.down_mbit is None else self.down_mbit
        object.__setattr__(self, "down_mbit", check_mbit("down_mbit", down))
        object.__setattr__(self, "ranks", _check_ranks("RateChange", self.ranks))

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"at": self.at, "unit": self.unit, "up_mbit": self.up_mbit, "down_mbit": self.down_mbit}
        if self.ranks is not None:
            d["ranks"] = list(self.ranks)
        return d


@dataclass(frozen=True)
class CompetingFlow:
    """A bulk TCP flow between two workers' namespaces that competes for their links.

    It runs from ``src`` to ``dst`` as fast as the shaped links allow, for
    ``duration_s`` seconds, on port ``5201 + index`` in ``dst``'s namespace.

    Args:
        at: iteration (``unit="it"``) or seconds since start (``unit="s"``) when it starts.
        duration_s: how long it sends, in seconds (0 < duration_s <= 3600).
        src: rank whose namespace sends.
        dst: rank whose namespace receives (must differ from ``src``).
        unit: ``"it"`` or ``"s"`` (default ``"s"``).
        until: stop it earlier, at this point (same ``unit`` as ``at``, after
            ``at``); ``None`` (default) lets it run its ``duration_s``. With
            ``unit="it"`` a flow joins and leaves at iteration boundaries.

    Raises:
        ValueError: bad ``at``/``unit``, non-positive or over-long duration,
            negative ranks, ``src == dst``, or ``until`` not after ``at``.
    """

    at: float
    duration_s: float
    src: int
    dst: int
    unit: str = "s"
    until: float | None = None

    def __post_init__(self) -> None:
        at, unit = _check_at("CompetingFlow", self.at, self.unit)
        object.__setattr__(self, "at", at)
        object.__setattr__(self, "unit", unit)
        d = self.duration_s
        if isinstance(d, bool) or not isinstance(d, (int, float)) or not math.isfinite(d) or not 0 < d <= 3600:
            raise ValueError(f"duration_s must be a number of seconds in (0, 3600], but got duration_s={d!r}.")
        object.__setattr__(self, "duration_s", float(d))
        for name in ("src", "dst"):
            r = getattr(self, name)
            if isinstance(r, bool) or not isinstance(r, int) or r < 0:
                raise ValueError(f"{name} must be a rank >= 0, but got {name}={r!r}.")
        if self.src == self.dst:
            raise ValueError(f"src and dst must be different ranks, but got src={self.src}, dst={self.dst}.")
        if self.until is not None:
            until, _ = _check_at("CompetingFlow", self.until, unit)
            if until <= at:
                raise ValueError(f"until must be after at, but got at={at!r}, until={self.until!r}.")
            object.__setattr__(self, "until", until)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"at": self.at, "unit": self.unit, "duration_s": self.duration_s, "src": self.src, "dst": self.dst}
        if self.until is not None:
            d["until"] = self.until
        return d


@dataclass(frozen=True)
class BandwidthTrace:
    """What the emulated network does over a run: rate changes and competing flows.

    The first rate change must be at 0 and apply to every rank: it sets the
    starting rates. Build one with :meth:`constant`, :meth:`step`,
    :meth:`random_walk`, :meth:`from_dict` / :meth:`load` (JSON), or
    :meth:`parse` (the ``autobyte launch --trace`` syntax).

    Args:
        changes: rate changes, first one at 0 for every rank.
        flows: competing flows (default none).

    Raises:
        ValueError: no changes, or the first is not at 0 for all ranks.

    Example:
        >>> t = BandwidthTrace.step([100, 1000], every=20, unit="it", n_phases=4)
        >>> [(c.at, c.up_mbit) for c in t.changes]
        [(0, 100.0), (20, 1000.0), (40, 100.0), (60, 1000.0)]
    """

    changes: tuple[RateChange, ...]
    flows: tuple[CompetingFlow, ...] = field(default=())

    def __post_init__(self) -> None:
        changes = tuple(self.changes)
        flows = tuple(self.flows)
        for c in changes:
            if not isinstance(c, RateChange):
                raise TypeError(f"changes must hold RateChange objects, but got {c!r}.")
        for f in flows:
            if not isinstance(f, CompetingFlow):
                raise TypeError(f"flows must hold CompetingFlow objects, but got {f!r}.")
        if not changes:
            raise ValueError("a bandwidth trace needs at least one rate change, but got changes=().")
        first = changes[0]
        if first.at != 0 or first.ranks is not None:
            raise ValueError(
                "the first rate change of a trace must be at 0 for every rank (it sets the starting rates), "
                f"but got at={first.at!r}, ranks={first.ranks!r}."
            )
        # times must not go back (per clock: iterations and seconds are separate); a
        # trace file out of order is a mistake to report, not to sort silently
        last: dict[str, tuple[int, float]] = {}
        for i, c in enumerate(changes):
            if c.unit in last and c.at < last[c.unit][1]:
                j, at = last[c.unit]
                raise ValueError(
                    f"rate changes must be in time order, but change {i} (at={c.at:g} {c.unit}) comes after "
                    f"change {j} (at={at:g} {c.unit})."
                )
            last[c.unit] = (i, c.at)
        object.__setattr__(self, "changes", changes)
        object.__setattr__(self, "flows", flows)

    # -- constructors -----------------------------------------------------
    @classmethod
    def constant(cls, up_mbit: float, down_mbit: float | None = None) -> "BandwidthTrace":
        """One rate for the whole run."""
        return cls((RateChange(0, up_mbit, down_mbit),))

    @classmethod
    def step(
        cls,
        rates_mbit: Sequence[float | tuple[float, float | None]],
        *,
        every: float,
        unit: str = "it",
        n_phases: int = DEFAULT_N_PHASES,
    ) -> "BandwidthTrace":
        """Cycle through ``rates_mbit`` (each a rate or an ``(up, down)`` pair) every ``every`` units."""
        if isinstance(rates_mbit, (str, bytes)) or not isinstance(rates_mbit, Sequence) or not rates_mbit:
            raise ValueError(f"rates_mbit must be a non-empty list of rates, but got rates_mbit={rates_mbit!r}.")
        _check_every(every, unit)
        _check_n("n_phases", n_phases)
        pairs = [r if isinstance(r, tuple) else (r, None) for r in rates_mbit]
        changes = [
            RateChange(every * i, pairs[i % len(pairs)][0], pairs[i % len(pairs)][1], unit=unit) for i in range(n_phases)
        ]
        return cls(tuple(changes))

    @classmethod
    def random_walk(
        cls,
        low_mbit: float,
        high_mbit: float,
        *,
        every: float,
        unit: str = "it",
        factor: float = 1.5,
        seed: int = 0,
        n_phases: int = DEFAULT_N_PHASES,
    ) -> "BandwidthTrace":
        """A seeded multiplicative random walk in ``[low_mbit, high_mbit]``.

        Every ``every`` units the rate is multiplied or divided by a random
        factor in ``[1, factor]``, reflected at the bounds. It starts at the
        geometric mean of the bounds.
        """
        low = check_mbit("low_mbit", low_mbit)
        high = check_mbit("high_mbit", high_mbit)
        if high <= low:
            raise ValueError(f"high_mbit must be above low_mbit, but got low_mbit={low!r}, high_mbit={high!r}.")
        if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not math.isfinite(factor) or factor <= 1:
            raise ValueError(f"factor must be a number > 1, but got factor={factor!r}.")
        _check_every(every, unit)
        _check_n("n_phases", n_phases)
        rng = random.Random(seed)
        lo, hi = math.log(low), math.log(high)
        x = (lo + hi) / 2
        changes = []
        for i in range(n_phases):
            changes.append(RateChange(every * i, round(math.exp(x), 3), unit=unit))
            x += rng.uniform(-1, 1) * math.log(factor)
            if x > hi:
                x = 2 * hi - x
            if x < lo:
                x = 2 * lo - x
            x = min(max(x, lo), hi)
        return cls(tuple(changes))

    def with_flows(self, flows: Iterable[CompetingFlow]) -> "BandwidthTrace":
        """The same trace with ``flows`` added."""
        return BandwidthTrace(self.changes, self.flows + tuple(flows))

    # -- (de)serialisation ------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {"changes": [c.to_dict() for c in self.changes], "flows": [f.to_dict() for f in self.flows]}

    @classmethod
    def from_dict(cls, data: object) -> "BandwidthTrace":
        """Build from ``{"changes": [{at, up_mbit, down_mbit?, unit?, ranks?}], "flows": [...]}``."""
        if not isinstance(data, dict):
            raise ValueError(f"a trace must be a JSON object with a 'changes' list, but got {type(data).__name__}.")
        unknown = set(data) - {"changes", "flows"}
        if unknown:
            raise ValueError(f"a trace accepts the keys 'changes' and 'flows', but got unknown keys {sorted(unknown)}.")
        changes = data.get("changes")
        flows = data.get("flows", [])
        if not isinstance(changes, list) or not isinstance(flows, list):
            raise ValueError("a trace's 'changes' and 'flows' must be lists.")
        try:
            return cls(
                tuple(RateChange(**_check_keys(c, "changes", ("at", "up_mbit", "down_mbit", "unit", "ranks"))) for c in changes),
                tuple(CompetingFlow(**_check_keys(f, "flows", ("at", "duration_s", "src", "dst", "unit", "until"))) for f in flows),
            )
        except TypeError as exc:
            raise ValueError(f"bad trace entry: {exc}") from exc

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> "BandwidthTrace":
        """Read a JSON trace file (see :meth:`from_dict`)."""
        name = os.fspath(path)
        try:
            with open(path, encoding="utf-8") as fh:
                data = json.load(fh)
        except json.JSONDecodeError as exc:
            raise ValueError(f"trace file {name!r} is not valid JSON: {exc}") from None
        except UnicodeDecodeError as exc:
            raise ValueError(f"trace file {name!r} is not UTF-8 text ({exc.reason} at byte {exc.start}).") from None
        try:
            return cls.from_dict(data)
        except ValueError as exc:
            raise ValueError(f"trace file {name!r}: {exc}") from None

    @classmethod
    def parse(cls, spec: str) -> "BandwidthTrace":
        """Parse the ``--trace`` syntax.

        - ``PATH.json``: a JSON trace file.
        - ``const:UP[/DOWN]``: one rate (Mbit/s), optionally asymmetric.
        - ``step:R1,R2,...@K(it|s)[,n=N]``: cycle the rates (each ``UP`` or
          ``UP/DOWN``) every ``K`` iterations or seconds.
        - ``walk:LOW-HIGH@K(it|s)[,seed=S][,factor=F][,n=N]``: random walk.
        """
        if not isinstance(spec, str) or not spec:
            raise ValueError(f"trace must be a non-empty string, but got trace={spec!r}.")
        if spec.endswith(".json"):
            return cls.load(spec)
        kind, _, body = spec.partition(":")
        try:
            if kind == "const":
                up, down = _parse_rate(body)
                return cls.constant(up, down)
            if kind == "step":
                rates_s, every, unit, opts = _split_at(body, {"n"})
                rates = [_parse_rate(r) for r in rates_s.split(",")]
                return cls.step(rates, every=every, unit=unit, n_phases=int(opts.get("n", DEFAULT_N_PHASES)))
            if kind == "walk":
                bounds, every, unit, opts = _split_at(body, {"n", "seed", "factor"})
                m = re.fullmatch(r"([0-9.eE+]+)-([0-9.eE+]+)", bounds)
                if not m:
                    raise ValueError(f"expected LOW-HIGH in Mbit/s, got {bounds!r}")
                return cls.random_walk(
                    float(m.group(1)),
                    float(m.group(2)),
                    every=every,
                    unit=unit,
                    seed=int(opts.get("seed", 0)),
                    factor=float(opts.get("factor", 1.5)),
                    n_phases=int(opts.get("n", DEFAULT_N_PHASES)),
                )
        except (ValueError, TypeError) as exc:
            raise ValueError(f"bad trace {spec!r}: {exc}") from exc
        raise ValueError(
            f"trace must be a .json file or start with 'const:', 'step:' or 'walk:', but got trace={spec!r}."
        )

    # -- queries ----------------------------------------------------------
    def iteration_boundaries(self) -> list[int]:
        """Sorted iterations at which something happens (what ``notify_iteration`` must wait on)."""
        ats = {int(c.at) for c in self.changes if c.unit == "it" and c.at > 0}
        ats |= {int(f.at) for f in self.flows if f.unit == "it"}
        ats |= {int(f.until) for f in self.flows if f.unit == "it" and f.until is not None}
        return sorted(ats)

    def check_ranks(self, n_workers: int) -> None:
        """Raise ``ValueError`` when an event names a rank outside ``range(n_workers)``."""
        for c in self.changes:
            for r in c.ranks or ():
                if r >= n_workers:
                    raise ValueError(f"trace change at {c.at}{c.unit} names rank {r}, but there are only {n_workers} workers.")
        for f in self.flows:
            for r in (f.src, f.dst):
                if r >= n_workers:
                    raise ValueError(f"competing flow at {f.at}{f.unit} names rank {r}, but there are only {n_workers} workers.")


def parse_flow(spec: str) -> CompetingFlow:
    """Parse ``--flow at=AT(it|s),src=R,dst=R,s=SECONDS``, e.g. ``at=40it,src=1,dst=0,s=5``."""
    fields: dict[str, str] = {}
    for part in (spec or "").split(","):
        k, eq, v = part.partition("=")
        fields[k.strip()] = v.strip() if eq else ""
    m = re.fullmatch(r"([0-9.]+)(it|s)", fields.get("at", ""))
    if set(fields) != {"at", "src", "dst", "s"} or not m:
        raise ValueError(
            "flow must look like at=AT(it|s),src=RANK,dst=RANK,s=SECONDS (e.g. 'at=40it,src=1,dst=0,s=5'), "
            f"but got flow={spec!r}."
        )
    try:
        src, dst, dur = int(fields["src"]), int(fields["dst"]), float(fields["s"])
    except ValueError:
        raise ValueError(f"flow's src and dst must be ranks and s a number of seconds, but got flow={spec!r}.") from None
    at = float(m.group(1))
    unit = m.group(2)
    return CompetingFlow(int(at) if unit == "it" and at.is_integer() else at, dur, src, dst, unit=unit)


def _check_keys(entry: object, where: str, allowed: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(entry, dict):
        raise ValueError(f"each entry of '{where}' must be a JSON object, but got {entry!r}.")
    unknown = set(entry) - set(allowed)
    if unknown:
        raise ValueError(f"entries of '{where}' accept the keys {list(allowed)}, but got unknown keys {sorted(unknown)}.")
    return entry


def _check_every(every: object, unit: str) -> None:
    if unit not in UNITS:
        raise ValueError(f"unit must be one of {UNITS}, but got unit={unit!r}.")
    if isinstance(every, bool) or not isinstance(every, (int, float)) or not math.isfinite(every) or every <= 0:
        raise ValueError(f"every must be a positive number, but got every={every!r}.")
    if unit == "it" and float(every) != int(every):
        raise ValueError(f"every must be a whole number of iterations when unit='it', but got every={every!r}.")


def _check_n(name: str, n: object) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 1_000_000:
        raise ValueError(f"{name} must be an integer in [1, 1000000], but got {name}={n!r}.")


def _parse_rate(text: str) -> tuple[float, float | None]:
    up, sep, down = text.strip().partition("/")
    try:
        return float(up), (float(down) if sep else None)
    except ValueError:
        raise ValueError(f"expected a rate in Mbit/s like '100' or '100/20' (up/down), got {text!r}") from None


def _split_at(body: str, allowed: set[str]) -> tuple[str, float, str, dict[str, str]]:
    head, sep, tail = body.rpartition("@")
    if not sep:
        raise ValueError("missing '@K(it|s)': how often the rate changes")
    parts = tail.split(",")
    m = re.fullmatch(r"([0-9.]+)(it|s)", parts[0].strip())
    if not m:
        raise ValueError(f"expected the period as K followed by 'it' or 's', got {parts[0]!r}")
    opts: dict[str, str] = {}
    for p in parts[1:]:
        k, eq, v = p.partition("=")
        if not eq or k.strip() not in allowed:
            raise ValueError(f"unknown option {p!r}; accepted: {sorted(allowed)}")
        opts[k.strip()] = v.strip()
    every = float(m.group(1))
    unit = m.group(2)
    return head, (int(every) if unit == "it" and every.is_integer() else every), unit, opts
