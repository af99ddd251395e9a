"""Cost of AutoByte's brain, measured on one CPU core.

    OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 taskset -c 0 python benchmarks/bench_meta.py [WEIGHTS]

Reports (medians of repeated runs): creating the tuner in a fresh interpreter
(``import autobyte.meta`` + ``make_tuner("autobyte")``, which loads the
shipped network) and its first decision there, the frameworks that pulled in;
scoring the whole candidate grid (the
default space, 152 candidates, and the paper's grid, 136) in one call; one
online adaptation on a full replay buffer (256 rows); a whole
``AutoByteTuner.observe`` (featurise + score + trigger); each as a ratio to
its budget (10 ms, 1 s) and, for observe, to a ResNet50 window of 10 simulated
iterations.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

for v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(v, "1")

import numpy as np  # noqa: E402

from autobyte import sim  # noqa: E402
from autobyte.core.space import BYTESCHEDULER_DEFAULT, SearchSpace  # noqa: E402
from autobyte.core.tuning import Observation  # noqa: E402
from autobyte.meta import Adapter, AutoByteTuner, MetaNetwork, featurize  # noqa: E402


def med(fn, n: int) -> float:
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


FRESH = r"""
import json, sys, time
t0 = time.perf_counter()
import autobyte.meta
from autobyte.core.tuners import make_tuner
tuner = make_tuner("autobyte", background=False)
t1 = time.perf_counter()
from autobyte import sim
from autobyte.core.space import BYTESCHEDULER_DEFAULT, SearchSpace
from autobyte.core.tuning import Observation
f = sim.simulate(sim.get_model("resnet50"), sim.Cluster.from_gbps(8, 10, "ps"), BYTESCHEDULER_DEFAULT, n_iters=10).features()
tuner.start(SearchSpace.default(), BYTESCHEDULER_DEFAULT)
t2 = time.perf_counter()
tuner.observe(Observation(10, BYTESCHEDULER_DEFAULT, float(f.speed.sum()), f))
t3 = time.perf_counter()
fw = sorted({m.split(".")[0] for m in sys.modules} & {"keras", "torch", "mxnet", "tensorflow", "jax", "h5py"})
print(json.dumps({"create_s": t1 - t0, "first_decision_s": t3 - t2, "frameworks": fw}))
"""


def fresh_interpreter(n: int = 5) -> None:
    """Creation and first decision as a user's process sees them (imports and weights loading included)."""
    runs = []
    for _ in range(n):
        out = subprocess.run([sys.executable, "-c", FRESH], capture_output=True, text=True, check=True, env=os.environ)
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    create = statistics.median(r["create_s"] for r in runs)
    first = statistics.median(r["first_decision_s"] for r in runs)
    print(f"fresh interpreter, median of {n}: import autobyte.meta + make_tuner('autobyte'): {create:.3f} s "
          f"(budget 0.3 s); first decision: {first * 1e3:.1f} ms; frameworks imported: {runs[0]['frameworks'] or 'none'}")


def main() -> None:
    try:
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core (children inherit it)
    except (AttributeError, OSError):
        pass
    fresh_interpreter()
    net = MetaNetwork.load(sys.argv[1]) if len(sys.argv) > 1 else MetaNetwork.load_default()
    model = sim.get_model("resnet50")
    res = sim.simulate(model, sim.Cluster.from_gbps(8, 10, "ps"), BYTESCHEDULER_DEFAULT, n_iters=10)
    f = res.features()
    job = featurize(f, BYTESCHEDULER_DEFAULT, float(f.speed.sum()))
    for name, space in (("default space", SearchSpace.default()), ("paper grid", SearchSpace.paper_grid_search())):
        c = space.to_array()
        net.predict_speeds(job, c)
        t = med(lambda: net.predict_speeds(job, c), 200)
        print(f"score {name:13s} ({len(c):3d} candidates): {t * 1e3:6.2f} ms  = {t / 0.010:.3f} x the 10 ms budget")
    rng = np.random.default_rng(0)
    e = np.repeat(net.encode(job), 256, 0)
    cand = rng.normal(size=(256, 12))
    y = rng.normal(scale=0.1, size=256)
    ad = Adapter(net, time_budget_s=1.0)
    durs = []
    for _ in range(5):
        ad.start(e, cand, y, background=False)
        durs.append(ad.last_duration_s)
    print(f"adaptation, 256 rows, up to {ad.max_epochs} steps: {statistics.median(durs):.3f} s = {statistics.median(durs):.3f} x the 1 s budget")
    tuner = AutoByteTuner(net, background=False, adapt=False)
    tuner.start(SearchSpace.default(), BYTESCHEDULER_DEFAULT)
    obs = Observation(10, BYTESCHEDULER_DEFAULT, float(f.speed.sum()), f)
    t = med(lambda: tuner.observe(obs), 100)
    window = float(res.iter_time_s.sum())
    print(f"AutoByteTuner.observe (one decision, budget 20 ms): {t * 1e3:.2f} ms per 10-iteration window of {window:.2f} s (ResNet50, 8 x 10 Gbps) = {100 * t / window:.3f}% of training time")


if __name__ == "__main__":
    main()
