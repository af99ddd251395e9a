"""One rank of the 16-bit wire jobs of tests/integrations/test_torch_wire.py (2 CPU ranks on gloo).

argv: out folder, scenario[, device]: ``cuda`` puts the model and batches on GPU 0 (gloo with CUDA
tensors; the ranks share the GPU) with cuDNN's deterministic kernels.

* ``hooks``: the test CNN trained 12 SGD steps by DDP (fp32), DDP + ``bf16_compress_hook``,
  DDP + ``fp16_compress_hook``, and by the engine at ``wire="bf16"`` and ``"fp16"`` under a split
  plan (4 KiB partitions, credit 2X) and a fused one (64 MiB, one message), overlap and synchronous.
* ``switch``: the engine switches fp32 -> bf16 -> fp32 with ``handle.reconfigure(wire=...)`` at
  agreed iterations (and a tuner run at ``wire="bf16"`` moves partition and credit, and a run at
  ``wire="auto"`` chooses); beside it, a step-by-step reference that all-reduces each gradient
  itself at the precision of each step.
* ``overflow``: one linear layer whose gradients reach 1e5: the average overflows fp16 (both
  ranks +1e5), or only one rank's gradient does (rank 0 +1e5, rank 1 -0.9e5), for the engine and
  DDP's hooks.

Writes ``OUT/rank{r}.npz`` (parameters of each run, no pickle) and ``OUT/rank{r}.json``.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

from autobyte.core import AutoWire, KiB, MiB
from autobyte.integrations.torch import schedule
from autobyte.testing import SwitchOnce, exit_rank
from autobyte.testing import _torch_worker
from autobyte.testing._torch_worker import batches, make, params, step

STEPS = 12


def bf16_hook(state, bucket):  # type: ignore[no-untyped-def]  # (DDP reads the annotations: none)
    """DDP's ``bf16_compress_hook`` under another name: DDP refuses that name without CUDA and NCCL
    (a check by name only); the hook itself runs on gloo."""
    return default_hooks.bf16_compress_hook(state, bucket)


HOOKS = {"bf16": bf16_hook, "fp16": default_hooks.fp16_compress_hook}
#: the precision of each step of the switch run: fp32 for 0-3, bf16 for 4-7, fp32 from 8
SWITCH = {4: "bf16", 8: "fp32"}


def ddp(data: list, wire: str) -> list[np.ndarray]:
    m, o = make("sgd")
    d = torch.nn.parallel.DistributedDataParallel(m)
    if wire != "fp32":
        d.register_comm_hook(None, HOOKS[wire])
    for x, y in data:
        step(d, o, x, y)
    return params(m)


def engine(data: list, wire: str, partition: int, credit: int, overlap: bool) -> list[np.ndarray]:
    m, o = make("sgd")
    h = schedule(m, o, partition_bytes=partition, credit_bytes=credit, wire=wire, overlap=overlap, verbose=False)
    for x, y in data:
        step(m, o, x, y)
    h.synchronize()
    assert h.config.wire == wire
    out = params(m)
    h.close()
    return out


def reference(data: list, wires: list[str]) -> list[np.ndarray]:
    """Each step's gradients all-reduced here, at that step's precision (what the engine must do)."""
    m, o = make("sgd")
    with torch.no_grad():
        for t in list(m.parameters()) + list(m.buffers()):
            dist.broadcast(t, 0)
    ws = dist.get_world_size()
    for (x, y), wire in zip(data, wires):
        for b in m.buffers():
            dist.broadcast(b, 0)  # as DDP and the engine do before each training forward
        o.zero_grad()
        torch.nn.functional.cross_entropy(m(x), y).backward()
        for p in m.parameters():
            if wire == "fp32":
                dist.all_reduce(p.grad)
                p.grad.div_(ws)
            else:
                low = p.grad.to(torch.bfloat16 if wire == "bf16" else torch.float16).div_(ws)  # the hooks' order
                dist.all_reduce(low)
                p.grad.copy_(low)
        o.step()
    return params(m)


def switch(data: list, overlap: bool) -> tuple[list[np.ndarray], dict[str, Any]]:
    m, o = make("sgd")
    h = schedule(m, o, partition_bytes=4 * KiB, credit_bytes=8 * KiB, overlap=overlap, verbose=False)
    for i, (x, y) in enumerate(data):
        if i + 2 in SWITCH:  # asked after iteration i - 1 for an agreed iteration two steps on
            h.reconfigure(wire=SWITCH[i + 2], at_iteration=i + 2)
        step(m, o, x, y)
    h.synchronize()
    info = {"history": [[it, cfg.wire, reason] for it, cfg, reason in h.scheduler.history],
            "config": h.config.to_dict()}
    out = params(m)
    h.close()
    return out, info


def tuned(data: list) -> tuple[list[np.ndarray], dict[str, Any]]:
    """wire="bf16" under a tuner that knows nothing of the wire: its move keeps the job's precision."""
    m, o = make("sgd")
    h = schedule(m, o, partition_bytes=4 * KiB, credit_bytes=8 * KiB, wire="bf16", tuner=SwitchOnce(64 * KiB, 128 * KiB),
                 window_iters=4, warmup_iters=1, verbose=False)
    for x, y in data:
        step(m, o, x, y)
    h.synchronize()
    info = {"config": h.config.to_dict(), "reconfigurations": [r.to_dict() for r in h.reconfigurations],
            "tuner_configs": [e["config"] for e in h.controller.history]}
    out = params(m)
    h.close()
    return out, info


def auto(data: list) -> tuple[list[np.ndarray], dict[str, Any]]:
    """wire="auto" (one window per precision): the run starts at bf16, the tuner tries fp32 against it (unless bf16 keep
    the link busy) and chooses, at agreed iterations."""
    m, o = make("sgd")
    h = schedule(m, o, partition_bytes=4 * KiB, credit_bytes=8 * KiB, wire=AutoWire(windows=1), window_iters=2,
                 warmup_iters=0, verbose=False)
    for x, y in data:
        step(m, o, x, y)
    h.synchronize()
    wires = [""] * len(data)  # the history's first entry is the start, at iteration 0
    for it, cfg, _ in h.scheduler.history:
        wires[it:] = [cfg.wire] * (len(data) - it)
    choices = [c["reason"] for c in getattr(h.controller.tuner, "choices", [])] if h.controller is not None else []
    info = {"wires": wires, "reasons": [r.reason for r in h.reconfigurations], "choices": choices}
    out = params(m)
    h.close()
    return out, info


def overflow(rank: int, case: str, method: str) -> list[np.ndarray]:
    torch.manual_seed(0)
    lin = torch.nn.Linear(4, 1, bias=False)
    with torch.no_grad():
        lin.weight.fill_(1.0)
    scale = 1e5 if case == "average" or rank == 0 else -0.9e5
    o = torch.optim.SGD(lin.parameters(), lr=1e-6)
    x = torch.full((1, 4), scale)
    if method == "ddp":
        d: Any = torch.nn.parallel.DistributedDataParallel(lin)
        d.register_comm_hook(None, default_hooks.fp16_compress_hook)
    else:
        d = lin
        h = schedule(lin, o, partition_bytes=1 * MiB, credit_bytes=4 * MiB, wire=method, verbose=False)
    o.zero_grad()
    d(x).sum().backward()  # the gradient of the weight is x: 1e5 (or -0.9e5) in every element
    o.step()
    if method != "ddp":
        h.synchronize()
        h.close()
    return params(lin)


def main() -> None:
    out, scenario = sys.argv[1], sys.argv[2]
    if sys.argv[3:] == ["cuda"]:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.backends.cudnn.benchmark = False
        _torch_worker.DEVICE = torch.device("cuda", 0)
        torch.cuda.set_device(_torch_worker.DEVICE)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.set_num_threads(1)
    data = batches(rank, STEPS)
    arrays: dict[str, np.ndarray] = {}
    info: dict[str, Any] = {"rank": rank}

    def keep(name: str, ps: list[np.ndarray]) -> None:
        for i, a in enumerate(ps):
            arrays[f"{name}_p{i}"] = a

    if scenario == "hooks":
        for wire in ("fp32", "bf16", "fp16"):
            keep(f"ddp_{wire}", ddp(data, wire))
        for wire in ("bf16", "fp16"):
            keep(f"split_{wire}", engine(data, wire, 4 * KiB, 8 * KiB, True))
            keep(f"fused_{wire}", engine(data, wire, 64 * MiB, 64 * MiB, True))
            keep(f"sync_{wire}", engine(data, wire, 16 * KiB, 32 * KiB, False))
    elif scenario == "switch":
        wires = ["fp32"] * STEPS
        for at, wire in sorted(SWITCH.items()):
            wires[at:] = [wire] * (STEPS - at)
        keep("reference", reference(data, wires))
        keep("reference_late", reference(data, ["fp32"] + wires[:-1]))  # every switch one iteration later
        keep("all_fp32", reference(data, ["fp32"] * STEPS))
        for overlap in (True, False):
            ps, info[f"switch_{overlap}"] = switch(data, overlap)
            keep(f"switch_{overlap}", ps)
        ps, info["tuned"] = tuned(data)
        keep("tuned", ps)
        keep("tuned_reference", reference(data, ["bf16"] * STEPS))
        ps, info["auto"] = auto(data)
        keep("auto", ps)
        keep("auto_reference", reference(data, info["auto"]["wires"]))
    elif scenario == "overflow":
        for case in ("average", "one_rank"):
            for method in ("ddp", "fp16", "bf16", "fp32"):
                keep(f"{case}_{method}", overflow(rank, case, method))

    np.savez(os.path.join(out, f"rank{rank}.npz"), **arrays)  # type: ignore[arg-type]
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(info, f)
    dist.destroy_process_group()
    exit_rank(0)


if __name__ == "__main__":
    main()
