"""Grouped updates of the PyTorch engine on real ranks (2 CPU processes on gloo).

Every parameter completed by one message (or by messages found complete
together) is updated in one ``optimizer.step()`` through the optimizer's
multi-tensor path, not one step per parameter; the weights still match DDP
with the same optimizer.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from autobyte.core import KiB, MiB  # noqa: E402
from autobyte.testing import engine_contract as ec  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

ONE_MESSAGE = (1 * MiB, 1 * MiB, 0)  # the whole SmallCNN (~155 KB of gradients) in one fused message
SPLIT = (4 * KiB, 8 * KiB, 0)  # tensors split into 4 KiB chunks and small ones fused


def _run(tmp_path, optimizer: str, overlap: bool, configs):
    harness = ec.TorchHarness(optimizer=optimizer, overlap=overlap)
    ref = ec.unscheduled(harness, tmp_path)
    outs = harness.run(tmp_path / "scheduled", ec.Job(configs=configs))
    for o in outs:
        assert o.returncode == 0 and o.runs, o.output[-3000:]
        for cfg, params in zip(configs, o.params):
            assert ec._same_as(ref[o.rank].params[0], params), (
                f"{optimizer} overlap={overlap} {cfg} rank {o.rank}: differs from DDP by {ec._max_diff(ref[o.rank].params[0], params):.3g}")
    return outs


def test_one_optimizer_step_per_group_not_per_parameter(tmp_path):
    outs = _run(tmp_path, "sgd_nesterov", True, (ONE_MESSAGE, SPLIT))
    for o in outs:
        one, split = o.runs
        steps, n_params = one["iterations"], one["n_params"]
        assert n_params == 13 and one["n_messages"] == 1, one
        # one message per iteration: one step for all 13 parameters (it was 13 steps per iteration)
        assert one["update_steps"] == steps, one
        assert one["step_calls"] == one["update_steps"], one  # counted by torch's own step hook as well
        # split: a parameter completes at its last chunk; fused messages complete several at once
        assert split["step_calls"] == split["update_steps"], split
        assert steps <= split["update_steps"] <= steps * split["n_messages"], split
        assert split["update_steps"] < steps * n_params, split


@pytest.mark.parametrize("optimizer, overlap", [("adam", True), ("sgd_nesterov", False), ("adamw", False)],
                         ids=["adam-overlap", "sgd-nesterov-synchronous", "adamw-synchronous"])
def test_optimizers_match_ddp_with_grouped_updates(tmp_path, optimizer, overlap):
    # the contract covers SGD (momentum, weight decay) with overlap, test_torch_engine AdamW with overlap and Adam without
    outs = _run(tmp_path, optimizer, overlap, (ONE_MESSAGE, SPLIT))
    for o in outs:
        for run in o.runs:
            if overlap:
                assert run["iterations"] <= run["update_steps"] < run["iterations"] * run["n_params"], run
            else:  # the synchronous mode leaves the step to the user: one per iteration, the engine makes none
                assert run["update_steps"] == 0 and run["step_calls"] == run["iterations"], run


def test_cpu_parameters_take_no_cuda_path():
    # the CUDA stream and events exist only for CUDA parameters; a handle on CPU never touches torch.cuda
    from autobyte.integrations.torch import schedule

    m = torch.nn.Linear(4, 2)
    h = schedule(m, torch.optim.SGD(m.parameters(), lr=0.1))
    assert h._stream is None and h._nccl is False and h.update_steps == 0
    h.close()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU; none lent to this run")
@pytest.mark.parametrize("optimizer, overlap", [("sgd", True), ("adamw", True), ("adam", False)])
def test_cuda_tensors_over_gloo_match_ddp(tmp_path, optimizer, overlap):
    # the engine's stream and events: 2 ranks on one GPU, gloo with CUDA tensors, against DDP the same way
    harness = ec.TorchHarness(optimizer=optimizer, overlap=overlap, device="cuda")
    harness.equivalence_configs = ((4 * KiB, 8 * KiB, 0), (25 * MiB, 25 * MiB, 0), (8 * KiB, 32 * KiB, 3))
    ec.check_matches_unscheduled(harness, tmp_path)
