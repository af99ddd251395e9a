"""Plain DDP vs the scheduled engine, side by side in one run on 2 CPU ranks (gloo).

    python benchmarks/bench_torch_engine.py [--rounds 5] [--iters 20] [--quick] [--mbit R] [--ready-order]

Modes are interleaved round by round inside the same two processes; the
table gives the median samples/s of each mode and its ratio to DDP. (a) is
the engine at DDP's own operating point (25 MiB partitions, no credit
limit); (b) a small grid of partition and credit sizes. The engine runs under
``tuner="static"`` (window checks, never a move), so it issues messages in
ByteScheduler's priority order estimated from the measured layer times, as
under any tuner; ``--ready-order`` runs it without a tuner, in the gradients'
ready order.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

from autobyte.testing import run_ranks
from autobyte.core import KiB, MiB, UNLIMITED

GRID = [
    [25 * MiB, UNLIMITED],
    [4 * MiB, 16 * MiB],  # ByteScheduler's default (1M / 4M float32 parameters, rounded)
    [1 * MiB, 4 * MiB],
    [256 * KiB, 1 * MiB],
    [256 * KiB, 256 * KiB],
    [64 * KiB, 256 * KiB],
    [16 * KiB, 64 * KiB],
]


def _label(mode) -> str:
    if mode == "ddp":
        return "plain DDP (25 MiB buckets)"
    p, c = mode
    credit = "unlimited" if c >= UNLIMITED else f"{c / p:g}X"
    unit = f"{p // MiB} MiB" if p >= MiB else f"{p // KiB} KiB"
    return f"scheduled <{unit}, {credit}>"


def run_on_link(argv: list[str], mbit: float | None, timeout_s: float = 3600.0) -> str | None:
    """Run ``python *argv`` as 2 ranks and return rank 0's standard output (``None``: a rank failed, said on stderr).

    ``mbit=None``: local processes over loopback; otherwise each rank in a network namespace of the
    testbed, on a link shaped to ``mbit`` Mbit/s (needs root).
    """
    if mbit is None:
        res = run_ranks(argv, 2, timeout_s=timeout_s)
        for r in res:
            if r.returncode != 0:
                print(r.stderr[-4000:], file=sys.stderr)
                return None
        return res[0].stdout
    import io

    from autobyte.testbed import Testbed

    buf = io.StringIO()
    with Testbed(2, bandwidth_mbit=mbit) as tb:
        if tb.run([sys.executable, *argv], timeout_s=timeout_s, stdout=buf) != 0:
            print(buf.getvalue()[-4000:], file=sys.stderr)
            return None
    # rank 0's lines (the testbed prefixes every line with its worker)
    return "\n".join(line.split("] ", 1)[-1] for line in buf.getvalue().splitlines() if line.startswith("[w0] "))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--quick", action="store_true", help="DDP vs its operating point only, 2 rounds")
    ap.add_argument("--mbit", type=float, default=None,
                    help="run the two ranks in network namespaces on a link shaped to this rate (needs root; default: loopback)")
    ap.add_argument("--ready-order", action="store_true",
                    help="the engine without a tuner: messages in the gradients' ready order, no priority estimate")
    args = ap.parse_args()
    modes = ["ddp"] + (GRID[:1] if args.quick else GRID)
    rounds = 2 if args.quick else args.rounds
    opts = {"modes": modes, "rounds": rounds, "iters": args.iters, "batch_size": args.batch_size,
            "tuner": None if args.ready_order else "static"}
    argv = [os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_ranks.py"), json.dumps(opts)]
    out = run_on_link(argv, args.mbit)
    if out is None:
        return 1
    print(f"link: {'loopback (unshaped)' if args.mbit is None else f'{args.mbit:g} Mbit/s, network namespaces'}; "
          f"engine order: {'ready order (no tuner)' if args.ready_order else 'priority, estimated (tuner=static)'}")
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    base = statistics.median(rows[0]["samples_per_s"])
    print(f"| mode | samples/s (median of {rounds}) | vs DDP |")
    print("|---|---:|---:|")
    for row in rows:
        med = statistics.median(row["samples_per_s"])
        print(f"| {_label(row['mode'])} | {med:.1f} | {med / base:.3f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
