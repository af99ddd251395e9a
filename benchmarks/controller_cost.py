"""What the tuning controller's checks cost per iteration: the engine without a tuner, with ``tuner="static"``
(checks every 5 iterations, no move) and with ``wire="auto"``, interleaved in 2 local CPU ranks (loopback).

    python benchmarks/controller_cost.py [--rounds 4] [--iters 40]

The CNN of ``bench_wire.py`` (3.4M parameters, SGD, batch 16), one thread per rank; prints the median and
the rounds' milliseconds per iteration of each (the first round is a warm-up, not counted).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any

MODES = ("none", "static", "wire-auto")


def rank_main(opts: dict[str, Any]) -> None:
    import torch
    import torch.distributed as dist

    from autobyte.bench.models import make_cnn, synthetic_batches
    from autobyte.integrations.torch import schedule

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    data = synthetic_batches(4, 16, dist.get_rank())
    runs = []
    for mode in MODES:
        model = make_cnn()
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        kw: dict[str, Any] = {"wire": "auto"} if mode == "wire-auto" else {"tuner": None if mode == "none" else "static"}
        runs.append((mode, model, opt, schedule(model, opt, verbose=False, **kw)))
    ms: dict[str, list[float]] = {m: [] for m in MODES}
    n = int(opts["iters"])
    for k in range(int(opts["rounds"])):
        for mode, model, opt, h in runs:
            dist.barrier()
            t0 = time.perf_counter()
            for i in range(n):
                x, y = data[i % len(data)]
                opt.zero_grad()
                torch.nn.functional.cross_entropy(model(x), y).backward()
                opt.step()
            h.synchronize()
            dist.barrier()
            if k > 0:
                ms[mode].append((time.perf_counter() - t0) * 1e3 / n)
    if dist.get_rank() == 0:
        print(json.dumps(ms), flush=True)
    for *_, h in runs:
        h.close()
    dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--rounds", type=int, default=4, help="rounds, the first a warm-up (4)")
    ap.add_argument("--iters", type=int, default=40, help="iterations per mode and round (40)")
    ap.add_argument("--rank", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.rank:
        rank_main(json.loads(args.rank))
        return 0
    if args.rounds < 2 or args.iters < 1:
        ap.error(f"--rounds must be at least 2 and --iters positive, but got --rounds {args.rounds} --iters {args.iters}.")
    from autobyte.testing import run_ranks

    res = run_ranks([os.path.abspath(__file__), "--rank", json.dumps({"rounds": args.rounds, "iters": args.iters})], 2,
                    timeout_s=1800)
    if any(r.returncode != 0 for r in res):
        print(res[0].stderr[-3000:], file=sys.stderr)
        return 1
    ms = json.loads(next(line for line in res[0].stdout.splitlines() if line.startswith("{")))
    for mode, v in ms.items():
        print(f"{mode:>10}: {statistics.median(v):.1f} ms per iteration (rounds: {', '.join(f'{x:.1f}' for x in v)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
