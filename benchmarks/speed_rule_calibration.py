"""How the detector's speed rule reads real runs: a fixed threshold against one scaled to the job's own noise.

The speed rule (``core.regime.RegimeDetector``) calls a change of conditions when a configuration measured
again runs more than ``threshold`` (15%) away from its last measurement. How far two checks of one
configuration in one condition lie apart depends on the host: on the CPU testbed a few percent, on the H100
of docs/benchmarks.md section 4 far more (2 ranks sharing one GPU). This script cuts real runs into checks of
``--check`` iterations, pairs each check with the last one of the same configuration (as the detector does) and
counts, for the fixed threshold and for ``noise_z`` values (the threshold raised to ``z`` times the run's own
pair scatter, estimated online from the pairs before, :func:`autobyte.core.regime.pair_scatter`):

* *false alarms*: pairs whose checks ran in one condition and lie beyond the threshold;
* *changes seen*: pairs whose checks ran in different conditions (a real change between them) beyond it.

Inputs, any mix of: a folder written by ``autobyte bench --suite`` (``*/iterations.csv``: every method's
runs, conditions from the trace), or a ``bench_gpu.json`` (``tuned[*].iter_seconds``: one condition)::

    python benchmarks/speed_rule_calibration.py runs/full OUT/bench_gpu.json   # autobyte bench --suite full --out runs/full; bench_gpu.py --out OUT

Checks are cut from iteration 2 on, every ``--check`` iterations; a check whose iterations ran under two
configurations or two conditions is skipped (the step rule drops most of those). The controller's own checks
restart after each reconfiguration, so these are a sample of checks, not the checks themselves.

A second table reads the same checks as the tuner's mover does (``meta._moves.Mover``): it moves when a
configuration measured in these conditions beats the one in force by ``min_gain`` (2%), comparing that
configuration's mean of its last 3 windows (the ledger's ``memory``) with the window just measured. For each
``--mover`` gain: the share of checks that fall that far below the mean of the last 3 checks of the same
configuration in the same condition, i.e. how often a configuration measured level with the one in force
would be moved to on noise alone (run it with ``--check 10``, the tuner's window).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autobyte.bench._suite import read_iterations  # noqa: E402
from autobyte.core.regime import RegimeDetector  # noqa: E402
from autobyte.core.space import Config  # noqa: E402

Check = tuple[tuple[int, int], str, float]  # (configuration, condition, speed: 1 / mean seconds)


def _cut(rows: Sequence[tuple[tuple[int, int], str, float]], check: int) -> list[Check]:
    out: list[Check] = []
    for s in range(2, len(rows) - check + 1, check):
        g = rows[s:s + check]
        if len({r[0] for r in g}) > 1 or len({r[1] for r in g}) > 1:
            continue
        out.append((g[0][0], g[0][1], check / sum(r[2] for r in g)))
    return out


def runs_of(path: Path, check: int) -> dict[str, list[Check]]:
    """Every run under ``path`` as its checks in order, by a name."""
    runs: dict[str, list[Check]] = {}
    if path.is_file():
        d = json.loads(path.read_text())
        for i, t in enumerate(d.get("tuned", [])):
            secs = t.get("iter_seconds") or []
            cfg = (int(t["start"]["partition_bytes"]), int(t["start"]["credit_bytes"]))
            if t.get("reconfigurations"):
                continue  # configurations per iteration are not recorded: static runs only
            runs[f"{path.parent.name}/{t['tuner']}#{i}"] = _cut([(cfg, "one", float(x)) for x in secs], check)
        return runs
    files = sorted(path.glob("*/iterations.csv"))
    if not files:
        raise SystemExit(f"no */iterations.csv under {path} and not a bench_gpu.json file.")
    for f in files:
        for (m, rep), rows in read_iterations(f).items():
            if any(r.config is None for r in rows):
                continue  # DDP: no configuration for the detector to key its measurements by
            runs[f"{f.parent.name}/{m}#{rep}"] = _cut(
                [((r.config.partition_bytes, r.config.credit_bytes), r.condition, r.seconds) for r in rows if r.config], check)
    return runs


class Tally:
    """False changes, clean checks, changes seen and checks across a change, counted one measurement after another.

    A change the detector reads at a clean check is a false change, unless it confirms the suspicion (``confirm``)
    raised at the check across a change just before: then it is that change, seen one check late. Shared with
    ``detector_replay.py``.
    """

    def __init__(self) -> None:
        self.false = self.clean = self.seen = self.across = 0
        self._pending = False  # the last measurement was across a change and left a suspicion

    def add(self, read: bool, across: bool, det: RegimeDetector) -> None:
        """A measurement the detector has just observed: ``read`` whether it read a change there."""
        late, self._pending = self._pending, False
        if across:
            self.across += 1
            self.seen += read
            self._pending = not read and det.suspect is not None
        elif read and late:
            self.clean += 1
            self.seen += 1  # the change across the measurement before, confirmed here
        else:
            self.clean += 1
            self.false += read

    def skip(self) -> None:
        """A measurement the detector observed that is not counted (nothing to compare it with)."""
        self._pending = False


def replay(checks: Sequence[Check], threshold: float, z: float | None,
           confirm: float | None = None) -> tuple[int, int, int, int, list[float]]:
    """(false alarms, clean pairs, changes seen, pairs across a change, thresholds used) over one run.

    With ``confirm``, a change the detector confirms at the check after a pair across a change is that
    change seen (one check late), not a false alarm of the clean pair it confirms with.
    """
    # against the last check alone, as calibrated (the figures docs/benchmarks.md gives); the detector as it ships
    # compares with the mean of the last two (``reference_memory``, 2.25; detector_replay.py replays it)
    det = RegimeDetector(threshold, step_change=None, noise_z=z, confirm=confirm, reference_memory=1)
    last: dict[tuple[int, int], str] = {}
    tally = Tally()
    used: list[float] = []
    for cfg, cond, speed in checks:
        c = Config(*cfg)
        measured = c in det.seen
        thr = det.speed_threshold()
        big = det.observe(c, speed)
        if measured:
            used.append(math.expm1(thr))
            tally.add(big, last[cfg] != cond, det)
        else:
            tally.skip()
        last[cfg] = cond
    return tally.false, tally.clean, tally.seen, tally.across, used


def below_running_mean(checks: Sequence[Check], gains: Sequence[float], memory: int = 3) -> tuple[list[int], int]:
    """(per gain, checks more than that gain below the mean of the last ``memory`` checks of their configuration in
    their condition; checks that had such a mean to compare with) over one run."""
    seen: dict[tuple[tuple[int, int], str], list[float]] = {}
    below = [0] * len(gains)
    compared = 0
    for cfg, cond, speed in checks:
        prev = seen.setdefault((cfg, cond), [])
        if prev:
            compared += 1
            mean = statistics.fmean(prev[-memory:])
            for j, g in enumerate(gains):
                below[j] += speed < mean * (1 - g)
        prev.append(speed)
    return below, compared


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("inputs", nargs="+", type=Path, help="suite folders and/or bench_gpu.json files")
    ap.add_argument("--check", type=int, default=5, help="iterations per check (5)")
    ap.add_argument("--threshold", type=float, default=0.15, help="the fixed threshold (0.15)")
    ap.add_argument("--z", default="2.5,3,3.5,4", help="noise_z values to compare with the fixed threshold")
    ap.add_argument("--mover", default="0.02,0.05", help="gains of the mover's table ('' for none)")
    ap.add_argument("--confirm", default="none,2", help="the detector's confirm values ('none': every change at once)")
    a = ap.parse_args(argv)
    zs: list[float | None] = [None] + [float(x) for x in a.z.split(",") if x.strip()]
    confirms = [None if x.strip() == "none" else float(x) for x in a.confirm.split(",") if x.strip()]
    gains = [float(x) for x in a.mover.split(",") if x.strip()]
    for path in a.inputs:
        runs = runs_of(path, a.check)
        print(f"## {path} ({len(runs)} runs, checks of {a.check} iterations)\n")
        print("| rule | false alarms / clean pairs | changes seen / pairs across a change | threshold used (median, max) |")
        print("|---|---:|---:|---:|")
        for z, cf in [(z, cf) for cf in confirms for z in zs]:
            tot = [0, 0, 0, 0]
            thr: list[float] = []
            for checks in runs.values():
                r = replay(checks, a.threshold, z, cf)
                tot = [t + x for t, x in zip(tot, r[:4])]
                thr += r[4]
            fa, clean, caught, across = tot
            name = (f"fixed {a.threshold:.0%}" if z is None else f"noise_z {z:g}") + ("" if cf is None else f", confirm {cf:g}")
            med = sorted(thr)[len(thr) // 2] if thr else float("nan")
            print(f"| {name} | {fa} / {clean} ({fa / max(clean, 1):.1%}) | {caught} / {across} ({caught / max(across, 1):.1%}) "
                  f"| {med:.1%}, {max(thr, default=float('nan')):.1%} |")
        print()
        if gains:
            below, compared = [0] * len(gains), 0
            for checks in runs.values():
                b, n = below_running_mean(checks, gains)
                below, compared = [x + y for x, y in zip(below, b)], compared + n
            print("| mover's gain | checks below the mean of their configuration's last 3 in their condition by more |")
            print("|---|---:|")
            for g, b in zip(gains, below):
                print(f"| {g:.0%} | {b} / {compared} ({b / max(compared, 1):.1%}) |")
            print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
