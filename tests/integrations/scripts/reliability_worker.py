"""One rank of the reliability tests (run by tests/integrations/test_reliability.py).

usage: reliability_worker.py SCENARIO OUT_DIR [options as JSON]
Prints result lines starting with ``RESULT`` and writes OUT_DIR/rank{r}.json.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

from autobyte.core import KiB
from autobyte.integrations.torch import CollectiveMismatchError, PeerLostError, schedule
from autobyte.testing import exit_rank


class Net(torch.nn.Module):
    """A small MLP, with batch-norm buffers and a zero-size parameter on request."""

    def __init__(self, bn: bool = False, zero: bool = False) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 32)
        self.bn = torch.nn.BatchNorm1d(32) if bn else torch.nn.Identity()
        self.fc2 = torch.nn.Linear(32, 4)
        self.z = torch.nn.Parameter(torch.zeros(0)) if zero else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.fc2(torch.relu(self.bn(self.fc1(x))))
        if self.z is not None:
            out = out + self.z.sum()
        return out


def make(bn: bool = False, zero: bool = False, opt: str = "sgd") -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    m = Net(bn, zero)
    if opt == "adam":
        return m, torch.optim.Adam(m.parameters(), lr=1e-2)
    return m, torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)


def data(rank: int, n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(100 + rank)
    return [(torch.randn(8, 16, generator=g), torch.randint(0, 4, (8,), generator=g)) for _ in range(n)]


def loss_of(m: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.cross_entropy(m(x), y)


def weights(m: torch.nn.Module) -> list[np.ndarray]:
    return [p.detach().numpy().copy() for p in m.parameters()]


def same(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    return len(a) == len(b) and all(x.shape == y.shape and np.allclose(x, y, rtol=1e-5, atol=1e-7) for x, y in zip(a, b))


class AllReduceCounter:
    """Counts ``torch.distributed.all_reduce`` calls made by the engine."""

    def __init__(self) -> None:
        self.n = 0
        self._orig = dist.all_reduce

    def __enter__(self) -> "AllReduceCounter":
        def counting(*a, **k):
            self.n += 1
            return self._orig(*a, **k)

        dist.all_reduce = counting
        return self

    def __exit__(self, *exc) -> None:
        dist.all_reduce = self._orig


def ddp_accumulate(batches, accum: int, zero: bool = False) -> tuple[list[np.ndarray], int]:
    """Plain DDP with no_sync accumulation; returns weights and communication rounds."""
    m, o = make(zero=zero)
    ddp = torch.nn.parallel.DistributedDataParallel(m)
    rounds = [0]

    def hook(state, bucket):
        if bucket.index() == 0:
            rounds[0] += 1
        return default_hooks.allreduce_hook(None, bucket)

    ddp.register_comm_hook(None, hook)
    for i, (x, y) in enumerate(batches):
        ctx = ddp.no_sync() if (i + 1) % accum else contextlib.nullcontext()
        with ctx:
            loss_of(ddp, x, y).backward()
        if (i + 1) % accum == 0:
            o.step()
            o.zero_grad()
    return weights(m), rounds[0]


def scheduled_accumulate(batches, accum: int, overlap: bool, zero: bool = False) -> tuple[list[np.ndarray], int, int]:
    m, o = make(zero=zero)
    h = schedule(m, o, partition_bytes=1 * KiB, credit_bytes=2 * KiB, overlap=overlap, timeout_s=30)
    with AllReduceCounter() as c:
        for i, (x, y) in enumerate(batches):
            ctx = h.no_sync() if (i + 1) % accum else contextlib.nullcontext()
            with ctx:
                loss_of(m, x, y).backward()
            if (i + 1) % accum == 0:
                o.step()
                o.zero_grad()
        h.synchronize()
    n_msgs = len(h.scheduler.messages)
    h.close()
    return weights(m), c.n, n_msgs


def main() -> None:
    scenario, out = sys.argv[1], sys.argv[2]
    opts = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    result: dict = {}

    if scenario == "stopped":
        # Rank 1 stops itself (SIGSTOP) at step 5; rank 0 must get PeerLostError within timeout_s.
        m, o = make(bn=opts["bn"])
        h = schedule(m, o, partition_bytes=1 * KiB, credit_bytes=2 * KiB, timeout_s=opts["timeout_s"], tuner=opts["tuner"],
                     window_iters=1, warmup_iters=0, verbose=False)
        stamp = os.path.join(out, "stopped_at")
        try:
            for step, (x, y) in enumerate(data(rank, 1000)):
                if step == 5 and rank == 1:
                    with open(os.path.join(out, "pid1"), "w") as f:
                        f.write(str(os.getpid()))
                    with open(stamp + ".tmp", "w") as f:
                        f.write(repr(time.time()))
                    os.replace(stamp + ".tmp", stamp)
                    os.kill(os.getpid(), signal.SIGSTOP)
                o.zero_grad()
                loss_of(m, x, y).backward()
                o.step()
            h.synchronize()
        except PeerLostError as exc:
            waited = time.time() - float(open(stamp).read())
            print(f"RESULT PeerLostError after {waited:.2f}s: {exc}", flush=True)
            result.update(error="PeerLostError", waited=waited, message=str(exc))
            pid = int(open(os.path.join(out, "pid1")).read())
            os.kill(pid, signal.SIGKILL)  # the test leaves nothing behind
            os.kill(pid, signal.SIGCONT)
        with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
            json.dump(result, f)
        os._exit(3 if result else 0)

    elif scenario == "one_rank_reconfigure":
        # Rank 0 alone calls reconfigure() at step 3: every rank must end with a clear error, no signal.
        m, o = make(bn=opts["bn"])
        h = schedule(m, o, partition_bytes=1 * KiB, credit_bytes=2 * KiB, timeout_s=opts["timeout_s"], tuner=opts["tuner"],
                     window_iters=2, warmup_iters=0, verbose=False)
        t0 = time.monotonic()
        try:
            for step, (x, y) in enumerate(data(rank, 50)):
                if step == 3 and rank == 0:
                    t0 = time.monotonic()
                    h.reconfigure(2 * KiB, 4 * KiB)
                o.zero_grad()
                loss_of(m, x, y).backward()
                o.step()
            h.synchronize()
        except (CollectiveMismatchError, PeerLostError) as exc:
            print(f"RESULT {type(exc).__name__} after {time.monotonic() - t0:.2f}s: {exc}", flush=True)
            result.update(error=type(exc).__name__, message=str(exc))
        with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
            json.dump(result, f)
        os._exit(0)

    elif scenario == "semantics":
        accum, steps = 3, 4
        batches = data(rank, accum * steps)
        ref, ddp_rounds = ddp_accumulate(batches, accum)
        result["ddp_rounds"] = ddp_rounds
        for overlap in (False, True):
            got, n_calls, n_msgs = scheduled_accumulate(batches, accum, overlap)
            result[f"accum_equal_overlap{overlap}"] = same(ref, got)
            result[f"accum_rounds_overlap{overlap}"] = n_calls / n_msgs
        # Zero-size parameter: the same weights as DDP (which skips it as well).
        ref_z, _ = ddp_accumulate(batches, 1, zero=True)
        got_z, _, _ = scheduled_accumulate(batches, 1, overlap=True, zero=True)
        result["zero_size_equal"] = same(ref_z, got_z)
        # The optimizer keeps its class (a dynamic subclass while scheduled, as Horovod's DistributedOptimizer),
        # and a learning-rate scheduler made before schedule() still steps: DDP's weights.
        m, o = make()
        ddp = torch.nn.parallel.DistributedDataParallel(m)
        sched = torch.optim.lr_scheduler.StepLR(o, step_size=1, gamma=0.5)
        for x, y in batches[:4]:
            o.zero_grad()
            loss_of(ddp, x, y).backward()
            o.step()
            sched.step()
        ref_lr = weights(m)
        m, o = make()
        sched = torch.optim.lr_scheduler.StepLR(o, step_size=1, gamma=0.5)
        h = schedule(m, o, partition_bytes=1 * KiB, credit_bytes=2 * KiB, timeout_s=30)
        result["class_while_scheduled"] = [isinstance(o, torch.optim.SGD), type(o).__name__, type(o) is torch.optim.SGD]
        for x, y in batches[:4]:
            o.zero_grad()
            loss_of(m, x, y).backward()
            o.step()
            sched.step()
        h.close()
        result["lr_scheduler_equal"] = same(ref_lr, weights(m))
        result["class_after_close"] = [type(o) is torch.optim.SGD, sorted(k for k in vars(o) if k.startswith("_autobyte"))]
        # Several backward() per step() without no_sync in overlap mode: a clear refusal.
        m, o = make()
        h = schedule(m, o, partition_bytes=1 * KiB, credit_bytes=2 * KiB, timeout_s=30)
        try:
            for x, y in batches[:3]:
                loss_of(m, x, y).backward()
            result["accum_without_no_sync"] = "no error"
        except RuntimeError as exc:
            result["accum_without_no_sync"] = str(exc)
        h.close()
        # reconfigure() after schedule() and before the first step applies from the first step.
        m, o = make()
        h = schedule(m, o, partition_bytes=1 * KiB, credit_bytes=2 * KiB, timeout_s=30)
        h.reconfigure(4 * KiB, 8 * KiB)
        loss_of(m, *batches[0]).backward()
        o.step()
        h.synchronize()
        result["first_step_config"] = [h.config.partition_bytes, h.config.credit_bytes, h.iteration]
        result["first_step_messages"] = len(h.scheduler.messages)
        # A reconfigure to the configuration in force changes nothing.
        history = list(h.scheduler.history)
        h.reconfigure(4 * KiB, 8 * KiB)
        result["noop_pending"] = h.scheduler.pending is not None
        loss_of(m, *batches[1]).backward()
        o.step()
        h.synchronize()
        result["noop_history_unchanged"] = h.scheduler.history == history
        h.close()
        print(f"RESULT rank {rank} {json.dumps(result)}", flush=True)
        with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
            json.dump(result, f)

    elif scenario == "verbose":
        # Plain PyTorch users see one line per reconfiguration on rank 0, unless on_decision takes over.
        from autobyte.core import Config, SearchSpace
        from autobyte.core.tuners import GridTuner

        space = SearchSpace([Config(1 * KiB, 2 * KiB), Config(2 * KiB, 8 * KiB)])
        for quiet in (False, True):
            m, o = make()
            seen: list = []
            h = schedule(m, o, partition_bytes=1 * KiB, credit_bytes=2 * KiB, tuner=GridTuner(space), space=space,
                         window_iters=2, warmup_iters=0, on_decision=(lambda *a: seen.append(a)) if quiet else None)
            print(f"PHASE quiet={quiet}", flush=True)
            for x, y in data(rank, 12):
                o.zero_grad()
                loss_of(m, x, y).backward()
                o.step()
            h.synchronize()
            h.close()

    dist.destroy_process_group()
    exit_rank(0)  # everything is written: no interpreter teardown


if __name__ == "__main__":
    main()
