"""``wire="auto"`` on a link that moves between compute-bound and link-bound, against static fp32 and static 16 bits.

On the testbed (root), 2 CPU ranks on gloo, one thread each, at ByteScheduler's
default <4 MB, 4X> (no tuner of partition and credit, so only the precision
moves); the link's rate changes at the iteration by the testbed's trace.
Methods, each a run of its own on the same trace, in rounds whose order
alternates: ``fp32`` and ``bf16`` (static, the baselines: what a user who fixes
the precision gets, under ``tuner="static"`` so that they issue in priority
order as ``auto`` does) and ``auto`` (``schedule(..., wire="auto")``: fp32 unless
bf16 measures 5% faster in the current conditions). Per run: the time and the
precision in force at every iteration, the wire's decisions.

Three scenarios:

* ``--scenario tuning`` (the default): the CNN of ``bench_wire.py`` (3.4M
  parameters, SGD, batch 16); the link alternates ``--high-mbit``
  (compute-bound) and ``--low-mbit`` (link-bound) every ``--phase``
  iterations, ``--phases`` phases. ``wire="auto"``'s rules were designed on
  this trace and on the demo's.
* ``--scenario heldout-*``: kept apart for judging, each written before
  any run of it (:data:`HELDOUT`):
  another model (the transformer of the benchmark suite, 4.6M parameters, 16
  MiB of them in the embedding, the first layer: the tensor sent first and
  ready last; the MLP of the suite, 10.5M parameters in two matrices of 24
  and 16 MiB), other rates, phases of 20-150 iterations. Their phase lists
  and models are fixed; the flags that shape the tuning trace are refused
  with them. A held-out scenario judges the rules as they were when it was
  written: once its runs have been read, rules designed after it are judged
  on a new one (``heldout-transformer`` judged the rules of ``b09314e``,
  ``heldout-mlp`` those of ``ca35895``, ``heldout-transformer-15000`` (the
  transformer at the first one's batch, at rates none read before) those
  of the recognition by link rate, ``heldout-transformer-18000`` (the same
  model, new rates, a link that gets slower and faster in turn) those of
  the recognition of a slower link, ``heldout-transformer-16000`` (the same
  model, new rates) those of a comparison's readings kept as references,
  ``heldout-transformer-b16`` (the same model at batch 16, starting on a
  slow link, new rates) a start at 16 bits).

A phase's kind is measured when static fp32 and static bf16 both ran: a phase
is link-bound where static bf16's median time per iteration is at least
``MIN_GAIN`` (the preference's 5%) below static fp32's, compute-bound
otherwise. Without fp32 runs, the phases at the trace's highest rate are the
compute-bound ones.

    sudo python benchmarks/bench_wire_auto.py --out OUT                  # 4 phases of 200, 2 rounds
    sudo python benchmarks/bench_wire_auto.py --out OUT --scenario heldout-mlp --rounds 3
    sudo python benchmarks/bench_wire_auto.py --out OUT --phase 20 --phases 2 --rounds 1   # a smoke run

Writes ``OUT/summary.json`` and ``OUT/summary.md``: speed of ``auto``
against static bf16 and fp32 (whole run, median and range of rounds), each
phase's time per iteration and ``auto``'s share of iterations at fp32, by
phase and by kind of phase; and ``OUT/runs.json``, the raw data: every run's
time and precision per iteration.
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

from autobyte.core.wire import AutoWire  # noqa: E402  (core imports no framework: cheap in the driver)

METHODS = ("fp32", "bf16", "auto")

#: The preference's ``min_gain`` (``wire="auto"``'s default): the gain of bf16 over fp32 that makes a phase link-bound.
MIN_GAIN = AutoWire().min_gain

#: The held-out scenarios, each fixed before any run of it: model, batch per rank, and the trace as
#: ``(Mbit/s, iterations)`` phases. None of their rates is the tuning trace's, the demo's or
#: ``wire_readings.py``'s. The batches were sized by static runs only (fp32 and bf16): the transformer's
#: at 48, where its compute (~0.14 s) hides its 18 MB of gradient at 8000 Mbit/s (bf16 0.181 s per
#: iteration, fp32 0.178; at 16 it does not: 0.078 against 0.085); the MLP's at 1024, where 12000
#: Mbit/s is compute-bound (bf16 0.628 s, fp32 0.647; at 256 bf16 0.197 s against fp32's 0.221) and
#: 700 Mbit/s is not (0.771 against 0.953), 20 iterations each.
HELDOUT: dict[str, dict[str, Any]] = {
    "heldout-transformer": {
        "model": "transformer",
        "batch": 48,
        "phases": [(8000.0, 120), (400.0, 60), (3000.0, 40), (300.0, 100), (8000.0, 30), (600.0, 150), (8000.0, 80),
                   (300.0, 20), (1500.0, 80)],
    },
    "heldout-transformer-15000": {
        "model": "transformer",
        "batch": 48,
        "phases": [(15000.0, 60), (550.0, 50), (2500.0, 40), (320.0, 60), (15000.0, 40), (800.0, 60), (4000.0, 40),
                   (320.0, 30), (1200.0, 50)],
    },
    "heldout-mlp": {
        "model": "mlp",
        "batch": 1024,
        "phases": [(12000.0, 40), (700.0, 30), (2000.0, 30), (350.0, 30), (12000.0, 30), (450.0, 40), (5000.0, 30),
                   (350.0, 20), (900.0, 30)],
    },
    # written after heldout-transformer-15000's runs had been read (its fp32 trials at each new link-bound rate
    # motivated the recognition of a slower link): links that get slower and faster in turn, new rates
    "heldout-transformer-18000": {
        "model": "transformer",
        "batch": 48,
        "phases": [(18000.0, 50), (650.0, 50), (1800.0, 40), (380.0, 50), (6000.0, 40), (260.0, 40), (18000.0, 40),
                   (1100.0, 50), (480.0, 40), (3500.0, 40)],
    },
    # written after heldout-transformer-18000's runs had been read (its first link-bound phase compared twice where
    # the first choice, decided at fp32's reading, kept no rate of bf16's): new rates, three drops from
    # compute-bound to link-bound, the link slower and faster in turn
    "heldout-transformer-16000": {
        "model": "transformer",
        "batch": 48,
        "phases": [(16000.0, 50), (580.0, 50), (2200.0, 40), (340.0, 50), (7000.0, 40), (280.0, 40), (16000.0, 40),
                   (420.0, 40), (1300.0, 50), (4500.0, 40)],
    },
    # written after heldout-transformer-16000's runs had been read, before wire="auto" started at 16 bits (the demo's
    # first 12 iterations ran fp32 on a link-bound start): the transformer at batch 16 (compute a third of batch 48's
    # against the same gradient), starting on a slow link, new rates
    "heldout-transformer-b16": {
        "model": "transformer",
        "batch": 16,
        "phases": [(240.0, 60), (9000.0, 40), (520.0, 50), (2700.0, 40), (310.0, 50), (14000.0, 40), (720.0, 40),
                   (5500.0, 40), (1600.0, 40)],
    },
}


def rank_job(opts: dict[str, Any]) -> tuple[int, list[Any], Any, Any]:
    """One rank of a run (also ``wire_readings.py``'s): one thread, gloo joined; its rank, 4 batches of ``opts["model"]``
    at ``opts["batch"]``, the model and its SGD optimizer."""
    import torch
    import torch.distributed as dist

    from autobyte.bench.models import make_model, model_batches

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = make_model(opts["model"])
    return rank, model_batches(opts["model"], 4, int(opts["batch"]), rank), model, \
        torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)


def rank_main(opts: dict[str, Any]) -> None:
    import torch
    import torch.distributed as dist

    from autobyte.integrations.torch import schedule
    from autobyte.testbed import notify_iteration

    rank, data, model, opt = rank_job(opts)
    decisions: list[dict[str, Any]] = []
    # The static precisions run under tuner="static": windows that never move, so the engine learns the gradients'
    # times and issues in priority order as auto's controller does (with tuner=None it keeps the ready order all
    # run, up to 13% slower: docs/torch.md), the strongest fixed-precision baseline.
    h = schedule(model, opt, wire=opts["method"], tuner=None if opts["method"] == "auto" else "static", verbose=False,
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
    from autobyte.testbed import BandwidthTrace, RateChange, Testbed

    starts = phase_starts(args)
    trace = BandwidthTrace(tuple(RateChange(a, rate) for a, (rate, _) in zip(starts, args.plan)))
    buf = io.StringIO()
    spec = {"method": method, "iters": starts[-1] + args.plan[-1][1], "model": args.model, "batch": args.batch}
    cmd = [sys.executable, os.path.abspath(__file__), "--rank", json.dumps(spec)]
    with Testbed(2, trace=trace) as tb:
        if tb.run(cmd, timeout_s=args.timeout_s, stdout=buf) != 0:
            print(buf.getvalue()[-4000:], file=sys.stderr)
            return None
    lines = [line.split("] ", 1)[-1] for line in buf.getvalue().splitlines() if line.startswith("[w0] ")]
    rows = [json.loads(line) for line in lines if line.startswith("{")]
    return rows[0] if rows else None


def phase_starts(args: argparse.Namespace) -> list[int]:
    """The first iteration of each phase of ``args.plan`` (a list of ``(Mbit/s, iterations)``)."""
    starts, at = [], 0
    for _, n in args.plan:
        starts.append(at)
        at += n
    return starts


def phase_spans(args: argparse.Namespace) -> list[range]:
    """The timed iterations of each phase: its own, less the run's first ``args.skip``."""
    return [range(max(a, args.skip), a + n) for a, (_, n) in zip(phase_starts(args), args.plan)]


def phase_kinds(runs: dict[str, list[dict[str, Any]]], args: argparse.Namespace) -> tuple[list[str], str]:
    """Each phase's kind, and how it was told: measured from the static runs where fp32 and bf16 both ran, else by rate."""
    if runs.get("fp32") and runs.get("bf16"):
        kinds = []
        for idx in phase_spans(args):
            fp32 = statistics.median(statistics.median(r["iter_s"][i] for i in idx) for r in runs["fp32"])
            bf16 = statistics.median(statistics.median(r["iter_s"][i] for i in idx) for r in runs["bf16"])
            kinds.append("link-bound" if fp32 >= (1 + MIN_GAIN) * bf16 else "compute-bound")
        return kinds, f"measured: link-bound where static bf16 ran at least {MIN_GAIN:.0%} faster than static fp32"
    top = max(rate for rate, _ in args.plan)
    return ["compute-bound" if rate == top else "link-bound" for rate, _ in args.plan], \
        f"by rate: compute-bound at the trace's highest rate ({top:g} Mbit/s)"


def summarize(runs: dict[str, list[dict[str, Any]]], args: argparse.Namespace) -> dict[str, Any]:
    skip = args.skip  # the first iterations of the run (start-up) are in no method's time
    total = {m: [sum(r["iter_s"][skip:]) for r in rs] for m, rs in runs.items()}
    out: dict[str, Any] = {"args": {k: v for k, v in vars(args).items() if k != "rank"}, "seconds": total}
    for base in ("bf16", "fp32"):
        if "auto" in total and base in total:
            # speed = iterations / time: auto against the base, round by round (the rounds pair runs made side by side)
            per = [b / a for a, b in zip(total["auto"], total[base])]
            out[f"auto_vs_{base}"] = {"median": statistics.median(per), "min": min(per), "max": max(per), "per_round": per}
    kinds, how = phase_kinds(runs, args)
    out["kinds_told"] = how
    spans = phase_spans(args)
    out["phases"] = [{"mbit": rate, "iterations": n, "kind": k,
                      "s_per_iteration": {m: [statistics.median(r["iter_s"][i] for i in span) for r in rs] for m, rs in runs.items()},
                      "fp32_share": {m: [sum(r["wires"][i] == "fp32" for i in span) / len(span) for r in rs] for m, rs in runs.items()}}
                     for (rate, n), k, span in zip(args.plan, kinds, spans)]
    of_kind = {kind: [i for k, span in zip(kinds, spans) if k == kind for i in span] for kind in ("compute-bound", "link-bound")}
    for m, rs in runs.items():
        by_kind: dict[str, list[float]] = {}
        for r in rs:
            for kind, idx in of_kind.items():
                if not idx:
                    continue
                by_kind.setdefault(kind, []).append(sum(r["wires"][i] == "fp32" for i in idx) / len(idx))
                by_kind.setdefault(f"{kind} s/iteration", []).append(statistics.median(r["iter_s"][i] for i in idx))
        out.setdefault("fp32_share", {})[m] = {k: v for k, v in by_kind.items() if not k.endswith("iteration")}
        out.setdefault("s_per_iteration", {})[m] = {k.split(" ")[0]: v for k, v in by_kind.items() if k.endswith("iteration")}
    out["auto_decisions"] = [r["decisions"] for r in runs.get("auto", [])]
    out["auto_choices"] = [r["choices"] for r in runs.get("auto", [])]
    return out


def _shares(v: list[float] | None) -> str:
    return ", ".join(f"{x:.0%}" for x in v) if v else "-"


def markdown(s: dict[str, Any], command: str) -> str:
    a = s["args"]
    model = {"cnn": "CNN (3.4M parameters)", "transformer": "transformer (4.6M parameters)", "mlp": "MLP (10.5M parameters)"}
    trace = ", ".join(f"{rate:g} Mbit/s x {n}" for rate, n in a["plan"])
    lines = ["# wire=\"auto\" on a link that moves between compute-bound and link-bound", "", f"Command: `{command}`", "",
             f"Scenario `{a['scenario']}`: {model[a['model']]}, batch {a['batch']} per rank, 2 ranks on the testbed, <4 MB, 4X>; "
             f"phases (rate x iterations): {trace}; {a['rounds']} round(s); the first {a['skip']} iterations of each run are "
             f"not timed. Kinds of phase {s['kinds_told']}.", "",
             "| | median | min-max of rounds |", "|---|---:|---:|"]
    for base in ("bf16", "fp32"):
        if f"auto_vs_{base}" in s:
            r = s[f"auto_vs_{base}"]
            lines.append(f"| auto vs static {base} (speed) | {r['median']:.3f}x | {r['min']:.3f}-{r['max']:.3f}x |")
    lines += ["", "| method | s/iteration compute-bound | s/iteration link-bound | fp32 share compute-bound | fp32 share link-bound |",
              "|---|---:|---:|---:|---:|"]
    for m in s["fp32_share"]:
        sp, sh = s["s_per_iteration"][m], s["fp32_share"][m]
        med = {k: f"{statistics.median(v):.3f}" if v else "-" for k, v in ((k, sp.get(k)) for k in ("compute-bound", "link-bound"))}
        lines.append(f"| {m} | {med['compute-bound']} | {med['link-bound']} | "
                     f"{_shares(sh.get('compute-bound'))} | {_shares(sh.get('link-bound'))} |")
    methods = list(s["fp32_share"])
    lines += ["", "Each phase (s/iteration: median over the phase, then over rounds; fp32 share of auto: per round):", "",
              "| phase | Mbit/s | iterations | kind | " + " | ".join(f"{m} s/it" for m in methods) + " | auto fp32 share |",
              "|---:|---:|---:|---|" + "---:|" * len(methods) + "---:|"]
    for k, ph in enumerate(s["phases"]):
        cells = [f"{statistics.median(ph['s_per_iteration'][m]):.3f}" for m in methods]
        lines.append(f"| {k + 1} | {ph['mbit']:g} | {ph['iterations']} | {ph['kind']} | " + " | ".join(cells) +
                     f" | {_shares(ph['fp32_share'].get('auto'))} |")
    for k, ds in enumerate(s["auto_decisions"]):
        lines += ["", f"auto, round {k + 1}: " + ("no decision" if not ds else "")]
        lines += [f"- iteration {d['iteration']}: -> {d['wire']}: {d['reason']}" for d in ds]
        lines += [f"- iteration {c['iteration']}: chosen {c['wire']}: {c['reason']}" for c in s["auto_choices"][k]]
    return "\n".join(lines) + "\n"


def plan_of(args: argparse.Namespace, error: Any) -> list[tuple[float, int]]:
    """The scenario's phases as ``(Mbit/s, iterations)``; ``error`` (the parser's) for flags it does not take."""
    shaping = ("high_mbit", "low_mbit", "phase", "phases")
    if args.scenario in HELDOUT:
        given = [f"--{n.replace('_', '-')}" for n in shaping + ("model", "batch") if getattr(args, n) is not None]
        if given:
            error(f"--scenario {args.scenario} fixes its model and trace, but got {', '.join(given)}.")
        held = HELDOUT[args.scenario]
        args.model, args.batch = held["model"], held["batch"]
        return [(float(r), int(n)) for r, n in held["phases"]]
    defaults = {"high_mbit": 10000.0, "low_mbit": 200.0, "phase": 200, "phases": 4, "model": "cnn", "batch": 16}
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    for name in ("phase", "phases", "batch"):
        if getattr(args, name) < 1:
            error(f"--{name} must be a positive integer, but got {getattr(args, name)}.")
    for name in ("high_mbit", "low_mbit"):
        if not getattr(args, name) > 0:
            error(f"--{name.replace('_', '-')} must be a positive rate in Mbit/s, but got {getattr(args, name)}.")
    return [(args.high_mbit if k % 2 == 0 else args.low_mbit, args.phase) for k in range(args.phases)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--out", help="folder for summary.json and summary.md (required)")
    ap.add_argument("--scenario", choices=("tuning", *HELDOUT), default="tuning",
                    help="tuning: the CNN on two alternating rates (the flags below); heldout-*: HELDOUT's, fixed (tuning)")
    ap.add_argument("--model", choices=("cnn", "transformer", "mlp"), help="the tuning scenario's model (cnn)")
    ap.add_argument("--batch", type=int, help="the tuning scenario's batch per rank (16)")
    ap.add_argument("--high-mbit", type=float, help="the tuning scenario's compute-bound rate (10000)")
    ap.add_argument("--low-mbit", type=float, help="the tuning scenario's link-bound rate (200)")
    ap.add_argument("--phase", type=int, help="the tuning scenario's iterations per phase (200)")
    ap.add_argument("--phases", type=int, help="the tuning scenario's phases, starting compute-bound (4)")
    ap.add_argument("--methods", default="fp32,bf16,auto", help="which of fp32, bf16, auto to run (all three)")
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
    args.plan = plan_of(args, ap.error)
    methods = args.methods.split(",")
    if any(m not in METHODS for m in methods) or len(set(methods)) != len(methods):
        ap.error(f"--methods must be distinct names from {', '.join(METHODS)}, comma-separated, but got {args.methods!r}.")
    if args.rounds < 1:
        ap.error(f"--rounds must be a positive integer, but got {args.rounds}.")
    if not 0 <= args.fp32_rounds <= args.rounds:
        ap.error(f"--fp32-rounds must be between 0 and --rounds ({args.rounds}), but got {args.fp32_rounds}.")
    if not 0 <= args.skip < args.plan[0][1]:
        ap.error(f"--skip must be at least 0 and below the first phase's length ({args.plan[0][1]}), but got {args.skip}.")
    runs: dict[str, list[dict[str, Any]]] = {}
    for k in range(args.rounds):
        order = [m for m in (["auto", "bf16"] if k % 2 == 0 else ["bf16", "auto"]) if m in methods]
        if k < args.fp32_rounds and "fp32" in methods:
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
