"""One scenario of ``bench_tuner_sim.py``, traced: the tuner's log lines, its configuration per window, the oracle's.

    OMP_NUM_THREADS=1 python benchmarks/tuner_sim_trace.py tune 13
    OMP_NUM_THREADS=1 python benchmarks/tuner_sim_trace.py tune 13 --tuner autobyte-no-noise-z --import benchmarks/tuner_variants.py

Runs the tuner on scenario ``INDEX`` of set ``SET`` exactly as ``bench_tuner_sim.py`` does (same start, space,
network, seeds and adaptation budget), with the ``autobyte`` loggers at INFO on standard output, so every decision
is printed with its reason; then each segment's conditions and per-segment oracle configuration, the tuner's
configuration per window, and its throughput against the oracle and the best static configuration in hindsight
(the baselines come from ``bench_tuner_sim.py``'s cache when present). For reading why a scenario's figure is what it
is; the figures themselves come from ``bench_tuner_sim.py``.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before numpy, as bench_tuner_sim.py

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_tuner_sim as B  # noqa: E402

from autobyte.core.space import SearchSpace  # noqa: E402
from autobyte.core.tuners import import_tuners, tuner_names  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("set", choices=sorted(B.SETS), help="scenario seed set")
    ap.add_argument("index", type=int, help="scenario index in the set (0-based)")
    ap.add_argument("--tuner", default="autobyte", help="registry name (default autobyte)")
    ap.add_argument("--import", dest="imports", default="", help="comma-separated modules or .py files registering tuners")
    ap.add_argument("--adapt-time-s", type=float, default=B.ADAPT_TIME_S, help="as bench_tuner_sim.py (default %(default)s)")
    ap.add_argument("--no-cache", action="store_true", help="compute the baselines afresh")
    ap.add_argument("--host-noise", type=float, default=0.0, help="as bench_tuner_sim.py (default 0: none)")
    a = ap.parse_args(argv)
    if a.index < 0:
        ap.error(f"index must be >= 0, but got {a.index}")
    if not a.adapt_time_s > 0:
        ap.error(f"--adapt-time-s must be > 0 seconds, but got {a.adapt_time_s}")
    if not 0.0 <= a.host_noise <= 1.0:
        ap.error(f"--host-noise must be a log-sigma in [0, 1], but got {a.host_noise}")
    if a.imports:
        try:
            import_tuners([m for m in a.imports.split(",") if m])
        except (ImportError, OSError, ValueError) as exc:
            ap.error(f"--import: {exc}")
    if a.tuner not in tuner_names():
        ap.error(f"--tuner: unknown tuner {a.tuner!r} (known: {', '.join(sorted(tuner_names()))})")
    sc = B.make_scenario(a.set, a.index)
    network = None
    if "network" in B._factory_params(a.tuner):
        from autobyte.meta._network import MetaNetwork

        network = MetaNetwork.load_default()
    print(f"{a.set} {a.index}: {sc.describe()}")
    log = logging.getLogger("autobyte")
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("%(message)s"))
    level = log.level
    log.addHandler(handler)
    log.setLevel(logging.DEBUG if os.environ.get("AUTOBYTE_TRACE_DEBUG") else logging.INFO)
    try:  # the bench's own path: the baselines (no tuner, so no log lines), then the tuner, run as the bench runs it
        row = B.run_scenario(sc, [a.tuner], SearchSpace.default(), network, print,
                             None if a.no_cache else B.DEFAULT_CACHE, a.adapt_time_s, a.host_noise)
    finally:
        log.removeHandler(handler)
        log.setLevel(level)
    for k, (s0, n, cond) in enumerate(sc.segments):
        print(f"segment {k}: iterations {s0}-{s0 + n}, {cond}; oracle {row['oracle_configs'].get(cond, '?')}")
    print("configuration per window:", "; ".join(row["configs_by_window"][a.tuner]))
    print(f"{a.tuner}: {row['vs_oracle'][a.tuner]:.3f}x the per-segment oracle, {row['vs_best_static'][a.tuner]:.3f}x the "
          f"best static in hindsight ({row['best_static_config']}), {row['vs_bytescheduler_default'][a.tuner]:.3f}x "
          f"ByteScheduler's default")
    return 0


if __name__ == "__main__":
    sys.exit(main())
