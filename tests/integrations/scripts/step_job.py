"""One rank of a 2-rank gloo job whose iterations become slower inside a check (tests/integrations/test_step_rule.py).

argv: out folder, "on" or "off" (the tuner's step rule). From iteration SLOW on, every rank sleeps 600 ms more per
iteration, as if a co-located job took the CPU. Checks come every 5 counted iterations, at the start of iterations
6, 11, 16, 21, ... (iterations are timed start to start; iteration 0 is the warm-up): the check at 21 holds
iterations 16-20, 3 before the change and 2 after.
"""

from __future__ import annotations

import json
import os
import sys
import time

import torch
import torch.distributed as dist

from autobyte.core import KiB
from autobyte.core.tuning import Decision, Observation, StaticTuner
from autobyte.integrations.torch import schedule
from autobyte.testing import exit_rank

SLOW = 19


class Keeps(StaticTuner):
    """Never moves; keeps what it was told."""

    def __init__(self, step_change: float | None) -> None:
        self.step_change = step_change
        self.seen: list[dict[str, object]] = []

    def observe(self, obs: Observation) -> Decision | None:
        self.seen.append({"iteration": obs.iteration, "mixed": obs.mixed, "changed": obs.regime_changed,
                          "speed": obs.speed})
        return None


def main() -> None:
    out, mode = sys.argv[1], sys.argv[2]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    tuner = Keeps(0.5 if mode == "on" else None)
    job = schedule(model, opt, partition_bytes=16 * KiB, credit_bytes=64 * KiB, tuner=tuner, window_iters=10,
                   warmup_iters=1, verbose=False)
    g = torch.Generator().manual_seed(rank)
    for it in range(36):
        x, y = torch.randn(8, 64, generator=g), torch.randint(0, 10, (8,), generator=g)
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        # inside the iteration, after its forward; 150 ms, so that a hiccup of a slow host (tens of ms in one
        # iteration) stays under the detector's 15% of a check's five and only the change at SLOW moves its speed
        time.sleep(0.15 + (0.6 if it >= SLOW else 0.0))
        loss.backward()
        opt.step()
    job.close()
    if rank == 0:
        assert job.controller is not None
        with open(os.path.join(out, f"{mode}.json"), "w") as f:
            json.dump({"history": job.controller.history, "seen": tuner.seen}, f, default=str)
    dist.destroy_process_group()
    exit_rank(0)


if __name__ == "__main__":
    main()
