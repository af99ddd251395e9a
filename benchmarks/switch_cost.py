"""What a reconfiguration costs after it: a configuration switched to against the same one started with, iteration by iteration.

Reads the raw data of a suite run of two registered tuners from
``benchmarks/tuner_variants.py``: ``static-1m-4x`` (starts at <1 MiB, 4X>
and stays) and ``switch-1m-4x`` (starts at ByteScheduler's default and moves
to <1 MiB, 4X> at its first window), every repeat, and prints the switched
run's speed over the static run's, span by span of iterations after the
switch (same iterations, same link conditions)::

    sudo autobyte bench --suite readme --methods tuner:static-1m-4x,tuner:switch-1m-4x \\
        --import benchmarks/tuner_variants.py --out OUT
    python benchmarks/switch_cost.py OUT/readme-step
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

TARGET = (1 << 20, 4 << 20)


def _iterations(run: Path) -> dict[int, tuple[float, tuple[int, int]]]:
    rows = [json.loads(line) for line in (run / "iterations.jsonl").read_text().splitlines() if line.strip()]
    return {int(r["iteration"]): (float(r["seconds"]), (int(r["config"][0]), int(r["config"][1]))) for r in rows}


def ratios(scenario_dir: Path, spans: int = 8) -> list[dict[str, float]]:
    """Per repeat: the switch iteration and switched / static speed in the first ``spans`` iterations after it, then in 40-iteration spans."""
    out = []
    for static_dir in sorted(scenario_dir.glob("r*_tuner-static-1m-4x")):
        switch_dir = scenario_dir / static_dir.name.replace("static-1m-4x", "switch-1m-4x")
        if not switch_dir.is_dir():
            raise ValueError(f"{switch_dir} is missing: run both tuners in the same suite run")
        a, b = _iterations(static_dir), _iterations(switch_dir)
        sw = min((i for i, (_, c) in b.items() if c == TARGET), default=None)
        if sw is None:
            raise ValueError(f"{switch_dir.name} never ran <1 MiB, 4X>")
        end = max(b)
        edges = [sw, sw + spans] + list(range(40 * ((sw + spans) // 40 + 1), end + 1, 40)) + [end + 1]
        row: dict[str, float] = {"repeat": float(static_dir.name[1:static_dir.name.index("_")]), "switch": float(sw)}
        for lo, hi in zip(edges, edges[1:]):
            both = [i for i in range(lo, hi) if i in a and i in b]
            if both:
                row[f"{lo}-{hi - 1}"] = sum(a[i][0] for i in both) / sum(b[i][0] for i in both)
        out.append(row)
    if not out:
        raise ValueError(f"{scenario_dir} holds no r*_tuner-static-1m-4x run")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("scenario_dir", help="a scenario folder of an `autobyte bench --suite` run holding both tuners' runs")
    args = ap.parse_args(argv)
    try:
        rows = ratios(Path(args.scenario_dir))
    except (OSError, ValueError) as exc:
        ap.error(f"scenario_dir: {exc}")
    spans = [k for k in rows[0] if k not in ("repeat", "switch")]
    print("| repeat | switched at | " + " | ".join(f"iterations {k}" for k in spans) + " |")
    print("|---:|---:|" + "---:|" * len(spans))
    for r in rows:
        print(f"| {int(r['repeat'])} | {int(r['switch'])} | " + " | ".join(f"{r[k]:.3f}" if k in r else "" for k in spans) + " |")
    print("| median | | " + " | ".join(f"{statistics.median(r[k] for r in rows if k in r):.3f}" for k in spans) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
