"""What one bulk TCP connection each way gets through the testbed's shaped link, per rate.

    python benchmarks/bulk_rate.py [--rates 2000,1000,500,250] [--seconds 3]

As root. The measurement of tests/testbed/test_bulk_rate.py with figures:
received Mbit/s in each direction, its share of the configured rate, the
longest time without progress, and TCP retransmission timeouts.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autobyte.testbed import Testbed  # noqa: E402
from tests.testbed._bulk_pair import BulkFlows  # noqa: E402
from tests.testbed.test_bulk_rate import _tcp_timeouts  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", default="2000,1000,500,250")
    ap.add_argument("--seconds", type=float, default=3.0)
    args = ap.parse_args()
    rates = [float(r) for r in args.rates.split(",")]
    print(f"load averages: {open('/proc/loadavg').read().split()[:3]}")
    print("| configured | rank 0 receives | rank 1 receives | share | longest stall | TCP timeouts |")
    print("|---|---:|---:|---:|---:|---:|")
    with Testbed(2, bandwidth_mbit=rates[0]) as tb:
        flows = BulkFlows(tb, 1, 6400)
        try:
            flows.wait_started()
            for rate in rates:
                tb.set_rates(rate)
                time.sleep(0.7)
                to0 = [_tcp_timeouts(tb.namespace(r)) for r in range(2)]
                start = [len(flows.samples[r]) for r in range(2)]
                time.sleep(args.seconds)
                to = [_tcp_timeouts(tb.namespace(r)) - to0[r] for r in range(2)]
                mbit, stall = [], 0.0
                for r in range(2):
                    w = flows.samples[r][start[r] - 1:]
                    mbit.append((w[-1][1][0] - w[0][1][0]) * 8 / (w[-1][0] - w[0][0]) / 1e6)
                    since = w[0][0]
                    for (_, prev), (t, now) in zip(w, w[1:]):
                        if now[0] > prev[0]:
                            since = t
                        stall = max(stall, t - since)
                print(f"| {rate:g} Mbit/s | {mbit[0]:.0f} | {mbit[1]:.0f} | {min(mbit) / rate:.1%} | {stall:.2f} s | {sum(to)} |")
        finally:
            flows.close()
    print(f"load averages after: {open('/proc/loadavg').read().split()[:3]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
