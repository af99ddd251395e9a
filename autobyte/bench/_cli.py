"""``autobyte bench`` (real side-by-side benchmark on the testbed) and ``autobyte demo``."""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from ._real import ARCH_METHODS, ARCHS, METHODS
from ._scenarios import SUITES
from ._suite import BASE_METHODS


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
    from ..cli import float_arg, int_arg, out_arg

    p = sub.add_parser(
        "bench",
        help="compare DDP, ByteScheduler, BO, AutoByte and the oracle by real training on shaped links (root)",
        description="Compare methods by real training side by side: DDP, ByteScheduler's default, BO, AutoByte and the "
                    "per-phase oracle, 2 workers in network namespaces on one bandwidth trace or a named suite of "
                    "scenarios (needs root). See docs/benchmarks.md.",
    )
    _trace_args(p, low_mbit=200.0, high_mbit=2000.0, every=20, iters=200)
    p.add_argument("--methods", default=None, type=_methods_arg,
                   help=f"comma-separated subset of {','.join(METHODS)} (default: all); with --suite, of "
                        f"{','.join(BASE_METHODS)} and tuner:NAME for any registered tuner")
    p.add_argument("--arch", default="allreduce", type=_arch_arg,
                   help="allreduce (torch gloo ring, baseline ddp; default) or ps (MXNet dist_sync, one server per worker "
                        f"co-located with it, baseline dist_sync; methods {','.join(ARCH_METHODS['ps'])})")
    p.add_argument("--model", default="cnn", type=_model_arg,
                   help="cnn (default; real compute) or emu:NAME (emulated compute of a zoo model, e.g. emu:resnet50; "
                        "--arch ps only)")
    p.add_argument("--compute-scale", type=float_arg("--compute-scale", unit="", maximum=1e4), default=10.0,
                   help="with --model emu:NAME: compute runs this many times slower than the profile (default 10)")
    p.add_argument("--suite", default=None, type=_suite_arg,
                   help=f"run a named suite of real scenarios instead of one step trace: {', '.join(SUITES)} "
                        "(see docs/benchmarks.md, Benchmark suite)")
    p.add_argument("--scenarios", default=None, help="with --suite: comma-separated subset of its scenario names (default: all)")
    p.add_argument("--repeats", type=int_arg("--repeats", 1, 100), default=None,
                   help="with --suite: rounds of every method (default: the suite's, 2)")
    p.add_argument("--bo-iters", type=int_arg("--bo-iters", 1, 10**6), default=200, help="iterations of the BO search (default 200: its 15 steps and the first, discarded window of 10 iterations plus 2 after each change, so it freezes)")
    p.add_argument("--grid-iters", type=int_arg("--grid-iters", 1, 10**5), default=6,
                   help="measured iterations per grid config for the oracle (default 6)")
    p.add_argument("--import", dest="imports", default=None, metavar="MODULES",
                   help="with --suite: comma-separated modules or .py files that register tuners (register_tuner), "
                        "imported here and in every rank, so --methods tuner:NAME can run them (e.g. "
                        "benchmarks/tuner_variants.py)")
    p.add_argument("--out", default=None, type=out_arg("--out", kind="dir"), help="output folder (default runs/bench-<time>)")
    p.set_defaults(func=_bench)
    register_demo(sub)


#: ``bench`` options of the single step trace, with their defaults: not for ``--suite`` (its scenarios fix them).
_TRACE_ONLY = (("low_mbit", 200.0), ("high_mbit", 2000.0), ("every", 20), ("iters", 200), ("bo_iters", 200), ("grid_iters", 6))


def _methods_arg(text: str) -> list[str]:
    """``--methods``: the bench's methods or a suite's (``hindsight``, ``tuner:NAME``; checked against ``--suite`` later)."""
    from ..core.tuners import tuner_names
    from ._suite import check_method

    items = list(dict.fromkeys(s.strip() for s in text.split(",") if s.strip()))
    bad = []
    for m in items:
        if m.startswith("tuner:") and len(m) > len("tuner:"):
            continue  # its NAME may come from --import: checked once that is imported
        try:
            check_method(m)
        except ValueError:
            if not any(m in ms for ms in ARCH_METHODS.values()):
                bad.append(m)
    if not items or bad:
        extra = f" ({', '.join(map(repr, bad))} unknown)" if bad else ""
        raise argparse.ArgumentTypeError(
            f"--methods must be a comma-separated subset of {','.join(METHODS)} (with --arch ps: "
            f"{','.join(ARCH_METHODS['ps'])}), but got --methods={text!r}{extra}. "
            f"With --suite, also hindsight and tuner:NAME (NAME one of {', '.join(tuner_names())}).")
    return items


def _arch_arg(text: str) -> str:
    if text not in ARCHS:
        raise argparse.ArgumentTypeError(f"--arch must be one of {', '.join(ARCHS)}, but got --arch={text!r}.")
    return text


def _model_arg(text: str) -> str:
    from .emulation import Emulation, is_emulated

    if text == "cnn":
        return text
    if is_emulated(text):
        try:
            Emulation(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"--model {text!r}: {exc}") from None
        return text
    raise argparse.ArgumentTypeError(f"--model must be cnn or emu:NAME (a zoo model), but got --model={text!r}.")


def _suite_arg(text: str) -> str:
    from ._scenarios import SUITES

    if text not in SUITES:
        raise argparse.ArgumentTypeError(f"--suite must be one of {', '.join(SUITES)}, but got --suite={text!r}.")
    return text


def _bench(args: argparse.Namespace) -> int:
    from ..cli import CLIError
    from ._real import BenchPlan, run_bench

    if args.suite is not None:
        if args.arch != "allreduce" or args.model != "cnn":
            raise CLIError(f"--suite runs each scenario on the architecture and model it names (--suite paper-ps on a "
                           f"parameter server), but got --arch={args.arch!r}, --model={args.model!r} with --suite={args.suite!r}.")
        return _bench_suite(args)
    for flag, value in (("--scenarios", args.scenarios), ("--repeats", args.repeats), ("--import", args.imports)):
        if value is not None:
            raise CLIError(f"{flag} goes with --suite NAME, but got {flag}={value!r} without --suite.")
    _check_trace_args(args)
    methods = list(METHODS if args.arch == "allreduce" else ARCH_METHODS["ps"]) if args.methods is None else args.methods
    not_on_arch = [m for m in methods if m not in ARCH_METHODS[args.arch] and m in {x for v in ARCH_METHODS.values() for x in v}]
    if not_on_arch:
        raise CLIError(f"--methods {not_on_arch[0]} does not exist with --arch {args.arch} (its methods: "
                       f"{','.join(ARCH_METHODS[args.arch])}), but got --methods={','.join(methods)!r}.")
    if args.model != "cnn" and args.arch != "ps":
        raise CLIError(f"--model {args.model} (emulated compute) runs with --arch ps here, but got --arch={args.arch!r}.")
    only_suite = [m for m in methods if m not in ARCH_METHODS[args.arch]]
    if only_suite:
        raise CLIError(f"--methods {only_suite[0]} needs --suite NAME (the single-trace bench runs {','.join(METHODS)}), "
                       f"but got --methods={','.join(methods)!r} without --suite.")
    try:
        model_spec = None if args.model == "cnn" else {"model": args.model, "compute_scale": args.compute_scale}
        plan = BenchPlan(low_mbit=args.low_mbit, high_mbit=args.high_mbit, every=args.every, iters=args.iters,
                         methods=methods, bo_iters=args.bo_iters, grid_iters=args.grid_iters, arch=args.arch,
                         model_spec=model_spec)
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    out = args.out or os.path.join("runs", time.strftime("bench-%Y%m%d-%H%M%S"))
    _run(run_bench, plan, out)
    with open(os.path.join(out, "summary.md")) as f:
        print(f.read())
    print(f"raw data, CSV and plot in {out}/")
    return 0


def _bench_suite(args: argparse.Namespace) -> int:
    from ..cli import CLIError
    from ..core.tuners import import_tuners
    from ._suite import SuitePlan, run_suite

    for dest, default in _TRACE_ONLY:
        if getattr(args, dest) != default:
            flag = "--" + dest.replace("_", "-")
            raise CLIError(f"{flag} sets the single-trace bench, not a suite (its scenarios fix it), "
                           f"but got {flag}={getattr(args, dest)!r} with --suite={args.suite!r}.")

    def names(flag: str, text: str | list[str] | None) -> list[str] | None:
        if isinstance(text, list):
            return text
        if text is None:
            return None
        items = [x.strip() for x in text.split(",") if x.strip()]
        if not items:
            raise CLIError(f"{flag} must be a non-empty comma-separated list, but got {flag}={text!r}.")
        return items

    imports = names("--import", args.imports) or []
    try:
        import_tuners(imports)
    except ValueError as exc:
        raise CLIError(f"--import={args.imports!r}: {exc}") from None
    try:
        plan = SuitePlan(suite=args.suite, repeats=args.repeats, methods=names("--methods", args.methods) or list(BASE_METHODS),
                         scenarios=names("--scenarios", args.scenarios), imports=imports)
    except ValueError as exc:
        raise CLIError(f"--{exc}") from None  # SuitePlan's messages start with the argument's name
    out = args.out or os.path.join("runs", time.strftime(f"suite-{args.suite}-%Y%m%d-%H%M%S"))
    _run(run_suite, plan, out)
    with open(os.path.join(out, "suite_summary.md")) as f:
        print(f.read())
    print(f"per-scenario raw data, CSV and plots in {out}/<scenario>/")
    return 0


def _tuner_arg(text: str) -> str:
    from ..core.tuners import tuner_names

    if text not in tuner_names():
        raise argparse.ArgumentTypeError(f"--tuner must be one of {', '.join(tuner_names())}, but got --tuner={text!r}.")
    return text


def _demo_methods_arg(text: str) -> tuple[str, ...]:
    """``demo --methods``: a comma-separated subset of the demo's methods, plain DDP among them."""
    from .demo import METHOD_NAMES

    items = tuple(dict.fromkeys(s.strip() for s in text.split(",") if s.strip()))
    bad = [m for m in items if m not in METHOD_NAMES]
    if not items or bad:
        extra = f" ({', '.join(map(repr, bad))} unknown)" if bad else ""
        raise argparse.ArgumentTypeError(f"--methods must be a comma-separated subset of {','.join(METHOD_NAMES)}, "
                                         f"but got --methods={text!r}{extra}.")
    if "ddp" not in items:
        raise argparse.ArgumentTypeError(f"--methods must include ddp (every speed-up is over plain DDP in the same round), "
                                         f"but got --methods={text!r}.")
    return items


def register_demo(sub: Any) -> None:
    from ..cli import int_arg, out_arg
    from .demo import METHOD_NAMES

    p = sub.add_parser(
        "demo",
        help="train a real model on 2 local workers: DDP, ByteScheduler, AutoByte, DDP + fp16 hook, wire='auto'",
        description="Train a real model with 2 local workers five ways (plain DDP, ByteScheduler's default, AutoByte, "
                    "DDP + fp16_compress_hook, AutoByte with wire='auto') and show what AutoByte chose. Needs nothing but "
                    "this package; as root the workers get an emulated, changing network.",
    )
    _trace_args(p, low_mbit=250.0, high_mbit=500.0, every=20, iters=80)
    p.add_argument("--rounds", type=int_arg("--rounds", 1, 1000), default=3,
                   help="rounds of the runs, for the median and spread (default 3)")
    p.add_argument("--tuner", default="autobyte", type=_tuner_arg,
                   help="tuner of the AutoByte runs: autobyte, bo, grid or static (default autobyte)")
    p.add_argument("--methods", default=METHOD_NAMES, type=_demo_methods_arg,
                   help=f"comma-separated subset of {','.join(METHOD_NAMES)} (default: all; ddp always: every speed-up "
                        "is over it), e.g. ddp,ddp_hook,autobyte_wire for the 16-bit comparison alone")
    p.add_argument("--out", default=None, type=out_arg("--out", kind="dir"), help="output folder (default runs/demo-<time>)")
    p.set_defaults(func=_demo)


def _demo(args: argparse.Namespace) -> int:
    from ..cli import CLIError
    from .demo import DemoPlan, run_demo

    _check_trace_args(args)
    try:
        plan = DemoPlan(iters=args.iters, every=args.every, low_mbit=args.low_mbit, high_mbit=args.high_mbit, tuner=args.tuner,
                        rounds=args.rounds, methods=tuple(args.methods))
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
