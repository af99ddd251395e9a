"""Simulator speed: one ResNet50 iteration at 1 MB partition, and the rate of ``autobyte dataset generate``.

    python benchmarks/bench_sim.py [--contexts 100] [--skip-dataset]

Budget (issue 3): one ResNet50 iteration at 1 MB partition <= 2 ms. The
dataset line extrapolates to the shipped weights' training data (11 seeds x
1,100 windows of 20 candidates, docs/meta.md). Times are both wall clock and
process CPU time (the machine is shared, so CPU time is the more stable
figure); the ratio column is measured / budget.
"""

from __future__ import annotations

import argparse
import os
import time

from autobyte.core import Config, MiB
from autobyte.sim import Cluster, get_model, simulate


def bench_iteration(arch: str, n_workers: int, credit_multiple: int, reps: int = 30, n_iters: int = 10) -> tuple[float, float]:
    m = get_model("resnet50")
    c = Cluster.from_gbps(n_workers, 10, arch)
    cfg = Config.from_multiple(MiB, credit_multiple)
    simulate(m, c, cfg, n_iters=n_iters)  # plan cached, as in a grid or dataset run
    w0, c0 = time.perf_counter(), time.process_time()
    for i in range(reps):
        simulate(m, c, cfg, n_iters=n_iters, seed=i, warmup_iters=0)
    per = reps * n_iters
    return (time.perf_counter() - w0) / per, (time.process_time() - c0) / per


def bench_dataset(contexts: int) -> tuple[float, float, int]:
    """Wall and CPU seconds of ``autobyte dataset generate --contexts N`` (default candidates), and its rows."""
    from autobyte.meta._data import generate

    w0, c0 = time.perf_counter(), time.process_time()
    data = generate(contexts, n_candidates=20, seed=123)
    return time.perf_counter() - w0, time.process_time() - c0, len(data.speed)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--contexts", type=int, default=100, help="windows drawn for the dataset line (default 100)")
    ap.add_argument("--skip-dataset", action="store_true")
    args = ap.parse_args()
    print("one ResNet50 iteration, 1 MB partition, 10 Gbit/s (budget 2 ms)")
    print(f"{'case':<34} {'wall ms':>8} {'cpu ms':>8} {'cpu/budget':>10}")
    for arch, n, k in (("allreduce", 8, 4), ("allreduce", 16, 1), ("ps", 8, 4), ("ps", 16, 16)):
        w, c = bench_iteration(arch, n, k)
        print(f"{arch + f', {n} workers, credit {k}X':<34} {w * 1e3:>8.3f} {c * 1e3:>8.3f} {c * 1e3 / 2:>10.2f}")
    if args.skip_dataset:
        return
    print(f"\ndataset: autobyte dataset generate --contexts {args.contexts} (20 candidates each)")
    wall, cpu, rows = bench_dataset(args.contexts)
    shipped = 11 * 1100  # windows the shipped weights were trained on (docs/meta.md), one seed per process
    print(f"wall {wall:.1f} s, CPU {cpu:.1f} s -> {rows / cpu:.0f} rows/s of CPU; the shipped weights' {shipped:,} windows: "
          f"{cpu * shipped / args.contexts / 60:.1f} CPU-min; load average now {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
