"""Lightning's multiprocessing launcher (ddp_spawn / ddp_notebook) with AutoByteCallback.

usage: lightning_spawn.py STRATEGY  (run by tests/integrations/test_lightning_examples.py)
The Trainer starts 2 child processes; the parent gets the logged metrics back.
Prints one JSON line with what the parent sees.
"""

from __future__ import annotations

import json
import sys

import lightning.pytorch as pl
import torch

from autobyte.core import KiB, Config, SearchSpace
from autobyte.core.tuners import GridTuner
from autobyte.integrations.lightning import AutoByteCallback


class Tiny(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


if __name__ == "__main__":
    g = torch.Generator().manual_seed(0)
    x = torch.randn(256, 16, generator=g)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, (x[:, 0] > 0).long()), batch_size=8)
    space = SearchSpace([Config(1 * KiB, 1 * KiB), Config(1 * KiB, 4 * KiB)])
    cb = AutoByteCallback(GridTuner(space), partition_bytes=1 * KiB, credit_bytes=1 * KiB, window_iters=3, warmup_iters=1, space=space)
    trainer = pl.Trainer(strategy=sys.argv[1], accelerator="cpu", devices=2, max_steps=12, callbacks=[cb], logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(Tiny(), loader)
    m = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("autobyte/")}
    if trainer.is_global_zero:
        print("RESULT " + json.dumps(m), flush=True)
