"""Reliability of the PyTorch engine on real ranks (2 CPU processes on gloo).

Bounded waits (a stopped peer, a collective called on one rank only),
training semantics users rely on (gradient accumulation, zero-size and
sparse parameters, reconfigure before the first step).
"""

from __future__ import annotations

import json
import os

import pytest

torch = pytest.importorskip("torch")

from autobyte.testing import run_ranks  # noqa: E402
from autobyte.core import KiB  # noqa: E402
from autobyte.integrations.torch import schedule  # noqa: E402

pytestmark = pytest.mark.integration

WORKER = os.path.join(os.path.dirname(__file__), "scripts", "reliability_worker.py")
TIMEOUT_S = 5


def run(tmp_path, scenario: str, opts: dict | None = None, timeout_s: float = 120.0):
    res = run_ranks([WORKER, scenario, str(tmp_path), json.dumps(opts or {})], 2, timeout_s=timeout_s)
    out = []
    for r in range(2):
        f = tmp_path / f"rank{r}.json"
        out.append(json.loads(f.read_text()) if f.exists() else None)
    return res, out


@pytest.mark.parametrize(
    "bn, tuner",
    [(True, None), (False, "static"), (True, "autobyte")],
    ids=["batchnorm-no-tuner", "static-tuner", "batchnorm-autobyte"],
)
def test_stopped_peer_gives_peer_lost_error_within_timeout(tmp_path, bn, tuner):
    res, out = run(tmp_path, "stopped", {"bn": bn, "tuner": tuner, "timeout_s": TIMEOUT_S}, timeout_s=150)
    survivor, stopped = res
    assert survivor.returncode == 3, survivor.stdout[-2000:] + survivor.stderr[-3000:]
    assert stopped.returncode == -9  # killed by the survivor after the error: nothing left behind
    assert out[0]["error"] == "PeerLostError"
    assert out[0]["waited"] < TIMEOUT_S + 10, out[0]
    msg = out[0]["message"]
    assert "rank 1" in msg and "stopped by a signal" in msg and f"timeout_s={TIMEOUT_S}" in msg, msg


@pytest.mark.parametrize("bn, tuner", [(True, None), (False, "static")], ids=["batchnorm", "tuner"])
def test_reconfigure_on_one_rank_is_a_clear_error_on_every_rank(tmp_path, bn, tuner):
    res, out = run(tmp_path, "one_rank_reconfigure", {"bn": bn, "tuner": tuner, "timeout_s": TIMEOUT_S})
    for r in res:
        assert r.returncode == 0, f"rank {r.rank} rc {r.returncode}: " + r.stderr[-3000:]
    for rank in range(2):
        assert out[rank]["error"] == "CollectiveMismatchError", out[rank]
        msg = out[rank]["message"]
        assert "rank 0: reconfigure()" in msg and "call it on every rank" in msg, msg


def test_reconfigure_on_one_rank_without_other_collectives_times_out_clearly(tmp_path):
    # No buffers, no tuner: the other rank never reaches a control collective; both ranks stop within timeout_s.
    res, out = run(tmp_path, "one_rank_reconfigure", {"bn": False, "tuner": None, "timeout_s": TIMEOUT_S})
    for r in res:
        assert r.returncode == 0, f"rank {r.rank} rc {r.returncode}: " + r.stderr[-3000:]
    assert out[0]["error"] == "PeerLostError" and "the other ranks to call reconfigure()" in out[0]["message"], out[0]
    assert out[1]["error"] == "PeerLostError", out[1]


def test_training_semantics_match_ddp(tmp_path):
    res, out = run(tmp_path, "semantics")
    for r in res:
        assert r.returncode == 0, r.stderr[-3000:]
    for rank in range(2):
        o = out[rank]
        assert o["ddp_rounds"] == 4
        for overlap in (False, True):
            # Accumulation with no_sync: DDP's weights, one communication round per optimizer step.
            assert o[f"accum_equal_overlap{overlap}"], o
            assert o[f"accum_rounds_overlap{overlap}"] == o["ddp_rounds"], o
        assert o["zero_size_equal"], o
        assert o["class_while_scheduled"] == [True, "SGD", False], o  # a subclass of the user's class
        assert o["class_after_close"] == [True, []], o
        assert o["lr_scheduler_equal"], o
        assert "no_sync" in o["accum_without_no_sync"] and "overlap=False" in o["accum_without_no_sync"], o
        assert o["first_step_config"] == [4 * KiB, 8 * KiB, 0], o
        assert o["noop_pending"] is False and o["noop_history_unchanged"] is True, o
    assert out[0]["first_step_messages"] == out[1]["first_step_messages"]


# --------------------------------------------------------------- single process


def test_sparse_gradients_are_refused_naming_the_parameter():
    model = torch.nn.Sequential(torch.nn.Embedding(10, 4, sparse=True), torch.nn.Linear(4, 2))
    with pytest.raises(ValueError, match=r"parameter '0.weight' gets sparse gradients \(Embedding\(sparse=True\)\)"):
        schedule(model, torch.optim.SGD(model.parameters(), lr=0.1))


def test_zero_size_parameter_trains_at_world_size_one():
    model = torch.nn.Linear(3, 2)
    model.z = torch.nn.Parameter(torch.zeros(0))
    h = schedule(model, torch.optim.SGD(model.parameters(), lr=0.1))
    assert [t.name for t in h.tensors] == ["weight", "bias"]
    model(torch.randn(4, 3)).sum().backward()
    h.close()


def test_only_zero_size_parameters_is_refused():
    model = torch.nn.Module()
    model.z = torch.nn.Parameter(torch.zeros(0))
    with pytest.raises(ValueError, match="no trainable parameters with elements"):
        schedule(model, torch.optim.SGD(model.parameters(), lr=0.1))


def test_tiny_partition_is_refused_up_front():
    model = torch.nn.Linear(1024, 1024)
    with pytest.raises(ValueError, match=r"partition_bytes=1 would split 4198400 gradient bytes into 1049600 messages .* use partition_bytes >= 8\."):
        schedule(model, torch.optim.SGD(model.parameters(), lr=0.1), partition_bytes=1, credit_bytes=1)
    h = schedule(model, torch.optim.SGD(model.parameters(), lr=0.1), partition_bytes=4 * KiB, credit_bytes=4 * KiB)
    with pytest.raises(ValueError, match="partition_bytes=2 would split"):
        h.reconfigure(2, 2)
    h.close()


def test_reconfigure_before_first_step_and_noop_at_world_size_one():
    model = torch.nn.Linear(64, 64)
    h = schedule(model, torch.optim.SGD(model.parameters(), lr=0.1), partition_bytes=1 * KiB, credit_bytes=1 * KiB)
    assert h.reconfigure(8 * KiB, 16 * KiB).partition_bytes == 8 * KiB
    assert h.config.partition_bytes == 8 * KiB and h.scheduler.pending is None
    model(torch.randn(2, 64)).sum().backward()
    h.reconfigure(8 * KiB, 16 * KiB)
    assert h.scheduler.pending is None
    with pytest.raises(ValueError, match="at_iteration must be at least the next iteration 1, but got at_iteration=0"):
        h.reconfigure(4 * KiB, 4 * KiB, at_iteration=0)
    with pytest.raises(TypeError, match="at_iteration must be an integer or None, but got at_iteration=1.5"):
        h.reconfigure(4 * KiB, 4 * KiB, at_iteration=1.5)
    h.close()


def test_lightning_accumulation_matches_ddp_with_ddps_rounds(tmp_path):
    pytest.importorskip("lightning.pytorch")
    script = os.path.join(os.path.dirname(__file__), "scripts", "lightning_accumulate.py")
    res = run_ranks([script, str(tmp_path)], 2, timeout_s=300)
    for r in res:
        assert r.returncode == 0, f"rank {r.rank}:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    for rank in range(2):
        d = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert d["ddp_steps"] == 4 and d["ddp_rounds"] == 4, d
        for name, overlap in (("auto", True), ("sync", False)):
            got = d[name]
            assert got["overlap"] is overlap and got["steps"] == 4, got
            assert got["rounds"] == d["ddp_rounds"], got  # one communication round per optimizer step, as DDP
            assert got["max_abs_diff"] < 1e-6, got
            assert got["losses"] == pytest.approx(d["ddp_losses"], rel=1e-5, abs=1e-6)


def test_plain_pytorch_prints_one_line_per_reconfiguration_on_rank_0(tmp_path):
    res = run_ranks([WORKER, "verbose", str(tmp_path), "{}"], 2, timeout_s=120)
    for r in res:
        assert r.returncode == 0, r.stderr[-3000:]
    loud, quiet = res[0].stdout.split("PHASE quiet=True")
    lines = [x for x in loud.splitlines() if x.startswith("AutoByte reconfigured at iteration ")]
    assert lines and all(" -> " in x and "grid search" in x for x in lines), loud
    assert "AutoByte reconfigured" not in quiet  # on_decision given: the caller reports decisions
    assert "AutoByte reconfigured" not in res[1].stdout  # rank 0 only


def test_lightning_stopped_peer_is_bounded_by_the_strategy_timeout_plus_timeout_s(tmp_path):
    pytest.importorskip("lightning.pytorch")
    script = os.path.join(os.path.dirname(__file__), "scripts", "lightning_stopped.py")
    res = run_ranks([script, str(tmp_path), "5", str(TIMEOUT_S)], 2, timeout_s=150)
    survivor, stopped = res
    assert survivor.returncode == 3, survivor.stdout[-2000:] + survivor.stderr[-3000:]
    assert stopped.returncode == -9
    d = json.loads((tmp_path / "rank0.json").read_text())
    assert d["error"] == "PeerLostError" and "rank 1" in d["message"] and "stopped by a signal" in d["message"], d
    # Lightning's own per-batch broadcast waits for DDPStrategy(timeout=5 s), then autobyte's for timeout_s.
    assert d["waited"] < 5 + TIMEOUT_S + 10, d
