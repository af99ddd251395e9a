"""Rate changes under bulk TCP never stall the link.

tbf cannot send a queued packet longer than its bucket, and ``tc qdisc change``
keeps the packets already queued: with a bucket that shrank below a 64 KiB GSO
packet queued at the higher rate, the link stalled for good (gloo timed out
right after a 2000 -> 300 Mbit/s step).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from autobyte.testbed import Testbed

from .conftest import needs_root

pytestmark = needs_root

HERE = Path(__file__).resolve().parent

#: High rate, low rate (Mbit/s): the old 66 KB bucket was used below 528 Mbit/s only.
HIGH_MBIT, LOW_MBIT = 1000.0, 300.0
N_CYCLES = 8
N_CONNS = 2


@pytest.mark.timeout(60)
def test_flipping_rates_under_bulk_tcp_never_stalls() -> None:
    with Testbed(2, bandwidth_mbit=HIGH_MBIT) as tb:
        procs = [subprocess.Popen(tb.exec_argv(r, [sys.executable, str(HERE / "_bulk_pair.py"), tb.address(r),
                                                   tb.address(1 - r), str(N_CONNS), "6200"]),
                                  stdout=subprocess.PIPE, text=True) for r in range(2)]
        latest: list[list[int]] = [[0] * N_CONNS, [0] * N_CONNS]

        def read(r: int) -> None:
            assert procs[r].stdout is not None
            for line in procs[r].stdout:
                latest[r] = json.loads(line)["recv"]

        for r in range(2):
            threading.Thread(target=read, args=(r,), daemon=True).start()
        try:
            deadline = time.monotonic() + 20
            while not all(all(latest[r]) for r in range(2)):
                assert time.monotonic() < deadline and all(p.poll() is None for p in procs), "bulk flows did not start"
                time.sleep(0.1)
            for cycle in range(N_CYCLES):
                tb.set_rates(HIGH_MBIT)
                time.sleep(0.4)  # long enough for 64 KiB GSO packets to queue behind the 1000 Mbit/s bucket
                tb.set_rates(LOW_MBIT)
                time.sleep(0.5)  # what was in flight drains
                before = [list(x) for x in latest]
                time.sleep(1.0)
                after = [list(x) for x in latest]
                stalled = [(r, i) for r in range(2) for i in range(N_CONNS) if after[r][i] == before[r][i]]
                assert not stalled, (
                    f"cycle {cycle}: no bytes for 1 s on (rank, connection) {stalled} at {LOW_MBIT:g} Mbit/s\n"
                    + "".join(subprocess.run(["tc", "-s", "-n", ns, "qdisc", "show"], capture_output=True, text=True).stdout
                              for ns in [tb.network.bridge_namespace, tb.namespace(0), tb.namespace(1)])
                )
        finally:
            for p in procs:
                p.kill()
                p.wait()
