"""The tuner's trials: which unmeasured candidate is worth measuring, and what this job's trials found (numpy only)."""

from __future__ import annotations

import math
from collections import deque
from typing import Any, Collection

import numpy as np

from autobyte.core.space import Config, SearchSpace

from ._plain import _cfg, _check_range
from ._scorer import Equivalence


def _norm_pdf(z: np.ndarray) -> np.ndarray:
    return np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)


def _norm_cdf(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.vectorize(math.erf)(z / math.sqrt(2.0)))


# For X ~ N(mu, s^2) the log speed ratio of a candidate to a reference: the expected gain (over the best
# measured) and the expected loss counted where X is below a line <= 0 (against the configuration in force).
def _log_gain(mu: np.ndarray, s: np.ndarray) -> np.ndarray:
    """``E[max(X, 0)]``: the expected log improvement."""
    return s * _norm_pdf(mu / s) + mu * _norm_cdf(mu / s)


def _log_below(mu: np.ndarray, s: np.ndarray, line: np.ndarray) -> np.ndarray:
    """``E[-X; X < line]``: the expected log slowdown below the line."""
    z = (line - mu) / s
    return s * _norm_pdf(z) - mu * _norm_cdf(z)


class Explorer:
    """Measure an unmeasured candidate while the trial pays for itself.

    For each candidate not measured in this regime, the true speed is taken
    as log-normal around the prediction, with the predictor's demonstrated
    error ``sigma`` widened by ``widen`` per power of two between the
    candidate and the nearest measured configuration. The expected gain of a
    trial is the expected improvement over the best measured speed times the
    iterations left in the regime (recurrences included); its expected cost is
    the expected slowdown against the configuration in force over the
    ``trial_iters`` iterations it runs (a window plus warm-up). The candidate
    with the largest net value is tried when that value is positive and its
    cost at ``sigma`` below prediction fits the do-no-harm allowance.

    Args:
        trial_iters: iterations a trial runs (12: a window of 10 plus 2 warm-up).
        widen: relative growth of the error per power of two of distance (0.25).
        max_distance: powers of two (partition or credit) a trial may reach
            from the nearest measured configuration (3).
        max_sigma: the largest predictor error the expected values use (0.25).
        max_misses: trials in a row without a faster configuration after
            which a regime is not explored any more (3).
        abort_margin: a trial running more than this below the best measured
            is ended at its first check (:class:`Aborter`), so it costs only
            ``abort_iters``; ``None`` (default): every trial runs its window.
        abort_iters: iterations of a trial ended at its first check (7: half
            a window of 10 plus 2 warm-up).
        gain_floor: the improvement (log units) a trial must find before it
            counts: the mover's ``min_gain``, under which a faster measurement
            moves nothing (0, default: every improvement counts).

    Raises:
        ValueError: an argument out of its range.
    """

    def __init__(self, trial_iters: int = 12, widen: float = 0.25, max_distance: float = 3.0, max_sigma: float = 0.25,
                 max_misses: int = 3, abort_margin: float | None = None, abort_iters: int = 7,
                 gain_floor: float = 0.0) -> None:
        self.gain_floor = _check_range("gain_floor", gain_floor, 0.0, 1.0)
        self.trial_iters = int(_check_range("trial_iters", trial_iters, 1, 1e6))
        self.abort_margin = None if abort_margin is None else _check_range("abort_margin", abort_margin, 1e-3, 0.9)
        self.abort_iters = int(_check_range("abort_iters", abort_iters, 1, self.trial_iters))
        self.widen = _check_range("widen", widen, 0.0, 10.0)
        self.max_distance = _check_range("max_distance", max_distance, 0.0, 64.0)
        self.max_sigma = _check_range("max_sigma", max_sigma, 1e-3, 10.0)
        self.max_misses = int(_check_range("max_misses", max_misses, 1, 1e6))

    def propose(self, space: SearchSpace, cands: np.ndarray, predicted: np.ndarray, measured: dict[Config, float],
                current: Config, speed: float, sigma: float, horizon: float, allowance: float | None,
                misses: int = 0, equivalence: Equivalence | None = None, downside: float = 0.0,
                spread: float | None = None, skip: Collection[Config] = (),
                left: float | None = None) -> tuple[Config, str] | None:
        """The candidate to try next, with the reason, or ``None`` (no trial pays).

        ``misses``: trials in a row in this regime that found nothing faster;
        at ``max_misses`` the predictor has shown it cannot point to a better
        configuration here, and exploring stops until conditions change.
        ``equivalence``: candidates that run the same schedule; a class with a
        measured member (or the configuration in force) counts as measured,
        distances are taken from all its members, and a class is tried
        through one member (the nearest to what was measured).
        ``downside``: the largest over-prediction seen on this job (log
        units); the allowance check takes the truth that far below the
        prediction when that is further than one error, so a predictor that
        once missed by 3x explores only with room for such a miss.
        ``spread``: how much this job's trials found beyond the best
        measured (log units, :meth:`TrialRecord.spread`): the scale of
        what an unmeasured candidate can win here. A candidate's improvement
        is then taken as drawn from that scale around the best measured, and
        its prediction as one noisy look at it (error ``s``): for the
        expected improvement, the predicted gain is shrunk by ``w =
        spread^2 / (spread^2 + s^2)`` and its error narrowed to ``s *
        sqrt(w)`` (a normal prior and likelihood). The explorer picks the
        largest of many noisy predictions, which without shrinking is
        biased upwards by about two errors (the winner's curse: on real runs
        trials predicted 1-8% faster ran 2-12% slower); where trials keep
        finding nothing, few trials pay. The expected cost keeps the
        prediction and its error as scored: landscapes have a ceiling near
        the best and a long tail below it (a 128 KiB trial ran 44% below the
        best), so the downside is not shrunk. ``None``: gains as predicted.
        ``skip``: configurations not to try, whatever their prediction
        (those past jobs on this cluster measured slower than the start,
        :meth:`~autobyte.meta.JobHistory.plan`); they still count as
        unmeasured for distances and for their schedule's class.
        ``left``: iterations these conditions are expected to last from now,
        this occurrence (:meth:`~autobyte.meta._ledger.Ledger.left`; ``None``:
        unknown). A trial finds something only if its window ends inside
        them: one that mixes two sets of conditions is dropped, while it has
        run a configuration the job may never have measured in the conditions
        that follow (on links that stepped every 20-25 iterations, trials
        that straddled a change ran 3-8x slower than predicted:
        docs/benchmarks.md 2.1 and 2.4). The expected gain is taken times
        the chance of that, ``max(0, 1 - trial_iters / left)``: the
        conditions' end equally likely anywhere in the iterations they are
        expected to have left, which the ledger counts from the change's
        detection, a window or two after the change itself.

        Raises:
            ValueError: ``spread`` not in (0, 10], or ``left`` not in [0, 1e12].
        """
        if spread is not None:
            _check_range("spread", spread, 1e-6, 10.0)
        if left is not None:
            _check_range("left", left, 0.0, 1e12)
        if not measured or misses >= self.max_misses:
            return None
        sigma = min(sigma, self.max_sigma)  # beyond it the predictor ranks no better than chance; misses stop the search
        best_known = max(measured.values())
        known = np.array([[c.partition_bytes, c.credit_bytes] for c in measured], dtype=np.float64)
        # what was measured, and the configuration in force, count as their grid points (the job's start,
        # 4,000,000 bytes, as 4 MiB: a trial of one beside the other measures the noise; docs/benchmarks.md 2.23)
        points = {space.grid_point(c) or c for c in [*measured, current]}
        done = np.array([c in points for c in space])
        if equivalence is not None:
            same = equivalence.members(points)
            known = np.vstack([known, cands[equivalence.members(list(measured)) & ~done]])  # what one member measured holds for all
            done |= same
        lp, lc = np.log2(cands[:, :1]), np.log2(cands[:, 1:])
        dist = np.min(np.maximum(np.abs(lp - np.log2(known[:, 0])[None, :]), np.abs(lc - np.log2(known[:, 1])[None, :])), axis=1)
        free = ~done & (dist <= self.max_distance + 1e-9)
        if equivalence is not None and free.any():
            # one trial per schedule: the class's member nearest to what was measured
            order = np.lexsort((np.arange(len(dist)), dist))
            first = np.zeros(len(free), dtype=bool)
            seen: set[int] = set()
            for k in order:
                if free[k] and int(equivalence.ids[k]) not in seen:
                    seen.add(int(equivalence.ids[k]))
                    first[k] = True
            free &= first
        if skip:
            free &= np.array([c not in skip for c in space])
        if not free.any():
            return None
        s = sigma * (1.0 + self.widen * dist)
        mu_gain = np.log(np.maximum(predicted, 1e-12) / best_known)
        mu_cost = np.log(np.maximum(predicted, 1e-12) / speed)
        s_gain = s
        if spread is not None:  # the posterior of a candidate's improvement, given what trials found here
            w = spread * spread / (spread * spread + s * s)
            mu_gain, s_gain = mu_gain * w, s * np.sqrt(w)
        ei = _log_gain(mu_gain - self.gain_floor, s_gain)  # expected improvement over the best measured (beyond the floor)
        el = _log_below(mu_cost, s, np.zeros_like(mu_cost))  # expected slowdown against the current config
        cost = el * self.trial_iters
        low = np.maximum(predicted, 1e-12) * np.exp(-np.maximum(s, downside))  # one error below, or as far as the worst miss
        iters = np.full(len(predicted), float(self.trial_iters))
        if self.abort_margin is not None:
            # a trial whose truth falls below the abort line runs only abort_iters: the slowdown
            # below min(line, current) is paid for that many iterations, not a whole trial's
            line = np.log(best_known * (1.0 - self.abort_margin) / speed)
            cut = _log_below(mu_cost, s, np.minimum(line, 0.0))  # the expected slowdown with the truth below the line
            cost = cost - (self.trial_iters - self.abort_iters) * np.maximum(cut, 0.0)
            iters = np.where(low < best_known * (1.0 - self.abort_margin), float(self.abort_iters), iters)
        inside = 1.0 if left is None else max(0.0, 1.0 - self.trial_iters / max(left, 1e-9))  # the window ends in these conditions
        value = ei * horizon * inside - cost
        if allowance is not None:  # the trial's cost if the truth is one sigma below the prediction
            worst = iters * (speed / low - 1.0)
            free &= worst <= allowance
        value = np.where(free, value, -np.inf)
        k = int(np.argmax(value))
        if not value[k] > 0:
            return None
        cfg = space[k]
        shrunk = "" if spread is None else f", its gain shrunk to the {100 * spread:.1f}% scale of what this job's trials found"
        return cfg, (f"explore: {cfg} predicted {predicted[k]:.1f} samples/s (best measured {best_known:.1f}, "
                     f"error {100 * s[k]:.0f}%{shrunk}): expected gain {ei[k] * horizon * inside:.2f} iterations over {horizon:.0f} "
                     f"left in these conditions{'' if inside == 1.0 else f' (its window ends in them with chance {inside:.2f})'}, "
                     f"expected cost {cost[k]:.2f}")


class TrialRecord:
    """What this job's trials found beyond the best configuration measured when each was chosen.

    The explorer values a trial by what trials have won on this job: the
    scale of their realised improvements (:meth:`spread`) is the scale its
    predicted gains are shrunk to (:class:`Explorer`'s ``spread``). Each
    trial's outcome is recorded against the best speed measured when it was
    chosen: ``max(0, log(measured / best))``, 0 for a trial that found
    nothing faster, or was aborted.

    Args:
        memory: trials remembered (8).

    Raises:
        ValueError: ``memory`` not in [1, 1000].
    """

    def __init__(self, memory: int = 8) -> None:
        self.memory = int(_check_range("memory", memory, 1, 1000))
        self.found: deque[float] = deque(maxlen=self.memory)  # realised improvements, log units
        #: the trial chosen and not yet measured: configuration, best measured speed when chosen
        self.pending: tuple[Config, float] | None = None

    def expect(self, config: Config, best_known: float) -> None:
        """A trial of ``config`` starts while the best speed measured is ``best_known`` samples/s.

        Raises:
            ValueError: ``best_known`` not a positive finite number.
        """
        if not (math.isfinite(best_known) and best_known > 0):
            raise ValueError(f"best_known must be a positive finite speed, but got best_known={best_known!r}.")
        self.pending = (config, float(best_known))

    def outcome(self, config: Config, speed: float) -> float | None:
        """The pending trial of ``config`` measured ``speed``: recorded; returns the realised gain (``None``: no such trial)."""
        pending, self.pending = self.pending, None
        if pending is None or pending[0] != config or not (math.isfinite(speed) and speed > 0):
            return None
        realised = max(0.0, math.log(speed / pending[1]))
        self.found.append(realised)
        return realised

    def drop(self) -> None:
        """The pending trial cannot be judged (conditions changed under it): forgotten."""
        self.pending = None

    def spread(self, prior: float, weight: float = 1.0) -> float:
        """The scale of what this job's trials found: the root mean square of their realised improvements.

        Over the trials remembered, with ``weight`` trials' worth of ``prior``
        (log units) before any: where trials keep finding nothing faster it
        wears down, and the explorer expects little of the next one; where
        one found 1.1x (a straggler) it grows.

        Raises:
            ValueError: ``prior`` not in (0, 10] or ``weight`` not in (0, 1000].
        """
        prior = _check_range("prior", prior, 1e-6, 10.0)
        weight = _check_range("weight", weight, 1e-6, 1000.0)
        return math.sqrt((weight * prior * prior + sum(r * r for r in self.found)) / (weight + len(self.found)))

    def state_dict(self) -> dict[str, Any]:
        p = self.pending
        return {"found": list(self.found), "pending": None if p is None else [*_cfg(p[0]), p[1]]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output; a record saved as (expected, realised) pairs keeps the realised."""
        found = state.get("found", [r for _, r in state.get("record", [])] if "record" in state else None)
        if found is not None:
            self.found.clear()
            self.found.extend(float(r) for r in found)
        if "pending" in state:
            p = state["pending"]
            # [partition, credit, best] or, saved with an expected gain, [partition, credit, expected, best]
            self.pending = None if p is None else (Config(int(p[0]), int(p[1])), float(p[-1]))
