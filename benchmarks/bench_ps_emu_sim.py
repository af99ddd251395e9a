"""The simulator's prediction for the emulated parameter-server bench (ResNet50 at compute_scale 10, 2 workers).

    PYTHONPATH=$PWD python benchmarks/bench_ps_emu_sim.py OUT.json [HIGH_MBIT LOW_MBIT EVERY ITERS]

Same set-up as ``autobyte bench --arch ps --model emu:resnet50``: the scaled
profile (:meth:`Emulation.scaled_profile`), 2 workers, PS with one server per
worker, the step trace starting high. Methods as in ``benchmarks/evaluate.py``:
baseline (25 MiB, unlimited: the simulator's
unscheduled operating point), ByteScheduler's default, static BO (searched at
the first rate), the best static in hindsight, the per-phase oracle and
AutoByte (the shipped meta-network), on ``EVAL_SPACE``.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the sibling script evaluate.py

import evaluate as ev  # noqa: E402
from autobyte import sim  # noqa: E402
from autobyte.bench.emulation import Emulation, scaled_mbit  # noqa: E402
from autobyte.core import BYTESCHEDULER_DEFAULT, DDP_DEFAULT  # noqa: E402
from autobyte.meta._network import MetaNetwork  # noqa: E402

out = sys.argv[1]
high, low, every, iters = (float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])) if len(sys.argv) > 5 \
    else (scaled_mbit(10), scaled_mbit(3), 20, 200)
model = Emulation("emu:resnet50", 10).scaled_profile()
phases = [sim.Cluster.from_gbps(2, high / 1000, arch="ps"), sim.Cluster.from_gbps(2, low / 1000, arch="ps")]
n_windows = iters // ev.WINDOW
phase = lambda w: phases[((w * ev.WINDOW) // every) % 2]  # noqa: E731
orc = [ev.oracle(model, c) for c in phases]
grid = {c: [ev._sim(model, cl, c, seed=7).samples_per_s for cl in phases] for c in ev.EVAL_SPACE}
n_at = [sum(1 for i in range(iters) if (i // every) % 2 == k) for k in (0, 1)]
hind = min(grid, key=lambda c: sum(n / s for n, s in zip(n_at, grid[c])))
bo = ev.bo_config(model, phases[0], "ps")
runs = {
    "baseline (25 MiB, unlimited)": ev.run_tuner("baseline", None, DDP_DEFAULT, model, phase, n_windows),
    "bytescheduler": ev.run_tuner("bs", None, BYTESCHEDULER_DEFAULT, model, phase, n_windows),
    "bo": ev.run_tuner("bo", None, bo, model, phase, n_windows),
    "hindsight": ev.run_tuner("hindsight", None, hind, model, phase, n_windows),
    "oracle": ev.run_tuner("oracle", None, lambda w: orc[((w * ev.WINDOW) // every) % 2][0], model, phase, n_windows),
    "autobyte": ev.run_tuner("autobyte", ev._autobyte(MetaNetwork.load_default()), BYTESCHEDULER_DEFAULT, model, phase, n_windows),
}
mean = {k: float(r.mean) for k, r in runs.items()}
res = {"high_mbit": high, "low_mbit": low, "every": every, "iters": iters, "samples_per_s": mean,
       "configs": {"bo": str(bo), "hindsight": str(hind), "oracle_high": str(orc[0][0]), "oracle_low": str(orc[1][0])},
       "oracle_vs_baseline": mean["oracle"] / mean["baseline (25 MiB, unlimited)"],
       "autobyte_vs": {k: mean["autobyte"] / v for k, v in mean.items()}}
print(json.dumps(res, indent=1))
with open(out, "w") as f:
    json.dump(res, f, indent=1)
