"""16 bits on the wire in the simulator: half the bytes per message, two casts, fp32 unchanged."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from autobyte._advise_inputs import load_calibration
from autobyte.core import Config, MiB
from autobyte.sim import GBPS, Cluster, ModelProfile, get_model, simulate, simulate_ddp
from autobyte.sim._cluster import DEFAULT_CAST_BPS


def _quiet(n: int, gbps: float = 10.0, **kw: object) -> Cluster:
    base = dict(latency_s=0.0, per_message_s=0.0, jitter=0.0, contention=0.0, update_Bps=math.inf)
    base.update(kw)
    return Cluster.from_gbps(n, gbps, **base)  # type: ignore[arg-type]


def _zero_compute(model: ModelProfile) -> ModelProfile:
    z = np.zeros(model.n_layers)
    return ModelProfile(model.name, model.layer_bytes, z, z, model.batch_size)


def test_fp32_predictions_are_unchanged():
    # values of the simulator before the wire existed (commit 2b89d2b7), to the last digit
    m, c = get_model("resnet50"), Cluster.from_gbps(8, 10)
    r = simulate(m, c, Config(MiB, 4 * MiB), n_iters=3)
    assert r.iter_time_s.tolist() == [0.17817544670360919, 0.18201839125786917, 0.18077237851884606]
    assert simulate_ddp(m, c, None).iter_time_s.tolist() == [
        0.20370368449107273, 0.20508446803941077, 0.20474243669715264, 0.20540470296640012, 0.20598462403765547]
    assert simulate_ddp(m, c, 4).iter_time_s.tolist() == [
        0.21000368449107287, 0.21138446803941002, 0.21104243669715195, 0.21170470296640032, 0.21228462403765655]


@pytest.mark.parametrize("arch", ["allreduce", "ps"])
def test_the_cast_rate_does_not_touch_fp32(arch):
    m = get_model("vgg16")
    slow = Cluster.from_gbps(4, 10, arch, cast_Bps=1.0)  # a cast of one byte a second would show anywhere it ran
    fast = Cluster.from_gbps(4, 10, arch)
    a = simulate(m, slow, Config(MiB, 4 * MiB, "fp32"), n_iters=3)
    b = simulate(m, fast, Config(MiB, 4 * MiB), n_iters=3)
    assert a.iter_time_s.tolist() == b.iter_time_s.tolist()
    if arch == "allreduce":
        assert simulate_ddp(m, slow, 4).iter_time_s.tolist() == simulate_ddp(m, fast, 4).iter_time_s.tolist()


@pytest.mark.parametrize("wire", ["bf16", "fp16"])
def test_half_the_bytes_travel(wire):
    m, c = get_model("resnet50"), Cluster.from_gbps(8, 10)
    a = simulate(m, c, Config(MiB, 4 * MiB), n_iters=2).window_stats()[0]
    b = simulate(m, c, Config(MiB, 4 * MiB, wire), n_iters=2).window_stats()[0]
    assert b.bytes_sent == pytest.approx(a.bytes_sent / 2, rel=1e-6)
    assert b.n_messages < a.n_messages  # a 1 MiB partition holds twice the elements


def test_zero_compute_single_message_closed_form_with_the_casts():
    m = _zero_compute(get_model("alexnet"))
    n, lat, o, cast = 8, 30e-6, 200e-6, 5e9
    c = _quiet(n, latency_s=lat, per_message_s=o, cast_Bps=cast)
    r = simulate(m, c, Config(1 << 30, 1 << 30, "bf16"), n_iters=3)
    s = m.total_bytes  # fp32 bytes; half of them travel
    expect = o + s / cast + 2 * (n - 1) * lat + 2 * (n - 1) / n * (s / 2) / (10 * GBPS) + s / cast
    assert np.allclose(r.iter_time_s, expect, rtol=1e-9)


def test_link_bound_16_bits_nearly_halve_the_iteration():
    m, c = get_model("resnet50"), Cluster.from_gbps(8, 1, jitter=0.0)
    cfg = Config(8 * MiB, 8 * MiB)
    t32 = simulate(m, c, cfg, n_iters=3).iter_time_s.mean()
    t16 = simulate(m, c, Config(cfg.partition_bytes, cfg.credit_bytes, "bf16"), n_iters=3).iter_time_s.mean()
    assert 1.8 < t32 / t16 < 2.05
    d32 = simulate_ddp(m, c, None, n_iters=3).iter_time_s.mean()
    d16 = simulate_ddp(m, c, None, n_iters=3, hook="bf16").iter_time_s.mean()
    assert 1.8 < d32 / d16 < 2.05


def test_compute_bound_16_bits_buy_about_nothing_and_the_casts_cost_a_little():
    m = get_model("resnet50")
    c = Cluster.from_gbps(8, 1000, jitter=0.0, cast_Bps=10e9)  # a 1 Tbit/s link: compute-bound; a CPU's cast rate
    cfg = Config(MiB, 4 * MiB)
    t32 = simulate(m, c, cfg, n_iters=3).iter_time_s.mean()
    t16 = simulate(m, c, Config(MiB, 4 * MiB, "bf16"), n_iters=3).iter_time_s.mean()
    assert t32 < t16 < t32 * 1.02  # slower, slightly: the front layers' casts sit on the critical path
    free = simulate(m, c.replace(cast_Bps=math.inf), Config(MiB, 4 * MiB, "bf16"), n_iters=3).iter_time_s.mean()
    assert free == pytest.approx(t32, rel=0.005) and free < t16  # without the casts 16 bits change about nothing
    d32 = simulate_ddp(m, c, None, n_iters=3).iter_time_s.mean()
    d16 = simulate_ddp(m, c, None, n_iters=3, hook="bf16").iter_time_s.mean()
    assert d32 < d16 < d32 * 1.2


def test_ddp_hook_infinite_link_is_compute_step_and_the_casts():
    # the hook's casts run on the backward's path; the last bucket's cast back ends the backward
    m = get_model("resnet50")
    cast = 20e9
    c = Cluster(4, bw_up_Bps=math.inf, bw_down_Bps=math.inf, latency_s=0, per_message_s=0, jitter=0, cast_Bps=cast)
    r = simulate_ddp(m, c, 25, step_s=0.01, hook="fp16")
    last = float(m.layer_bytes[r.buckets[-1]].sum())
    assert np.allclose(r.iter_time_s, m.compute_s + 0.01 + m.total_bytes / cast + last / cast, rtol=1e-9)
    assert r.hook == "fp16" and r.compute_s == pytest.approx(m.compute_s + 0.01)


@pytest.mark.parametrize("hook", ["fp32", "int8", "BF16", 16, True])
def test_bad_hook_is_refused_in_one_line(hook):
    with pytest.raises(ValueError, match=r"^hook must be None, 'bf16' or 'fp16' \(DDP's bf16_compress_hook / "
                                         rf"fp16_compress_hook\), but got hook={hook!r}\.$"):
        simulate_ddp(get_model("alexnet"), Cluster.from_gbps(2, 10), hook=hook)


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), True])
def test_bad_cast_rate_is_refused(bad):
    with pytest.raises(ValueError, match=rf"^cast_Bps must be a positive number \(inf allowed\), but got cast_Bps={bad!r}\.$"):
        Cluster(2, cast_Bps=bad)


def test_bad_wire_is_refused_before_simulating():
    with pytest.raises(ValueError, match=r"^wire must be one of 'fp32', 'bf16', 'fp16', but got wire='int8'\.$"):
        simulate(get_model("alexnet"), Cluster.from_gbps(2, 10), Config(MiB, MiB, "int8"))


def test_the_testbed_calibration_carries_the_cast_rate_and_old_files_still_load(tmp_path):
    shipped = load_calibration("testbed")
    assert shipped is not None and 1e9 < shipped["cast_Bps"] < DEFAULT_CAST_BPS  # one CPU thread, not a V100
    old = tmp_path / "calib_params.json"  # what benchmarks/calibrate.py writes: no cast block
    old.write_text(json.dumps({"params": {"latency_s": 1e-4, "per_message_s": 1e-3}}))
    loaded = load_calibration(str(old))
    assert loaded == {"latency_s": 1e-4, "per_message_s": 1e-3}
