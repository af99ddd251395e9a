"""Record a real 2-rank timeline of the scheduled engine and draw it.

    python benchmarks/timeline_real.py [--mbit 1000] [--out docs/figures]

Trains the benchmark CNN for 6 iterations with <1 MiB, 4X> (on a tc-shaped
link with --mbit, as root; loopback otherwise), records iterations 4-5 with
``handle.start_trace()``, and writes ``timeline_rank0.json`` (open it in
Perfetto or chrome://tracing) and ``timeline_rank0.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

SCRIPT = r'''
import json, os, sys, torch, torch.distributed as dist
from autobyte.bench.models import make_cnn, synthetic_batches
from autobyte.integrations.torch import schedule
torch.set_num_threads(1)
dist.init_process_group("gloo")
rank = dist.get_rank()
m = make_cnn(); o = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
h = schedule(m, o, partition_bytes=1 << 20, credit_bytes=4 << 20)
data = synthetic_batches(6, 16, rank)
for i, (x, y) in enumerate(data):
    if i == 4:
        h.synchronize(); h.start_trace()
    o.zero_grad(); torch.nn.functional.cross_entropy(m(x), y).backward(); o.step()
h.synchronize()
if rank == 0:
    h.save_trace(os.path.join(sys.argv[1], "timeline_rank0.json"))
h.close(); dist.destroy_process_group()
'''


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mbit", type=float, default=None)
    ap.add_argument("--out", default="docs/figures")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    out = os.path.abspath(a.out)
    argv = ["-c", SCRIPT, out]
    if a.mbit is None:
        from autobyte.testing import run_ranks

        res = run_ranks(argv, 2, timeout_s=600)
        if any(r.returncode for r in res):
            print(res[0].stderr[-3000:], file=sys.stderr)
            return 1
    else:
        from autobyte.testbed import Testbed

        with Testbed(2, bandwidth_mbit=a.mbit) as tb:
            if tb.run([sys.executable, *argv], timeout_s=600) != 0:
                return 1
    from timeline_plot import plot_trace  # the sibling script (benchmarks/ is sys.path[0] when run as a script)

    with open(os.path.join(out, "timeline_rank0.json")) as f:
        trace = json.load(f)
    link = "loopback" if a.mbit is None else f"{a.mbit:g} Mbit/s link"
    plot_trace(trace, os.path.join(out, "timeline_rank0.png"),
               title=f"Rank 0, 2 iterations of the 3.4M-parameter CNN, <1 MiB, 4X>, {link}")
    print(f"wrote {out}/timeline_rank0.json and timeline_rank0.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
