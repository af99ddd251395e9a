"""Emulated compute, parameter server: ResNet50 at compute_scale 10 on the Fig. 6 trace (1000/300 Mbit/s every 20 iterations).

    sudo PYTHONPATH=$PWD python benchmarks/bench_ps_emu.py OUT [ITERS [METHODS [GRID]]]

``autobyte bench --arch ps --model emu:resnet50 --low-mbit 300 --high-mbit 1000 --every 20 --iters 80`` with a
9-config grid (1, 4, 16 MiB x credit 1X, 4X, 16X), batch 64 (the profile's) and a 24-iteration BO search in
4-iteration windows (the CLI has no option for the grid, the batch or BO's window). ITERS changes the trace's
length (40: the runs of docs/benchmarks.md 9.2 before 2026-11-24, with the 6-config grid without 16X); METHODS
(comma-separated, default all) runs a subset side by side, e.g. ``dist_sync,oracle,autobyte``. GRID replaces
the oracle's grid: partitions in MiB and credit multiples, ``PARTITIONS:MULTIPLES``, e.g. ``0.5,1,2,4:8,16,32``.
"""
import sys
from autobyte.bench._real import PS_METHODS, BenchPlan, run_bench
from autobyte.core import MiB, Config


def grid_arg(text: str) -> list[Config]:
    """``"0.5,1,2:4,16"`` -> the configs of those partitions (MiB) x credit multiples."""
    try:
        parts, mults = text.split(":")
        sizes = [int(float(p) * MiB) for p in parts.split(",")]
        multiples = [float(m) for m in mults.split(",")]
    except ValueError:
        raise SystemExit(f"GRID must be PARTITIONS_MIB:MULTIPLES, e.g. 0.5,1,2:8,16, but got {text!r}") from None
    if not sizes or not multiples or min(sizes) <= 0 or min(multiples) <= 0:
        raise SystemExit(f"GRID needs positive partitions and multiples, but got {text!r}")
    return [Config.from_multiple(p, m) for p in sizes for m in multiples]


iters = int(sys.argv[2]) if len(sys.argv) > 2 else 80
methods = sys.argv[3].split(",") if len(sys.argv) > 3 else list(PS_METHODS)
plan = BenchPlan(arch="ps", methods=methods, low_mbit=300, high_mbit=1000, every=20, iters=iters, bo_iters=24, window_iters=10, bo_window_iters=4,
                 grid_iters=3, grid_warmup=1, batch_size=64, model_spec={"model": "emu:resnet50", "compute_scale": 10},
                 grid=grid_arg(sys.argv[4]) if len(sys.argv) > 4 else [Config.from_multiple(p, m) for p in (1 * MiB, 4 * MiB, 16 * MiB) for m in (1, 4, 16)])
run_bench(plan, sys.argv[1])
