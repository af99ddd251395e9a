"""The optimization trigger: when to reconfigure, when to adapt the predictor.

Two small policies, one decision method each, fed plain numbers (so they are
tested deterministically):

* :class:`GainTrigger` — reconfigure only when the best candidate's predicted
  speed beats the current configuration's by more than ``min_gain`` (paper:
  5%), with hysteresis: a cool-down after every change and a higher bar for
  going back to a configuration just left, so it never oscillates.
* :class:`AdaptTrigger` — adapt the meta-network when
  ``|predicted - observed| / observed`` exceeds ``max_error`` (paper: 10%),
  with hysteresis: once adapting, keep adapting until the error falls below
  ``release * max_error``.
"""

from __future__ import annotations

from typing import Any

from ._checks import check_in_range, check_int, check_positive
from .space import Config


def _check_speed(name: str, value: object) -> float:
    return check_positive(name, value, "samples/s")


class GainTrigger:
    """Reconfigure only when the predicted gain pays, and never oscillate.

    Args:
        min_gain: relative gain required, ``best / current - 1 > min_gain`` (0.05).
        cooldown_windows: windows after a change during which no new change is
            made (the new configuration gets measured first) (1).
        revisit_gain: gain required to return to the configuration left at the
            last change, within ``memory_windows`` of leaving it
            (``None``: ``3 * min_gain``, 0.15 by default).
        memory_windows: how long the configuration just left stays "recent" (20).

    Raises:
        ValueError: an argument out of range (message names it).

    Example:
        >>> t = GainTrigger(min_gain=0.05)
        >>> t.should_reconfigure(0, Config(1 << 20, 1 << 20), 100.0, Config(1 << 21, 1 << 21), 104.0)
        False
    """

    state_key = "GainTrigger"

    def __init__(
        self, min_gain: float = 0.05, *, cooldown_windows: int = 1, revisit_gain: float | None = None, memory_windows: int = 20
    ) -> None:
        self.min_gain = check_in_range("min_gain", min_gain, 0.0, 10.0)
        self.cooldown_windows = check_int("cooldown_windows", cooldown_windows, minimum=0)
        if revisit_gain is None:
            revisit_gain = 3.0 * self.min_gain
        self.revisit_gain = check_in_range("revisit_gain", revisit_gain, 0.0, 10.0)
        self.memory_windows = check_int("memory_windows", memory_windows, minimum=0)
        if self.revisit_gain < self.min_gain:
            raise ValueError(f"revisit_gain must be >= min_gain={self.min_gain}, but got revisit_gain={revisit_gain!r}.")
        self.reset()

    def reset(self) -> None:
        """Forget the last change (call when conditions changed: going back may pay again)."""
        self._last_change: int | None = None
        self._left: Config | None = None

    def required_gain(self, window: int, candidate: Config) -> float:
        """The gain ``candidate`` must beat at ``window``."""
        recent = self._last_change is not None and window - self._last_change <= self.memory_windows
        return self.revisit_gain if recent and candidate == self._left else self.min_gain

    def should_reconfigure(
        self, window: int, current: Config, current_speed: float, candidate: Config, candidate_speed: float
    ) -> bool:
        """Whether to move from ``current`` to ``candidate`` at ``window`` (a counter of windows).

        Speeds are predictions (or measurements) made under the same conditions.
        A ``True`` answer is recorded as a change (the caller acts on it).

        Raises:
            ValueError: a speed that is not positive and finite.
        """
        current_speed = _check_speed("current_speed", current_speed)
        candidate_speed = _check_speed("candidate_speed", candidate_speed)
        if candidate == current:
            return False
        if self._last_change is not None and window - self._last_change <= self.cooldown_windows:
            return False
        if candidate_speed <= current_speed * (1.0 + self.required_gain(window, candidate)):
            return False
        self._last_change = window
        self._left = current
        return True

    def state_dict(self) -> dict[str, Any]:
        return {"last_change": self._last_change, "left": None if self._left is None else self._left.to_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._last_change = state.get("last_change")
        left = state.get("left")
        self._left = Config(**left) if left else None


class AdaptTrigger:
    """Adapt the predictor when it is wrong about the configuration in force.

    Args:
        max_error: relative error that starts adaptation,
            ``|predicted - observed| / observed > max_error`` (0.10).
        release: adaptation continues until the error falls to
            ``release * max_error`` or below (0.5), so it does not flap around the threshold.
        patience: consecutive windows above ``max_error`` needed to start (1).

    Raises:
        ValueError: an argument out of range (message names it).

    Example:
        >>> AdaptTrigger(max_error=0.1).should_adapt(predicted=80.0, observed=100.0)
        True
    """

    state_key = "AdaptTrigger"

    def __init__(self, max_error: float = 0.10, *, release: float = 0.5, patience: int = 1) -> None:
        self.max_error = check_in_range("max_error", max_error, 0.0, 10.0)
        self.release = check_in_range("release", release, 0.0, 1.0)
        self.patience = check_int("patience", patience, minimum=0)
        if self.patience < 1:
            raise ValueError(f"patience must be a positive integer, but got patience={patience!r}.")
        self.adapting = False
        self._above = 0

    @staticmethod
    def error(predicted: float, observed: float) -> float:
        """``|predicted - observed| / observed``."""
        return abs(_check_speed("predicted", predicted) - _check_speed("observed", observed)) / observed

    def should_adapt(self, predicted: float, observed: float) -> bool:
        """Whether to adapt after a window whose speed was ``observed`` and predicted ``predicted``.

        Raises:
            ValueError: a speed that is not positive and finite.
        """
        err = self.error(predicted, observed)
        if self.adapting:
            if err <= self.release * self.max_error:
                self.adapting = False
                self._above = 0
            return self.adapting
        self._above = self._above + 1 if err > self.max_error else 0
        self.adapting = self._above >= self.patience
        return self.adapting

    def state_dict(self) -> dict[str, Any]:
        return {"adapting": self.adapting, "above": self._above}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.adapting = bool(state.get("adapting", False))
        self._above = int(state.get("above", 0))


__all__ = ["AdaptTrigger", "GainTrigger"]
