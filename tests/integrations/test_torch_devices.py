"""schedule() refuses parameters on a device its process group cannot serve (clear error, not a crash in a collective)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

from autobyte.integrations.torch import device_problem, schedule  # noqa: E402


@pytest.mark.parametrize("backend, devices, match", [
    ("nccl", {"cpu"}, r"backend is nccl, which averages CUDA tensors only, but the model's parameters sit on \['cpu'\]; move the model"),
    ("NCCL", {"cuda", "cpu"}, r"sit on \['cpu', 'cuda'\]"),
    ("gloo", {"meta"}, r"backend is gloo, which averages CPU \(and CUDA\) tensors, but the model's parameters sit on \['meta'\]"),
])
def test_device_problem_names_backend_devices_and_fix(backend, devices, match):
    msg = device_problem(backend, devices)
    assert msg is not None
    import re

    assert re.search(match, msg), msg


@pytest.mark.parametrize("backend, devices", [("nccl", {"cuda"}), ("gloo", {"cpu"}), ("gloo", {"cuda"}), ("gloo", {"cpu", "cuda"}), ("mpi", {"cpu"})])
def test_device_problem_accepts_what_the_backend_serves(backend, devices):
    assert device_problem(backend, devices) is None


def test_schedule_refuses_a_model_its_gloo_group_cannot_serve(tmp_path):
    # a real one-process gloo group; a model on the meta device (no storage) stands for a device gloo cannot serve
    if dist.is_initialized():
        pytest.skip("a process group is already initialised in this test process")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rdv'}", rank=0, world_size=1)
    try:
        model = torch.nn.Linear(3, 2, device="meta")
        with pytest.raises(ValueError, match=r"backend is gloo, .* sit on \['meta'\]"):
            schedule(model, torch.optim.SGD(model.parameters(), lr=0.1))
        ok = torch.nn.Linear(3, 2)
        schedule(ok, torch.optim.SGD(ok.parameters(), lr=0.1)).close()
    finally:
        dist.destroy_process_group()
