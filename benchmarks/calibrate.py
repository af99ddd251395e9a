"""Calibrate the simulator against the testbed, and report how far apart they are.

``python benchmarks/calibrate.py --out DIR`` (needs root; run with the
package importable: the editable install, or ``PYTHONPATH=$PWD``):

1. **Measure** real 2-worker training of the CNN of
   :func:`autobyte.bench.models.make_cnn` (3.4M parameters, batch 16 per
   worker) with the scheduled torch engine on the testbed, over a grid of
   link rates x ``<partition, credit>`` configs, every point repeated
   ``reps`` times in a random order (one launch, iteration-keyed rate
   changes; ``benchmarks/collect.py``). The CPU compute profile of the
   model (per-layer forward/backward, :func:`autobyte.sim.profile_module`) is
   taken inside the same launch, on the same CPU.
2. **Fit** the simulator's free parameters -- the ones
   :class:`autobyte.sim.Cluster` exposes: ``per_message_s``, ``latency_s``,
   ``compute_scale``, ``update_Bps``, ``contention``, plus how the shaped rate
   maps to the simulated link rate (``efficiency`` x rate, in series with a
   per-byte CPU cost ``cap_Bps``: ``1 / (1 / (eff * rate) + 1 / cap)``) -- by
   least squares on log iteration time over the *fit* part of the grid.
3. **Report** the simulator's error (absolute percentage error of iteration
   time per point, MAPE over the grid, the fit part and the held-out part:
   one whole rate and some configs at every rate are held out of the fit).

Outputs in ``DIR``: ``raw/`` (the ranks' JSON, launch log, events),
``measurements.csv`` (one row per point and repetition), ``points.csv`` (per
point: measured median and spread, simulated, error, split), ``params.json``
(fitted parameters, the profile, the plan, the summary), ``errors.md`` and
``calib_scatter.png`` / ``calib_grid.png``. ``--from-raw DIR`` re-fits and
redraws from kept raw data without measuring.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import math
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the sibling script collect.py

from autobyte.core.metrics import ARCHITECTURES  # noqa: E402
from autobyte.core.space import Config, KiB, MiB  # noqa: E402
from collect import UNLIMITED_MBIT, measure, read_measurement, schedule_segments  # noqa: E402

#: Link rates of the full grid, Mbit/s; the last one stands for "no limit".
GRID_RATES_MBIT: tuple[float, ...] = (100.0, 300.0, 1000.0, 3000.0, 40000.0)
#: Configs of the full grid: partition 64 KiB .. 25 MiB, credit 1X .. 4X.
GRID_CONFIGS: tuple[Config, ...] = (
    Config(64 * KiB, 64 * KiB), Config(64 * KiB, 256 * KiB), Config(256 * KiB, 512 * KiB), Config(1 * MiB, 1 * MiB),
    Config(1 * MiB, 4 * MiB), Config(4 * MiB, 8 * MiB), Config(8 * MiB, 8 * MiB), Config(25 * MiB, 25 * MiB),
)
#: Held out of the fit: every point at this rate, and these configs at every rate.
HOLDOUT_RATES_MBIT: tuple[float, ...] = (300.0,)
HOLDOUT_CONFIGS: tuple[Config, ...] = (Config(256 * KiB, 512 * KiB), Config(4 * MiB, 8 * MiB))

#: Free parameters: name -> (initial value, lower bound, upper bound). Fitted in log space.
PARAMS: dict[str, tuple[float, float, float]] = {
    "per_message_s": (3e-4, 1e-6, 0.05),
    "latency_s": (1e-4, 1e-7, 0.05),
    "compute_scale": (1.5, 0.2, 20.0),
    "update_Bps": (2e9, 1e7, 1e12),
    "contention": (0.02, 1e-4, 2.0),
    "efficiency": (0.9, 0.2, 1.0),
    "cap_Bps": (5e8, 1e7, 1e11),
}
#: Parameters the ``--quick`` smoke fit frees (the rest stay at their initial values).
QUICK_FREE = ("per_message_s", "compute_scale", "efficiency")


def _check_rates(rates: Sequence[float]) -> tuple[float, ...]:
    out = []
    for r in rates:
        if isinstance(r, bool) or not isinstance(r, (int, float)) or not math.isfinite(r) or r <= 0:
            raise ValueError(f"rates_mbit must hold positive numbers of Mbit/s, but got rates_mbit={list(rates)!r}.")
        out.append(float(r))
    if not out:
        raise ValueError("rates_mbit must name at least one rate, but got none.")
    return tuple(out)


@dataclass(frozen=True)
class CalibrationPlan:
    """What ``benchmarks/calibrate.py`` measures and how it fits.

    Args:
        rates_mbit: link rates, Mbit/s (default :data:`GRID_RATES_MBIT`).
        configs: configs measured at every rate (default :data:`GRID_CONFIGS`).
        reps: repetitions of every point, each in a new random order (default 4).
        passes: the rates are visited this many times, each time in a new
            order, with ``reps / passes`` repetitions per visit (default 2).
        target_s: measured seconds per segment; iterations are sized from a
            rough estimate of the iteration time at the rate (default 1.5).
        warmup: unmeasured iterations at the start of each segment (default 2).
        min_iters, max_iters: bounds on measured iterations per segment (5, 20).
        holdout_rates_mbit, holdout_configs: points kept out of the fit.
        free: parameters fitted (default every one of :data:`PARAMS`).
        seed: order of the segments.

    Raises:
        ValueError: empty or non-positive rates, no config, ``reps < 1``, an
            unknown free parameter, a hold-out that leaves nothing to fit.
    """

    rates_mbit: tuple[float, ...] = GRID_RATES_MBIT
    configs: tuple[Config, ...] = GRID_CONFIGS
    reps: int = 4
    passes: int = 2
    target_s: float = 1.5
    warmup: int = 2
    min_iters: int = 5
    max_iters: int = 20
    holdout_rates_mbit: tuple[float, ...] = HOLDOUT_RATES_MBIT
    holdout_configs: tuple[Config, ...] = HOLDOUT_CONFIGS
    free: tuple[str, ...] = tuple(PARAMS)
    seed: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "rates_mbit", _check_rates(self.rates_mbit))
        if not self.configs or not all(isinstance(c, Config) for c in self.configs):
            raise ValueError(f"configs must be a non-empty list of Config, but got configs={self.configs!r}.")
        object.__setattr__(self, "configs", tuple(self.configs))
        for name in ("reps", "passes", "warmup", "min_iters", "max_iters"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive integer, but got {name}={v!r}.")
        if self.passes > self.reps:
            raise ValueError(f"passes must be <= reps={self.reps}, but got passes={self.passes!r}.")
        if self.max_iters < self.min_iters:
            raise ValueError(f"max_iters must be >= min_iters={self.min_iters}, but got max_iters={self.max_iters!r}.")
        if not isinstance(self.target_s, (int, float)) or not self.target_s > 0:
            raise ValueError(f"target_s must be a positive number of seconds, but got target_s={self.target_s!r}.")
        unknown = [p for p in self.free if p not in PARAMS]
        if unknown or not self.free:
            raise ValueError(f"free must be a non-empty subset of {tuple(PARAMS)}, but got free={self.free!r}.")
        object.__setattr__(self, "free", tuple(self.free))
        object.__setattr__(self, "holdout_rates_mbit", tuple(float(r) for r in self.holdout_rates_mbit))
        object.__setattr__(self, "holdout_configs", tuple(self.holdout_configs))
        if not any(not self.is_holdout(r, c) for r in self.rates_mbit for c in self.configs):
            raise ValueError("the hold-out covers every point of the grid; nothing is left to fit.")

    @classmethod
    def quick(cls) -> "CalibrationPlan":
        """The CI smoke plan: one rate, three configs, one repetition, three parameters, nothing held out."""
        return cls(rates_mbit=(1000.0,), configs=(Config(64 * KiB, 256 * KiB), Config(1 * MiB, 4 * MiB), Config(25 * MiB, 25 * MiB)),
                   reps=1, passes=1, target_s=1.0, warmup=2, min_iters=4, max_iters=6, holdout_rates_mbit=(), holdout_configs=(),
                   free=QUICK_FREE)

    def is_holdout(self, rate_mbit: float, config: Config) -> bool:
        return float(rate_mbit) in self.holdout_rates_mbit or config in self.holdout_configs

    def segments(self) -> list[Any]:
        return schedule_segments(self.rates_mbit, self.configs, reps=self.reps, target_s=self.target_s, warmup=self.warmup,
                                 min_iters=self.min_iters, max_iters=self.max_iters, seed=self.seed, passes=self.passes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "rates_mbit": list(self.rates_mbit), "configs": [[c.partition_bytes, c.credit_bytes] for c in self.configs],
            "reps": self.reps, "passes": self.passes, "target_s": self.target_s, "warmup": self.warmup, "min_iters": self.min_iters,
            "max_iters": self.max_iters, "holdout_rates_mbit": list(self.holdout_rates_mbit),
            "holdout_configs": [[c.partition_bytes, c.credit_bytes] for c in self.holdout_configs], "free": list(self.free),
            "seed": self.seed,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "CalibrationPlan":
        return cls(
            rates_mbit=tuple(d["rates_mbit"]), configs=tuple(Config(int(a), int(b)) for a, b in d["configs"]), reps=int(d["reps"]),
            passes=int(d.get("passes", 1)),
            target_s=float(d["target_s"]), warmup=int(d["warmup"]), min_iters=int(d["min_iters"]), max_iters=int(d["max_iters"]),
            holdout_rates_mbit=tuple(d["holdout_rates_mbit"]),
            holdout_configs=tuple(Config(int(a), int(b)) for a, b in d["holdout_configs"]), free=tuple(d["free"]),
            seed=int(d["seed"]),
        )


# --------------------------------------------------------------------------- the simulator side
@dataclass(frozen=True)
class SimParams:
    """The simulator's calibrated knobs (see :data:`PARAMS`) and how to build a :class:`~autobyte.sim.Cluster` from them."""

    per_message_s: float = PARAMS["per_message_s"][0]
    latency_s: float = PARAMS["latency_s"][0]
    compute_scale: float = PARAMS["compute_scale"][0]
    update_Bps: float = PARAMS["update_Bps"][0]
    contention: float = PARAMS["contention"][0]
    efficiency: float = PARAMS["efficiency"][0]
    cap_Bps: float = PARAMS["cap_Bps"][0]

    def link_Bps(self, rate_mbit: float) -> float:
        """Simulated link rate for a shaped rate: TCP/gloo goodput (``efficiency``) in series with a per-byte CPU cost (``cap_Bps``)."""
        return 1.0 / (1.0 / (self.efficiency * rate_mbit * 1e6 / 8) + 1.0 / self.cap_Bps)

    def cluster(self, rate_mbit: float, n_workers: int = 2, *, arch: str = "allreduce",
                slowdown: Sequence[float] | None = None) -> Any:
        """The calibrated :class:`autobyte.sim.Cluster` for links shaped at ``rate_mbit`` (jitter off).

        ``update_Bps`` is the rate of the optimizer's update wherever it runs: on
        the workers for ``arch="allreduce"``, on the servers (their
        ``ps_aggregate_Bps``: sum of the pushes + update) for ``arch="ps"``.
        ``slowdown``: one factor per worker by which its compute is slower
        (another job sharing its accelerator); ``None``: none is.

        Raises:
            ValueError: ``slowdown`` not ``n_workers`` factors >= 1.
        """
        from autobyte.sim import Cluster

        scale: Any = self.compute_scale
        if slowdown is not None:
            f = [float(x) for x in slowdown]
            if len(f) != n_workers or not all(x >= 1.0 for x in f):
                raise ValueError(f"slowdown must be {n_workers} factors >= 1 (one per worker), but got slowdown={list(slowdown)!r}.")
            scale = [self.compute_scale * x for x in f]
        bw = self.link_Bps(rate_mbit)
        extra = {"ps_aggregate_Bps": self.update_Bps} if arch == "ps" else {}
        return Cluster(n_workers, arch, bw_up_Bps=bw, bw_down_Bps=bw, latency_s=self.latency_s,
                       per_message_s=self.per_message_s, compute_scale=scale, jitter=0.0,
                       update_Bps=self.update_Bps, contention=self.contention, **extra)

    def to_dict(self) -> dict[str, float]:
        return {k: float(v) for k, v in self.__dict__.items()}


def model_profile(profile: dict[str, Any], *, name: str = "cnn-3.4M") -> Any:
    """The CNN's :class:`~autobyte.sim.ModelProfile` from the ranks' profile.

    The per-layer *shape* comes from ``profile_module`` (hooks on every layer,
    both ranks profiling at once); the *total* from the median plain compute
    step timed right after it without hooks (``compute_only_s``: forward +
    backward + optimizer step, no communication). ``profile_module`` times
    the forward of modules that own parameters only; when the plain step is
    longer than the profiled sum, the difference (ReLU, pooling, loss, step)
    is spread over the layers' forward times in proportion; when shorter
    (hook overhead, the other rank's profiling), every time is scaled down.
    The fitted ``compute_scale`` then stands for the slow-down that training
    next to communication threads and the other rank brings.
    """
    from autobyte.sim import ModelProfile

    fwd = np.asarray(profile["forward_s"], dtype=np.float64)
    bwd = np.asarray(profile["backward_s"], dtype=np.float64)
    only = float(statistics.median(profile["compute_only_s"][1:] or profile["compute_only_s"]))
    total = fwd.sum() + bwd.sum()
    if total <= 0:
        raise ValueError("profile must hold positive compute times, but forward_s and backward_s sum to 0.")
    missing = only - total
    if missing > 0:
        fwd = fwd * (1.0 + missing / max(fwd.sum(), 1e-12)) if fwd.sum() > 0 else fwd + missing / fwd.size
    else:
        fwd, bwd = fwd * (only / total), bwd * (only / total)
    return ModelProfile(name, np.asarray(profile["layer_bytes"], dtype=np.int64), fwd, bwd, int(profile["batch_size"]),
                        device="cpu", layer_names=tuple(profile.get("layer_names", ())))


def simulate_iter_s(model: Any, params: SimParams, rate_mbit: float, config: Config, *, n_iters: int = 3,
                    arch: str = "allreduce", slowdown: Sequence[float] | None = None) -> float:
    """Steady-state simulated iteration time (seconds) of 2 workers at ``rate_mbit`` under ``config``.

    ``arch``: ``"allreduce"`` or ``"ps"``; ``slowdown``: each worker's compute slow-down (:meth:`SimParams.cluster`).
    """
    from autobyte.sim import simulate

    r = simulate(model, params.cluster(rate_mbit, arch=arch, slowdown=slowdown), config, n_iters=n_iters, warmup_iters=2)
    return float(np.mean(r.iter_time_s))


def fit(
    model: Any,
    points: Sequence[tuple[float, Config, float]],
    *,
    free: Sequence[str] = tuple(PARAMS),
    start: SimParams | None = None,
    n_starts: int = 3,
    seed: int = 0,
    arch: str = "allreduce",
    slowdowns: Sequence[Sequence[float] | None] | None = None,
) -> tuple[SimParams, dict[str, Any]]:
    """Least squares on ``log(sim) - log(measured)`` over ``points`` ``(rate_mbit, config, iter_s)``.

    Parameters are fitted in log space within :data:`PARAMS`' bounds, from
    ``start`` and ``n_starts - 1`` seeded random starts; the best is kept.
    ``arch`` is the architecture simulated (``"allreduce"`` or ``"ps"``, see
    :meth:`SimParams.cluster`); ``slowdowns``, one per point, each worker's
    compute slow-down at that point (``None``: none anywhere).

    Raises:
        ValueError: no point, an unknown parameter in ``free``, an unknown ``arch``,
            ``slowdowns`` not one per point.
    """
    from scipy.optimize import least_squares

    if not points:
        raise ValueError("points must hold at least one (rate_mbit, config, iter_s), but got none.")
    if arch not in ARCHITECTURES:
        raise ValueError(f"arch must be one of {ARCHITECTURES}, but got arch={arch!r}.")
    slows = list(slowdowns) if slowdowns is not None else [None] * len(points)
    if len(slows) != len(points):
        raise ValueError(f"slowdowns must hold one entry per point ({len(points)}), but got {len(slows)}.")
    unknown = [p for p in free if p not in PARAMS]
    if unknown:
        raise ValueError(f"free must name parameters of {tuple(PARAMS)}, but got {unknown}.")
    base = start or SimParams()
    free = list(free)
    lo = np.log([PARAMS[p][1] for p in free])
    hi = np.log([PARAMS[p][2] for p in free])
    y = np.log([p[2] for p in points])

    def make(x: np.ndarray) -> SimParams:
        d = base.to_dict()
        d.update({k: float(np.exp(v)) for k, v in zip(free, x)})
        return SimParams(**d)

    def resid(x: np.ndarray) -> np.ndarray:
        p = make(x)
        return np.log([simulate_iter_s(model, p, r, c, arch=arch, slowdown=sl) for (r, c, _), sl in zip(points, slows)]) - y

    rng = np.random.default_rng(seed)
    x0s = [np.clip(np.log([getattr(base, p) for p in free]), lo + 1e-9, hi - 1e-9)]
    for _ in range(max(0, n_starts - 1)):
        x0s.append(rng.uniform(lo + 0.2 * (hi - lo), hi - 0.2 * (hi - lo)))
    best = None
    t0 = time.process_time()
    n_eval = 0
    for x0 in x0s:
        res = least_squares(resid, x0, bounds=(lo, hi), diff_step=0.05, x_scale=1.0, max_nfev=60 * len(free))
        n_eval += int(res.nfev)
        if best is None or res.cost < best.cost:
            best = res
    assert best is not None
    info = {"rms_log_error": float(np.sqrt(np.mean(best.fun ** 2))), "n_points": len(points), "n_starts": len(x0s),
            "n_evaluations": n_eval, "cpu_s": round(time.process_time() - t0, 1), "free": free, "arch": arch}
    return make(best.x), info


# --------------------------------------------------------------------------- measurement -> table
@dataclass
class Point:
    """One grid point: every repetition's measured iterations, the simulated time, and its split."""

    rate_mbit: float
    config: Config
    iters: list[list[float]] = field(default_factory=list)  # per repetition
    holdout: bool = False
    sim_s: float = float("nan")

    @property
    def measured_s(self) -> float:
        """Median iteration time over every repetition's measured iterations (robust to other jobs' bursts)."""
        return float(np.median(np.concatenate([np.asarray(x) for x in self.iters])))

    @property
    def mean_s(self) -> float:
        return float(np.mean(np.concatenate([np.asarray(x) for x in self.iters])))

    @property
    def rep_medians(self) -> list[float]:
        return [float(np.median(x)) for x in self.iters]

    @property
    def spread(self) -> float:
        """(max - min) / median of the repetitions' medians: the run-to-run spread."""
        m = self.rep_medians
        return (max(m) - min(m)) / self.measured_s if len(m) > 1 else 0.0

    @property
    def ape(self) -> float:
        return abs(self.sim_s - self.measured_s) / self.measured_s


def points_from(measurement: Any, plan: CalibrationPlan) -> list[Point]:
    """Group a :class:`collect.Measurement`'s segments by (rate, config)."""
    pts: dict[tuple[float, Config], Point] = {}
    for i, s in enumerate(measurement.segments):
        key = (s.rate_mbit, s.config)
        if key not in pts:
            pts[key] = Point(s.rate_mbit, s.config, holdout=plan.is_holdout(s.rate_mbit, s.config))
        pts[key].iters.append(list(measurement.iter_s[i]))
    return sorted(pts.values(), key=lambda p: (p.rate_mbit, p.config.partition_bytes, p.config.credit_bytes))


def mape(points: Sequence[Point]) -> float:
    return float(np.mean([p.ape for p in points])) if points else float("nan")


def analyze(measurement: Any, plan: CalibrationPlan, *, n_starts: int = 3) -> dict[str, Any]:
    """Fit on the non-held-out points, simulate every point, and summarise the errors."""
    model = model_profile(measurement.profile)
    pts = points_from(measurement, plan)
    train = [p for p in pts if not p.holdout]
    params, info = fit(model, [(p.rate_mbit, p.config, p.measured_s) for p in train], free=plan.free, n_starts=n_starts)
    default = SimParams()
    for p in pts:
        p.sim_s = simulate_iter_s(model, params, p.rate_mbit, p.config)
    held = [p for p in pts if p.holdout]
    summary = {
        "mape_all": mape(pts), "mape_fit": mape(train), "mape_holdout": mape(held),
        "max_ape": max(p.ape for p in pts), "n_points": len(pts), "n_fit": len(train), "n_holdout": len(held),
        "median_spread": float(np.median([p.spread for p in pts])), "max_spread": float(max(p.spread for p in pts)),
        "mape_mean_statistic": float(np.mean([abs(p.sim_s - p.mean_s) / p.mean_s for p in pts])),
        "compute_only_s": float(statistics.median(measurement.profile["compute_only_s"][1:] or measurement.profile["compute_only_s"])),
        "profile_compute_s": float(model.forward_s.sum() + model.backward_s.sum()),
    }
    return {"params": params, "fit": info, "points": pts, "summary": summary, "model": model, "default": default}


# --------------------------------------------------------------------------- outputs
def _rate_label(r: float) -> str:
    return "unlimited" if r >= UNLIMITED_MBIT else f"{r:g}"


def write_outputs(out: str, plan: CalibrationPlan, measurement: Any, result: dict[str, Any]) -> None:
    """``measurements.csv``, ``points.csv``, ``params.json``, ``errors.md`` and the figures."""
    pts: list[Point] = result["points"]
    s = result["summary"]
    with open(os.path.join(out, "measurements.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["order", "rep", "rate_mbit", "partition_bytes", "credit_bytes", "n_iters", "median_s", "mean_s", "std_s", "iter_s"])
        for i, seg in enumerate(measurement.segments):
            x = np.asarray(measurement.iter_s[i])
            w.writerow([i, seg.rep, seg.rate_mbit, seg.config.partition_bytes, seg.config.credit_bytes, len(x),
                        f"{np.median(x):.5f}", f"{x.mean():.5f}", f"{x.std():.5f}", " ".join(f"{v:.5f}" for v in x)])
    with open(os.path.join(out, "points.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["rate_mbit", "partition_bytes", "credit_bytes", "split", "measured_median_s", "measured_mean_s",
                    "rep_medians_s", "spread", "simulated_s", "ape"])
        for p in pts:
            w.writerow([p.rate_mbit, p.config.partition_bytes, p.config.credit_bytes, "holdout" if p.holdout else "fit",
                        f"{p.measured_s:.5f}", f"{p.mean_s:.5f}", " ".join(f"{v:.5f}" for v in p.rep_medians),
                        f"{p.spread:.4f}", f"{p.sim_s:.5f}", f"{p.ape:.4f}"])
    model = result["model"]
    doc = {
        "params": result["params"].to_dict(),
        "defaults": SimParams().to_dict(),
        "fit": result["fit"],
        "summary": s,
        "plan": plan.to_dict(),
        "model_profile": {"name": model.name, "layer_names": list(model.layer_names), "layer_bytes": [int(b) for b in model.layer_bytes],
                          "forward_s": [float(v) for v in model.forward_s], "backward_s": [float(v) for v in model.backward_s],
                          "batch_size": model.batch_size},
        "measurement": {"wall_s": measurement.info.get("wall_s"), "segments": len(measurement.segments)},
        "usage": "SimParams(**params).cluster(rate_mbit) -> autobyte.sim.Cluster; model_profile -> autobyte.sim.ModelProfile",
    }
    with open(os.path.join(out, "params.json"), "w") as f:
        json.dump(doc, f, indent=1)
    lines = [
        f"Simulator vs testbed, {len(pts)} points ({s['n_fit']} fitted, {s['n_holdout']} held out), 2 workers, "
        f"{len(measurement.segments) // max(1, len(pts))} repetitions each.", "",
        f"- MAPE of iteration time, all points: **{100 * s['mape_all']:.1f}%** (fit part {100 * s['mape_fit']:.1f}%, "
        f"held out {100 * s['mape_holdout']:.1f}%); largest error {100 * s['max_ape']:.1f}%.",
        f"- Run-to-run spread of the measured median (max - min over repetitions, / median): median "
        f"{100 * s['median_spread']:.1f}%, largest {100 * s['max_spread']:.1f}%.", "",
        "| rate Mbit/s | partition | credit | split | measured s (median) | repetitions' medians | simulated s | error |",
        "|---|---|---|---|---:|---|---:|---:|",
    ]
    for p in pts:
        lines.append(f"| {_rate_label(p.rate_mbit)} | {Config.__str__(p.config).split(',')[0].replace('<partition ', '')} | "
                     f"{p.config.credit_bytes // p.config.partition_bytes}X | {'held out' if p.holdout else 'fit'} | "
                     f"{p.measured_s:.3f} | {', '.join(f'{v:.3f}' for v in p.rep_medians)} | {p.sim_s:.3f} | {100 * p.ape:.1f}% |")
    lines += ["", "Fitted parameters:", "", "| parameter | fitted | simulator default |", "|---|---:|---:|"]
    for k, v in result["params"].to_dict().items():
        lines.append(f"| `{k}` | {v:.4g} | {SimParams().to_dict()[k] if k in ('efficiency', 'cap_Bps') else _sim_default(k):.4g} |")
    with open(os.path.join(out, "errors.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    try:
        plot(pts, os.path.join(out, "calib_scatter.png"), os.path.join(out, "calib_grid.png"), s)
    except ImportError:  # pragma: no cover - matplotlib is a dev dependency
        pass


def _sim_default(name: str) -> float:
    from autobyte.sim import Cluster

    return float(getattr(Cluster(2), name)) if name != "compute_scale" else 1.0


def plot(pts: Sequence[Point], scatter_path: str, grid_path: str, summary: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rates = sorted({p.rate_mbit for p in pts})
    colors = {r: matplotlib.colormaps["viridis"](i / max(1, len(rates) - 1)) for i, r in enumerate(rates)}
    fig, ax = plt.subplots(figsize=(5.2, 5))
    for r in rates:
        for hold in (False, True):
            sel = [p for p in pts if p.rate_mbit == r and p.holdout == hold]
            if not sel:
                continue
            lo = [p.measured_s - min(p.rep_medians) for p in sel]
            hi = [max(p.rep_medians) - p.measured_s for p in sel]
            ax.errorbar([p.measured_s for p in sel], [p.sim_s for p in sel], xerr=[lo, hi], fmt="o" if not hold else "s",
                        mfc=colors[r] if not hold else "none", mec=colors[r], ecolor=colors[r], ms=6, lw=0.8,
                        label=f"{_rate_label(r)} Mbit/s{' (held out)' if hold else ''}")
    lim = (min(min(p.measured_s, p.sim_s) for p in pts) * 0.8, max(max(p.measured_s, p.sim_s) for p in pts) * 1.25)
    ax.plot(lim, lim, "k-", lw=0.8)
    ax.fill_between(lim, [v / 1.15 for v in lim], [v * 1.15 for v in lim], color="0.9", lw=0, label="±15%")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lim)
    ax.set_ylim(lim)
    ax.set_xlabel("measured iteration time, s (median; bars: repetitions' range)")
    ax.set_ylabel("simulated iteration time, s")
    ax.set_title(f"Simulator vs testbed: MAPE {100 * summary['mape_all']:.1f}% (held out {100 * summary['mape_holdout']:.1f}%)", fontsize=9)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(scatter_path, dpi=120)
    plt.close(fig)

    cfgs = sorted({p.config for p in pts}, key=lambda c: (c.partition_bytes, c.credit_bytes))
    fig, axes = plt.subplots(1, len(rates), figsize=(2.6 * len(rates), 3.4), squeeze=False)
    for ax, r in zip(axes[0], rates):
        by_config = {p.config: p for p in pts if p.rate_mbit == r}
        xs = np.arange(len(cfgs))
        meas = [by_config[c].measured_s if c in by_config else np.nan for c in cfgs]
        sim = [by_config[c].sim_s if c in by_config else np.nan for c in cfgs]
        lo = [by_config[c].measured_s - min(by_config[c].rep_medians) if c in by_config else 0 for c in cfgs]
        hi = [max(by_config[c].rep_medians) - by_config[c].measured_s if c in by_config else 0 for c in cfgs]
        ax.errorbar(xs, meas, yerr=[lo, hi], fmt="o-", color="k", ms=4, lw=1, label="testbed")
        ax.plot(xs, sim, "s--", color="tab:red", ms=4, lw=1, label="simulator")
        for i, c in enumerate(cfgs):
            if c in by_config and by_config[c].holdout:
                ax.axvspan(i - 0.4, i + 0.4, color="0.92", lw=0)
        ax.set_xticks(xs)
        ax.set_xticklabels([f"{_size(c.partition_bytes)}\n{c.credit_bytes // c.partition_bytes}X" for c in cfgs], fontsize=6)
        ax.set_title(f"{_rate_label(r)} Mbit/s", fontsize=9)
        ax.set_ylim(bottom=0)
    axes[0][0].set_ylabel("iteration time, s")
    axes[0][0].legend(fontsize=7)
    fig.suptitle("Iteration time per config (grey: held out of the fit)", fontsize=9)
    fig.tight_layout()
    fig.savefig(grid_path, dpi=120)
    plt.close(fig)


def _size(b: int) -> str:
    return f"{b // MiB}M" if b >= MiB else f"{b // KiB}K"


# --------------------------------------------------------------------------- entry point
def run_calibration(
    plan: CalibrationPlan,
    out: str,
    *,
    from_raw: str | None = None,
    n_starts: int = 3,
    timeout_s: float = 1800.0,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Measure (unless ``from_raw``), fit, and write every output into ``out``. Returns the summary dict.

    Raises:
        TestbedError: measuring without root.
        FileNotFoundError: ``from_raw`` holds no measurement.
    """
    os.makedirs(out, exist_ok=True)
    if from_raw is not None:
        measurement = read_measurement(from_raw)
        plan_path = os.path.join(from_raw, "plan.json")
        if os.path.exists(plan_path):
            try:
                with open(plan_path, encoding="utf-8") as f:
                    stored = CalibrationPlan.from_dict(json.load(f))
            except (ValueError, TypeError, KeyError) as exc:  # JSON and Unicode errors are ValueErrors
                raise ValueError(f"plan file {plan_path!r} is unreadable or of another format ({exc}).") from None
            if stored.to_dict() != plan.to_dict():
                log(f"using the plan stored with the raw data ({plan_path})")
                plan = stored
    else:
        raw = os.path.join(out, "raw")
        os.makedirs(raw, exist_ok=True)
        with open(os.path.join(raw, "plan.json"), "w") as f:
            json.dump(plan.to_dict(), f, indent=1)
        segs = plan.segments()
        log(f"calibrate: {len(plan.rates_mbit)} rates x {len(plan.configs)} configs x {plan.reps} repetitions "
            f"= {len(segs)} segments")
        measurement = measure(segs, raw, timeout_s=timeout_s, log=log, profile_runs=3 if plan.reps == 1 else 8)
    log("fitting the simulator ...")
    result = analyze(measurement, plan, n_starts=n_starts)
    write_outputs(out, plan, measurement, result)
    s = result["summary"]
    log(f"MAPE of iteration time: all {100 * s['mape_all']:.1f}%, fit {100 * s['mape_fit']:.1f}%, "
        f"held out {100 * s['mape_holdout']:.1f}% ({s['n_points']} points); outputs in {out}/")
    return {"summary": s, "params": result["params"].to_dict(), "fit": result["fit"]}


# --------------------------------------------------------------------------- command line
#: Wall seconds per measured segment on the 2-core reference host (docs/calibration.md: 160 segments, ~11 min).
_SEGMENT_WALL_S = 11 * 60 / 160


def _epilog() -> str:
    full, quick = CalibrationPlan(), CalibrationPlan.quick()

    def size(plan: CalibrationPlan) -> str:
        n = len(plan.rates_mbit) * len(plan.configs) * plan.reps
        return (f"{len(plan.rates_mbit)} rate{'s' if len(plan.rates_mbit) > 1 else ''} x {len(plan.configs)} configs x "
                f"{plan.reps} repetition{'s' if plan.reps > 1 else ''}, ~{max(1, round(n * _SEGMENT_WALL_S / 60))} min")

    return ("examples:\n"
            f"  python benchmarks/calibrate.py --out runs/calib                 (full grid: {size(full)})\n"
            f"  python benchmarks/calibrate.py --out runs/calib-quick --quick   (smoke: {size(quick)})\n"
            "  python benchmarks/calibrate.py --out runs/refit --from-raw runs/calib/raw   (re-fit and redraw, no measuring)\n")


def build_parser() -> argparse.ArgumentParser:
    """``python benchmarks/calibrate.py``'s arguments (errors are one line, as the ``autobyte`` commands')."""
    from autobyte.cli import Parser, file_arg, float_arg, int_arg, out_arg, rates_arg

    full, quick = CalibrationPlan(), CalibrationPlan.quick()
    p = Parser(
        prog="benchmarks/calibrate.py",
        description="Fit the simulator to real training on the testbed and report its error (needs root): measure 2-worker "
                    "training over a grid of link rates x configs, fit the simulator's per-message overhead, latency, link "
                    "efficiency and compute model, and report the error. See docs/calibration.md.",
        epilog=_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--out", required=True, type=out_arg("--out", kind="dir"),
                   help="output folder (raw data, CSV, params.json, errors.md, figures)")
    p.add_argument("--quick", action="store_true",
                   help=f"smoke run: {len(quick.rates_mbit)} rate, {len(quick.configs)} configs, {quick.reps} repetition")
    p.add_argument("--reps", type=int_arg("--reps", 1, 1000), default=None,
                   help=f"repetitions of every grid point (default {full.reps}; {quick.reps} with --quick)")
    p.add_argument("--rates-mbit", type=rates_arg("--rates-mbit"), default=None,
                   help=f"comma-separated link rates, Mbit/s (default {','.join(f'{r:g}' for r in full.rates_mbit)})")
    p.add_argument("--from-raw", metavar="DIR", type=file_arg("--from-raw", kind="dir"), default=None,
                   help="re-fit from a previous run's raw/ folder instead of measuring")
    p.add_argument("--starts", type=int_arg("--starts", 1, 1000), default=3, help="least-squares starts (default 3)")
    p.add_argument("--timeout-s", type=float_arg("--timeout-s", unit="seconds"), default=1800.0,
                   help="stop the measurement after this many seconds (default 1800)")
    p.set_defaults(func=_command)
    return p


def _command(args: argparse.Namespace) -> int:
    from autobyte.cli import CLIError
    from autobyte.testbed import TestbedError

    try:
        plan = CalibrationPlan.quick() if args.quick else CalibrationPlan()
        if args.reps is not None:
            plan = dataclasses.replace(plan, reps=args.reps, passes=min(plan.passes, args.reps))
        if args.rates_mbit is not None:
            plan = dataclasses.replace(plan, rates_mbit=args.rates_mbit)
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    try:
        if args.from_raw is None:
            from autobyte.testbed._netns import require_root

            require_root()
        run_calibration(plan, args.out, from_raw=args.from_raw, n_starts=args.starts, timeout_s=args.timeout_s)
    except (ValueError, TypeError, FileNotFoundError) as exc:
        raise CLIError(str(exc)) from None
    except (TestbedError, OSError, RuntimeError) as exc:
        raise CLIError(str(exc), 1) from None
    with open(os.path.join(args.out, "errors.md")) as f:
        print(f.read())
    return 0


def main(argv: list[str] | None = None) -> int:
    from autobyte.cli import dispatch, parse, tag_progs

    parser = build_parser()
    tag_progs(parser)
    args = parse(parser, list(sys.argv[1:] if argv is None else argv))
    return args if isinstance(args, int) else dispatch(args)


if __name__ == "__main__":
    sys.exit(main())
