"""One rank of a real Lightning training job (``strategy="ddp"``), for ``autobyte demo`` and ``autobyte bench``.

Run as ``python -m autobyte.bench.lightning_job SPEC_JSON OUT_DIR`` on every
worker, one process per node (``num_nodes=WORLD_SIZE, devices=1``), with the
``torch.distributed`` environment set (``autobyte launch`` sets it; on
loopback :func:`autobyte.testing.run_ranks` with ``NODE_RANK`` = rank).

``SPEC_JSON``: ``method`` is ``"ddp"`` (plain Lightning DDP), ``"static"`` or
``"tuner"`` (``AutoByteCallback`` with ``tuner`` and a start ``config``);
``iters``, ``batch_size``, ``window_iters``, ``threads`` (torch intra-op
threads per worker, default 1; ``null`` leaves Lightning's choice, which is
``cpu_count // local processes``). Rank 0 writes
``OUT_DIR/iterations.jsonl`` (with the thread count in force) and
``OUT_DIR/decisions.jsonl`` like :mod:`autobyte.bench.allreduce_ranks`, and
shows Lightning's progress bar.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any


def main(argv: list[str] | None = None) -> None:
    args = argv or sys.argv[1:]
    spec: dict[str, Any] = json.loads(args[0])
    out_dir = args[1]

    import lightning.pytorch as pl
    import torch

    from ..integrations.lightning import AutoByteCallback
    from ..testbed import notify_iteration
    from .models import make_cnn, synthetic_batches

    threads = spec.get("threads", 1)
    if threads is not None:
        # Lightning's launcher sets torch's intra-op threads to cpu_count // local processes unless
        # OMP_NUM_THREADS is set: 2 threads per worker on 2 cores (one process per "node") oversubscribes
        # the host and gives DDP a heavy tail (docs/benchmarks.md, "Where DDP's slow iterations came from").
        # ``"threads": null`` leaves the choice to Lightning (benchmarks/ddp_tail.py shows both).
        os.environ["OMP_NUM_THREADS"] = str(int(threads))
        torch.set_num_threads(int(threads))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    iters = int(spec.get("iters", 60))
    bs = int(spec.get("batch_size", 16))

    class Net(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = make_cnn()

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            x, y = batch
            loss = torch.nn.functional.cross_entropy(self.net(x), y)
            self.log("loss", loss, prog_bar=True, batch_size=x.shape[0])
            return loss

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.01, momentum=0.9)

    class Clock(pl.Callback):
        """Iteration timing on rank 0, and the testbed's iteration boundaries."""

        def __init__(self) -> None:
            self.rows: list[dict[str, Any]] = []
            self._start: float | None = None

        def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
            now = time.perf_counter()
            if trainer.global_rank == 0:
                notify_iteration(trainer.global_step)
            if self._start is not None:
                self.rows.append({"iteration": trainer.global_step - 1, "seconds": now - self._start, "config": _config(),
                                  "threads": torch.get_num_threads()})
            self._start = time.perf_counter()

        def on_train_end(self, trainer: Any, pl_module: Any) -> None:
            if autobyte is not None and autobyte.handle is not None:
                autobyte.handle.synchronize()
            if self._start is not None:
                self.rows.append({"iteration": trainer.global_step - 1, "seconds": time.perf_counter() - self._start,
                                  "config": _config(), "threads": torch.get_num_threads()})

    autobyte: AutoByteCallback | None = None
    if spec["method"] != "ddp":
        cfg = spec.get("config") or [4_000_000, 16_000_000]
        autobyte = AutoByteCallback(
            tuner=spec.get("tuner") if spec["method"] == "tuner" else None,
            partition_bytes=int(cfg[0]), credit_bytes=int(cfg[1]), window_iters=int(spec.get("window_iters", 10)),
            timeout_s=float(spec.get("timeout_s", 600)),
        )

    def _config() -> Any:
        if autobyte is None or autobyte.handle is None:
            return None
        c = autobyte.handle.config
        return [c.partition_bytes, c.credit_bytes]

    data = synthetic_batches(8, bs, rank)
    x = torch.cat([b[0] for b in data])
    y = torch.cat([b[1] for b in data])
    # Each rank keeps its own data (different per rank) and cycles through it.
    ds = torch.utils.data.TensorDataset(x.repeat(iters // 8 + 2, 1, 1, 1), y.repeat(iters // 8 + 2))
    loader = torch.utils.data.DataLoader(ds, batch_size=bs, shuffle=False)
    clock = Clock()
    callbacks: list[Any] = [clock] + ([autobyte] if autobyte is not None else [])
    trainer = pl.Trainer(
        strategy="ddp", accelerator="cpu", num_nodes=world, devices=1, max_steps=iters, max_epochs=1, callbacks=callbacks,
        logger=pl.loggers.CSVLogger(os.path.join(out_dir, "logs"), name="job"), enable_checkpointing=False,
        enable_model_summary=False, use_distributed_sampler=False, enable_progress_bar=rank == 0,
    )
    trainer.fit(Net(), loader)
    if rank == 0:
        os.makedirs(out_dir, exist_ok=True)
        with open(os.path.join(out_dir, "iterations.jsonl"), "w") as f:
            for r in clock.rows:
                r["samples_per_s"] = bs * world / r["seconds"]
                f.write(json.dumps(r) + "\n")
        with open(os.path.join(out_dir, "decisions.jsonl"), "w") as f:
            for d in (autobyte.decisions if autobyte is not None else []):
                f.write(json.dumps({"iteration": d["iteration"], "config": [d["partition_bytes"], d["credit_bytes"]],
                                    "reason": d.get("reason"), "predicted_speed": d.get("predicted_speed"),
                                    "observed_speed": d.get("observed_speed")}) + "\n")


if __name__ == "__main__":
    main()
