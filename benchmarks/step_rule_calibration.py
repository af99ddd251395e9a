"""How the detector's step rule (``core.regime.within_step``) reads real runs: false alarms and changes seen.

Reads the per-iteration times of a real suite's runs (``iterations.csv`` of each scenario: one row per iteration
with its wall time and the trace condition it ran in) and cuts every run into groups of ``--check`` consecutive
iterations under one configuration, as the controller's checks are. A group whose iterations all ran in one
condition is *clean*; one that spans a change of condition is *mixed*. For each threshold, the share of clean
groups whose step exceeds it (a false alarm: a clean measurement dropped and a spurious change) and the share of
mixed groups it catches (a mixed measurement dropped instead of filed)::

    python benchmarks/step_rule_calibration.py runs/full   # a folder of autobyte bench --suite full --out runs/full

The groups start at iteration 2 (after the warm-up), every ``--check`` iterations (``--all-offsets``: at every
alignment in turn); the controller's real checks restart after each reconfiguration, so this is a sample of checks,
not the checks themselves.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autobyte.bench._suite import read_iterations  # noqa: E402
from autobyte.core.regime import within_step  # noqa: E402


def groups(suite: Path, check: int, min_side: int = 2, offsets: int = 1) -> tuple[list[float], list[float]]:
    """Steps (log units, absolute) of clean and of mixed groups over every run of ``suite``.

    ``offsets``: the groups start at iterations 2, 3, ... ``2 + offsets - 1`` in turn (every alignment of the
    checks against the trace's changes when it is ``check``), each a sample of its own.
    """
    clean: list[float] = []
    mixed: list[float] = []
    files = sorted(suite.glob("*/iterations.csv"))
    if not files:
        raise SystemExit(f"no */iterations.csv under {suite}: give a folder written by `autobyte bench --suite`.")
    for f in files:
        for its, off in ((rows, off) for rows in read_iterations(f).values() for off in range(offsets)):
            at = {r.iteration: r for r in its}
            for s in range(2 + off, max(at) + 1, check):
                g = [at.get(i) for i in range(s, s + check)]
                rows = [x for x in g if x is not None]
                if len(rows) < check or len({x.config for x in rows}) > 1:
                    continue
                step = abs(within_step([x.seconds for x in rows], min_side))
                (clean if len({x.condition for x in rows}) == 1 else mixed).append(step)
    return clean, mixed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("suite", type=Path, help="a folder written by `autobyte bench --suite` (scenario folders inside)")
    ap.add_argument("--check", type=int, default=5, help="iterations per check (5: half of a 10-iteration window)")
    ap.add_argument("--thresholds", default="0.3,0.4,0.5,0.7", help="relative steps to report (0.5: the default)")
    ap.add_argument("--min-side", type=int, default=2, help="iterations on each side of a step (2: the detector's)")
    ap.add_argument("--all-offsets", action="store_true",
                    help="groups at every alignment against the trace (the suite's phases are multiples of 5, so "
                         "without it every change falls at the same place in its group)")
    a = ap.parse_args(argv)
    if a.min_side < 1 or a.check < 2 * a.min_side:
        ap.error(f"--check must be at least twice --min-side (>= 1) to split, but got --check={a.check}, --min-side={a.min_side}.")
    clean, mixed = groups(a.suite, a.check, a.min_side, a.check if a.all_offsets else 1)
    print(f"{a.suite}: {len(clean)} clean groups of {a.check} iterations, {len(mixed)} across a change\n")
    print("| step_change | clean groups read as a change | groups across a change caught |")
    print("|---:|---:|---:|")
    for th in (float(x) for x in a.thresholds.split(",")):
        lim = math.log1p(th)
        fp = sum(v > lim for v in clean)
        hit = sum(v > lim for v in mixed)
        print(f"| {th:g} | {fp} of {len(clean)} ({100 * fp / max(1, len(clean)):.1f}%) "
              f"| {hit} of {len(mixed)} ({100 * hit / max(1, len(mixed)):.0f}%) |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
