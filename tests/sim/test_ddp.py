"""DDP simulated as DDP runs: its buckets against PyTorch's own, closed forms, bad inputs."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest

from autobyte.testing import run_ranks
from autobyte.sim import GBPS, Cluster, ModelProfile, bucket_limits, ddp_buckets, get_model, simulate_ddp
from autobyte.sim._ddp import FIRST_BUCKET_BYTES

MiB = 1 << 20
HERE = os.path.dirname(os.path.abspath(__file__))


# ------------------------------------------------------------------ bucket formation
@pytest.mark.parametrize("seed", range(8))
def test_buckets_match_torchs_assignment(seed):
    """Same buckets as ``torch.distributed._compute_bucket_assignment_by_size`` fed as the Reducer's rebuild feeds it."""
    torch = pytest.importorskip("torch")
    dist = torch.distributed
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 40))
    numels = [int(x) for x in rng.choice([1, 10, 1000, 50_000, 262_144, 600_000, 3_000_000], size=n)]
    tensors = [torch.empty(k) for k in numels]
    first, cap = [(1 * MiB, 25 * MiB), (1 * MiB, 4 * MiB), (4 * MiB, 4 * MiB), (256 * 1024, 2 * MiB)][seed % 4]
    order = list(range(n))[::-1]  # gradients of a feed-forward model: last layer first
    want, _ = dist._compute_bucket_assignment_by_size([tensors[i] for i in order], [first, cap], [False] * n, order)
    got = ddp_buckets([k * 4 for k in numels], cap, first)
    assert got == [list(b) for b in want]


def test_buckets_follow_a_given_ready_order():
    torch = pytest.importorskip("torch")
    sizes = [3 * MiB, 10, 2 * MiB, 10, 5 * MiB]
    order = [4, 2, 3, 0, 1]
    tensors = [torch.empty(s // 4 or 1) for s in sizes]
    want, _ = torch.distributed._compute_bucket_assignment_by_size(
        [tensors[i] for i in order], [MiB, 4 * MiB], [False] * 5, order)
    assert ddp_buckets([t.numel() * 4 for t in tensors], 4 * MiB, MiB, ready_order=order) == [list(b) for b in want]


def test_first_bucket_closes_at_one_mib_then_the_cap_applies():
    # reverse order: 0.6 MiB, 0.6 MiB (first bucket reaches 1 MiB: closes), then 3 x 10 MiB under a 25 MiB cap
    sizes = [10 * MiB, 10 * MiB, 10 * MiB, 6 * MiB // 10, 6 * MiB // 10]
    assert ddp_buckets(sizes, 25 * MiB, FIRST_BUCKET_BYTES) == [[4, 3], [2, 1, 0]]
    # a bucket closes once it *reaches* the cap, so it may overshoot by one tensor
    assert ddp_buckets(sizes, 15 * MiB, 15 * MiB) == [[4, 3, 2, 1], [0]]


def test_bucket_limits_follow_ddps_rule():
    assert bucket_limits(None) == (FIRST_BUCKET_BYTES, 25 * MiB)  # the default keeps a 1 MiB first bucket
    assert bucket_limits(8) == (8 * MiB, 8 * MiB)  # an explicit size sizes the first bucket too
    assert bucket_limits(8, first_bucket_mb=1) == (MiB, 8 * MiB)  # bucket_cap_mb_list=[1, 8] / older PyTorch


@pytest.fixture(scope="module")
def real_ddp_buckets():
    res = run_ranks([os.path.join(HERE, "ddp_buckets_rank.py")], 2, timeout_s=240)
    assert all(r.returncode == 0 for r in res), res[0].stderr[-3000:] + res[1].stderr[-3000:]
    line = next(ln for ln in res[0].stdout.splitlines() if ln.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


@pytest.mark.integration
def test_buckets_match_a_real_two_rank_ddp(real_ddp_buckets):
    """The buckets a real 2-rank gloo DDP rebuilt after its first iteration, for default, explicit and listed sizes."""
    data = real_ddp_buckets
    tb = data["tensor_bytes"]
    assert len(data["cases"]) >= 4
    for case in data["cases"]:
        kw = case["kw"]
        if "bucket_cap_mb_list" in kw:
            first_mb, cap_mb = kw["bucket_cap_mb_list"]
            first, cap = bucket_limits(cap_mb, first_bucket_mb=first_mb)
        else:
            first, cap = bucket_limits(kw["bucket_cap_mb"])
        got = ddp_buckets(tb, cap, first)
        assert got == case["indices"], kw
        assert [sum(tb[i] for i in b) for b in got] == case["sizes"], kw
    by = {json.dumps(c["kw"]): c["indices"] for c in data["cases"]}
    # the default's 1 MiB first bucket differs from an explicit 25 MiB
    assert by['{"bucket_cap_mb": null}'] != by['{"bucket_cap_mb": 25}']


# ------------------------------------------------------------------ timing
def _toy(compute: float = 0.0, n_layers: int = 4, mb: float = 8.0) -> ModelProfile:
    lb = np.full(n_layers, int(mb * MiB))
    t = np.full(n_layers, compute / (3 * n_layers))
    return ModelProfile("toy", lb, t, 2 * t, 16, device="test")


def test_infinite_link_is_compute_plus_step():
    m = get_model("resnet50")
    c = Cluster(4, bw_up_Bps=math.inf, bw_down_Bps=math.inf, latency_s=0, per_message_s=0, jitter=0)
    r = simulate_ddp(m, c, 25, step_s=0.01)
    assert np.allclose(r.iter_time_s, m.compute_s + 0.01)
    assert r.compute_s == pytest.approx(m.compute_s + 0.01)


def test_zero_compute_buckets_are_reduced_one_after_the_other():
    n, B, lat, o = 4, 1 * GBPS, 50e-6, 200e-6
    c = Cluster(n, bw_up_Bps=B, bw_down_Bps=B, latency_s=lat, per_message_s=o, jitter=0, contention=0)
    m = _toy(0.0, n_layers=4, mb=8)
    one = o + 2 * (n - 1) * lat + 2 * (n - 1) / n * 8 * MiB / B
    r = simulate_ddp(m, c, 8, step_s=0.0)  # every 8 MiB layer is its own bucket
    assert r.n_buckets == 4
    assert r.iter_time_s.mean() == pytest.approx(4 * one, rel=1e-9)
    r1 = simulate_ddp(m, c, 64, step_s=0.0)  # one bucket
    assert r1.n_buckets == 1
    assert r1.iter_time_s.mean() == pytest.approx(o + 2 * (n - 1) * lat + 2 * (n - 1) / n * 32 * MiB / B, rel=1e-9)


def test_smaller_buckets_overlap_with_backward():
    c = Cluster.from_gbps(2, 1, jitter=0)
    m = _toy(0.4, n_layers=8, mb=4)
    one = simulate_ddp(m, c, 1024)  # a single bucket waits for the whole backward
    many = simulate_ddp(m, c, 4)
    assert many.n_buckets == 8 and one.n_buckets == 1
    assert many.samples_per_s > one.samples_per_s * 1.1
    comm = 2 * 1 / 2 * m.total_bytes / (1 * GBPS)
    for r in (one, many):  # never below the compute-only bound or the link's
        assert r.iter_time_s.min() >= max(r.compute_s, comm) * 0.999


def test_no_cross_iteration_overlap():
    """The next forward waits for the last bucket and the step: iteration >= backward end + comm of the first layer's bucket."""
    c = Cluster.from_gbps(2, 0.5, jitter=0, per_message_s=0, latency_s=0)
    m = _toy(0.3, n_layers=4, mb=4)
    r = simulate_ddp(m, c, 4, step_s=0.0)
    # all 16 MiB must cross before the next forward: iteration >= forward + total transfer
    fwd = float(m.forward_s.sum())
    assert r.iter_time_s.mean() >= fwd + 16 * MiB / (0.5 * GBPS) - 1e-9


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: ddp_buckets([], MiB), "tensor_bytes must hold at least one tensor"),
        (lambda: ddp_buckets([-1], MiB), "tensor_bytes must be non-negative"),
        (lambda: ddp_buckets([4], 0), "bucket_bytes must be a positive integer"),
        (lambda: ddp_buckets([4], MiB, 0), "first_bucket_bytes must be a positive integer"),
        (lambda: ddp_buckets([4, 4], MiB, ready_order=[0, 0]), "ready_order must be a permutation"),
        (lambda: bucket_limits(0), "bucket_cap_mb must be a positive number of MiB, but got bucket_cap_mb=0"),
        (lambda: bucket_limits(float("nan")), "bucket_cap_mb must be a positive number"),
        (lambda: bucket_limits(4, first_bucket_mb=-1), "first_bucket_mb must be a positive number"),
        (lambda: simulate_ddp(get_model("alexnet"), Cluster(2, "ps")), "cluster.arch must be 'allreduce'"),
        (lambda: simulate_ddp(get_model("alexnet"), Cluster(2), n_iters=0), "n_iters must be an integer >= 1"),
        (lambda: simulate_ddp(get_model("alexnet"), Cluster(2), step_s=-1.0), "step_s must be a finite non-negative"),
    ],
)
def test_bad_inputs(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_bad_types():
    with pytest.raises(TypeError, match="model must be a ModelProfile"):
        simulate_ddp("alexnet", Cluster(2))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="cluster must be a Cluster"):
        simulate_ddp(get_model("alexnet"), 2)  # type: ignore[arg-type]
