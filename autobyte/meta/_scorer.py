"""The tuner's predictions: every candidate's speed from the meta-network, anchored on what was measured (numpy only).

* :class:`Equivalence`: which candidates run the same schedule on this job's
  gradients (one measurement tells them all).
* :class:`Scorer`: the meta-network's prediction of every candidate's speed,
  one per schedule, calibrated on the configuration in force, and the
  predictor's demonstrated error on this job.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np

from autobyte.core.scheduler import schedule_classes
from autobyte.core.space import Config, SearchSpace

from ._features import JobInputs, candidate_features, featurize
from ._network import MetaNetwork
from ._plain import _check_range


class Equivalence:
    """Candidates that run the same schedule on this job's gradients, as classes.

    :func:`autobyte.core.scheduler.schedule_classes` on the gradient sizes of
    the last window: on a small model every partition above its total bytes
    fuses it into one message, and every credit above them never binds, so
    dozens of candidates are one schedule. The scorer gives a class one
    prediction, and the explorer treats a class as measured once any member
    is (the measurement of one is the measurement of all).

    Args:
        space: the candidates.
        enabled: ``False`` keeps every candidate a class of its own (the
            tuner without this knowledge, for comparison).
    """

    def __init__(self, space: SearchSpace, enabled: bool = True) -> None:
        self.space = space
        self.enabled = bool(enabled)
        self._sizes: np.ndarray | None = None  # gradient bytes per tensor the classes are for
        self.ids = np.arange(len(space), dtype=np.int64)  # before any gradients are known: every candidate its own class
        self._extra: dict[Config, int] = {}

    def update(self, layer_bytes: np.ndarray) -> None:
        """Classify the candidates for these gradient sizes (kept while the sizes do not change)."""
        if not self.enabled:
            return
        sizes = np.maximum(1, np.rint(np.asarray(layer_bytes, dtype=np.float64))).astype(np.int64)
        if self._sizes is not None and np.array_equal(sizes, self._sizes):
            return
        self._sizes = sizes
        self.ids = schedule_classes(sizes, self.space)
        self._extra = {}

    @property
    def n_classes(self) -> int:
        return int(self.ids.max()) + 1 if len(self.ids) else 0

    def of(self, cfg: Config) -> int:
        """The class of ``cfg``: a candidate's, or (for a configuration outside the space) a class
        of the space it runs like, or a new id of its own."""
        if cfg in self.space:
            return int(self.ids[self.space.index(cfg)])
        if cfg not in self._extra:
            if self._sizes is None:
                self._extra[cfg] = len(self.ids) + len(self._extra)
            else:
                k = int(schedule_classes(self._sizes, [*self.space, cfg])[-1])
                self._extra[cfg] = k if k < self.n_classes else self.n_classes + len(self._extra)
        return self._extra[cfg]

    def members(self, configs: Any) -> np.ndarray:
        """Mask of the candidates in the class of any of ``configs``."""
        return np.isin(self.ids, [self.of(c) for c in configs])


def trend_coords(configs: np.ndarray) -> np.ndarray:
    """``(K, 2)``: log2 credit multiple and log2 partition of ``[partition_bytes, credit_bytes]`` rows."""
    p, c = configs[:, 0].astype(np.float64), configs[:, 1].astype(np.float64)
    return np.stack([np.log2(c / p), np.log2(p)], axis=1)


@dataclass(frozen=True)
class Scores:
    """One window scored: predicted samples/s of every candidate (the current one = observed)."""

    predicted: np.ndarray
    job: JobInputs
    embedding: np.ndarray
    #: the network's log speed ratio of every candidate to the configuration in force, before calibration
    raw: np.ndarray


class Scorer:
    """Predicted speed of every candidate, from the meta-network, anchored on what was observed.

    The network predicts ``log(speed(candidate) / speed(current))``; the
    prediction for the configuration in force is made equal to the observed
    speed, so only the network's *ratios* matter. Candidates that run the same
    schedule (:class:`Equivalence`) get one prediction, the geometric mean of
    the network's for them.

    The network's log ratios are calibrated on this job: every prediction
    that was measured is a pair (predicted log ratio ``x``, measured log
    ratio ``y``, both against the configuration in force when it was made),
    and the ratios are scaled by the slope ``y ~ slope * x`` of the last
    pairs (least squares through the origin with a prior of slope 1 worth
    ``prior`` squared log ratio, clipped to ``[min_slope, 1]``). A network
    whose predicted gains keep failing on this system (they were 12-33% off
    on measured configurations of the real testbed and up to 3.5x on those it
    proposed) is believed less, so its favourites stop costing trials; one
    that is right keeps a slope near 1. Beyond the slope, what the pairs
    measured past the calibrated network is fitted as a linear *trend* in
    (log2 credit multiple, log2 partition) of each pair's move (ridge,
    weight ``ridge``: :meth:`trend`) and added to every candidate's
    prediction: on real runs the network's misses lie along those two axes
    (it ranks credit 1X and large partitions first), and a fitted trend
    raised its top-3 recall on held-out real rows from 30% to 72-90% after
    3-4 windows (docs/benchmarks.md 6.5). :meth:`sigma` is the predictor's
    demonstrated error on this job (root mean square of what the pairs
    measured beyond the slope and the trend), ``sigma0`` before any.

    Args:
        net: the meta-network.
        space: the candidates.
        sigma0: assumed error before any prediction was checked (0.08).
        sigma_min: floor of the demonstrated error (0.02: a window's noise).
        equivalent: classify candidates by schedule (:class:`Equivalence`; True).
        calibrate: scale the network's log ratios by their slope on this job (True).
        prior: weight of the prior slope 1, in squared log ratio (0.05: about one
            measured prediction of a 22% change).
        min_slope: the lowest slope (0.25).
        ridge: weight of the trend's ridge, in squared log ratio per squared
            power of two (0.5: the trend needs a few pairs before it moves
            predictions by a few percent).

    Raises:
        ValueError: an argument out of its range.
    """

    def __init__(self, net: MetaNetwork, space: SearchSpace, *, sigma0: float = 0.08, sigma_min: float = 0.02,
                 equivalent: bool = True, calibrate: bool = True, prior: float = 0.05, min_slope: float = 0.25,
                 ridge: float = 0.5) -> None:
        self.net = net
        self.space = space
        self.cands = space.to_array()
        self.sigma0 = _check_range("sigma0", sigma0, 1e-3, 2.0)
        self.sigma_min = _check_range("sigma_min", sigma_min, 1e-3, 2.0)
        self.errors: deque[float] = deque(maxlen=8)  # log errors of checked predictions
        self.pairs: deque[tuple[float, float]] = deque(maxlen=8)  # (predicted, measured) log ratios, uncalibrated
        # the trend's coordinates of each pair's move (TREND of the configuration measured less the anchor's; 0, 0: none)
        self.moves: deque[tuple[float, float]] = deque(maxlen=8)
        self.ridge = _check_range("ridge", ridge, 1e-6, 1e6)
        self._phi = trend_coords(self.cands)
        self.calibrate = bool(calibrate)
        self.prior = _check_range("prior", prior, 1e-6, 1e6)
        self.min_slope = _check_range("min_slope", min_slope, 0.0, 1.0)
        self.equivalence = Equivalence(space, equivalent)

    def score(self, obs_config: Config, speed: float, features: Any) -> Scores:
        """Score every candidate for a window of ``obs_config`` at ``speed``.

        Raises:
            ValueError: the features or the network's output are not finite.
        """
        job = featurize(features, obs_config, speed)
        emb = self.net.encode(job)
        eq = self.equivalence
        eq.update(job.layer_bytes)
        n = eq.n_classes
        here = eq.of(obs_config)
        logr = self.net.head_predict(emb, candidate_features(job.layer_bytes, self.cands, obs_config))
        logr = (np.bincount(eq.ids, logr, n) / np.bincount(eq.ids, minlength=n))[eq.ids]  # one prediction per schedule
        if here < n:  # a class of the space: its (shared) prediction, so the whole class anchors at the observed speed
            base = float(logr[int(np.argmax(eq.ids == here))])
        else:
            own = np.array([[obs_config.partition_bytes, obs_config.credit_bytes]], dtype=np.float64)
            base = float(self.net.head_predict(emb, candidate_features(job.layer_bytes, own, obs_config))[0])
        if not (np.all(np.isfinite(logr)) and np.all(np.isfinite(emb)) and math.isfinite(base)):
            raise ValueError("the meta-network produced NaN or inf")
        raw = logr - base
        trend = self._phi @ self.trend()
        trend = (np.bincount(eq.ids, trend, n) / np.bincount(eq.ids, minlength=n))[eq.ids]  # one per schedule, as logr
        here_trend = float(trend[int(np.argmax(eq.ids == here))]) if here < n else float(trend_coords(
            np.array([[obs_config.partition_bytes, obs_config.credit_bytes]], dtype=np.float64))[0] @ self.trend())
        pred = speed * np.exp(self.slope() * raw + trend - here_trend)
        return Scores(pred, job, emb, raw)

    def move(self, frm: Config, to: Config) -> tuple[float, float]:
        """The trend's coordinates of a move from ``frm`` to ``to`` (for :meth:`checked`)."""
        a = trend_coords(np.array([[frm.partition_bytes, frm.credit_bytes], [to.partition_bytes, to.credit_bytes]],
                                  dtype=np.float64))
        return float(a[1, 0] - a[0, 0]), float(a[1, 1] - a[0, 1])

    def checked(self, predicted: float, observed: float, raw: float | None = None, anchor: float | None = None,
                move: tuple[float, float] | None = None) -> float:
        """Record a prediction that was measured; returns its relative error.

        ``raw``: the network's log ratio behind it, ``anchor``: the speed it was
        anchored on; with both, the pair calibrates the slope. ``move``: the
        trend's coordinates of the move from the anchor's configuration to the
        one measured (:meth:`move`); with it, the pair fits the trend too.
        """
        self.errors.append(math.log(observed / predicted))
        if raw is not None and anchor is not None and anchor > 0 and math.isfinite(raw):
            self.pairs.append((float(raw), math.log(observed / anchor)))
            self.moves.append((0.0, 0.0) if move is None else (float(move[0]), float(move[1])))
        return abs(observed / predicted - 1.0)

    def trend(self) -> np.ndarray:
        """This job's correction of the network along (log2 credit multiple, log2 partition), log units per power of two.

        Ridge regression (weight ``ridge``) of what the last pairs measured
        beyond the network's calibrated ratio on their moves in those two
        coordinates: the network's misses on real runs lie along them (it
        ranks credit 1X and large partitions first where 2-4X and 0.5-2 MiB
        are fastest, docs/benchmarks.md 6.5). Zero before any pair, or
        uncalibrated.
        """
        if not self.calibrate or not self.pairs:
            return np.zeros(2)
        b = self.slope()
        d = np.array(self.moves, dtype=np.float64)
        r = np.array([y - b * x for x, y in self.pairs])
        return np.linalg.solve(d.T @ d + self.ridge * np.eye(2), d.T @ r)

    def _residuals(self) -> list[float]:
        """What each pair measured beyond the calibrated network and the trend (log units)."""
        b, a = self.slope(), self.trend()
        return [y - b * x - (m[0] * a[0] + m[1] * a[1]) for (x, y), m in zip(self.pairs, self.moves)]

    def slope(self) -> float:
        """The scale of the network's log ratios on this job (1 before any pair, or uncalibrated)."""
        if not self.calibrate or not self.pairs:
            return 1.0
        sxy = sum(x * y for x, y in self.pairs)
        sxx = sum(x * x for x, _ in self.pairs)
        return min(1.0, max(self.min_slope, (sxy + self.prior) / (sxx + self.prior)))

    def downside(self) -> float:
        """The largest over-prediction among the last pairs, in log units (0 before any, or none over)."""
        return max([-r for r in self._residuals()] + [0.0])

    def sigma(self) -> float:
        if self.pairs:
            sq = [r * r for r in self._residuals()]
        elif self.errors:
            sq = [e * e for e in self.errors]
        else:
            return self.sigma0
        return max(self.sigma_min, math.sqrt(sum(sq) / len(sq)))

    def state_dict(self) -> dict[str, Any]:
        return {"errors": list(self.errors), "pairs": [list(p) for p in self.pairs], "moves": [list(m) for m in self.moves]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "errors" in state:
            self.errors.clear()
            self.errors.extend(float(e) for e in state["errors"])
        if "pairs" in state:
            self.pairs.clear()
            self.pairs.extend((float(x), float(y)) for x, y in state["pairs"])
            moves = state.get("moves", [])
            self.moves.clear()  # pairs saved without their moves fit the slope only
            self.moves.extend([(float(a), float(b)) for a, b in moves] if len(moves) == len(self.pairs)
                              else [(0.0, 0.0)] * len(self.pairs))
