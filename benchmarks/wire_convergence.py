"""Convergence at 16 bits on the wire: loss curves of DDP (fp32), DDP + the fp16/bf16 hooks and autobyte at bf16/fp16.

    python benchmarks/wire_convergence.py [--steps 600] [--out docs/figures/wire]

A causal Transformer LM (4 layers, width 128, 0.86M parameters, AdamW) learns a
generated language: token sequences drawn from a fixed random Markov chain
over 256 tokens (each token allows 8 next tokens, with random probabilities),
so the loss falls from ln(256) = 5.55 toward the chain's entropy (printed). Two CPU ranks on gloo, one thread each, batch 8 x 64
tokens per rank; every method trains from the same initial weights on the
same batches, one after the other in the same two processes. The loss
recorded at each step is the mean over the ranks of the step's training loss.

Reports, for each 16-bit curve, its distance from fp32's: the mean of
``|loss - loss_fp32|`` over the last 100 steps, and the final loss (the mean of
the last 50 steps), and checks that autobyte's distance at each precision is
no larger than DDP + hook's (up to 1e-6: the same numerics). Writes
``OUT/convergence.json`` (the summary and the curves as 20-step means) and
``OUT/convergence.png``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_torch_engine import run_on_link  # noqa: E402
from bench_wire import bf16_hook, lm_loss, make_lm  # noqa: E402

METHODS = ["ddp", "ddp+fp16", "ddp+bf16", "autobyte:bf16", "autobyte:fp16"]
LABELS = {"ddp": "DDP (fp32)", "ddp+fp16": "DDP + fp16_compress_hook", "ddp+bf16": "DDP + bf16_compress_hook",
          "autobyte:bf16": "autobyte wire=bf16", "autobyte:fp16": "autobyte wire=fp16"}
TASK = {"vocab": 256, "dim": 128, "layers": 4, "heads": 4, "seq": 64, "batch": 8, "fanout": 8, "lr": 1e-3}


def chain(seed: int = 0) -> tuple[Any, Any, float]:
    """The language: for each token, ``fanout`` allowed next tokens and their probabilities; and its entropy."""
    import torch

    g = torch.Generator().manual_seed(seed)
    v, k = TASK["vocab"], TASK["fanout"]
    nxt = torch.randint(0, v, (v, k), generator=g)
    prob = torch.distributions.Dirichlet(torch.ones(k)).sample((v,))  # torch's global generator, seeded below
    entropy = float(-(prob * prob.clamp_min(1e-12).log()).sum(-1).mean())
    return nxt, prob, entropy


def batches(nxt: Any, prob: Any, steps: int, rank: int) -> list[Any]:
    import torch

    g = torch.Generator().manual_seed(100 + rank)
    b, n, v = TASK["batch"], TASK["seq"] + 1, TASK["vocab"]
    out = []
    for _ in range(steps):
        seq = torch.empty(b, n, dtype=torch.long)
        seq[:, 0] = torch.randint(0, v, (b,), generator=g)
        for t in range(1, n):
            c = seq[:, t - 1]
            pick = torch.multinomial(prob[c], 1, generator=g).squeeze(1)
            seq[:, t] = nxt[c, pick]
        out.append(seq)
    return out


def rank_main(opts: dict[str, Any]) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    from autobyte.integrations.torch import schedule

    torch.set_num_threads(1)
    torch.manual_seed(0)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    nxt, prob, entropy = chain()
    data = batches(nxt, prob, int(opts["steps"]), rank)
    curves: dict[str, list[float]] = {}
    for method in opts["methods"]:
        t0 = time.perf_counter()
        model = make_lm(TASK["vocab"], TASK["dim"], TASK["layers"], TASK["heads"], TASK["seq"], seed=1)
        opt = torch.optim.AdamW(model.parameters(), lr=TASK["lr"])
        handle = None
        if method.startswith("ddp"):
            net: Any = torch.nn.parallel.DistributedDataParallel(model)
            if method == "ddp+fp16":
                net.register_comm_hook(None, default_hooks.fp16_compress_hook)
            elif method == "ddp+bf16":
                net.register_comm_hook(None, bf16_hook)
        else:
            net = model
            handle = schedule(model, opt, partition_bytes=1 << 20, credit_bytes=4 << 20, wire=method.split(":")[1],
                              verbose=False)
        losses = []
        for seq in data:
            opt.zero_grad()
            loss = lm_loss(net(seq[:, :-1]), seq[:, 1:])
            loss.backward()
            opt.step()
            mean = loss.detach().clone()
            dist.all_reduce(mean)
            losses.append(float(mean) / world)
        if handle is not None:
            handle.synchronize()
            handle.close()
        curves[method] = losses
        if rank == 0:
            print(f"# {method}: {len(losses)} steps in {time.perf_counter() - t0:.0f} s, last loss {losses[-1]:.4f}", flush=True)
    if rank == 0:
        print(json.dumps({"entropy": entropy, "curves": curves}), flush=True)
    dist.destroy_process_group()


def summarise(curves: dict[str, list[float]], entropy: float, last: int = 100, final: int = 50) -> dict[str, Any]:
    ref = curves["ddp"]
    rows = {}
    for m, c in curves.items():
        rows[m] = {"label": LABELS[m], "final_loss": sum(c[-final:]) / final,
                   "mean_abs_gap_last_steps": None if m == "ddp" else sum(abs(a - b) for a, b in zip(c[-last:], ref[-last:])) / last,
                   "max_abs_gap": None if m == "ddp" else max(abs(a - b) for a, b in zip(c, ref))}
    checks = {}
    for wire in ("bf16", "fp16"):
        mine, hook = rows.get(f"autobyte:{wire}"), rows.get(f"ddp+{wire}")
        if mine and hook:
            checks[wire] = {"autobyte_gap": mine["mean_abs_gap_last_steps"], "hook_gap": hook["mean_abs_gap_last_steps"],
                            "autobyte_no_further": mine["mean_abs_gap_last_steps"] <= hook["mean_abs_gap_last_steps"] + 1e-6,
                            "curves_identical": curves[f"autobyte:{wire}"] == curves[f"ddp+{wire}"]}
    return {"entropy_nats": entropy, "uniform_nats": math.log(TASK["vocab"]), "last_steps": last, "final_steps": final,
            "rows": rows, "checks": checks}


def plot(curves: dict[str, list[float]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def smooth(c: list[float], k: int = 10) -> list[float]:
        return [sum(c[max(0, i - k + 1):i + 1]) / len(c[max(0, i - k + 1):i + 1]) for i in range(len(c))]

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    styles = {"ddp": ("k", "-"), "ddp+fp16": ("tab:blue", "-"), "ddp+bf16": ("tab:red", "-"),
              "autobyte:fp16": ("tab:cyan", "--"), "autobyte:bf16": ("tab:orange", "--")}
    for m, c in curves.items():
        color, ls = styles[m]
        a.plot(smooth(c), color=color, ls=ls, lw=1.2, label=LABELS[m])
        if m != "ddp":
            b.plot(smooth([x - y for x, y in zip(c, curves["ddp"])]), color=color, ls=ls, lw=1.2, label=LABELS[m])
    a.set(xlabel="step", ylabel="training loss (10-step mean)", title="loss, 2 ranks on gloo")
    b.set(xlabel="step", ylabel="loss - loss of DDP fp32 (10-step mean)", title="distance from fp32")
    b.axhline(0, color="k", lw=0.5)
    a.legend(fontsize=8)
    b.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rank", help=argparse.SUPPRESS)
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--out", default=None, help="folder for convergence.json and convergence.png (default: print only)")
    args = ap.parse_args(argv)
    if args.rank is not None:
        rank_main(json.loads(args.rank))
        return 0
    methods = args.methods.split(",")
    if "ddp" not in methods or any(m not in METHODS for m in methods):
        raise SystemExit(f"--methods must include 'ddp' and be among {METHODS}, but got {args.methods!r}.")
    t0 = time.time()
    out = run_on_link([os.path.abspath(__file__), "--rank", json.dumps({"steps": args.steps, "methods": methods})], None)
    if out is None:
        return 1
    for line in out.splitlines():
        if line.startswith("#"):
            print(line[2:])
    res = json.loads([line for line in out.splitlines() if line.startswith("{")][-1])
    summary = summarise(res["curves"], res["entropy"], last=min(100, args.steps), final=min(50, args.steps))
    summary.update(command=f"python benchmarks/wire_convergence.py --steps {args.steps}", steps=args.steps, task=TASK,
                   wall_s=round(time.time() - t0, 1))
    print(f"chain entropy {summary['entropy_nats']:.3f} nats (uniform {summary['uniform_nats']:.3f})")
    for m, r in summary["rows"].items():
        gap = "" if r["mean_abs_gap_last_steps"] is None else f", mean |loss - fp32| over the last {summary['last_steps']} steps " \
                                                             f"{r['mean_abs_gap_last_steps']:.5f}"
        print(f"{r['label']}: final loss {r['final_loss']:.4f}{gap}")
    for wire, c in summary["checks"].items():
        print(f"{wire}: autobyte's distance {c['autobyte_gap']:.5f} vs the hook's {c['hook_gap']:.5f}: "
              f"{'no larger' if c['autobyte_no_further'] else 'LARGER'}; curves identical: {c['curves_identical']}")
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "convergence.json"), "w") as f:
            k = 20  # the figure's curves as 20-step means (no per-step data)
            means = {m: [round(sum(c[i:i + k]) / len(c[i:i + k]), 5) for i in range(0, len(c), k)] for m, c in res["curves"].items()}
            json.dump({**summary, "curves_20_step_means": means}, f, indent=1)
        plot(res["curves"], os.path.join(args.out, "convergence.png"))
    return 0 if all(c["autobyte_no_further"] for c in summary["checks"].values()) else 2


if __name__ == "__main__":
    sys.exit(main())
