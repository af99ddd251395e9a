"""Memory over a long run: resident set size (RSS) stays flat.

Two measurements (not timed tests; figures go to docs/benchmarks.md):

* ``--mode engine``: the PyTorch engine with ``tuner=None`` (nobody ever reads
  a statistics window) on 2 real gloo ranks, a tiny model, ``--iters``
  training steps; each rank samples its RSS every ``--iters // 10`` steps.
* ``--mode collector``: :class:`autobyte.core.StatsCollector` driven directly
  with the timestamps of ``--iters`` iterations of ``--messages`` messages
  each (what the engine feeds it), never reading a window. ``--compare PATH``
  also runs the collector of another checkout (e.g. ``/work/main``) for a
  before/after.

usage:
    python benchmarks/bench_memory.py --mode engine --iters 100000
    python benchmarks/bench_memory.py --mode collector --iters 100000 --messages 40 --compare /work/main
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def collector_run(cls: type, iters: int, messages: int, n_tensors: int = 8) -> list[tuple[int, float]]:
    stats = cls(n_tensors)
    samples = [(0, rss_mb())]
    t = 0.0
    every = max(1, iters // 10)
    for it in range(1, iters + 1):
        stats.begin_iteration(t)
        stats.forward_done(t + 0.001)
        for k in range(n_tensors):
            stats.grad_ready(k, t + 0.002 + 0.0001 * k)
        for m in range(messages):
            s = t + 0.003 + 0.0001 * m
            stats.message_done(65536, s, s + 0.0002)
        t += 0.01
        stats.end_iteration(t, 8)
        if it % every == 0:
            samples.append((it, rss_mb()))
    return samples


def load_collector(root: str) -> type:
    path = os.path.join(root, "autobyte", "core", "metrics.py")
    spec = importlib.util.spec_from_file_location("_other_metrics", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["_other_metrics"] = mod
    spec.loader.exec_module(mod)
    return mod.StatsCollector  # type: ignore[no-any-return]


def engine_rank(iters: int, out: str) -> None:
    import torch
    import torch.distributed as dist

    from autobyte.integrations.torch import schedule

    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    handle = schedule(model, opt, partition_bytes=512, credit_bytes=1024, tuner=None)
    x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))
    every = max(1, iters // 10)
    samples = []
    t0 = time.perf_counter()
    for it in range(iters + 1):
        if it % every == 0:
            handle.synchronize()
            samples.append((it, rss_mb()))
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    handle.synchronize()
    wall = time.perf_counter() - t0
    rank = dist.get_rank()
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump({"samples": samples, "wall_s": wall, "messages_per_iter": len(handle.scheduler.messages)}, f)
    handle.close()
    dist.destroy_process_group()


def report(name: str, samples: list[tuple[int, float]]) -> None:
    first = next(mb for it, mb in samples if it >= samples[-1][0] // 10)  # after warm-up (first tenth)
    last = samples[-1][1]
    print(f"{name}: RSS {samples[0][1]:.1f} MB at start, {first:.1f} MB at iteration {samples[1][0]}, "
          f"{last:.1f} MB at iteration {samples[-1][0]} (growth after warm-up {last - first:+.2f} MB)")
    print("   samples (iteration, MB): " + ", ".join(f"({it}, {mb:.1f})" for it, mb in samples))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=["engine", "collector"], default="engine")
    ap.add_argument("--iters", type=int, default=100_000)
    ap.add_argument("--messages", type=int, default=40, help="messages per iteration (collector mode)")
    ap.add_argument("--compare", default=None, help="another checkout whose StatsCollector to run too (collector mode)")
    ap.add_argument("--rank-out", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.iters <= 0:
        ap.error(f"--iters must be a positive integer, but got {a.iters}")
    if a.rank_out is not None:
        engine_rank(a.iters, a.rank_out)
        return
    if a.mode == "collector":
        from autobyte.core.metrics import StatsCollector

        report("this tree's StatsCollector", collector_run(StatsCollector, a.iters, a.messages))
        if a.compare:
            report(f"{a.compare}'s StatsCollector", collector_run(load_collector(a.compare), a.iters, a.messages))
        return
    import tempfile

    from autobyte.testing import run_ranks

    with tempfile.TemporaryDirectory() as out:
        res = run_ranks([os.path.abspath(__file__), "--iters", str(a.iters), "--rank-out", out], 2, timeout_s=3600)
        for r in res:
            if r.returncode != 0:
                sys.exit(f"rank {r.rank} failed:\n{r.stderr[-3000:]}")
        for rank in range(2):
            d = json.load(open(os.path.join(out, f"rank{rank}.json")))
            print(f"rank {rank}: {a.iters} iterations in {d['wall_s']:.1f} s, {d['messages_per_iter']} messages per iteration")
            report(f"rank {rank} (engine, tuner=None)", [tuple(s) for s in d["samples"]])


if __name__ == "__main__":
    main()
