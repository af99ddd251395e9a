"""The simulator as the tuner's predictor, built from the job's own window statistics (``predictor="simulator"``).

The meta-network is trained on simulator windows and is 27-36% off on real
rows of unmeasured configurations before adaptation (docs/meta.md). The
simulator itself, fed what the running job measured — per-tensor gradient
sizes and backward times, forward time, achieved link rates, every worker's
compute — predicts the *ratio* of two configurations' speeds on the same
real rows 17-18% off, and picks faster configurations (docs/meta.md,
"The simulator as predictor"; ``benchmarks/sim_predictor_rows.py``). :class:`SimPredictor` gives the
:class:`~autobyte.meta._policies.Scorer` that ratio in place of the
network's: one simulation per schedule class, once per regime (the tuner
asks again when the conditions change), so a decision inside a regime
costs no simulation at all, and conditions seen before (an alternating link)
reuse their simulation.

Assumptions, beside the simulator's own (docs/simulator.md): the link runs at
the slowest rate a worker achieved in the window (a lower bound of the link
when the window's messages were small); every message costs
``per_message_s`` of serial work (1 ms by default: the engine's issuer and
gloo's per-collective work on the 2-core CPU testbed were fitted at 1.30 ms
on the CNN, docs/calibration.md); jitter off.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autobyte.core.space import Config, SearchSpace

#: Serial cost of one message, seconds (docs/calibration.md fitted 1.30 ms on the CNN of the testbed).
DEFAULT_PER_MESSAGE_S = 1e-3
#: Per-message costs tried by the fit (``SimPredictor(fit=True)``), seconds.
FIT_GRID_S = (3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2)


@dataclass
class _Conditions:
    """One set of conditions: the window they were read from, and their simulation once run."""

    features: Any  # RuntimeFeatures of the window
    config: Config  # the configuration that window measured
    ids: np.ndarray | None = None  # the classes simulated
    log_speeds: np.ndarray | None = None  # per candidate
    sim: tuple[Any, Any] | None = None  # (model, cluster)
    measured: dict[Config, float] = field(default_factory=dict)  # speeds measured in these conditions (fit)
    fitted: frozenset[Config] = frozenset()  # the configurations the simulation was fitted on
    per_message_s: float | None = None  # fitted per-message cost (None: the default)


class SimPredictor:
    """Log speed of every candidate, simulated from one window's :class:`~autobyte.core.metrics.RuntimeFeatures`.

    Conditions are those of the window given with ``refresh`` (the first of a
    regime). A simulation is kept for each of the last ``memory`` conditions;
    new conditions within ``match`` (relative) of kept ones on every worker's
    compute time and on the link rate reuse theirs.

    Args:
        space: the candidates.
        per_message_s: serial cost of one message in the simulated cluster
            (:data:`DEFAULT_PER_MESSAGE_S`; in [0, 1]).
        n_iters: simulated iterations per candidate after one warm-up (1).
        match: conditions this close are the same (0.10; in [0, 1]).
        memory: conditions kept (8).
        fit: fit the per-message cost to the speeds measured in the current
            conditions (``log_speeds(measured=...)``), anew each time a
            configuration is measured there for the first time; ``per_message_s``
            is then the prior (False).
        fit_prior: weight of the prior, in squared log ratio per squared
            factor of 3 away from ``per_message_s`` (0.01: a factor 3 weighs as
            a 10% ratio error; chosen on the CNN's real rows, docs/meta.md).

    Raises:
        ValueError: an argument out of range.
    """

    _ARRAYS = ("layer_bytes", "layer_time_s", "forward_s", "bw_up_Bps", "bw_down_Bps", "speed")

    def __init__(self, space: SearchSpace, *, per_message_s: float = DEFAULT_PER_MESSAGE_S, n_iters: int = 1,
                 match: float = 0.10, memory: int = 8, fit: bool = False, fit_prior: float = 0.01) -> None:
        if isinstance(per_message_s, bool) or not isinstance(per_message_s, (int, float)) or not (0 <= per_message_s <= 1):
            raise ValueError(f"per_message_s must be a number of seconds in [0, 1], but got per_message_s={per_message_s!r}.")
        for name, v in (("n_iters", n_iters), ("memory", memory)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive integer, but got {name}={v!r}.")
        if isinstance(match, bool) or not isinstance(match, (int, float)) or not (0 <= match <= 1):
            raise ValueError(f"match must be a number in [0, 1], but got match={match!r}.")
        if not isinstance(fit, bool):
            raise ValueError(f"fit must be True or False, but got fit={fit!r}.")
        self.space = space
        self.fit = fit
        if isinstance(fit_prior, bool) or not isinstance(fit_prior, (int, float)) or not (0 <= fit_prior < math.inf):
            raise ValueError(f"fit_prior must be a non-negative number, but got fit_prior={fit_prior!r}.")
        self.fit_prior = float(fit_prior)
        self.per_message_s = float(per_message_s)
        self.n_iters = n_iters
        self.match = float(match)
        self.memory = memory
        self._kept: list[_Conditions] = []  # most recent (the current ones) last
        self._extra: dict[Config, float] = {}
        self.forward_share = 1.0  # share of the measured forward time found to be compute, last simulation
        self.n_runs = 0
        self.last_s = 0.0
        self.total_s = 0.0

    @staticmethod
    def _rate(features: Any) -> float:
        rates = [float(np.min(features.bw_up_Bps)), float(np.min(features.bw_down_Bps))]
        return min((r for r in rates if r > 0), default=0.0)

    @classmethod
    def _signature(cls, features: Any) -> np.ndarray:
        per_worker = np.asarray(features.layer_time_s).sum(axis=0) + np.asarray(features.forward_s)
        return np.log(np.maximum(np.append(per_worker, cls._rate(features)), 1e-12))

    def _build(self, features: Any, config: Config, per_message_s: float) -> tuple[Any, Any]:
        """The model and cluster of the window of ``config`` described by ``features``, at ``per_message_s``.

        The engine's forward time runs from the iteration's start to the end
        of the forward pass, so it holds the waits for the last iteration's
        parameters; the forward *compute* is the share of it (same shape as
        the backward times) under which the simulated window of ``config``
        shows the forward time measured (bisection; all of it at most).
        """
        from autobyte.sim import Cluster, ModelProfile, simulate

        t = np.asarray(features.layer_time_s, dtype=np.float64)  # (l, n)
        fwd_n = np.asarray(features.forward_s, dtype=np.float64)  # (n,)
        bwd_n = t.sum(axis=0)
        if not (float(bwd_n.mean()) > 0 and np.all(np.isfinite(bwd_n))):
            raise ValueError("the window measured no backward time: cannot simulate it")
        bwd = t.mean(axis=1)
        fwd_total = float(fwd_n.mean())
        keep = np.asarray(features.layer_bytes) > 0
        sizes = np.asarray(features.layer_bytes, dtype=np.int64)[keep]
        shape = bwd[keep] / bwd[keep].sum()
        bw = self._rate(features)
        if not bw > 0:
            raise ValueError("the window measured no link rate (no message sent): cannot simulate it")
        scale = bwd_n / float(bwd_n.mean())  # each worker's compute against the mean (a straggler)
        cluster = Cluster(features.n_workers, features.arch, bw_up_Bps=bw, bw_down_Bps=bw, per_message_s=per_message_s,
                          compute_scale=scale, jitter=0.0)

        def model(share: float) -> Any:
            return ModelProfile("running job", sizes, shape * share * fwd_total, bwd[keep], 1, device="measured")

        def forward(share: float) -> float:
            r = simulate(model(share), cluster, config, n_iters=2, warmup_iters=1)
            return float(np.mean(r.features().forward_s))

        lo, hi = 0.0, 1.0
        if fwd_total > 0 and forward(hi) > fwd_total:
            for _ in range(8):
                mid = 0.5 * (lo + hi)
                lo, hi = (mid, hi) if forward(mid) < fwd_total else (lo, mid)
        self.forward_share = hi
        return model(hi), cluster

    def _fitted(self, cur: _Conditions) -> tuple[tuple[Any, Any], float]:
        """The simulation of ``cur``, its per-message cost fitted to the speeds measured there when ``fit`` is on.

        Each cost of :data:`FIT_GRID_S` (then the geometric midpoints beside
        the best) builds the window anew; the one whose simulated log speed
        ratios of the measured configurations to the window's own come
        closest (least squares) to the measured ratios is kept. Two measured
        configurations that send as many messages say nothing about the cost:
        the default is kept when no cost fits better than another.
        """
        anchor = cur.measured.get(cur.config, float(np.sum(cur.features.speed)))
        others = {c: v for c, v in cur.measured.items() if c != cur.config and v > 0}
        tried: dict[float, tuple[float, tuple[Any, Any]]] = {}

        def default() -> tuple[tuple[Any, Any], float]:
            pm = self.per_message_s
            return (tried[pm][1] if pm in tried else self._build(cur.features, cur.config, pm)), pm

        if not self.fit or not others or not anchor > 0:
            return default()
        target = {c: math.log(v / anchor) for c, v in others.items()}

        def sse(pm: float) -> float:
            if pm not in tried:
                sim = self._build(cur.features, cur.config, pm)
                base = self._speed(sim, cur.config)
                prior = self.fit_prior * math.log(pm / self.per_message_s) ** 2 / math.log(3.0) ** 2
                tried[pm] = (sum((self._speed(sim, c) - base - y) ** 2 for c, y in target.items()) + prior, sim)
            return tried[pm][0]

        errs = [sse(pm) for pm in FIT_GRID_S]
        k = int(np.argmin(errs))
        if max(errs) - min(errs) < 1e-6:  # the measured configurations cannot tell the costs apart
            return default()  # (built once already when the default is one of the grid's)
        for j in (k - 1, k + 1):
            if 0 <= j < len(FIT_GRID_S):
                sse(math.sqrt(FIT_GRID_S[j] * FIT_GRID_S[k]))
        best = min(tried, key=lambda pm: tried[pm][0])
        return tried[best][1], best

    def _speed(self, sim: tuple[Any, Any], cfg: Config) -> float:
        from autobyte.sim import simulate

        r = simulate(sim[0], sim[1], cfg, n_iters=self.n_iters, warmup_iters=1)
        return -math.log(float(np.mean(r.iter_time_s)))

    def _select(self, features: Any, config: Config) -> None:
        """Make the kept conditions that match ``features`` the current ones, or keep them (measured under ``config``) as new ones."""
        sig = self._signature(features)
        for k, kept in enumerate(self._kept):
            old = self._signature(kept.features)
            if old.shape == sig.shape and np.max(np.abs(old - sig)) <= math.log1p(self.match):
                self._kept.append(self._kept.pop(k))
                return
        self._kept.append(_Conditions(features, config))
        del self._kept[:-self.memory]

    def log_speeds(self, features: Any, config: Config, class_ids: np.ndarray, *, refresh: bool,
                   measured: dict[Config, float] | None = None) -> np.ndarray:
        """Simulated log speed of every candidate (one simulation per class of ``class_ids``).

        With ``refresh`` (new conditions) or on the first call, the conditions
        of ``features``, a window of ``config`` (or kept ones that match them);
        otherwise the current conditions. Simulates them unless they were
        simulated for these classes. ``measured``: the speeds measured in the
        current conditions (samples/s per configuration); with ``fit``, the
        per-message cost is fitted to them, anew when a configuration is
        measured there for the first time.

        Raises:
            ValueError: the window cannot be simulated (no compute or link rate measured).
        """
        ids = np.asarray(class_ids)
        if refresh or not self._kept:
            self._select(features, config)
            self._extra = {}
        cur = self._kept[-1]
        if measured is not None:
            cur.measured = dict(measured)
        refit = self.fit and len(cur.measured) > 1 and frozenset(cur.measured) != cur.fitted
        if refit or cur.log_speeds is None or cur.ids is None or not np.array_equal(ids, cur.ids):
            t0 = time.perf_counter()
            cur.sim, cur.per_message_s = self._fitted(cur)
            cur.fitted = frozenset(cur.measured)
            cands = self.space.to_array()
            _, first, member_of = np.unique(ids, return_index=True, return_inverse=True)  # one candidate per class
            per_class = np.array([self._speed(cur.sim, Config(int(cands[i, 0]), int(cands[i, 1]))) for i in first])
            cur.ids, cur.log_speeds = ids.copy(), per_class[member_of]
            self._extra = {}
            self.last_s = time.perf_counter() - t0
            self.total_s += self.last_s
            self.n_runs += 1
        return cur.log_speeds

    def log_speed(self, cfg: Config) -> float:
        """Simulated log speed of a configuration outside the space, in the current conditions.

        Raises:
            ValueError: nothing simulated yet (call :meth:`log_speeds` first).
        """
        sim = self._kept[-1].sim if self._kept else None
        if sim is None:
            raise ValueError("log_speed needs a simulation first (call log_speeds)")
        if cfg not in self._extra:
            self._extra[cfg] = self._speed(sim, cfg)
        return self._extra[cfg]

    def state_dict(self) -> dict[str, Any]:
        """The conditions kept, as windows (plain lists), the current one last: a restored predictor simulates the same."""
        return {"conditions": [{"arch": c.features.arch, "config": c.config.to_dict(),
                                **{k: np.asarray(getattr(c.features, k)).tolist() for k in self._ARRAYS}} for c in self._kept]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        from autobyte.core.metrics import RuntimeFeatures

        self._kept = [_Conditions(RuntimeFeatures(d["arch"], **{k: np.asarray(d[k], dtype=np.float64) for k in self._ARRAYS}),
                                  Config(int(d["config"]["partition_bytes"]), int(d["config"]["credit_bytes"])))
                      for d in state.get("conditions", [])]
        self._extra = {}
