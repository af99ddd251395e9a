"""One rank of tests/advise/test_lightning_advise.py: a 2-rank Lightning DDP job asks for DDP advice after its first window."""

from __future__ import annotations

import json
import os
import sys

import lightning.pytorch as pl
import torch

from autobyte.integrations.lightning import AutoByteCallback


class Net(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(32, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512),
                                       torch.nn.ReLU(), torch.nn.Linear(512, 4))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=1e-2)


class AdviseOnce(pl.Callback):
    def __init__(self, cb: AutoByteCallback) -> None:
        self.cb = cb

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step == 10:  # after the first window (10 steps)
            a = self.cb.advise_ddp(sensitivity=False, engine=False)  # link measured by the job itself
            print("ADVICE " + json.dumps({"rank": trainer.global_rank, **a.to_dict()}), flush=True)


def main() -> None:
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(256, 32, generator=g)
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, (x[:, 0] > 0).long()), batch_size=8)
    cb = AutoByteCallback(tuner=None, overlap=False, verbose=False)  # gradients averaged by the end of backward, as DDP
    trainer = pl.Trainer(strategy="ddp", accelerator="cpu", devices=1, num_nodes=2, max_steps=12,
                         callbacks=[cb, AdviseOnce(cb)], logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(Net(), data)


if __name__ == "__main__":
    main()
    sys.stdout.flush()
    os._exit(0)  # skip interpreter teardown, where gloo objects sometimes abort a finished process
