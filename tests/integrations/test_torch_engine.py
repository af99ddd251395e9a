"""The PyTorch engine on real ranks: 2 CPU processes on gloo."""

from __future__ import annotations

import json
import math

import pytest

torch = pytest.importorskip("torch")

from autobyte.core import KiB, MiB, UNLIMITED  # noqa: E402
from autobyte.integrations.torch import schedule  # noqa: E402
from autobyte.testing import run_ranks  # noqa: E402
from autobyte.testing import engine_contract as ec  # noqa: E402

# Equivalence with DDP, reconfiguration at an agreed iteration, rank skew, a lost peer and bad
# input are the engine contract's (tests/contract/test_engine_contract.py); here: what only torch has.


def run(tmp_path, scenario: str, timeout_s: float = 240.0):
    res = run_ranks(["-m", "autobyte.testing._torch_worker", str(tmp_path), json.dumps({"scenario": scenario})], 2,
                 timeout_s=timeout_s)
    return res, [json.loads((tmp_path / f"rank{r}.json").read_text()) if (tmp_path / f"rank{r}.json").exists() else None
                 for r in range(2)]


CONFIGS = ((4 * KiB, 8 * KiB, 0), (25 * MiB, UNLIMITED, 0), (8 * KiB, 32 * KiB, 3))


@pytest.mark.integration
@pytest.mark.parametrize("optimizer, overlap", [("adamw", True), ("adam", False)], ids=["adamw-overlap", "adam-synchronous"])
def test_other_optimizers_and_modes_match_ddp(tmp_path, optimizer, overlap):
    # the contract trains SGD with overlap; per-parameter AdamW updates and the synchronous mode too
    harness = ec.TorchHarness(optimizer=optimizer, overlap=overlap)
    harness.equivalence_configs = CONFIGS
    ec.check_matches_unscheduled(harness, tmp_path)


@pytest.mark.integration
def test_reconfigure_disagreement_is_an_error_on_every_rank(tmp_path):
    res, out = run(tmp_path, "mismatch")
    for r in res:
        assert r.returncode == 0, r.stderr[-3000:]
    for o in out:
        assert o["raised"] is True, o
        assert "same arguments on every rank" in o["message"] and "rank 1: partition_bytes=16384" in o["message"], o


@pytest.mark.integration
def test_timeline_records_compute_and_every_message(tmp_path):
    res, out = run(tmp_path, "trace")
    for r in res:
        assert r.returncode == 0, r.stderr[-3000:]
    trace = json.loads((tmp_path / "trace0.json").read_text())
    ev = trace["traceEvents"]
    msgs = [e for e in ev if e["ph"] == "X" and e["name"].startswith("msg ")]
    assert len(msgs) == 3 * out[0]["n_messages"]
    assert all(e["dur"] >= 0 and e["args"]["bytes"] > 0 for e in msgs)
    updates = [e for e in ev if e["name"].startswith("update ")]
    # one span per grouped update, naming its parameters: together, every parameter once per iteration
    assert sorted(n for e in updates for n in e["args"]["tensors"]) == sorted(out[0]["param_names"] * 3)
    assert len(updates) < 3 * out[0]["n_params"]
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
        # the shared arguments are the engine contract's (autobyte.testing.engine_contract.BAD_INPUT)
        ({"partition_bytes": -5}, ValueError, "partition_bytes=-5"),
        ({"partition_bytes": math.nan}, TypeError, "partition_bytes=nan"),
        ({"partition_bytes": 2**50}, ValueError, "at most"),
        ({"credit_bytes": 0}, ValueError, "credit_bytes must be a positive integer"),
        ({"verbose": "yes"}, TypeError, "verbose must be True or False"),
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
    ec.check_matches_unscheduled(ec.TorchHarness(backend="nccl"), tmp_path)
