"""``autobyte advise``: DDP's bucket size and autobyte's schedule for a model and a link, from the simulator."""

from __future__ import annotations

import argparse
import importlib
import json
import math
from typing import Any


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "advise",
        help="the bucket_cap_mb a DDP user should run (and autobyte's partition/credit), from the simulator",
        description="Advise DDP's bucket_cap_mb and autobyte's <partition, credit> for a model, a number of workers "
        "and a link, with predicted iteration time and samples/s against DDP's default and the compute-only bound, "
        "and how the advice moves with bandwidth. Every prediction comes from the simulator (docs/advise.md).",
    )
    m = p.add_mutually_exclusive_group()
    m.add_argument("--model", default=None, help="zoo model name (V100 compute; default: resnet50)")
    m.add_argument("--module", default=None, metavar="PKG.MOD:FACTORY",
                   help="a torch.nn.Module factory to import and call with no argument; profiled on this machine")
    p.add_argument("--input-shape", default=None, metavar="B,C,...", help="with --module: shape of one float input batch")
    p.add_argument("--input-int", type=int, default=None, metavar="HIGH",
                   help="with --module: integer inputs in [0, HIGH) (token ids) instead of floats")
    p.add_argument("--device", default=None, help="with --module: a named device's compute model instead of "
                   "measuring here (v100: roofline of the module's FLOPs)")
    p.add_argument("--profile-runs", type=int, default=3, help="with --module: measured runs (default: 3)")
    p.add_argument("--workers", type=int, default=8, help="data-parallel workers, 2 to 4096 (default: 8)")
    bw = p.add_mutually_exclusive_group()
    bw.add_argument("--bandwidth-gbps", type=float, default=None, help="link per worker, Gbit/s (default: 10)")
    bw.add_argument("--bandwidth-mbit", type=float, default=None, help="link per worker, Mbit/s")
    p.add_argument("--latency-us", type=float, default=None, help="one-way latency per hop, microseconds (default: 25)")
    p.add_argument("--per-message-us", type=float, default=None, help="cost per bucket/message, microseconds (default: 100)")
    p.add_argument("--arch", default="allreduce", choices=["allreduce", "ps"],
                   help="all-reduce (DDP and autobyte's engine; default) or ps (autobyte's engine on a parameter server)")
    p.add_argument("--batch-size", type=int, default=None, help="samples per worker (default: the zoo's / the input's)")
    p.add_argument("--compute-scale", type=float, default=1.0,
                   help="multiply compute times (e.g. 0.05 for a device 20x faster than the one profiled)")
    p.add_argument("--calibration", default=None, metavar="testbed|CALIB_PARAMS_JSON",
                   help="link model (latency, per-message cost, contention, goodput): testbed (fitted on this project's "
                   "testbed, shipped) or a calib_params.json fitted by benchmarks/calibrate.py on your network")
    p.add_argument("--caps", default=None, metavar="MB,MB,...", help="bucket_cap_mb values to choose from")
    p.add_argument("--first-bucket-mb", type=float, default=None,
                   help="first bucket under an explicit bucket_cap_mb (default: as this PyTorch, the same size; "
                   "1 for releases that always kept a 1 MiB first bucket)")
    p.add_argument("--sensitivity", default=None, metavar="GBPS,GBPS,...",
                   help="bandwidths of the sensitivity table (default: 0.1x..10x the link)")
    p.add_argument("--no-sensitivity", action="store_true", help="skip the sensitivity table")
    p.add_argument("--no-engine", action="store_true", help="advise DDP only")
    p.add_argument("--wire16", default="bf16", metavar="bf16|fp16|none",
                   help="16-bit precision predicted beside fp32: DDP + its compress hook and autobyte's engine at "
                   "wire=... (default: bf16; none: no 16-bit lines)")
    p.add_argument("--json", action="store_true", help="print JSON instead of the screen")
    p.set_defaults(func=_advise)


def _fail(msg: str) -> int:
    """Report through the one CLI error path (:class:`autobyte.cli.CLIError`): one line, exit 2."""
    from .cli import CLIError

    raise CLIError(msg, 2)


def _floats(name: str, text: str) -> list[float]:
    try:
        vals = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"{name} must be a comma-separated list of positive numbers, but got {name}={text!r}.") from None
    if not vals or any(not math.isfinite(v) or v <= 0 for v in vals):
        raise ValueError(f"{name} must be a comma-separated list of positive numbers, but got {name}={text!r}.")
    return vals


def _load_module(spec: str, shape_text: str | None, high: int | None) -> tuple[Any, Any]:
    if ":" not in spec or not all(spec.partition(":")[::2]):
        raise ValueError(f"--module must be PKG.MOD:FACTORY (a callable returning a torch.nn.Module), but got --module={spec!r}.")
    modname, _, attr = spec.partition(":")
    try:
        factory = getattr(importlib.import_module(modname), attr)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"--module must name an importable factory, but got --module={spec!r} ({type(exc).__name__}: {exc}).") from None
    if shape_text is None:
        raise ValueError("--input-shape must be given with --module (e.g. 32,3,224,224), but got --input-shape=None.")
    try:
        shape = [int(x) for x in shape_text.split(",")]
    except ValueError:
        shape = []
    if not shape or any(s <= 0 for s in shape):
        raise ValueError(f"--input-shape must be comma-separated positive integers, but got --input-shape={shape_text!r}.")
    if high is not None and high <= 0:
        raise ValueError(f"--input-int must be a positive integer, but got --input-int={high!r}.")
    try:
        module = factory()
    except Exception as exc:  # noqa: BLE001 - the user's factory failed: report it as such
        raise ValueError(f"--module factory {spec!r} failed: {type(exc).__name__}: {exc}") from None
    import torch

    x = torch.randint(0, high, shape) if high is not None else torch.randn(*shape)
    return module, x


def _advise(args: argparse.Namespace) -> int:
    from ._advise import MAX_WORKERS, advise
    from .sim import MODELS

    try:
        if args.bandwidth_mbit is not None:
            if not math.isfinite(args.bandwidth_mbit) or args.bandwidth_mbit <= 0:
                raise ValueError(f"--bandwidth-mbit must be a positive number, but got --bandwidth-mbit={args.bandwidth_mbit!r}.")
            gbps = args.bandwidth_mbit / 1000.0
        else:
            gbps = 10.0 if args.bandwidth_gbps is None else args.bandwidth_gbps
            if not math.isfinite(gbps) or gbps <= 0:
                raise ValueError(f"--bandwidth-gbps must be a positive number, but got --bandwidth-gbps={gbps!r}.")
        if args.workers < 2:
            raise ValueError(f"--workers must be an integer >= 2, but got --workers={args.workers!r}.")
        if args.workers > MAX_WORKERS:
            raise ValueError(f"--workers must be an integer in [2, {MAX_WORKERS}], but got --workers={args.workers!r}.")
        for flag, v in (("--latency-us", args.latency_us), ("--per-message-us", args.per_message_us)):
            if v is not None and (not math.isfinite(v) or v < 0):
                raise ValueError(f"{flag} must be a non-negative number, but got {flag}={v!r}.")
        if args.profile_runs < 1:
            raise ValueError(f"--profile-runs must be a positive integer, but got --profile-runs={args.profile_runs!r}.")
        if args.batch_size is not None and args.batch_size < 1:
            raise ValueError(f"--batch-size must be a positive integer, but got --batch-size={args.batch_size!r}.")
        if not math.isfinite(args.compute_scale) or args.compute_scale <= 0:
            raise ValueError(f"--compute-scale must be a positive number, but got --compute-scale={args.compute_scale!r}.")
        if args.first_bucket_mb is not None and (not math.isfinite(args.first_bucket_mb) or args.first_bucket_mb <= 0):
            raise ValueError(f"--first-bucket-mb must be a positive number, but got --first-bucket-mb={args.first_bucket_mb!r}.")
        if args.module is None and (args.input_shape is not None or args.input_int is not None):
            raise ValueError("--input-shape and --input-int go with --module, but got them without --module.")
        if args.device is not None and args.module is None:
            raise ValueError(f"--device goes with --module (the zoo is V100 already), but got --device={args.device!r} without --module.")
        if args.module is None and args.model is not None and args.model not in MODELS:
            raise ValueError(f"--model must be one of {', '.join(sorted(MODELS))}, but got --model={args.model!r}.")
        if args.wire16 not in ("bf16", "fp16", "none"):
            raise ValueError(f"--wire16 must be one of bf16, fp16, none, but got --wire16={args.wire16!r}.")
        kw: dict[str, Any] = {"wire16": None if args.wire16 == "none" else args.wire16}
        if args.caps is not None:
            kw["bucket_caps_mb"] = _floats("--caps", args.caps)
        if args.sensitivity is not None:
            kw["sensitivity"] = _floats("--sensitivity", args.sensitivity)
        if args.no_sensitivity:
            kw["sensitivity"] = False
        if args.module is not None:
            model, x = _load_module(args.module, args.input_shape, args.input_int)
        else:
            model, x = (args.model or "resnet50"), None
        advice = advise(
            model, x, n_workers=args.workers, bandwidth_gbps=gbps, arch=args.arch, batch_size=args.batch_size,
            compute_scale=args.compute_scale, calibration=args.calibration,
            latency_s=None if args.latency_us is None else args.latency_us * 1e-6,
            per_message_s=None if args.per_message_us is None else args.per_message_us * 1e-6,
            engine=not args.no_engine, profile_runs=args.profile_runs, first_bucket_mb=args.first_bucket_mb, device=args.device, **kw,
        )
    except (ValueError, TypeError, OSError) as exc:
        return _fail(str(exc))
    if args.json:
        print(json.dumps(advice.to_dict(), indent=1))
    else:
        print(advice)
    return 0
