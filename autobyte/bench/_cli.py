"""``autobyte bench`` (real side-by-side benchmark on the testbed) and ``autobyte demo``."""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from ._real import METHODS


def _trace_args(p: argparse.ArgumentParser, *, low_mbit: float, high_mbit: float, every: int, iters: int) -> None:
    """The step trace both commands run on: fast and slow rate, phase length, run length."""
    from ..cli import float_arg, int_arg

    p.add_argument("--low-mbit", type=float_arg("--low-mbit", unit="Mbit/s", maximum=1e6), default=low_mbit,
                   help=f"slow link rate of the step trace, Mbit/s (default {low_mbit:g})")
    p.add_argument("--high-mbit", type=float_arg("--high-mbit", unit="Mbit/s", maximum=1e6), default=high_mbit,
                   help=f"fast link rate, Mbit/s (default {high_mbit:g})")
    p.add_argument("--every", type=int_arg("--every", 1, 10**6), default=every, help=f"iterations per bandwidth phase (default {every})")
    p.add_argument("--iters", type=int_arg("--iters", 1, 10**7), default=iters, help=f"iterations of each run (default {iters})")


def _check_trace_args(args: argparse.Namespace) -> None:
    from ..cli import CLIError

    if args.high_mbit <= args.low_mbit:
        raise CLIError(f"--high-mbit must be above --low-mbit, but got --low-mbit={args.low_mbit!r}, --high-mbit={args.high_mbit!r}.")


def register(sub: Any) -> None:
    from ..cli import int_arg, list_arg, out_arg

    p = sub.add_parser(
        "bench",
        help="real training side by side on one bandwidth trace: DDP, ByteScheduler default, BO, AutoByte, per-phase oracle",
        description="Real 2-worker training in network namespaces (needs root); see docs/benchmarks.md.",
    )
    _trace_args(p, low_mbit=200.0, high_mbit=2000.0, every=20, iters=200)
    p.add_argument("--methods", default=list(METHODS), type=list_arg("--methods", METHODS),
                   help=f"comma-separated subset of {','.join(METHODS)} (default: all)")
    p.add_argument("--bo-iters", type=int_arg("--bo-iters", 1, 10**6), default=150, help="iterations of the BO search (default 150: 15 windows)")
    p.add_argument("--grid-iters", type=int_arg("--grid-iters", 1, 10**5), default=6,
                   help="measured iterations per grid config for the oracle (default 6)")
    p.add_argument("--out", default=None, type=out_arg("--out", kind="dir"), help="output folder (default runs/bench-<time>)")
    p.set_defaults(func=_bench)
    register_demo(sub)


def _bench(args: argparse.Namespace) -> int:
    from ..cli import CLIError
    from ._real import BenchPlan, run_bench

    _check_trace_args(args)
    try:
        plan = BenchPlan(low_mbit=args.low_mbit, high_mbit=args.high_mbit, every=args.every, iters=args.iters,
                         methods=list(args.methods), bo_iters=args.bo_iters, grid_iters=args.grid_iters)
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    out = args.out or os.path.join("runs", time.strftime("bench-%Y%m%d-%H%M%S"))
    _run(run_bench, plan, out)
    with open(os.path.join(out, "summary.md")) as f:
        print(f.read())
    print(f"raw data, CSV and plot in {out}/")
    return 0


def _tuner_arg(text: str) -> str:
    from ..core.tuners import tuner_names

    if text not in tuner_names():
        raise argparse.ArgumentTypeError(f"--tuner must be one of {', '.join(tuner_names())}, but got --tuner={text!r}.")
    return text


def register_demo(sub: Any) -> None:
    from ..cli import int_arg, out_arg

    p = sub.add_parser(
        "demo",
        help="train a real model with 2 local workers: plain DDP, ByteScheduler's default, AutoByte; show what AutoByte chose",
        description="Needs nothing but this package; as root the workers get an emulated, changing network.",
    )
    _trace_args(p, low_mbit=250.0, high_mbit=500.0, every=20, iters=80)
    p.add_argument("--rounds", type=int_arg("--rounds", 1, 1000), default=3,
                   help="rounds of the three runs, for the median and spread (default 3)")
    p.add_argument("--tuner", default="autobyte", type=_tuner_arg,
                   help="tuner of the AutoByte run: autobyte, bo, grid or static (default autobyte)")
    p.add_argument("--out", default=None, type=out_arg("--out", kind="dir"), help="output folder (default runs/demo-<time>)")
    p.set_defaults(func=_demo)


def _demo(args: argparse.Namespace) -> int:
    from ..cli import CLIError
    from .demo import DemoPlan, run_demo

    _check_trace_args(args)
    try:
        plan = DemoPlan(iters=args.iters, every=args.every, low_mbit=args.low_mbit, high_mbit=args.high_mbit, tuner=args.tuner,
                        rounds=args.rounds)
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    _run(run_demo, plan, args.out or os.path.join("runs", time.strftime("demo-%Y%m%d-%H%M%S")))
    return 0


def _run(fn: Any, plan: Any, out: str) -> None:
    """Run a benchmark; a failure of the run (no root, a job that failed) is one line, exit 1."""
    from ..cli import CLIError
    from ..testbed import TestbedError

    try:
        fn(plan, out)
    except (TestbedError, RuntimeError, OSError) as exc:
        raise CLIError(str(exc), 1) from None
