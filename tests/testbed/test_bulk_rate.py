"""The shaped link never carries more than its rate and never drops into a TCP retransmission timeout.

One TCP connection each way between the two worker namespaces, at the
demo's two rates: neither direction receives more than 102% of the
configured rate (the shaper is a cap, whatever the load), and neither
namespace counts a retransmission timeout. How close to the rate bulk
TCP gets (90-102% on an idle host) and the longest time without
progress depend on whether the receiving thread gets a core, so they are
measured, with figures, by ``benchmarks/bulk_rate.py``, not asserted here.
"""

from __future__ import annotations

import subprocess
import time

import pytest

from autobyte.bench.demo import DemoPlan
from autobyte.testbed import Testbed

from ._bulk_pair import BulkFlows
from .conftest import needs_root

pytestmark = needs_root

RATES_MBIT = (DemoPlan.high_mbit, DemoPlan.low_mbit)
SETTLE_S, MEASURE_S = 1.0, 2.0


def _tcp_timeouts(ns: str) -> int:
    """``TCPTimeouts`` of namespace ``ns`` (``/proc/net/netstat`` reads the reader's namespace)."""
    text = subprocess.run(["ip", "netns", "exec", ns, "cat", "/proc/net/netstat"], capture_output=True, text=True,
                          check=True).stdout.splitlines()
    for names, values in zip(text[::2], text[1::2]):
        if names.startswith("TcpExt:"):
            return int(dict(zip(names.split()[1:], values.split()[1:]))["TCPTimeouts"])
    raise AssertionError("no TcpExt line in /proc/net/netstat")


@pytest.mark.timeout(60)
def test_bulk_tcp_never_exceeds_the_configured_rate_nor_times_out() -> None:
    with Testbed(2, bandwidth_mbit=RATES_MBIT[0]) as tb:
        flows = BulkFlows(tb, 1, 6300)
        try:
            flows.wait_started()
            for rate in RATES_MBIT:
                tb.set_rates(rate)
                time.sleep(SETTLE_S)  # what was queued at the previous rate drains; TCP finds the new rate
                timeouts0 = [_tcp_timeouts(tb.namespace(r)) for r in range(2)]
                start = [len(flows.samples[r]) for r in range(2)]
                time.sleep(MEASURE_S)
                timeouts = [_tcp_timeouts(tb.namespace(r)) - timeouts0[r] for r in range(2)]
                for r in range(2):
                    (t0, b0), (t1, b1) = flows.samples[r][start[r] - 1], flows.samples[r][-1]
                    assert b1[0] > b0[0], f"rank {r} received nothing in {MEASURE_S:g} s at {rate:g} Mbit/s"
                    mbit = (b1[0] - b0[0]) * 8 / (t1 - t0) / 1e6
                    assert mbit <= 1.02 * rate, f"rank {r} received {mbit:.0f} Mbit/s on a {rate:g} Mbit/s link"
                assert timeouts == [0, 0], f"TCP retransmission timeouts per namespace at {rate:g} Mbit/s: {timeouts}"
        finally:
            flows.close()
