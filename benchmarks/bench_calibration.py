"""Simulator accuracy against the testbed: defaults vs calibrated, side by side on one measured grid.

    python benchmarks/bench_calibration.py [--raw runs/calib/raw] [--starts 2]

Reads the raw measurements of ``benchmarks/calibrate.py`` (measure first with
``sudo python benchmarks/calibrate.py --out runs/calib``; this script never measures) and
scores, on the same points, the mean absolute percentage error of the
simulated iteration time for:

* ``defaults``: the simulator's own constants (``autobyte.sim.Cluster``
  defaults: 100 us per message, 25 us latency, the shaped rate as the link
  rate, compute from the CPU profile unscaled);
* ``compute only``: defaults, with only ``compute_scale`` fitted;
* ``calibrated``: every parameter of ``calibrate.PARAMS``
  fitted on the fit part of the grid (as ``benchmarks/calibrate.py`` does).

Errors are reported on the fit part and on the held-out part; the ratio
column is each MAPE over the calibrated one. Also prints the fit's CPU time.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the sibling scripts calibrate.py and collect.py

from calibrate import CalibrationPlan, SimParams, fit, model_profile, points_from, simulate_iter_s  # noqa: E402
from collect import read_measurement  # noqa: E402


def _mape(model, params, pts) -> float:  # type: ignore[no-untyped-def]
    return float(np.mean([abs(simulate_iter_s(model, params, p.rate_mbit, p.config) - p.measured_s) / p.measured_s for p in pts]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--raw", default="runs/calib/raw", help="raw/ folder of a benchmarks/calibrate.py run")
    ap.add_argument("--starts", type=int, default=2)
    a = ap.parse_args()
    import json
    import os

    with open(os.path.join(a.raw, "plan.json")) as f:
        plan = CalibrationPlan.from_dict(json.load(f))
    m = read_measurement(a.raw)
    model = model_profile(m.profile)
    pts = points_from(m, plan)
    train = [p for p in pts if not p.holdout]
    held = [p for p in pts if p.holdout]
    data = [(p.rate_mbit, p.config, p.measured_s) for p in train]
    defaults = SimParams(per_message_s=100e-6, latency_s=25e-6, compute_scale=1.0, update_Bps=200e9, contention=0.02,
                         efficiency=1.0, cap_Bps=1e15)
    rows = [("defaults", defaults, 0.0)]
    c0 = time.process_time()
    only, _ = fit(model, data, free=("compute_scale",), start=defaults, n_starts=1)
    rows.append(("compute only", only, time.process_time() - c0))
    c0 = time.process_time()
    full, info = fit(model, data, start=SimParams(), n_starts=a.starts)
    rows.append(("calibrated", full, time.process_time() - c0))
    ref_fit, ref_held = _mape(model, full, train), _mape(model, full, held) if held else float("nan")
    print(f"{len(pts)} points ({len(train)} fit, {len(held)} held out), {len(m.segments)} segments from {a.raw}")
    print(f"{'simulator':<14} {'MAPE fit':>9} {'MAPE held out':>14} {'ratio fit':>10} {'ratio held':>11} {'fit CPU s':>10}")
    for name, p, cpu in rows:
        mf = _mape(model, p, train)
        mh = _mape(model, p, held) if held else float("nan")
        print(f"{name:<14} {100 * mf:>8.1f}% {100 * mh:>13.1f}% {mf / ref_fit:>9.2f}x {mh / ref_held:>10.2f}x {cpu:>10.1f}")
    print("calibrated:", {k: f"{v:.3g}" for k, v in full.to_dict().items()}, f"({info['n_evaluations']} evaluations)")


if __name__ == "__main__":
    main()
