"""``autobyte calibrate`` and ``autobyte collect``: real measurements on the testbed (experiments, so they live in bench).

``calibrate`` fits the simulator to real training; ``collect`` writes real
windows in the simulator dataset's format for the meta-network (or, with
``--evaluate``, scores the meta-network on them). Both need root (network
namespaces, :mod:`autobyte.testbed`).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from ..testbed._state import TestbedError


def register(subparsers: Any) -> None:
    _register_calibrate(subparsers)
    _register_collect(subparsers)


def _fail(msg: str, code: int = 2) -> int:
    """Report through the one CLI error path (:class:`autobyte.cli.CLIError`): one line, exit ``code``."""
    from ..cli import CLIError

    raise CLIError(msg, code)


#: Wall seconds per measured segment on the 2-core reference host (docs/calibration.md: 160 segments, ~11 min).
_SEGMENT_WALL_S = 11 * 60 / 160


def _calibrate_epilog() -> str:
    from .calibrate import CalibrationPlan

    full, quick = CalibrationPlan(), CalibrationPlan.quick()

    def size(plan: CalibrationPlan) -> str:
        n = len(plan.rates_mbit) * len(plan.configs) * plan.reps
        return (f"{len(plan.rates_mbit)} rate{'s' if len(plan.rates_mbit) > 1 else ''} x {len(plan.configs)} configs x "
                f"{plan.reps} repetition{'s' if plan.reps > 1 else ''}, ~{max(1, round(n * _SEGMENT_WALL_S / 60))} min")

    return ("examples:\n"
            f"  autobyte calibrate --out runs/calib                 (full grid: {size(full)})\n"
            f"  autobyte calibrate --out runs/calib-quick --quick   (smoke: {size(quick)})\n"
            "  autobyte calibrate --out runs/refit --from-raw runs/calib/raw   (re-fit and redraw, no measuring)\n")


def _register_calibrate(subparsers: Any) -> None:
    from ..cli import file_arg, float_arg, int_arg, out_arg, rates_arg
    from .calibrate import CalibrationPlan

    full, quick = CalibrationPlan(), CalibrationPlan.quick()
    p = subparsers.add_parser(
        "calibrate",
        help="fit the simulator to real training on the testbed and report its error (needs root)",
        description="Measure 2-worker training over a grid of link rates x configs on the testbed, fit the simulator's "
                    "per-message overhead, latency, link efficiency and compute model, and report the error. "
                    "See docs/calibration.md.",
        epilog=_calibrate_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--out", required=True, type=out_arg("--out", kind="dir"),
                   help="output folder (raw data, CSV, params.json, errors.md, figures)")
    p.add_argument("--quick", action="store_true",
                   help=f"smoke run: {len(quick.rates_mbit)} rate, {len(quick.configs)} configs, {quick.reps} repetition")
    p.add_argument("--reps", type=int_arg("--reps", 1, 1000), default=None,
                   help=f"repetitions of every grid point (default {full.reps}; {quick.reps} with --quick)")
    p.add_argument("--rates-mbit", type=rates_arg("--rates-mbit"), default=None,
                   help=f"comma-separated link rates, Mbit/s (default {','.join(f'{r:g}' for r in full.rates_mbit)})")
    p.add_argument("--from-raw", metavar="DIR", type=file_arg("--from-raw", kind="dir"), default=None,
                   help="re-fit from a previous run's raw/ folder instead of measuring")
    p.add_argument("--starts", type=int_arg("--starts", 1, 1000), default=3, help="least-squares starts (default 3)")
    p.add_argument("--timeout-s", type=float_arg("--timeout-s", unit="seconds"), default=1800.0,
                   help="stop the measurement after this many seconds (default 1800)")
    p.set_defaults(func=_calibrate)


def _calibrate(args: argparse.Namespace) -> int:
    import dataclasses

    from .calibrate import CalibrationPlan, run_calibration

    try:
        plan = CalibrationPlan.quick() if args.quick else CalibrationPlan()
        if args.reps is not None:
            plan = dataclasses.replace(plan, reps=args.reps, passes=min(plan.passes, args.reps))
        if args.rates_mbit is not None:
            plan = dataclasses.replace(plan, rates_mbit=args.rates_mbit)
    except ValueError as exc:
        return _fail(str(exc))
    try:
        if args.from_raw is None:
            from ..testbed._netns import require_root

            require_root()
        run_calibration(plan, args.out, from_raw=args.from_raw, n_starts=args.starts, timeout_s=args.timeout_s)
    except (ValueError, TypeError, FileNotFoundError) as exc:
        return _fail(str(exc))
    except (TestbedError, OSError, RuntimeError) as exc:
        return _fail(str(exc), 1)
    with open(os.path.join(args.out, "errors.md")) as f:
        print(f.read())
    return 0


def _register_collect(subparsers: Any) -> None:
    from .collect import COLLECT_RATES_MBIT
    from ..cli import file_arg, int_arg, out_arg, rates_arg

    p = subparsers.add_parser(
        "collect",
        help="real samples for the meta-network on the testbed (needs root); --evaluate: its error before/after fine-tuning",
        description="Measure real 2-worker training windows over link rates x configs on the testbed and write them in the "
                    "simulator dataset's format; or, with --evaluate, score the meta-network on held-out real windows "
                    "before and after fine-tuning on the others. See docs/calibration.md.",
        epilog="examples:\n  autobyte collect --out runs/real\n"
               "  autobyte collect --evaluate runs/real/raw --weights meta.weights.npz --holdout rep\n"
               "  autobyte collect --finetune runs/real/raw --weights-out my-cluster.npz\n"
               "  autobyte collect --evaluate runs/other/raw --weights my-cluster.npz --holdout online\n",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--out", type=out_arg("--out", kind="dir"), help="output folder (raw/ and data/)")
    p.add_argument("--rates-mbit", type=rates_arg("--rates-mbit"), default=None,
                   help=f"comma-separated link rates, Mbit/s (default {','.join(f'{r:g}' for r in COLLECT_RATES_MBIT)})")
    p.add_argument("--reps", type=int_arg("--reps", 1, 1000), default=2, help="repetitions (conditions per rate; default 2)")
    p.add_argument("--window-iters", type=int_arg("--window-iters", 2, 10_000), default=10,
                   help="measured iterations per window (default 10)")
    p.add_argument("--model", default="cnn", choices=("cnn", "transformer", "mlp"),
                   help="the model trained (autobyte.bench.models; default cnn)")
    p.add_argument("--evaluate", nargs="+", metavar="RAW", type=file_arg("--evaluate", kind="dir"),
                   help="instead of measuring: evaluate the meta-network on these raw/ folders")
    p.add_argument("--finetune", nargs="+", metavar="RAW", type=file_arg("--finetune", kind="dir"),
                   help="instead of measuring: fine-tune the meta-network's head on every window of these raw/ folders "
                        "and write the weights to --weights-out (for AutoByteTuner(weights=...))")
    p.add_argument("--weights-out", default=None, type=out_arg("--weights-out", suffix=".npz"),
                   help="with --finetune: where to write the fine-tuned weights (.npz)")
    p.add_argument("--weights", default=None, type=file_arg("--weights"),
                   help="meta-network weights for --evaluate / --finetune (default: the shipped ones)")
    p.add_argument("--holdout", default="rep", choices=("rep", "rate", "online"),
                   help="held-out windows for --evaluate (default rep); online: every window as a live tuner meets it, "
                        "before adapting and after --n-observed windows of its condition")
    p.add_argument("--n-observed", type=int_arg("--n-observed", 1, 1000), default=5,
                   help="with --holdout online: windows seen before the head adapts (default 5)")
    p.add_argument("--report", default=None, type=out_arg("--report"), help="with --evaluate: write the result as JSON here")
    p.set_defaults(func=_collect)


def _collect(args: argparse.Namespace) -> int:
    import json

    try:
        if args.finetune:
            from .collect import finetune_meta, read_measurement
            from ..meta._cli import _check_weights

            if args.evaluate or args.out:
                return _fail("--finetune RAW goes alone: not with --evaluate or --out.")
            if not args.weights_out:
                return _fail("--finetune RAW needs --weights-out FILE.npz (where to write the fine-tuned weights).")
            _check_weights(args.weights)
            for raw in args.finetune:
                read_measurement(raw)
            res = finetune_meta(args.finetune, args.weights_out, weights=args.weights)
            if args.report:
                with open(args.report, "w") as f:
                    json.dump(res, f, indent=1)
            return 0
        if args.weights_out is not None:
            return _fail("--weights-out goes with --finetune RAW.")
        if args.evaluate:
            from .collect import evaluate_meta, read_measurement
            from ..meta._cli import _check_weights

            _check_weights(args.weights)
            for raw in args.evaluate:  # a bad raw folder is reported before the network loads
                read_measurement(raw)
            if args.holdout == "online":
                from .collect import evaluate_meta_online

                res = evaluate_meta_online(args.evaluate, weights=args.weights, n_observed=args.n_observed)
            else:
                res = evaluate_meta(args.evaluate, weights=args.weights, holdout=args.holdout)
            if args.report:
                with open(args.report, "w") as f:
                    json.dump(res, f, indent=1)
            print(json.dumps(res, indent=1))
            return 0
        if not args.out:
            return _fail("give --out DIR (where to write the samples) or --evaluate RAW.")
        if args.weights is not None or args.report is not None:
            return _fail("--weights and --report go with --evaluate RAW, not with --out.")
        from .collect import COLLECT_RATES_MBIT, collect
        from ..testbed._netns import require_root

        rates = COLLECT_RATES_MBIT if args.rates_mbit is None else args.rates_mbit
        require_root()
        collect(args.out, rates_mbit=rates, reps=args.reps, window_iters=args.window_iters, model=args.model)
    except (ValueError, TypeError, FileNotFoundError) as exc:
        return _fail(str(exc))
    except (TestbedError, OSError, RuntimeError) as exc:
        return _fail(str(exc), 1)
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m autobyte.bench._measure_cli calibrate|collect ...`` (spares the other subsystems' imports)."""
    from ..cli import Parser, dispatch, parse, tag_progs

    parser = Parser(prog="autobyte")
    register(parser.add_subparsers(dest="command"))
    tag_progs(parser)
    args = parse(parser, list(sys.argv[1:] if argv is None else argv))
    return args if isinstance(args, int) else dispatch(args)


if __name__ == "__main__":
    sys.exit(main())
