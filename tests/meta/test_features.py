from __future__ import annotations

import math

import numpy as np
import pytest

from autobyte.core.metrics import RuntimeFeatures
from autobyte.core.space import Config, MiB, SearchSpace
from autobyte.meta._data import _halve_bins
from autobyte.meta._features import F_CAND, F_JOB, F_LAYER, N_BINS, candidate_features, featurize, layer_features


def feats(l: int, n: int, arch: str = "ps") -> RuntimeFeatures:
    rng = np.random.default_rng(l * 31 + n)
    return RuntimeFeatures(arch, rng.random(l) * 4e6 + 10, rng.random((l, n)) * 1e-3, np.full(n, 0.02),
                           rng.random(n) * 1e9 + 1e8, rng.random(n) * 1e9 + 1e8, np.full(n, 30.0))


@pytest.mark.parametrize("l, n", [(1, 1), (5, 2), (54, 8), (300, 16), (1000, 3)])
def test_any_number_of_layers_and_workers_maps_to_fixed_shapes(l, n):
    job = featurize(feats(l, n), Config(MiB, 4 * MiB), 60.0)
    assert job.layers.shape == (N_BINS, F_LAYER) and job.job.shape == (F_JOB,)
    assert np.all(np.isfinite(job.layers)) and np.all(np.isfinite(job.job))
    cand = candidate_features(job.layer_bytes, SearchSpace.default().to_array(), job.current)
    assert cand.shape == (len(SearchSpace.default()), F_CAND) and np.all(np.isfinite(cand))


def test_layer_bins_keep_totals():
    f = feats(54, 4)
    x = layer_features(f.layer_bytes, f.layer_time_s)
    assert np.expm1(x[:, 0]).sum() * 1e6 == pytest.approx(f.layer_bytes.sum())
    assert np.expm1(x[:, 4]).sum() == pytest.approx(54)


@pytest.mark.parametrize("l", [1, 7, 54, 161])
def test_halving_finer_bins_equals_coarse_bins(l):
    f = feats(l, 3)
    fine = layer_features(f.layer_bytes, f.layer_time_s, 2 * N_BINS)
    np.testing.assert_allclose(_halve_bins(fine[None])[0], layer_features(f.layer_bytes, f.layer_time_s), atol=1e-12)


def test_worker_order_does_not_matter():
    f = feats(20, 4)
    perm = [2, 0, 3, 1]
    g = RuntimeFeatures(f.arch, f.layer_bytes, f.layer_time_s[:, perm], f.forward_s[perm], f.bw_up_Bps[perm], f.bw_down_Bps[perm], f.speed[perm])
    a, b = featurize(f, Config(MiB, MiB), 100.0), featurize(g, Config(MiB, MiB), 100.0)
    np.testing.assert_allclose(a.job, b.job)
    np.testing.assert_allclose(a.layers, b.layers)


@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan, math.inf])
def test_featurize_rejects_bad_observed_speed(bad):
    with pytest.raises(ValueError, match=r"observed_speed must be a positive finite number, but got observed_speed="):
        featurize(feats(5, 2), Config(MiB, MiB), bad)


def test_nan_statistics_are_rejected_before_featurizing():
    f = feats(5, 2)
    t = f.layer_time_s.copy()
    t[0, 0] = math.nan
    with pytest.raises(ValueError, match=r"layer_time_s must be finite"):
        RuntimeFeatures("ps", f.layer_bytes, t, f.forward_s, f.bw_up_Bps, f.bw_down_Bps, f.speed)
