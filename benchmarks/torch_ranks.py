"""One rank of a side-by-side throughput run: plain DDP vs the scheduled engine.

Run as ``python benchmarks/torch_ranks.py JSON`` under ``torchrun`` or
:func:`autobyte.testing.run_ranks`. The JSON gives ``modes`` (a list of
``"ddp"`` or ``[partition_bytes, credit_bytes]``), ``rounds``, ``iters``,
``batch_size``, ``warmup`` and ``tuner`` (the engine's, default
``"static"``: priority order estimated at window checks; ``null``: none,
the gradients' ready order). Modes are interleaved round by round so slow
drifts of the machine hit all of them alike. Rank 0 prints one JSON line per
mode: ``{"mode": ..., "samples_per_s": [...per round...]}``.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from autobyte.integrations._imports import require_torch


def timed_steps(net: Any, opt: Any, finish: Any, n: int, data: Any, loss_fn: Any) -> float:
    """Seconds ``n`` training steps take on every rank (barriers before and after; ``finish`` completes the last
    step's communication: the engine's ``synchronize``, or nothing for DDP)."""
    import torch.distributed as dist

    dist.barrier()
    t0 = time.perf_counter()
    for i in range(n):
        x, y = data[i % len(data)]
        opt.zero_grad()
        loss_fn(net(x), y).backward()
        opt.step()
    finish()
    dist.barrier()
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> None:
    torch = require_torch()
    import torch.distributed as dist

    from autobyte.bench.models import make_cnn, synthetic_batches
    from autobyte.integrations.torch import schedule

    opts: dict[str, Any] = json.loads((argv or sys.argv[1:])[0])
    torch.set_num_threads(int(opts.get("threads", 1)))
    dist.init_process_group(opts.get("backend", "gloo"))
    rank, world = dist.get_rank(), dist.get_world_size()
    bs = int(opts.get("batch_size", 16))
    data = synthetic_batches(8, bs, rank)
    loss_fn = torch.nn.functional.cross_entropy

    runners = []
    for mode in opts["modes"]:
        model = make_cnn()
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        if mode == "ddp":
            net = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=25)
            finish = lambda: None  # noqa: E731
        else:
            net = model
            # tuner "static": window checks estimate the priority order, the config never moves
            h = schedule(model, opt, partition_bytes=int(mode[0]), credit_bytes=int(mode[1]), tuner=opts.get("tuner", "static"))
            finish = h.synchronize
        runners.append((mode, net, opt, finish))

    def run(net: Any, opt: Any, finish: Any, n: int) -> float:
        return timed_steps(net, opt, finish, n, data, loss_fn)

    for _, net, opt, finish in runners:
        run(net, opt, finish, int(opts.get("warmup", 3)))
    results: dict[int, list[float]] = {i: [] for i in range(len(runners))}
    iters = int(opts.get("iters", 20))
    for _ in range(int(opts.get("rounds", 3))):
        for i, (_, net, opt, finish) in enumerate(runners):
            results[i].append(iters * bs * world / run(net, opt, finish, iters))
    if rank == 0:
        for i, (mode, *_rest) in enumerate(runners):
            print(json.dumps({"mode": mode, "samples_per_s": results[i]}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
