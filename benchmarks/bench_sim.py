"""Simulator speed: one ResNet50 iteration at 1 MB partition, and dataset generation rate.

    python benchmarks/bench_sim.py [--rows 7200] [--jobs 2] [--skip-dataset]

Budgets (issue 3): one ResNet50 iteration at 1 MB partition <= 2 ms; a
360,000-row dataset <= 20 minutes on this 2-core machine. Times are both wall
clock and process CPU time (the machine is shared, so CPU time is the more
stable figure); the ratio column is measured / budget.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import tempfile
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


def bench_dataset(rows: int, jobs: int) -> tuple[float, float]:
    from autobyte.sim.dataset import generate

    out = tempfile.mkdtemp(prefix="autobyte-bench-ds-")

    def cpu() -> float:  # this process and its (reaped) pool workers
        ch = resource.getrusage(resource.RUSAGE_CHILDREN)
        return time.process_time() + ch.ru_utime + ch.ru_stime

    try:
        w0, c0 = time.perf_counter(), cpu()
        generate(os.path.join(out, "d"), rows, seed=123, n_jobs=jobs, progress=False)
        return time.perf_counter() - w0, cpu() - c0
    finally:
        shutil.rmtree(out, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=7200)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--skip-dataset", action="store_true")
    args = ap.parse_args()
    print("one ResNet50 iteration, 1 MB partition, 10 Gbit/s (budget 2 ms)")
    print(f"{'case':<34} {'wall ms':>8} {'cpu ms':>8} {'cpu/budget':>10}")
    for arch, n, k in (("allreduce", 8, 4), ("allreduce", 16, 1), ("ps", 8, 4), ("ps", 16, 16)):
        w, c = bench_iteration(arch, n, k)
        print(f"{arch + f', {n} workers, credit {k}X':<34} {w * 1e3:>8.3f} {c * 1e3:>8.3f} {c * 1e3 / 2:>10.2f}")
    if args.skip_dataset:
        return
    print(f"\ndataset: {args.rows} rows with {args.jobs} process(es) (budget: 360,000 rows in 20 min)")
    wall, cpu = bench_dataset(args.rows, args.jobs)
    est = wall * 360_000 / args.rows
    est_cpu = cpu * 360_000 / args.rows / 2  # two free cores
    print(f"wall {wall:.1f} s -> {args.rows / wall:.0f} rows/s; 360,000 rows extrapolated: {est / 60:.1f} min "
          f"(ratio to budget {est / 1200:.2f})")
    print(f"CPU {cpu:.1f} s -> 360,000 rows on 2 free cores: {est_cpu / 60:.1f} min (ratio to budget {est_cpu / 1200:.2f}); "
          f"load average now {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
