"""The simulator as the tuner's predictor, built from the job's own window statistics (``predictor="simulator"``).

The meta-network is trained on simulator windows and is 25-39% off on real
rows before adaptation (docs/calibration.md). The simulator itself, fed
what the running job measured — per-tensor gradient sizes and backward
times, forward time, achieved link rates, every worker's compute —
predicts the *ratio* of two configurations' speeds on the same real rows
15-27% off, and picks faster configurations (docs/meta.md,
"The simulator as predictor"). :class:`SimPredictor` gives the
:class:`~autobyte.meta._policies.Scorer` that ratio in place of the
network's: one simulation per schedule class, once per regime (the tuner
asks again when the conditions change), so a decision inside a regime
costs no simulation at all.

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
from typing import Any

import numpy as np

from autobyte.core.space import Config, SearchSpace

#: Serial cost of one message, seconds (docs/calibration.md fitted 1.30 ms on the CNN of the testbed).
DEFAULT_PER_MESSAGE_S = 1e-3


class SimPredictor:
    """Log speed of every candidate, simulated from one window's :class:`~autobyte.core.metrics.RuntimeFeatures`.

    Args:
        space: the candidates.
        per_message_s: serial cost of one message in the simulated cluster
            (:data:`DEFAULT_PER_MESSAGE_S`; in [0, 1]).
        n_iters: simulated iterations per candidate after one warm-up (1).

    Raises:
        ValueError: an argument out of range.
    """

    def __init__(self, space: SearchSpace, *, per_message_s: float = DEFAULT_PER_MESSAGE_S, n_iters: int = 1) -> None:
        if isinstance(per_message_s, bool) or not isinstance(per_message_s, (int, float)) or not (0 <= per_message_s <= 1):
            raise ValueError(f"per_message_s must be a number of seconds in [0, 1], but got per_message_s={per_message_s!r}.")
        if isinstance(n_iters, bool) or not isinstance(n_iters, int) or n_iters < 1:
            raise ValueError(f"n_iters must be a positive integer, but got n_iters={n_iters!r}.")
        self.space = space
        self.per_message_s = float(per_message_s)
        self.n_iters = n_iters
        self._cache: np.ndarray | None = None  # log samples/s per class of the last simulation
        self._ids: np.ndarray | None = None
        self._sim: tuple[Any, Any] | None = None  # (model, cluster) of the last simulation
        self._extra: dict[Config, float] = {}
        self.n_runs = 0
        self.last_s = 0.0
        self.total_s = 0.0

    def _build(self, features: Any) -> tuple[Any, Any]:
        from autobyte.sim import Cluster, ModelProfile

        t = np.asarray(features.layer_time_s, dtype=np.float64)  # (l, n)
        fwd_n = np.asarray(features.forward_s, dtype=np.float64)  # (n,)
        per_worker = t.sum(axis=0) + fwd_n
        mean = float(per_worker.mean())
        if not (mean > 0 and math.isfinite(mean)):
            raise ValueError("the window measured no compute time: cannot simulate it")
        bwd = t.mean(axis=1)
        fwd_total = float(fwd_n.mean())
        fwd = bwd / bwd.sum() * fwd_total if bwd.sum() > 0 else np.full(bwd.size, fwd_total / bwd.size)
        keep = np.asarray(features.layer_bytes) > 0
        model = ModelProfile("running job", np.asarray(features.layer_bytes, dtype=np.int64)[keep], fwd[keep], bwd[keep], 1,
                             device="measured")
        rates = [float(np.min(features.bw_up_Bps)), float(np.min(features.bw_down_Bps))]
        bw = min(r for r in rates if r > 0) if any(r > 0 for r in rates) else 0.0
        if not bw > 0:
            raise ValueError("the window measured no link rate (no message sent): cannot simulate it")
        cluster = Cluster(features.n_workers, features.arch, bw_up_Bps=bw, bw_down_Bps=bw, per_message_s=self.per_message_s,
                          compute_scale=per_worker / mean, jitter=0.0)
        return model, cluster

    def _speed(self, cfg: Config) -> float:
        from autobyte.sim import simulate

        assert self._sim is not None
        r = simulate(self._sim[0], self._sim[1], cfg, n_iters=self.n_iters, warmup_iters=1)
        return -math.log(float(np.mean(r.iter_time_s)))

    def log_speeds(self, features: Any, class_ids: np.ndarray, *, refresh: bool) -> np.ndarray:
        """Simulated log speed of every candidate (one simulation per class of ``class_ids``).

        Simulates when ``refresh`` (new conditions), on the first call, or when
        the classes changed; otherwise returns the last simulation's values.

        Raises:
            ValueError: the window cannot be simulated (no compute or link rate measured).
        """
        ids = np.asarray(class_ids)
        if refresh or self._cache is None or self._ids is None or not np.array_equal(ids, self._ids):
            t0 = time.perf_counter()
            self._sim = self._build(features)
            cands = self.space.to_array()
            n = int(ids.max()) + 1
            first = np.full(n, -1)
            for i in range(len(ids) - 1, -1, -1):
                first[ids[i]] = i
            per_class = np.array([self._speed(Config(int(cands[i, 0]), int(cands[i, 1]))) for i in first])
            self._cache, self._ids, self._extra = per_class, ids.copy(), {}
            self.last_s = time.perf_counter() - t0
            self.total_s += self.last_s
            self.n_runs += 1
        assert self._cache is not None
        return self._cache[ids]

    def log_speed(self, cfg: Config) -> float:
        """Simulated log speed of a configuration outside the space, in the last simulation's conditions."""
        if self._sim is None:
            raise ValueError("log_speed needs a simulation first (call log_speeds)")
        if cfg not in self._extra:
            self._extra[cfg] = self._speed(cfg)
        return self._extra[cfg]
