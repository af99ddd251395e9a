"""One rank of the PyTorch engine's distributed tests (run by tests/integrations/test_torch_engine.py).

usage: torch_worker.py SCENARIO OUT_DIR [options as JSON]
Writes OUT_DIR/rank{r}.npz (no pickle) and prints a summary line.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time

import numpy as np
import torch
import torch.distributed as dist

from autobyte.core import KiB, MiB
from autobyte.integrations.torch import PeerLostError, schedule


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


def make(opt_name: str) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    m = SmallCNN().to(DEVICE)
    if opt_name == "sgd":
        o = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    elif opt_name == "adamw":
        o = torch.optim.AdamW(m.parameters(), lr=1e-3, weight_decay=0.01)
    else:
        o = torch.optim.Adam(m.parameters(), lr=1e-3)
    return m, o


def batches(rank: int, n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(1000 + rank)
    return [(torch.randn(8, 3, 16, 16, generator=g).to(DEVICE), torch.randint(0, 10, (8,), generator=g).to(DEVICE)) for _ in range(n)]


def train_ddp(opt_name: str, data) -> list[np.ndarray]:
    m, o = make(opt_name)
    ddp = torch.nn.parallel.DistributedDataParallel(m, device_ids=[DEVICE.index] if DEVICE.type == "cuda" else None)
    for x, y in data:
        o.zero_grad()
        torch.nn.functional.cross_entropy(ddp(x), y).backward()
        o.step()
    return [p.detach().cpu().numpy().copy() for p in m.parameters()]


def train_scheduled(opt_name: str, data, partition: int, credit: int, reconf_every: int = 0, overlap: bool = True) -> tuple[list[np.ndarray], int]:
    m, o = make(opt_name)
    h = schedule(m, o, partition_bytes=partition, credit_bytes=credit, overlap=overlap, timeout_s=60)
    choices = [(4 * KiB, 4 * KiB), (64 * KiB, 128 * KiB), (64 * MiB, 64 * MiB), (16 * KiB, 256 * KiB)]
    for step, (x, y) in enumerate(data):
        if reconf_every and step and step % reconf_every == 0:
            p, c = choices[(step // reconf_every) % len(choices)]
            h.reconfigure(p, c)
        o.zero_grad()
        torch.nn.functional.cross_entropy(m(x), y).backward()
        o.step()
    h.synchronize()
    n_msgs = len(h.scheduler.messages)
    h.close()
    return [p.detach().cpu().numpy().copy() for p in m.parameters()], n_msgs


def main() -> None:
    scenario, out = sys.argv[1], sys.argv[2]
    opts = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
    global DEVICE
    backend = opts.get("backend", "gloo")
    if backend == "nccl":
        DEVICE = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(DEVICE)
    dist.init_process_group(backend)
    rank = dist.get_rank()
    result: dict[str, np.ndarray] = {}

    if scenario == "equivalence":
        data = batches(rank, opts.get("steps", 30))
        ref = train_ddp(opts["optimizer"], data)
        worst = 0.0
        for i, (p, c, every) in enumerate(opts["configs"]):
            got, n_msgs = train_scheduled(opts["optimizer"], data, p, c, every, opts.get("overlap", True))
            ok = all(np.allclose(a, b, rtol=1e-5, atol=1e-7) for a, b in zip(ref, got))
            err = max(float(np.max(np.abs(a - b))) for a, b in zip(ref, got))
            worst = max(worst, err)
            result[f"ok{i}"] = np.array(ok)
            result[f"err{i}"] = np.array(err)
            result[f"msgs{i}"] = np.array(n_msgs)
        print(f"rank {rank} worst abs diff vs DDP {worst:.3g}")

    elif scenario == "skew":
        m, o = make("sgd")
        rng = random.Random(rank * 7 + 1)
        mods = [m.conv1, m.bn1, m.conv2, m.bn2, m.fc1, m.fc2]
        if rank == 1:
            def slow(*_a):
                if rng.random() < 0.3:
                    time.sleep(rng.uniform(0, 0.02))
            for mod in mods:
                mod.register_forward_pre_hook(lambda mod, a: slow())
                mod.register_full_backward_hook(lambda mod, gi, go: slow())
        h = schedule(m, o, partition_bytes=8 * KiB, credit_bytes=16 * KiB, timeout_s=60)
        choices = [(4 * KiB, 4 * KiB), (32 * KiB, 64 * KiB), (1 * MiB, 1 * MiB), (8 * KiB, 128 * KiB)]
        data = batches(rank, 20)
        for step in range(opts.get("steps", 300)):
            if step and step % 7 == 0:
                p, c = choices[(step // 7) % len(choices)]
                h.reconfigure(p, c)
            x, y = data[step % len(data)]
            o.zero_grad()
            torch.nn.functional.cross_entropy(m(x), y).backward()
            o.step()
        h.synchronize()
        for i, p in enumerate(m.parameters()):
            result[f"p{i}"] = p.detach().numpy()
        print(f"rank {rank} skew done")

    elif scenario == "failure":
        m, o = make("sgd")
        h = schedule(m, o, partition_bytes=8 * KiB, credit_bytes=16 * KiB, timeout_s=opts.get("timeout_s", 10))
        data = batches(rank, 10)
        t_kill = None
        try:
            for step in range(1000):
                if rank == 1 and step == 5:
                    os._exit(17)  # dies without any goodbye, like a crash
                if step == 5:
                    t_kill = time.monotonic()
                x, y = data[step % len(data)]
                o.zero_grad()
                torch.nn.functional.cross_entropy(m(x), y).backward()
                o.step()
            h.synchronize()
        except PeerLostError as exc:
            print(f"PEERLOST after {time.monotonic() - (t_kill or time.monotonic()):.2f}s: {exc}")
            os._exit(3)
        print("no error raised")
        os._exit(0)

    elif scenario == "trace":
        m, o = make("sgd")
        h = schedule(m, o, partition_bytes=16 * KiB, credit_bytes=32 * KiB)
        h.start_trace()
        for x, y in batches(rank, 3):
            o.zero_grad()
            torch.nn.functional.cross_entropy(m(x), y).backward()
            o.step()
        h.synchronize()
        h.save_trace(os.path.join(out, f"trace{rank}.json"))
        result["n_messages"] = np.array(len(h.scheduler.messages))
        result["n_params"] = np.array(len(h.params))
        h.close()

    elif scenario == "mismatch":
        m, o = make("sgd")
        h = schedule(m, o, partition_bytes=8 * KiB, credit_bytes=16 * KiB)
        try:
            h.reconfigure(8 * KiB * (rank + 1), 64 * KiB)
        except ValueError as exc:
            print(f"MISMATCH: {exc}")
            result["raised"] = np.array(True)
        h.close()

    np.savez(os.path.join(out, f"rank{rank}.npz"), **result)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
