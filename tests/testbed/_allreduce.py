"""Test helper run by ``autobyte launch``: a few gloo all-reduces, one per iteration.

Each rank contributes ``rank + 1``; every result must equal ``n (n + 1) / 2``.
Rank 0 notifies the testbed of each iteration (so a trace can change the rate
between them) and prints one JSON line with the check and the address gloo used.
"""

from __future__ import annotations

import json
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

from autobyte.testbed import notify_iteration

N_ITERS = int(sys.argv[1]) if len(sys.argv) > 1 else 4


def main() -> int:
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    expected = world * (world + 1) / 2
    ok = True
    for k in range(N_ITERS):
        if rank == 0:
            notify_iteration(k)
        t = torch.full((1 << 18,), float(rank + 1))
        dist.all_reduce(t)
        ok = ok and bool(torch.all(t == expected))
    # which local address do peers see? gather it through the same collective engine
    addrs = [None] * world
    dist.all_gather_object(addrs, os.environ["AUTOBYTE_TESTBED_ADDRS"].split(",")[rank])
    dist.destroy_process_group()
    if rank == 0:
        print(json.dumps({"ok": ok, "world": world, "addrs": addrs, "ifname": os.environ["GLOO_SOCKET_IFNAME"]}), flush=True)
    return 0 if ok else 3


if __name__ == "__main__":
    sys.exit(main())
