"""What the controller's readings say about a link, at each precision: speed, achieved link rate and compute per window.

The measurement behind ``wire="auto"``'s recognition of conditions (``autobyte/core/wire.py``): on the testbed (root),
2 CPU ranks on gloo at ByteScheduler's default <4 MB, 4X>, static fp32 and static bf16 (``tuner="static"``) each
run a staircase of link rates; a tuner that never moves records every check and window the controller gives it: the
cluster's speed, the slowest rank's achieved link rate (wire bytes over the time messages were in flight) and the
compute per iteration (forward and the gradients' backward times, mean over ranks).

    sudo python benchmarks/wire_readings.py --out OUT                       # the CNN of the tuning trace, batch 16
    sudo python benchmarks/wire_readings.py --out OUT --rates 10000,3000,1000,500,200 --phase 40

Writes ``OUT/readings.json`` (every reading) and ``OUT/summary.md``: per precision and rate, the median speed, rate
link busy share and compute of the readings wholly inside the phase (the first window after each change left out), and bf16's speed
over fp32's.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_wire_auto import rank_job  # noqa: E402  (the same rank set-up as the bench whose rule these readings explain)


def rank_main(opts: dict[str, Any]) -> None:
    import numpy as np
    import torch
    import torch.distributed as dist

    from autobyte.core.tuning import Observation, StaticTuner
    from autobyte.integrations.torch import schedule
    from autobyte.testbed import notify_iteration

    readings: list[dict[str, Any]] = []

    class Recording(StaticTuner):
        """Never moves; keeps every reading the controller gives it."""

        def _keep(self, obs: Observation, kind: str) -> None:
            f = obs.features
            readings.append({"iteration": obs.iteration, "kind": kind, "speed": obs.speed, "share": obs.window_share,
                             "mixed": obs.mixed, "changed": obs.regime_changed, "rate": float(np.min(f.bw_up_Bps)), "busy": obs.link_busy,
                             "compute": float(np.mean(f.forward_s + f.layer_time_s.sum(axis=0)))})

        def observe(self, obs: Observation) -> None:
            self._keep(obs, "window")
            return None

        def check(self, obs: Observation) -> None:
            self._keep(obs, "check")
            return None

    rank, data, model, opt = rank_job(opts)
    h = schedule(model, opt, wire=opts["wire"], tuner=Recording(), verbose=False)
    for i in range(int(opts["iters"])):
        if rank == 0:
            notify_iteration(i)
        x, y = data[i % len(data)]
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    h.synchronize()
    h.close()
    if rank == 0:
        print(json.dumps({"wire": opts["wire"], "readings": readings}), flush=True)
    dist.destroy_process_group()


def one_run(wire: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    from autobyte.testbed import BandwidthTrace, RateChange, Testbed

    trace = BandwidthTrace(tuple(RateChange(k * args.phase, rate) for k, rate in enumerate(args.rates)))
    spec = {"wire": wire, "iters": args.phase * len(args.rates), "model": args.model, "batch": args.batch}
    buf = io.StringIO()
    with Testbed(2, trace=trace) as tb:
        if tb.run([sys.executable, os.path.abspath(__file__), "--rank", json.dumps(spec)], timeout_s=1800, stdout=buf) != 0:
            raise SystemExit(buf.getvalue()[-4000:])
    lines = [line.split("] ", 1)[-1] for line in buf.getvalue().splitlines() if line.startswith("[w0] ")]
    return [json.loads(line) for line in lines if line.startswith("{")][0]["readings"]


def summarize(runs: dict[str, list[list[dict[str, Any]]]], args: argparse.Namespace) -> str:
    rows = ["| Mbit/s | precision | readings | samples/s | achieved MB/s | link busy | compute ms/iteration |",
            "|---:|---|---:|---:|---:|---:|---:|"]
    speeds: dict[tuple[float, str], float] = {}
    for k, rate in enumerate(args.rates):
        lo, hi = k * args.phase + 10, (k + 1) * args.phase  # the first window after the change left out
        for wire, rounds in runs.items():
            rs = [r for run in rounds for r in run if lo < r["iteration"] <= hi and not r["mixed"] and r["share"] >= 0.5]
            if not rs:
                continue
            med = {key: statistics.median(r[key] for r in rs) for key in ("speed", "rate", "busy", "compute")}
            spread = {key: (min(r[key] for r in rs), max(r[key] for r in rs)) for key in ("rate", "busy", "compute")}
            speeds[rate, wire] = med["speed"]
            rows.append(f"| {rate:g} | {wire} | {len(rs)} | {med['speed']:.1f} | {med['rate'] / 1e6:.1f} "
                        f"({spread['rate'][0] / 1e6:.1f}-{spread['rate'][1] / 1e6:.1f}) | {med['busy']:.2f} ({spread['busy'][0]:.2f}-"
                        f"{spread['busy'][1]:.2f}) | {1e3 * med['compute']:.1f} "
                        f"({1e3 * spread['compute'][0]:.1f}-{1e3 * spread['compute'][1]:.1f}) |")
    gains = [f"{rate:g} Mbit/s: {speeds[rate, 'bf16'] / speeds[rate, 'fp32']:.3f}x" for rate in args.rates
             if (rate, "bf16") in speeds and (rate, "fp32") in speeds]
    cmd = " ".join(["python", "benchmarks/wire_readings.py", *sys.argv[1:]])
    return (f"# Readings per precision and link rate\n\nCommand: `{cmd}`\n\n{args.model}, batch {args.batch}, phases of "
            f"{args.phase} iterations, {args.rounds} round(s); median (min-max) of the readings.\n\n" + "\n".join(rows)
            + "\n\nbf16's speed over fp32's: " + ", ".join(gains) + "\n")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rank", help=argparse.SUPPRESS)
    p.add_argument("--out", default="wire_readings")
    p.add_argument("--model", default="cnn")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--rates", default="10000,3000,1000,500,200")
    p.add_argument("--phase", type=int, default=40)
    p.add_argument("--rounds", type=int, default=1)
    args = p.parse_args(argv)
    if args.rank:
        rank_main(json.loads(args.rank))
        return
    try:
        args.rates = [float(x) for x in args.rates.split(",")]
    except ValueError:
        p.error(f"--rates must be comma-separated numbers (Mbit/s), but got --rates={args.rates!r}")
    if any(r <= 0 for r in args.rates) or args.phase < 20 or args.rounds < 1:
        p.error(f"--rates must be positive, --phase at least 20 and --rounds at least 1, but got --rates={args.rates}, "
                f"--phase={args.phase}, --rounds={args.rounds}")
    os.makedirs(args.out, exist_ok=True)
    runs: dict[str, list[list[dict[str, Any]]]] = {"fp32": [], "bf16": []}
    for k in range(args.rounds):
        for wire in (("fp32", "bf16") if k % 2 == 0 else ("bf16", "fp32")):
            runs[wire].append(one_run(wire, args))
    with open(os.path.join(args.out, "readings.json"), "w") as f:
        json.dump({"args": {k: v for k, v in vars(args).items() if k != "rank"}, "runs": runs}, f)
    md = summarize(runs, args)
    with open(os.path.join(args.out, "summary.md"), "w") as f:
        f.write(md)
    print(md)


if __name__ == "__main__":
    main()
