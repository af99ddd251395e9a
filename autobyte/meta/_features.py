"""Runtime statistics -> the meta-network's fixed-size numeric inputs (numpy only).

Three groups, following Fig. 4(a) of the paper, extended:

* **layers** ``(K, F_LAYER)``: the model described by its per-tensor gradient
  sizes and per-tensor backward times (mean and slowest worker), pooled into
  ``K`` consecutive bins so that any number of layers ``l`` maps to a fixed
  length (the paper's "embed T into a fixed dimension"); read by the LSTM.
* **job** ``(F_JOB,)``: static features (n, l, architecture, total bytes and
  compute), the bandwidth branch (min / mean / max of up and down rates over
  workers, so any ``n`` works), the configuration in force and how fast it ran.
* **candidates** ``(M, F_CAND)``: each candidate configuration, absolute and
  relative to the model (messages it makes, credit against the model's bytes)
  and to the configuration in force.

The network predicts ``log(speed(candidate) / observed speed)``; everything is
in log units so models and clusters of very different scale look alike.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autobyte.core.metrics import ARCHITECTURES, RuntimeFeatures
from autobyte.core.space import Config

#: Bins the per-layer sequence is pooled into (any ``l`` maps to this length).
N_BINS = 16
F_LAYER = 6
F_JOB = 19
F_CAND = 12
#: Version of the feature layout, stored with the weights; a mismatch refuses to load.
FEATURE_VERSION = 2

_MB = 1e6
_GBPS = 1e9 / 8  # bytes/s in one Gbit/s


@dataclass(frozen=True)
class JobInputs:
    """Featurised window: ``layers (K, F_LAYER)``, ``job (F_JOB,)`` and the job's layer sizes."""

    layers: np.ndarray
    job: np.ndarray
    layer_bytes: np.ndarray
    current: Config
    observed_speed: float


def _bins(l: int, k: int = N_BINS) -> np.ndarray:
    return (np.arange(l) * k) // l


def layer_features(layer_bytes: np.ndarray, layer_time_s: np.ndarray, n_bins: int = N_BINS) -> np.ndarray:
    """``(n_bins, F_LAYER)`` from ``(l,)`` bytes and ``(l, n)`` backward times."""
    return layer_features_agg(layer_bytes, layer_time_s.mean(axis=1), layer_time_s.max(axis=1), n_bins)


def layer_features_agg(layer_bytes: np.ndarray, t_mean: np.ndarray, t_max: np.ndarray, n_bins: int = N_BINS) -> np.ndarray:
    """Same, from per-layer backward time averaged over workers and its maximum over workers."""
    l = layer_bytes.shape[0]
    b = _bins(l, n_bins)
    out = np.zeros((n_bins, F_LAYER))
    sum_b = np.bincount(b, layer_bytes, n_bins)
    sum_t = np.bincount(b, t_mean, n_bins)
    sum_tm = np.bincount(b, t_max, n_bins)
    cnt = np.bincount(b, None, n_bins)
    max_b = np.zeros(n_bins)
    np.maximum.at(max_b, b, layer_bytes)
    out[:, 0] = np.log1p(sum_b / _MB)
    out[:, 1] = np.log1p(sum_t * 1e3)
    out[:, 2] = np.log1p(sum_tm * 1e3)
    out[:, 3] = np.log1p(max_b / _MB)
    out[:, 4] = np.log1p(cnt)
    out[:, 5] = cnt > 0
    return out


def _cfg_vec(p: np.ndarray, c: np.ndarray) -> list[np.ndarray]:
    return [np.log2(p / _MB), np.log2(c / _MB), np.log2(c / p)]


def job_features(f: RuntimeFeatures, current: Config, observed_speed: float) -> np.ndarray:
    """``(F_JOB,)`` static + bandwidth + current-configuration features."""
    return job_vector(
        n=f.n_workers, l=f.n_layers, arch=f.arch, total_bytes=float(f.layer_bytes.sum()),
        forward_s=float(f.forward_s.mean()), backward_s=float(f.layer_time_s.mean(axis=1).sum()),
        backward_max_s=float(f.layer_time_s.max(axis=1).sum()),
        up_min=float(f.bw_up_Bps.min()), up_mean=float(f.bw_up_Bps.mean()),
        down_min=float(f.bw_down_Bps.min()), down_mean=float(f.bw_down_Bps.mean()),
        speed=observed_speed, current=current,
    )


def job_vector(
    *, n: int, l: int, arch: str, total_bytes: float, forward_s: float, backward_s: float, backward_max_s: float,
    up_min: float, up_mean: float, down_min: float, down_mean: float, speed: float, current: Config,
) -> np.ndarray:
    """The job vector from aggregates over workers (min and mean: any ``n``)."""
    comp = max(forward_s + backward_s, 1e-6)
    up_min, up_mean, down_min, down_mean = (max(x, 1.0) / _GBPS for x in (up_min, up_mean, down_min, down_mean))
    speed = max(float(speed), 1e-9)
    comm_bound = total_bytes / (min(up_min, down_min) * _GBPS)
    p0, c0 = float(current.partition_bytes), float(current.credit_bytes)
    v = [
        np.log(n), np.log(l), *[1.0 if arch == a else 0.0 for a in ARCHITECTURES],
        np.log(total_bytes / _MB), np.log(comp), np.log(max(forward_s, 1e-6)),
        np.log(max(backward_max_s, 1e-9) / max(backward_s, 1e-9)),  # straggling
        np.log(up_min), np.log(up_mean), np.log(down_min), np.log(down_mean),
        np.log(comm_bound / comp),
        np.log(speed), np.log(speed / n * comp),  # per-worker samples per compute-second: efficiency
        *[float(x) for x in _cfg_vec(np.array(p0), np.array(c0))],
        np.log(p0 / total_bytes),
    ]
    return np.array(v, dtype=np.float64)


def featurize(f: RuntimeFeatures, current: Config, observed_speed: float) -> JobInputs:
    """Featurise one window (statistics of every worker under ``current``)."""
    if not np.isfinite(observed_speed) or observed_speed <= 0:
        raise ValueError(f"observed_speed must be a positive finite number, but got observed_speed={observed_speed!r}.")
    return JobInputs(
        layers=layer_features(f.layer_bytes, f.layer_time_s),
        job=job_features(f, current, observed_speed),
        layer_bytes=f.layer_bytes,
        current=current,
        observed_speed=float(observed_speed),
    )


def candidate_features(layer_bytes: np.ndarray, candidates: np.ndarray, current: Config) -> np.ndarray:
    """``(M, F_CAND)`` for candidates ``(M, 2)`` of ``[partition_bytes, credit_bytes]``."""
    cand = np.asarray(candidates, dtype=np.float64)
    p, c = cand[:, 0], cand[:, 1]
    total = float(layer_bytes.sum())
    # messages the plan makes: every tensor split into ceil(b/p) chunks (no fusion),
    # and the fully fused count ceil(total/p); the real plan lies between.
    n_split = np.ceil(layer_bytes[None, :] / p[:, None]).sum(axis=1)
    n_fused = np.ceil(total / p)
    largest = float(layer_bytes.max())
    p0, c0 = float(current.partition_bytes), float(current.credit_bytes)
    cols = [
        *_cfg_vec(p, c),
        np.log(n_split), np.log(n_fused),
        np.log(p / total), np.log(c / total), np.log(np.minimum(p, largest) / largest),
        np.log2(p / p0), np.log2(c / c0), np.log2((c / p) / (c0 / p0)),
        np.log(np.minimum(c, total) / np.minimum(p, total)),  # messages in flight at once
    ]
    out = np.stack(cols, axis=1)
    assert out.shape[1] == F_CAND
    return out
