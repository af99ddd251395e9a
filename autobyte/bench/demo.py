"""``autobyte demo``: what a new user runs first.

Trains a real CNN (3.4M parameters, generated data, no downloads) with two
local workers through Lightning, five ways on the same network: plain DDP,
the scheduled engine at ByteScheduler's default <4 MB, 4X> (static, no
tuning), ``AutoByteCallback`` (shipped meta-network, starting from that
default), DDP with its one-line compression hook
(``DDPStrategy(ddp_comm_hook=default_hooks.fp16_compress_hook)``: what a
link-bound user runs instead today; fp16 because DDP refuses
``bf16_compress_hook`` by name without CUDA and NCCL; Lightning registers
the hook on CUDA only, so on CPU the job registers it on the DDP module, and
the demo stops if it did not) and
``AutoByteCallback(wire="auto")`` (the same tuner; 16 bits on the wire only
where they are measured 5% faster than fp32 in the current conditions).
``DemoPlan.methods`` runs a subset (plain DDP always: every speed-up is over
it). The methods run one after the other in each of ``rounds`` rounds,
in a rotated order, so that a slow drift of a shared machine hits them
alike; the table gives the median over rounds and the spread (min-max), and
each speed-up is taken within a round, that of ``wire="auto"`` over DDP +
the hook too (16 bits against 16 bits). As root the two workers sit in
network namespaces whose link alternates between a fast and a slow rate
(``autobyte.testbed``); without root they talk over plain loopback, and the
demo says so. It ends with what AutoByte chose, the share of iterations
``wire="auto"`` ran at 16 bits and its decisions.

Both default rates keep plain DDP link-bound on a 2-core host (the shaped
iteration measured 1.9x and 3.3x the unshaped one on a loaded machine;
``benchmarks/demo_rates.py``), so the speed-ups measure the network
scheduling, not the host. Every worker computes with one intra-op thread.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable

from ..core import BYTESCHEDULER_DEFAULT, Config
from ..core._checks import check_int
from ._real import check_rates


#: The demo's methods, in the order of its tables: key (``--methods``), row label.
METHODS = (("ddp", "plain DDP"), ("bytescheduler", f"ByteScheduler default <{BYTESCHEDULER_DEFAULT.partition_bytes / 1e6:g} MB, "
                                     f"{BYTESCHEDULER_DEFAULT.credit_multiple:g}X> (static)"),
           ("autobyte", "AutoByte"), ("ddp_hook", "DDP + fp16_compress_hook"), ("autobyte_wire", "AutoByte, wire='auto'"))
#: The keys of :data:`METHODS`.
METHOD_NAMES = tuple(k for k, _ in METHODS)


@dataclass
class DemoPlan:
    """What one ``autobyte demo`` does: ``rounds`` rounds of the three methods, ``iters`` iterations each."""

    iters: int = 80
    every: int = 20
    low_mbit: float = 250.0
    high_mbit: float = 500.0
    tuner: str = "autobyte"
    window_iters: int = 10
    timeout_s: float = 600.0
    rounds: int = 3
    #: the methods to run, keys of :data:`METHODS` (run and shown in that order); ``"ddp"`` among them
    methods: tuple[str, ...] = METHOD_NAMES

    def __post_init__(self) -> None:
        for name in ("iters", "every", "window_iters", "rounds"):
            check_int(name, getattr(self, name))
        check_rates(self.low_mbit, self.high_mbit)
        m = self.methods
        if isinstance(m, str) or not isinstance(m, (list, tuple)) or not m or any(x not in METHOD_NAMES for x in m):
            raise ValueError(f"methods must be a non-empty subset of {METHOD_NAMES}, but got methods={m!r}.")
        if "ddp" not in m:
            raise ValueError(f"methods must include 'ddp' (every speed-up is over plain DDP in the same round), but got methods={m!r}.")
        self.methods = tuple(k for k in METHOD_NAMES if k in m)
        from ..core.tuners import tuner_names

        # Checked here, not by the callback in the AutoByte job: that job may run after the others.
        if self.tuner not in tuner_names():
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
    # One intra-op thread per worker (lightning_job also pins it against Lightning's own choice).
    env = {"PYTHONUNBUFFERED": "1", "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1"}
    if shaped:
        from ..testbed import BandwidthTrace, Testbed

        n = -(-plan.iters // plan.every)
        trace = BandwidthTrace.step([plan.high_mbit, plan.low_mbit], every=plan.every, unit="it", n_phases=max(1, n))
        with Testbed(2, trace=trace) as tb:
            rc = tb.run([sys.executable, *argv], timeout_s=plan.timeout_s, env=env, events_log=os.path.join(out, "events.jsonl"))
    else:
        from ..testing import run_ranks

        res = run_ranks(argv, 2, timeout_s=plan.timeout_s, one_node_per_rank=True, stream_rank0=True, env=env)
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


def _load() -> list[float]:
    """The host's 1, 5 and 15-minute load averages (empty where /proc is missing)."""
    try:
        with open("/proc/loadavg") as f:
            return [float(x) for x in f.read().split()[:3]]
    except OSError:
        return []


def _spread(xs: list[float], fmt: str) -> str:
    """Median and, with more than one value, the range: ``123.4 (118.0-130.2)``."""
    med = fmt.format(statistics.median(xs))
    return med if len(xs) < 2 else f"{med} ({fmt.format(min(xs))}-{fmt.format(max(xs))})"


def _spec(method: str, plan: DemoPlan) -> dict[str, Any]:
    start = [BYTESCHEDULER_DEFAULT.partition_bytes, BYTESCHEDULER_DEFAULT.credit_bytes]
    if method == "ddp":
        return {"method": "ddp", "iters": plan.iters}
    if method == "ddp_hook":
        return {"method": "ddp", "iters": plan.iters, "comm_hook": "fp16_compress_hook"}
    if method == "bytescheduler":
        return {"method": "static", "iters": plan.iters, "config": start}
    spec = {"method": "tuner", "tuner": plan.tuner, "iters": plan.iters, "window_iters": plan.window_iters, "config": start}
    return {**spec, "wire": "auto"} if method == "autobyte_wire" else spec


def _read_jsonl(path: str) -> list[dict[str, Any]]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def _ratios(num: list[float], den: list[float]) -> list[float]:
    """Round by round: ``num[i] / den[i]`` (0 where the denominator is)."""
    return [a / b if b else 0.0 for a, b in zip(num, den)]


#: What each method runs, said as it starts.
_HOW = {"autobyte": "tuner={tuner!r}, starting at ByteScheduler's default",
        "ddp_hook": "DDPStrategy(ddp_comm_hook=default_hooks.fp16_compress_hook)",
        "autobyte_wire": "AutoByteCallback(wire='auto'), tuner={tuner!r}, starting at ByteScheduler's default"}


def run_demo(plan: DemoPlan, out: str, log: Callable[[str], None] = print) -> dict[str, Any]:
    shaped, why = can_shape()
    os.makedirs(out, exist_ok=True)
    if shaped:
        log(f"autobyte demo: 2 workers in network namespaces; the link alternates {plan.high_mbit:g} and "
            f"{plan.low_mbit:g} Mbit/s every {plan.every} iterations.")
    else:
        log(f"autobyte demo: {why}, so the 2 workers talk over plain loopback (no emulated network, no bandwidth "
            "changes); run as root to see AutoByte follow a changing network.")
    names = dict(METHODS)
    keys = list(plan.methods)
    t0 = time.monotonic()
    load_start = _load()
    runs: dict[str, list[list[dict[str, Any]]]] = {k: [] for k in keys}
    decisions: list[list[dict[str, Any]]] = []
    wire_moves: list[list[dict[str, Any]]] = []
    wire_choices: list[list[dict[str, Any]]] = []
    n_jobs, job = plan.rounds * len(keys), 0
    for rnd in range(plan.rounds):
        order = keys[rnd % len(keys):] + keys[:rnd % len(keys)]  # rotated: no method always runs first
        for key in order:
            job += 1
            extra = f" ({_HOW[key].format(tuner=plan.tuner)})" if key in _HOW else ""
            log(f"[{job}/{n_jobs}] round {rnd + 1}/{plan.rounds}: {names[key]}{extra}, {plan.iters} iterations")
            run_dir = os.path.join(out, f"round{rnd + 1}", key)
            runs[key].append(_run_job(_spec(key, plan), run_dir, plan, shaped))
            if key == "ddp_hook":
                with open(os.path.join(run_dir, "job.json")) as f:
                    hooks = json.load(f)["comm_hooks"]
                if hooks != ["fp16_compress_hook"]:  # the row would be plain DDP under the hook's name
                    raise RuntimeError(f"the DDP + hook job ran with comm hooks {hooks}, not fp16_compress_hook (files in {run_dir})")
        if "autobyte" in keys:
            decisions.append(_read_jsonl(os.path.join(out, f"round{rnd + 1}", "autobyte", "decisions.jsonl")))
        if "autobyte_wire" in keys:
            wire_dir = os.path.join(out, f"round{rnd + 1}", "autobyte_wire")
            wire_moves.append([r for r in _read_jsonl(os.path.join(wire_dir, "reconfigurations.jsonl"))
                               if r["old"] != r["new"]])
            wire_choices.append(_read_jsonl(os.path.join(wire_dir, "wire_choices.jsonl")))
    load_end = _load()

    def phase(it: int) -> str:
        if not shaped:
            return "loopback"
        return "fast" if (it // plan.every) % 2 == 0 else "slow"

    skip = 3  # start-up iterations (process group, first plan) are left out of every run
    kinds = sorted({phase(r["iteration"]) for r in runs["ddp"][0]}) + ["all"]
    label = {"fast": f"fast ({plan.high_mbit:g} Mbit/s)", "slow": f"slow ({plan.low_mbit:g} Mbit/s)"}

    def measured(rows: list[dict[str, Any]], k: str) -> list[dict[str, Any]]:
        return [r for r in rows if r["iteration"] >= skip and (k == "all" or phase(r["iteration"]) == k)]

    def share16(rows: list[dict[str, Any]]) -> float:
        return sum(r.get("wire", "fp32") != "fp32" for r in rows) / len(rows) if rows else 0.0

    per_round = {key: {k: [_tput(measured(rows, k)) for rows in runs[key]] for k in kinds} for key in keys}
    speedup = {key: {k: _ratios(per_round[key][k], per_round["ddp"][k]) for k in kinds} for key in keys}
    methods: dict[str, Any] = {
        key: {"label": names[key], "samples_per_s": per_round[key], "speedup_vs_ddp": speedup[key],
              "median_samples_per_s": {k: statistics.median(v) for k, v in per_round[key].items()},
              "median_speedup_vs_ddp": {k: statistics.median(v) for k, v in speedup[key].items()}}
        for key in keys}
    vs_hook: dict[str, list[float]] = {}
    share: dict[str, list[float]] = {}
    if "autobyte_wire" in keys:
        # the share of the iterations the throughput counts (after the start-up ones)
        share = {k: [share16(measured(rows, k)) for rows in runs["autobyte_wire"]] for k in kinds}
        methods["autobyte_wire"]["share_16bit"] = share
        methods["autobyte_wire"]["median_share_16bit"] = {k: statistics.median(v) for k, v in share.items()}
        if "ddp_hook" in keys:
            vs_hook = {k: _ratios(per_round["autobyte_wire"][k], per_round["ddp_hook"][k]) for k in kinds}
            methods["autobyte_wire"]["speedup_vs_ddp_hook"] = vs_hook
            methods["autobyte_wire"]["median_speedup_vs_ddp_hook"] = {k: statistics.median(v) for k, v in vs_hook.items()}
    summary: dict[str, Any] = {
        "shaped": shaped, "rounds": plan.rounds, "iters": plan.iters, "every": plan.every,
        "high_mbit": plan.high_mbit if shaped else None, "low_mbit": plan.low_mbit if shaped else None,
        "load_start": load_start, "load_end": load_end, "methods": methods, "decisions": decisions,
        "wire_decisions": wire_moves, "wire_choices": wire_choices,
    }
    head = " | ".join(label.get(k, k) for k in kinds)
    spread = f"median (min-max) of {plan.rounds} rounds" if plan.rounds > 1 else "1 round, no spread"
    lines = ["", f"Throughput, samples/s of both workers, {spread}:", "",
             f"| method | {head} |", "|---|" + "---:|" * len(kinds)]
    for key in keys:
        lines.append(f"| {names[key]} | " + " | ".join(_spread(per_round[key][k], "{:.1f}") for k in kinds) + " |")
    lines += ["", f"Speed-up over plain DDP in the same round, {spread}:", "",
              f"| method | {head} |", "|---|" + "---:|" * len(kinds)]
    for key in keys:
        lines.append(f"| {names[key]} | " + " | ".join(_spread(speedup[key][k], "{:.2f}x") for k in kinds) + " |")
    if "ddp_hook" in keys:
        lines += ["", "DDP + fp16_compress_hook: DDPStrategy(ddp_comm_hook=default_hooks.fp16_compress_hook), one line; fp16 "
                  "because DDP refuses bf16_compress_hook without CUDA and NCCL. Lightning registers the hook on CUDA only "
                  "and ignores it on CPU, so here the demo registers it on the DDP module itself: the row is what the "
                  "line gives where it works."]
    if vs_hook:
        lines += ["", f"Speed-up over DDP + fp16_compress_hook (what a link-bound user runs instead) in the same round, {spread}:", "",
                  f"| method | {head} |", "|---|" + "---:|" * len(kinds),
                  f"| {names['autobyte_wire']} | " + " | ".join(_spread(vs_hook[k], "{:.2f}x") for k in kinds) + " |"]
    if "autobyte" in keys:
        lines += ["", "What AutoByte chose:"]
        for rnd, ds in enumerate(decisions):
            changes = [d for d in ds if d.get("reason")]
            lines.append(f"  round {rnd + 1}:" + ("" if changes else
                         f" kept {BYTESCHEDULER_DEFAULT} for the whole run (no candidate was predicted >5% faster)"))
            for d in changes:
                lines.append(f"    iteration {d['iteration']:>3} ({phase(d['iteration'])}): -> {Config(*d['config'])}  because {d['reason']}")
    if share:
        lines += ["", "What AutoByte, wire='auto' chose (bf16 only where measured at least 5% faster than fp32 in the "
                  "current conditions):",
                  f"  share of iterations at 16 bits, {spread}: "
                  + ", ".join(f"{label.get(k, k)} {_spread([100 * x for x in share[k]], '{:.0f}%')}" for k in kinds)]
        for rnd, (moves, choices) in enumerate(zip(wire_moves, wire_choices)):
            # a move's reason travels cut to the window protocol's REASON_BYTES: the tuner's choices have it whole
            events = [(r["iteration"], f"-> {Config.from_dict(r['new'])}  because "
                       + next((c["reason"] for c in choices if c["reason"].startswith(r["reason"])), r["reason"])) for r in moves]
            # a choice that kept the precision in force is in the tuner's choices only
            events += [(c["iteration"], f"kept {c['wire']}  because {c['reason']}") for c in choices
                       if not any(c["reason"].startswith(r["reason"]) for r in moves)]
            lines.append(f"  round {rnd + 1}:" + ("" if events else " fp32 throughout (16 bits were not tried)"))
            for it, text in sorted(events, key=lambda e: e[0]):
                lines.append(f"    iteration {it:>3} ({phase(it)}): {text}")
    summary["seconds"] = time.monotonic() - t0
    loads = " ".join(f"{x:g}" for x in load_start) + " at the start, " + " ".join(f"{x:g}" for x in load_end) + " at the end"
    lines.append(f"\nHost load averages (1, 5, 15 min): {loads}.")
    lines.append(f"Demo took {summary['seconds']:.0f} s; raw data in {out}/")
    text = "\n".join(lines)
    log(text)
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    with open(os.path.join(out, "summary.md"), "w") as f:
        f.write(text + "\n")
    return summary
