"""Emulated compute on real traffic: the simulator beside real runs, and the host's own distortion (issue 9).

Subcommands (each makes one figure of ``docs/evaluation.md`` / ``docs/emulation.md``):

    python benchmarks/bench_emulated.py sleep [--out DIR]
        how far ``time.sleep`` overshoots at the per-layer times an emulated model sleeps

    python benchmarks/bench_emulated.py compare RUN_DIR [--out DIR]
        RUN_DIR is an ``autobyte bench --suite paper`` output; the simulator's
        prediction of the same set-up (same scaled profile, a 2-worker cluster
        at the same rates, the same grid, DDP, BO, AutoByte) beside the
        measured table, and the simulator's iteration-time error: fitted on
        the grid runs, judged on the trace runs not used to fit it (and
        fitted on one rate, judged on the other)

    python benchmarks/bench_emulated.py compare-ps RUN_DIR [--heldout-run DIR ...] [--compute-scale 10] [--out DIR]
        the same error for the parameter server: RUN_DIR is an ``autobyte bench
        --arch ps`` output (``benchmarks/bench_ps_emu.py``); fitted on its grid
        points (and on the high rate's only), judged on its static trace runs'
        per-rate settled medians and on every point of each --heldout-run;
        ``dist_sync`` (MXNet's own path, which the simulator has no model of) is
        simulated as <25 MiB, unlimited credit> and reported apart

    sudo python benchmarks/bench_emulated.py distortion --out DIR [--rates 300,1000] [--workers 2,4]
        the same emulated model and rate with 2 and 4 workers (real testbed),
        a few configs each: measured vs simulated, process CPU and load average

The simulator's parameters start from the testbed calibration
(``autobyte/sim/data/calibration.json``, the package's copy of
``docs/figures/calib_params.json``, fitted on a real CNN) with
``compute_scale`` 1: an emulated model's per-layer times are exact by
construction, so the profile is the emulation's scaled profile.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any, Iterable, Sequence

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [ROOT, HERE]  # the package, and the sibling scripts calibrate.py and evaluate.py

from autobyte.bench import _real  # noqa: E402
from autobyte.bench._suite import read_iterations  # noqa: E402
from autobyte.bench.emulation import Emulation  # noqa: E402
from autobyte.core import BYTESCHEDULER_DEFAULT, DDP_DEFAULT, Config  # noqa: E402
from calibrate import SimParams, fit, simulate_iter_s  # noqa: E402

CALIB = os.path.join(ROOT, "autobyte", "sim", "data", "calibration.json")
#: Parameters fitted on emulated runs (the profile's compute is exact; ``compute_scale`` absorbs the host's slow-down).
FREE = ("per_message_s", "compute_scale", "efficiency", "update_Bps")
#: Iterations dropped at the start of each phase of a trace run before its per-rate median (the switch's transient).
SETTLE = 2


def loadavg() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def base_params() -> SimParams:
    """The testbed calibration of ``docs/calibration.md`` with ``compute_scale`` 1 (emulated compute is exact)."""
    with open(CALIB) as f:
        d = json.load(f)["params"]
    d["compute_scale"] = 1.0
    return SimParams(**d)


def fitted_params(path: str) -> SimParams:
    """The simulator parameters fitted on emulated runs, from a ``sim_vs_real.json`` this script wrote."""
    with open(path) as f:
        return SimParams(**json.load(f)["fit"]["params"])


def sim_ddp_iter_s(prof: Any, params: SimParams, rate: float, n_workers: int = 2, slowdown: Sequence[float] | None = None) -> float:
    from autobyte.sim import simulate_ddp

    return float(np.mean(simulate_ddp(prof, params.cluster(rate, n_workers, slowdown=slowdown), 25, n_iters=3).iter_time_s))


def sim_iter_s(prof: Any, params: SimParams, rate: float, cfg: Config, n_workers: int = 2, arch: str = "allreduce",
               slowdown: Sequence[float] | None = None) -> float:
    if n_workers == 2:
        return simulate_iter_s(prof, params, rate, cfg, arch=arch, slowdown=slowdown)
    from autobyte.sim import simulate

    return float(np.mean(simulate(prof, params.cluster(rate, n_workers, arch=arch, slowdown=slowdown), cfg, n_iters=3,
                                  warmup_iters=2).iter_time_s))


def sim_baseline_iter_s(prof: Any, params: SimParams, rate: float, arch: str = "allreduce",
                        slowdown: Sequence[float] | None = None) -> float:
    """The unscheduled baseline's simulated iteration: DDP, or on a parameter server :data:`DIST_SYNC_STAND_IN`."""
    if arch == "allreduce":
        return sim_ddp_iter_s(prof, params, rate, slowdown=slowdown)
    return sim_iter_s(prof, params, rate, DIST_SYNC_STAND_IN, arch=arch, slowdown=slowdown)


# -------------------------------------------------------------------------------- sleep
def cmd_sleep(args: argparse.Namespace) -> None:
    emu = Emulation("resnet50", 10)
    times = sorted(set(np.round(np.concatenate([emu.forward_s, emu.backward_s]), 4)))
    picks = [times[0], times[len(times) // 4], times[len(times) // 2], times[-1]]
    rows = []
    for d in picks:
        over = []
        for _ in range(40):
            t0 = time.perf_counter()
            time.sleep(d)
            over.append(time.perf_counter() - t0 - d)
        over.sort()
        rows.append({"sleep_s": d, "median_over_us": 1e6 * over[20], "p90_over_us": 1e6 * over[36], "max_over_us": 1e6 * over[-1]})
    # the emulated model itself, alone (no communication): its forward and backward against the profile
    import torch

    from autobyte.bench.emulate_torch import EmulatedModel

    torch.set_num_threads(1)
    m = EmulatedModel(emu)
    fw, bw = [], []
    for _ in range(6):
        t0 = time.perf_counter()
        out_t = m()
        t1 = time.perf_counter()
        out_t.backward()
        bw.append(time.perf_counter() - t1)
        fw.append(t1 - t0)
        for q in m.parameters():
            q.grad = None
    model_row = {"forward_s": statistics.median(fw[1:]), "profile_forward_s": float(emu.forward_s.sum()),
                 "backward_s": statistics.median(bw[1:]), "profile_backward_s": float(emu.backward_s.sum()),
                 "overshoot_s": m.overshoot_s}
    out = {"loadavg": loadavg(), "rows": rows, "emulated_resnet50_x10_alone": model_row,
           "resnet50_x10_layer_s": {"min": float(min(times)), "median": float(np.median(times)), "max": float(max(times))}}
    print(json.dumps(out, indent=1))
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "sleep_accuracy.json"), "w") as f:
            json.dump(out, f, indent=1)


# -------------------------------------------------------------------------------- compare
def _read_run(run_dir: str) -> tuple[dict[str, Any], dict[str, Any]]:
    if not os.path.isfile(os.path.join(run_dir, "suite_summary.json")):
        hint = " (a parameter-server bench: use compare-ps)" if os.path.isfile(os.path.join(run_dir, "summary.json")) else ""
        raise ValueError(f"run_dir must be an 'autobyte bench --suite' output (suite_summary.json), but got run_dir={run_dir!r}{hint}.")
    with open(os.path.join(run_dir, "suite_summary.json")) as f:
        summary = json.load(f)
    sc = summary["scenarios"][0]
    return summary, sc


#: A suite condition as the simulator runs it: the link rate (Mbit/s) and each worker's compute slow-down.
Cond = tuple[float, tuple[float, ...]]


def _condition(key: str) -> Cond:
    """A suite condition key (``1000mbit``, ``800mbit-slow2``: rank 1 slowed, ``667mbit-slow3-r01``: both) as a :data:`Cond`.

    Raises:
        ValueError: a competing flow or an asymmetric link (the simulator's cluster has neither).
    """
    import re

    m = re.fullmatch(r"([0-9.]+)mbit(?:-slow([0-9.]+)(?:-r([01]+))?)?", key)
    if m is None:
        raise ValueError(f"condition must be a rate with an optional compute slow-down (the simulator has no competing flow "
                         f"or asymmetric link), but got condition={key!r}.")
    factor, ranks = float(m.group(2) or 1.0), {int(c) for c in (m.group(3) or "1")}
    return float(m.group(1)), tuple(factor if r in ranks else 1.0 for r in range(2))


def _slow(cond: Cond) -> list[float] | None:
    """The simulator's ``slowdown`` of a condition (``None``: no worker slowed)."""
    return None if all(f == 1.0 for f in cond[1]) else list(cond[1])


def _label(cond: Cond) -> str:
    rate, slow = cond
    return f"{rate:g} Mbit/s" + ("" if _slow(cond) is None else " compute x" + "/".join(f"{f:g}" for f in slow))


def _trace_conds(sc: dict[str, Any]) -> list[tuple[int, Cond]]:
    return [(int(n), _condition(k)) for n, k in sc["phases"]]


def _settled_medians(records: Iterable[tuple[str, int, Any, int, float]]) -> dict[str, dict[Any, list[float]]]:
    """Per method and rate: each repeat's median iteration time over the settled iterations of that rate's phases.

    ``records`` are ``(method, repeat, rate_mbit, iterations since its phase began, seconds)``; the first
    :data:`SETTLE` iterations of every phase (the switch's transient) are dropped.
    """
    rows: dict[tuple[str, int, float], list[float]] = {}
    for m, rep, rate, since, secs in records:
        if since >= SETTLE:
            rows.setdefault((m, rep, rate), []).append(secs)
    out: dict[str, dict[float, list[float]]] = {}
    for (m, _rep, rate), v in sorted(rows.items()):
        out.setdefault(m, {}).setdefault(rate, []).append(statistics.median(v))
    return out


def _measured_static(run_dir: str, sc: dict[str, Any]) -> dict[str, dict[Cond, list[float]]]:
    """:func:`_settled_medians` of a suite scenario's ``iterations.csv`` (phases from the scenario's trace)."""
    starts, k = [], 0
    for n, _ in _trace_conds(sc):
        starts.append(k)
        k += n
    recs = [(r.method, r.repeat, _condition(r.condition), r.iteration - max(s for s in starts if s <= r.iteration), r.seconds)
            for rows in read_iterations(os.path.join(run_dir, sc["name"])).values() for r in rows]
    return _settled_medians(recs)


def _tuner_configs(run_dir: str, sc: dict[str, Any]) -> dict[str, list[list[tuple[Cond, Config]]]]:
    """Per tuner method, per repeat: each iteration's (condition, config in force), from the scenario's ``iterations.csv``."""
    out: dict[str, dict[int, list[tuple[Cond, Config]]]] = {}
    for (method, rep), rows in read_iterations(os.path.join(run_dir, sc["name"])).items():
        if method == "autobyte" or method.startswith("tuner"):
            out.setdefault(method, {})[rep] = [(_condition(r.condition), r.config) for r in rows if r.config is not None]
    return {m: [reps[k] for k in sorted(reps)] for m, reps in out.items()}


def _static_configs(sc: dict[str, Any]) -> dict[str, Config]:
    c = sc["configs"]
    out = {"bytescheduler": Config(*c["bytescheduler"])}
    for m in ("hindsight", "bo"):
        if m in c:
            out[m] = Config(*c[m])
    return out


def _trace_sps(phases: Sequence[tuple[int, Cond]], iter_s: Any, samples: int) -> float:
    """Samples/s of a trace whose iteration in condition ``c`` takes ``iter_s(i_phase, c)`` seconds."""
    secs = sum(n * iter_s(i, c) for i, (n, c) in enumerate(phases))
    return samples * sum(n for n, _ in phases) / secs


def simulate_methods(prof: Any, params: SimParams, sc: dict[str, Any], grid: Sequence[Config]) -> dict[str, Any]:
    """The simulator's own run of the suite's methods on the same trace (its own grid, BO and AutoByte)."""
    from autobyte.core.space import SearchSpace
    from autobyte.core.tuners import make_tuner
    from evaluate import CHECK, bo_config, run_tuner

    arch = sc.get("arch", "allreduce")
    phases = _trace_conds(sc)
    conds = list(dict.fromkeys(c for _, c in phases))
    samples = prof.batch_size * 2

    def it_s(c: Cond, cfg: Config) -> float:
        return sim_iter_s(prof, params, c[0], cfg, arch=arch, slowdown=_slow(c))

    g = {c: {k: it_s(c, k) for k in grid} for c in conds}
    base = {c: sim_baseline_iter_s(prof, params, c[0], arch, _slow(c)) for c in conds}
    best = {c: min(grid, key=lambda k: g[c][k]) for c in conds}
    hind = min(grid, key=lambda k: sum(n * g[c][k] for n, c in phases))
    c0 = phases[0][1]
    bo = bo_config(prof, params.cluster(c0[0], arch=arch, slowdown=_slow(c0)), arch)
    key = {c: k for _, k in sc["phases"] for c in [_condition(k)]}
    out: dict[str, Any] = {"grid_iter_s": {key[c]: {f"{k.partition_bytes},{k.credit_bytes}": v for k, v in g[c].items()} for c in conds},
                           "ddp_iter_s": {key[c]: v for c, v in base.items()}, "configs": {
                               "oracle": {key[c]: [best[c].partition_bytes, best[c].credit_bytes] for c in conds},
                               "hindsight": [hind.partition_bytes, hind.credit_bytes], "bo": [bo.partition_bytes, bo.credit_bytes]}}
    sps = {
        "ddp": _trace_sps(phases, lambda i, c: base[c], samples),
        "bytescheduler": _trace_sps(phases, lambda i, c: it_s(c, BYTESCHEDULER_DEFAULT), samples),
        "bo": _trace_sps(phases, lambda i, c: it_s(c, bo), samples),
        "hindsight": _trace_sps(phases, lambda i, c: g[c][hind], samples),
        "oracle": _trace_sps(phases, lambda i, c: g[c][best[c]], samples),
    }
    bounds = np.cumsum([0] + [n for n, _ in phases])

    def cluster_at(it: int) -> Any:
        c = phases[int(np.searchsorted(bounds, it, side="right")) - 1][1]
        return params.cluster(c[0], arch=arch, slowdown=_slow(c))

    n_it = int(bounds[-1])
    run = run_tuner("autobyte", make_tuner("autobyte"), BYTESCHEDULER_DEFAULT, prof, lambda w: cluster_at(w * 10),
                    max(1, -(-n_it // 10)), SearchSpace.default(), check_phase=lambda c: cluster_at(c * CHECK))
    sps["autobyte"] = len(run.check_speeds) / sum(1.0 / s for s in run.check_speeds)
    out["autobyte_changes"] = run.changes
    out["samples_per_s"] = sps
    return out


def _ape(sim: float, meas: float) -> float:
    return abs(sim - meas) / meas


def cmd_compare(args: argparse.Namespace) -> None:
    summary, sc = _read_run(args.run)
    out_dir = args.out or args.run
    arch = sc.get("arch", "allreduce")
    emu = Emulation(sc["model"], sc["compute_scale"], sc["batch_size"])
    prof = emu.scaled_profile()
    samples = sc["batch_size"] * 2
    phases = _trace_conds(sc)
    grid = sorted({Config(*map(int, k.split(","))) for g in sc["grids"].values() for k in g},
                  key=lambda c: (c.partition_bytes, c.credit_bytes))

    def it_s(params: SimParams, c: Cond, cfg: Config) -> float:
        return sim_iter_s(prof, params, c[0], cfg, arch=arch, slowdown=_slow(c))

    def base_s(params: SimParams, c: Cond) -> float:
        return sim_baseline_iter_s(prof, params, c[0], arch, _slow(c))

    # measured points: the grids (fit) and the static trace runs (held out)
    grid_pts = [(_condition(ck), Config(*map(int, k.split(","))), samples / v) for ck, g in sc["grids"].items() for k, v in g.items()]
    static = _measured_static(args.run, sc)
    cfgs = _static_configs(sc)
    trace_pts = [(c, cfgs[m], statistics.median(v)) for m in cfgs if m in static for c, v in static[m].items()]
    ddp_pts = [(c, statistics.median(v)) for c, v in static.get("ddp", {}).items()]
    base = base_params()
    t0 = time.process_time()

    def fit_on(pts: Sequence[tuple[Cond, Config, float]]) -> tuple[SimParams, dict[str, Any]]:
        return fit(prof, [(c[0], k, m) for c, k, m in pts], free=FREE, start=base, n_starts=2, arch=arch,
                   slowdowns=[_slow(c) for c, _, _ in pts])

    fitted, info = fit_on(grid_pts)
    first = phases[0][1]  # the first phase's condition (the high rate of the paper's Fig. 6; the job alone in Fig. 7)
    fitted_hi, info_hi = fit_on([p for p in grid_pts if p[0] == first])
    fit_cpu = time.process_time() - t0

    def errors(params: SimParams) -> dict[str, Any]:
        g = [_ape(it_s(params, c, k), m) for c, k, m in grid_pts]
        t = [_ape(it_s(params, c, k), m) for c, k, m in trace_pts]
        d = [_ape(base_s(params, c), m) for c, m in ddp_pts]
        return {"grid_mape": float(np.mean(g)), "trace_static_mape": float(np.mean(t)) if t else None,
                "ddp_mape": float(np.mean(d)) if d else None, "heldout_mape": float(np.mean(t + d)) if t + d else None,
                "n_grid": len(g), "n_trace_static": len(t), "n_ddp": len(d),
                "max_ape": float(max(g + t + d))}

    err = {"calibration_cnn": errors(base), "fitted_on_grids": errors(fitted)}
    e_hi = errors(fitted_hi)
    e_hi["grid_low_rate_mape"] = float(np.mean([_ape(it_s(fitted_hi, c, k), m) for c, k, m in grid_pts if c != first]))
    err["fitted_on_high_rate_grid"] = e_hi
    points = []
    for label, pts in (("grid", grid_pts), ("trace", trace_pts)):
        for c, k, m in pts:
            points.append({"set": label, "rate_mbit": c[0], "slowdown": list(c[1]), "config": [k.partition_bytes, k.credit_bytes],
                           "measured_s": m, "sim_calib_s": it_s(base, c, k), "sim_fitted_s": it_s(fitted, c, k)})
    for c, m in ddp_pts:
        points.append({"set": "ddp", "rate_mbit": c[0], "slowdown": list(c[1]), "config": None, "measured_s": m,
                       "sim_calib_s": base_s(base, c), "sim_fitted_s": base_s(fitted, c)})
    sims = {"calibration_cnn": simulate_methods(prof, base, sc, grid), "fitted_on_grids": simulate_methods(prof, fitted, sc, grid)}
    # the simulator's time of the very configs the real run chose (its prediction of *these* runs)
    same = {}
    for name, params in (("calibration_cnn", base), ("fitted_on_grids", fitted)):
        oracle = {s: Config(*c) for s, c in sc["configs"]["oracle_phases"]}
        starts = [s for s, _ in sc["configs"]["oracle_phases"]]
        row = {m: _trace_sps(phases, lambda i, c, k=k: it_s(params, c, k), samples) for m, k in cfgs.items()}
        row["oracle"] = _trace_sps(phases, lambda i, c: it_s(params, c, oracle[starts[i]]), samples)
        row["ddp"] = _trace_sps(phases, lambda i, c: base_s(params, c), samples)
        for m, reps in _tuner_configs(args.run, sc).items():  # a tuner's run: the configs it ran, iteration by iteration
            cache: dict[tuple[Cond, Config], float] = {}
            tp = []
            for its in reps:
                secs = 0.0
                for c, k in its:
                    if (c, k) not in cache:
                        cache[(c, k)] = it_s(params, c, k)
                    secs += cache[(c, k)]
                tp.append(samples * len(its) / secs)
            row[m] = statistics.median(tp)
        same[name] = row
    res = {"run": args.run, "arch": arch, "loadavg_now": loadavg(),
           "fit": {"params": fitted.to_dict(), "info": info, "params_high_rate_only": fitted_hi.to_dict(),
                   "info_high_rate_only": info_hi, "first_condition": sc["phases"][0][1], "cpu_s": fit_cpu},
           "calibration_params": base.to_dict(), "errors": err, "points": points, "simulated_methods": sims,
           "simulated_same_configs": same}
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "sim_vs_real.json"), "w") as f:
        json.dump(res, f, indent=1)
    md = compare_md(sc, res)
    with open(os.path.join(out_dir, "sim_vs_real.md"), "w") as f:
        f.write(md)
    print(md)


def _c(pair: Sequence[int] | None) -> str:
    if pair is None:
        return "DDP 25 MiB buckets"
    p, c = int(pair[0]), int(pair[1])
    return f"<{p / 2**20:g} MiB, {c / p:.3g}X>"


def _pct(x: float | None) -> str:
    return "" if x is None else f"{100 * x:.1f}%"


def compare_md(sc: dict[str, Any], res: dict[str, Any]) -> str:
    meth = sc["methods"]
    ref = {k: meth[k]["median"] for k in ("ddp", "bytescheduler", "bo", "hindsight", "oracle") if k in meth}
    base = "dist_sync" if res.get("arch") == "ps" else "DDP"
    lines = [f"| method | measured samples/s (spread) | vs {base} | vs BS default | vs BO | vs hindsight | vs oracle | "
             f"sim, same configs | sim, its own choices | sim vs {base} | sim vs BO | sim vs oracle |", "|---|" + "---:|" * 11]
    sim_same = res["simulated_same_configs"]["fitted_on_grids"]
    sim_own = res["simulated_methods"]["fitted_on_grids"]["samples_per_s"]
    for m, r in meth.items():
        ratios = [f"{r['median'] / ref[k]:.3f}" if k in ref else "" for k in ("ddp", "bytescheduler", "bo", "hindsight", "oracle")]
        s_same = sim_same.get(m)
        s_own = sim_own.get(m)
        sr = [f"{s_own / sim_own[k]:.3f}" if s_own and k in sim_own else "" for k in ("ddp", "bo", "oracle")]
        shown = sc.get("baseline", "ddp") if m == "ddp" else m
        lines.append(f"| {shown} | {r['median']:.1f} ({r['min']:.1f}-{r['max']:.1f}) | " + " | ".join(ratios)
                     + f" | {'' if s_same is None else f'{s_same:.1f}'} | {'' if s_own is None else f'{s_own:.1f}'} | " + " | ".join(sr) + " |")
    e = res["errors"]
    lines += ["", "Simulator iteration-time error (mean absolute percentage error):", "",
              f"| simulator parameters | grid points (fit set) | static trace runs (held out) | {base} trace runs (held out"
              + (f", simulated as {_c([DIST_SYNC_STAND_IN.partition_bytes, DIST_SYNC_STAND_IN.credit_bytes])}" if base == "dist_sync" else "")
              + ") | all held out | max |",
              "|---|---:|---:|---:|---:|---:|"]
    first = res["fit"].get("first_condition", "the high rate")
    for name, label in (("calibration_cnn", "CNN calibration, not refitted"), ("fitted_on_grids", "fitted on every condition's grid"),
                        ("fitted_on_high_rate_grid", f"fitted on the first phase's grid only ({first})")):
        x = e[name]
        lines.append(f"| {label} | {_pct(x['grid_mape'])} ({x['n_grid']}) | {_pct(x['trace_static_mape'])} ({x['n_trace_static']}) | "
                     f"{_pct(x['ddp_mape'])} ({x['n_ddp']}) | {_pct(x['heldout_mape'])} | {_pct(x['max_ape'])} |")
    x = e["fitted_on_high_rate_grid"]
    lines += ["", f"Fitted on the first phase's grid only ({first}), the other conditions' grid points (not used to fit) are off by "
                  f"{100 * x['grid_low_rate_mape']:.1f}% on average.", ""]
    cf = res["simulated_methods"]["fitted_on_grids"]["configs"]
    lines += ["Simulator's own choices (fitted parameters): oracle " + ", ".join(f"{_label(_condition(k))} {_c(v)}" for k, v in cf["oracle"].items())
              + f"; hindsight {_c(cf['hindsight'])}; BO {_c(cf['bo'])}.", ""]
    return "\n".join(lines) + "\n"


# -------------------------------------------------------------------------------- compare-ps
#: Stands in for MXNet's own unscheduled path (``dist_sync``), which the simulator has no model of: the scheduled
#: engine's operating point of a whole layer per message, no credit limit (``benchmarks/bench_ps_emu_sim.py``'s baseline).
DIST_SYNC_STAND_IN = DDP_DEFAULT
#: Trace runs of a PS bench whose config is fixed at each rate: their per-rate settled medians are held-out points.
PS_STATIC = ("bytescheduler", "bo", "hindsight", "oracle")


def read_ps_run(run_dir: str) -> dict[str, Any]:
    """The measured points of an ``autobyte bench --arch ps`` output directory.

    Returns ``model`` and ``batch_size`` (the ranks'), ``grid``: one ``(rate_mbit, Config, iter_s)`` per grid point
    (iteration time from its samples/s), ``trace``: per method of :data:`PS_STATIC` and ``dist_sync`` that ran, one
    ``(rate_mbit, Config or None, iter_s)`` per rate (:func:`_settled_medians`; ``None``: dist_sync's own path).

    Raises:
        ValueError: ``run_dir`` holds no ``summary.json`` of a PS bench, or no ``iterations.csv``.
    """
    import glob

    path = os.path.join(run_dir, "summary.json")
    summary = None
    if os.path.isfile(path):
        with open(path) as f:
            summary = json.load(f)
    if not isinstance(summary, dict) or summary.get("arch") != "ps" or "grid" not in summary \
            or not os.path.isfile(os.path.join(run_dir, "iterations.csv")):
        raise ValueError("run_dir must be an 'autobyte bench --arch ps' output (summary.json with arch 'ps' and its grid, "
                         f"iterations.csv), but got run_dir={run_dir!r}.")
    ranks = sorted(glob.glob(os.path.join(run_dir, "*", "rank0.json")))
    with open(ranks[0]) as f:
        rank = json.load(f)
    by_method = _real.read_iterations(run_dir)  # a single bench's file (the suite's has repeats and conditions)
    samples = round(statistics.median(r.seconds * r.samples_per_s for rs in by_method.values() for r in rs))
    recs, configs = [], {}
    for m, rs in by_method.items():
        if m not in PS_STATIC and m != "dist_sync":
            continue
        start = 0
        for i, r in enumerate(rs):
            if i and r.rate_mbit != rs[i - 1].rate_mbit:
                start = i
            recs.append((m, 0, r.rate_mbit, i - start, r.seconds))
            if i - start >= SETTLE and configs.setdefault((m, r.rate_mbit), r.config) != r.config:
                raise ValueError(f"{m} ran several configs at {r.rate_mbit:g} Mbit/s in {run_dir!r}; it is not a static method.")
    trace = {m: [(rate, configs[(m, rate)], statistics.median(v)) for rate, v in per_rate.items()]
             for m, per_rate in _settled_medians(recs).items()}
    grid = [(float(rk), Config(int(p), int(c)), samples / sps) for rk, g in summary["grid"].items() for p, c, sps in g]
    return {"run": run_dir, "model": rank["model"], "batch_size": int(rank["batch_size"]), "samples": samples, "grid": grid, "trace": trace}


def _mape_of(pts: Sequence[dict[str, Any]], key: str) -> dict[str, Any]:
    """MAPE, largest error and count of ``pts``' ``key`` against their ``measured_s``, overall and per rate."""
    ape = [_ape(p[key], p["measured_s"]) for p in pts]
    rates = sorted({p["rate_mbit"] for p in pts}, reverse=True)
    by_rate = {f"{r:g}": float(np.mean([a for a, p in zip(ape, pts) if p["rate_mbit"] == r])) for r in rates}
    return {"mape": float(np.mean(ape)) if ape else None, "max_ape": float(max(ape)) if ape else None, "n": len(ape), "mape_by_rate": by_rate}


#: The groups of points :func:`cmd_compare_ps` reports, each a filter on a point: (name, label, filter).
PS_GROUPS: tuple[tuple[str, str, Any], ...] = (
    ("fit", "grid points of run 1 (fit set)", lambda p: p["run_index"] == 0 and p["set"] == "grid"),
    ("trace_run1", "static trace runs of run 1 (held out)", lambda p: p["run_index"] == 0 and p["set"] == "trace"),
    ("run2", "second run: grid + static trace runs (held out)", lambda p: p["run_index"] > 0 and p["set"] != "dist_sync"),
    ("heldout", "all held-out scheduled points", lambda p: not (p["run_index"] == 0 and p["set"] == "grid") and p["set"] != "dist_sync"),
    ("off_grid", "held-out configs not on the grid (ByteScheduler's default, BO's)", lambda p: p["set"] == "trace" and not p["on_fit_grid"]),
    ("dist_sync", "dist_sync trace runs, both runs (stand-in <25 MiB, unlimited>)", lambda p: p["set"] == "dist_sync"),
)


def cmd_compare_ps(args: argparse.Namespace) -> None:
    runs = [read_ps_run(d) for d in [args.run, *args.heldout_run]]
    for r in runs[1:]:
        if (r["model"], r["batch_size"]) != (runs[0]["model"], runs[0]["batch_size"]):
            raise ValueError(f"--heldout-run must run the same model and batch as run={args.run!r} "
                             f"({runs[0]['model']}, batch {runs[0]['batch_size']}), but got {r['run']!r} ({r['model']}, batch {r['batch_size']}).")
    prof = Emulation(runs[0]["model"], args.compute_scale, runs[0]["batch_size"]).scaled_profile()
    points: list[dict[str, Any]] = []
    for k, run in enumerate(runs):
        for r, c, m in run["grid"]:
            points.append({"run_index": k, "run": run["run"], "set": "grid", "method": "grid", "rate_mbit": r, "config": c, "measured_s": m})
        for meth, pts in run["trace"].items():
            for r, c, m in pts:
                points.append({"run_index": k, "run": run["run"], "set": "dist_sync" if c is None else "trace", "method": meth,
                               "rate_mbit": r, "config": c, "measured_s": m})
    fit_pts = [(p["rate_mbit"], p["config"], p["measured_s"]) for p in points if p["run_index"] == 0 and p["set"] == "grid"]
    on_grid = {(r, c): m for r, c, m in fit_pts}
    for p in points:
        p["on_fit_grid"] = (p["rate_mbit"], p["config"]) in on_grid
    # the runs' own repeatability: run 1's grid measurement taken as the prediction of a later run's same grid point
    repeat = [{"rate_mbit": p["rate_mbit"], "measured_s": p["measured_s"], "run1_s": on_grid[(p["rate_mbit"], p["config"])]}
              for p in points if p["run_index"] > 0 and p["set"] == "grid" and p["on_fit_grid"]]
    hi = max(r for r, _, _ in fit_pts)
    base = base_params()
    t0 = time.process_time()
    fitted, info = fit(prof, fit_pts, free=FREE, start=base, n_starts=2, arch="ps")
    fitted_hi, info_hi = fit(prof, [p for p in fit_pts if p[0] == hi], free=FREE, start=base, n_starts=2, arch="ps")
    fit_cpu = time.process_time() - t0
    param_sets = {"calibration_cnn": base, "fitted_on_grids": fitted, "fitted_on_high_rate_grid": fitted_hi}
    for p in points:
        for name, params in param_sets.items():
            p[f"sim_{name}_s"] = sim_iter_s(prof, params, p["rate_mbit"], p["config"] or DIST_SYNC_STAND_IN, arch="ps")
    errors: dict[str, dict[str, Any]] = {}
    for name in param_sets:
        errors[name] = {g: _mape_of([p for p in points if f(p)], f"sim_{name}_s") for g, _label, f in PS_GROUPS}
    low_grid = [p for p in points if p["run_index"] == 0 and p["set"] == "grid" and p["rate_mbit"] != hi]
    errors["fitted_on_high_rate_grid"]["run1_low_rate_grid"] = _mape_of(low_grid, "sim_fitted_on_high_rate_grid_s")
    errors["repeat_run1_grid_as_prediction"] = _mape_of(repeat, "run1_s")
    for p in points:
        c = p["config"]
        p["config"] = None if c is None else [c.partition_bytes, c.credit_bytes]
    res = {"runs": [r["run"] for r in runs], "model": runs[0]["model"], "compute_scale": args.compute_scale,
           "batch_size": runs[0]["batch_size"], "arch": "ps", "settle_iters": SETTLE,
           "dist_sync_stand_in": [DIST_SYNC_STAND_IN.partition_bytes, DIST_SYNC_STAND_IN.credit_bytes],
           "fit": {"free": list(FREE), "params": fitted.to_dict(), "info": info, "params_high_rate_only": fitted_hi.to_dict(),
                   "info_high_rate_only": info_hi, "high_rate_mbit": hi, "cpu_s": fit_cpu},
           "calibration_params": base.to_dict(), "groups": {g: label for g, label, _f in PS_GROUPS}, "errors": errors, "points": points}
    out_dir = args.out or args.run
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "ps_sim_vs_real.json"), "w") as f:
        json.dump(res, f, indent=1)
    md = compare_ps_md(res)
    with open(os.path.join(out_dir, "ps_sim_vs_real.md"), "w") as f:
        f.write(md)
    print(md)


def compare_ps_md(res: dict[str, Any]) -> str:
    e = res["errors"]
    names = list(res["groups"])
    lines = [f"Parameter server, {res['model']} at compute scale {res['compute_scale']:g}, batch {res['batch_size']}, 2 workers; "
             f"run 1 `{res['runs'][0]}`" + "".join(f", run {k + 2} `{r}`" for k, r in enumerate(res["runs"][1:])) + ".", "",
             "Simulator iteration-time error (mean absolute percentage error; number of points; largest error):", "",
             "| simulator parameters | " + " | ".join(res["groups"][g] for g in names) + " |", "|---|" + "---:|" * len(names)]
    for name, label in (("calibration_cnn", "CNN calibration, not refitted"), ("fitted_on_grids", "fitted on run 1's grids, both rates"),
                        ("fitted_on_high_rate_grid", f"fitted on run 1's {res['fit']['high_rate_mbit']:g} Mbit/s grid only")):
        lines.append(f"| {label} | " + " | ".join(f"{_pct(e[name][g]['mape'])} ({e[name][g]['n']}; max {_pct(e[name][g]['max_ape'])})"
                                                  for g in names) + " |")
    f = e["fitted_on_grids"]
    rates = list(f["fit"]["mape_by_rate"])
    lines += ["", "Fitted on both rates' grids, per rate:", "", "| points | " + " | ".join(f"{r} Mbit/s" for r in rates) + " |",
              "|---|" + "---:|" * len(rates)]
    lines += [f"| {res['groups'][g]} | " + " | ".join(_pct(f[g]["mape_by_rate"].get(r)) for r in rates) + " |" for g in names]
    x = e["fitted_on_high_rate_grid"]["run1_low_rate_grid"]
    lines += ["", "Run 2 is a separate launch of the same set-up: its grid has run 1's configs, measured again. "
                  f"In the error table's last row, run 1's grid column holds that fit's {res['fit']['info_high_rate_only']['n_points']} high-rate "
                  "points and the low-rate ones it did not see.",
              "", f"Fitted on the high rate's grid only, run 1's low-rate grid points (not used to fit) are off by "
                  f"{_pct(x['mape'])} on average ({x['n']} points; largest {_pct(x['max_ape'])}).", ""]
    x = e["repeat_run1_grid_as_prediction"]
    if x["n"]:
        lines += [f"Repeatability: run 1's measured grid taken as the prediction of the later runs' same grid points is off by "
                  f"{_pct(x['mape'])} on average ({x['n']} points; largest {_pct(x['max_ape'])}).", ""]
    lines += ["Parameters (the free ones fitted, the rest from the CNN calibration; `update_Bps` is the servers' sum + update rate):", "",
              "| parameter | CNN calibration | fitted, both rates | fitted, high rate only |", "|---|---:|---:|---:|"]
    for k in res["fit"]["free"]:
        lines.append(f"| `{k}` | {res['calibration_params'][k]:.4g} | {res['fit']['params'][k]:.4g} | {res['fit']['params_high_rate_only'][k]:.4g} |")
    lines += ["", "Every point (seconds per iteration):", "",
              "| run | set | method | rate Mbit/s | config | measured | sim, CNN calibration | sim, fitted | sim, fitted on high rate |",
              "|---:|---|---|---:|---|---:|---:|---:|---:|"]
    for p in res["points"]:
        setname = "fit" if p["run_index"] == 0 and p["set"] == "grid" else "held out"
        cfg = "dist_sync (sim: <25 MiB, unlimited>)" if p["config"] is None else _c(p["config"])
        lines.append(f"| {p['run_index'] + 1} | {setname} | {p['method']} | {p['rate_mbit']:g} | {cfg} | {p['measured_s']:.3f} | "
                     f"{p['sim_calibration_cnn_s']:.3f} | {p['sim_fitted_on_grids_s']:.3f} | {p['sim_fitted_on_high_rate_grid_s']:.3f} |")
    return "\n".join(lines) + "\n"


# -------------------------------------------------------------------------------- distortion
def _run_ranks(spec: dict[str, Any], n: int, rate: float, out_dir: str, timeout_s: float = 900) -> dict[str, Any]:
    from autobyte.testbed import BandwidthTrace, Testbed

    os.makedirs(out_dir, exist_ok=True)
    cmd = [sys.executable, "-m", "autobyte.bench.allreduce_ranks", json.dumps(spec), out_dir]
    la0 = loadavg()
    t0 = time.monotonic()
    with open(os.path.join(out_dir, "launch.log"), "w") as f, Testbed(n, trace=BandwidthTrace.parse(f"const:{rate:g}")) as tb:
        rc = tb.run(cmd, timeout_s=timeout_s, events_log=os.path.join(out_dir, "events.jsonl"), env={"PYTHONUNBUFFERED": "1"}, stdout=f)
    if rc != 0:
        raise RuntimeError(f"{out_dir} failed with exit code {rc}; see its launch.log")
    wall = time.monotonic() - t0
    with open(os.path.join(out_dir, "sweep.jsonl")) as f:
        sweep = [json.loads(line) for line in f]
    metas = []
    for r in range(n):
        with open(os.path.join(out_dir, f"rank{r}.json")) as f:
            metas.append(json.load(f))
    return {"sweep": sweep, "ranks": metas, "loadavg_before": la0, "loadavg_after": loadavg(), "wall_s": wall}


def cmd_distortion(args: argparse.Namespace) -> None:
    from autobyte.core import MiB

    emu = Emulation(args.model, args.compute_scale)
    prof = emu.scaled_profile()
    params = base_params()
    if args.params:
        params = fitted_params(args.params)
    configs = [Config.from_multiple(MiB // 2, 4), Config.from_multiple(8 * MiB, 4), Config.from_multiple(32 * MiB, 1)]
    rates = [float(x) for x in args.rates.split(",")]
    workers = [int(x) for x in args.workers.split(",")]
    rows = []
    for rate in rates:
        for n in workers:
            d = os.path.join(args.out, f"{n}w-{rate:g}mbit")
            spec = {"method": "sweep", "configs": [[c.partition_bytes, c.credit_bytes] for c in configs],
                    "iters_per_config": args.iters, "warmup": 1, "model": emu.to_dict()["model"],
                    "compute_scale": emu.compute_scale, "batch_size": prof.batch_size}
            print(f"{n} workers at {rate:g} Mbit/s ...", flush=True)
            res = _run_ranks(spec, n, rate, d)
            cpu = [m["cpu_s"] / m["wall_s"] for m in res["ranks"]]
            cpu_it = [m["cpu_s"] / m["iters"] for m in res["ranks"]]
            for s in res["sweep"]:
                c = Config(*s["config"])
                meas = prof.batch_size * n / s["samples_per_s"]
                sim = sim_iter_s(prof, params, rate, c, n)
                rows.append({"workers": n, "rate_mbit": rate, "config": s["config"], "measured_s": meas, "sim_s": sim,
                             "measured_over_sim": meas / sim, "rank_cpu_share": cpu, "rank_cpu_s_per_iter": cpu_it, "loadavg_before": res["loadavg_before"],
                             "loadavg_after": res["loadavg_after"]})
                print(f"  {_c(s['config'])}: measured {meas:.3f} s, simulated {sim:.3f} s ({meas / sim:.3f}x); "
                      f"rank CPU {', '.join(f'{100 * x:.0f}%' for x in cpu)}; load {res['loadavg_after']}", flush=True)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "distortion.json"), "w") as f:
        json.dump({"model": args.model, "compute_scale": args.compute_scale, "params": params.to_dict(), "rows": rows}, f, indent=1)
    lines = ["| workers | rate Mbit/s | config | measured s/it | simulated s/it | measured / simulated | CPU per rank (of wall) | "
             "CPU s per rank per iteration | load avg after |", "|---:|---:|---|---:|---:|---:|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['workers']} | {r['rate_mbit']:g} | {_c(r['config'])} | {r['measured_s']:.3f} | {r['sim_s']:.3f} | "
                     f"{r['measured_over_sim']:.3f} | {', '.join(f'{100 * x:.0f}%' for x in r['rank_cpu_share'])} | "
                     f"{', '.join(f'{x:.2f}' for x in r['rank_cpu_s_per_iter'])} | {r['loadavg_after']} |")
    with open(os.path.join(args.out, "distortion.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("sleep")
    p.add_argument("--out")
    p = sub.add_parser("compare")
    p.add_argument("run")
    p.add_argument("--out")
    p = sub.add_parser("compare-ps")
    p.add_argument("run", help="an 'autobyte bench --arch ps' output: its grid points are the fit set")
    p.add_argument("--heldout-run", action="append", default=[], help="another such output, held out whole (repeatable)")
    p.add_argument("--compute-scale", type=float, default=10.0, help="the emulation's compute scale (not recorded in the run; "
                   "benchmarks/bench_ps_emu.py's is 10)")
    p.add_argument("--out")
    p = sub.add_parser("distortion")
    p.add_argument("--out", required=True)
    p.add_argument("--model", default="resnet50")
    p.add_argument("--compute-scale", type=float, default=10.0)
    p.add_argument("--rates", default="300,1000")
    p.add_argument("--workers", default="2,4")
    p.add_argument("--iters", type=int, default=4)
    p.add_argument("--params", help="a compare run's sim_vs_real.json: simulate with its fitted parameters")
    args = ap.parse_args(argv)
    {"sleep": cmd_sleep, "compare": cmd_compare, "compare-ps": cmd_compare_ps, "distortion": cmd_distortion}[args.cmd](args)


if __name__ == "__main__":
    main()
