"""What the tuners' trials cost in a finished suite run (``autobyte bench --suite ... --out DIR``).

    python benchmarks/suite_trials.py DIR [METHOD,METHOD...]

For each scenario and tuned method (default: every ``autobyte`` and
``tuner:NAME`` run found): the trials (explore decisions, and the search's
measurements of other candidates) of each repeat,
their share of the run's iterations, their speed over those iterations
against the ByteScheduler-default run of the same round, and the time they
took beyond it as a share of that run's time
(:func:`autobyte.bench._suite_report.trial_cost`, the figure the suite's own table
gives). Reads ``rN_METHOD/iterations.jsonl`` and
``rN_METHOD/decisions.jsonl``; prints a markdown table with medians and the
spread over repeats.
"""

from __future__ import annotations

import glob
import json
import os
import sys

from autobyte.bench._suite_report import summarize_trials, trial_cost


def _rows(path: str) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def main(argv: list[str]) -> None:
    if not argv or not os.path.isdir(argv[0]):
        raise SystemExit(f"usage: python benchmarks/suite_trials.py DIR [METHODS]; DIR must be a suite's --out folder, but got {argv[:1]}")
    root = argv[0]
    wanted = argv[1].replace(":", "-").split(",") if len(argv) > 1 else None
    print("| scenario | method | trials per run | share of iterations | speed vs the default's run over them | cost, share of the run's time |")
    print("|---|---|---:|---:|---:|---:|")
    every: dict[str, list[dict]] = {}
    for scen in sorted(d for d in glob.glob(os.path.join(root, "*")) if os.path.isdir(d) and os.path.basename(d) != "grids"):
        methods = sorted({os.path.basename(d).split("_", 1)[1] for d in glob.glob(os.path.join(scen, "r*_*"))})
        for m in methods:
            if m in ("bytescheduler", "hindsight", "oracle", "ddp", "bo") or (wanted and m not in wanted):
                continue
            per = []
            for d in sorted(glob.glob(os.path.join(scen, f"r*_{m}"))):
                base = os.path.join(scen, os.path.basename(d).split("_", 1)[0] + "_bytescheduler", "iterations.jsonl")
                if os.path.exists(base) and os.path.exists(os.path.join(d, "iterations.jsonl")):
                    per.append(trial_cost(_rows(os.path.join(d, "iterations.jsonl")), _rows(os.path.join(d, "decisions.jsonl")), _rows(base)))
            if not per:
                continue
            every.setdefault(m, []).extend(per)
            t = summarize_trials(per)
            sp = [p["vs_start"] for p in per if p["vs_start"] is not None]
            costs = [p["cost"] for p in per]
            speed = "" if t["vs_start"] is None else f"{t['vs_start']:.3f} ({min(sp):.3f}-{max(sp):.3f})"
            print(f"| {os.path.basename(scen)} | {m} | {' / '.join(str(p['trials']) for p in per)} | "
                  f"{100 * t['share']:.1f}% | {speed} | "
                  f"{100 * t['cost']:+.1f}% ({100 * min(costs):+.1f} to {100 * max(costs):+.1f}) |")
    for m, per in every.items():
        t = summarize_trials(per)
        print(f"\n{m}: {sum(p['trials'] for p in per)} trials in {len(per)} runs; median share {100 * t['share']:.1f}%, "
              f"median speed vs the default's run {float('nan') if t['vs_start'] is None else t['vs_start']:.3f}, "
              f"median cost {100 * t['cost']:+.1f}% of the run's time")


if __name__ == "__main__":
    main(sys.argv[1:])
