from __future__ import annotations

import math

import numpy as np
import pytest

from autobyte.core import Config, KiB, MiB, RuntimeFeatures
from autobyte.sim import GBPS, BandwidthTrace, Cluster, ComputeTrace, ModelProfile, get_model, simulate


def _quiet(n: int, arch: str = "allreduce", gbps: float = 10.0, **kw: object) -> Cluster:
    base = dict(latency_s=0.0, per_message_s=0.0, jitter=0.0, contention=0.0, update_Bps=math.inf, ps_aggregate_Bps=math.inf)
    base.update(kw)
    return Cluster.from_gbps(n, gbps, arch, **base)  # type: ignore[arg-type]


def _zero_compute(model: ModelProfile) -> ModelProfile:
    z = np.zeros(model.n_layers)
    return ModelProfile(model.name, model.layer_bytes, z, z, model.batch_size)


@pytest.mark.parametrize("arch", ["allreduce", "ps"])
@pytest.mark.parametrize("partition", [64 * KiB, MiB, 64 * MiB])
def test_infinite_bandwidth_iteration_equals_compute(arch: str, partition: int) -> None:
    m = get_model("resnet50")
    c = Cluster(8, arch, bw_up_Bps=math.inf, bw_down_Bps=math.inf, latency_s=0.0, per_message_s=0.0, jitter=0.0,
                update_Bps=math.inf, ps_aggregate_Bps=math.inf)
    r = simulate(m, c, Config.from_multiple(partition, 2), n_iters=4)
    assert np.allclose(r.iter_time_s, m.compute_s, rtol=1e-12)
    assert r.samples_per_s == pytest.approx(8 * m.batch_size / m.compute_s, rel=1e-12)


def test_zero_compute_single_message_allreduce_closed_form() -> None:
    m = _zero_compute(get_model("alexnet"))
    n, lat, o = 8, 30e-6, 200e-6
    c = _quiet(n, latency_s=lat, per_message_s=o)
    r = simulate(m, c, Config(1 << 30, 1 << 30), n_iters=3)
    expect = o + 2 * (n - 1) * lat + 2 * (n - 1) / n * m.total_bytes / (10 * GBPS)
    assert np.allclose(r.iter_time_s, expect, rtol=1e-9)


def test_zero_compute_stop_and_wait_is_the_sum_over_messages() -> None:
    m = _zero_compute(get_model("resnet50"))
    n, lat, o = 4, 20e-6, 100e-6
    c = _quiet(n, latency_s=lat, per_message_s=o)
    r = simulate(m, c, Config(MiB, MiB), n_iters=2)  # credit 1X: one message at a time
    k = r.n_messages
    expect = k * (o + 2 * (n - 1) * lat) + 2 * (n - 1) / n * m.total_bytes / (10 * GBPS)
    assert np.allclose(r.iter_time_s, expect, rtol=1e-9)


def test_zero_compute_ps_single_server_message_closed_form() -> None:
    # A message below the big-array bound lives on one server: n-1 flows converge on its link.
    m = ModelProfile("one", np.array([MiB]), np.zeros(1), np.zeros(1), 1)
    n, lat, o = 4, 10e-6, 50e-6
    c = _quiet(n, "ps", latency_s=lat, per_message_s=o)
    r = simulate(m, c, Config(MiB, MiB), n_iters=2)
    expect = 2 * o + 2 * (2 * lat) + 2 * (n - 1) * MiB / (10 * GBPS)
    assert np.allclose(r.iter_time_s, expect, rtol=1e-9)


def test_zero_compute_many_messages_is_at_least_the_communication_lower_bound() -> None:
    m = _zero_compute(get_model("vgg16"))
    n, lat, o = 8, 25e-6, 100e-6
    c = _quiet(n, latency_s=lat, per_message_s=o)
    r = simulate(m, c, Config.from_multiple(4 * MiB, 8), n_iters=2)
    wire = 2 * (n - 1) / n * m.total_bytes / (10 * GBPS)
    assert np.all(r.iter_time_s >= wire + o + 2 * (n - 1) * lat - 1e-12)
    assert np.all(r.iter_time_s >= r.n_messages * o)
    # overheads overlap with transfers, so it is far below the serial sum
    assert np.all(r.iter_time_s < wire + r.n_messages * (o + 2 * (n - 1) * lat))


CASES = [
    ("resnet50", "allreduce", 8, 256 * KiB, 4),
    ("vgg16", "ps", 4, 4 * MiB, 2),
    ("alexnet", "allreduce", 16, 16 * MiB, 1),
    ("densenet121", "ps", 2, 64 * KiB, 16),
    ("bert-base", "allreduce", 8, MiB, 8),
]


@pytest.mark.parametrize("name, arch, n, partition, mult", CASES)
def test_never_below_compute_or_wire_time(name: str, arch: str, n: int, partition: int, mult: int) -> None:
    m = get_model(name)
    for gbps in (0.5, 5, 25):
        r = simulate(m, Cluster.from_gbps(n, gbps, arch, jitter=0.0), Config.from_multiple(partition, mult), n_iters=3)
        bound = max(m.compute_s, 2 * (n - 1) / n * m.total_bytes / (gbps * GBPS))
        assert np.all(r.iter_time_s >= bound * (1 - 1e-9))


@pytest.mark.parametrize("name, arch, n, partition, mult", CASES)
def test_more_bandwidth_is_never_slower(name: str, arch: str, n: int, partition: int, mult: int) -> None:
    m = get_model(name)
    cfg = Config.from_multiple(partition, mult)
    times = [simulate(m, Cluster.from_gbps(n, g, arch, jitter=0.0), cfg, n_iters=3).iter_time_s.mean()
             for g in (0.5, 1, 2, 5, 10, 20, 40)]
    # Non-preemptive priority scheduling admits tiny anomalies (a faster link
    # frees credit a moment earlier and a lower-priority message slips in);
    # they stay below 1% (docs/simulator.md).
    assert all(b <= a * 1.01 for a, b in zip(times, times[1:]))
    assert times[-1] < times[0]


def test_window_stats_are_measured_like_an_engine() -> None:
    m = get_model("resnet50")
    c = Cluster.from_gbps(4, 10, jitter=0.0)
    r = simulate(m, c, Config.from_multiple(MiB, 4), n_iters=10)
    ws = r.window_stats()
    assert len(ws) == 4
    w = ws[0]
    assert w.n_iters == 10
    assert np.allclose(w.layer_backward_s, m.backward_s)
    assert w.forward_s >= m.forward_s.sum() - 1e-12
    assert w.bytes_sent == 10 * m.total_bytes
    assert w.n_messages == 10 * r.n_messages
    assert 0 < w.bandwidth_Bps
    # payload rate x 2(n-1)/n never exceeds the link
    assert w.bandwidth_Bps * c.link_factor <= 10 * GBPS * (1 + 1e-9)
    assert sum(x.samples_per_s for x in ws) == pytest.approx(r.samples_per_s)
    f = r.features()
    assert isinstance(f, RuntimeFeatures) and f.layer_time_s.shape == (m.n_layers, 4)
    assert f.speed.sum() == pytest.approx(r.samples_per_s)


def test_jitter_is_seeded() -> None:
    m, c, cfg = get_model("alexnet"), Cluster.from_gbps(4, 5, jitter=0.05), Config(MiB, 4 * MiB)
    a = simulate(m, c, cfg, seed=3).iter_time_s
    b = simulate(m, c, cfg, seed=3).iter_time_s
    d = simulate(m, c, cfg, seed=4).iter_time_s
    assert np.array_equal(a, b) and not np.array_equal(a, d)


def test_bandwidth_trace_changes_at_iteration_boundaries() -> None:
    m, cfg = get_model("vgg16"), Config.from_multiple(4 * MiB, 2)
    c = Cluster.from_gbps(8, 10, jitter=0.0)
    tr = BandwidthTrace.from_gbps([0, 5], [10, 2])
    r = simulate(m, c, cfg, n_iters=10, traces=tr)
    fast, slow = r.iter_time_s[1:5].mean(), r.iter_time_s[6:].mean()
    assert slow > 3 * fast  # VGG16 is communication-bound
    # iteration 5's communication is the first at 2 Gbps; it lands in iteration 6's time
    assert r.iter_time_s[5] < 2 * fast and r.iter_time_s[6] > 3 * fast


def test_compute_trace_straggler_slows_the_cluster() -> None:
    m, cfg = get_model("resnet50"), Config.from_multiple(MiB, 2)
    c = Cluster.from_gbps(4, 100, jitter=0.0)
    base = simulate(m, c, cfg, n_iters=4).samples_per_s
    scale = np.array([[1, 1, 1, 1], [1, 1, 1, 3.0]])
    slow = simulate(m, c, cfg, n_iters=4, traces=[ComputeTrace([0, 0 + 1], scale)], start_iter=2).samples_per_s
    assert slow < 0.5 * base


def test_timeline_holds_compute_and_messages() -> None:
    r = simulate(get_model("alexnet"), Cluster.from_gbps(2, 10), Config(MiB, 2 * MiB), n_iters=2)
    ev = r.timeline
    kinds = {e["kind"] for e in ev}
    assert kinds == {"forward", "backward", "message"}
    msgs = [e for e in ev if e["kind"] == "message" and e["iteration"] == 0]
    assert len(msgs) == r.n_messages and all(e["end"] > e["start"] for e in msgs)


def test_single_worker_has_no_communication() -> None:
    m = get_model("resnet50")
    r = simulate(m, Cluster(1, jitter=0.0, update_Bps=math.inf), Config(MiB, MiB), n_iters=2)
    assert np.allclose(r.iter_time_s, m.compute_s)


def test_tiny_partitions_are_grouped_but_pay_every_message() -> None:
    m = get_model("resnet50")
    c = Cluster.from_gbps(8, 10, jitter=0.0)
    cfg = Config.from_multiple(64 * KiB, 4)
    exact = simulate(m, c, cfg, n_iters=3, max_messages=100_000)
    grouped = simulate(m, c, cfg, n_iters=3, max_messages=256)
    assert exact.n_messages == grouped.n_messages
    # grouping is an approximation of the window dynamics (docs/simulator.md: within ~20%)
    assert grouped.iter_time_s.mean() == pytest.approx(exact.iter_time_s.mean(), rel=0.25)
    stop_and_wait = simulate(m, c, Config(64 * KiB, 64 * KiB), n_iters=3, max_messages=256)
    exact1 = simulate(m, c, Config(64 * KiB, 64 * KiB), n_iters=3, max_messages=100_000)
    assert stop_and_wait.iter_time_s.mean() == pytest.approx(exact1.iter_time_s.mean(), rel=0.03)


# ------------------------------------------------------------------ bad input
@pytest.mark.parametrize("bw", [0, -1.0, float("nan")])
def test_bad_bandwidth(bw: float) -> None:
    with pytest.raises(ValueError, match=r"bw_up_Bps must be (positive|finite), but got bw_up_Bps="):
        Cluster(4, bw_up_Bps=bw)


def test_bad_cluster_arguments() -> None:
    with pytest.raises(ValueError, match="n_workers must be a positive integer, but got n_workers=0"):
        Cluster(0)
    with pytest.raises(ValueError, match=r"arch must be one of \('allreduce', 'ps'\), but got arch='ring'"):
        Cluster(2, "ring")
    with pytest.raises(ValueError, match=r"bw_down_Bps must be a scalar or have shape \(3,\)"):
        Cluster(3, bw_down_Bps=[1e9, 1e9])
    with pytest.raises(ValueError, match="latency_s must be a finite non-negative number, but got latency_s=-1"):
        Cluster(2, latency_s=-1)
    with pytest.raises(ValueError, match="gbps must be a positive number, but got gbps=0"):
        Cluster.from_gbps(2, 0)


def test_bad_traces() -> None:
    with pytest.raises(ValueError, match=r"start_iters must begin at iteration 0 .* but got start_iters\[0\]=5"):
        BandwidthTrace([5, 10], [1e9, 2e9])
    with pytest.raises(ValueError, match="strictly increasing"):
        BandwidthTrace([0, 10, 10], [1e9, 2e9, 3e9])
    with pytest.raises(ValueError, match="must not hold NaN"):
        BandwidthTrace([0, 10], [1e9, float("nan")])
    with pytest.raises(ValueError, match="must be positive"):
        BandwidthTrace([0, 10], [1e9, 0.0])
    with pytest.raises(ValueError, match=r"one value per step"):
        BandwidthTrace([0, 10], [1e9])
    with pytest.raises(ValueError, match="must not hold NaN or inf"):
        ComputeTrace([0], [float("inf")])
    with pytest.raises(ValueError, match=r"must have 4 columns"):
        simulate(get_model("alexnet"), Cluster(4), Config(MiB, MiB), traces=BandwidthTrace([0], [[1e9, 1e9]]))
    with pytest.raises(TypeError, match="traces must be BandwidthTrace or ComputeTrace"):
        simulate(get_model("alexnet"), Cluster(4), Config(MiB, MiB), traces=["fast"])  # type: ignore[list-item]


def test_bad_simulate_arguments() -> None:
    m, c = get_model("alexnet"), Cluster(2)
    with pytest.raises(TypeError, match="model must be a ModelProfile"):
        simulate("alexnet", c, Config(MiB, MiB))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="config must be a Config"):
        simulate(m, c, MiB)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="partition_bytes must be a positive integer.*but got partition_bytes=0"):
        simulate(m, c, (0, MiB))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="n_iters must be an integer >= 1, but got n_iters=0"):
        simulate(m, c, Config(MiB, MiB), n_iters=0)


def test_config_outside_the_space() -> None:
    from autobyte.core import SearchSpace

    space = SearchSpace.default()
    m, c = get_model("alexnet"), Cluster(2)
    simulate(m, c, Config.from_multiple(4 * MiB, 2), n_iters=1, space=space)
    with pytest.raises(ValueError, match=r"config must be one of the 152 candidates of the search space, but got config=<partition 3 MiB"):
        simulate(m, c, Config(3 * MiB, 6 * MiB), n_iters=1, space=space)
    with pytest.raises(ValueError, match="credit_bytes must be a positive integer"):
        simulate(m, c, Config(MiB, -1), n_iters=1)


def test_evaluate_configs_is_the_grid_oracle() -> None:
    from autobyte.sim import evaluate_configs

    m, c = get_model("resnet50"), Cluster.from_gbps(8, 5)
    cfgs = [Config.from_multiple(p, 2) for p in (64 * KiB, MiB, 64 * MiB)]
    s = evaluate_configs(m, c, cfgs, n_iters=3)
    assert s.shape == (3,)
    assert s[1] == simulate(m, c, cfgs[1], n_iters=3).samples_per_s
    with pytest.raises(ValueError, match="configs must hold at least one Config"):
        evaluate_configs(m, c, [])
