"""The decision window, written once: gather, decide on rank 0, agree, apply.

An engine supplies only its transport, a :class:`Collective` (all-gather and
broadcast of a float64 vector over its own collectives), and calls
:meth:`WindowCoordinator.end_iteration` once per iteration on every rank. The
coordinator owns the check timing, gathers every rank's
:class:`~autobyte.core.metrics.WindowStats`, asks the
:class:`~autobyte.core.tuning.Controller` (and through it the tuner) on rank
0, sends the decision in one fixed-length wire format (config, the iteration
at which it applies, flags), applies it on every rank, and returns one plain
:class:`WindowOutcome`. It is the one place that holds the configuration in
force (:attr:`WindowCoordinator.config`); engines' schedulers follow it.

Waits and timeouts are the engine's business: they stay inside its
:class:`Collective`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Protocol, Sequence, runtime_checkable

import numpy as np

from .metrics import StatsCollector, WindowStats
from .space import WIRES, Config, check_wire
from .tuning import Controller


@runtime_checkable
class Collective(Protocol):
    """An engine's transport for the window protocol (every rank calls each method at the same point).

    Attributes:
        rank: this process's rank (0 decides).
        world_size: number of ranks.
    """

    @property
    def rank(self) -> int: ...

    @property
    def world_size(self) -> int: ...

    def all_gather(self, vector: np.ndarray) -> list[np.ndarray]:
        """Every rank's ``vector`` (all of one length), in rank order."""

    def broadcast(self, vector: np.ndarray) -> np.ndarray:
        """Rank 0's ``vector`` (every rank passes one of the same length)."""


class LocalCollective:
    """The transport of one process: world size 1, or a simulator holding every rank's statistics.

    With :meth:`hold`, the next :meth:`all_gather` returns the held vectors
    (one per simulated worker) instead of the caller's alone.
    """

    rank = 0

    def __init__(self) -> None:
        self._held: list[np.ndarray] | None = None

    @property
    def world_size(self) -> int:
        return 1 if self._held is None else len(self._held)

    def hold(self, windows: Sequence[WindowStats]) -> None:
        """Every simulated worker's statistics, returned by the next :meth:`all_gather`."""
        if not windows:
            raise ValueError("windows must hold one WindowStats per simulated worker, but got none.")
        self._held = [w.to_vector() for w in windows]

    def all_gather(self, vector: np.ndarray) -> list[np.ndarray]:
        held, self._held = self._held, None
        return [np.asarray(vector, dtype=np.float64)] if held is None else held

    def broadcast(self, vector: np.ndarray) -> np.ndarray:
        return np.asarray(vector, dtype=np.float64)


# ------------------------------------------------------------------ wire format
#: Flags of a decision message.
FLAG_DECISION = 1  # a new configuration applies from ``at_iteration``
FLAG_WINDOW_CLOSED = 2  # the check completed a window (the tuner was asked)
FLAG_REGIME_CHANGED = 4  # the controller saw conditions change
_MAGIC = 7_340_033.0  # first element of every message: a stray buffer is refused, never applied
_HEAD = 8  # magic, flags, partition, credit, at_iteration, speed, predicted speed, wire precision (index in WIRES)
#: Bytes of the decision's reason that travel (UTF-8, truncated).
REASON_BYTES = 96
#: Length of every decision message (float64 elements), whatever it carries.
WIRE_LEN = _HEAD + REASON_BYTES


@dataclass(frozen=True)
class Wire:
    """One decision message, decoded (see :func:`encode`)."""

    flags: int
    config: Config
    at_iteration: int
    speed: float | None = None
    predicted_speed: float | None = None
    reason: str = ""


def encode(msg: Wire) -> np.ndarray:
    """A :class:`Wire` as a float64 vector of :data:`WIRE_LEN` elements (integers below 2**53 are exact)."""
    out = np.zeros(WIRE_LEN, dtype=np.float64)
    nan = float("nan")
    out[:_HEAD] = [_MAGIC, msg.flags, msg.config.partition_bytes, msg.config.credit_bytes, msg.at_iteration,
                   nan if msg.speed is None else msg.speed, nan if msg.predicted_speed is None else msg.predicted_speed,
                   WIRES.index(msg.config.wire)]
    raw = msg.reason.encode("utf-8")[:REASON_BYTES]
    out[_HEAD:_HEAD + len(raw)] = list(raw)
    return out


def decode(vector: Sequence[float] | np.ndarray) -> Wire:
    """Inverse of :func:`encode`.

    Raises:
        ValueError: not a decision message (wrong length or marker).
    """
    v = np.asarray(vector, dtype=np.float64).reshape(-1)
    if v.shape != (WIRE_LEN,) or v[0] != _MAGIC:
        raise ValueError(f"a decision message must be {WIRE_LEN} float64 values starting with {_MAGIC}, "
                         f"but got {v.size} values starting with {v[0] if v.size else None}.")
    if v[7] not in range(len(WIRES)):
        raise ValueError(f"a decision message's wire precision must be an index in {WIRES}, but got {v[7]}.")
    raw = bytes(int(x) for x in v[_HEAD:] if x > 0)
    opt = (lambda x: None if math.isnan(x) else float(x))  # noqa: E731
    return Wire(int(v[1]), Config(int(v[2]), int(v[3]), WIRES[int(v[7])]), int(v[4]), opt(v[5]), opt(v[6]),
                raw.decode("utf-8", "replace"))


# ---------------------------------------------------------------- the records
@dataclass(frozen=True)
class DecisionRecord:
    """One reconfiguration, the same on every rank and every integration.

    Attributes:
        iteration: the first iteration that runs under ``new``.
        old, new: the configuration before and from ``iteration``.
        reason: why (the tuner's reason, ``"tuner start"`` or ``"user"``).
        predicted_speed: the tuner's predicted samples/s of ``new``, when it has one.
        observed_speed: the cluster's samples/s of the window that led to it.
    """

    iteration: int
    old: Config
    new: Config
    reason: str
    predicted_speed: float | None = None
    observed_speed: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"iteration": self.iteration, "old": self.old.to_dict(), "new": self.new.to_dict(), "reason": self.reason,
                "predicted_speed": self.predicted_speed, "observed_speed": self.observed_speed}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "DecisionRecord":
        return cls(int(d["iteration"]), Config.from_dict(d["old"]), Config.from_dict(d["new"]), str(d["reason"]),
                   d.get("predicted_speed"), d.get("observed_speed"))


@dataclass(frozen=True)
class WindowOutcome:
    """What one iteration's call to the coordinator did (every rank gets the same one, but ``entry``).

    Attributes:
        iteration: the iteration passed in.
        checked: statistics were gathered (every rank ran the collectives).
        window_closed: the check completed a window and the tuner was asked.
        decision: the reconfiguration agreed at this check, if any.
        config: the configuration in force from ``config_from`` on.
        config_from: the iteration from which ``config`` holds.
        windows: every rank's statistics of the check, in rank order (empty when not checked).
        speed: the window's observed samples/s (when a window closed).
        regime_changed: conditions changed under an unchanged configuration.
        entry: rank 0's :attr:`Controller.history` entry of the window (``None`` elsewhere).
    """

    iteration: int
    checked: bool
    window_closed: bool
    decision: DecisionRecord | None
    config: Config
    config_from: int
    windows: tuple[WindowStats, ...] = ()
    speed: float | None = None
    regime_changed: bool = False
    entry: dict[str, Any] | None = None

    def log_lines(self, unit: str = "iteration") -> list[str]:
        """The lines rank 0 logs for this outcome (none when nothing happened)."""
        lines = []
        if self.window_closed and self.speed is not None:
            changed = ", conditions changed" if self.regime_changed else ""
            old = self.decision.old if self.decision is not None else self.config
            lines.append(f"autobyte: {unit} {self.iteration}: {old}, observed {self.speed:.1f} samples/s{changed}")
        if self.decision is not None:
            lines.append(decision_line(self.decision, unit))
        return lines


def decision_line(d: DecisionRecord, unit: str = "iteration") -> str:
    pred = "" if d.predicted_speed is None else f", predicted {d.predicted_speed:.1f} samples/s"
    return f"autobyte: reconfigure at {unit} {d.iteration}: {d.old} -> {d.new} ({d.reason}{pred})"


# ------------------------------------------------------------------ coordinator
class WindowCoordinator:
    """The decision window of one job on one rank: check timing, gather, decide, agree, apply.

    Every rank builds one with its own :class:`~autobyte.core.tuning.Controller`
    (rank 0's tuner is the one asked) and the engine's :class:`Collective`,
    calls :meth:`start` once before training and :meth:`end_iteration` after
    every iteration, and applies the returned configuration from
    ``config_from`` on.

    The wire precision (:attr:`Config.wire`) is either the job's, which the
    tuner does not choose (``wire`` given), or the tuner's own (``wire=None``).
    With ``wire`` given, the controller and its tuner see every configuration
    at the default wire ``"fp32"`` (their space, their records and their
    decisions are unchanged by the job's precision), and the coordinator gives
    the job's precision to everything it sends, applies and records. A change
    of the job's precision (a user's :meth:`apply`) then reaches the tuner as
    a change of conditions under an unchanged configuration.

    Args:
        controller: windows, features and the tuner.
        collective: the engine's transport.
        wire: the job's wire precision (``"fp32"``, ``"bf16"``, ``"fp16"``),
            or ``None``: the controller's configurations carry it.

    Raises:
        TypeError, ValueError: a bad ``controller``, ``collective`` or ``wire``.
    """

    def __init__(self, controller: Controller, collective: Collective, *, wire: str | None = None) -> None:
        if not isinstance(controller, Controller):
            raise TypeError(f"controller must be a Controller, but got controller={controller!r}.")
        if not isinstance(collective, Collective):
            raise TypeError(f"collective must implement Collective (rank, world_size, all_gather, broadcast), but got collective={collective!r}.")
        self.controller = controller
        self.collective = collective
        #: the job's wire precision (``None``: the controller's configurations carry it)
        self.wire = None if wire is None else check_wire(wire)
        #: every reconfiguration applied, on every rank
        self.history: list[DecisionRecord] = []

    def _outward(self, config: Config) -> Config:
        """A controller's configuration as the engine runs it (at the job's wire precision)."""
        return config if self.wire is None or config.wire == self.wire else replace(config, wire=self.wire)

    def _inward(self, config: Config) -> Config:
        """An engine's configuration as the controller sees it (at ``"fp32"`` when the job holds the precision)."""
        return config if self.wire is None or config.wire == "fp32" else replace(config, wire="fp32")

    @property
    def config(self) -> Config:
        """The configuration in force (the one place that holds it)."""
        return self._outward(self.controller.current)

    @property
    def rank(self) -> int:
        return int(self.collective.rank)

    def counts(self, iteration: int) -> bool:
        """Whether ``iteration``'s statistics belong in a window (not warm-up after the start or a switch)."""
        return self.controller.counts(iteration)

    def due(self, n_iters: int) -> bool:
        """Whether ``n_iters`` counted iterations make a check (the same answer on every rank)."""
        return self.controller.check_due(n_iters)

    def _agree(self, msg: Wire | None) -> Wire:
        if self.collective.world_size > 1 or msg is None:
            vec = encode(msg) if msg is not None else np.zeros(WIRE_LEN, dtype=np.float64)
            msg = decode(self.collective.broadcast(vec))
        return msg

    def start(self, iteration: int, engine_config: Config | None = None) -> WindowOutcome:
        """Every rank, once before training: rank 0's starting configuration holds everywhere.

        ``engine_config`` is the configuration this rank's engine was built
        with (default: the controller's initial one). Rank 0 sends the
        configuration its tuner chose to start with (a random first probe, or
        the initial one); a rank whose engine holds another gets a decision
        applying at ``iteration``.
        """
        ctl = self.controller
        before = self._inward(ctl.initial if engine_config is None else engine_config)
        if engine_config is not None and self.wire is not None:
            self.wire = engine_config.wire
        mine = None
        if self.rank == 0:
            mine = Wire(0, self._outward(ctl.current), iteration,
                        reason="tuner start" if ctl.current != before else "rank 0's configuration")
        msg = self._agree(mine)
        ctl.current = before
        record = self.apply(msg.at_iteration, msg.config, msg.reason)
        return WindowOutcome(iteration, False, False, record, self.config, iteration)

    def end_iteration(self, iteration: int, stats: StatsCollector, *, apply_at: int | None = None) -> WindowOutcome:
        """Every rank, after ``iteration``: check when one is due (the same answer on every rank).

        ``stats`` is this rank's collector; warm-up iterations are dropped
        from it and a due check takes its window. A decision applies from
        ``apply_at`` (default ``iteration + 1``).
        """
        if not self.counts(iteration):
            stats.reset()
        elif self.due(stats.n_iters):
            return self.check(iteration, stats.window(), apply_at=apply_at)
        return WindowOutcome(iteration, False, False, None, self.config, iteration)

    def check(self, iteration: int, window: WindowStats, *, apply_at: int | None = None) -> WindowOutcome:
        """Every rank: gather ``window`` from every rank, decide on rank 0, agree, apply.

        Engines that time checks themselves call this directly; a decision
        applies from ``apply_at`` (default ``iteration + 1``).
        """
        ctl = self.controller
        at = iteration + 1 if apply_at is None else apply_at
        windows = tuple(WindowStats.from_vector(list(v)) for v in self.collective.all_gather(window.to_vector()))
        mine: Wire | None = None
        entry = None
        if self.rank == 0:
            seen = ctl.n_windows
            decision = ctl.decide(iteration, windows, window.iter_times)  # this rank's own times: not gathered
            flags = 0
            if ctl.n_windows > seen and ctl.history:
                entry = ctl.history[-1]
                flags |= FLAG_WINDOW_CLOSED | (FLAG_REGIME_CHANGED if entry.get("regime_changed") else 0)
            speed = entry["speed"] if entry is not None else None
            if decision is not None:
                mine = Wire(flags | FLAG_DECISION, self._outward(decision.config), at, speed, decision.predicted_speed,
                            decision.reason)
            else:
                mine = Wire(flags, self.config, at, speed)
        msg = self._agree(mine)
        record = None
        if msg.flags & FLAG_DECISION and msg.config != self.config:
            record = self.apply(msg.at_iteration, msg.config, msg.reason, msg.predicted_speed, msg.speed)
        return WindowOutcome(iteration, True, bool(msg.flags & FLAG_WINDOW_CLOSED), record, self.config,
                             msg.at_iteration if record is not None else iteration, windows, msg.speed,
                             bool(msg.flags & FLAG_REGIME_CHANGED), entry)

    def apply(self, iteration: int, config: Config, reason: str, predicted_speed: float | None = None,
              observed_speed: float | None = None) -> DecisionRecord | None:
        """This rank: ``config`` is in force from ``iteration`` (an agreed decision, or a user's collective call).

        Returns the record appended to :attr:`history` (``None`` when
        ``config`` is already in force: nothing to do). With the job's
        precision held here (``wire`` given), ``config.wire`` becomes it.
        """
        old = self.config
        if config == old:
            return None
        if self.wire is not None:
            self.wire = config.wire
        self.controller.applied(iteration, self._inward(config))
        record = DecisionRecord(iteration, old, config, reason, predicted_speed, observed_speed)
        self.history.append(record)
        return record

    def state_dict(self) -> dict[str, Any]:
        return {"controller": self.controller.state_dict(), "history": [r.to_dict() for r in self.history]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.controller.load_state_dict(state.get("controller", {}))
        self.history = [DecisionRecord.from_dict(d) for d in state.get("history", [])]


__all__ = [
    "Collective", "DecisionRecord", "FLAG_DECISION", "FLAG_REGIME_CHANGED", "FLAG_WINDOW_CLOSED", "LocalCollective",
    "REASON_BYTES", "WIRE_LEN", "Wire", "WindowCoordinator", "WindowOutcome", "decision_line", "decode", "encode",
]
