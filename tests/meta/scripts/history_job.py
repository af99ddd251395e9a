"""One rank of a 2-rank gloo job with AutoByte started from a job history (tests/meta/test_history_ranks.py).

argv: out folder, history folder. Rank 0's tuner picks the start; every rank must run it from the
first iteration, and rank 0 keeps the job's windows in the history folder.
"""

from __future__ import annotations

import json
import os
import sys

import torch
import torch.distributed as dist

from autobyte.core import KiB
from autobyte.integrations.torch import schedule
from autobyte.meta import AutoByteTuner


def main() -> None:
    out, history = sys.argv[1], sys.argv[2]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    # rank 1 has no history: the start it runs must be rank 0's
    tuner = AutoByteTuner(history_dir=history) if rank == 0 else AutoByteTuner()
    job = schedule(model, opt, partition_bytes=16 * KiB, credit_bytes=64 * KiB, tuner=tuner, window_iters=4,
                   warmup_iters=1, verbose=False)
    configs = []
    g = torch.Generator().manual_seed(rank)
    for _ in range(12):
        x, y = torch.randn(8, 64, generator=g), torch.randint(0, 10, (8,), generator=g)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        configs.append(job.config.to_dict())
    job.close()
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump({"configs": configs, "job": tuner.job, "started_from": tuner.started_from}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
