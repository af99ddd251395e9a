"""Emulated compute, parameter server: ResNet50 at compute_scale 10 on the Fig. 6 trace (1000/300 Mbit/s every 20 iterations).

    sudo PYTHONPATH=$PWD python benchmarks/bench_ps_emu.py OUT [ITERS [METHODS]]

``autobyte bench --arch ps --model emu:resnet50 --low-mbit 300 --high-mbit 1000 --every 20 --iters 80`` with a
9-config grid (1, 4, 16 MiB x credit 1X, 4X, 16X), batch 64 (the profile's) and a 24-iteration BO search in
4-iteration windows (the CLI has no option for the grid, the batch or BO's window). ITERS changes the trace's
length (40: the runs of docs/benchmarks.md 9.2 before 2026-11-24, with the 6-config grid without 16X); METHODS
(comma-separated, default all) runs a subset side by side, e.g. ``dist_sync,oracle,autobyte``.
"""
import sys
from autobyte.bench._real import PS_METHODS, BenchPlan, run_bench
from autobyte.core import MiB, Config
iters = int(sys.argv[2]) if len(sys.argv) > 2 else 80
methods = sys.argv[3].split(",") if len(sys.argv) > 3 else list(PS_METHODS)
plan = BenchPlan(arch="ps", methods=methods, low_mbit=300, high_mbit=1000, every=20, iters=iters, bo_iters=24, window_iters=10, bo_window_iters=4,
                 grid_iters=3, grid_warmup=1, batch_size=64, model_spec={"model": "emu:resnet50", "compute_scale": 10},
                 grid=[Config.from_multiple(p, m) for p in (1 * MiB, 4 * MiB, 16 * MiB) for m in (1, 4, 16)])
run_bench(plan, sys.argv[1])
