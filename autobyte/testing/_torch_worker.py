"""One rank of a PyTorch engine job of the engine contract (and of the torch engine's own tests).

usage: python -m autobyte.testing._torch_worker OUT_DIR JOB_JSON

``JOB_JSON`` is an :class:`autobyte.testing.engine_contract.Job` as a dict,
plus ``scenario`` (``"job"``, default; ``"trace"``; ``"mismatch"``),
``optimizer`` (``"sgd"``, ``"sgd_nesterov"``, ``"adam"``, ``"adamw"``), ``overlap`` and
``backend`` (``"gloo"``; ``"nccl"`` uses one GPU per rank) and ``device``
(``"cuda"`` with gloo: CUDA tensors, the ranks may share one GPU; on CUDA the
deterministic kernels are used unless ``deterministic`` is false). Writes
``OUT_DIR/rank{r}.json`` (what the engine did) and ``OUT_DIR/rank{r}.npz``
(the parameters after each configuration's run, no pickle).
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.optim.optimizer import register_optimizer_step_post_hook

from autobyte.core import KiB, MiB
from autobyte.integrations.torch import PeerLostError, schedule
from autobyte.testing import SwitchOnce, exit_rank


class SmallCNN(torch.nn.Module):
    """Conv, batch-norm, linear layers and a tiny scalar bias parameter."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.bn1 = torch.nn.BatchNorm2d(16)
        self.conv2 = torch.nn.Conv2d(16, 32, 3, padding=1)
        self.bn2 = torch.nn.BatchNorm2d(32)
        self.fc1 = torch.nn.Linear(32 * 4 * 4, 64)
        self.fc2 = torch.nn.Linear(64, 10)
        self.tiny = torch.nn.Parameter(torch.zeros(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.nn.functional.max_pool2d(torch.relu(self.bn1(self.conv1(x))), 2)
        x = torch.nn.functional.max_pool2d(torch.relu(self.bn2(self.conv2(x))), 2)
        x = torch.relu(self.fc1(x.flatten(1)))
        return self.fc2(x) + self.tiny


DEVICE = torch.device("cpu")
#: what ``reconfigure_every`` cycles through (split, fused, one message, credit 16X)
CHOICES = [(4 * KiB, 4 * KiB), (64 * KiB, 128 * KiB), (64 * MiB, 64 * MiB), (16 * KiB, 256 * KiB)]


def make(opt_name: str) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    m = SmallCNN().to(DEVICE)
    o: torch.optim.Optimizer
    if opt_name == "sgd":
        o = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    elif opt_name == "sgd_nesterov":
        o = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-4)
    elif opt_name == "adamw":
        o = torch.optim.AdamW(m.parameters(), lr=1e-3, weight_decay=0.01)
    else:
        o = torch.optim.Adam(m.parameters(), lr=1e-3)
    return m, o


def batches(rank: int, n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(1000 + rank)
    return [(torch.randn(8, 3, 16, 16, generator=g).to(DEVICE), torch.randint(0, 10, (8,), generator=g).to(DEVICE))
            for _ in range(n)]


def add_skew(m: SmallCNN, rank: int) -> None:
    """Rank 1 sleeps up to 20 ms at random in 30% of its forward and backward hooks."""
    if rank != 1:
        return
    rng = random.Random(rank * 7 + 1)

    def slow(*_a: Any) -> None:
        if rng.random() < 0.3:
            time.sleep(rng.uniform(0, 0.02))

    for mod in (m.conv1, m.bn1, m.conv2, m.bn2, m.fc1, m.fc2):
        mod.register_forward_pre_hook(lambda mod, a: slow())
        mod.register_full_backward_hook(lambda mod, gi, go: slow())


def step(m: torch.nn.Module, o: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> None:
    o.zero_grad()
    torch.nn.functional.cross_entropy(m(x), y).backward()
    o.step()


def params(m: torch.nn.Module) -> list[np.ndarray]:
    return [p.detach().cpu().numpy().copy() for p in m.parameters()]


def train_unscheduled(job: dict[str, Any], data: list) -> list[np.ndarray]:
    m, o = make(job.get("optimizer", "sgd"))
    ddp = torch.nn.parallel.DistributedDataParallel(m, device_ids=[DEVICE.index] if DEVICE.type == "cuda" else None)
    for x, y in data:
        step(ddp, o, x, y)
    return params(m)


def train_scheduled(job: dict[str, Any], data: list, rank: int, partition: int, credit: int, every: int) -> dict[str, Any]:
    m, o = make(job.get("optimizer", "sgd"))
    if job.get("skew"):
        add_skew(m, rank)  # type: ignore[arg-type]
    switch = job.get("switch")
    h = schedule(m, o, partition_bytes=partition, credit_bytes=credit, overlap=job.get("overlap", True),
                 timeout_s=job.get("timeout_s", 60), tuner=SwitchOnce(*switch) if switch else None,
                 window_iters=job.get("window_iters", 5), warmup_iters=job.get("warmup_iters", 2), verbose=False)
    die_at = job.get("die_at")
    t_lost = None
    step_calls = [0]  # Optimizer.step() calls that ran: overlap mode, the engine's updates; synchronous, the user's
    counter = register_optimizer_step_post_hook(lambda *_a: step_calls.__setitem__(0, step_calls[0] + 1))
    try:
        for i, (x, y) in enumerate(data):
            if die_at is not None and i == die_at:
                if rank == 1:
                    os._exit(17)  # dies without any goodbye, like a crash
                t_lost = time.monotonic()
            if every and i and i % every == 0:
                h.reconfigure(*CHOICES[(i // every) % len(CHOICES)])
            step(m, o, x, y)
        h.synchronize()
    except PeerLostError as exc:
        waited = time.monotonic() - (t_lost if t_lost is not None else time.monotonic())
        return {"error": type(exc).__name__, "message": str(exc), "waited": waited}
    finally:
        counter.remove()
    out = {
        "params": params(m),
        "config": h.config.to_dict(),
        "reconfigurations": [r.to_dict() for r in h.coordinator.history] if h.coordinator is not None else [],
        "n_messages": len(h.scheduler.messages),
        "n_tensors": len(h.tensors),
        "max_message_bytes": max(msg.nbytes for msg in h.scheduler.messages),
        "message_bytes": sum(msg.nbytes for msg in h.scheduler.messages),
        "tensor_bytes": sum(t.nbytes for t in h.tensors),
        "iterations": len(data),
        "n_params": len(h.params),
        "update_steps": h.update_steps,
        "step_calls": step_calls[0],
    }
    h.close()
    return out


def run_job(job: dict[str, Any], rank: int) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    data = batches(rank, job.get("steps", 20))
    arrays: dict[str, np.ndarray] = {}
    runs: list[dict[str, Any]] = []
    if job.get("unscheduled"):
        for i, a in enumerate(train_unscheduled(job, data)):
            arrays[f"c0_p{i}"] = a
        return {"rank": rank, "runs": [{}]}, arrays
    for k, (p, c, every) in enumerate(job["configs"]):
        res = train_scheduled(job, data, rank, p, c, every)
        if "error" in res:
            return {"rank": rank, **res}, arrays
        for i, a in enumerate(res.pop("params")):
            arrays[f"c{k}_p{i}"] = a
        runs.append(res)
    return {"rank": rank, "runs": runs}, arrays


def main() -> None:
    out = sys.argv[1]
    job = json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}
    global DEVICE
    backend = job.get("backend", "gloo")
    if backend == "nccl":
        DEVICE = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(DEVICE)
    elif job.get("device") == "cuda":  # gloo with CUDA tensors: the ranks may share one GPU
        DEVICE = torch.device("cuda", int(os.environ["LOCAL_RANK"]) % torch.cuda.device_count())
        torch.cuda.set_device(DEVICE)
    if DEVICE.type == "cuda" and job.get("deterministic", True):
        # cuDNN's and cuBLAS's default kernels may sum in a different order on every call, so two runs of
        # DDP itself differ in the last bits, and Adam (an update of about lr * sign(g) where g is near 0)
        # turns such bits into differences of lr: the comparison with DDP needs the deterministic kernels.
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.backends.cudnn.benchmark = False
    dist.init_process_group(backend)
    rank = dist.get_rank()
    scenario = job.get("scenario", "job")
    info: dict[str, Any] = {"rank": rank}
    arrays: dict[str, np.ndarray] = {}

    if scenario == "job":
        info, arrays = run_job(job, rank)
    elif scenario == "trace":
        m, o = make("sgd")
        h = schedule(m, o, partition_bytes=16 * KiB, credit_bytes=32 * KiB)
        h.start_trace()
        for x, y in batches(rank, 3):
            step(m, o, x, y)
        h.synchronize()
        h.save_trace(os.path.join(out, f"trace{rank}.json"))
        info.update(n_messages=len(h.scheduler.messages), n_params=len(h.params), param_names=[t.name for t in h.tensors])
        h.close()
    elif scenario == "mismatch":
        m, o = make("sgd")
        h = schedule(m, o, partition_bytes=8 * KiB, credit_bytes=16 * KiB)
        try:
            h.reconfigure(8 * KiB * (rank + 1), 64 * KiB)
        except ValueError as exc:
            info.update(raised=True, message=str(exc))
        h.close()

    np.savez(os.path.join(out, f"rank{rank}.npz"), **arrays)  # type: ignore[arg-type]
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(info, f)
    if "error" in info:
        os._exit(3)  # the peer is gone: tearing the process group down would wait for it
    dist.destroy_process_group()
    exit_rank(0)  # everything is written: no interpreter teardown


if __name__ == "__main__":
    main()
