"""``autobyte demo``: what a new user runs first.

Trains a real CNN (3.4M parameters, generated data, no downloads) with two
local workers through Lightning, twice on the same network: once with plain
DDP, once with ``AutoByteCallback`` (shipped meta-network). As root the two
workers sit in network namespaces whose link alternates between a fast and
a slow rate (``autobyte.testbed``); without root they talk over plain
loopback, and the demo says so. It ends with what AutoByte chose and the
speed-up it measured.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable

from ..core import BYTESCHEDULER_DEFAULT, Config
from ..core._checks import check_int
from ._real import check_rates


@dataclass
class DemoPlan:
    iters: int = 80
    every: int = 20
    low_mbit: float = 300.0
    high_mbit: float = 2000.0
    tuner: str = "autobyte"
    window_iters: int = 10
    timeout_s: float = 600.0

    def __post_init__(self) -> None:
        for name in ("iters", "every", "window_iters"):
            check_int(name, getattr(self, name))
        check_rates(self.low_mbit, self.high_mbit)
        from ..core.tuners import tuner_names

        if self.tuner not in tuner_names():  # before the DDP run, not after it
            raise ValueError(f"tuner must be one of {tuner_names()}, but got tuner={self.tuner!r}.")


def can_shape() -> tuple[bool, str]:
    """Whether the emulated network is available, and why not."""
    if os.geteuid() != 0:
        return False, "not running as root"
    missing = [t for t in ("ip", "tc") if shutil.which(t) is None]
    if missing:
        return False, f"{' and '.join(missing)} not installed (apt-get install iproute2)"
    return True, ""


def _run_job(spec: dict[str, Any], out: str, plan: DemoPlan, shaped: bool) -> list[dict[str, Any]]:
    os.makedirs(out, exist_ok=True)
    argv = ["-m", "autobyte.bench.lightning_job", json.dumps(spec), out]
    env = {"PYTHONUNBUFFERED": "1", "PYTHONWARNINGS": "ignore"}
    if shaped:
        from ..testbed import BandwidthTrace, Testbed

        n = -(-plan.iters // plan.every)
        trace = BandwidthTrace.step([plan.high_mbit, plan.low_mbit], every=plan.every, unit="it", n_phases=max(1, n))
        with Testbed(2, trace=trace) as tb:
            rc = tb.run([sys.executable, *argv], timeout_s=plan.timeout_s, env=env, events_log=os.path.join(out, "events.jsonl"))
    else:
        from .._testing import launch

        res = launch(argv, 2, timeout_s=plan.timeout_s, one_node_per_rank=True, stream_rank0=True, env=env)
        rc = next((r.returncode for r in res if r.returncode != 0), 0)
        if rc != 0:
            for r in res:
                sys.stderr.write(r.stderr[-3000:])
    if rc != 0:
        raise RuntimeError(f"the {spec['method']} job failed with exit code {rc} (output above; files in {out})")
    with open(os.path.join(out, "iterations.jsonl")) as f:
        return [json.loads(line) for line in f]


def _tput(rows: list[dict[str, Any]], batch: int = 16, world: int = 2) -> float:
    secs = sum(r["seconds"] for r in rows)
    return batch * world * len(rows) / secs if secs > 0 else 0.0


def run_demo(plan: DemoPlan, out: str, log: Callable[[str], None] = print) -> dict[str, Any]:
    shaped, why = can_shape()
    os.makedirs(out, exist_ok=True)
    if shaped:
        log(f"autobyte demo: 2 workers in network namespaces; the link alternates {plan.high_mbit:g} and "
            f"{plan.low_mbit:g} Mbit/s every {plan.every} iterations.")
    else:
        log(f"autobyte demo: {why}, so the 2 workers talk over plain loopback (no emulated network, no bandwidth "
            "changes); run as root to see AutoByte follow a changing network.")
    t0 = time.monotonic()
    log(f"[1/2] plain Lightning DDP, {plan.iters} iterations")
    ddp = _run_job({"method": "ddp", "iters": plan.iters}, os.path.join(out, "ddp"), plan, shaped)
    start = BYTESCHEDULER_DEFAULT
    log(f"[2/2] Lightning DDP + AutoByteCallback(tuner={plan.tuner!r}), starting at {start}, {plan.iters} iterations")
    ab = _run_job({"method": "tuner", "tuner": plan.tuner, "iters": plan.iters, "window_iters": plan.window_iters,
                   "config": [start.partition_bytes, start.credit_bytes]}, os.path.join(out, "autobyte"), plan, shaped)
    with open(os.path.join(out, "autobyte", "decisions.jsonl")) as f:
        decisions = [json.loads(line) for line in f]

    def phase(it: int) -> str:
        if not shaped:
            return "loopback"
        return "fast" if (it // plan.every) % 2 == 0 else "slow"

    skip = 3  # start-up iterations (process group, first plan) are left out of both
    kinds = sorted({phase(r["iteration"]) for r in ddp})
    summary: dict[str, Any] = {"shaped": shaped, "phases": {}, "decisions": decisions, "seconds": time.monotonic() - t0}
    lines = ["", "Throughput (samples/s, both workers):", "", "| phase | plain DDP | AutoByte | speed-up |", "|---|---:|---:|---:|"]
    for k in kinds + ["all"]:
        sel = (lambda r: r["iteration"] >= skip) if k == "all" else (lambda r, k=k: r["iteration"] >= skip and phase(r["iteration"]) == k)
        a, b = _tput([r for r in ddp if sel(r)]), _tput([r for r in ab if sel(r)])
        summary["phases"][k] = {"ddp": a, "autobyte": b, "speedup": b / a if a else None}
        label = {"fast": f"fast ({plan.high_mbit:g} Mbit/s)", "slow": f"slow ({plan.low_mbit:g} Mbit/s)"}.get(k, k)
        lines.append(f"| {label} | {a:.1f} | {b:.1f} | {b / a:.2f}x |" if a else f"| {label} | - | - | - |")
    lines += ["", "What AutoByte chose:", ""]
    changes = [d for d in decisions if d.get("reason")]
    if not changes:
        lines.append(f"  kept {start} for the whole run (no candidate was predicted >5% faster)")
    for d in changes:
        lines.append(f"  iteration {d['iteration']:>3} ({phase(d['iteration'])}): -> {Config(*d['config'])}  because {d['reason']}")
    lines.append(f"\nDemo took {summary['seconds']:.0f} s; raw data in {out}/")
    text = "\n".join(lines)
    log(text)
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    with open(os.path.join(out, "summary.md"), "w") as f:
        f.write(text + "\n")
    return summary
