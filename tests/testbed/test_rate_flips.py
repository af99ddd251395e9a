"""Rate changes under bulk TCP never stall the link.

tbf cannot send a queued packet longer than its bucket, and ``tc qdisc change``
keeps the packets already queued: with a bucket that shrank below a 64 KiB GSO
packet queued at the higher rate, the link stalled for good (gloo timed out
right after a 2000 -> 300 Mbit/s step).
"""

from __future__ import annotations

import time

import pytest

from autobyte.testbed import Testbed

from ._bulk_pair import BulkFlows
from .conftest import needs_root

pytestmark = needs_root

#: High rate, low rate (Mbit/s): the old 66 KB bucket was used below 528 Mbit/s only.
HIGH_MBIT, LOW_MBIT = 1000.0, 300.0
N_CYCLES = 8
N_CONNS = 2


@pytest.mark.timeout(60)
def test_flipping_rates_under_bulk_tcp_never_stalls() -> None:
    with Testbed(2, bandwidth_mbit=HIGH_MBIT) as tb:
        flows = BulkFlows(tb, N_CONNS, 6200)
        try:
            flows.wait_started()
            for cycle in range(N_CYCLES):
                tb.set_rates(HIGH_MBIT)
                time.sleep(0.4)  # long enough for 64 KiB GSO packets to queue behind the 1000 Mbit/s bucket
                tb.set_rates(LOW_MBIT)
                time.sleep(0.5)  # what was in flight drains
                before = [flows.latest(r) for r in range(2)]
                time.sleep(1.0)
                after = [flows.latest(r) for r in range(2)]
                stalled = [(r, i) for r in range(2) for i in range(N_CONNS) if after[r][i] == before[r][i]]
                assert not stalled, (
                    f"cycle {cycle}: no bytes for 1 s on (rank, connection) {stalled} at {LOW_MBIT:g} Mbit/s\n"
                    + tb.network.qdiscs()
                )
        finally:
            flows.close()
