"""Real compute, parameter server: the scheduled engine at its best config vs plain dist_sync on one shaped link.

    sudo PYTHONPATH=$PWD python benchmarks/bench_ps_best_static.py OUT [RATE_MBIT] [ROUNDS]

A grid of configs is measured once at RATE_MBIT (default 300) to pick the
best; then plain ``dist_sync`` and the engine at that config run alternately,
ROUNDS times (default 3), 30 iterations each; ``OUT/best_static.json`` holds
every run's throughput, and the median ratio.
"""

import json
import os
import statistics
import sys

from autobyte.bench._real import BenchPlan, _read_sweep, _run, _sweep_spec
from autobyte.core import KiB, MiB, Config

out = sys.argv[1]
rate = float(sys.argv[2]) if len(sys.argv) > 2 else 300.0
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
plan = BenchPlan(arch="ps", methods=["dist_sync"])
trace = f"const:{rate:g}"
grid = [Config.from_multiple(p, m) for p in (64 * KiB, 256 * KiB, 1 * MiB, 4 * MiB) for m in (1, 2, 4)]
d = os.path.join(out, "grid")
_run(_sweep_spec(grid, 6, 2), trace, d, plan, print)
sweep = _read_sweep(d)
best = max(sweep, key=sweep.__getitem__)
print("grid:", {str(c): round(v, 1) for c, v in sweep.items()}, "best", best)


def tput(rows):
    rows = rows[3:]  # warm-up
    return plan.batch_size * 2 * len(rows) / sum(r["seconds"] for r in rows)


res = {"dist_sync": [], "best": []}
for i in range(rounds):
    res["dist_sync"].append(tput(_run({"method": "dist_sync", "iters": 30}, trace, os.path.join(out, f"dist_sync_{i}"), plan, print)))
    res["best"].append(tput(_run({"method": "static", "iters": 30, "config": [best.partition_bytes, best.credit_bytes]}, trace,
                                 os.path.join(out, f"best_{i}"), plan, print)))
ratios = [b / a for a, b in zip(res["dist_sync"], res["best"])]
summary = {"rate_mbit": rate, "grid": [[c.partition_bytes, c.credit_bytes, v] for c, v in sweep.items()],
           "best": [best.partition_bytes, best.credit_bytes], "samples_per_s": res, "ratios": ratios,
           "median_ratio": statistics.median(ratios), "loadavg": open("/proc/loadavg").read().split()[:3]}
with open(os.path.join(out, "best_static.json"), "w") as f:
    json.dump(summary, f, indent=1)
print(json.dumps(summary))
