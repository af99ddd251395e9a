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


def resnet50(n_classes: int = 1000) -> Any:
    """ResNet-50 (torchvision's layout, 25,557,032 parameters) without torchvision and without weights:
    ``autobyte advise --module bench_advise:resnet50 --input-shape 2,3,224,224`` (PYTHONPATH=benchmarks)."""
    import torch

    nn = torch.nn

    class Bottleneck(nn.Module):
        def __init__(self, cin: int, width: int, stride: int) -> None:
            super().__init__()
            cout = 4 * width
            self.body = nn.Sequential(
                nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True),
                nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True),
                nn.Conv2d(width, cout, 1, bias=False), nn.BatchNorm2d(cout))
            self.down = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                         if stride != 1 or cin != cout else None)

        def forward(self, x: Any) -> Any:
            return torch.relu(self.body(x) + (x if self.down is None else self.down(x)))

    layers: list[Any] = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for b in range(blocks):
            layers.append(Bottleneck(cin, width, stride if b == 0 else 1))
            cin = 4 * width
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, n_classes)]
    return nn.Sequential(*layers)


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
            timeout_s: float, seed: int = 0) -> None:
    from autobyte.testbed import Testbed

    os.makedirs(out_dir, exist_ok=True)
    here = os.path.abspath(__file__)
    root = os.path.dirname(os.path.dirname(here))
    env = {"PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": root}
    for model in models:
        for rate in rates:
            tag = f"{model}-{int(rate)}mbit"
            spec = {"model": model, "batch_size": MODELS[model]["batch_size"], "caps_mb": list(BUCKET_CAPS_MB),
                    "rounds": rounds, "iters": iters, "profile_runs": profile_runs, "seed": seed, "rate_mbit": rate}
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


# --------------------------------------------------------------------------- advice vs measurement
def case_advice(res: dict[str, Any], calibration: str) -> Any:
    """``autobyte.advise`` for one measured case, from the profile recorded before any DDP iteration."""
    import numpy as np

    from autobyte._advise import advise
    from autobyte._advise_inputs import fit_compute_total
    from autobyte.sim import ModelProfile

    prof = res["profile"]
    step = float(np.median(prof["step_s"][1:]))
    plain = float(np.median(prof["compute_only_s"][1:]))
    mp = ModelProfile(res["model"], np.asarray(prof["layer_bytes"]), np.asarray(prof["forward_s"]),
                      np.asarray(prof["backward_s"]), int(prof["batch_size"]), device="cpu (this testbed)")
    mp = fit_compute_total(mp, plain - step)
    caps = [c for c in res["caps_mb"] if c is not None]
    return advise(mp, n_workers=2, bandwidth_gbps=res["rate_mbit"] / 1000.0, calibration=calibration, step_s=step,
                  bucket_caps_mb=caps, sensitivity=False, engine=False)


def _merge_passes(paths: list[str]) -> dict[str, Any] | None:
    """One case from one or more passes: the first pass's profile (the advice), every pass's iterations."""
    runs = []
    for p in paths:
        with open(p) as f:
            r = json.load(f)
        if "rate_mbit" in r:  # else: a launch still running
            runs.append(r)
    if not runs:
        return None
    res = dict(runs[0])
    for r in runs[1:]:
        if r["caps_mb"] != res["caps_mb"] or r["rebuilt_bucket_sizes"] != res["rebuilt_bucket_sizes"]:
            raise ValueError(f"passes of {paths[0]} measured different bucket sizes or got different buckets")
    res["iter_s"] = [sum((r["iter_s"][k] for r in runs), []) for k in range(len(res["caps_mb"]))]
    res["load_before"] = [min(r["load_before"][0] for r in runs)]
    res["load_after"] = [max(max(r["load_before"][0], r["load_after"][0]) for r in runs)]
    res["n_passes"] = len(runs)
    return res


def testbed_report(raws: list[str], *, out: str | None = None, calibration: str | None = None) -> str:
    """The 6-case table: advised vs best measured vs DDP's default (markdown), written to ``RAWS[0]/testbed.md``.

    With several raw directories (passes), each case pools every pass's iterations; the advice comes
    from the first pass's profile."""
    import glob

    raw = raws[0]
    calibration = calibration or os.path.join(os.path.dirname(os.path.abspath(raw.rstrip("/"))), "calib_params.json")
    rows = []
    summary = []
    for path in sorted(glob.glob(os.path.join(raw, "*mbit.json")), key=lambda p: (p.split("/")[-1].split("-")[0], float(p.split("-")[-1][:-9]))):
        res = _merge_passes([path] + [os.path.join(r, os.path.basename(path)) for r in raws[1:]
                                      if os.path.exists(os.path.join(r, os.path.basename(path)))])
        if res is None:
            continue
        bs2 = 2 * res["batch_size"]
        layout = {str(c): tuple(b) for c, b in zip(res["caps_mb"], res["rebuilt_bucket_sizes"])}
        raw_sps = {str(c): bs2 / statistics.median(t) for c, t in zip(res["caps_mb"], res["iter_s"])}
        # Bucket sizes that gave DDP the very same buckets run the very same code: their iterations are
        # pooled (median of all of them), which halves the noise of this loaded machine. The per-size
        # medians are kept in the raw data and shown as "spread, same buckets".
        pooled: dict[tuple[int, ...], list[float]] = {}
        for c, t in zip(res["caps_mb"], res["iter_s"]):
            pooled.setdefault(layout[str(c)], []).extend(t)
        sps = {k: bs2 / statistics.median(pooled[layout[k]]) for k in raw_sps}
        adv = case_advice(res, calibration)
        advised = str(adv.bucket_cap_mb)  # "None" = keep the default
        best = max(sps, key=lambda k: sps[k])
        ratio = sps[advised] / sps[best]
        # noise: spread among bucket sizes that gave DDP the very same buckets
        groups: dict[tuple[int, ...], list[float]] = {}
        for k, v in raw_sps.items():
            groups.setdefault(layout[k], []).append(v)
        spread = max((max(g) / min(g) - 1 for g in groups.values() if len(g) > 1), default=0.0)
        pred = {p.label: p.samples_per_s for p in adv.ddp}
        pk = "default" if adv.bucket_cap_mb is None else f"{adv.bucket_cap_mb:g}"
        name = lambda k: "default" if k == "None" else f"{float(k):g}"  # noqa: E731
        rows.append(
            f"| {res['model']} | {res['rate_mbit']:g} | {name(advised)} ({len(layout[advised])} b.) | {sps[advised]:.1f} | "
            f"{name(best)} ({len(layout[best])} b.) | {sps[best]:.1f} | **{ratio:.3f}** | {sps['None']:.1f} | "
            f"{sps[advised] / sps['None']:.3f}x | {sps[advised] / sps['25']:.3f}x | {sps[advised] / min(sps.values()):.3f}x | "
            f"{pred[pk] / pred['default']:.3f}x | {pred[pk]:.1f} | "
            f"{spread * 100:.0f}% | {res['load_before'][0]:.1f}-{res['load_after'][0]:.1f} | {res.get('n_passes', 1)} |"
        )
        summary.append(ratio >= 0.95)
    head = (
        "| model | Mbit/s | advised `bucket_cap_mb` (buckets) | its samples/s | best measured | best samples/s | advised / best | "
        "default samples/s | advised / default (measured) | advised / `bucket_cap_mb=25` | advised / worst | "
        "advised / default (predicted) | predicted samples/s | "
        "spread, same buckets | load (1 min) | passes |\n|---|---:|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|"
    )
    text = head + "\n" + "\n".join(rows) + f"\n\nadvised within 5% of the best measured: {sum(summary)} of {len(summary)} cases\n"
    with open(out or os.path.join(raw, "testbed.md"), "w") as f:
        f.write(text)
    return text


def zoo_report(out: str | None = None, *, workers: tuple[int, ...] = (8, 32), gbps: tuple[float, ...] = (1, 10, 25, 100)) -> str:
    """Simulator check over the zoo: the advice (argmax of the simulator over its candidate grid, jitter off)
    against a fine bucket sweep (48 sizes, 0.25-1024 MiB, with 2% compute jitter and another seed) and DDP's default."""
    import numpy as np

    from autobyte._advise import advise
    from autobyte.sim import MODELS, Cluster, get_model, simulate_ddp

    fine = [float(x) for x in np.geomspace(0.25, 1024, 48)]
    rows, ok, gains = [], [], []
    for name in MODELS:
        m = get_model(name)
        for n in workers:
            for g in gbps:
                a = advise(name, n_workers=n, bandwidth_gbps=g, sensitivity=False, engine=False)
                c = Cluster.from_gbps(n, g, jitter=0.02)
                step = a.compute.iter_time_s - m.compute_s
                sweep = {cap: simulate_ddp(m, c, cap, step_s=step, n_iters=10, seed=1).samples_per_s for cap in fine}
                dflt = simulate_ddp(m, c, None, step_s=step, n_iters=10, seed=1).samples_per_s
                adv = simulate_ddp(m, c, a.bucket_cap_mb, step_s=step, n_iters=10, seed=1).samples_per_s
                best_cap = max(sweep, key=lambda k: sweep[k])
                best = max(sweep[best_cap], dflt)
                ok.append(adv >= 0.95 * best)
                gains.append(adv / dflt)
                rows.append(f"| {name} | {n} | {g:g} | {'default' if a.bucket_cap_mb is None else f'{a.bucket_cap_mb:g}'} | "
                            f"{best_cap:.3g} | {adv / best:.3f} | {adv / dflt:.3f}x | {dflt / best:.3f} |")
    head = ("| model | workers | Gbit/s | advised `bucket_cap_mb` | best of the fine sweep | advised / best | "
            "advised / default | default / best |\n|---|---:|---:|---|---:|---:|---:|---:|")
    g = np.array(gains)
    text = (head + "\n" + "\n".join(rows) + f"\n\nadvised within 5% of the sweep's best: {sum(ok)} of {len(ok)}; within 1%: "
            f"{sum(1 for r in rows if float(r.split('|')[6]) >= 0.99)}; gain over the default: median {np.median(g):.3f}x, "
            f"max {g.max():.3f}x, cases with a gain > 2%: {int((g > 1.02).sum())}\n")
    if out:
        with open(out, "w") as f:
            f.write(text)
    return text


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
    m.add_argument("--seed", type=int, default=0, help="seed of the round orders (use another one for a second pass)")
    rep = sub.add_parser("report", help="advice vs the measured sweep (no root)")
    rep.add_argument("--raw", action="append", default=None,
                     help="raw directory of a pass (repeat to pool passes; default: docs/figures/advise)")
    rep.add_argument("--out", default=None, help="write the table here (default: RAW/testbed.md)")
    rep.add_argument("--calibration", default=None, help="calib_params.json (default: docs/figures/calib_params.json)")
    z = sub.add_parser("zoo", help="the same check on the simulator over the model zoo")
    z.add_argument("--out", default="docs/figures/advise/zoo.md")
    a = p.parse_args(argv)
    if a.cmd == "rank":
        _rank(a.spec, a.out)
        sys.stdout.flush()
        os._exit(0)  # skip interpreter teardown, where gloo/DDP objects sometimes abort a finished rank
    if a.cmd == "measure":
        measure(a.out, models=a.models.split(","), rates=[float(x) for x in a.rates.split(",")], rounds=a.rounds,
                iters=a.iters, profile_runs=a.profile_runs, timeout_s=a.timeout_s, seed=a.seed)
        return 0
    if a.cmd == "zoo":
        print(zoo_report(a.out))
        return 0
    print(testbed_report(a.raw or ["docs/figures/advise"], out=a.out, calibration=a.calibration))
    return 0


if __name__ == "__main__":
    sys.exit(main())
