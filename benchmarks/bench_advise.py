"""Real DDP bucket sweep on the testbed vs ``autobyte advise`` (docs/advise.md).

Measure (root; ~10 min on 2 shared cores)::

    sudo PYTHONPATH=$PWD python benchmarks/bench_advise.py measure --out docs/figures/advise

Then compare with the advice (no root, seconds)::

    PYTHONPATH=$PWD python benchmarks/bench_advise.py report --raw docs/figures/advise

One launch per (model, link rate): 2 workers in network namespaces with
``tc``-shaped links (``autobyte.testbed.Testbed``), each rank builds one
``DistributedDataParallel`` per bucket size on a copy of the same model and
trains them **interleaved in rounds** (each round visits every bucket size
once, in a new random order: 1 warm-up iteration then ``--iters`` measured
ones), so every bucket size sees the same machine load. Before training each
rank profiles the model (``autobyte.sim.profile_module``) and times plain
compute steps (no communication): the advice is computed from that profile
only, never from the DDP measurements.

Rank side: ``python benchmarks/bench_advise.py rank SPEC_JSON OUT_JSON``.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import random
import statistics
import sys
import time
from typing import Any

#: Bucket sizes swept (``bucket_cap_mb``); ``None`` is DDP's default (25 MiB, 1 MiB first bucket).
BUCKET_CAPS_MB: tuple[float | None, ...] = (None, 1, 2, 4, 8, 16, 25, 64)
#: Link rates (Mbit/s): communication-bound, middle, near compute-bound on this CPU.
RATES_MBIT: tuple[float, ...] = (300.0, 1000.0, 3000.0)
#: Models: the bench's CNN (3.4M parameters, one 12.6 MB FC tensor) and a deep MLP
#: (9.4M parameters: one 12.6 MB tensor then six 4.2 MB ones).
MODELS: dict[str, dict[str, Any]] = {
    "cnn": {"batch_size": 16},
    "mlp": {"batch_size": 64},
}


def make_model(name: str) -> Any:
    import torch

    if name == "cnn":
        from autobyte.bench.models import make_cnn

        return make_cnn()
    if name == "mlp":
        torch.manual_seed(0)
        nn = torch.nn
        layers: list[Any] = [nn.Flatten(), nn.Linear(3 * 32 * 32, 1024), nn.ReLU()]
        for _ in range(6):
            layers += [nn.Linear(1024, 1024), nn.ReLU()]
        layers.append(nn.Linear(1024, 10))
        return nn.Sequential(*layers)
    raise ValueError(f"model must be one of {sorted(MODELS)}, but got model={name!r}.")


# --------------------------------------------------------------------------- rank side
def _rank(spec_path: str, out_path: str) -> None:
    import torch
    import torch.distributed as dist

    from autobyte.sim import profile_module

    with open(spec_path) as f:
        spec = json.load(f)
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    name, bs = spec["model"], int(spec["batch_size"])
    base = make_model(name)
    g = torch.Generator().manual_seed(rank)
    batches = [(torch.randn(bs, 3, 32, 32, generator=g), torch.randint(0, 10, (bs,), generator=g)) for _ in range(4)]
    loss_fn = torch.nn.CrossEntropyLoss()

    # Profile on this CPU, both ranks at once (what `autobyte advise` would do on the user's machine).
    dist.barrier()
    x0, y0 = batches[0]
    prof = profile_module(base, x0, loss_fn=lambda out: loss_fn(out, y0), n_runs=int(spec["profile_runs"]))
    plain = copy.deepcopy(base)
    opt = torch.optim.SGD(plain.parameters(), lr=0.01, momentum=0.9)
    compute_only = []
    step_only = []
    for i in range(8):
        x, y = batches[i % len(batches)]
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss_fn(plain(x), y).backward()
        t1 = time.perf_counter()
        opt.step()
        t2 = time.perf_counter()
        compute_only.append(t2 - t0)
        step_only.append(t2 - t1)
    del plain, opt
    tensor_bytes = [p.numel() * p.element_size() for p in base.parameters()]

    caps = spec["caps_mb"]
    ddps, opts = [], []
    for cap in caps:
        m = copy.deepcopy(base)
        d = torch.nn.parallel.DistributedDataParallel(m, bucket_cap_mb=cap)
        ddps.append(d)
        opts.append(torch.optim.SGD(d.parameters(), lr=0.01, momentum=0.9))

    def step(k: int, i: int) -> None:
        x, y = batches[i % len(batches)]
        opts[k].zero_grad(set_to_none=True)
        loss_fn(ddps[k](x), y).backward()
        opts[k].step()

    for k in range(len(caps)):  # first iteration (one bucket), then DDP rebuilds its buckets
        for i in range(2):
            step(k, i)
    times: list[list[float]] = [[] for _ in caps]
    order_log = []
    rng = random.Random(int(spec["seed"]))
    t_start = time.perf_counter()
    for r in range(int(spec["rounds"])):
        order = list(range(len(caps)))
        rng.shuffle(order)  # same seed on every rank: same order
        order_log.append(order)
        for k in order:
            step(k, 0)  # warm-up: the previous DDP's traffic drains, caches refill
            t = time.perf_counter()
            for i in range(int(spec["iters"])):
                step(k, i + 1)
                t2 = time.perf_counter()
                times[k].append(t2 - t)
                t = t2
    wall = time.perf_counter() - t_start
    buckets = []  # the buckets DDP rebuilt after its first iteration (bytes, in reduction order)
    for d in ddps:
        ld = d._get_ddp_logging_data()
        buckets.append([int(s) for s in str(ld.get("rebuilt_bucket_sizes", "")).split(",") if s.strip()])
    out = {
        "rank": rank, "model": name, "batch_size": bs, "caps_mb": caps, "iter_s": times, "rounds": order_log,
        "rebuilt_bucket_sizes": buckets, "tensor_bytes": tensor_bytes, "wall_s": wall,
        "torch": torch.__version__,
        "profile": {**prof.to_dict(), "compute_only_s": compute_only, "step_s": step_only},
    }
    if rank == 0:
        with open(out_path, "w") as f:
            json.dump(out, f)
    dist.barrier()
    dist.destroy_process_group()


# --------------------------------------------------------------------------- driver
def _load() -> tuple[float, float, float]:
    return os.getloadavg()


def measure(out_dir: str, *, models: list[str], rates: list[float], rounds: int, iters: int, profile_runs: int,
            timeout_s: float) -> None:
    from autobyte.testbed import Testbed

    os.makedirs(out_dir, exist_ok=True)
    here = os.path.abspath(__file__)
    root = os.path.dirname(os.path.dirname(here))
    env = {"PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": root}
    for model in models:
        for rate in rates:
            tag = f"{model}-{int(rate)}mbit"
            spec = {"model": model, "batch_size": MODELS[model]["batch_size"], "caps_mb": list(BUCKET_CAPS_MB),
                    "rounds": rounds, "iters": iters, "profile_runs": profile_runs, "seed": 0, "rate_mbit": rate}
            spec_path = os.path.join(out_dir, f"{tag}.spec.json")
            res_path = os.path.join(out_dir, f"{tag}.json")
            with open(spec_path, "w") as f:
                json.dump(spec, f)
            load0 = _load()
            t0 = time.monotonic()
            print(f"{tag}: launching (load {load0[0]:.2f})", flush=True)
            with open(os.path.join(out_dir, f"{tag}.log"), "w") as f, Testbed(2, bandwidth_mbit=rate) as tb:
                rc = tb.run([sys.executable, here, "rank", spec_path, res_path], timeout_s=timeout_s, env=env, stdout=f)
            if rc != 0:
                raise SystemExit(f"{tag} failed with exit code {rc}; see {out_dir}/{tag}.log")
            with open(res_path) as f:
                res = json.load(f)
            res["rate_mbit"] = rate
            res["load_before"] = list(load0)
            res["load_after"] = list(_load())
            res["launch_wall_s"] = time.monotonic() - t0
            with open(res_path, "w") as f:
                json.dump(res, f)
            print(f"{tag}: {res['launch_wall_s']:.0f} s, load {res['load_after'][0]:.2f}; "
                  + ", ".join(f"{c}: {statistics.median(t) * 1e3:.0f} ms" for c, t in zip(res["caps_mb"], res["iter_s"])),
                  flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("rank")
    r.add_argument("spec")
    r.add_argument("out")
    m = sub.add_parser("measure", help="run the sweep on the testbed (root)")
    m.add_argument("--out", default="docs/figures/advise")
    m.add_argument("--models", default="cnn,mlp")
    m.add_argument("--rates", default=",".join(f"{r:g}" for r in RATES_MBIT))
    m.add_argument("--rounds", type=int, default=4)
    m.add_argument("--iters", type=int, default=3)
    m.add_argument("--profile-runs", type=int, default=5)
    m.add_argument("--timeout-s", type=float, default=900)
    rep = sub.add_parser("report", help="advice vs the measured sweep (no root)")
    rep.add_argument("--raw", default="docs/figures/advise")
    rep.add_argument("--out", default=None, help="write the table here (default: RAW/testbed.md)")
    a = p.parse_args(argv)
    if a.cmd == "rank":
        _rank(a.spec, a.out)
        return 0
    if a.cmd == "measure":
        measure(a.out, models=a.models.split(","), rates=[float(x) for x in a.rates.split(",")], rounds=a.rounds,
                iters=a.iters, profile_runs=a.profile_runs, timeout_s=a.timeout_s)
        return 0
    from autobyte.bench._advise_report import testbed_report

    print(testbed_report(a.raw, out=a.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
