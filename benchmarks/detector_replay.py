"""The controller's change detector, both of its rules, replayed on real runs with and without ``confirm``.

``benchmarks/speed_rule_calibration.py`` replays the speed rule alone; this script feeds the real
:class:`~autobyte.core.regime.RegimeDetector` what the controller feeds it: every check's speed *and* rank 0's
iteration times in it (the step rule, :func:`~autobyte.core.regime.within_step`, at the tuners' 50%), with
``noise_z`` 3 as AutoByte runs it, ``confirm`` off and at 2 (the default). Runs are cut into checks of ``--check``
iterations from iteration 2 on under one configuration; a check whose iterations span a change of the trace's
condition, or the first check after one, is *across* a change; every other is *clean*. A change the detector reads
at a clean check is a false change, unless it confirms a suspicion raised at the check across a change just before
(then that change is seen, one check late); a change read at a check across one is seen. By default only the static
runs (ByteScheduler's default, hindsight), whose checks are the controller's: a tuned run's configuration changes
between checks, which drops a suspicion here while the controller runs the confirming check on the same one::

    python benchmarks/detector_replay.py SUITE_OUT...   # folders written by autobyte bench --suite ... --out
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from autobyte.bench._suite import read_iterations  # noqa: E402
from autobyte.core.regime import RegimeDetector, within_step  # noqa: E402
from speed_rule_calibration import Tally  # noqa: E402


def replay(rows: list, confirm: float | None, check: int = 5) -> dict[str, int]:
    """Counts over one run's iteration rows (``read_iterations``): false changes, clean checks, seen, across."""
    det = RegimeDetector(0.15, noise_z=3.0, step_change=0.5, confirm=confirm)
    tally = Tally()
    cond = None  # the condition the last check used ended in
    for s in range(2, len(rows) - check + 1, check):
        g = rows[s:s + check]
        if len({r.config for r in g}) > 1:
            continue
        across = len({r.condition for r in g}) > 1 or (cond is not None and cond != g[0].condition)
        times = [r.seconds for r in g]
        settling = det.settling
        read = det.observe(g[0].config, check / sum(times), None, within_step(times))
        read = (read and not settling) or det.settling  # a step's change counts at its check, not again at the next
        tally.add(read, across, det)
        cond = g[-1].condition
    return dict(false=tally.false, clean=tally.clean, seen=tally.seen, across=tally.across)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("inputs", nargs="+", type=Path, help="folders written by autobyte bench --suite")
    ap.add_argument("--check", type=int, default=5, help="iterations per check (5)")
    ap.add_argument("--tuned", action="store_true", help="the tuned runs too (their changes seen are a floor)")
    a = ap.parse_args(argv)
    print("| runs | confirm | false changes / clean checks | changes seen / checks across one |")
    print("|---|---|---:|---:|")
    for path in a.inputs:
        files = sorted(path.glob("*/iterations.csv"))
        if not files:
            raise SystemExit(f"no */iterations.csv under {path}.")
        for confirm in (None, 2.0):
            tot = dict(false=0, clean=0, seen=0, across=0)
            n = 0
            for f in files:
                for (method, _), rows in read_iterations(f).items():
                    if any(r.config is None for r in rows) or (not a.tuned and method not in ("bytescheduler", "hindsight")):
                        continue
                    n += 1
                    for k, v in replay(rows, confirm, a.check).items():
                        tot[k] += v
            print(f"| {path.name} ({n} runs) | {'off' if confirm is None else confirm} | {tot['false']} / {tot['clean']} "
                  f"| {tot['seen']} / {tot['across']} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
