"""What a bandwidth-bound PyTorch user picks: DDP, DDP + a 16-bit compression hook, or autobyte at 16 bits.

    python benchmarks/bench_wire.py [--models cnn,lm] [--rates unshaped,2000,500,200] [--rounds 3]
                                    [--iters 10] [--out docs/figures/wire]

Two CPU ranks on gloo, one thread each, on a link shaped by the testbed
(``--rates``: Mbit/s, or ``unshaped`` for loopback; shaped rates need root).
For each model and rate, the methods below run side by side in the same two
processes, interleaved round by round (every method once per round, so slow
drifts of the machine hit all alike); each round times ``--iters`` training
iterations (after one warm-up pass per method) and the table gives, per
method, the median seconds per iteration over the rounds, the spread
(min-max), and the ratio of speeds to DDP with the hook of the same
precision (fp32: plain DDP).

Methods: ``ddp`` (25 MiB buckets), ``ddp+fp16`` (``fp16_compress_hook``),
``ddp+bf16`` (``bf16_compress_hook``: DDP refuses the hook by name without
CUDA and NCCL, so it is registered under another name; the hook itself runs
on gloo), and the engine (``schedule(..., tuner="static")``: priority order,
no moves) at fp32, bf16 and fp16, each at ByteScheduler's default
<4 MB, 4X> and at <1 MiB, 4X>.

Models: ``cnn`` (autobyte.bench.models.make_cnn, 3.4M parameters, SGD with
momentum, batch 16) and ``lm`` (a 6-layer causal Transformer LM, 16.8M
parameters, AdamW, batch 4 x 64 tokens). Writes ``OUT/summary.json`` and
``OUT/summary.md`` (no per-iteration data).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_torch_engine import run_on_link  # noqa: E402  (the same 2-rank launch, loopback or testbed)
from torch_ranks import timed_steps  # noqa: E402  (the same timed loop)

from autobyte.core import MiB  # noqa: E402
from autobyte.core.space import BYTESCHEDULER_DEFAULT  # noqa: E402

CONFIGS = {"bs": (BYTESCHEDULER_DEFAULT.partition_bytes, BYTESCHEDULER_DEFAULT.credit_bytes), "1m": (1 * MiB, 4 * MiB)}
METHODS = ["ddp", "ddp+fp16", "ddp+bf16"] + [f"autobyte:{w}:{c}" for w in ("fp32", "bf16", "fp16") for c in CONFIGS]
MODELS = ("cnn", "lm")
#: the LM: vocabulary, width, layers, heads, tokens per sequence (16.8M parameters)
LM = {"vocab": 23552, "dim": 256, "layers": 6, "heads": 4, "seq": 64}


def label(method: str) -> str:
    if not method.startswith("autobyte:"):
        return {"ddp": "DDP", "ddp+fp16": "DDP + fp16_compress_hook", "ddp+bf16": "DDP + bf16_compress_hook"}[method]
    _, wire, cfg = method.split(":")
    p, c = CONFIGS[cfg]
    size = f"{p / MiB:g} MiB" if p % MiB == 0 else f"{p / 1e6:g} MB"
    return f"autobyte {wire} <{size}, {c / p:g}X>"


def baseline(method: str) -> str:
    """The DDP method of the same precision."""
    wire = method.split(":")[1] if method.startswith("autobyte:") else method.partition("+")[2] or "fp32"
    return "ddp" if wire == "fp32" else f"ddp+{wire}"


# ----------------------------------------------------------------- one rank
def make_lm(vocab: int, dim: int, layers: int, heads: int, seq: int, seed: int = 0) -> Any:
    """A causal Transformer LM: token and position embeddings, pre-norm encoder layers, an untied head."""
    import torch

    nn = torch.nn
    torch.manual_seed(seed)

    class LM(nn.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.tok = nn.Embedding(vocab, dim)
            self.pos = nn.Embedding(seq, dim)
            layer = nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.0, batch_first=True, norm_first=True)
            self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
            self.norm = nn.LayerNorm(dim)
            self.head = nn.Linear(dim, vocab)
            self.causal = nn.Transformer.generate_square_subsequent_mask(seq)  # not a buffer: nothing to broadcast

        def forward(self, tokens: Any) -> Any:
            n = tokens.shape[1]
            h = self.tok(tokens) + self.pos.weight[:n]
            return self.head(self.norm(self.blocks(h, mask=self.causal[:n, :n], is_causal=True)))

    return LM()


def lm_loss(logits: Any, targets: Any) -> Any:
    import torch

    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def bf16_hook(state, bucket):  # type: ignore[no-untyped-def]  # (DDP reads the annotations: none)
    """DDP's ``bf16_compress_hook`` under another name (DDP refuses that name without CUDA and NCCL)."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    return default_hooks.bf16_compress_hook(state, bucket)


def rank_main(opts: dict[str, Any]) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    from autobyte.bench.models import make_cnn, synthetic_batches
    from autobyte.integrations.torch import schedule

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model_name = opts["model"]
    if model_name == "lm":
        g = torch.Generator().manual_seed(rank)
        text = [torch.randint(0, LM["vocab"], (4, LM["seq"] + 1), generator=g) for _ in range(4)]
        data = [(t[:, :-1], t[:, 1:]) for t in text]
        loss_fn = lm_loss
    else:
        data = synthetic_batches(4, 16, rank)
        loss_fn = torch.nn.functional.cross_entropy

    runners = []
    for method in opts["methods"]:
        model = make_lm(**LM) if model_name == "lm" else make_cnn()
        opt = (torch.optim.AdamW(model.parameters(), lr=1e-4) if model_name == "lm"
               else torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9))
        finish: Any = lambda: None  # noqa: E731
        if method.startswith("ddp"):
            net = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=25)
            if method == "ddp+fp16":
                net.register_comm_hook(None, default_hooks.fp16_compress_hook)
            elif method == "ddp+bf16":
                net.register_comm_hook(None, bf16_hook)
        else:
            _, wire, cfg = method.split(":")
            p, c = CONFIGS[cfg]
            net = model
            h = schedule(model, opt, partition_bytes=p, credit_bytes=c, wire=wire, tuner="static", verbose=False)
            finish = h.synchronize
        runners.append((net, opt, finish))

    def run(net: Any, opt: Any, finish: Any, n: int) -> float:
        return timed_steps(net, opt, finish, n, data, loss_fn)

    for net, opt, finish in runners:
        run(net, opt, finish, int(opts["warmup"]))
    iters = int(opts["iters"])
    per: list[list[float]] = [[] for _ in runners]
    for _ in range(int(opts["rounds"])):
        for i, (net, opt, finish) in enumerate(runners):
            per[i].append(run(net, opt, finish, iters) / iters)
    if rank == 0:
        for method, times in zip(opts["methods"], per):
            print(json.dumps({"method": method, "s_per_iter": times}), flush=True)
    dist.destroy_process_group()


# ------------------------------------------------------------------- driver
def cell(model: str, rate: str, args: argparse.Namespace) -> list[dict[str, Any]] | None:
    opts = {"model": model, "methods": args.methods, "rounds": args.rounds, "iters": args.iters, "warmup": args.warmup}
    mbit = None if rate == "unshaped" else float(rate)
    out = run_on_link([os.path.abspath(__file__), "--rank", json.dumps(opts)], mbit, timeout_s=args.timeout_s)
    if out is None:
        return None
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    by = {r["method"]: r["s_per_iter"] for r in rows}
    result = []
    for method in args.methods:
        times = by[method]
        med = statistics.median(times)
        base = by.get(baseline(method))
        result.append({"method": method, "label": label(method), "s_per_iter_rounds": [round(t, 4) for t in times],
                       "median_s": round(med, 4), "spread_s": [round(min(times), 4), round(max(times), 4)],
                       "vs_same_precision_ddp": None if base is None else round(statistics.median(base) / med, 3),
                       "vs_ddp": round(statistics.median(by["ddp"]) / med, 3) if "ddp" in by else None})
    return result


def load_average() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        return "unknown"


def write(out_dir: str, summary: dict[str, Any]) -> None:
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    lines = [f"# 16-bit gradients on the wire: {summary['command']}", ""]
    for c in summary["cells"]:
        lines += [f"## {c['model']}, {c['rate']} ({'Mbit/s' if c['rate'] != 'unshaped' else 'loopback'}); "
                  f"load before: {c['load_before']}", "",
                  f"| method | s/iteration (median of {summary['rounds']}) | spread | vs DDP + same-precision hook | vs DDP |",
                  "|---|---:|---:|---:|---:|"]
        for r in c["rows"]:
            lines.append(f"| {r['label']} | {r['median_s']:.3f} | {r['spread_s'][0]:.3f}-{r['spread_s'][1]:.3f} | "
                         f"{r['vs_same_precision_ddp']:.2f}x | {r['vs_ddp']:.2f}x |")
        lines.append("")
    with open(os.path.join(out_dir, "summary.md"), "w") as f:
        f.write("\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rank", help=argparse.SUPPRESS)
    ap.add_argument("--models", default="cnn,lm")
    ap.add_argument("--rates", default="unshaped,2000,500,200")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--out", default=None, help="folder for summary.json and summary.md (default: print only)")
    ap.add_argument("--timeout-s", type=float, default=3600.0)
    args = ap.parse_args(argv)
    if args.rank is not None:
        rank_main(json.loads(args.rank))
        return 0
    args.methods = args.methods.split(",")
    bad = [m for m in args.methods if m not in METHODS]
    if bad:
        raise SystemExit(f"--methods must be among {METHODS}, but got {bad}.")
    models = args.models.split(",")
    if any(m not in MODELS for m in models):
        raise SystemExit(f"--models must be among {MODELS}, but got {args.models!r}.")
    cmd = "python benchmarks/bench_wire.py " + " ".join(a for a in (argv if argv is not None else sys.argv[1:]))
    summary: dict[str, Any] = {"command": cmd.strip(), "rounds": args.rounds, "iters": args.iters, "lm": LM, "cells": []}
    for rate in args.rates.split(","):
        for model in models:
            load = load_average()
            t0 = time.time()
            rows = cell(model, rate, args)
            if rows is None:
                return 1
            summary["cells"].append({"model": model, "rate": rate, "load_before": load, "wall_s": round(time.time() - t0, 1),
                                     "rows": rows})
            print(f"{model} at {rate}: " + ", ".join(f"{r['label']} {r['median_s']:.3f} s "
                                                       f"({r['vs_same_precision_ddp']:.2f}x)" for r in rows), flush=True)
            if args.out:
                write(args.out, summary)  # after every cell: a long run that stops keeps what it measured
    return 0


if __name__ == "__main__":
    sys.exit(main())
