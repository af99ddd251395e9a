"""A tuner's start from ``autobyte advise``'s pick against its start from ByteScheduler's default, on a suite's grids.

The tuner starts every job at ByteScheduler's default <4 MB, 4X>. ``autobyte advise`` predicts, from the job's own
profile and link, the ``<partition, credit>`` its simulator ranks fastest. Is that a better start? This script asks
advise, per scenario of a finished suite run, exactly what a user would ask before the job: the model profiled on
this machine (one thread, as each worker runs; an emulated model: its zoo profile at the scenario's compute scale),
2 workers, the first phase's link rate, the testbed's link calibration (``calibration="testbed"``); and reads the
answer off the suite's own grids (each configuration measured by real training in each condition of the trace):

* ``start``: the grid speed of advise's pick (snapped to the grid's nearest configuration in log space) over the
  default's (the grid's nearest to <4 MB, 4X>) in the condition the job starts in;
* ``trace``: the same two run static over the whole trace, as the grids predict (the suite's hindsight rule).

A ratio above 1 by more than the grids' noise says a start from advise is worth it there. Run after a suite::

    sudo autobyte bench --suite realistic --methods bytescheduler,hindsight,autobyte --out OUT
    python benchmarks/advise_start.py OUT [--json FILE]

Offline but for advise's profiling of each real model (a few seconds each).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Mapping

from autobyte.core.space import BYTESCHEDULER_DEFAULT, Config, SearchSpace


def _grid(summary: Mapping[str, Any]) -> dict[str, dict[Config, float]]:
    return {cond: {Config(*map(int, k.split(","))): float(v) for k, v in g.items()}
            for cond, g in summary.get("grids", {}).items()}


def nearest(grid: Mapping[Config, float], c: Config) -> Config:
    """The grid configuration nearest ``c`` (:meth:`SearchSpace.nearest`; ties to the smaller partition, then credit)."""
    return SearchSpace(sorted(grid, key=lambda g: (g.partition_bytes, g.credit_bytes))).nearest(c)


def trace_seconds(sc: Any, grids: Mapping[str, Mapping[Config, float]], c: Config) -> float:
    """The whole trace at static ``c``, as the grids predict (per iteration: the samples over the grid's samples/s)."""
    return sum(p.iters * sc.batch_size * 2 / grids[p.condition.key][c] for p in sc.phases)


def advised(sc: Any, calibration: str) -> Config:
    """``autobyte advise``'s engine configuration for scenario ``sc`` at its first phase's link."""
    from autobyte import advise

    c0 = sc.phases[0].condition
    kw: dict[str, Any] = dict(n_workers=2, bandwidth_gbps=c0.mbit / 1000.0, arch=sc.arch, batch_size=sc.batch_size,
                              calibration=calibration, sensitivity=False, wire16=None)
    if sc.emulated:
        a = advise(sc.model[len("emu:"):], compute_scale=sc.compute_scale, **kw)
    else:
        import torch

        from autobyte.bench.models import make_model, model_batches

        torch.set_num_threads(1)  # as each worker of the suite runs
        x, _ = model_batches(sc.model, 1, sc.batch_size)[0]
        a = advise(make_model(sc.model), x, **kw)
    if a.engine_config is None:
        raise RuntimeError(f"advise gave no engine configuration for scenario {sc.name!r}.")
    return a.engine_config


def compare(out: str, calibration: str = "testbed") -> list[dict[str, Any]]:
    """One row per scenario of the suite run in ``out`` whose summary has grids.

    Raises:
        ValueError: ``out`` is not a suite run's folder.
    """
    from autobyte.bench._scenarios import SUITES

    path = os.path.join(out, "suite_summary.json")
    if not os.path.isfile(path):
        raise ValueError(f"out must be a suite run's folder (with suite_summary.json), but got out={out!r}.")
    with open(path) as f:
        suite = SUITES[json.load(f)["suite"]]
    rows = []
    for sc in suite.scenarios:
        p = os.path.join(out, sc.name, "summary.json")
        if not os.path.isfile(p):
            continue
        with open(p) as f:
            grids = _grid(json.load(f))
        if not grids:
            continue
        first = grids[sc.phases[0].condition.key]
        pick = advised(sc, calibration)
        a, d = nearest(first, pick), nearest(first, BYTESCHEDULER_DEFAULT)
        rows.append({"scenario": sc.name, "advised": str(pick), "advised_in_grid": str(a), "default_in_grid": str(d),
                     "start": first[a] / first[d],
                     "trace": trace_seconds(sc, grids, d) / trace_seconds(sc, grids, a)})
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", help="a finished suite run's folder (autobyte bench --suite NAME --out OUT)")
    ap.add_argument("--calibration", default="testbed", help="advise's link model (default: testbed)")
    ap.add_argument("--json", default=None, help="write the rows here too")
    args = ap.parse_args(argv)
    try:
        rows = compare(args.out, args.calibration)
    except ValueError as exc:
        print(f"advise_start.py: {exc}", file=sys.stderr)
        return 2
    print("| scenario | advise's pick (in the grid) | default in the grid | start: advise / default | whole trace |")
    print("|---|---|---|---:|---:|")
    for r in rows:
        print(f"| {r['scenario']} | {r['advised']} ({r['advised_in_grid']}) | {r['default_in_grid']} | "
              f"{r['start']:.3f} | {r['trace']:.3f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
