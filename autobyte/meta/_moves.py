"""The tuner's moves between measured configurations: to the fastest, back to check a surprise, out of a bad trial.

* :class:`Mover`: go to the fastest configuration *measured* in this regime
  when it beats the one in force (after a trial that measured slower, that
  is the rollback).
* :class:`Verifier`: re-measure the configuration a trial left when the
  trial ran far from its prediction (a change of conditions at that moment,
  or a wrong prediction: the detector tells which).
* :class:`Aborter`: end a trial at its first check when it already runs
  clearly slower than the fastest configuration measured here.
"""

from __future__ import annotations

import math

from autobyte.core.space import Config
from autobyte.core.trigger import GainTrigger

from ._plain import _check_range


class Mover:
    """Go to the fastest configuration measured in this regime when it beats the one in force by ``min_gain``.

    The threshold is core's :class:`~autobyte.core.trigger.GainTrigger`
    (no cooldown: every decision is followed by a measured window anyway).

    Args:
        min_gain: measured advantage needed to move (0.02; a move costs
            warm-up iterations), against the window just measured.

    Raises:
        ValueError: ``min_gain`` out of range.
    """

    def __init__(self, min_gain: float = 0.02) -> None:
        self.trigger = GainTrigger(min_gain, cooldown_windows=0, revisit_gain=min_gain)

    def propose(self, window: int, measured: dict[Config, float], current: Config, speed: float,
                left: Config | None) -> tuple[Config, str] | None:
        """At ``window`` (a counter), the measured configuration to move to, with the reason, or ``None``.

        ``left``: the configuration the last decision left (a move back to it is a rollback).
        """
        others = {c: v for c, v in measured.items() if c != current}
        if not others:
            return None
        best = max(others, key=others.__getitem__)
        if not self.trigger.should_reconfigure(window, current, speed, best, others[best]):
            return None
        what = "rollback" if best == left else "measured best"
        return best, (f"{what}: {best} measured {others[best]:.1f} samples/s in these conditions, "
                      f"{current} {speed:.1f} ({100 * (others[best] / speed - 1):+.1f}%)")


class Verifier:
    """A trial that ran far from its prediction is checked against the configuration it left.

    The regime detector compares a configuration only with itself, so a
    change of conditions at the moment of a trial looks like the trial's own
    speed. When a trial's speed is more than ``surprise`` away from its
    prediction and no other policy moves, the configuration it left runs one
    window again: if conditions changed, the detector sees it there; if not,
    the trial's measurement stands (the mover returns to it when it is faster).

    Args:
        surprise: relative distance from the prediction that asks for a check (0.5).
    """

    def __init__(self, surprise: float = 0.5) -> None:
        self.surprise = _check_range("surprise", surprise, 1e-3, 100.0)

    def propose(self, trial: tuple[Config, float, Config] | None, current: Config, speed: float,
                changed: bool) -> tuple[Config, str] | None:
        """``trial``: the configuration tried, its prediction and the configuration it left."""
        if trial is None or changed or trial[0] != current or trial[2] == current:
            return None
        if abs(math.log(speed / trial[1])) <= math.log1p(self.surprise):
            return None
        return trial[2], (f"verify: {current} ran {speed:.1f} samples/s against {trial[1]:.1f} predicted "
                          f"({100 * (speed / trial[1] - 1):+.0f}%); re-measuring {trial[2]} to tell a change of "
                          f"conditions from a wrong prediction")

    def ran_after(self, surprise: float, change: float) -> bool:
        """A trial ``surprise`` (log of its speed over its prediction) from its prediction, then a ``change`` of
        conditions (log of the speed ratio of the configuration it left): did the trial run after the change?

        Yes when the trial ran faster than predicted and the change accounts
        for it (within ``log(1 + surprise)`` of it in log units: a trial 3x faster than
        predicted, then the conditions 3.2x faster). A trial slower than
        predicted is left where it was measured even where the change would
        account for it: a configuration slow in the old conditions ran so too,
        and measured partly in the faster old conditions it would read faster
        than it runs in the new ones and draw the run there (the README's
        scenario: a trial of 128 KiB partitions at 0.38x its prediction, then
        the link 4x slower; moved, it was the fastest measured at the slow
        rate, the run held it, and it ran as slowly when the link came back,
        so no change was seen: 0.914x the default in that round). Kept there, a
        trial that did run after the change only reads slower in the old
        conditions than it runs, which draws nothing.
        """
        return surprise > 0 and abs(surprise - change) <= math.log1p(self.surprise)


class Aborter:
    """End a trial at a check of its window when it already runs clearly slower than the best measured here.

    A trial runs a whole window before the tuner judges it; one that the
    predictor got wrong by a lot costs that window. Checked halfway (the
    controller offers each check of a window in progress), a trial running
    more than ``margin`` below the fastest configuration measured in this
    regime is ended there, and the run goes back to that configuration. The
    margin is well above a check's noise (a few percent), so a trial that
    could still come out ahead is never cut. The check is a real measurement
    of the trial: the tuner records it (as half a window) like any other.

    Args:
        margin: relative slowdown against the fastest configuration measured
            in this regime that ends a trial at a check (0.10).

    Raises:
        ValueError: ``margin`` not in [0.001, 0.9].
    """

    def __init__(self, margin: float = 0.10) -> None:
        self.margin = _check_range("margin", margin, 1e-3, 0.9)

    def propose(self, trial: tuple[Config, float, Config] | None, current: Config, speed: float,
                measured: dict[Config, float]) -> tuple[Config, str] | None:
        """``trial``: the configuration tried, its prediction and the one it left; ``speed``: the check's.

        Returns the configuration to go back to (the fastest measured, other
        than the trial) with the reason, or ``None`` (let the trial run).
        """
        if trial is None or trial[0] != current:
            return None
        others = {c: v for c, v in measured.items() if c != current}
        if not others:
            return None
        # ties go to the configuration the trial left
        best = max(others, key=lambda c: (others[c], c == trial[2]))
        if speed >= others[best] * (1.0 - self.margin):
            return None
        return best, (f"abort: trial {current} ran {speed:.1f} samples/s at a check, {100 * (1 - speed / others[best]):.1f}% "
                      f"below {best}'s {others[best]:.1f} measured in these conditions (margin {100 * self.margin:.0f}%; "
                      f"predicted {trial[1]:.1f}); back to {best}")
