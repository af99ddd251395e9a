"""The paper's Fig. 8 / 9 rows on real traffic with emulated compute (issue 9): one model, one architecture, one
constant link rate per point.

    sudo PYTHONPATH=$PWD python benchmarks/bench_fig89_emu.py OUT [--points ARCH:MODEL:MBIT,...] [--iters N]
        [--methods baseline,bytescheduler,oracle,autobyte] [--grid-ps CONFIGS] [--grid-allreduce CONFIGS] [--summarize-only]

Each point runs ``autobyte.bench._real.run_bench`` into ``OUT/<arch>-<model>-<mbit>/`` with a constant trace at
MBIT Mbit/s (the paper's Gbit/s / 10, as the compute is emulated 10x slower than the zoo's V100 profile), 2
workers, the profile's batch, the methods side by side (``baseline`` is ``dist_sync`` on ``ps``, ``ddp`` on
``allreduce``; ``bytescheduler`` is ByteScheduler's default <4 MB, 4X>; ``oracle`` the best config of a small grid
measured at that rate, 3 iterations after 1 of warm-up each; ``autobyte`` the shipped tuner from the default,
deciding every 5 iterations). Then ``OUT/fig89.md`` and ``OUT/fig89.json``: per point every method's samples/s
over the second half of its run (AutoByte's figure, like the simulator's Fig. 8/9 column "mean of windows 4-6 of a
6-window run from the static default"; the other methods over the same iterations), the ratios, the simulator's
prediction of the same point (parameters fitted on the emulated ResNet-50 runs, ``docs/figures/emulated``:
baseline through the stand-in ``benchmarks/bench_emulated.py`` uses, ByteScheduler's default, the oracle's config)
and the paper's range for that model and architecture (Sec. IV-E; the paper gives ranges over 0.5-25 Gbit/s, not
one number per rate).

``--points`` is a comma-separated list of ``ARCH:MODEL:MBIT`` (ARCH ``ps`` or ``allreduce``, MODEL a zoo model,
MBIT the constant rate); ``--grid-ps`` / ``--grid-allreduce`` replace an architecture's grid, configs as
``PARTITION_MIBxCREDIT_MULTIPLE`` (e.g. ``0.5x8,2x16``); ``--summarize-only`` rebuilds the tables from the point
directories already in OUT (those of ``--points`` if given, else every ``ARCH-MODEL-MBIT`` directory there)
without running anything (and without root).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import time
from dataclasses import dataclass
from typing import Any, Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [ROOT, HERE]

from bench_emulated import fitted_params, sim_baseline_iter_s, sim_iter_s  # noqa: E402

from autobyte.bench._real import ARCHS, BASELINE, BenchPlan, read_iterations, run_bench  # noqa: E402
from autobyte.bench.emulation import Emulation  # noqa: E402
from autobyte.core import BYTESCHEDULER_DEFAULT, MiB, Config  # noqa: E402
from autobyte.sim import MODELS  # noqa: E402
from calibrate import SimParams  # noqa: E402

COMPUTE_SCALE = 10.0
#: AutoByte decides every WINDOW_ITERS iterations: 30 iterations are the simulator's 6 windows.
WINDOW_ITERS = 5
GRID_ITERS, GRID_WARMUP = 3, 1
DEFAULT_ITERS = 30
#: One point per (arch, model) where communication matters at compute x 10: ResNet-50 (1.73 s of compute, 102 MB)
#: at 500 Mbit/s (the paper's 5 Gbit/s), VGG16 (3.18 s, 553 MB) and AlexNet (0.59 s, 244 MB) at 2500 (25 Gbit/s).
DEFAULT_POINTS = "ps:resnet50:500,ps:vgg16:2500,ps:alexnet:2500,allreduce:resnet50:500,allreduce:vgg16:2500,allreduce:alexnet:2500"
#: Small partitions won every emulated grid so far: credit 8X-32X on the parameter server (docs/benchmarks.md 9.2),
#: 2X-4X on all-reduce (docs/evaluation.md, Fig. 6 and held-out Fig. 7 runs with fair baselines).
DEFAULT_GRIDS = {"ps": "0.5x8,0.5x32,2x16,8x4", "allreduce": "0.5x2,2x2,2x4,8x2"}
METHOD_NAMES = ("baseline", "bytescheduler", "oracle", "autobyte", "bo", "hindsight")
DEFAULT_METHODS = "baseline,bytescheduler,oracle,autobyte"
SIM_PARAMS = {"allreduce": os.path.join(ROOT, "docs", "figures", "emulated", "sim_vs_real.json"),
              "ps": os.path.join(ROOT, "docs", "figures", "emulated", "ps_sim_vs_real.json")}
#: Seconds a testbed launch adds to its iterations (namespaces, imports, first connections; ~4 s measured on PS).
LAUNCH_S = 8.0
#: AutoByte's improvement over the baseline and over ByteScheduler with BO, in %, over 0.5-25 Gbit/s (paper Sec. IV-E,
#: "Optimization under Various Environments", the text of Fig. 8 (a)-(c) for PS, Fig. 9 (a)-(c) for all-reduce: one
#: range for all three models there; the figures' bars are images, not in the text).
PAPER = {
    ("ps", "resnet50"): {"over_baseline_pct": [16.7, 60.1], "over_bo_pct": [3.1, 17.5], "source": "Fig. 8 (a), Sec. IV-E"},
    ("ps", "vgg16"): {"over_baseline_pct": [30.2, 94.4], "over_bo_pct": [15.5, 33.2], "source": "Fig. 8 (b), Sec. IV-E"},
    ("ps", "alexnet"): {"over_baseline_pct": [40.7, 79.7], "over_bo_pct": [10.6, 31.1], "source": "Fig. 8 (c), Sec. IV-E"},
    **{("allreduce", m): {"over_baseline_pct": [15.1, 144.4], "over_bo_pct": [2.3, 17.4],
                          "source": "Fig. 9 (a)-(c), Sec. IV-E (one range for the three models)"} for m in ("resnet50", "vgg16", "alexnet")},
}
_DIR = re.compile(r"^(ps|allreduce)-([a-z0-9-]+)-([0-9.]+)$")


@dataclass(frozen=True)
class Point:
    arch: str
    model: str
    mbit: float

    @property
    def name(self) -> str:
        return f"{self.arch}-{self.model}-{self.mbit:g}"


def parse_points(text: str) -> list[Point]:
    """``"ps:resnet50:500,allreduce:vgg16:2500"`` -> points; raises ``argparse.ArgumentTypeError`` naming the bad one."""
    points: list[Point] = []
    for item in text.split(","):
        parts = item.strip().split(":")
        if len(parts) != 3:
            raise argparse.ArgumentTypeError(f"each point must be ARCH:MODEL:MBIT (e.g. ps:resnet50:500), but got {item!r}")
        arch, model, rate = parts
        if arch not in ARCHS:
            raise argparse.ArgumentTypeError(f"a point's ARCH must be one of {ARCHS}, but got {arch!r} in {item!r}")
        if model not in MODELS:
            raise argparse.ArgumentTypeError(f"a point's MODEL must be one of {MODELS}, but got {model!r} in {item!r}")
        try:
            mbit = float(rate)
        except ValueError:
            mbit = float("nan")
        if not math.isfinite(mbit) or not 0 < mbit <= 1e6:
            raise argparse.ArgumentTypeError(f"a point's MBIT must be a rate in (0, 1e6] Mbit/s, but got {rate!r} in {item!r}")
        p = Point(arch, model, mbit)
        if p in points:
            raise argparse.ArgumentTypeError(f"each point may appear once, but got {item!r} twice")
        points.append(p)
    return points


def parse_grid(text: str) -> list[Config]:
    """``"0.5x8,2x16"`` -> <512 KiB, 8X>, <2 MiB, 16X>."""
    configs = []
    for item in text.split(","):
        try:
            part, mult = (float(x) for x in item.strip().split("x"))
        except ValueError:
            raise argparse.ArgumentTypeError(f"each config must be PARTITION_MIBxCREDIT_MULTIPLE (e.g. 0.5x8), but got {item!r}") from None
        if not (math.isfinite(part) and math.isfinite(mult)) or part <= 0 or mult <= 0 or int(part * MiB) < 1:
            raise argparse.ArgumentTypeError(f"a config's partition and credit multiple must be positive, but got {item!r}")
        configs.append(Config.from_multiple(int(part * MiB), mult))
    return configs


def parse_methods(text: str) -> list[str]:
    methods = [m.strip() for m in text.split(",")]
    bad = [m for m in methods if m not in METHOD_NAMES]
    if bad:
        raise argparse.ArgumentTypeError(f"methods must be among {METHOD_NAMES} (baseline: dist_sync on ps, ddp on allreduce), "
                                         f"but got {bad[0]!r}")
    if len(set(methods)) != len(methods):
        raise argparse.ArgumentTypeError(f"each method may appear once, but got {text!r}")
    return methods


def parse_iters(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 2:
        raise argparse.ArgumentTypeError(f"iters must be an integer >= 2 (the figures take the second half), but got {text!r}")
    return n


def plan_for(p: Point, *, iters: int, methods: Sequence[str], grid: Sequence[Config]) -> BenchPlan:
    """The ``run_bench`` plan of a point: constant trace at ``p.mbit``, the profile's batch, compute x 10."""
    batch = Emulation(p.model, COMPUTE_SCALE).profile().batch_size
    ms = [BASELINE[p.arch] if m == "baseline" else m for m in methods]
    return BenchPlan(arch=p.arch, methods=ms, low_mbit=p.mbit, high_mbit=p.mbit, every=iters, iters=iters, window_iters=WINDOW_ITERS,
                     grid_iters=GRID_ITERS, grid_warmup=GRID_WARMUP, bo_iters=24, bo_window_iters=4, batch_size=batch,
                     model_spec={"model": f"emu:{p.model}", "compute_scale": COMPUTE_SCALE}, grid=list(grid), timeout_s=3600.0)


def sim_params(arch: str) -> SimParams:
    return fitted_params(SIM_PARAMS[arch])


def simulated(p: Point, configs: dict[str, Config]) -> dict[str, float]:
    """Simulated samples/s at ``p`` (2 workers, fitted parameters): the baseline's stand-in and each of ``configs``."""
    prof = Emulation(p.model, COMPUTE_SCALE).scaled_profile()
    params = sim_params(p.arch)
    samples = 2 * prof.batch_size
    base = sim_baseline_iter_s(prof, params, p.mbit, p.arch)
    out = {"baseline": samples / base}
    for name, c in configs.items():
        out[name] = samples / sim_iter_s(prof, params, p.mbit, c, arch=p.arch)
    return out


def estimate_s(p: Point, plan: BenchPlan) -> float:
    """Predicted wall seconds of a point: the simulator's iteration times (grid mean for tuned methods) plus launches."""
    samples = 2 * plan.batch_size
    grid = plan.grid_configs()
    sps = simulated(p, {f"g{i}": c for i, c in enumerate(grid)} | {"bytescheduler": BYTESCHEDULER_DEFAULT})
    grid_s = [samples / sps[f"g{i}"] for i in range(len(grid))]
    per = {"ddp": samples / sps["baseline"], "dist_sync": samples / sps["baseline"], "bytescheduler": samples / sps["bytescheduler"]}
    total = sum(grid_s) * (GRID_ITERS + GRID_WARMUP) + LAUNCH_S if {"oracle", "hindsight"} & set(plan.methods) else 0.0
    if "bo" in plan.methods:
        total += plan.bo_iters * per["bytescheduler"] + LAUNCH_S
    for m in plan.methods:
        total += plan.iters * per.get(m, sum(grid_s) / len(grid_s)) + LAUNCH_S
    return total


# -------------------------------------------------------------------------------- summary
def second_half(out_dir: str) -> tuple[dict[str, float], int]:
    """Samples/s of each method over the second half of its iterations (``iterations.csv``), and the run's length."""
    runs = read_iterations(out_dir)
    iters = max(len(v) for v in runs.values())
    out = {}
    for m, rows in runs.items():
        half = [r for r in rows if r.iteration >= iters // 2]
        secs = sum(r.seconds for r in half)
        out[m] = sum(r.seconds * r.samples_per_s for r in half) / secs if secs > 0 else 0.0
    return out, iters


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def summarize_point(p: Point, out_dir: str) -> dict[str, Any]:
    """The row of ``fig89.json`` for a point's ``run_bench`` output directory."""
    path = os.path.join(out_dir, "summary.json")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"point {p.name}: no run_bench summary in {out_dir!r} (summary.json missing)")
    with open(path) as f:
        summary = json.load(f)
    if summary.get("arch") != p.arch or summary.get("trace") != f"const:{p.mbit:g}":
        raise ValueError(f"point {p.name}: {path} is a run of arch={summary.get('arch')!r}, trace={summary.get('trace')!r}, "
                         f"not arch={p.arch!r}, trace='const:{p.mbit:g}'")
    half, iters = second_half(out_dir)
    base_name = BASELINE[p.arch]
    base = half.get(base_name)
    measured = {("baseline" if m == base_name else m): {"second_half": v, "all": summary["throughput"][m]["all"]} for m, v in half.items()}
    oracle_cfg = next(iter(summary.get("oracle_configs", {}).values()), None)
    grid = [[pc[0], pc[1], pc[2]] for g in summary.get("grid", {}).values() for pc in g]
    best_grid = max(grid, key=lambda g: g[2]) if grid else None
    get = {m: v["second_half"] for m, v in measured.items()}
    ratios = {
        "oracle_vs_baseline": _ratio(get.get("oracle"), base),
        "grid_best_vs_baseline": _ratio(best_grid[2] if best_grid else None, base),
        "bytescheduler_vs_baseline": _ratio(get.get("bytescheduler"), base),
        "autobyte_vs_baseline": _ratio(get.get("autobyte"), base),
        "autobyte_vs_bytescheduler": _ratio(get.get("autobyte"), get.get("bytescheduler")),
        "autobyte_vs_oracle": _ratio(get.get("autobyte"), get.get("oracle")),
        "autobyte_vs_bo": _ratio(get.get("autobyte"), get.get("bo")),
    }
    configs = {"bytescheduler": BYTESCHEDULER_DEFAULT}
    if oracle_cfg:
        configs["oracle_config"] = Config(oracle_cfg["partition_bytes"], oracle_cfg["credit_bytes"])
    for i, (pb, cb, _) in enumerate(grid):
        configs[f"grid{i}"] = Config(pb, cb)
    sim = simulated(p, configs)
    # the simulator's own pick among the configs the point's grid measured
    sim_best = max(range(len(grid)), key=lambda i: sim[f"grid{i}"]) if grid else None
    sim_out = {"baseline": sim["baseline"], "bytescheduler": sim["bytescheduler"], "oracle_config": sim.get("oracle_config"),
               "grid_best": None if sim_best is None else sim[f"grid{sim_best}"],
               "grid_best_config": None if sim_best is None else grid[sim_best][:2],
               "oracle_config_vs_baseline": _ratio(sim.get("oracle_config"), sim["baseline"]),
               "bytescheduler_vs_baseline": _ratio(sim["bytescheduler"], sim["baseline"]),
               "params": os.path.relpath(SIM_PARAMS[p.arch], ROOT),
               "baseline_stand_in": "simulate_ddp, 25 MiB buckets" if p.arch == "allreduce" else "<25 MiB, unlimited credit> on the PS"}
    return {"point": p.name, "arch": p.arch, "model": p.model, "rate_mbit": p.mbit, "paper_gbps": p.mbit * COMPUTE_SCALE / 1000,
            "dir": out_dir, "iters": iters, "baseline_method": base_name, "measured": measured,
            "oracle_config": None if not oracle_cfg else [oracle_cfg["partition_bytes"], oracle_cfg["credit_bytes"]],
            "grid": grid, "ratios": ratios, "sim": sim_out, "paper": PAPER.get((p.arch, p.model))}


def _f(x: float | None, fmt: str = "{:.1f}") -> str:
    return "" if x is None else fmt.format(x)


def _cfg(c: Sequence[int] | None) -> str:
    if not c:
        return ""
    return f"<{c[0] / MiB:g} MiB, {c[1] / c[0]:g}X>"


def fig89_md(rows: Sequence[dict[str, Any]]) -> str:
    r3 = "{:.3f}x"
    lines = [
        "Measured: samples/s over the second half of each run (2 workers, compute x 10, constant rate); "
        "sim: the simulator with the fitted parameters (`docs/figures/emulated`); paper: AutoByte over baseline / over BO, "
        "its range over 0.5-25 Gbit/s.", "",
        "| arch | model | Mbit/s (paper Gbit/s) | baseline | BS default | oracle | oracle config | AutoByte | oracle / base "
        "| AutoByte / base | AutoByte / BS | AutoByte / oracle | sim base | sim BS | sim oracle cfg | sim oracle / base | paper vs base | paper vs BO |",
        "|---|---|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for r in rows:
        m = {k: v["second_half"] for k, v in r["measured"].items()}
        q, s, pp = r["ratios"], r["sim"], r["paper"]
        paper = ("", "") if not pp else tuple(f"+{a:g}..{b:g}%" for a, b in (pp["over_baseline_pct"], pp["over_bo_pct"]))
        lines.append(
            f"| {r['arch']} | {r['model']} | {r['rate_mbit']:g} ({r['paper_gbps']:g}) | {_f(m.get('baseline'))} | {_f(m.get('bytescheduler'))} "
            f"| {_f(m.get('oracle'))} | {_cfg(r['oracle_config'])} | {_f(m.get('autobyte'))} | {_f(q['oracle_vs_baseline'], r3)} "
            f"| {_f(q['autobyte_vs_baseline'], r3)} | {_f(q['autobyte_vs_bytescheduler'], r3)} | {_f(q['autobyte_vs_oracle'], r3)} "
            f"| {_f(s['baseline'])} | {_f(s['bytescheduler'])} | {_f(s['oracle_config'])} | {_f(s['oracle_config_vs_baseline'], r3)} "
            f"| {paper[0]} | {paper[1]} |")
    lines += ["", "Baseline: plain `dist_sync` (ps) or DDP with 25 MiB buckets (allreduce); BS default: ByteScheduler's <4 MB, 4X>; "
              "oracle: the best config of the point's grid (3 iterations after 1 of warm-up each), run for the whole trace; "
              "AutoByte: the shipped tuner from the BS default, a decision every 5 iterations. The simulator's baseline is a stand-in "
              "(DDP: `simulate_ddp`; dist_sync: <25 MiB, unlimited credit>, 10% slow at high rates on ResNet-50); its parameters "
              "were fitted on emulated ResNet-50 runs only."]
    return "\n".join(lines) + "\n"


def summarize(out: str, points: Sequence[Point]) -> list[dict[str, Any]]:
    rows = [summarize_point(p, os.path.join(out, p.name)) for p in points]
    with open(os.path.join(out, "fig89.json"), "w") as f:
        json.dump({"compute_scale": COMPUTE_SCALE, "figure": "samples/s over the second half of each run", "points": rows}, f, indent=1)
    md = fig89_md(rows)
    with open(os.path.join(out, "fig89.md"), "w") as f:
        f.write(md)
    return rows


def points_in(out: str) -> list[Point]:
    """The point directories of ``out`` that hold a ``summary.json``."""
    found = []
    for d in sorted(os.listdir(out)):
        m = _DIR.match(d)
        if m and os.path.isfile(os.path.join(out, d, "summary.json")):
            found.append(Point(m.group(1), m.group(2), float(m.group(3))))
    return found


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", help="output directory (one subdirectory per point, fig89.md, fig89.json)")
    ap.add_argument("--points", type=parse_points, default=None, help=f"ARCH:MODEL:MBIT,... (default {DEFAULT_POINTS})")
    ap.add_argument("--iters", type=parse_iters, default=DEFAULT_ITERS, help=f"iterations per method run (default {DEFAULT_ITERS})")
    ap.add_argument("--methods", type=parse_methods, default=parse_methods(DEFAULT_METHODS), help=f"default {DEFAULT_METHODS}")
    for arch in ARCHS:
        ap.add_argument(f"--grid-{arch}", type=parse_grid, default=parse_grid(DEFAULT_GRIDS[arch]),
                        help=f"the oracle's grid on {arch}, PARTITION_MIBxCREDIT_MULTIPLE,... (default {DEFAULT_GRIDS[arch]})")
    ap.add_argument("--summarize-only", action="store_true", help="rebuild fig89.md / fig89.json from OUT's point directories")
    args = ap.parse_args(argv)
    if args.summarize_only:
        if not os.path.isdir(args.out):
            ap.error(f"OUT must be an existing directory with --summarize-only, but got {args.out!r}")
        points = args.points if args.points is not None else points_in(args.out)
        if not points:
            ap.error(f"--summarize-only found no ARCH-MODEL-MBIT directory with a summary.json in OUT={args.out!r}")
        rows = summarize(args.out, points)
        print(fig89_md(rows))
        return rows
    points = args.points if args.points is not None else parse_points(DEFAULT_POINTS)
    plans = [(p, plan_for(p, iters=args.iters, methods=args.methods, grid=getattr(args, f"grid_{p.arch}"))) for p in points]
    est = [(p, estimate_s(p, plan)) for p, plan in plans]
    print("estimated duration (simulator's iteration times + 8 s per launch): "
          + ", ".join(f"{p.name} {s / 60:.1f} min" for p, s in est) + f"; total {sum(s for _, s in est) / 60:.1f} min", flush=True)
    os.makedirs(args.out, exist_ok=True)
    t0 = time.monotonic()
    for (p, plan), (_, s) in zip(plans, est):
        print(f"== {p.name}: {plan.iters} iterations, batch {plan.batch_size}, methods {', '.join(plan.methods)}, "
              f"grid {', '.join(str(c) for c in plan.grid_configs())} (estimated {s / 60:.1f} min)", flush=True)
        t = time.monotonic()
        run_bench(plan, os.path.join(args.out, p.name))
        print(f"== {p.name}: {time.monotonic() - t:.0f} s (total {time.monotonic() - t0:.0f} s)", flush=True)
    rows = summarize(args.out, points)
    print(fig89_md(rows))
    return rows


if __name__ == "__main__":
    main()
