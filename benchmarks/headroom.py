"""What any tuner could win on a suite's scenarios, against what a window and a repeat can measure.

Reads the real runs of ``autobyte bench --suite`` (each scenario's ``iterations.csv``) and compares, per
scenario and per condition of its trace, three sizes measured on the two static configurations the suite
runs continuously (ByteScheduler's default, ``bytescheduler``, and the best static configuration in hindsight,
``hindsight``):

* **the gain to find**: the steady speed of ``hindsight`` over the default's in each condition (mean of the
  repeats; the first ``--settle`` iterations of every phase left out), and the whole-run ratio;
* **the headroom of switching**: the run time if every condition were run at the faster of the two, composed
  from the measured phases, against ``hindsight`` throughout. It is an *optimistic* bound for a tuner that
  switches between these two (it knows in advance which is faster, pays no switch, and picks on the same data
  it is scored on). Beside it, the same bound over every grid configuration as the suite's grids predict it
  (the fastest grid configuration in each condition, against hindsight's configuration): the grids measure each
  configuration for a few iterations, and their per-condition ratios (shown beside the measured gains) can be
  10-20 points off what a continuous run of the same two configurations measures;
* **the noise**: a window's (``--window`` iterations, the size of the tuner's check) scatter about its run's
  mean in the same condition, and a repeat's: the whole-run speeds of one configuration in two repeats of
  one suite run. From them, the windows per configuration a comparison needs to tell the condition's gain
  apart (one-sided 5%, power 80%: ``n = 2 (1.645 + 0.842)^2 (sigma_w / gain)^2``) against the windows a phase
  holds, and the smallest whole-run difference a median of 2 repeats resolves (about 2 sigma_run).

Usage (repository root)::

    python benchmarks/headroom.py SUITE_OUT [more suite folders] [--window 10] [--settle 2] [--json FILE]

where each SUITE_OUT is the ``--out`` folder of an ``autobyte bench --suite`` run (one folder per scenario).

Writes the table to stdout (markdown). Scenarios without both static methods are listed as skipped.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics as st
import sys
from collections import defaultdict
from pathlib import Path

from autobyte.bench._suite import IterationRow, read_iterations

Z = 1.645 + 0.842  # one-sided 5%, power 80%


def segments(rows: list[IterationRow]) -> list[tuple[str, list[IterationRow]]]:
    """Maximal runs of one condition, in iteration order."""
    out: list[tuple[str, list[IterationRow]]] = []
    for r in rows:
        if out and out[-1][0] == r.condition:
            out[-1][1].append(r)
        else:
            out.append((r.condition, [r]))
    return out


def steady(rows: list[IterationRow], settle: int) -> dict[str, list[float]]:
    """Per condition, the seconds of every iteration past the first ``settle`` of its phase."""
    by: dict[str, list[float]] = defaultdict(list)
    for cond, seg in segments(rows):
        by[cond].extend(r.seconds for r in seg[settle:])
    return by


def window_logs(rows: list[IterationRow], settle: int, window: int) -> dict[str, list[float]]:
    """Per condition, log speed of each whole window of ``window`` steady iterations inside one phase."""
    by: dict[str, list[float]] = defaultdict(list)
    for cond, seg in segments(rows):
        s = [r.seconds for r in seg[settle:]]
        for i in range(0, len(s) - window + 1, window):
            by[cond].append(math.log(window / sum(s[i:i + window])))
    return by


def phase_time(rows: list[IterationRow]) -> dict[str, float]:
    """Per condition, the seconds the run spent in it (every iteration, transitions included)."""
    by: dict[str, float] = defaultdict(float)
    for r in rows:
        by[r.condition] += r.seconds
    return by


def _grid_ratio(grid: dict[str, float], cfg: list[int] | None, ref: list[int] | None) -> float | None:
    """The grid's speed of ``cfg`` over that of the grid configuration nearest ``ref`` (log distance)."""
    if not grid or not cfg or not ref:
        return None
    pts = {tuple(int(x) for x in k.split(",")): v for k, v in grid.items()}

    def nearest(c: list[int]) -> tuple[int, ...]:
        return min(pts, key=lambda p: abs(math.log2(p[0] / c[0])) + abs(math.log2(p[1] / c[1])))

    return pts[nearest(cfg)] / pts[nearest(ref)]


def _grid_headroom(phases: list, grids: dict[str, dict[str, float]], cfg: list[int] | None) -> float | None:
    """The trace's time at ``cfg`` over its time at each condition's fastest grid configuration, as the grids
    predict them (speeds of a few iterations per configuration: the suite's ``oracle`` picks from them)."""
    if not phases or not cfg or any(c not in grids for _, c in phases):
        return None
    key = f"{cfg[0]},{cfg[1]}"
    if any(key not in grids[c] for _, c in phases):
        return None
    return sum(n / grids[c][key] for n, c in phases) / sum(n / max(grids[c].values()) for n, c in phases)


def analyse(folder: Path, window: int, settle: int) -> dict:
    runs = read_iterations(folder)
    summary = json.loads((folder / "summary.json").read_text()) if (folder / "summary.json").exists() else {}
    reps = {m: sorted(r for (mm, r) in runs if mm == m) for m in {m for m, _ in runs}}
    if not reps.get("bytescheduler") or not reps.get("hindsight"):
        return {"suite": folder.parent.name, "scenario": folder.name, "skipped": "needs bytescheduler and hindsight runs"}
    rate = {m: [len(runs[(m, r)]) / sum(x.seconds for x in runs[(m, r)]) for r in reps[m]] for m in reps}
    # sigma of one run's whole speed, from pairs of repeats of each static method
    pair_logs = [math.log(v[0] / v[1]) for m, v in rate.items() if m in ("bytescheduler", "hindsight") and len(v) >= 2]
    sigma_run = math.sqrt(st.mean(x * x for x in pair_logs) / 2) if pair_logs else float("nan")
    st_def = [steady(runs[("bytescheduler", r)], settle) for r in reps["bytescheduler"]]
    st_hin = [steady(runs[("hindsight", r)], settle) for r in reps["hindsight"]]
    pt_def = [phase_time(runs[("bytescheduler", r)]) for r in reps["bytescheduler"]]
    pt_hin = [phase_time(runs[("hindsight", r)]) for r in reps["hindsight"]]
    # window noise: deviations of every static run's windows from that run's mean in the same condition
    devs: dict[str, list[float]] = defaultdict(list)
    for m in ("bytescheduler", "hindsight"):
        for r in reps[m]:
            for cond, logs in window_logs(runs[(m, r)], settle, window).items():
                if len(logs) >= 2:
                    mu = st.mean(logs)
                    # n/(n-1): the deviations are about the sample mean
                    devs[cond].extend((x - mu) * math.sqrt(len(logs) / (len(logs) - 1)) for x in logs)
    phases: dict[str, list[int]] = defaultdict(list)
    for cond, seg in segments(runs[("bytescheduler", reps["bytescheduler"][0])]):
        phases[cond].append(len(seg))
    grids = summary.get("grids", {})
    d_cfg, h_cfg = summary.get("configs", {}).get("bytescheduler"), summary.get("configs", {}).get("hindsight")
    conds = []
    t_hind = t_best = 0.0
    for cond in phases:
        sp_d = st.mean(len(s[cond]) / sum(s[cond]) for s in st_def if s.get(cond))
        sp_h = st.mean(len(s[cond]) / sum(s[cond]) for s in st_hin if s.get(cond))
        gain = sp_h / sp_d - 1.0
        sigma_w = math.sqrt(st.mean(x * x for x in devs[cond])) if devs.get(cond) else float("nan")
        need = 2 * Z * Z * (sigma_w / gain) ** 2 if gain else float("inf")
        per_phase = (st.median(phases[cond]) - settle) / window
        td = st.mean(p[cond] for p in pt_def)
        th = st.mean(p[cond] for p in pt_hin)
        t_hind += th
        t_best += min(td, th)
        grid_ratio = _grid_ratio(grids.get(cond, {}), h_cfg, d_cfg)
        conds.append({"condition": cond, "phases": len(phases[cond]), "phase_iters": st.median(phases[cond]),
                      "default_it_s": sp_d, "gain": gain, "grid_gain": None if grid_ratio is None else grid_ratio - 1,
                      "sigma_window": sigma_w, "windows_needed": need, "windows_per_phase": per_phase,
                      "share_of_time": th})
    for c in conds:
        c["share_of_time"] /= t_hind
    grid_headroom = _grid_headroom(summary.get("phases", []), grids, h_cfg)
    auto = {m: [v / st.median(rate["hindsight"]) for v in rate[m]] for m in rate if m not in ("bytescheduler", "hindsight")}
    return {"suite": folder.parent.name, "scenario": folder.name, "tag": summary.get("tag", ""), "window": window, "settle": settle,
            "hindsight_vs_default": st.median(rate["hindsight"]) / st.median(rate["bytescheduler"]),
            "switch_headroom": t_hind / t_best, "grid_headroom": grid_headroom, "sigma_run": sigma_run, "others_vs_hindsight": auto,
            "conditions": conds}


def pct(x: float | None) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:+.1f}%"


def render(results: list[dict]) -> str:
    several = len({r["suite"] for r in results}) > 1

    def name(r: dict) -> str:
        return f"{r['suite']}/{r['scenario']}" if several else r["scenario"]

    lines = ["| scenario (tag) | hindsight vs default | switching headroom over hindsight, measured (grids') | "
             "sigma of a run | 2 repeats resolve | other methods vs hindsight (per repeat) |",
             "|---|---:|---:|---:|---:|---|"]
    for r in results:
        if "skipped" in r:
            lines.append(f"| {name(r)} | skipped: {r['skipped']} | | | | |")
            continue
        others = "; ".join(f"{m} " + ", ".join(f"{v:.3f}" for v in vs) for m, vs in sorted(r["others_vs_hindsight"].items()))
        lines.append(f"| {name(r)} ({r['tag']}) | {r['hindsight_vs_default']:.3f} | {pct(r['switch_headroom'] - 1)} "
                     f"({pct(None if r['grid_headroom'] is None else r['grid_headroom'] - 1)}) | "
                     f"{100 * r['sigma_run']:.1f}% | {200 * r['sigma_run']:.1f}% | {others} |")
    lines += ["", "| scenario | condition (phases x iterations, share of hindsight's time) | gain of hindsight over the "
              "default, measured (grid's) | sigma of a window | windows per configuration to tell it | windows in a phase |",
              "|---|---|---:|---:|---:|---:|"]
    for r in results:
        for c in r.get("conditions", []):
            lines.append(f"| {name(r)} | {c['condition']} ({c['phases']} x {c['phase_iters']:g}, "
                         f"{100 * c['share_of_time']:.0f}%) | {pct(c['gain'])} ({pct(c['grid_gain'])}) | "
                         f"{100 * c['sigma_window']:.1f}% | {c['windows_needed']:.1f} | {c['windows_per_phase']:.1f} |")
    w = {r["window"] for r in results if "window" in r}
    s = {r["settle"] for r in results if "settle" in r}
    lines += ["", f"Windows of {', '.join(map(str, sorted(w)))} iterations; the first {', '.join(map(str, sorted(s)))} "
              "iterations of every phase left out of the steady speeds and the windows."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("suites", nargs="+", help="suite output folders (each holds one folder per scenario)")
    ap.add_argument("--window", type=int, default=10, help="iterations per window (default 10)")
    ap.add_argument("--settle", type=int, default=2, help="iterations left out after every change (default 2)")
    ap.add_argument("--json", help="also write the figures to this JSON file")
    a = ap.parse_args(argv)
    if a.window < 2:
        ap.error(f"--window must be an integer >= 2, but got --window={a.window}.")
    if a.settle < 0:
        ap.error(f"--settle must be an integer >= 0, but got --settle={a.settle}.")
    results = []
    for suite in a.suites:
        p = Path(suite)
        if not p.is_dir():
            ap.error(f"suites must be folders written by autobyte bench --suite, but {suite!r} is not a folder.")
        scen = sorted(d for d in p.iterdir() if (d / "iterations.csv").exists())
        if not scen:
            ap.error(f"suites must hold scenario folders with an iterations.csv, but {suite!r} has none.")
        results += [analyse(d, a.window, a.settle) for d in scen]
    print(render(results))
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
