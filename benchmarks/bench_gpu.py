"""The PyTorch engine against DDP on one GPU: 2 ranks, ResNet-50 at real compute, overhead per iteration.

On the GPU machine (2 ranks share GPU 0 over gloo with CUDA tensors; NCCL,
one GPU per rank, where two or more GPUs exist)::

    PYTHONPATH=$PWD python3 benchmarks/bench_gpu.py --out /tmp/bench_gpu --batch-size 96

Without CUDA (or with ``--device cpu``) the same benchmark runs on CPU with a
small ResNet-50 (``--width 8 --image-size 32 --classes 10``, batch 4 unless
given) and says so in its output: a smoke run of the code path, not a GPU figure.

Modes, interleaved round by round inside the same two processes (so drifts
of the machine hit every mode alike): no communication at all (the bound),
plain DDP (``bucket_cap_mb=25``), the engine at DDP's operating point
<25 MiB, unlimited credit>, at ByteScheduler's default <4 MB, 4X> and on a
small grid; with ``--wire bf16`` (or ``fp16``) also DDP with that
precision's compress hook (``bf16_compress_hook``: what a DDP user adds in one
line; on NCCL it is the same hook) and the engine at 16 bits at DDP's point
and at ByteScheduler's default. Then ``torch.profiler`` records ``--profile-iters`` iterations
of DDP and of the engine's two named points on rank 0 (both ranks train):
kernel launches, copies, stream synchronisations, optimizer steps and the
top items by host and device time (every thread, where this torch can). The
engine's own host counters give its time in the training loop's hooks
(``handle.host_s``) and in its two threads (``handle.thread_s``).

Writes ``--out/bench_gpu.json`` and ``--out/bench_gpu.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

#: engine points named by the issue; the grid adds (partition_bytes, credit multiple) pairs
MiB = 1 << 20
DDP_POINT = ("engine <25 MiB, unlimited> (DDP's point)", 25 * MiB, None)
BS_DEFAULT = ("engine <4 MB, 4X> (ByteScheduler's default)", 4_000_000, 4)
DEFAULT_GRID = "16M:1,8M:2,2M:4"
TUNER_WIRES = ("fp32", "bf16", "fp16", "auto")  # NAME@WIRE in --tuners


# ------------------------------------------------------------------ the model


def resnet50(width: int = 64, num_classes: int = 1000) -> Any:
    """ResNet-50 v1.5 (bottleneck blocks 3-4-6-3, stride on the 3x3), as torchvision's, built here.

    ``width`` is the stem's channel count (64: the real model, 25.6M parameters
    with 1000 classes); smaller widths keep the structure (161 parameter
    tensors, 53 batch norms) for a CPU run.
    """
    import torch.nn as nn

    class Bottleneck(nn.Module):
        def __init__(self, cin: int, mid: int, stride: int) -> None:
            super().__init__()
            cout = mid * 4
            self.conv1 = nn.Conv2d(cin, mid, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(mid)
            self.conv2 = nn.Conv2d(mid, mid, 3, stride=stride, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(mid)
            self.conv3 = nn.Conv2d(mid, cout, 1, bias=False)
            self.bn3 = nn.BatchNorm2d(cout)
            self.relu = nn.ReLU(inplace=True)
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x: Any) -> Any:
            idt = x if self.down is None else self.down(x)
            y = self.relu(self.bn1(self.conv1(x)))
            y = self.relu(self.bn2(self.conv2(y)))
            return self.relu(self.bn3(self.conv3(y)) + idt)

    layers: list[Any] = [nn.Conv2d(3, width, 7, stride=2, padding=3, bias=False), nn.BatchNorm2d(width),
                         nn.ReLU(inplace=True), nn.MaxPool2d(3, stride=2, padding=1)]
    cin = width
    for i, n in enumerate((3, 4, 6, 3)):
        mid = width * 2 ** i
        for j in range(n):
            layers.append(Bottleneck(cin, mid, 2 if (j == 0 and i > 0) else 1))
            cin = mid * 4
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, num_classes)]
    return nn.Sequential(*layers)


# ------------------------------------------------------------------ one rank


_LAUNCH = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx")
_MEMCPY = ("cudaMemcpyAsync", "cudaMemcpy", "cudaMemcpy2DAsync")
_SYNCS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")


def _profile_summary(prof: Any, n_iters: int, cuda: bool) -> dict[str, Any]:
    rows = list(prof.key_averages())

    def count(names: tuple[str, ...]) -> int:
        return sum(int(r.count) for r in rows if r.key in names)

    def dev_time(r: Any) -> float:
        return float(getattr(r, "self_device_time_total", getattr(r, "self_cuda_time_total", 0.0)) or 0.0)

    top_host = sorted(rows, key=lambda r: -r.self_cpu_time_total)[:10]
    out: dict[str, Any] = {
        "iterations": n_iters,
        "per_iteration": {
            "kernel_launches": count(_LAUNCH) / n_iters,
            "memcpy_calls": count(_MEMCPY) / n_iters,
            "stream_synchronizations": count(_SYNCS) / n_iters,
            "stream_wait_event": count(("cudaStreamWaitEvent",)) / n_iters,
            "aten_copy_": count(("aten::copy_",)) / n_iters,
            "optimizer_steps": sum(int(r.count) for r in rows if r.key.startswith("Optimizer.step#")) / n_iters,
        },
        "top_host": [{"name": r.key, "count": int(r.count), "self_host_ms": r.self_cpu_time_total / 1e3} for r in top_host],
    }
    if cuda:
        top_dev = sorted((r for r in rows if dev_time(r) > 0), key=lambda r: -dev_time(r))[:10]
        out["top_device"] = [{"name": r.key, "count": int(r.count), "self_device_ms": dev_time(r) / 1e3} for r in top_dev]
    return out


def _profiler(torch: Any, cuda: bool) -> tuple[Any, bool]:
    """A profiler of every thread where this torch can (the engine's threads launch its work)."""
    acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])
    try:
        from torch._C._profiler import _ExperimentalConfig

        return torch.profiler.profile(activities=acts, experimental_config=_ExperimentalConfig(profile_all_threads=True)), True
    except (ImportError, TypeError, RuntimeError):
        return torch.profiler.profile(activities=acts), False


def _compress_hook(wire: str) -> Any:
    """DDP's ``fp16_compress_hook`` or ``bf16_compress_hook`` (the latter under another name where DDP refuses it by
    name: without CUDA and NCCL, as on the CPU fallback)."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    if wire == "fp16":
        return default_hooks.fp16_compress_hook
    from bench_wire import bf16_hook  # this script's folder is on the path: it runs as a script

    return bf16_hook


def worker(opts: dict[str, Any]) -> None:
    import torch
    import torch.distributed as dist

    from autobyte.core import UNLIMITED
    from autobyte.core.tuners import import_tuners
    from autobyte.integrations.torch import schedule
    from autobyte.testing import exit_rank

    import_tuners(opts["imports"])

    cuda = opts["device"] == "cuda"
    rank = int(os.environ["RANK"])
    if cuda:
        dev = torch.device("cuda", rank % torch.cuda.device_count())
        torch.cuda.set_device(dev)
        torch.backends.cudnn.benchmark = True
    else:
        dev = torch.device("cpu")
        torch.set_num_threads(int(opts["threads"]))
    dist.init_process_group(opts["backend"])
    world = dist.get_world_size()
    bs, size = int(opts["batch_size"]), int(opts["image_size"])
    g = torch.Generator().manual_seed(100 + rank)
    data = [(torch.randn(bs, 3, size, size, generator=g).to(dev), torch.randint(0, opts["classes"], (bs,), generator=g).to(dev))
            for _ in range(2)]
    loss_fn = torch.nn.functional.cross_entropy

    runners: list[dict[str, Any]] = []
    for mode in opts["modes"]:
        torch.manual_seed(0)
        model = resnet50(opts["width"], opts["classes"]).to(dev)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
        r: dict[str, Any] = {"mode": mode, "opt": opt, "net": model, "finish": lambda: None, "handle": None}
        if mode["kind"] == "ddp":
            r["net"] = torch.nn.parallel.DistributedDataParallel(model, device_ids=[dev.index] if cuda else None, bucket_cap_mb=25)
            if mode.get("hook"):
                r["net"].register_comm_hook(None, _compress_hook(mode["hook"]))
        elif mode["kind"] == "engine":
            credit = UNLIMITED if mode["credit_x"] is None else int(mode["partition_bytes"] * mode["credit_x"])
            h = schedule(model, opt, partition_bytes=int(mode["partition_bytes"]), credit_bytes=credit, verbose=False,
                         wire=mode.get("wire", "fp32"))
            r.update(handle=h, finish=h.synchronize)
        runners.append(r)
    n_params = sum(p.numel() for p in runners[0]["net"].parameters())

    def run(r: dict[str, Any], n: int) -> float:
        dist.barrier()
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for i in range(n):
            x, y = data[i % len(data)]
            r["opt"].zero_grad()
            loss_fn(r["net"](x), y).backward()
            r["opt"].step()
        r["finish"]()
        if cuda:
            torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        dist.barrier()
        return dt

    for r in runners:
        run(r, int(opts["warmup"]))
    def counters(h: Any) -> tuple[dict[str, float], dict[str, float], int | None]:
        # an engine older than its host counters (a before/after comparison) reports none
        return dict(getattr(h, "host_s", {})), dict(getattr(h, "thread_s", {})), getattr(h, "update_steps", None)

    for r in runners:
        r["times"] = []
        if r["handle"] is not None:
            r["host0"], r["thread0"], r["updates0"] = counters(r["handle"])
    iters = int(opts["iters"])
    for _ in range(int(opts["rounds"])):
        for r in runners:
            r["times"].append(run(r, iters))
    total_iters = iters * int(opts["rounds"])
    for r in runners:  # the engine's counters over the timed rounds only (before the profiled iterations)
        if r["handle"] is not None:
            host, thread, updates = counters(r["handle"])
            r["host_ms_per_iter"] = {k: (host[k] - r["host0"][k]) * 1e3 / total_iters for k in host}
            r["thread_ms_per_iter"] = {k: (thread[k] - r["thread0"][k]) * 1e3 / total_iters for k in thread}
            r["optimizer_steps_per_iter"] = None if updates is None else (updates - r["updates0"]) / total_iters

    tuned: list[dict[str, Any]] = []
    profiles: dict[str, Any] = {}
    prof_all_threads = None

    def write_raw() -> None:
        # rank 0 writes what it has after each stage, so a run cut short by a time limit still leaves its rounds
        if rank != 0:
            return
        res = []
        for r in runners:
            item = {**r["mode"], "seconds": r["times"],
                    "samples_per_s": [iters * bs * world / t for t in r["times"]]}
            h = r["handle"]
            if h is not None:
                for k in ("host_ms_per_iter", "thread_ms_per_iter", "optimizer_steps_per_iter"):
                    item[k] = r[k]
                item["n_messages"] = len(h.scheduler.messages)
            res.append(item)
        out = {"modes": res, "tuned": tuned, "profiles": profiles, "profile_all_threads": prof_all_threads, "n_params": n_params,
               "n_param_tensors": sum(1 for _ in runners[0]["net"].parameters()),
               "gpu_name": torch.cuda.get_device_name(dev) if cuda else None}
        Path(opts["raw"]).write_text(json.dumps(out))

    write_raw()
    ddp = next(r for r in runners if r["mode"]["kind"] == "ddp")
    for name, wire, n_iters in opts["tuners"]:
        tuned.append(tune_block(name, wire, n_iters, opts, dev, data, loss_fn, iters, bs * world, ddp, run))
        write_raw()

    for r in runners:
        if r["mode"]["name"] not in opts["profile_modes"] or not opts["profile_iters"]:
            continue
        n = int(opts["profile_iters"])
        if rank == 0:
            prof, prof_all_threads = _profiler(torch, cuda)
            with prof:
                run(r, n)
            profiles[r["mode"]["name"]] = _profile_summary(prof, n, cuda)
        else:
            run(r, n)
    write_raw()
    for r in runners:
        if r["handle"] is not None:
            r["handle"].close()
    dist.destroy_process_group()
    exit_rank(0)


def tune_block(name: str, wire: str, n_iters: int, opts: dict[str, Any], dev: Any, data: list[Any], loss_fn: Any, chunk: int,
               samples_per_iter: int, ddp: dict[str, Any], run: Any) -> dict[str, Any]:
    """``schedule(..., tuner=name, wire=wire)`` from ByteScheduler's default, ``n_iters`` iterations in one continuous run.

    ``wire`` is the precision on the wire (``fp32``, ``bf16``, ``fp16``), or
    ``auto``: the tuner measures 16 bits against fp32 (``AutoWire``).

    A tuner times iterations start to start, so it cannot share the
    interleaved rounds (the other modes' time would count in one of its
    iterations): it runs on its own, timed per chunk of ``--iters``
    iterations, and DDP runs one more round right after it, so its ratio is
    read against DDP both in the rounds before and just after.
    """
    import torch

    from autobyte.bench._rank_plan import decision_row
    from autobyte.integrations.torch import schedule

    torch.manual_seed(0)
    model = resnet50(opts["width"], opts["classes"]).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    windows: list[dict[str, Any]] = []  # every check: the config in force, the speed seen, the decision with its whole reason
    h = schedule(model, opt, tuner=name, verbose=False, on_decision=lambda out: windows.append(decision_row(out)),
                 warmup_iters=int(opts.get("tune_warmup", 2)), wire=wire)
    start = h.config.to_dict()
    n_chunks = max(1, n_iters // chunk)
    run({"opt": opt, "net": model, "finish": lambda: None}, 0)  # the barrier: both ranks start together
    host0 = dict(h.host_s)
    times: list[float] = []
    iter_times: list[float] = []  # host time start to start, as the tuner's checks see it (no extra synchronisation)
    t0 = time.perf_counter()
    ti = t0
    for c in range(n_chunks):
        for i in range(chunk):
            x, y = data[i % len(data)]
            opt.zero_grad()
            loss_fn(model(x), y).backward()
            opt.step()
            tj = time.perf_counter()
            iter_times.append(tj - ti)
            ti = tj
        if c == n_chunks - 1:
            h.synchronize()
            if dev.type == "cuda":
                torch.cuda.synchronize()
        t1 = time.perf_counter()
        times.append(t1 - t0)
        t0 = t1
    host = {k: (h.host_s[k] - host0.get(k, 0.0)) * 1e3 / (n_chunks * chunk) for k in h.host_s}
    state = h.state_dict()
    h.close()
    ddp_after = run(ddp, chunk)
    return {"tuner": name if wire == "fp32" else f"{name}@{wire}", "wire": wire, "start": start, "final": state["config"], "iterations": n_chunks * chunk, "chunk_iters": chunk,
            "seconds": times, "samples_per_s": [chunk * samples_per_iter / t for t in times], "iter_seconds": iter_times,
            "ddp_after_samples_per_s": chunk * samples_per_iter / ddp_after,
            "reconfigurations": state.get("reconfigurations", []), "windows": windows, "host_ms_per_iter": host}


# ------------------------------------------------------------------ the launcher


def _bytes(text: str) -> int:
    units = {"K": 1 << 10, "M": MiB, "G": 1 << 30}
    t = text.strip().upper().rstrip("B").rstrip("I")
    if t and t[-1] in units:
        return int(float(t[:-1]) * units[t[-1]])
    return int(t)


def _parse_grid(text: str) -> list[tuple[int, float]]:
    out = []
    for item in filter(None, (s.strip() for s in text.split(","))):
        try:
            part, credit = item.split(":")
            p, c = _bytes(part), float(credit)
        except ValueError:
            raise ValueError(f"--grid must be a comma-separated list of PARTITION:CREDIT_MULTIPLE (e.g. 16M:1,2M:4), "
                             f"but got an item {item!r}.") from None
        if p <= 0 or c <= 0:
            raise ValueError(f"--grid sizes and credit multiples must be positive, but got {item!r}.")
        out.append((p, c))
    return out


def _fmt_bytes(n: int) -> str:
    return f"{n / MiB:g} MiB" if n % MiB == 0 else (f"{n / 1e6:g} MB" if n % 1_000_000 == 0 else f"{n / 1024:g} KiB")


def modes_for(grid: list[tuple[int, float]], wire: str | None = None) -> list[dict[str, Any]]:
    """The modes of the rounds; plain DDP comes first (every ratio is to it)."""
    modes: list[dict[str, Any]] = [{"name": "no communication (bound)", "kind": "none"},
                                   {"name": "DDP (bucket_cap_mb=25)", "kind": "ddp"}]
    for name, part, credit in (DDP_POINT, BS_DEFAULT):
        modes.append({"name": name, "kind": "engine", "partition_bytes": part, "credit_x": credit, "grid": False})
    for part, x in grid:
        modes.append({"name": f"engine <{_fmt_bytes(part)}, {x:g}X>", "kind": "engine", "partition_bytes": part, "credit_x": x, "grid": True})
    if wire is not None:
        modes.append({"name": f"DDP + {wire}_compress_hook", "kind": "ddp", "hook": wire})
        for name, part, credit in (DDP_POINT, BS_DEFAULT):
            modes.append({"name": f"{name}, {wire} wire", "kind": "engine", "partition_bytes": part, "credit_x": credit, "grid": False,
                          "wire": wire})
    return modes


def summarize(raw: dict[str, Any], meta: dict[str, Any]) -> dict[str, Any]:
    modes = raw["modes"]
    ddp = next(m for m in modes if m["kind"] == "ddp")
    for m in modes:
        per_round = [a / b for a, b in zip(m["samples_per_s"], ddp["samples_per_s"])]
        m["median_samples_per_s"] = statistics.median(m["samples_per_s"])
        m["median_ms_per_iter"] = statistics.median(m["seconds"]) * 1e3 / meta["iters"]
        m["ratio_vs_ddp"] = {"median": statistics.median(per_round), "min": min(per_round), "max": max(per_round),
                             "per_round": per_round}
    hooked = next((m for m in modes if m.get("hook")), None)
    for m in modes:
        if hooked is not None and m.get("wire") == hooked["hook"]:
            per_round = [a / b for a, b in zip(m["samples_per_s"], hooked["samples_per_s"])]
            m["ratio_vs_hook"] = {"median": statistics.median(per_round), "min": min(per_round), "max": max(per_round),
                                  "per_round": per_round}
    grid = [m for m in modes if m.get("grid")]
    best = max(grid, key=lambda m: m["ratio_vs_ddp"]["median"]) if grid else None
    point = next(m for m in modes if m["name"] == DDP_POINT[0])
    bound = next(m for m in modes if m["kind"] == "none")
    overhead = {
        "engine_minus_ddp_ms_per_iter": point["median_ms_per_iter"] - ddp["median_ms_per_iter"],
        "engine_minus_no_communication_ms_per_iter": point["median_ms_per_iter"] - bound["median_ms_per_iter"],
        "ddp_minus_no_communication_ms_per_iter": ddp["median_ms_per_iter"] - bound["median_ms_per_iter"],
        "engine_host_ms_per_iter_in_training_loop_hooks": point.get("host_ms_per_iter", {}),
        "engine_host_ms_per_iter_in_its_threads": point.get("thread_ms_per_iter", {}),
        "engine_optimizer_steps_per_iter": point.get("optimizer_steps_per_iter"),
    }
    ref = {"DDP": ddp, "ByteScheduler's default": next(m for m in modes if m["name"] == BS_DEFAULT[0]),
           "DDP's point": point, **({"best of grid": best} if best else {})}
    tuned = raw.get("tuned", [])
    for t in tuned:
        # samples over the whole run / its time
        t["whole_run_samples_per_s"] = sum(v * sec for v, sec in zip(t["samples_per_s"], t["seconds"])) / sum(t["seconds"])
    # static configurations run continuously in the tuner block (``static``, ``static-...``): measured as a tuner is,
    # the fair baseline for it (in rounds a mode runs 12 iterations after other modes; see docs/benchmarks.md 4.1)
    # (a static configuration run more than once, e.g. before and after the tuners, counts at the median of its runs)
    statics: dict[str, list[float]] = {}
    for t in tuned:
        if _is_static(t["tuner"]):
            statics.setdefault(f"{t['tuner']} <{_fmt_config(t['final'])}> continuous", []).append(t["whole_run_samples_per_s"])
    for k, v in statics.items():
        ref[k] = {"median_samples_per_s": statistics.median(v)}
    if len(statics) > 1:
        ref["best continuous static"] = {"median_samples_per_s": max(statistics.median(v) for v in statics.values())}
    for t in tuned:
        sps = t["samples_per_s"]
        whole_sps = t["whole_run_samples_per_s"]
        late = statistics.median(sps[len(sps) // 2:])

        def against(x: float) -> dict[str, float]:
            return {"whole_run": whole_sps / x, "second_half": late / x}

        t["ratio_vs"] = {k: against(m["median_samples_per_s"]) for k, m in ref.items()}
        t["ratio_vs_ddp_after"] = against(t["ddp_after_samples_per_s"])
        t["ratio_vs_ddp_per_chunk"] = [v / ddp["median_samples_per_s"] for v in sps]
    return {**meta, **raw, "best_grid": best["name"] if best else None, "overhead": overhead}


def _is_static(name: str) -> bool:
    """A tuner of the block that never moves: ``static`` (ByteScheduler's default) or a ``static-...`` variant,
    at any fixed precision on the wire (``static@bf16``); ``@auto`` moves (the tuner chooses the precision)."""
    base, _, wire = name.partition("@")
    return (base == "static" or base.startswith("static-")) and wire != "auto"


def _fmt_config(c: dict[str, Any]) -> str:
    from autobyte.core import UNLIMITED

    cr = "unlimited" if c["credit_bytes"] >= UNLIMITED else f"{c['credit_bytes'] / c['partition_bytes']:.3g}X"
    wire = c.get("wire", "fp32")
    return f"{_fmt_bytes(int(c['partition_bytes']))}, {cr}" + ("" if wire == "fp32" else f", {wire}")


def markdown(s: dict[str, Any]) -> str:
    lines = [f"# bench_gpu: the engine against DDP, 2 ranks on {s['device_text']}", ""]
    if s["fallback"]:
        lines += [f"**CPU fallback**: {s['fallback_reason']}. These figures come from a CPU and are not GPU figures.", ""]
    lines += [f"Command: `{s['command']}`  ", f"torch {s['torch']}, backend {s['backend']}, model ResNet-50 (width {s['width']}, "
              f"{s['n_params']:,} parameters in {s['n_param_tensors']} tensors, {s['image_size']}x{s['image_size']}, {s['classes']} classes), "
              f"batch {s['batch_size']} per rank, SGD momentum; {s['rounds']} interleaved rounds of {s['iters']} iterations "
              f"after {s['warmup']} warm-up; load average {s['load_average_start']} at start, {s['load_average_end']} at end.", "",
              "| mode | samples/s (median) | ms/iter | vs DDP: median (min-max of rounds) |", "|---|---:|---:|---:|"]
    for m in s["modes"]:
        r = m["ratio_vs_ddp"]
        best = " **(best of grid)**" if m["name"] == s["best_grid"] else ""
        lines.append(f"| {m['name']}{best} | {m['median_samples_per_s']:.1f} | {m['median_ms_per_iter']:.1f} | "
                     f"{r['median']:.3f}x ({r['min']:.3f}-{r['max']:.3f}) |")
    for m in s["modes"]:
        if "ratio_vs_hook" in m:
            r = m["ratio_vs_hook"]
            lines.append(f"\n{m['name']} against DDP + the same precision's hook: {r['median']:.3f}x ({r['min']:.3f}-{r['max']:.3f})")
    o = s["overhead"]
    lines += ["", "Overhead per iteration at DDP's operating point (medians): engine - DDP "
              f"{o['engine_minus_ddp_ms_per_iter']:+.2f} ms; engine - no communication {o['engine_minus_no_communication_ms_per_iter']:+.2f} ms "
              f"(DDP - no communication {o['ddp_minus_no_communication_ms_per_iter']:+.2f} ms). Host time in the engine's hooks of the "
              "training loop, ms/iteration: " + ", ".join(f"{k} {v:.3f}" for k, v in o["engine_host_ms_per_iter_in_training_loop_hooks"].items())
              + "; in its threads (off the training loop; complete includes waiting for the collective): "
              + ", ".join(f"{k} {v:.3f}" for k, v in o["engine_host_ms_per_iter_in_its_threads"].items())
              + f"; optimizer steps per iteration: {o['engine_optimizer_steps_per_iter']} ({s['n_param_tensors']} parameter tensors).", ""]
    if s.get("tuned"):
        refs = list(s["tuned"][0]["ratio_vs"])
        lines += ["## Tuners (each one continuous run after the rounds, from ByteScheduler's default)", "",
                  "whole run / median of its second half's chunks, against each mode's median in the rounds, against the whole run of "
                  "each static configuration run the same way (`static`: ByteScheduler's default; `static-...`: another one), "
                  "and against DDP run just after:", "",
                  "| tuner | iterations | final config | moves | " + " | ".join(f"vs {k}" for k in refs) + " | vs DDP just after | host ms/iter at iteration start (waits, agreement, decisions) |",
                  "|---|---:|---|---:|" + "---:|" * (len(refs) + 2)]
        for t in s["tuned"]:
            lines.append(f"| {t['tuner']} | {t['iterations']} | <{_fmt_config(t['final'])}> | {len(t['reconfigurations'])} | "
                         + " | ".join(f"{t['ratio_vs'][k]['whole_run']:.3f}x / {t['ratio_vs'][k]['second_half']:.3f}x" for k in refs)
                         + f" | {t['ratio_vs_ddp_after']['whole_run']:.3f}x / {t['ratio_vs_ddp_after']['second_half']:.3f}x"
                         + f" | {t['host_ms_per_iter'].get('iteration_start', 0.0):.2f} |")
        for t in s["tuned"]:
            lines.append("")
            lines.append(f"**{t['tuner']}** per chunk of {t['chunk_iters']} iterations vs DDP: "
                         + " ".join(f"{v:.2f}" for v in t["ratio_vs_ddp_per_chunk"]))
            for r in t.get("windows", []):  # rank 0's decisions with their whole reasons
                if "reason" in r:
                    lines.append(f"- iteration {r['iteration']}: {r['reason']}")
        lines.append("")
    if s["profiles"]:
        lines += [f"## Profile (rank 0, torch.profiler, {s['profile_iters']} iterations; "
                  f"every thread {'captured' if s['profile_all_threads'] else 'NOT captured (this torch cannot profile all threads)'})", "",
                  "| per iteration | " + " | ".join(s["profiles"]) + " |", "|---|" + "---:|" * len(s["profiles"])]
        keys = list(next(iter(s["profiles"].values()))["per_iteration"])
        for k in keys:
            lines.append(f"| {k} | " + " | ".join(f"{p['per_iteration'][k]:.1f}" for p in s["profiles"].values()) + " |")
        for name, p in s["profiles"].items():
            lines += ["", f"**{name}** top host items (self): " + "; ".join(f"{t['name']} x{t['count']} {t['self_host_ms']:.1f} ms" for t in p["top_host"][:6])]
            if "top_device" in p:
                lines.append("top device items (self): " + "; ".join(f"{t['name'][:60]} x{t['count']} {t['self_device_ms']:.1f} ms"
                                                                     for t in p["top_device"][:6]))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--out", help="directory for bench_gpu.json and bench_gpu.md (required)")
    ap.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto", help="auto: CUDA where available, else the CPU fallback")
    ap.add_argument("--batch-size", type=int, default=None, help="per rank (default: 64 on CUDA, 4 on CPU)")
    ap.add_argument("--image-size", type=int, default=None, help="default: 224 on CUDA, 32 on CPU")
    ap.add_argument("--width", type=int, default=None, help="ResNet-50 stem width (default: 64, the real model, on CUDA; 8 on CPU)")
    ap.add_argument("--classes", type=int, default=None, help="default: 1000 on CUDA, 10 on CPU")
    ap.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default: 5 on CUDA, 3 on CPU)")
    ap.add_argument("--iters", type=int, default=None, help="iterations per mode and round (default: 20 on CUDA, 3 on CPU)")
    ap.add_argument("--warmup", type=int, default=None, help="warm-up iterations per mode (default: 5 on CUDA, 1 on CPU)")
    ap.add_argument("--wire", choices=("bf16", "fp16"), default=None,
                    help="also DDP + that precision's compress hook and the engine at that precision on the wire")
    ap.add_argument("--grid", default=DEFAULT_GRID, help=f"PARTITION:CREDIT_MULTIPLE,... (default: {DEFAULT_GRID})")
    ap.add_argument("--profile-iters", type=int, default=None, help="profiled iterations per mode, 0: none (default: 5 on CUDA, 2 on CPU)")
    ap.add_argument("--tuners", default="static,autobyte",
                    help="tuners run after the rounds from ByteScheduler's default, comma-separated; 'static' runs the default "
                         "itself continuously, the fair baseline of a tuner (static-16m-2x and others: --import "
                         "benchmarks/tuner_variants.py); NAME:ITERS runs that one ITERS iterations instead of --tune-iters; "
                         "NAME@WIRE at that precision on the wire (fp32, bf16, fp16; auto: the tuner measures 16 bits "
                         "against fp32), e.g. static@bf16:300,autobyte@auto:1000; "
                         "none: no tuner block (default: static,autobyte)")
    ap.add_argument("--tune-iters", type=int, default=None, help="iterations of each tuner's continuous run (default: 150 on CUDA, 12 on CPU)")
    ap.add_argument("--tune-warmup", type=int, default=2,
                    help="iterations the tuner's controller skips after the start and each reconfiguration (schedule's warmup_iters; 2)")
    ap.add_argument("--import", dest="imports", action="append", default=[], metavar="SOURCE",
                    help="a module or .py file that registers tuners (autobyte.core.tuners.register_tuner), in every rank; repeatable")
    ap.add_argument("--threads", type=int, default=1, help="CPU threads per rank on the CPU fallback")
    ap.add_argument("--timeout-s", type=float, default=1800.0)
    ap.add_argument("--resummarize", metavar="JSON", help="read a bench_gpu.json written before, summarize it again "
                    "(the comparisons of this version) into --out; nothing runs")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker(json.loads(args.worker))
        return 0
    if args.resummarize:
        if not args.out:
            ap.error("--out is required: the directory for bench_gpu.json and bench_gpu.md.")
        try:
            old = json.loads(Path(args.resummarize).read_text())
        except (OSError, ValueError) as exc:
            ap.error(f"--resummarize must name a bench_gpu.json, but {args.resummarize!r} could not be read: {exc}")
        summary = summarize(old, old)
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "bench_gpu.json").write_text(json.dumps(summary, indent=1))
        text = markdown(summary)
        (Path(args.out) / "bench_gpu.md").write_text(text)
        print(text)
        return 0

    import torch

    from autobyte.testing import run_ranks

    if not args.out:
        ap.error("--out is required: the directory for bench_gpu.json and bench_gpu.md.")
    for name in ("batch_size", "image_size", "width", "classes", "rounds", "iters", "warmup", "profile_iters", "threads", "tune_iters",
                 "tune_warmup"):
        v = getattr(args, name)
        if v is not None and (v < 0 or (v == 0 and name not in ("warmup", "profile_iters", "tune_warmup"))):
            ap.error(f"--{name.replace('_', '-')} must be a positive integer, but got {v}.")
    try:
        grid = _parse_grid(args.grid)
    except ValueError as exc:
        ap.error(str(exc))
    from autobyte.core.tuners import import_tuners, tuner_names

    import_tuners(args.imports)
    tuners = [] if args.tuners.strip() == "none" else [t.strip() for t in args.tuners.split(",") if t.strip()]
    tune_iters = args.tune_iters or (150 if torch.cuda.is_available() and args.device != "cpu" else 12)
    runs: list[tuple[str, str, int]] = []
    for t in tuners:
        spec, _, n = t.partition(":")
        name, at, wire = spec.partition("@")
        if name not in tuner_names():
            ap.error(f"--tuners: each name must be one of {', '.join(tuner_names())} (or 'none'), but got {name!r}.")
        if at and wire not in TUNER_WIRES:
            ap.error(f"--tuners: WIRE in NAME@WIRE must be one of {', '.join(TUNER_WIRES)}, but got {t!r}.")
        if n and (not n.isdigit() or int(n) < 1):
            ap.error(f"--tuners: ITERS in NAME:ITERS must be a positive integer, but got {t!r}.")
        runs.append((name, wire or "fp32", int(n) if n else tune_iters))
    has_cuda = torch.cuda.is_available()
    if args.device == "cuda" and not has_cuda:
        ap.error("--device cuda was asked for, but torch.cuda.is_available() is False here; use --device auto or cpu.")
    cuda = has_cuda and args.device != "cpu"
    n_gpus = torch.cuda.device_count() if cuda else 0
    d = (lambda gpu, cpu: gpu) if cuda else (lambda gpu, cpu: cpu)
    opts = {
        "device": "cuda" if cuda else "cpu",
        "backend": "nccl" if n_gpus >= 2 else "gloo",
        "batch_size": args.batch_size or d(64, 4), "image_size": args.image_size or d(224, 32), "width": args.width or d(64, 8),
        "classes": args.classes or d(1000, 10), "rounds": args.rounds or d(5, 3), "iters": args.iters or d(20, 3),
        "warmup": d(5, 1) if args.warmup is None else args.warmup,
        "profile_iters": d(5, 2) if args.profile_iters is None else args.profile_iters,
        "threads": args.threads,
        "tune_warmup": args.tune_warmup,
        "tuners": runs, "imports": [str(Path(i).resolve()) if i.endswith(".py") else i for i in args.imports], "tune_iters": tune_iters,
        "modes": modes_for(grid, args.wire),
        "profile_modes": ["DDP (bucket_cap_mb=25)", DDP_POINT[0], BS_DEFAULT[0]],
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    opts["raw"] = str(out / "bench_gpu.raw.json")
    load0 = "%.2f %.2f %.2f" % os.getloadavg()
    root = str(Path(__file__).resolve().parents[1])
    env = {"PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    res = run_ranks([str(Path(__file__).resolve()), "--worker", json.dumps(opts)], 2, env=env, timeout_s=args.timeout_s)
    for r in res:
        if r.returncode != 0:
            print(f"rank {r.rank} failed (exit {r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}", file=sys.stderr)
            return 1
    raw = json.loads(Path(opts["raw"]).read_text())
    os.unlink(opts["raw"])
    if cuda:
        where = f"{n_gpus} GPU(s), {raw['gpu_name']}: " + ("NCCL, one GPU per rank" if n_gpus >= 2 else "both ranks on GPU 0, gloo with CUDA tensors")
        reason = None
    else:
        where = f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores), gloo"
        reason = "asked for with --device cpu" if has_cuda else "no CUDA device here (torch.cuda.is_available() is False)"
    meta = {
        "device": opts["device"], "fallback": not cuda, "fallback_reason": reason, "device_text": where,
        "backend": opts["backend"], "torch": torch.__version__, "python": platform.python_version(),
        "command": "PYTHONPATH=$PWD python3 " + " ".join([os.path.relpath(__file__, root) if __file__.startswith(root) else __file__,
                                                          *(argv if argv is not None else sys.argv[1:])]),
        "load_average_start": load0, "load_average_end": "%.2f %.2f %.2f" % os.getloadavg(),
        **{k: opts[k] for k in ("batch_size", "image_size", "width", "classes", "rounds", "iters", "warmup", "profile_iters", "tune_iters",
                                "tune_warmup")},
        "unix_time": time.time(),
    }
    summary = summarize(raw, meta)
    (out / "bench_gpu.json").write_text(json.dumps(summary, indent=1))
    text = markdown(summary)
    (out / "bench_gpu.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
