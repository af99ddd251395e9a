"""One rank of the Lightning stopped-peer test (run by tests/integrations/test_reliability.py).

usage: lightning_stopped.py OUT_DIR STRATEGY_TIMEOUT_S TIMEOUT_S
Rank 1 stops itself (SIGSTOP) at the end of batch 5, so the survivor's next
collective is Lightning's own per-batch broadcast on the default group
(bounded by ``DDPStrategy(timeout=...)``), then autobyte's. The survivor
writes OUT_DIR/rank0.json with the error and the seconds since the stop,
then kills the stopped rank.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from datetime import timedelta
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.strategies import DDPStrategy

from autobyte.integrations.lightning import AutoByteCallback
from autobyte.integrations.torch import PeerLostError

OUT = sys.argv[1]


class Net(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.BatchNorm1d(32), torch.nn.Linear(32, 4))

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        if batch_idx == 5 and self.global_rank == 1:
            with open(os.path.join(OUT, "pid1"), "w") as f:
                f.write(str(os.getpid()))
            with open(os.path.join(OUT, "stopped_at"), "w") as f:
                f.write(repr(time.time()))
            os.kill(os.getpid(), signal.SIGSTOP)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(self.net(batch[0]), batch[1])

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main() -> None:
    strategy_timeout, timeout = float(sys.argv[2]), float(sys.argv[3])
    x = torch.randn(800, 16, generator=torch.Generator().manual_seed(0))
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, (x[:, 0] > 0).long()), batch_size=8)
    trainer = pl.Trainer(
        strategy=DDPStrategy(timeout=timedelta(seconds=strategy_timeout)), accelerator="cpu", devices=2, max_epochs=1,
        logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        callbacks=[AutoByteCallback(tuner=None, timeout_s=timeout, partition_bytes=1024, credit_bytes=2048)],
    )
    result: dict[str, Any] = {}
    try:
        trainer.fit(Net(), loader)
    except PeerLostError as exc:
        result = {"error": "PeerLostError", "message": str(exc)}
    except Exception as exc:  # noqa: BLE001 - reported to the test
        result = {"error": type(exc).__name__, "message": str(exc)}
    if result:
        result["waited"] = time.time() - float(open(os.path.join(OUT, "stopped_at")).read())
        pid = int(open(os.path.join(OUT, "pid1")).read())
        os.kill(pid, signal.SIGKILL)  # leave nothing behind
        os.kill(pid, signal.SIGCONT)
    with open(os.path.join(OUT, "rank0.json"), "w") as f:
        json.dump(result, f)
    os._exit(3 if result else 0)


if __name__ == "__main__":
    main()
