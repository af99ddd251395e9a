"""Which link rates make the demo's plain DDP link-bound: unshaped vs shaped iteration time.

    python benchmarks/demo_rates.py [--rates 2000,1000,500,250] [--rounds 2] [--iters 30]

As root. Runs the demo's Lightning DDP job (one intra-op thread per worker)
in network namespaces, unshaped and at each rate, rates interleaved round by
round (so the load of a shared machine hits them alike). For each it prints
the median seconds per iteration (first 3 iterations left out), its ratio to
the unshaped median, and the wire time of one iteration at that rate: a
2-rank ring all-reduce sends the 13.6 MB of gradients once each way per
iteration. A rate is link-bound when the shaped iteration is clearly slower
than the unshaped one (the host alone would be faster) — the demo's rates
should be link-bound in both phases.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import tempfile

GRADIENT_BYTES = 3_404_170 * 4


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", default="2000,1000,500,250", help="comma-separated Mbit/s")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--method", default="ddp", choices=["ddp", "static"], help="static: the engine at <4 MB, 4X>")
    args = ap.parse_args()

    from autobyte.testbed import Testbed

    rates: list[float | None] = [None] + [float(r) for r in args.rates.split(",")]
    got: dict[float | None, list[float]] = {r: [] for r in rates}
    loads = [open("/proc/loadavg").read().split()[0]]
    with tempfile.TemporaryDirectory() as tmp:
        for rnd in range(args.rounds):
            for rate in rates:
                out = os.path.join(tmp, f"{rnd}-{rate}")
                spec = {"method": args.method, "iters": args.iters, "config": [4_000_000, 16_000_000]}
                with Testbed(2, bandwidth_mbit=rate) as tb:
                    rc = tb.run([sys.executable, "-m", "autobyte.bench.lightning_job", json.dumps(spec), out],
                                timeout_s=900, env={"PYTHONWARNINGS": "ignore"}, stdout=io.StringIO())
                if rc != 0:
                    print(f"job at {rate} Mbit/s failed ({rc})", file=sys.stderr)
                    return 1
                with open(os.path.join(out, "iterations.jsonl")) as f:
                    got[rate] += [json.loads(line)["seconds"] for line in f][3:]
                loads.append(open("/proc/loadavg").read().split()[0])
    base = statistics.median(got[None])
    print(f"{args.method}, {args.rounds} rounds x {args.iters} iterations; 1-min load averages during the run: {', '.join(loads)}")
    print("| link | median s/it | p90 | vs unshaped | wire time of one iteration |")
    print("|---|---:|---:|---:|---:|")
    for rate in rates:
        s = sorted(got[rate])
        wire = "-" if rate is None else f"{GRADIENT_BYTES * 8 / (rate * 1e6):.3f} s"
        label = "unshaped" if rate is None else f"{rate:g} Mbit/s"
        print(f"| {label} | {statistics.median(s):.3f} | {s[int(0.9 * len(s))]:.3f} | {statistics.median(s) / base:.2f}x | {wire} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
