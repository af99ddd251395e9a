"""One rank of a real Lightning training job (``strategy="ddp"``), for ``autobyte demo`` and ``autobyte bench``.

Run as ``python -m autobyte.bench.lightning_job SPEC_JSON OUT_DIR`` on every
worker, one process per node (``num_nodes=WORLD_SIZE, devices=1``), with the
``torch.distributed`` environment set (``autobyte launch`` sets it; on
loopback :func:`autobyte.testing.run_ranks` with ``NODE_RANK`` = rank).

``SPEC_JSON``: ``method`` is ``"ddp"`` (plain Lightning DDP), ``"static"``
(``AutoByteCallback(tuner="static")`` at ``config``: windows that never move,
so the engine issues in priority order as a tuner's does, as the static
methods of :mod:`autobyte.bench.allreduce_ranks` run) or ``"tuner"``
(``AutoByteCallback`` with ``tuner`` and a start ``config``);
``iters``, ``batch_size``, ``window_iters``, ``threads`` (torch intra-op
threads per worker, default 1; ``null`` leaves Lightning's choice, which is
``cpu_count // local processes``); ``comm_hook`` (with ``"ddp"``: the name of
a hook of ``torch.distributed.algorithms.ddp_comm_hooks.default_hooks``, e.g.
``"fp16_compress_hook"``, passed as ``DDPStrategy(ddp_comm_hook=...)``);
``wire`` (with ``"static"``/``"tuner"``: ``AutoByteCallback(wire=...)``,
default ``"fp32"``). Rank 0 writes ``OUT_DIR/iterations.jsonl`` (with the
thread count and the wire's precision in force), ``OUT_DIR/decisions.jsonl``
like :mod:`autobyte.bench.allreduce_ranks`, ``OUT_DIR/reconfigurations.jsonl``
(the engine's reconfigurations, each configuration with its precision),
``OUT_DIR/wire_choices.jsonl`` (``wire="auto"``: every precision chosen,
those that kept the one in force too) and ``OUT_DIR/job.json`` (the comm hooks
registered on the DDP module), and shows Lightning's progress bar.
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
            self._wire = wire_of_job  # the precision the last finished iteration ran at
            self.reconfigurations: list[dict[str, Any]] = []
            self.wire_choices: list[dict[str, Any]] = []
            self.comm_hooks: list[str] = []

        def on_train_start(self, trainer: Any, pl_module: Any) -> None:
            # after every on_fit_start (CommHookOnCPU's too); Lightning unwraps DDP at teardown
            ddp = trainer.strategy.model
            if isinstance(ddp, torch.nn.parallel.DistributedDataParallel):
                self.comm_hooks = [h.__name__ for h, _ in getattr(ddp, "_comm_hooks", [])]

        def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
            now = time.perf_counter()
            if trainer.global_rank == 0:
                notify_iteration(trainer.global_step)
            if self._start is not None:
                self.rows.append({"iteration": trainer.global_step - 1, "seconds": now - self._start, "config": _config(),
                                  "threads": torch.get_num_threads(), "wire": self._wire})
            self._start = time.perf_counter()

        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            # the engine switches configuration where an iteration begins: read here, it is this iteration's
            if autobyte is not None and autobyte.handle is not None:
                self._wire = autobyte.handle.config.wire

        def on_train_end(self, trainer: Any, pl_module: Any) -> None:
            if autobyte is not None and autobyte.handle is not None:
                autobyte.handle.synchronize()
                # before AutoByteCallback's own on_train_end closes the engine (this callback runs first)
                self.reconfigurations = [r.to_dict() for r in autobyte.handle.reconfigurations]
                controller = autobyte.handle.controller
                self.wire_choices = list(getattr(controller.tuner, "choices", [])) if controller is not None else []
            if self._start is not None:
                self.rows.append({"iteration": trainer.global_step - 1, "seconds": time.perf_counter() - self._start,
                                  "config": _config(), "threads": torch.get_num_threads(), "wire": self._wire})

    class CommHookOnCPU(pl.Callback):
        """Registers ``DDPStrategy(ddp_comm_hook=...)``'s hook where Lightning does not.

        Lightning 2.x registers a DDP comm hook only when the root device is CUDA
        (``DDPStrategy._register_ddp_hooks``); on CPU the argument is ignored without a
        word, and the run would be plain DDP under the hook's name.
        """

        def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
            ddp = trainer.strategy.model
            if isinstance(ddp, torch.nn.parallel.DistributedDataParallel) and not getattr(ddp, "_comm_hooks", None):
                ddp.register_comm_hook(None, comm_hook)

    comm_hook: Any = None
    strategy: Any = "ddp"
    if spec.get("comm_hook"):
        from lightning.pytorch.strategies import DDPStrategy
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        if spec["method"] != "ddp" or not str(spec["comm_hook"]).endswith("_hook") or not hasattr(default_hooks, spec["comm_hook"]):
            raise ValueError(f"comm_hook must name a hook of torch's default_hooks, with method 'ddp', but got {spec!r}.")
        comm_hook = getattr(default_hooks, spec["comm_hook"])
        strategy = DDPStrategy(ddp_comm_hook=comm_hook)  # what a Lightning user writes: one line
    wire_of_job = "fp32" if comm_hook is None else ("bf16" if "bf16" in comm_hook.__name__ else "fp16")

    autobyte: AutoByteCallback | None = None
    if spec["method"] != "ddp":
        cfg = spec.get("config") or [4_000_000, 16_000_000]
        autobyte = AutoByteCallback(
            # a static method under the static tuner: with tuner=None the ready order stays all run (docs/torch.md)
            tuner=spec.get("tuner") if spec["method"] == "tuner" else "static",
            partition_bytes=int(cfg[0]), credit_bytes=int(cfg[1]), window_iters=int(spec.get("window_iters", 10)),
            timeout_s=float(spec.get("timeout_s", 600)), wire=spec.get("wire", "fp32"),
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
    callbacks: list[Any] = [clock] + ([autobyte] if autobyte is not None else []) + ([CommHookOnCPU()] if comm_hook else [])
    trainer = pl.Trainer(
        strategy=strategy, accelerator="cpu", num_nodes=world, devices=1, max_steps=iters, max_epochs=1, callbacks=callbacks,
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
        for name, records in (("reconfigurations", clock.reconfigurations), ("wire_choices", clock.wire_choices)):
            with open(os.path.join(out_dir, f"{name}.jsonl"), "w") as f:
                for r in records:
                    f.write(json.dumps(r) + "\n")
        with open(os.path.join(out_dir, "job.json"), "w") as f:
            json.dump({"comm_hooks": clock.comm_hooks}, f)


if __name__ == "__main__":
    main()
