"""Plain PyTorch on 2 CPU processes, gradients averaged by AutoByte's scheduler, tuned by the meta-network.

Run it as is (it starts itself twice with torchrun)::

    python docs/examples/torch_ddp.py

or start the processes yourself (``--nproc_per_node=1`` trains in one process: statistics only)::

    torchrun --standalone --nproc_per_node=2 docs/examples/torch_ddp.py

Needs only ``pip install 'autobyte[torch]'``: the default tuner ``"autobyte"``
runs the meta-network in numpy. Rank 0 prints the decisions and the final check.
"""

from __future__ import annotations

import os
import subprocess
import sys

if "RANK" not in os.environ:  # not started by torchrun: start 2 processes with it
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", __file__, *sys.argv[1:]]
    sys.exit(subprocess.call(cmd, env=dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))))

import logging  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from autobyte.integrations.torch import schedule  # noqa: E402


def main() -> None:
    dist.init_process_group("gloo")  # torchrun sets RANK, WORLD_SIZE, MASTER_*
    rank, world = dist.get_rank(), dist.get_world_size()
    if rank == 0:
        logging.basicConfig(level=logging.INFO, format="%(message)s")  # the tuner's decisions, with their reasons
    torch.manual_seed(rank)  # different initial weights: schedule() broadcasts rank 0's
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(32, 64, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(64 * 8 * 8, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10),
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    t0 = time.perf_counter()
    handle = schedule(model, optimizer, tuner="autobyte")  # the defaults otherwise
    set_up = time.perf_counter() - t0
    g = torch.Generator().manual_seed(100 + rank)  # each process its own data
    t0 = time.perf_counter()
    for _ in range(60):
        x = torch.randn(16, 3, 32, 32, generator=g)
        y = (x[:, 0].mean((1, 2)) > 0).long() * 5 + (x[:, 1].mean((1, 2)) > 0).long()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    handle.synchronize()  # every update applied
    seconds = time.perf_counter() - t0
    mine = torch.tensor([float(sum(p.detach().double().abs().sum() for p in model.parameters()))], dtype=torch.float64)
    gathered = [torch.zeros_like(mine) for _ in range(world)]
    dist.all_gather(gathered, mine)
    if rank == 0:
        ctl = handle.controller
        moves = sum(1 for h in ctl.history if "new_config" in h)
        print(f"done: {world} processes, 60 steps in {seconds:.1f} s (schedule() with the tuner: {set_up:.2f} s), "
              f"{ctl.n_windows} windows, {moves} reconfigurations, ends at {handle.config}, "
              f"weights identical on every rank: {all(bool(g == gathered[0]) for g in gathered)}")
    handle.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
