"""How fast torch casts gradients between fp32 and 16 bits here: the simulator's ``cast_Bps``.

    python benchmarks/cast_rate.py [--numel 4194304] [--threads 1] [--reps 30] [--json]

Times the two passes a 16-bit message costs, as autobyte's torch engine and
DDP's ``bf16_compress_hook`` / ``fp16_compress_hook`` run them on a message of
``--numel`` fp32 gradient elements (default 4 Mi: 16 MiB, a typical message):

* **to 16 bits**: copy the fp32 gradients into the message's 16-bit buffer,
  then divide it by the world size in 16 bits (``buf.copy_(g); buf.div_(2)``);
* **back**: copy the 16-bit sum into the fp32 gradients (``g.copy_(buf)``).

Prints each pass's rate and ``cast_Bps``, in bytes of fp32 gradient per
second of one pass: ``2 * fp32_bytes / (t_to + t_back)``, so that the
simulator's two passes of ``fp32_bytes / cast_Bps`` add up to the measured
time. Median over ``--reps`` after 3 warm-up runs; ``--threads 1`` as the
testbed's ranks run (one thread each).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autobyte._advise_inputs import measure_cast  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--numel", type=int, default=4 << 20, help="fp32 elements of one message (default: 4 Mi = 16 MiB)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default: 1, as a testbed rank)")
    ap.add_argument("--reps", type=int, default=30, help="timed runs per pass (default: 30)")
    ap.add_argument("--json", action="store_true", help="print JSON")
    args = ap.parse_args()
    if args.numel < 1 or args.threads < 1 or args.reps < 1:
        ap.error(f"--numel, --threads and --reps must be positive integers, but got {args.numel}, {args.threads}, {args.reps}.")
    torch.set_num_threads(args.threads)
    out = {"torch": torch.__version__, "threads": args.threads, "numel": args.numel, "load_average": os.getloadavg(),
           "bf16": measure_cast(torch, args.numel, args.reps, torch.bfloat16), "fp16": measure_cast(torch, args.numel, args.reps, torch.float16)}
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    print(f"torch {out['torch']}, {args.threads} thread(s), message of {args.numel} fp32 elements "
          f"({4 * args.numel / 2**20:g} MiB); load average {out['load_average'][0]:.2f}")
    for w in ("bf16", "fp16"):
        r = out[w]
        print(f"{w}: to 16 bits + divide {r['to16_Bps'] / 1e9:.2f} GB/s ({r['to16_s'] * 1e3:.2f} ms), "
              f"back to fp32 {r['back_Bps'] / 1e9:.2f} GB/s ({r['back_s'] * 1e3:.2f} ms); "
              f"cast_Bps = {r['cast_Bps'] / 1e9:.2f} GB/s of fp32 gradient per pass")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
