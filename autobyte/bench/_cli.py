"""``autobyte bench`` (real side-by-side benchmark on the testbed) and ``autobyte demo``."""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from ._real import METHODS


def _trace_args(p: argparse.ArgumentParser, *, low_mbit: float, high_mbit: float, every: int, iters: int) -> None:
    """The step trace both commands run on: fast and slow rate, phase length, run length."""
    p.add_argument("--low-mbit", type=float, default=low_mbit, help=f"slow link rate of the step trace, Mbit/s (default {low_mbit:g})")
    p.add_argument("--high-mbit", type=float, default=high_mbit, help=f"fast link rate, Mbit/s (default {high_mbit:g})")
    p.add_argument("--every", type=int, default=every, help=f"iterations per bandwidth phase (default {every})")
    p.add_argument("--iters", type=int, default=iters, help=f"iterations of each run (default {iters})")


def register(sub: Any) -> None:
    p = sub.add_parser(
        "bench",
        help="real training side by side on one bandwidth trace: DDP, ByteScheduler default, BO, AutoByte, per-phase oracle",
        description="Real 2-worker training in network namespaces (needs root); see docs/benchmarks.md.",
    )
    _trace_args(p, low_mbit=200.0, high_mbit=2000.0, every=20, iters=200)
    p.add_argument("--methods", default=",".join(METHODS), help=f"comma-separated subset of {','.join(METHODS)}")
    p.add_argument("--bo-iters", type=int, default=150, help="iterations of the BO search (default 150: 15 windows)")
    p.add_argument("--grid-iters", type=int, default=6, help="measured iterations per grid config for the oracle (default 6)")
    p.add_argument("--out", default=None, help="output folder (default runs/bench-<time>)")
    p.set_defaults(func=_bench)
    register_demo(sub)


def _bench(args: argparse.Namespace) -> int:
    from ._real import BenchPlan, run_bench

    plan = BenchPlan(low_mbit=args.low_mbit, high_mbit=args.high_mbit, every=args.every, iters=args.iters,
                     methods=[m.strip() for m in args.methods.split(",") if m.strip()], bo_iters=args.bo_iters,
                     grid_iters=args.grid_iters)
    out = args.out or os.path.join("runs", time.strftime("bench-%Y%m%d-%H%M%S"))
    run_bench(plan, out)
    with open(os.path.join(out, "summary.md")) as f:
        print(f.read())
    print(f"raw data, CSV and plot in {out}/")
    return 0


def register_demo(sub: Any) -> None:
    p = sub.add_parser(
        "demo",
        help="train a real model with 2 local workers: plain DDP, ByteScheduler's default, AutoByte; show what AutoByte chose",
        description="Needs nothing but this package; as root the workers get an emulated, changing network.",
    )
    _trace_args(p, low_mbit=250.0, high_mbit=500.0, every=20, iters=80)
    p.add_argument("--rounds", type=int, default=3, help="rounds of the three runs, for the median and spread (default 3)")
    p.add_argument("--tuner", default="autobyte", help="tuner of the AutoByte run (default autobyte)")
    p.add_argument("--out", default=None, help="output folder (default runs/demo-<time>)")
    p.set_defaults(func=_demo)


def _demo(args: argparse.Namespace) -> int:
    from .demo import DemoPlan, run_demo

    plan = DemoPlan(iters=args.iters, every=args.every, low_mbit=args.low_mbit, high_mbit=args.high_mbit, tuner=args.tuner,
                    rounds=args.rounds)
    run_demo(plan, args.out or os.path.join("runs", time.strftime("demo-%Y%m%d-%H%M%S")))
    return 0
