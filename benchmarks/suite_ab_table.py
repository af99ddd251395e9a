"""A real suite run as an A/B table: every method against a reference method of the same rounds and the default.

    python benchmarks/suite_ab_table.py runs/full --ref tuner:static-history

DIR is an ``autobyte bench --suite ... --out DIR`` folder. Per scenario (in the suite's order) and method: median
samples/s (range over repeats), the ratio of medians against ``--ref`` and against ByteScheduler's default
(``bytescheduler``, when it ran), the worst 50-iteration span against ``--ref``'s run of the same repeat
(:func:`autobyte.bench._suite_report.worst_span_ratio`, median over repeats), trials per run, the changes of conditions
the controller saw per run and how many of them by the step rule (``regime_rule == "step"``), and the tuner's CPU
and adaptation CPU as shares of the run time. Then the geometric means of the ratios per tag (tuning scenarios,
held out).
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import os
import statistics
from typing import Any

from autobyte.bench._suite import IterationRow, read_iterations
from autobyte.bench._suite_report import geomean, worst_span_ratio

DEFAULT = "bytescheduler"


def _runs(runs: dict[tuple[str, int], list[IterationRow]], method: str) -> dict[int, list[float]]:
    """Per repeat, the iteration times of ``method``'s run."""
    return {rep: [r.seconds for r in rows] for (m, rep), rows in runs.items() if m == method}


def _changes(root: str, name: str) -> dict[str, tuple[float, float]]:
    """Per method: changes of conditions per run, and those the step rule saw, per run."""
    path = os.path.join(root, name, "decisions.jsonl")
    n: dict[str, int] = collections.Counter()
    step: dict[str, int] = collections.Counter()
    reps: dict[str, set[int]] = collections.defaultdict(set)
    with open(path) as f:
        for line in f:
            d = json.loads(line)
            reps[d["method"]].add(int(d.get("repeat", 0)))
            if d.get("regime_changed"):
                n[d["method"]] += 1
                step[d["method"]] += d.get("regime_rule") == "step"
    return {m: (n[m] / len(r), step[m] / len(r)) for m, r in reps.items()}


def table(root: str, ref: str) -> list[str]:
    with open(os.path.join(root, "suite_summary.json")) as f:
        order = [sc["name"] for sc in json.load(f)["scenarios"]]
    lines = [f"| scenario (tag) | method | samples/s (range) | vs {ref} | vs default | worst 50-it vs {ref} "
             "| trials/run | changes/run (step rule) | tuner CPU / adapting |", "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    per_tag: dict[str, dict[str, list[tuple[float, float]]]] = collections.defaultdict(lambda: collections.defaultdict(list))
    for name in order:
        with open(os.path.join(root, name, "summary.json")) as f:
            s: dict[str, Any] = json.load(f)
        m = s["methods"]
        if ref not in m:
            raise SystemExit(f"{root}/{name} has no runs of --ref {ref} (methods: {', '.join(m)}).")
        rows = read_iterations(os.path.join(root, name))
        changes = _changes(root, name)
        base = _runs(rows, ref)
        for meth, r in m.items():
            vs_ref = r["median"] / m[ref]["median"]
            vs_def = r["median"] / m[DEFAULT]["median"] if DEFAULT in m else float("nan")
            per_tag[s["tag"]][meth].append((vs_ref, vs_def))
            mine = _runs(rows, meth)
            spans = [worst_span_ratio(mine[k], base[k])[0] for k in mine if k in base and meth != ref]
            ch = changes.get(meth)
            cpu, ad = r.get("tuner_cpu_share"), r.get("adapt_cpu_share")
            lines.append(
                f"| {name} ({s['tag']}) | {meth} | {r['median']:.1f} ({r['min']:.1f}-{r['max']:.1f}) | {vs_ref:.3f} | {_f(vs_def)} "
                f"| {_f(statistics.median(spans)) if spans else '-'} | {r.get('trials', {}).get('trials', '-')} "
                f"| {'-' if ch is None else f'{ch[0]:g} ({ch[1]:g})'} "
                f"| {'-' if cpu is None else f'{100 * cpu:.2f}%'} / {'-' if ad is None else f'{100 * ad:.2f}%'} |")
    for tag, methods in per_tag.items():
        for meth, v in methods.items():
            lines.append(f"| geomean {tag} ({len(v)}) | {meth} | | {geomean([x[0] for x in v]):.3f} "
                         f"| {_f(geomean([x[1] for x in v])) if not any(math.isnan(x[1]) for x in v) else '-'} | | | | |")
    return lines


def _f(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:.3f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir", help="an `autobyte bench --suite ... --out DIR` folder")
    ap.add_argument("--ref", default="tuner:static-history", help="the method every other is compared with")
    a = ap.parse_args(argv)
    if not os.path.isfile(os.path.join(a.dir, "suite_summary.json")):
        ap.error(f"DIR must be a suite's --out folder (with suite_summary.json), but got {a.dir!r}.")
    print("\n".join(table(a.dir, a.ref)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
