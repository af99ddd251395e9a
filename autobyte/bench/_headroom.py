"""What any tuner could win on a suite's scenarios, against what a window and a repeat can measure.

From the real runs of ``autobyte bench --suite`` (a scenario's iterations), per scenario and per condition of its
trace, three sizes measured on the two static configurations the suite runs continuously (ByteScheduler's default,
``bytescheduler``, and the best static configuration in hindsight, ``hindsight``):

* **the gain to find**: the steady speed of ``hindsight`` over the default's in each condition (mean of the
  repeats; the first ``settle`` iterations of every phase left out), and the whole-run ratio;
* **the headroom of switching**: the run time if every condition were run at the faster of the two, composed
  from the measured phases, against ``hindsight`` throughout. It is an *optimistic* bound for a tuner that
  switches between these two (it knows in advance which is faster, pays no switch, and picks on the same data
  it is scored on). Beside it, the same bound over every grid configuration as the suite's grids predict it
  (the fastest grid configuration in each condition, against hindsight's configuration);
* **the noise**: a window's (``window`` iterations, the size of the tuner's check) scatter about its run's
  mean in the same condition, and a repeat's: the whole-run speeds of one configuration in two repeats of
  one suite run. From them, the windows per configuration a comparison needs to tell the condition's gain
  apart (one-sided 5%, power 80%: ``n = 2 (1.645 + 0.842)^2 (sigma_w / gain)^2``) against the windows a phase
  holds, and the smallest whole-run difference a median of 2 repeats resolves (about 2 sigma_run).

:func:`analyse_runs` computes them from a scenario's runs, :func:`analyse` from a scenario folder the suite
wrote, :func:`render` writes them as markdown. The suite's summary (:mod:`autobyte.bench._suite_report`) carries
them for every suite run that ran both static methods; ``benchmarks/headroom.py`` is the command line over
finished suite folders.
"""

from __future__ import annotations

import json
import math
import statistics as st
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

if TYPE_CHECKING:
    from ._suite import IterationRow

Z = 1.645 + 0.842  # one-sided 5%, power 80%

#: The two static methods the figures compare (both must have run).
STATIC = ("bytescheduler", "hindsight")


def check_window_settle(window: Any, settle: Any) -> None:
    """``window`` an integer >= 2, ``settle`` an integer >= 0."""
    if isinstance(window, bool) or not isinstance(window, int) or window < 2:
        raise ValueError(f"window must be an integer >= 2, but got window={window!r}.")
    if isinstance(settle, bool) or not isinstance(settle, int) or settle < 0:
        raise ValueError(f"settle must be an integer >= 0, but got settle={settle!r}.")


def segments(rows: Sequence[IterationRow]) -> list[tuple[str, list[IterationRow]]]:
    """Maximal runs of one condition, in iteration order."""
    out: list[tuple[str, list[IterationRow]]] = []
    for r in rows:
        if out and out[-1][0] == r.condition:
            out[-1][1].append(r)
        else:
            out.append((r.condition, [r]))
    return out


def steady(rows: Sequence[IterationRow], settle: int) -> dict[str, list[float]]:
    """Per condition, the seconds of every iteration past the first ``settle`` of its phase."""
    by: dict[str, list[float]] = defaultdict(list)
    for cond, seg in segments(rows):
        by[cond].extend(r.seconds for r in seg[settle:])
    return by


def window_logs(rows: Sequence[IterationRow], settle: int, window: int) -> dict[str, list[float]]:
    """Per condition, log speed of each whole window of ``window`` steady iterations inside one phase."""
    by: dict[str, list[float]] = defaultdict(list)
    for cond, seg in segments(rows):
        s = [r.seconds for r in seg[settle:]]
        for i in range(0, len(s) - window + 1, window):
            by[cond].append(math.log(window / sum(s[i:i + window])))
    return by


def phase_time(rows: Sequence[IterationRow]) -> dict[str, float]:
    """Per condition, the seconds the run spent in it (every iteration, transitions included)."""
    by: dict[str, float] = defaultdict(float)
    for r in rows:
        by[r.condition] += r.seconds
    return by


def grid_ratio(grid: Mapping[str, float], cfg: Sequence[int] | None, ref: Sequence[int] | None) -> float | None:
    """The grid's speed of ``cfg`` over that of the grid configuration nearest ``ref`` (log distance)."""
    if not grid or not cfg or not ref:
        return None
    pts = {tuple(int(x) for x in k.split(",")): v for k, v in grid.items()}

    def nearest(c: Sequence[int]) -> tuple[int, ...]:
        return min(pts, key=lambda p: abs(math.log2(p[0] / c[0])) + abs(math.log2(p[1] / c[1])))

    return pts[nearest(cfg)] / pts[nearest(ref)]


def grid_headroom(phases: Sequence[Sequence[Any]], grids: Mapping[str, Mapping[str, float]], cfg: Sequence[int] | None) -> float | None:
    """The trace's time at ``cfg`` over its time at each condition's fastest grid configuration, as the grids
    predict them (speeds of a few iterations per configuration: the suite's ``oracle`` picks from them)."""
    if not phases or not cfg or any(c not in grids for _, c in phases):
        return None
    key = f"{cfg[0]},{cfg[1]}"
    if any(key not in grids[c] for _, c in phases):
        return None
    return sum(n / grids[c][key] for n, c in phases) / sum(n / max(grids[c].values()) for n, c in phases)


def _speed(secs: Sequence[float]) -> float:
    return len(secs) / sum(secs)


def analyse_runs(runs: Mapping[tuple[str, int], Sequence[IterationRow]], summary: Mapping[str, Any], window: int = 10,
                 settle: int = 2) -> dict[str, Any]:
    """The figures of one scenario: ``runs[(method, repeat)]`` its iterations (``read_iterations``), ``summary`` its
    ``summary.json`` (for the tag, the two static configurations, the phases and the grids; ``{}`` without one).

    Returns ``{"skipped": why}`` without both static methods' runs.

    Raises:
        ValueError: ``window`` not an integer >= 2, ``settle`` not an integer >= 0.
    """
    check_window_settle(window, settle)
    reps = {m: sorted(r for (mm, r) in runs if mm == m) for m in {m for m, _ in runs}}
    if not all(reps.get(m) for m in STATIC):
        return {"skipped": "needs bytescheduler and hindsight runs"}
    rate = {m: [_speed([x.seconds for x in runs[(m, r)]]) for r in reps[m]] for m in reps}
    # sigma of one run's whole speed, from pairs of repeats of each static method
    pair_logs = [math.log(v[0] / v[1]) for m, v in rate.items() if m in STATIC and len(v) >= 2]
    sigma_run = math.sqrt(st.mean(x * x for x in pair_logs) / 2) if pair_logs else float("nan")
    st_def = [steady(runs[("bytescheduler", r)], settle) for r in reps["bytescheduler"]]
    st_hin = [steady(runs[("hindsight", r)], settle) for r in reps["hindsight"]]
    pt_def = [phase_time(runs[("bytescheduler", r)]) for r in reps["bytescheduler"]]
    pt_hin = [phase_time(runs[("hindsight", r)]) for r in reps["hindsight"]]
    # window noise: deviations of every static run's windows from that run's mean in the same condition
    devs: dict[str, list[float]] = defaultdict(list)
    for m in STATIC:
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
    conds: list[dict[str, Any]] = []
    t_hind = t_best = 0.0
    for cond in phases:
        # phases shorter than the settling: their steady speed is every iteration's
        sp_d = st.mean(_speed(s[cond]) for s in st_def if s.get(cond)) if any(s.get(cond) for s in st_def) else \
            st.mean(_speed([x.seconds for x in runs[("bytescheduler", r)] if x.condition == cond]) for r in reps["bytescheduler"])
        sp_h = st.mean(_speed(s[cond]) for s in st_hin if s.get(cond)) if any(s.get(cond) for s in st_hin) else \
            st.mean(_speed([x.seconds for x in runs[("hindsight", r)] if x.condition == cond]) for r in reps["hindsight"])
        gain = sp_h / sp_d - 1.0
        sigma_w = math.sqrt(st.mean(x * x for x in devs[cond])) if devs.get(cond) else float("nan")
        need = 2 * Z * Z * (sigma_w / gain) ** 2 if gain else float("inf")
        per_phase = (st.median(phases[cond]) - settle) / window
        td = st.mean(p[cond] for p in pt_def)
        th = st.mean(p[cond] for p in pt_hin)
        t_hind += th
        t_best += min(td, th)
        ratio = grid_ratio(grids.get(cond, {}), h_cfg, d_cfg)
        conds.append({"condition": cond, "phases": len(phases[cond]), "phase_iters": st.median(phases[cond]),
                      "default_it_s": sp_d, "gain": gain, "grid_gain": None if ratio is None else ratio - 1,
                      "sigma_window": sigma_w, "windows_needed": need, "windows_per_phase": per_phase,
                      "share_of_time": th})
    for c in conds:
        c["share_of_time"] /= t_hind
    others = {m: [v / st.median(rate["hindsight"]) for v in rate[m]] for m in rate if m not in STATIC}
    return {"tag": summary.get("tag", ""), "window": window, "settle": settle,
            "hindsight_vs_default": st.median(rate["hindsight"]) / st.median(rate["bytescheduler"]),
            "switch_headroom": t_hind / t_best, "grid_headroom": grid_headroom(summary.get("phases", []), grids, h_cfg),
            "sigma_run": sigma_run, "others_vs_hindsight": others, "conditions": conds}


def analyse(folder: str | Path, window: int = 10, settle: int = 2) -> dict[str, Any]:
    """:func:`analyse_runs` of a scenario folder the suite wrote (``iterations.csv``, ``summary.json`` when there),
    named by its suite folder (``suite``) and its own (``scenario``).

    Raises:
        FileNotFoundError: no ``iterations.csv`` there.
        ValueError: a bad ``window`` or ``settle``; a file that is not the suite's.
    """
    from ._suite import read_iterations

    folder = Path(folder)
    check_window_settle(window, settle)
    summary = json.loads((folder / "summary.json").read_text()) if (folder / "summary.json").exists() else {}
    return {"suite": folder.parent.name, "scenario": folder.name, **analyse_runs(read_iterations(folder), summary, window, settle)}


def finite(x: Any) -> Any:
    """``x`` with every NaN or infinite float (a figure with too little data) replaced by ``None``: JSON proper."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [finite(v) for v in x]
    return x


def _known(x: Any) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


def pct(x: float | None) -> str:
    return f"{100 * x:+.1f}%" if x is not None and _known(x) else "-"


def _num(x: float | None, fmt: str, scale: float = 1.0, unit: str = "") -> str:
    return f"{scale * x:{fmt}}{unit}" if x is not None and _known(x) else "-"


def render(results: Sequence[Mapping[str, Any]]) -> str:
    """The figures as two markdown tables (per scenario, then per condition) and a line on the windows; each result
    names its ``scenario`` (and ``suite``: shown as ``suite/scenario`` when the results come from several)."""
    several = len({r.get("suite") for r in results}) > 1

    def name(r: Mapping[str, Any]) -> str:
        return f"{r.get('suite')}/{r['scenario']}" if several else str(r["scenario"])

    lines = ["| scenario (tag) | hindsight vs default | switching headroom over hindsight, measured (grids') | "
             "sigma of a run | 2 repeats resolve | other methods vs hindsight (per repeat) |",
             "|---|---:|---:|---:|---:|---|"]
    for r in results:
        if "skipped" in r:
            lines.append(f"| {name(r)} | skipped: {r['skipped']} | | | | |")
            continue
        others = "; ".join(f"{m} " + ", ".join(_num(v, ".3f") for v in vs) for m, vs in sorted(r["others_vs_hindsight"].items()))
        gh = r["grid_headroom"]
        lines.append(f"| {name(r)} ({r['tag']}) | {_num(r['hindsight_vs_default'], '.3f')} | {pct(r['switch_headroom'] - 1)} "
                     f"({pct(gh - 1 if _known(gh) else None)}) | "
                     f"{_num(r['sigma_run'], '.1f', 100, '%')} | {_num(r['sigma_run'], '.1f', 200, '%')} | {others} |")
    lines += ["", "| scenario | condition (phases x iterations, share of hindsight's time) | gain of hindsight over the "
              "default, measured (grid's) | sigma of a window | windows per configuration to tell it | windows in a phase |",
              "|---|---|---:|---:|---:|---:|"]
    for r in results:
        for c in r.get("conditions", []):
            lines.append(f"| {name(r)} | {c['condition']} ({c['phases']} x {c['phase_iters']:g}, "
                         f"{100 * c['share_of_time']:.0f}%) | {pct(c['gain'])} ({pct(c['grid_gain'])}) | "
                         f"{_num(c['sigma_window'], '.1f', 100, '%')} | {_num(c['windows_needed'], '.1f')} | "
                         f"{c['windows_per_phase']:.1f} |")
    w = {r["window"] for r in results if "window" in r}
    s = {r["settle"] for r in results if "settle" in r}
    lines += ["", f"Windows of {', '.join(map(str, sorted(w)))} iterations; the first {', '.join(map(str, sorted(s)))} "
              "iterations of every phase left out of the steady speeds and the windows."]
    return "\n".join(lines)
