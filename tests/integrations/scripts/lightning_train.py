"""One rank of the Lightning integration test (run by tests/integrations/test_lightning.py).

usage: lightning_train.py OUT_DIR [--wire]
Runs, in one process group, four fits of the same CNN on the same generated
data: plain DDP; AutoByteCallback with a fixed configuration (tuning off);
AutoByteCallback with a tuner that reacts when the job slows down (a sleep
injected from step 30 on), checkpointing at the end; and a resume from that
checkpoint. With ``--wire``, three fits instead: plain DDP, DDP with the bf16
compression hook and ``AutoByteCallback(wire="bf16")``. Writes OUT_DIR/rank{r}.json.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger

from autobyte.core import KiB, Config, SearchSpace
from autobyte.core.tuning import Decision, Observation, Tuner
from autobyte.integrations.lightning import AutoByteCallback

STEPS_PER_EPOCH = 32
BATCH = 8
SLEEP_FROM_STEP = 30


class CNN(pl.LightningModule):
    def __init__(self, sleep_from: int | None = None) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
            torch.nn.Flatten(), torch.nn.Linear(32 * 4 * 4, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10),
        )
        self.sleep_from = sleep_from
        self.losses: list[float] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if self.sleep_from is not None and self.global_step >= self.sleep_from:
            time.sleep(0.2)  # the environment changes: every step gets slower
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self(x), y)
        self.losses.append(float(loss.detach()))
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", torch.nn.functional.cross_entropy(self(x), y), sync_dist=True)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)


def loaders() -> tuple[torch.utils.data.DataLoader, torch.utils.data.DataLoader]:
    g = torch.Generator().manual_seed(7)
    n = 2 * BATCH * STEPS_PER_EPOCH
    x = torch.randn(n, 3, 16, 16, generator=g)
    y = (x[:, 0].mean((1, 2)) > 0).long() + 2 * (x[:, 1].mean((1, 2)) > 0).long()
    train = torch.utils.data.TensorDataset(x, y)
    val = torch.utils.data.TensorDataset(x[:64], y[:64])
    return (torch.utils.data.DataLoader(train, batch_size=BATCH, shuffle=False),
            torch.utils.data.DataLoader(val, batch_size=16))


class ReactTuner(Tuner):
    """Reconfigures once, after two windows in a row run below half the best speed seen."""

    name = "react"
    #: not watched by the do-no-harm guard: the job's slowdown, which this tuner reacts to, reads to the guard as its
    #: move costing time against the start's speed before it, and one CI run's guard sent it back 6 iterations later
    #: (the guard is tested on its own, tests/core)
    guarded = False

    def __init__(self, to: Config) -> None:
        self.to = to
        self.best = 0.0
        self.slow = 0
        self.reacted = False
        self.n_obs = 0

    def observe(self, obs: Observation) -> Decision | None:
        self.n_obs += 1
        if self.reacted:
            return None
        if obs.speed < 0.5 * self.best:
            self.slow += 1
            if self.slow >= 2:
                self.reacted = True
                return Decision(self.to, f"speed fell from {self.best:.0f} to {obs.speed:.0f} samples/s", predicted_speed=self.best)
        else:
            self.slow = 0
            self.best = max(self.best, obs.speed)
        return None

    def state_dict(self) -> dict[str, Any]:
        return {"best": self.best, "slow": self.slow, "reacted": self.reacted, "n_obs": self.n_obs}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.best = state["best"]
        self.slow = state["slow"]
        self.reacted = state["reacted"]
        self.n_obs = state["n_obs"]


class Probe(pl.Callback):
    """Records what the AutoByte callback holds right after it set up (resume check)."""

    def __init__(self, cb: AutoByteCallback) -> None:
        self.cb = cb
        self.seen: dict[str, Any] = {}

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        h = self.cb.handle
        self.seen["engine"] = h.state_dict()
        self.seen["tuner"] = self.cb.tuner.state_dict()
        self.seen["n_decisions"] = len(self.cb.decisions)

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        if "first_step" not in self.seen:
            self.seen["first_step"] = trainer.global_step
            self.seen["config_at_first_step"] = self.cb.handle.config.to_dict()


def bf16_hook(state, bucket):  # type: ignore[no-untyped-def]  # (DDP reads the annotations: none)
    """DDP's ``bf16_compress_hook`` under another name: DDP refuses that name without CUDA and NCCL (by name only)."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    return default_hooks.bf16_compress_hook(state, bucket)


def trainer(root: str, callbacks: list, *, max_epochs: int = 2, max_steps: int = -1, log: bool = False) -> pl.Trainer:
    return pl.Trainer(
        strategy="ddp", accelerator="cpu", devices=2, max_epochs=max_epochs, max_steps=max_steps,
        callbacks=callbacks, logger=CSVLogger(root, name="logs") if log else False,
        enable_checkpointing=any(isinstance(c, ModelCheckpoint) for c in callbacks),
        enable_progress_bar=False, enable_model_summary=False, log_every_n_steps=4,
        limit_val_batches=2, default_root_dir=root, deterministic=True,
    )


def fit(root: str, callbacks: list, sleep_from: int | None = None, ckpt_path: str | None = None, **kw: Any) -> CNN:
    pl.seed_everything(0, verbose=False)
    model = CNN(sleep_from)
    train, val = loaders()
    t = trainer(root, callbacks, **kw)
    t0 = time.perf_counter()
    t.fit(model, train, val, ckpt_path=ckpt_path)
    print(f"fit took {time.perf_counter() - t0:.1f} s", flush=True)
    model.trainer_global_step = t.global_step  # type: ignore[attr-defined]
    return model


class HookOnCPU(pl.Callback):
    """Registers the bf16 hook on the DDP module: Lightning's ``DDPStrategy(ddp_comm_hook=...)`` registers
    hooks on CUDA devices only and ignores the argument on CPU."""

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        trainer.strategy.model.register_comm_hook(None, bf16_hook)


def wire_fits(out: str, rank: int) -> dict[str, Any]:
    res: dict[str, Any] = {"ddp_losses": fit(out, []).losses}
    m = fit(out, [HookOnCPU()])
    res["hook_losses"] = m.losses
    cb = AutoByteCallback(tuner=None, partition_bytes=4 * KiB, credit_bytes=16 * KiB, wire="bf16", verbose=False)
    m = fit(out, [cb])
    res["wire_losses"] = m.losses
    res["wire_config"] = cb.config.to_dict()
    res["wire_bytes_per_iteration"] = cb.handle.bytes_per_iteration
    res["wire_weights"] = [float(x) for x in torch.cat([p.detach().reshape(-1) for p in m.parameters()])[::97]]
    return res


def main() -> None:
    out = sys.argv[1]
    rank = int(os.environ["RANK"])
    res: dict[str, Any] = {}
    if "--wire" in sys.argv[2:]:
        with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
            json.dump(wire_fits(out, rank), f)
        print(f"rank {rank} done")
        return

    m = fit(out, [])
    res["ddp_losses"] = m.losses

    cb = AutoByteCallback(tuner=None, partition_bytes=4 * KiB, credit_bytes=16 * KiB, verbose=False)
    m = fit(out, [cb])
    res["fixed_losses"] = m.losses
    # The handle is closed but keeps its statistics: with no tuner, one window holds the whole run.
    ws = cb.handle.window_stats()
    cb_stats = {"bytes_sent": ws.bytes_sent, "n_messages": ws.n_messages, "n_iters": ws.n_iters,
                "bytes_per_iteration": cb.handle.bytes_per_iteration,
                "param_bytes": sum(p.numel() * p.element_size() for p in m.parameters()),
                "n_params": sum(1 for _ in m.parameters())}
    res["fixed_stats"] = cb_stats

    start = Config(4 * KiB, 16 * KiB)
    to = Config(64 * KiB, 256 * KiB)
    space = SearchSpace([start, to])
    ckpt_dir = os.path.join(out, "ckpt")
    cb = AutoByteCallback(tuner=ReactTuner(to), partition_bytes=start.partition_bytes, credit_bytes=start.credit_bytes,
                          window_iters=8, warmup_iters=2, space=space)
    ck = ModelCheckpoint(dirpath=ckpt_dir, save_last=True, save_top_k=-1, every_n_epochs=1)
    m = fit(out, [cb, ck], sleep_from=SLEEP_FROM_STEP, log=True)
    res["react_losses"] = m.losses
    res["react_decisions"] = cb.decisions
    res["react_state"] = cb.state_dict()
    res["react_config"] = cb.config.to_dict()

    cb2 = AutoByteCallback(tuner=ReactTuner(to), partition_bytes=start.partition_bytes, credit_bytes=start.credit_bytes,
                           window_iters=8, warmup_iters=2, space=space)
    probe = Probe(cb2)
    m = fit(out, [cb2, probe], max_epochs=4, max_steps=80, ckpt_path=os.path.join(ckpt_dir, "last.ckpt"))
    res["resume"] = probe.seen
    res["resume_global_step"] = m.trainer_global_step  # type: ignore[attr-defined]
    res["resume_n_losses"] = len(m.losses)
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(res, f)
    print(f"rank {rank} done")


if __name__ == "__main__":
    main()
