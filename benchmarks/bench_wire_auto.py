"""``wire="auto"`` on a link that moves between compute-bound and link-bound, against static fp32 and static 16 bits.

On the testbed (root), 2 CPU ranks on gloo, one thread each, the CNN of
``bench_wire.py`` (3.4M parameters, SGD, batch 16) at ByteScheduler's default
<4 MB, 4X> (no tuner of partition and credit, so only the precision moves);
the link alternates ``--high-mbit`` (compute-bound) and ``--low-mbit``
(link-bound) every ``--phase`` iterations, ``--phases`` phases, changed at the
iteration by the testbed's trace. Methods, each a run of its own on the same
trace, in rounds whose order alternates: ``fp32`` and ``bf16`` (static, the
baselines: what a user who fixes the precision gets) and ``auto``
(``schedule(..., wire="auto")``: fp32 unless bf16 measures 5% faster in the
current conditions). Per run: the time of each phase (rank 0, start to
start), the precision in force at every iteration, the wire's decisions.

    sudo python benchmarks/bench_wire_auto.py --out OUT                  # 4 phases of 200, 2 rounds
    sudo python benchmarks/bench_wire_auto.py --out OUT --phase 20 --phases 2 --rounds 1   # a smoke run

Writes ``OUT/summary.json`` and ``OUT/summary.md``: speed of ``auto``
against static bf16 and fp32 (whole run, median and range of rounds), and the
share of iterations ``auto`` ran at fp32 in each kind of phase; and
``OUT/runs.json``, the raw data: every run's time and precision per iteration.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

METHODS = ("fp32", "bf16", "auto")


def rank_main(opts: dict[str, Any]) -> None:
    import torch
    import torch.distributed as dist

    from autobyte.bench.models import make_cnn, synthetic_batches
    from autobyte.integrations.torch import schedule
    from autobyte.testbed import notify_iteration

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    data = synthetic_batches(4, 16, rank)
    model = make_cnn()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    decisions: list[dict[str, Any]] = []
    h = schedule(model, opt, wire=opts["method"], verbose=False,
                 on_decision=lambda out: decisions.append({"iteration": out.decision.iteration, "wire": out.decision.new.wire,
                                                           "reason": out.decision.reason}) if out.decision is not None else None)
    n = int(opts["iters"])
    times: list[float] = []
    wires: list[str] = []
    t0 = time.perf_counter()
    for i in range(n):
        if rank == 0:
            notify_iteration(i)
        wires.append(h.config.wire)
        x, y = data[i % len(data)]
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        t1 = time.perf_counter()
        times.append(t1 - t0)
        t0 = t1
    h.synchronize()
    # the choices made without a move (the precision in force chosen) are only in the tuner's log, on rank 0
    choices = list(getattr(h.controller.tuner, "choices", [])) if h.controller is not None else []
    h.close()
    if rank == 0:
        print(json.dumps({"method": opts["method"], "iter_s": times, "wires": wires, "decisions": decisions,
                          "choices": choices}), flush=True)
    dist.destroy_process_group()


def one_run(method: str, args: argparse.Namespace) -> dict[str, Any] | None:
    from autobyte.testbed import BandwidthTrace, Testbed

    iters = args.phase * args.phases
    trace = BandwidthTrace.step([args.high_mbit, args.low_mbit], every=args.phase, unit="it", n_phases=args.phases)
    buf = io.StringIO()
    cmd = [sys.executable, os.path.abspath(__file__), "--rank", json.dumps({"method": method, "iters": iters})]
    with Testbed(2, trace=trace) as tb:
        if tb.run(cmd, timeout_s=args.timeout_s, stdout=buf) != 0:
            print(buf.getvalue()[-4000:], file=sys.stderr)
            return None
    lines = [line.split("] ", 1)[-1] for line in buf.getvalue().splitlines() if line.startswith("[w0] ")]
    rows = [json.loads(line) for line in lines if line.startswith("{")]
    return rows[0] if rows else None


def phase_of(i: int, args: argparse.Namespace) -> str:
    return "compute-bound" if (i // args.phase) % 2 == 0 else "link-bound"


def summarize(runs: dict[str, list[dict[str, Any]]], args: argparse.Namespace) -> dict[str, Any]:
    skip = args.skip  # the first iterations of the run (start-up) are in no method's time
    total = {m: [sum(r["iter_s"][skip:]) for r in rs] for m, rs in runs.items()}
    out: dict[str, Any] = {"args": {k: v for k, v in vars(args).items() if k != "rank"}, "seconds": total}
    for base in ("bf16", "fp32"):
        if "auto" in total and base in total:
            # speed = iterations / time: auto against the base, round by round (the rounds pair runs made side by side)
            per = [b / a for a, b in zip(total["auto"], total[base])]
            out[f"auto_vs_{base}"] = {"median": statistics.median(per), "min": min(per), "max": max(per), "per_round": per}
    for m, rs in runs.items():
        kinds: dict[str, list[float]] = {}
        for r in rs:
            for kind in ("compute-bound", "link-bound"):
                idx = [i for i in range(skip, len(r["wires"])) if phase_of(i, args) == kind]
                kinds.setdefault(kind, []).append(sum(r["wires"][i] == "fp32" for i in idx) / max(1, len(idx)))
                kinds.setdefault(f"{kind} s/iteration", []).append(statistics.median(r["iter_s"][i] for i in idx))
        out.setdefault("fp32_share", {})[m] = {k: v for k, v in kinds.items() if not k.endswith("iteration")}
        out.setdefault("s_per_iteration", {})[m] = {k.split(" ")[0]: v for k, v in kinds.items() if k.endswith("iteration")}
    out["auto_decisions"] = [r["decisions"] for r in runs.get("auto", [])]
    out["auto_choices"] = [r["choices"] for r in runs.get("auto", [])]
    return out


def markdown(s: dict[str, Any], command: str) -> str:
    a = s["args"]
    lines = ["# wire=\"auto\" on a link that moves between compute-bound and link-bound", "", f"Command: `{command}`", "",
             f"CNN (3.4M parameters), 2 ranks on the testbed, <4 MB, 4X>; {a['phases']} phases of {a['phase']} iterations: "
             f"{a['high_mbit']:g} Mbit/s (compute-bound) and {a['low_mbit']:g} Mbit/s (link-bound) in turn; "
             f"{a['rounds']} round(s); the first {a['skip']} iterations of each run are not timed.", "",
             "| | median | min-max of rounds |", "|---|---:|---:|"]
    for base in ("bf16", "fp32"):
        if f"auto_vs_{base}" in s:
            r = s[f"auto_vs_{base}"]
            lines.append(f"| auto vs static {base} (speed) | {r['median']:.3f}x | {r['min']:.3f}-{r['max']:.3f}x |")
    lines += ["", "| method | s/iteration compute-bound | s/iteration link-bound | fp32 share compute-bound | fp32 share link-bound |",
              "|---|---:|---:|---:|---:|"]
    for m in s["fp32_share"]:
        sp, sh = s["s_per_iteration"][m], s["fp32_share"][m]
        lines.append(f"| {m} | {statistics.median(sp['compute-bound']):.3f} | {statistics.median(sp['link-bound']):.3f} | "
                     f"{', '.join(f'{v:.0%}' for v in sh['compute-bound'])} | {', '.join(f'{v:.0%}' for v in sh['link-bound'])} |")
    for k, ds in enumerate(s["auto_decisions"]):
        lines += ["", f"auto, round {k + 1}: " + ("no decision" if not ds else "")]
        lines += [f"- iteration {d['iteration']}: -> {d['wire']}: {d['reason']}" for d in ds]
        lines += [f"- iteration {c['iteration']}: chosen {c['wire']}: {c['reason']}" for c in s["auto_choices"][k]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--out", help="folder for summary.json and summary.md (required)")
    ap.add_argument("--high-mbit", type=float, default=10000.0, help="the compute-bound phases' rate (10000)")
    ap.add_argument("--low-mbit", type=float, default=200.0, help="the link-bound phases' rate (200)")
    ap.add_argument("--phase", type=int, default=200, help="iterations per phase (200)")
    ap.add_argument("--phases", type=int, default=4, help="phases, starting compute-bound (4)")
    ap.add_argument("--rounds", type=int, default=2, help="rounds of bf16 and auto (2)")
    ap.add_argument("--fp32-rounds", type=int, default=1, help="rounds that also run static fp32, the first ones (1)")
    ap.add_argument("--skip", type=int, default=5, help="untimed iterations at the start of every run (5)")
    ap.add_argument("--timeout-s", type=float, default=3600.0)
    ap.add_argument("--rank", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.rank:
        rank_main(json.loads(args.rank))
        return 0
    if not args.out:
        ap.error("--out is required: the folder for summary.json and summary.md.")
    for name in ("phase", "phases", "rounds"):
        if getattr(args, name) < 1:
            ap.error(f"--{name} must be a positive integer, but got {getattr(args, name)}.")
    if not 0 <= args.fp32_rounds <= args.rounds:
        ap.error(f"--fp32-rounds must be between 0 and --rounds ({args.rounds}), but got {args.fp32_rounds}.")
    if args.skip >= args.phase:
        ap.error(f"--skip must be below --phase ({args.phase}), but got {args.skip}.")
    runs: dict[str, list[dict[str, Any]]] = {}
    for k in range(args.rounds):
        order = ["auto", "bf16"] if k % 2 == 0 else ["bf16", "auto"]
        if k < args.fp32_rounds:
            order.append("fp32")
        for m in order:
            t = time.time()
            r = one_run(m, args)
            if r is None:
                print(f"bench_wire_auto: the {m} run of round {k + 1} failed", file=sys.stderr)
                return 1
            runs.setdefault(m, []).append(r)
            print(f"round {k + 1} {m}: {sum(r['iter_s']):.1f} s ({time.time() - t:.0f} s with set-up)", flush=True)
    s = summarize(runs, args)
    os.makedirs(args.out, exist_ok=True)
    command = "python benchmarks/bench_wire_auto.py " + " ".join(argv if argv is not None else sys.argv[1:])
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump({**s, "command": command}, f, indent=1)
    with open(os.path.join(args.out, "runs.json"), "w") as f:
        json.dump({m: [{"iter_s": r["iter_s"], "wires": r["wires"]} for r in rs] for m, rs in runs.items()}, f)
    text = markdown(s, command)
    with open(os.path.join(args.out, "summary.md"), "w") as f:
        f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
