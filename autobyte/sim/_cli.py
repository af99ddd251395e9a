"""``autobyte simulate``: samples/s of one configuration, or a grid of them, on the simulator."""

from __future__ import annotations

import argparse
import json
from typing import Any


def register(subparsers: Any) -> None:
    from ..cli import float_arg, int_arg
    from ._models import MODELS

    p = subparsers.add_parser(
        "simulate",
        help="simulate scheduled training iterations: samples/s of one config or a grid",
        description="Simulate scheduled training iterations: samples/s of a zoo model under one <partition, credit> "
        "configuration, or a grid of them, on a cluster of N workers and a given link.",
    )
    p.add_argument("--model", default="resnet50", type=_model_arg, metavar="MODEL",
                   help=f"zoo model name, one of {', '.join(MODELS)} (default: resnet50)")
    p.add_argument("--workers", type=int_arg("--workers", 1, 4096), default=8, help="number of workers (default: 8)")
    p.add_argument("--arch", default="allreduce", choices=["allreduce", "ps"],
                   help="all-reduce ring or parameter server (default: allreduce)")
    p.add_argument("--bandwidth-gbps", type=float_arg("--bandwidth-gbps", unit="Gbit/s"), default=10.0,
                   help="link bandwidth per worker, Gbit/s (default: 10)")
    p.add_argument("--partition-bytes", type=int_arg("--partition-bytes"), default=4_000_000,
                   help="partition size in bytes (default: 4000000)")
    p.add_argument("--credit-bytes", type=int_arg("--credit-bytes"), default=None,
                   help="credit size in bytes (default: 4x the partition)")
    p.add_argument("--grid", action="store_true", help="evaluate a grid: partitions 4 KiB..1 GiB (x4 steps) x credit 1,2,4,8,16X")
    p.add_argument("--iters", type=int_arg("--iters", 1, 100_000), default=10, help="iterations simulated (default: 10)")
    p.add_argument("--seed", type=int_arg("--seed", 0, 2**32 - 1), default=0, help="random seed of the simulated jitter (default: 0)")
    p.add_argument("--latency-us", type=float_arg("--latency-us", inclusive=True, unit="microseconds"), default=None,
                   help="one-way latency per hop, microseconds (default: the cluster model's)")
    p.add_argument("--per-message-us", type=float_arg("--per-message-us", inclusive=True, unit="microseconds"), default=None,
                   help="CPU cost per message, microseconds (default: the cluster model's)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=_simulate)


def _model_arg(text: str) -> str:
    from ._models import MODELS, get_model

    try:
        get_model(text)
        return text
    except ValueError:
        raise argparse.ArgumentTypeError(f"--model must be one of {', '.join(MODELS)}, but got --model={text!r}.") from None


def _fail(msg: str) -> int:
    from ..cli import CLIError

    raise CLIError(msg)


def _simulate(args: argparse.Namespace) -> int:
    from ..core.space import Config, GiB, KiB
    from ._cluster import Cluster
    from ._engine import simulate
    from ._models import get_model

    try:
        model = get_model(args.model)
        extra: dict[str, float] = {}
        if args.latency_us is not None:
            extra["latency_s"] = args.latency_us * 1e-6
        if args.per_message_us is not None:
            extra["per_message_s"] = args.per_message_us * 1e-6
        cluster = Cluster.from_gbps(args.workers, args.bandwidth_gbps, args.arch, **extra)
        if args.grid:
            parts = [4 * KiB << (2 * k) for k in range(10) if (4 * KiB << (2 * k)) <= GiB]
            configs = [Config.from_multiple(p, m) for p in parts for m in (1, 2, 4, 8, 16)]
        else:
            credit = args.credit_bytes if args.credit_bytes is not None else 4 * args.partition_bytes
            configs = [Config(args.partition_bytes, credit)]
        rows = []
        for cfg in configs:
            r = simulate(model, cluster, cfg, n_iters=args.iters, seed=args.seed)
            rows.append({
                "partition_bytes": cfg.partition_bytes, "credit_bytes": cfg.credit_bytes,
                "credit_multiple": round(cfg.credit_multiple, 3), "samples_per_s": r.samples_per_s,
                "iter_time_ms": float(r.iter_time_s.mean() * 1e3), "n_messages": r.n_messages,
            })
    except (ValueError, TypeError) as exc:
        return _fail(str(exc))
    best = max(range(len(rows)), key=lambda i: rows[i]["samples_per_s"])
    head = {"model": model.name, "workers": cluster.n_workers, "arch": cluster.arch, "bandwidth_gbps": args.bandwidth_gbps,
            "compute_only_samples_per_s": cluster.n_workers * model.batch_size / model.compute_s}
    if args.json:
        print(json.dumps({**head, "results": rows, "best": rows[best]}, indent=1))
        return 0
    print(f"{model.name}, {cluster.n_workers} workers, {cluster.arch}, {args.bandwidth_gbps:g} Gbit/s "
          f"(compute only: {head['compute_only_samples_per_s']:.1f} samples/s)")
    print(f"{'partition':>14} {'credit':>8} {'samples/s':>11} {'iter ms':>9} {'messages':>9}")
    for i, row in enumerate(rows):
        mark = "  <- best" if i == best and len(rows) > 1 else ""
        print(f"{row['partition_bytes']:>14,d} {row['credit_multiple']:>7g}X {row['samples_per_s']:>11.1f} "
              f"{row['iter_time_ms']:>9.2f} {row['n_messages']:>9d}{mark}")
    return 0
