"""The tuner interface and the controller that drives a tuner from an engine.

A tuner is a small policy with one decision method (:meth:`Tuner.observe`)
that returns a plain value: a :class:`Decision` to reconfigure, or ``None``
to keep the current configuration. The :class:`Controller` is what engines
talk to: it cuts iterations into windows, turns every rank's
:class:`~autobyte.core.metrics.WindowStats` into features, asks the tuner on
rank 0, and says at which iteration every rank applies the decision.
"""

from __future__ import annotations

import abc
import warnings
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from ._checks import check_int
from .metrics import RuntimeFeatures, WindowStats
from .space import Config, SearchSpace


@dataclass(frozen=True)
class Observation:
    """What a tuner sees at the end of a window.

    Attributes:
        iteration: the last iteration of the window.
        config: the configuration in force during the window.
        speed: observed cluster throughput, samples/s (sum over workers).
        features: runtime features (Table II) of the window.
    """

    iteration: int
    config: Config
    speed: float
    features: RuntimeFeatures


@dataclass(frozen=True)
class Decision:
    """A reconfiguration chosen by a tuner."""

    config: Config
    reason: str
    predicted_speed: float | None = None


class Tuner(abc.ABC):
    """Base class: one decision per window, on rank 0.

    Subclasses implement :meth:`observe`; :meth:`start` may choose the first
    configuration. State must be plain types (``state_dict``).
    """

    name: str = "tuner"

    def start(self, space: SearchSpace, initial: Config) -> Config:
        """Called once before training; returns the configuration to begin with."""
        self.space = space
        return initial

    @abc.abstractmethod
    def observe(self, obs: Observation) -> Decision | None:
        """Return a :class:`Decision` to reconfigure, or ``None`` to keep ``obs.config``."""

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        del state


class StaticTuner(Tuner):
    """Never reconfigures: the configuration given at start stays (tuning off)."""

    name = "static"

    def observe(self, obs: Observation) -> Decision | None:
        return None


@dataclass
class Controller:
    """Windows, features and decisions for one job, independent of the engine.

    Args:
        tuner: the policy (rank 0 only calls :meth:`decide`).
        space: candidate configurations.
        initial: the starting configuration.
        arch: ``"allreduce"`` or ``"ps"``.
        layer_bytes: gradient bytes per tensor, tensor 0 nearest the input.
        window_iters: iterations per decision window (paper: 10).
        warmup_iters: iterations ignored at the start and after every
            reconfiguration (plan rebuild, cold caches).
        link_factor: link bytes per payload byte (ring all-reduce: 2(n-1)/n).

    Raises:
        ValueError: ``window_iters`` or ``warmup_iters`` out of range.
    """

    tuner: Tuner
    space: SearchSpace
    initial: Config
    arch: str
    layer_bytes: Sequence[int]
    window_iters: int = 10
    warmup_iters: int = 2
    link_factor: float = 1.0
    history: list[dict[str, Any]] = field(default_factory=list)
    _skip_until: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        check_int("window_iters", self.window_iters)
        check_int("warmup_iters", self.warmup_iters, minimum=0)
        self.current = self.tuner.start(self.space, self.initial)
        self._skip_until = self.warmup_iters

    def counts(self, iteration: int) -> bool:
        """Whether statistics of ``iteration`` belong in a window (not warm-up)."""
        return iteration >= self._skip_until

    def decide(self, iteration: int, windows: Sequence[WindowStats]) -> Decision | None:
        """Rank 0: end of a window at ``iteration`` with every rank's statistics.

        Returns the decision (or ``None``); never raises on bad statistics:
        a window it cannot use keeps the current config and warns.
        """
        try:
            if any(w.n_iters == 0 for w in windows):
                raise ValueError("a window with zero iterations")
            features = RuntimeFeatures.from_windows(self.arch, self.layer_bytes, windows, self.link_factor)
            speed = float(np.sum(features.speed))
            if not np.isfinite(speed) or speed <= 0:
                raise ValueError(f"observed speed {speed}")
        except ValueError as exc:
            warnings.warn(f"autobyte: unusable statistics at iteration {iteration} ({exc}); keeping {self.current}.", stacklevel=2)
            return None
        obs = Observation(iteration, self.current, speed, features)
        decision = self.tuner.observe(obs)
        entry: dict[str, Any] = {"iteration": iteration, "config": self.current.to_dict(), "speed": speed}
        if decision is not None and decision.config != self.current:
            entry.update(new_config=decision.config.to_dict(), reason=decision.reason, predicted_speed=decision.predicted_speed)
        else:
            decision = None
        self.history.append(entry)
        return decision

    def applied(self, iteration: int, config: Config) -> None:
        """Every rank: ``config`` is in force from ``iteration`` on."""
        if config != self.current:
            self._skip_until = iteration + self.warmup_iters
        self.current = config

    def state_dict(self) -> dict[str, Any]:
        return {"current": self.current.to_dict(), "history": list(self.history), "tuner": self.tuner.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "current" in state:
            self.current = Config(**state["current"])
        self.history = list(state.get("history", []))
        self.tuner.load_state_dict(state.get("tuner", {}))
