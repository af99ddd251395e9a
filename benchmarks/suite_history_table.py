"""The history A/B of stop 32 as one table (docs/benchmarks.md 7.15).

    python benchmarks/suite_history_table.py docs/figures/suite_full_stop32

DIR is an ``autobyte bench --suite ... --out DIR`` folder run with the methods
``bytescheduler,hindsight,autobyte,tuner:autobyte-history,tuner:static-history``
(without ``autobyte``, as in stop 33, its columns read "-").
Per scenario (in the suite's order): median samples/s of each method (range
over repeats); the history tuner against hindsight, the default and static at
the history's pick; AutoByte and static-history against hindsight and the
default; the worst 50-iteration span of the history tuner against its own
start's run (static-history, same repeat) and of AutoByte against the
default's (:func:`autobyte.bench._suite_report.worst_span_ratio`); trials per run.
Then the geometric means per tag.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
from typing import Any

from autobyte.bench._suite import IterationRow, read_iterations
from autobyte.bench._suite_report import geomean, worst_span_ratio

DEFAULT, HINDSIGHT, AUTOBYTE = "bytescheduler", "hindsight", "autobyte"
HISTORY, STATIC = "tuner:autobyte-history", "tuner:static-history"
#: (label, numerator, denominator) of the ratio columns, in table order
RATIOS = [("history", HISTORY, HINDSIGHT), ("history", HISTORY, DEFAULT), ("history", HISTORY, STATIC),
          ("AutoByte", AUTOBYTE, HINDSIGHT), ("AutoByte", AUTOBYTE, DEFAULT),
          ("static-history", STATIC, HINDSIGHT), ("static-history", STATIC, DEFAULT), ("hindsight", HINDSIGHT, DEFAULT)]


def _worst_span(runs: dict[tuple[str, int], list[IterationRow]], tuned: str, start: str) -> float:
    """Median over repeats of the worst 50-iteration span of ``tuned``'s run against ``start``'s of the same repeat."""
    out = []
    for rep in sorted({rep for _, rep in runs}):
        a = [r.seconds for r in runs.get((tuned, rep), [])]
        b = [r.seconds for r in runs.get((start, rep), [])]
        if a and b:
            out.append(worst_span_ratio(a, b)[0])
    return statistics.median(out)


def _scenario(root: str, name: str, per_tag: dict[str, list[list[float]]]) -> str:
    with open(os.path.join(root, name, "summary.json")) as f:
        s: dict[str, Any] = json.load(f)
    m = s["methods"]
    runs = read_iterations(os.path.join(root, name))
    ratios = [m[a]["median"] / m[b]["median"] if a in m else float("nan") for _, a, b in RATIOS]
    per_tag.setdefault(s["tag"], []).append(ratios)
    speeds = " | ".join(f"{m[k]['median']:.1f} ({m[k]['min']:.1f}-{m[k]['max']:.1f})" if k in m else "-"
                        for k in (DEFAULT, HINDSIGHT, AUTOBYTE, HISTORY, STATIC))
    r = [_fmt(x) for x in ratios]
    trials = " / ".join(f"{m[k].get('trials', {}).get('trials', float('nan')):g}" if k in m else "-"
                        for k in (HISTORY, AUTOBYTE))
    spans = f"{_worst_span(runs, HISTORY, STATIC):.3f} / " + (
        f"{_worst_span(runs, AUTOBYTE, DEFAULT):.3f}" if AUTOBYTE in m else "-")
    return (f"| {name} ({s['tag']}) | {speeds} | {' / '.join(r[0:3])} | {' / '.join(r[3:5])} | {' / '.join(r[5:7])} | "
            f"{spans} | {trials} |")


def _fmt(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:.3f}"


def main(argv: list[str]) -> None:
    if len(argv) != 1 or not os.path.isfile(os.path.join(argv[0], "suite_summary.json")):
        raise SystemExit("usage: python benchmarks/suite_history_table.py DIR; DIR must be a suite's --out folder, "
                         f"but got {argv}")
    root = argv[0]
    with open(os.path.join(root, "suite_summary.json")) as f:
        order = [sc["name"] for sc in json.load(f)["scenarios"]]
    print("| scenario (tag) | default | hindsight | AutoByte | AutoByte + history | static at the history's pick "
          "| history vs hindsight / default / static-history | AutoByte vs hindsight / default "
          "| static-history vs hindsight / default "
          "| worst 50-it: history vs its start (static-history run) / AutoByte vs default | trials/run: history / AutoByte |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    per_tag: dict[str, list[list[float]]] = {}
    for name in order:
        print(_scenario(root, name, per_tag))
    for tag, v in per_tag.items():
        g = ["-" if any(math.isnan(x[i]) for x in v) else _fmt(geomean([x[i] for x in v])) for i in range(len(RATIOS))]
        print(f"| geomean {tag} ({len(v)}) | | | | | | {' / '.join(g[0:3])} | {' / '.join(g[3:5])} | "
              f"{' / '.join(g[5:7])} | | | hindsight vs default {g[7]}")


if __name__ == "__main__":
    main(sys.argv[1:])
