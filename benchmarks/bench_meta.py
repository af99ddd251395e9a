"""Cost of AutoByte's brain, measured on one CPU core.

    OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/bench_meta.py [WEIGHTS]

Reports (medians of repeated runs): scoring the whole candidate grid (the
default space, 152 candidates, and the paper's grid, 136) in one call; one
online adaptation on a full replay buffer (256 rows); a whole
``AutoByteTuner.observe`` (featurise + score + trigger); each as a ratio to
its budget (10 ms, 1 s) and, for observe, to a ResNet50 window of 10 simulated
iterations.
"""

from __future__ import annotations

import os
import statistics
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


def main() -> None:
    try:
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core
    except (AttributeError, OSError):
        pass
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
    print(f"AutoByteTuner.observe: {t * 1e3:.2f} ms per 10-iteration window of {window:.2f} s (ResNet50, 8 x 10 Gbps) = {100 * t / window:.3f}% of training time")


if __name__ == "__main__":
    main()
