from __future__ import annotations

import numpy as np
import pytest

from autobyte.core import RuntimeFeatures, StatsCollector, WindowStats


def _feed(c: StatsCollector, start: float, n_tensors: int) -> None:
    c.begin_iteration(start)
    c.forward_done(start + 0.010)
    for k, tensor in enumerate(reversed(range(n_tensors))):  # backward: last tensor first, 2 ms apart
        c.grad_ready(tensor, start + 0.010 + 0.002 * (k + 1))
    c.message_done(1000, start + 0.012, start + 0.016)
    c.message_done(3000, start + 0.014, start + 0.020)
    c.end_iteration(start + 0.025, 32)


def test_window_from_fed_timestamps():
    c = StatsCollector(3)
    for i in range(4):
        _feed(c, i * 0.025, 3)
    w = c.window()
    assert w.n_iters == 4
    assert w.iter_time_s == pytest.approx(0.025)
    assert w.samples_per_s == pytest.approx(32 / 0.025)
    assert w.forward_s == pytest.approx(0.010)
    np.testing.assert_allclose(w.layer_backward_s, [0.002, 0.002, 0.002])
    assert w.bytes_sent == 4 * 4000 and w.n_messages == 8
    assert w.comm_busy_s == pytest.approx(4 * 0.008)  # union of overlapping intervals
    assert w.bandwidth_Bps == pytest.approx(16000 / 0.032)
    assert w.busy_share == pytest.approx(0.032 / 0.1)  # messages in flight 8 ms of each 25 ms iteration
    assert WindowStats.from_vector(w.to_vector()) == w
    with pytest.raises(ValueError, match="no completed iteration"):
        c.window()


def test_collector_rejects_zero_tensors():
    with pytest.raises(ValueError, match="n_tensors must be positive"):
        StatsCollector(0)


def _features(**over):
    kw = dict(
        arch="allreduce", layer_bytes=[400, 40], layer_time_s=[[0.1, 0.2], [0.1, 0.2]], forward_s=[0.1, 0.1],
        bw_up_Bps=[1e9, 1e9], bw_down_Bps=[1e9, 1e9], speed=[100, 90],
    )
    kw.update(over)
    return RuntimeFeatures(**kw)


def test_features_shapes():
    f = _features()
    assert f.n_workers == 2 and f.n_layers == 2


@pytest.mark.parametrize(
    "over, match",
    [
        ({"arch": "ring"}, "arch must be one of"),
        ({"speed": [float("nan"), 1]}, "speed must be finite"),
        ({"bw_up_Bps": [float("inf"), 1]}, "bw_up_Bps must be finite"),
        ({"forward_s": [-1, 1]}, "forward_s must be non-negative"),
        ({"speed": []}, "speed must not be empty"),
        ({"layer_bytes": [1, 2, 3]}, r"layer_bytes must have shape \(2,\)"),
        ({"speed": [1, 2, 3]}, r"speed must have shape \(2,\) for n=2 workers"),
    ],
)
def test_features_reject_bad_statistics(over, match):
    with pytest.raises(ValueError, match=match):
        _features(**over)


def test_window_keeps_its_iteration_times_locally_and_bounded():
    from autobyte.core.metrics import ITER_TIMES_KEPT

    c = StatsCollector(1)
    for i, dt in enumerate([0.01, 0.02, 0.04]):
        c.begin_iteration(i)
        c.end_iteration(i + dt, 8)
    w = c.window()
    assert w.iter_times == pytest.approx((0.01, 0.02, 0.04))
    back = WindowStats.from_vector(w.to_vector())
    assert back.iter_times == () and back == w  # not on the wire, not part of equality
    assert len(w.to_vector()) == 8 + 1
    c.begin_iteration(10.0)
    c.end_iteration(10.5, 8)
    assert c.window().iter_times == pytest.approx((0.5,))  # a reset window starts afresh
    merged = WindowStats.merge([w, w])
    assert merged.iter_times == pytest.approx((0.01, 0.02, 0.04) * 2)
    for i in range(ITER_TIMES_KEPT + 10):  # a window never read keeps a bounded list
        c.begin_iteration(float(i))
        c.end_iteration(i + 0.001 * (i + 1), 8)
    kept = c.window().iter_times
    assert len(kept) == ITER_TIMES_KEPT and kept[-1] == pytest.approx(0.001 * (ITER_TIMES_KEPT + 10))
