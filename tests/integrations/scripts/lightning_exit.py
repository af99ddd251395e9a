"""Lightning DDP (gloo, Lightning's own launcher) with AutoByteCallback, then a collective and exit.

usage: lightning_exit.py  (run by tests/integrations/test_lightning_examples.py)
A checker registered with atexit before the Trainer exists runs after the callback's own
exit handler (atexit is last in, first out) and prints whether gloo's default group is
still alive at that point of the shutdown.
"""

from __future__ import annotations

import atexit
import os

import lightning.pytorch as pl
import torch
import torch.distributed as dist

from autobyte.integrations.lightning import AutoByteCallback
from lightning_spawn import Tiny  # the same small module (this folder is on sys.path when run as a script)


def report() -> None:
    print(f"EXIT rank {os.environ.get('LOCAL_RANK', '0')}: default group alive={dist.is_initialized()}", flush=True)


if __name__ == "__main__":
    atexit.register(report)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 16, generator=g)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, (x[:, 0] > 0).long()), batch_size=8)
    trainer = pl.Trainer(strategy="ddp", accelerator="cpu", devices=2, max_steps=4, callbacks=[AutoByteCallback(tuner=None)],
                         logger=False, enable_checkpointing=False, enable_progress_bar=False)
    trainer.fit(Tiny(), loader)
    print(f"backend {dist.get_backend()}, after fit: {trainer.strategy.broadcast('ok')}", flush=True)
