"""The PyTorch engine on real ranks: 2 CPU processes on gloo."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from autobyte.testing import launch  # noqa: E402
from autobyte.core import KiB, MiB, UNLIMITED  # noqa: E402
from autobyte.integrations.torch import schedule  # noqa: E402

WORKER = os.path.join(os.path.dirname(__file__), "scripts", "torch_worker.py")
MODEL_BYTES = 4 * (3 * 16 * 9 + 16 + 16 * 2 + 16 * 32 * 9 + 32 + 32 * 2 + 512 * 64 + 64 + 64 * 10 + 10 + 1)


def run(tmp_path, scenario: str, opts: dict | None = None, timeout_s: float = 240.0, env: dict | None = None):
    res = launch([WORKER, scenario, str(tmp_path), json.dumps(opts or {})], 2, timeout_s=timeout_s, env=env)
    return res, [np.load(tmp_path / f"rank{r}.npz", allow_pickle=False) if (tmp_path / f"rank{r}.npz").exists() else None for r in range(2)]


CONFIGS = [
    (4 * KiB, 4 * KiB, 0),  # tiny partitions, credit 1X
    (4 * KiB, 8 * KiB, 0),  # credit 2X
    (16 * KiB, 256 * KiB, 0),  # credit 16X
    (1 * MiB, 1 * MiB, 0),  # partition larger than the whole model
    (25 * MiB, UNLIMITED, 0),  # DDP's operating point
    (8 * KiB, 32 * KiB, 3),  # reconfigured every 3 steps
]


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_matches_ddp(tmp_path, optimizer):
    assert 1 * MiB > MODEL_BYTES
    res, out = run(tmp_path, "equivalence", {"optimizer": optimizer, "configs": CONFIGS, "steps": 30})
    for r in res:
        assert r.returncode == 0, r.stderr[-3000:]
    for rank in range(2):
        for i, cfg in enumerate(CONFIGS):
            assert bool(out[rank][f"ok{i}"]), f"rank {rank} config {cfg}: max abs diff {float(out[rank][f'err{i}'])}"
    # The tiny partition really split the model into many messages, the big one into a single message.
    assert int(out[0]["msgs0"]) > 20
    assert int(out[0]["msgs3"]) == 1


def test_synchronous_mode_matches_ddp(tmp_path):
    cfgs = [(4 * KiB, 8 * KiB, 0), (8 * KiB, 32 * KiB, 4)]
    res, out = run(tmp_path, "equivalence", {"optimizer": "adam", "configs": cfgs, "steps": 12, "overlap": False})
    for r in res:
        assert r.returncode == 0, r.stderr[-3000:]
    assert all(bool(out[0][f"ok{i}"]) for i in range(len(cfgs)))


def test_rank_skew_with_reconfiguration_never_hangs(tmp_path):
    res, out = run(tmp_path, "skew", {"steps": 300}, timeout_s=300)
    for r in res:
        assert r.returncode == 0, r.stderr[-3000:]
    keys = sorted(out[0].files)
    assert keys and keys == sorted(out[1].files)
    for k in keys:
        np.testing.assert_array_equal(out[0][k], out[1][k])


def test_killed_peer_gives_clear_error_within_timeout(tmp_path):
    res, _ = run(tmp_path, "failure", {"timeout_s": 10}, timeout_s=90)
    survivor, dead = res
    assert dead.returncode == 17
    assert survivor.returncode == 3, survivor.stdout + survivor.stderr[-2000:]
    assert "PEERLOST" in survivor.stdout and "rank 1" in survivor.stdout, survivor.stdout
    waited = float(survivor.stdout.split("PEERLOST after ")[1].split("s:")[0])
    assert waited < 10 + 5


def test_reconfigure_disagreement_is_an_error_on_every_rank(tmp_path):
    res, out = run(tmp_path, "mismatch")
    for r in res:
        assert r.returncode == 0, r.stderr[-3000:]
        assert "same arguments on every rank" in r.stdout and "rank 1: partition_bytes=16384" in r.stdout
    assert bool(out[0]["raised"]) and bool(out[1]["raised"])


def test_timeline_records_compute_and_every_message(tmp_path):
    res, out = run(tmp_path, "trace")
    for r in res:
        assert r.returncode == 0, r.stderr[-3000:]
    trace = json.loads((tmp_path / "trace0.json").read_text())
    ev = trace["traceEvents"]
    msgs = [e for e in ev if e["ph"] == "X" and e["name"].startswith("msg ")]
    assert len(msgs) == 3 * int(out[0]["n_messages"])
    assert all(e["dur"] >= 0 and e["args"]["bytes"] > 0 for e in msgs)
    assert len([e for e in ev if e["name"].startswith("update ")]) == 3 * int(out[0]["n_params"])
    assert len([e for e in ev if e["name"].startswith("forward ")]) == 3
    tracks = {e["args"]["name"] for e in ev if e["name"] == "thread_name"}
    assert {"compute", "communication", "update"} <= tracks


# --------------------------------------------------------------- single process


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))


@pytest.mark.parametrize(
    "kw, exc, match",
    [
        ({"partition_bytes": 0}, ValueError, "partition_bytes must be a positive integer, but got partition_bytes=0"),
        ({"partition_bytes": -5}, ValueError, "partition_bytes=-5"),
        ({"partition_bytes": 1.5}, TypeError, "partition_bytes=1.5"),
        ({"partition_bytes": math.nan}, TypeError, "partition_bytes=nan"),
        ({"partition_bytes": 2**50}, ValueError, "at most"),
        ({"credit_bytes": 0}, ValueError, "credit_bytes must be a positive integer"),
        ({"credit_bytes": "4MB"}, TypeError, "credit_bytes='4MB'"),
        ({"timeout_s": 0}, ValueError, "timeout_s must be a positive number"),
        ({"tuner": 3}, TypeError, "tuner must be"),
    ],
)
def test_bad_arguments(kw, exc, match):
    m = _model()
    with pytest.raises(exc, match=match):
        schedule(m, torch.optim.SGD(m.parameters(), lr=0.1), **kw)


def test_model_without_trainable_parameters():
    m = _model()
    for p in m.parameters():
        p.requires_grad_(False)
    with pytest.raises(ValueError, match="no trainable parameters"):
        schedule(m, torch.optim.SGD(m.parameters(), lr=0.1))


def test_lbfgs_needs_synchronous_mode():
    m = _model()
    with pytest.raises(ValueError, match="overlap=False"):
        schedule(m, torch.optim.LBFGS(m.parameters()))


def test_world_size_one_trains_unchanged():
    assert not torch.distributed.is_initialized()
    ref, sched = _model(), _model()
    o1, o2 = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9), torch.optim.SGD(sched.parameters(), lr=0.1, momentum=0.9)
    h = schedule(sched, o2, partition_bytes=64, credit_bytes=128)
    g = torch.Generator().manual_seed(0)
    for _ in range(5):
        x = torch.randn(16, 4, generator=g)
        for m, o in ((ref, o1), (sched, o2)):
            o.zero_grad()
            m(x).pow(2).mean().backward()
            o.step()
    for a, b in zip(ref.parameters(), sched.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    ws = h.window_stats()
    assert ws.n_iters == 4 and ws.samples_per_s > 0
    h.close()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs (NCCL cannot run two ranks on one GPU); none lent to this run")
def test_matches_ddp_on_nccl(tmp_path):
    res, out = run(tmp_path, "equivalence", {"optimizer": "sgd", "configs": CONFIGS[:4], "steps": 30, "backend": "nccl"})
    for r in res:
        assert r.returncode == 0, r.stderr[-3000:]
    assert all(bool(out[0][f"ok{i}"]) for i in range(4))
