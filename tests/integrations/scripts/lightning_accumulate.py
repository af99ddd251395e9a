"""One rank of the Lightning accumulation test (run by tests/integrations/test_reliability.py).

usage: lightning_accumulate.py OUT_DIR
Fits the same model with ``accumulate_grad_batches=4`` under plain DDP and
under AutoByteCallback (overlap chosen by the callback, and overlap=False),
counting communication rounds: DDP's through a comm hook (bucket 0 of each
round), the engine's from its all-reduce calls on its own group divided by
the messages of one round. Writes OUT_DIR/rank{r}.json.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import lightning.pytorch as pl
import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

from autobyte.core import KiB
from autobyte.integrations.lightning import AutoByteCallback

ACCUM = 4
BATCHES = 16  # per rank: 4 optimizer steps


class Net(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.BatchNorm1d(32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
        self.losses: list[float] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self.net(x), y)
        self.losses.append(float(loss.detach()))
        return loss

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)


def loader() -> torch.utils.data.DataLoader:
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2 * 8 * BATCHES, 16, generator=g)
    y = (x[:, 0] > 0).long() + 2 * (x[:, 1] > 0).long()
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=8)


def fit(callbacks: list, strategy: str = "ddp", **kw: Any) -> tuple[Net, pl.Trainer]:
    pl.seed_everything(0, verbose=False)
    model = Net()
    trainer = pl.Trainer(
        strategy=strategy, accelerator="cpu", devices=2, num_nodes=1, max_epochs=1, accumulate_grad_batches=ACCUM,
        callbacks=callbacks, logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False, **kw,
    )
    trainer.fit(model, loader())
    return model, trainer


def main() -> None:
    out = sys.argv[1]
    ddp_rounds = [0]

    def hook(state, bucket):  # no annotations: DDP checks them, and they are strings here
        if bucket.index() == 0:
            ddp_rounds[0] += 1
        return default_hooks.allreduce_hook(None, bucket)

    class CountRounds(pl.Callback):
        def on_fit_start(self, trainer: pl.Trainer, pl_module: Any) -> None:
            trainer.strategy.model.register_comm_hook(None, hook)  # Lightning registers ddp_comm_hook on CUDA only

    ref, trainer = fit([CountRounds()])
    result: dict[str, Any] = {"ddp_losses": ref.losses, "ddp_rounds": ddp_rounds[0], "ddp_steps": trainer.global_step}
    ref_w = [p.detach().numpy().tolist() for p in ref.parameters()]

    orig = dist.all_reduce
    for name, overlap in (("auto", None), ("sync", False)):
        cb = AutoByteCallback(tuner=None, partition_bytes=1 * KiB, credit_bytes=2 * KiB, overlap=overlap)
        calls = [0]

        def counting(*a: Any, **k: Any) -> Any:
            if cb.handle is not None and k.get("group") is cb.handle.comm_group:
                calls[0] += 1
            return orig(*a, **k)

        dist.all_reduce = counting
        try:
            model, trainer = fit([cb])
        finally:
            dist.all_reduce = orig
        w = [p.detach().numpy().tolist() for p in model.parameters()]
        result[name] = {
            "losses": model.losses, "steps": trainer.global_step, "overlap": cb.handle.overlap,
            "rounds": calls[0] / len(cb.handle.scheduler.messages),
            "max_abs_diff": max(abs(a - b) for pa, pb in zip(ref_w, w) for a, b in zip(torch.tensor(pa).flatten().tolist(), torch.tensor(pb).flatten().tolist())),
        }
    with open(os.path.join(out, f"rank{dist.get_rank()}.json"), "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
