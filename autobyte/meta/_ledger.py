"""What the tuner measured, filed by regime (set of conditions); regimes are remembered (numpy only).

Regime *detection* is not here: the controller's one detector
(:class:`~autobyte.core.regime.RegimeDetector`) sets
``Observation.regime_changed``; the ledger only decides which regime a
window belongs to, and recalls a past regime when its conditions return.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autobyte.core.space import Config

from ._plain import _cfg, _check_range


@dataclass
class Regime:
    """What was measured in one set of conditions.

    ``measured`` maps a configuration to ``[speed, windows averaged (a
    trial ended at a check counts its share of a window), window index of the
    last measurement]``; ``durations`` the length in iterations
    of each past occurrence of this regime.
    """

    ident: int
    measured: dict[Config, list[float]] = field(default_factory=dict)
    windows: int = 0
    started: int = 0
    durations: list[int] = field(default_factory=list)
    #: trials in a row here that did not find a faster configuration
    misses: int = 0
    #: the candidates of this regime's search (:class:`~autobyte.meta._search.Search`), ``None`` before one starts
    shortlist: list[Config] | None = None
    #: what this regime's race decided on (``None`` before it ends): held here, the race is not run again in these conditions
    winner: Config | None = None

    def speeds(self, stale_windows: int) -> dict[Config, float]:
        """Measurements not older than ``stale_windows`` windows of this regime."""
        return {c: v[0] for c, v in self.measured.items() if self.windows - v[2] <= stale_windows}

    def best(self) -> Config | None:
        return max(self.measured, key=lambda c: self.measured[c][0]) if self.measured else None

    def to_dict(self) -> dict[str, Any]:
        return {"ident": self.ident, "measured": [_cfg(c) + list(v) for c, v in self.measured.items()],
                "windows": self.windows, "started": self.started, "durations": list(self.durations), "misses": self.misses,
                "shortlist": None if self.shortlist is None else [_cfg(c) for c in self.shortlist],
                "winner": None if self.winner is None else _cfg(self.winner)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Regime":
        return cls(int(d["ident"]), {Config(int(m[0]), int(m[1])): [float(m[2]), float(m[3]), float(m[4])] for m in d["measured"]},
                   int(d["windows"]), int(d["started"]), [int(x) for x in d["durations"]], int(d.get("misses", 0)),
                   None if d.get("shortlist") is None else [Config(int(c[0]), int(c[1])) for c in d["shortlist"]],
                   None if d.get("winner") is None else Config(int(d["winner"][0]), int(d["winner"][1])))


class Ledger:
    """Measured speeds per regime; regimes come back.

    :meth:`observe` is the decision: which regime a window belongs to. At a
    change of conditions (the controller's signal) the regime left is kept and
    a new one starts. While the new one is young (``young_windows``), a past
    regime in which the configuration just measured ran within ``match`` of
    its speed now is *recalled*: the two are the same conditions, and
    everything measured there counts again at once. :meth:`probe` names the
    configuration worth running to find out (the fastest one of any other
    past regime). The regime just left is a candidate only when the change
    was not seen on a configuration measured there: a change seen on a
    configuration's own speed rules its regime out, one inferred from a
    configuration new to it (the detector's link-rate rule, at a trial) does
    not, and a probe that runs as it ran there undoes the change (the
    detector's premise failed: on the simulator a trial of smaller partitions
    achieved 1.9x the link rate of larger ones on one link).
    Measurements of a configuration are averaged over its last
    windows (at most ``memory``, so slow drift is followed) and forgotten after
    ``stale_windows`` windows of the regime without a new one.

    Args:
        match: relative speed difference of one configuration under which two
            regimes are the same conditions (0.08).
        memory: windows averaged per measurement (3).
        stale_windows: windows after which a measurement is forgotten (30).
        max_regimes: regimes kept (16; the least recently seen is dropped).
        default_horizon: iterations assumed left in a regime before any regime
            has ended (200).
        recall: recall past regimes at all (``False``: every change starts a
            new regime, as a tuner without memory would).
        young_windows: windows of a new regime during which it may still turn
            out to be a past one (3).

    Raises:
        ValueError: an argument out of its range.
    """

    def __init__(self, *, match: float = 0.08, memory: int = 3, stale_windows: int = 30, max_regimes: int = 16,
                 default_horizon: int = 200, recall: bool = True, young_windows: int = 3) -> None:
        self.match = _check_range("match", match, 1e-3, 1.0)
        self.memory = int(_check_range("memory", memory, 1, 100))
        self.stale_windows = int(_check_range("stale_windows", stale_windows, 1, 1e6))
        self.max_regimes = int(_check_range("max_regimes", max_regimes, 1, 1000))
        self.default_horizon = int(_check_range("default_horizon", default_horizon, 1, 1e7))
        self.recall = bool(recall)
        self.young_windows = int(_check_range("young_windows", young_windows, 0, 1e6))
        self.regimes: list[Regime] = [Regime(0)]
        self.current = self.regimes[0]
        self._next = 1
        self.recalled: Regime | None = None  # the regime this window recalled, if any
        self._left: Regime | None = None  # the regime the last change left when the change ruled it out (else None)
        self._prev: Regime | None = None  # the regime the last change left
        # a measurement the caller did not file at the last change (config, speed, window share): filed if it is undone
        self._aside: tuple[Config, float, float] | None = None

    def observe(self, iteration: int, config: Config, speed: float, changed: bool, weight: float = 1.0) -> Regime:
        """Record ``config`` at ``speed``; returns the regime this window belongs to.

        ``weight``: the share of a full window measured (a trial ended at its
        first check counts half a window in the average).
        """
        self.recalled = None
        if changed:
            self.change(iteration, config, speed)
        if self.recall and self.current.windows < self.young_windows:
            self._recall(config, speed)
        r = self.current
        r.windows += 1
        m = r.measured.get(config)
        if m is None or r.windows - m[2] > self.stale_windows:
            r.measured[config] = [speed, float(weight), float(r.windows)]
        else:
            r.measured[config] = [self._join(m, speed, weight), m[1] + weight, float(r.windows)]
        return r

    def change(self, iteration: int, config: Config | None = None, speed: float | None = None,
               aside: float | None = None) -> Regime:
        """Conditions changed at ``iteration``: the regime left is kept, a new one starts (nothing measured in it yet).

        ``config`` ran at ``speed`` in the measurement that showed the change
        (``None``: not said). The regime left is ruled out as these conditions
        unless that configuration is new to it, or ran there within ``match``
        of ``speed``: then nothing measured says the conditions changed, and a
        probe may still find them the same (:meth:`probe`, :meth:`observe`).
        ``aside``: the caller files nothing of that measurement (a check taken
        as mixing both regimes) and it covers this share of a window: kept
        aside, it is filed in the regime left if a probe finds that the change
        did not happen (the check then measured one regime only).
        """
        self.recalled = None
        left = self.current
        left.durations.append(max(1, iteration - left.started))
        seen = left.measured.get(config) if config is not None else None
        inferred = config is not None and speed is not None and speed > 0 and (
            seen is None or abs(math.log(speed / seen[0])) <= math.log1p(self.match))
        self._left = None if inferred else left
        self._prev = left
        self._aside = None
        if inferred and aside is not None and config is not None and speed is not None:
            self._aside = (config, float(speed), float(aside))
        self.current = self._new()
        self.current.started = iteration
        return self.current

    def _join(self, m: list[float], speed: float, weight: float) -> float:
        """The average of measurement ``m`` (``[speed, windows, ...]``) with ``speed`` over ``weight`` windows
        more: the last ``memory`` windows count, so slow drift is followed."""
        n = min(m[1], self.memory - 1)
        return (m[0] * n + speed * weight) / (n + weight)

    def refile(self, config: Config, speed: float, weight: float, src: Regime, dst: Regime | None) -> None:
        """Take one measurement (``config`` at ``speed``, ``weight`` windows) out of ``src``; file it in ``dst``.

        For a measurement found to belong to other conditions than the ones it
        was filed under (a trial that straddled a change). The average it
        joined in ``src`` is undone; ``dst=None`` only takes it out.
        """
        m = src.measured.get(config)
        if m is not None:
            rest = m[1] - weight
            if rest <= 1e-9:
                del src.measured[config]
            else:  # _join's average, solved for the speed before it
                n = min(rest, self.memory - 1)
                m[0] = max(1e-12, (m[0] * (n + weight) - speed * weight) / n)
                m[1] = rest
        if dst is not None:
            self.file(config, speed, weight, dst)

    def file(self, config: Config, speed: float, weight: float, dst: Regime) -> None:
        """File one measurement (``config`` at ``speed``, ``weight`` windows) in ``dst``, joining any average there."""
        d = dst.measured.get(config)
        if d is None:
            dst.measured[config] = [speed, float(weight), float(dst.windows)]
        else:
            dst.measured[config] = [self._join(d, speed, weight), d[1] + weight, d[2]]

    def _recall(self, config: Config, speed: float) -> None:
        young = self.current
        near = [r for r in self.regimes if r is not young and config in r.measured
                and abs(math.log(speed / r.measured[config][0])) < math.log1p(self.match)]
        # a configuration whose speed does not tell conditions apart (it ran so in the regime
        # the change ruled out too, or in several) recalls nothing
        if len(near) != 1:
            return
        best = near[0]
        if best is self._left:
            return  # ruled out by one configuration's own speed
        # the young regime was these conditions all along: its measurements join the old one's
        self.regimes.remove(young)
        self.regimes.remove(best)
        self.regimes.append(best)  # most recently seen last
        for c, v in young.measured.items():
            best.measured[c] = [v[0], v[1], float(best.windows + v[2])]
        best.windows += young.windows
        if best is self._prev and best.durations:
            best.durations.pop()  # the change did not happen: the occurrence it ended goes on
            if self._aside is not None:
                self.file(*self._aside, best)
        else:
            best.started = young.started
        self._aside = None
        self.current = self.recalled = best

    def probe(self, current: Config) -> Config | None:
        """A configuration that would tell whether a young regime is a past one, or ``None``."""
        if not self.recall or self.current.windows > self.young_windows or len(self.regimes) < 2:
            return None
        # the fastest configuration of any regime that may be back (not this one, not one the change ruled out):
        # one set of conditions can sit in two regimes that share no measurement yet, and the faster
        # record is the one worth finding out about
        found: tuple[float, Config] | None = None
        for r in reversed(self.regimes):  # most recent first: ties go to it
            b = r.best() if r is not self.current and r is not self._left else None
            if b is not None and b != current and b not in self.current.measured:
                v = r.measured[b][0]
                if found is None or v > found[0]:
                    found = (v, b)
        return None if found is None else found[1]

    def _new(self) -> Regime:
        r = Regime(self._next)
        self._next += 1
        self.regimes.append(r)
        if len(self.regimes) > self.max_regimes:
            self.regimes.pop(0)
        return r

    def horizon(self, iteration: int) -> float:
        """Iterations this regime is expected to last from now, recurrences included.

        The time left in this occurrence (:meth:`left`) plus, for a regime
        that came back before, as many more occurrences as it has had.
        """
        typical = self._typical()
        if typical is None:
            return float(self.default_horizon)
        return self.left(iteration) + len(self.current.durations) * typical

    def left(self, iteration: int) -> float:
        """Iterations this occurrence of the regime is expected to last from now.

        The median length of this regime's past occurrences (of every
        regime's, for a new one), less the time already spent in this one;
        ``default_horizon`` before any regime ended.
        """
        typical = self._typical()
        if typical is None:
            return float(self.default_horizon)
        return max(0.0, typical - (iteration - self.current.started))

    def _typical(self) -> float | None:
        """The median length of this regime's past occurrences (every regime's, for a new one); ``None`` before any ended."""
        ended = [d for r in self.regimes for d in r.durations]
        return float(np.median(self.current.durations or ended)) if ended else None

    def state_dict(self) -> dict[str, Any]:
        return {"regimes": [r.to_dict() for r in self.regimes], "current": self.current.ident, "next": self._next,
                "left": None if self._left is None else self._left.ident,
                "prev": None if self._prev is None else self._prev.ident,
                "aside": None if self._aside is None else _cfg(self._aside[0]) + list(self._aside[1:])}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "regimes" in state:
            self.regimes = [Regime.from_dict(d) for d in state["regimes"]]
            self.current = next(r for r in self.regimes if r.ident == int(state["current"]))
            self._next = int(state["next"])
        if "left" in state:
            self._left = next((r for r in self.regimes if r.ident == state["left"]), None)
        if "prev" in state:
            self._prev = next((r for r in self.regimes if r.ident == state["prev"]), None)
        if "aside" in state:
            a = state["aside"]
            self._aside = None if a is None else (Config(int(a[0]), int(a[1])), float(a[2]), float(a[3]))
