"""Lightning DDP on 2 CPU processes with AutoByte scheduling the gradient all-reduce.

Run it as is; Lightning starts the second process itself::

    python docs/examples/lightning_ddp.py

The only AutoByte line is ``callbacks=[AutoByteCallback()]``. Decisions are
printed by rank 0; the window metrics (``autobyte/*``) and every
reconfiguration land in the Trainer's logger under ``lightning_logs/``
(TensorBoard if installed, else CSV) and in ``autobyte_decisions.jsonl`` there.
"""

from __future__ import annotations

import lightning.pytorch as pl
import torch

from autobyte.integrations.lightning import AutoByteCallback


class SmallCNN(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(32, 64, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
            torch.nn.Flatten(), torch.nn.Linear(64 * 8 * 8, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10),
        )

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self.net(x), y)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)


def random_images(n: int = 2048) -> torch.utils.data.DataLoader:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 3, 32, 32, generator=g)
    y = (x[:, 0].mean((1, 2)) > 0).long() * 5 + (x[:, 1].mean((1, 2)) > 0).long()
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=16)


def main() -> None:
    pl.seed_everything(0)
    trainer = pl.Trainer(
        strategy="ddp", accelerator="cpu", devices=2, max_steps=60,
        callbacks=[AutoByteCallback()],  # the one added line
    )
    trainer.fit(SmallCNN(), random_images())
    log_dir = trainer.log_dir  # a collective: every rank asks
    if trainer.is_global_zero:
        print(f"done: {trainer.global_step} steps, logs in {log_dir}")


if __name__ == "__main__":
    main()
