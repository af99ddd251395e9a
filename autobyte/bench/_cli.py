"""``autobyte bench`` (real side-by-side benchmark on the testbed) and ``autobyte demo``."""

from __future__ import annotations

import argparse
import os
import time
from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser(
        "bench",
        help="real training side by side on one bandwidth trace: DDP, ByteScheduler default, BO, AutoByte, per-phase oracle",
        description="Real 2-worker training in network namespaces (needs root); see docs/benchmarks.md.",
    )
    p.add_argument("--low-mbit", type=float, default=200.0, help="low rate of the step trace, Mbit/s (default 200)")
    p.add_argument("--high-mbit", type=float, default=2000.0, help="high rate of the step trace, Mbit/s (default 2000)")
    p.add_argument("--every", type=int, default=20, help="iterations per bandwidth phase (default 20)")
    p.add_argument("--iters", type=int, default=200, help="iterations of each trace run (default 200)")
    p.add_argument("--methods", default=",".join(("ddp", "bytescheduler", "bo", "autobyte", "oracle")),
                   help="comma-separated subset of ddp,bytescheduler,bo,autobyte,oracle")
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
        help="train a real model with 2 local workers, plain DDP vs AutoByte, and show what AutoByte chose",
        description="Needs nothing but this package; as root the workers get an emulated, changing network.",
    )
    p.add_argument("--iters", type=int, default=80, help="training iterations per run (default 80)")
    p.add_argument("--every", type=int, default=20, help="iterations between bandwidth changes (default 20)")
    p.add_argument("--low-mbit", type=float, default=300.0, help="slow link rate, Mbit/s (default 300)")
    p.add_argument("--high-mbit", type=float, default=2000.0, help="fast link rate, Mbit/s (default 2000)")
    p.add_argument("--tuner", default="autobyte", help="tuner for the second run (default autobyte)")
    p.add_argument("--out", default=None, help="output folder (default runs/demo-<time>)")
    p.set_defaults(func=_demo)


def _demo(args: argparse.Namespace) -> int:
    from .demo import DemoPlan, run_demo

    plan = DemoPlan(iters=args.iters, every=args.every, low_mbit=args.low_mbit, high_mbit=args.high_mbit, tuner=args.tuner)
    run_demo(plan, args.out or os.path.join("runs", time.strftime("demo-%Y%m%d-%H%M%S")))
    return 0
