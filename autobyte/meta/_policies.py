"""The AutoByte tuner's policies: small classes, one decision method each (numpy only).

* :class:`Equivalence` — which candidates run the same schedule on this job's
  gradients (one measurement tells them all).
* :class:`Scorer` — the meta-network's prediction of every candidate's speed,
  one per schedule, calibrated on the configuration in force, and the
  predictor's demonstrated error on this job.
* :class:`Ledger` — measured speeds per regime (set of conditions). Regimes
  are remembered: when conditions return to ones seen before (the alternating
  link), what was measured there is reused at once.
* :class:`Mover` — go to the fastest configuration *measured* in this regime
  when it beats the one in force (this is also the rollback: after a trial
  that measured slower, the fastest measured is the one left).
* :class:`Verifier` — re-measure the configuration a trial left when the
  trial ran far from its prediction (a change of conditions at that moment, or
  a wrong prediction: the detector tells which).
* :class:`Aborter` — end a trial at its first check when it already runs
  clearly slower than the fastest configuration measured here, instead of
  paying for its whole window.
* :class:`Explorer` — measure a candidate not yet measured here while the
  expected gain over the time left in this regime exceeds the expected cost of
  the trial, and while the do-no-harm allowance covers the trial's worst case.
* :class:`Payoff` — what this job's trials paid against what the explorer
  expected of them; the explorer's expected gains are scaled by it.
* :class:`Learner` — labels pairs of windows of one regime with their speed
  ratio and adapts the network's head online when its predictions are wrong.

Regime *detection* is not here: the controller's one detector
(:class:`~autobyte.core.regime.RegimeDetector`) sets
``Observation.regime_changed``; the ledger only decides which regime a window
belongs to.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Collection

import numpy as np

from autobyte.core.regime import PAIR_MEMORY, PAIR_MIN, pair_scatter
from autobyte.core.scheduler import schedule_classes
from autobyte.core.space import Config, SearchSpace
from autobyte.core.trigger import AdaptTrigger, GainTrigger

from ._features import JobInputs, candidate_features, featurize
from ._network import MetaNetwork


def _cfg(c: Config) -> list[int]:
    return [c.partition_bytes, c.credit_bytes]


def _check_range(name: str, value: object, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or not low <= value <= high:
        raise ValueError(f"{name} must be a number in [{low:g}, {high:g}], but got {name}={value!r}.")
    return float(value)


# ---------------------------------------------------------------------- scoring
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


@dataclass(frozen=True)
class Scores:
    """One window scored: predicted samples/s of every candidate (the current one = observed)."""

    predicted: np.ndarray
    job: JobInputs
    embedding: np.ndarray
    #: the network's log speed ratio of every candidate to the configuration in force, before calibration
    raw: np.ndarray


class Scorer:
    """Predicted speed of every candidate, from the meta-network (or the simulator), anchored on what was observed.

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
    that is right keeps a slope near 1. :meth:`sigma` is the predictor's
    demonstrated error on this job (root mean square of ``y - slope * x``
    over the last pairs), ``sigma0`` before any.

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
        predictor: where the log ratios come from: ``None``, the network;
            a :class:`~autobyte.meta._simscore.SimPredictor`, the simulator
            built from the window (the network still encodes the job, for
            the learner). Calibration and the error model are the same for both.
    """

    def __init__(self, net: MetaNetwork, space: SearchSpace, *, sigma0: float = 0.08, sigma_min: float = 0.02,
                 equivalent: bool = True, calibrate: bool = True, prior: float = 0.05, min_slope: float = 0.25,
                 predictor: Any = None) -> None:
        self.net = net
        self.predictor = predictor
        self.space = space
        self.cands = space.to_array()
        self.sigma0 = _check_range("sigma0", sigma0, 1e-3, 2.0)
        self.sigma_min = _check_range("sigma_min", sigma_min, 1e-3, 2.0)
        self.errors: deque[float] = deque(maxlen=8)  # log errors of checked predictions
        self.pairs: deque[tuple[float, float]] = deque(maxlen=8)  # (predicted, measured) log ratios, uncalibrated
        self.trials: deque[float] = deque(maxlen=8)  # log(measured / predicted) of trials, as predicted when chosen
        self.calibrate = bool(calibrate)
        self.prior = _check_range("prior", prior, 1e-6, 1e6)
        self.min_slope = _check_range("min_slope", min_slope, 0.0, 1.0)
        self.equivalence = Equivalence(space, equivalent)

    def score(self, obs_config: Config, speed: float, features: Any, *, changed: bool = False,
              measured: dict[Config, float] | None = None) -> Scores:
        """Score every candidate for a window of ``obs_config`` at ``speed``.

        ``changed``: the conditions changed before this window (a simulator
        predictor simulates them anew). ``measured``: the speeds measured in
        the current conditions, this window's included (a simulator predictor
        with ``fit`` fits its per-message cost to them).

        Raises:
            ValueError: the features or the predictor's output are not finite, or
                the simulator predictor cannot simulate the window.
        """
        job = featurize(features, obs_config, speed)
        emb = self.net.encode(job)
        eq = self.equivalence
        eq.update(job.layer_bytes)
        n = eq.n_classes
        here = eq.of(obs_config)
        if self.predictor is not None:
            logr = self.predictor.log_speeds(features, obs_config, eq.ids, refresh=changed, measured=measured)
            base = float(logr[int(np.argmax(eq.ids == here))]) if here < n else self.predictor.log_speed(obs_config)
        else:
            logr = self.net.head_predict(emb, candidate_features(job.layer_bytes, self.cands, obs_config))
            logr = (np.bincount(eq.ids, logr, n) / np.bincount(eq.ids, minlength=n))[eq.ids]  # one prediction per schedule
            if here < n:  # a class of the space: its (shared) prediction, so the whole class anchors at the observed speed
                base = float(logr[int(np.argmax(eq.ids == here))])
            else:
                own = np.array([[obs_config.partition_bytes, obs_config.credit_bytes]], dtype=np.float64)
                base = float(self.net.head_predict(emb, candidate_features(job.layer_bytes, own, obs_config))[0])
        if not (np.all(np.isfinite(logr)) and np.all(np.isfinite(emb)) and math.isfinite(base)):
            raise ValueError("the predictor produced NaN or inf")
        raw = logr - base
        pred = speed * np.exp(self.slope() * raw)
        return Scores(pred, job, emb, raw)

    def checked(self, predicted: float, observed: float, raw: float | None = None, anchor: float | None = None) -> float:
        """Record a prediction that was measured; returns its relative error.

        ``raw``: the network's log ratio behind it, ``anchor``: the speed it was
        anchored on; with both, the pair calibrates the slope.
        """
        self.errors.append(math.log(observed / predicted))
        if raw is not None and anchor is not None and anchor > 0 and math.isfinite(raw):
            self.pairs.append((float(raw), math.log(observed / anchor)))
        return abs(observed / predicted - 1.0)

    def slope(self) -> float:
        """The scale of the network's log ratios on this job (1 before any pair, or uncalibrated)."""
        if not self.calibrate or not self.pairs:
            return 1.0
        sxy = sum(x * y for x, y in self.pairs)
        sxx = sum(x * x for x, _ in self.pairs)
        return min(1.0, max(self.min_slope, (sxy + self.prior) / (sxx + self.prior)))

    def trial(self, predicted: float, observed: float) -> None:
        """A trial chosen at ``predicted`` samples/s measured ``observed``."""
        if predicted > 0 and observed > 0 and math.isfinite(predicted) and math.isfinite(observed):
            self.trials.append(math.log(observed / predicted))

    def trial_bias(self, prior: float = 2.0) -> float:
        """How far below their predictions trials run on this job, in log units (0 or negative).

        Trials are the candidates predicted best among many unmeasured ones,
        so their predictions err upwards more than the network's error
        elsewhere does (the winner's curse). The mean of the last trials'
        ``log(measured / predicted)``, shrunk towards 0 by ``prior`` trials'
        worth of weight, and never above 0 (a trial that ran faster than
        predicted does not make the next one look better).
        """
        return min(0.0, sum(self.trials) / (len(self.trials) + prior))

    def downside(self) -> float:
        """The largest over-prediction among the last pairs, in log units (0 before any, or none over)."""
        b = self.slope()
        return max([b * x - y for x, y in self.pairs] + [0.0])

    def sigma(self) -> float:
        if self.pairs:
            b = self.slope()
            sq = [(y - b * x) ** 2 for x, y in self.pairs]
        elif self.errors:
            sq = [e * e for e in self.errors]
        else:
            return self.sigma0
        return max(self.sigma_min, math.sqrt(sum(sq) / len(sq)))

    def state_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"errors": list(self.errors), "pairs": [list(p) for p in self.pairs], "trials": list(self.trials)}
        if self.predictor is not None:
            out["predictor"] = self.predictor.state_dict()
        return out

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.predictor is not None:
            self.predictor.load_state_dict(state.get("predictor", {}))
        if "errors" in state:
            self.errors.clear()
            self.errors.extend(float(e) for e in state["errors"])
        if "pairs" in state:
            self.pairs.clear()
            self.pairs.extend((float(x), float(y)) for x, y in state["pairs"])
        if "trials" in state:
            self.trials.clear()
            self.trials.extend(float(e) for e in state["trials"])


# ---------------------------------------------------------------------- ledger
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

    def speeds(self, stale_windows: int) -> dict[Config, float]:
        """Measurements not older than ``stale_windows`` windows of this regime."""
        return {c: v[0] for c, v in self.measured.items() if self.windows - v[2] <= stale_windows}

    def best(self) -> Config | None:
        return max(self.measured, key=lambda c: self.measured[c][0]) if self.measured else None

    def to_dict(self) -> dict[str, Any]:
        return {"ident": self.ident, "measured": [_cfg(c) + list(v) for c, v in self.measured.items()],
                "windows": self.windows, "started": self.started, "durations": list(self.durations), "misses": self.misses}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Regime":
        return cls(int(d["ident"]), {Config(int(m[0]), int(m[1])): [float(m[2]), float(m[3]), float(m[4])] for m in d["measured"]},
                   int(d["windows"]), int(d["started"]), [int(x) for x in d["durations"]], int(d.get("misses", 0)))


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
    achieved 1.9x the link rate of larger ones on one link). With
    ``withdraw``, a change seen on a configuration's own speed is undone too
    when that same configuration, measured again while the new regime is
    young, runs within ``match`` of its speed in the regime left: the one
    check that showed the change was a transient (a GPU's 5-iteration checks
    ran 11-14% off their level and back at the next, under unchanged
    conditions), so it is dropped and the regime left goes on.
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
        withdraw: undo a change that the configuration whose speed showed it
            does not confirm (see above; False: :class:`AutoByteTuner
            <autobyte.meta.AutoByteTuner>`'s ``confirm``, off by default).
    """

    def __init__(self, *, match: float = 0.08, memory: int = 3, stale_windows: int = 30, max_regimes: int = 16,
                 default_horizon: int = 200, recall: bool = True, young_windows: int = 3, withdraw: bool = False) -> None:
        self.match = _check_range("match", match, 1e-3, 1.0)
        self.memory = int(_check_range("memory", memory, 1, 100))
        self.stale_windows = int(_check_range("stale_windows", stale_windows, 1, 1e6))
        self.max_regimes = int(_check_range("max_regimes", max_regimes, 1, 1000))
        self.default_horizon = int(_check_range("default_horizon", default_horizon, 1, 1e7))
        self.recall = bool(recall)
        self.young_windows = int(_check_range("young_windows", young_windows, 0, 1e6))
        if not isinstance(withdraw, bool):
            raise ValueError(f"withdraw must be True or False, but got withdraw={withdraw!r}.")
        self.withdraw = withdraw
        self.regimes: list[Regime] = [Regime(0)]
        self.current = self.regimes[0]
        self._next = 1
        self.recalled: Regime | None = None  # the regime this window recalled, if any
        self._left: Regime | None = None  # the regime the last change left when the change ruled it out (else None)
        self._prev: Regime | None = None  # the regime the last change left
        # a measurement the caller did not file at the last change (config, speed, window share): filed if it is undone
        self._aside: tuple[Config, float, float] | None = None
        # the configuration whose own speed showed the last change (and ruled out ``_left``), with that speed
        self._shown: tuple[Config, float] | None = None
        #: ``|log(window / mean)|`` of the last :data:`~autobyte.core.regime.PAIR_MEMORY` whole windows of a
        #: configuration measured again in unchanged conditions, against its mean there (:meth:`scatter`)
        self.gaps: list[float] = []

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
            if not changed and weight >= 1.0 and m[0] > 0 and speed > 0:
                self.gaps.append(abs(math.log(speed / m[0])))
                del self.gaps[:-PAIR_MEMORY]
            r.measured[config] = [self._join(m, speed, weight), m[1] + weight, float(r.windows)]
        return r

    def scatter(self) -> float | None:
        """How far a window of a configuration lies from its mean in unchanged conditions (log units, a
        standard deviation: :func:`~autobyte.core.regime.pair_scatter` of :attr:`gaps`); ``None`` before
        :data:`~autobyte.core.regime.PAIR_MIN` windows measured again."""
        return pair_scatter(self.gaps) if len(self.gaps) >= PAIR_MIN else None

    def counts(self) -> dict[Config, float]:
        """Windows behind each measurement of the current regime (at most ``memory``: the mean's own)."""
        return {c: min(v[1], float(self.memory)) for c, v in self.current.measured.items()}

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
        self._shown = None if inferred or config is None or speed is None else (config, float(speed))
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
            # ruled out by one configuration's own speed: only that configuration, running there as it
            # ran before, says the check that showed the change was a transient
            if not self.withdraw or self._shown is None or self._shown[0] != config:
                return
            m = young.measured.get(config)
            if m is not None and m[1] <= 1.0 + 1e-9 and abs(m[0] - self._shown[1]) <= 1e-9 * abs(m[0]):
                del young.measured[config]  # that check, the only measurement of it there, is dropped
            self._left = None
        self._shown = None
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
                "aside": None if self._aside is None else _cfg(self._aside[0]) + list(self._aside[1:]),
                "shown": None if self._shown is None else _cfg(self._shown[0]) + [self._shown[1]],
                "gaps": list(self.gaps)}

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
        if "shown" in state:
            w = state["shown"]
            self._shown = None if w is None else (Config(int(w[0]), int(w[1])), float(w[2]))
        if "gaps" in state:
            self.gaps = [float(x) for x in state["gaps"]][-PAIR_MEMORY:]


# ---------------------------------------------------------------------- moving
class Mover:
    """Go to the fastest configuration measured in this regime when it beats the one in force by ``min_gain``.

    The threshold is core's :class:`~autobyte.core.trigger.GainTrigger`
    (no cooldown: every decision is followed by a measured window anyway).

    Args:
        min_gain: measured advantage needed to move (0.02; a move costs
            warm-up iterations). It is compared with the window just
            measured, not with a mean: on the CPU testbed and the H100 one
            window in 4-5 of a configuration whose conditions did not change
            falls more than 2% below the mean of its last 3 (on the H200 one
            in 30-75; docs/benchmarks.md 7.22), so a configuration measured
            level with the one in force is then moved to on noise.
        noise_z: with a ``scatter`` (:meth:`Ledger.scatter`), a configuration
            in force that has run 2 windows or more in these conditions (not a
            trial on its first) is judged by its mean too, and left only when
            another's mean beats it by ``noise_z`` standard deviations of the
            difference of the two means as well (``scatter * sqrt(1/n + 1/m)``
            for means of ``n`` and ``m`` windows); ``None`` (default):
            ``min_gain`` against the window just measured, as above.
    """

    def __init__(self, min_gain: float = 0.02, noise_z: float | None = None) -> None:
        self.trigger = GainTrigger(min_gain, cooldown_windows=0, revisit_gain=min_gain)
        self.noise_z = None if noise_z is None else _check_range("noise_z", noise_z, 0.0, 100.0)

    def propose(self, window: int, measured: dict[Config, float], current: Config, speed: float,
                left: Config | None, counts: dict[Config, float] | None = None,
                scatter: float | None = None) -> tuple[Config, str] | None:
        """At ``window`` (a counter), the measured configuration to move to, with the reason, or ``None``.

        ``counts``, ``scatter``: windows behind each measurement and the
        ledger's scatter, for ``noise_z`` (without either, ``min_gain`` alone).
        """
        others = {c: v for c, v in measured.items() if c != current}
        if not others:
            return None
        best = max(others, key=others.__getitem__)
        noise = ""
        if self.noise_z is not None and scatter is not None and counts is not None and current in measured \
                and counts.get(current, 0.0) >= 2.0:
            speed = measured[current]  # like with like: a mean against a mean
            n, m = counts[current], max(counts.get(best, 1.0), 1.0)  # n >= 2: checked above
            need = self.noise_z * scatter * math.sqrt(1.0 / n + 1.0 / m)
            if math.log(others[best] / speed) <= need:
                return None
            noise = f"; means of {n:g} and {m:g} windows, {100 * math.expm1(need):.1f}% needed at a scatter of {100 * scatter:.1f}%"
        if not self.trigger.should_reconfigure(window, current, speed, best, others[best]):
            return None
        what = "rollback" if best == left else "measured best"
        return best, (f"{what}: {best} measured {others[best]:.1f} samples/s in these conditions, "
                      f"{current} {speed:.1f} ({100 * (others[best] / speed - 1):+.1f}%{noise})")


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


# ---------------------------------------------------------------------- exploring
def _norm_pdf(z: np.ndarray) -> np.ndarray:
    return np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)


def _norm_cdf(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.vectorize(math.erf)(z / math.sqrt(2.0)))


# The explorer's two units, for X ~ N(mu, s^2) the log speed ratio of a candidate to a reference: the expected
# gain ("gain", over the best measured) and the expected loss counted where X is below a line <= 0 ("below",
# against the configuration in force), in log speed ratios or in iterations' worth of time.
def _log_gain(mu: np.ndarray, s: np.ndarray) -> np.ndarray:
    """``E[max(X, 0)]``: the expected log improvement."""
    return s * _norm_pdf(mu / s) + mu * _norm_cdf(mu / s)


def _log_below(mu: np.ndarray, s: np.ndarray, line: np.ndarray) -> np.ndarray:
    """``E[-X; X < line]``: the expected log slowdown below the line."""
    z = (line - mu) / s
    return s * _norm_pdf(z) - mu * _norm_cdf(z)


def _time_gain(mu: np.ndarray, s: np.ndarray) -> np.ndarray:
    """``E[max(1 - exp(-X), 0)]``: the expected share of an iteration's time saved."""
    return _norm_cdf(mu / s) - np.exp(-mu + s * s / 2) * _norm_cdf((mu - s * s) / s)


def _below(mu: np.ndarray, s: np.ndarray, line: np.ndarray) -> np.ndarray:
    """``E[exp(-X) - 1; X < line]``: the expected time lost per iteration, in iterations, counted where ``X``
    is below ``line`` (``exp(-X)`` is log-normal: its mean below the line is the normal's, shifted by ``s^2``)."""
    return np.exp(-mu + s * s / 2) * _norm_cdf((line - mu + s * s) / s) - _norm_cdf((line - mu) / s)


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
        near_best: distances are taken from the configurations measured
            within this fraction of the best measured here (a trust region
            around what runs well), not from every configuration measured;
            ``None`` (default): from every one, so a trial may chain outwards
            from a slow one.
        min_predicted_gain: a candidate is tried only when its prediction
            beats the best measured here by this much; ``None`` (default):
            the expected improvement alone decides, so a candidate predicted
            slower can be tried for its uncertainty.
        time_units: gains and costs in iterations' worth of time: an
            iteration at ``v`` instead of ``v0`` costs ``v0 / v - 1``
            iterations, so a trial with a fat downside (a far, uncertain
            candidate that may run 10x slower) costs what it would; ``False``
            (default): in log speed ratios, which count a 10x slowdown as 2.3
            iterations per iteration instead of 9.
        gain_floor: the improvement (log units) a trial must find before it
            counts: the mover's ``min_gain``, under which a faster measurement
            moves nothing (0, default: every improvement counts).
        within_phase: a trial starts only when it can end before the
            conditions are expected to change (``left``, the iterations this
            occurrence of the regime is expected to last, at least
            ``trial_iters``), and its gain counts from its end (``horizon -
            trial_iters``). A trial that straddles a change measures neither
            regime: on real runs with 20-iteration phases, trials started 5-10
            iterations before a change were aborted or rolled back on the
            change's slowdown, and what they measured was filed under the
            wrong conditions. ``False`` (default): gains over ``horizon``, any time.
    """

    def __init__(self, trial_iters: int = 12, widen: float = 0.25, max_distance: float = 3.0, max_sigma: float = 0.25,
                 max_misses: int = 3, abort_margin: float | None = None, abort_iters: int = 7,
                 near_best: float | None = None, min_predicted_gain: float | None = None, time_units: bool = False,
                 within_phase: bool = False, gain_floor: float = 0.0) -> None:
        self.time_units = bool(time_units)
        self.gain_floor = _check_range("gain_floor", gain_floor, 0.0, 1.0)
        self.within_phase = bool(within_phase)
        self._gain, self._below = (_time_gain, _below) if self.time_units else (_log_gain, _log_below)
        self.trial_iters = int(_check_range("trial_iters", trial_iters, 1, 1e6))
        self.abort_margin = None if abort_margin is None else _check_range("abort_margin", abort_margin, 1e-3, 0.9)
        self.abort_iters = int(_check_range("abort_iters", abort_iters, 1, self.trial_iters))
        self.widen = _check_range("widen", widen, 0.0, 10.0)
        self.max_distance = _check_range("max_distance", max_distance, 0.0, 64.0)
        self.max_sigma = _check_range("max_sigma", max_sigma, 1e-3, 10.0)
        self.max_misses = int(_check_range("max_misses", max_misses, 1, 1e6))
        self.near_best = None if near_best is None else _check_range("near_best", near_best, 0.0, 0.9)
        self.min_predicted_gain = None if min_predicted_gain is None else _check_range("min_predicted_gain", min_predicted_gain, -0.5, 10.0)

    def propose(self, space: SearchSpace, cands: np.ndarray, predicted: np.ndarray, measured: dict[Config, float],
                current: Config, speed: float, sigma: float, horizon: float, allowance: float | None,
                misses: int = 0, equivalence: Equivalence | None = None, downside: float = 0.0,
                bias: float = 0.0, payoff: float = 1.0, left: float | None = None,
                spread: float | None = None, skip: Collection[Config] = ()) -> tuple[Config, str, float] | None:
        """The candidate to try next, with the reason and its expected improvement over the best
        measured (per iteration, in this explorer's units, before ``payoff``), or ``None`` (no trial pays).

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
        ``bias``: how far below their predictions this job's trials ran (log
        units, 0 or negative; :meth:`Scorer.trial_bias`); every candidate's
        prediction is lowered by it before its gain and cost are weighed.
        ``payoff``: the share of their expected gain this job's trials
        realised (:meth:`Payoff.factor`, in [0, 1]); every expected gain is
        scaled by it before it is weighed against the cost.
        ``left``: iterations this occurrence of the conditions is expected to
        last (``None``: as long as ``horizon``); read with ``within_phase``.
        ``spread``: how much this job's trials found beyond the best
        measured (the explorer's units, :meth:`Payoff.spread`): the scale of
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

        Raises:
            ValueError: ``bias`` positive or not finite; ``payoff`` not in [0, 1]; ``spread`` not in (0, 10].
        """
        if spread is not None:
            _check_range("spread", spread, 1e-6, 10.0)
        if isinstance(bias, bool) or not isinstance(bias, (int, float)) or not math.isfinite(bias) or bias > 0:
            raise ValueError(f"bias must be a finite number <= 0 (log units), but got bias={bias!r}.")
        _check_range("payoff", payoff, 0.0, 1.0)
        if not measured or misses >= self.max_misses:
            return None
        if self.within_phase:
            if (horizon if left is None else left) < self.trial_iters:
                return None  # it would straddle the change: measure neither regime
            horizon = horizon - self.trial_iters  # what a faster configuration found wins, after the trial
        predicted = predicted * math.exp(bias)  # what a trial is expected to run, given how this job's trials ran
        sigma = min(sigma, self.max_sigma)  # beyond it the predictor ranks no better than chance; misses stop the search
        best_known = max(measured.values())
        near = [c for c, v in measured.items() if self.near_best is None or v >= best_known * (1.0 - self.near_best)]
        known = np.array([[c.partition_bytes, c.credit_bytes] for c in near], dtype=np.float64)
        done = np.array([c in measured or c == current for c in space])
        if equivalence is not None:
            same = equivalence.members([*measured, current])
            known = np.vstack([known, cands[equivalence.members(near) & ~done]])  # what one member measured holds for all
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
        if self.min_predicted_gain is not None:
            free &= predicted > best_known * (1.0 + self.min_predicted_gain)
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
        # in time units an iteration at speed v instead of v0 costs v0 / v - 1 of one, which a log
        # slowdown understates in the tail (10x slower: 9 iterations, log 2.3)
        ei = self._gain(mu_gain - self.gain_floor, s_gain)  # expected improvement over the best measured (beyond the floor)
        el = self._below(mu_cost, s, np.zeros_like(mu_cost))  # expected slowdown against the current config
        cost = el * self.trial_iters
        low = np.maximum(predicted, 1e-12) * np.exp(-np.maximum(s, downside))  # one error below, or as far as the worst miss
        iters = np.full(len(predicted), float(self.trial_iters))
        if self.abort_margin is not None:
            # a trial whose truth falls below the abort line runs only abort_iters: the slowdown
            # below min(line, current) is paid for that many iterations, not a whole trial's
            line = np.log(best_known * (1.0 - self.abort_margin) / speed)
            cut = self._below(mu_cost, s, np.minimum(line, 0.0))  # the expected slowdown with the truth below the line
            cost = cost - (self.trial_iters - self.abort_iters) * np.maximum(cut, 0.0)
            iters = np.where(low < best_known * (1.0 - self.abort_margin), float(self.abort_iters), iters)
        value = payoff * ei * horizon - cost
        if allowance is not None:  # the trial's cost if the truth is one sigma below the prediction
            worst = iters * (speed / low - 1.0)
            free &= worst <= allowance
        value = np.where(free, value, -np.inf)
        k = int(np.argmax(value))
        if not value[k] > 0:
            return None
        cfg = space[k]
        lowered = f", lowered {100 * (1 - math.exp(bias)):.0f}% as this job's trials ran" if bias < 0 else ""
        shrunk = "" if spread is None else f", its gain shrunk to the {100 * spread:.1f}% scale of what this job's trials found"
        paid = f" (x{payoff:.2f}: the share of expected gains this job's trials realised)" if payoff < 1 else ""
        return cfg, (f"explore: {cfg} predicted {predicted[k]:.1f} samples/s{lowered} (best measured {best_known:.1f}, "
                     f"error {100 * s[k]:.0f}%{shrunk}): expected gain {payoff * ei[k] * horizon:.2f} iterations over {horizon:.0f} "
                     f"left in these conditions{paid}, expected cost {cost[k]:.2f}"), float(ei[k])


class Payoff:
    """What this job's trials paid against what the explorer expected of them.

    The explorer values a trial by its expected improvement over the best
    measured configuration (:class:`Explorer`, per iteration, in its units),
    computed from the predictor's error as if that error were unbiased noise.
    On a system unlike the one the predictor learnt, its favourites keep
    losing (real runs: trials predicted 1.5x faster that ran 10-50% slower,
    one after another), and the error model cannot see it: it describes how
    far predictions miss, not that the best-looking ones miss downwards.
    Each trial's outcome is recorded here against its expectation: the
    *realised* improvement over the best measured when it was chosen, in the
    explorer's units (``max(0, log(measured / best))``, or with
    ``time_units`` ``max(0, 1 - best / measured)``; 0 for a trial that found
    nothing faster, or was aborted).
    :meth:`factor` is the ratio of the realised to the expected improvement
    over the last ``memory`` trials, with ``prior`` trials' worth of weight on
    a ratio of 1 (a job's first trials are taken at the predictor's word),
    never above 1 (a lucky trial does not make the predictor's next favourite
    look better than predicted). The explorer multiplies every expected gain
    by it, so a job whose trials keep finding nothing stops exploring once a
    trial's gain no longer covers its cost, in every regime, not after
    ``max_misses`` in each.

    Args:
        prior: trials' worth of weight on a ratio of 1 (1.0).
        memory: trials remembered (8).
        time_units: improvements as the share of an iteration's time saved
            (the explorer's ``time_units``); ``False`` (default): log speed ratios.

    Raises:
        ValueError: ``prior`` not in (0, 100] or ``memory`` not in [1, 1000].
    """

    def __init__(self, prior: float = 1.0, memory: int = 8, time_units: bool = False) -> None:
        self.time_units = bool(time_units)
        self.prior = _check_range("prior", prior, 1e-6, 100.0)
        self.memory = int(_check_range("memory", memory, 1, 1000))
        self.record: deque[tuple[float, float]] = deque(maxlen=self.memory)  # (expected, realised) gains per iteration
        #: the trial chosen and not yet measured: configuration, expected gain, best measured speed when chosen
        self.pending: tuple[Config, float, float] | None = None

    def expect(self, config: Config, expected: float, best_known: float) -> None:
        """A trial of ``config`` starts, expected to improve on ``best_known`` samples/s by ``expected`` (the explorer's units)."""
        if not (math.isfinite(expected) and expected >= 0 and math.isfinite(best_known) and best_known > 0):
            raise ValueError(f"a trial needs a finite expected gain >= 0 and best speed > 0, but got "
                             f"expected={expected!r}, best_known={best_known!r}.")
        self.pending = (config, float(expected), float(best_known))

    def outcome(self, config: Config, speed: float) -> float | None:
        """The pending trial of ``config`` measured ``speed``: recorded; returns the realised gain (``None``: no such trial)."""
        pending, self.pending = self.pending, None
        if pending is None or pending[0] != config or not (math.isfinite(speed) and speed > 0):
            return None
        realised = max(0.0, 1.0 - pending[2] / speed if self.time_units else math.log(speed / pending[2]))
        self.record.append((pending[1], realised))
        return realised

    def drop(self) -> None:
        """The pending trial cannot be judged (conditions changed under it): forgotten."""
        self.pending = None

    def factor(self) -> float:
        """Realised over expected improvement of the last trials, shrunk towards 1, at most 1 (1 before any trial)."""
        if not self.record:
            return 1.0
        mean_expected = sum(e for e, _ in self.record) / len(self.record)
        if mean_expected <= 0:
            return 1.0
        realised = sum(r for _, r in self.record) / mean_expected
        return min(1.0, (self.prior + realised) / (self.prior + len(self.record)))

    def spread(self, prior: float, weight: float = 1.0) -> float:
        """The scale of what this job's trials found: the root mean square of their realised improvements.

        Over the trials remembered, with ``weight`` trials' worth of ``prior``
        (in the explorer's units) before any: where trials keep finding
        nothing faster it wears down to their noise, and the explorer
        expects little of the next one (:class:`Explorer`'s ``spread``);
        where one found 1.1x (a straggler) it grows.

        Raises:
            ValueError: ``prior`` not in (0, 10] or ``weight`` not in (0, 1000].
        """
        prior = _check_range("prior", prior, 1e-6, 10.0)
        weight = _check_range("weight", weight, 1e-6, 1000.0)
        return math.sqrt((weight * prior * prior + sum(r * r for _, r in self.record)) / (weight + len(self.record)))

    def state_dict(self) -> dict[str, Any]:
        p = self.pending
        return {"record": [list(r) for r in self.record], "pending": None if p is None else [*_cfg(p[0]), p[1], p[2]]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "record" in state:
            self.record.clear()
            self.record.extend((float(e), float(r)) for e, r in state["record"])
        if "pending" in state:
            p = state["pending"]
            self.pending = None if p is None else (Config(int(p[0]), int(p[1])), float(p[2]), float(p[3]))


# ---------------------------------------------------------------------- learning
class Learner:
    """Pairs of windows of one regime, labelled with their speed ratio; adapts the head when predictions are wrong.

    Args:
        adapter: the online adaptation (head fine-tuning).
        max_error: relative error of a checked prediction that starts an adaptation (0.10).
        replay_size: labelled rows kept (256).
        background: adapt in a thread (``True``) or inline (deterministic).
    """

    def __init__(self, adapter: Any, *, max_error: float = 0.10, replay_size: int = 256, background: bool = True,
                 enabled: bool = True) -> None:
        self.adapter = adapter
        self.trigger = AdaptTrigger(max_error)
        self.replay_size = int(_check_range("replay_size", replay_size, 1, 1e7))
        self.background = bool(background)
        self.enabled = bool(enabled)
        self.recent: deque[tuple[JobInputs, np.ndarray]] = deque(maxlen=8)
        self.rows: deque[tuple[np.ndarray, np.ndarray, float]] = deque(maxlen=self.replay_size)

    def observe(self, job: JobInputs, emb: np.ndarray, changed: bool, predicted: float | None) -> bool:
        """Add this window's labels; ``True`` when an adaptation started.

        ``predicted`` is what was predicted for this window's configuration
        when it was chosen (``None``: no prediction to check).
        """
        if changed:
            self.forget()
        cfg = np.array([[job.current.partition_bytes, job.current.credit_bytes]], dtype=np.float64)
        for past, pemb in self.recent:
            cf = candidate_features(past.layer_bytes, cfg, past.current)
            self.rows.append((pemb[0], cf[0], math.log(job.observed_speed / past.observed_speed)))
        self.recent.append((job, emb))
        wrong = predicted is not None and self.trigger.should_adapt(predicted, job.observed_speed)
        if not (self.enabled and wrong and len(self.rows) >= 2):
            return False
        e, c, y = (np.array(x) for x in zip(*self.rows))
        return bool(self.adapter.start(e, c, y, background=self.background))

    def forget(self) -> None:
        """Conditions changed: windows of other conditions are no pair for the next ones."""
        self.recent.clear()

    def state_dict(self) -> dict[str, Any]:
        return {"trigger": self.trigger.state_dict(), "recent": [{"layers": _arr(j.layers), "job": _arr(j.job), "layer_bytes": _arr(j.layer_bytes),
                            "current": _cfg(j.current), "observed_speed": j.observed_speed, "embedding": _arr(e)}
                           for j, e in self.recent],
                "rows": [[_arr(e), _arr(c), y] for e, c, y in self.rows]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.trigger.load_state_dict(state.get("trigger", {}))
        if "recent" in state:
            self.recent.clear()
            for r in state["recent"]:
                job = JobInputs(_unarr(r["layers"]), _unarr(r["job"]), _unarr(r["layer_bytes"]),
                                Config(int(r["current"][0]), int(r["current"][1])), float(r["observed_speed"]))
                self.recent.append((job, _unarr(r["embedding"])))
        if "rows" in state:
            self.rows.clear()
            self.rows.extend((_unarr(e), _unarr(c), float(y)) for e, c, y in state["rows"])


def _arr(a: np.ndarray) -> dict[str, Any]:
    """A numpy array as plain types; float values survive JSON exactly (shortest repr round-trips)."""
    a = np.asarray(a)
    return {"dtype": a.dtype.str, "shape": list(a.shape), "data": a.ravel().tolist()}


def _unarr(d: dict[str, Any]) -> np.ndarray:
    return np.asarray(d["data"], dtype=np.dtype(d["dtype"])).reshape(d["shape"])
