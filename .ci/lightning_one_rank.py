"""The Lightning doc example (docs/examples/lightning_ddp.py) in one process, with the callback's defaults.

Run by .ci/run in the environment that has only ``autobyte[lightning]``: the same model,
data and one added line, on ``devices=1``. It must train and print one AutoByte line.
"""

from __future__ import annotations

import importlib.util
import os

import lightning.pytorch as pl

from autobyte.integrations.lightning import AutoByteCallback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
spec = importlib.util.spec_from_file_location("lightning_ddp", os.path.join(ROOT, "docs", "examples", "lightning_ddp.py"))
assert spec is not None and spec.loader is not None
example = importlib.util.module_from_spec(spec)
spec.loader.exec_module(example)

if __name__ == "__main__":
    pl.seed_everything(0)
    cb = AutoByteCallback()
    trainer = pl.Trainer(accelerator="cpu", devices=1, max_steps=60, callbacks=[cb], logger=False,
                         enable_checkpointing=False, enable_progress_bar=False)
    trainer.fit(example.SmallCNN(), example.random_images())
    assert cb.handle.world_size == 1 and not any(d.get("reconfigured") for d in cb.decisions)
    print(f"done: {trainer.global_step} steps in one process, {len(cb.handle.controller.history)} windows of statistics")
