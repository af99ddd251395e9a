"""One worker of a 2-worker MXNet job of the engine contract: a small Gluon MLP through the Estimator.

usage: python -m autobyte.testing._gluon_worker OUT_DIR JOB_JSON

``JOB_JSON`` is an :class:`autobyte.testing.engine_contract.Job` as a dict,
plus ``engine`` (``"kvstore"``: a loopback ``dist_sync`` job started by
:func:`autobyte.integrations.mxnet.launch_local_ps`; ``"horovod"``: a
``horovodrun --gloo`` job) and ``contexts`` (CPU contexts per worker; the
batch is split across them). One configuration per job. Writes
``OUT_DIR/rank{r}.npz`` (final parameters, per-batch losses) and
``OUT_DIR/rank{r}.json`` (what the engine did).
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
import warnings
from typing import Any

import numpy as np


def main() -> None:  # noqa: C901 - one script, read top to bottom
    out = sys.argv[1]
    job: dict[str, Any] = json.loads(sys.argv[2])
    engine = job.get("engine", "kvstore")

    import mxnet as mx  # type: ignore[import-untyped]
    from mxnet import gluon
    from mxnet.gluon.contrib.estimator import Estimator  # type: ignore[import-untyped]
    from mxnet.gluon.contrib.estimator.event_handler import BatchBegin, BatchEnd  # type: ignore[import-untyped]

    from autobyte.integrations.mxnet import AutoByteHandler, PeerLostError
    from autobyte.testing import SwitchOnce

    class RecordLoss(BatchEnd):  # type: ignore[misc]
        def __init__(self) -> None:
            self.losses: list[float] = []
            self.priority = 10  # after the gradient update

        def batch_end(self, estimator: Any, *a: Any, **kw: Any) -> None:
            losses = kw["loss"]  # one per context
            self.losses.append(float(sum(l.sum().asscalar() for l in losses)) / sum(l.shape[0] for l in losses))

    class Perturb(BatchBegin):  # type: ignore[misc]
        """Rank 1's random delays (``skew``) and its abrupt exit (``die_at``)."""

        def __init__(self, rank: int) -> None:
            self.rank, self.n, self.priority = rank, 0, -3000
            self.rng = random.Random(8)
            self.t_lost: float | None = None

        def batch_begin(self, estimator: Any, *a: Any, **kw: Any) -> None:
            if job.get("die_at") is not None and self.n == job["die_at"]:
                if self.rank == 1:
                    os._exit(17)  # dies without any goodbye, like a crash
                self.t_lost = time.monotonic()
            if job.get("skew") and self.rank == 1 and self.rng.random() < 0.5:
                time.sleep(self.rng.uniform(0, 0.03))
            self.n += 1

    if engine == "kvstore":
        kv = mx.kv.create("dist_sync")
        rank, size = kv.rank, kv.num_workers
    else:
        import horovod.mxnet as hvd  # type: ignore[import-not-found]

        hvd.init()
        rank, size = hvd.rank(), hvd.size()
    steps = int(job.get("steps", 20))
    mx.random.seed(7)
    np.random.seed(7)
    rs = np.random.RandomState(100 + rank)  # every worker its own shard
    X = rs.randn(16 * steps, 20).astype("float32")
    y = (np.abs(X[:, :10]).argmax(axis=1)).astype("float32")
    data = gluon.data.DataLoader(gluon.data.ArrayDataset(X, y), batch_size=16, shuffle=False)

    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(64, activation="relu"), gluon.nn.Dense(32, activation="relu"), gluon.nn.Dense(10))
    ctx = [mx.cpu(i) for i in range(int(job.get("contexts", 1)))]
    net.initialize(mx.init.Xavier(), ctx=ctx)
    opt = {"learning_rate": 0.05, "momentum": 0.9, "wd": 1e-4}
    unscheduled = bool(job.get("unscheduled"))
    if engine == "kvstore":
        trainer = gluon.Trainer(net.collect_params(), "sgd", opt, kvstore=kv)
    elif unscheduled:  # Horovod's own unscheduled path
        hvd.broadcast_parameters(net.collect_params(), root_rank=0)
        trainer = hvd.DistributedTrainer(net.collect_params(), "sgd", opt)
    else:
        trainer = gluon.Trainer(net.collect_params(), "sgd", opt, kvstore=None)
    est = Estimator(net, loss=gluon.loss.SoftmaxCrossEntropyLoss(), trainer=trainer, context=ctx)
    rec, perturb = RecordLoss(), Perturb(rank)
    handlers: list[Any] = [rec, perturb]
    handler = None
    if not unscheduled:
        (p, c, _every), = job["configs"]
        switch = job.get("switch")
        handler = AutoByteHandler(tuner=SwitchOnce(*switch) if switch else "static", partition_bytes=p, credit_bytes=c,
                                  window_iters=job.get("window_iters", 5), warmup_iters=job.get("warmup_iters", 2),
                                  timeout_s=job.get("timeout_s", 60), engine=engine, verbose=False)
        handlers.append(handler)
    info: dict[str, Any] = {"rank": rank, "num_workers": size}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est.fit(data, batches=steps, event_handlers=handlers)
    except PeerLostError as exc:
        waited = time.monotonic() - (perturb.t_lost or time.monotonic())
        info.update(error=type(exc).__name__, message=str(exc), waited=waited)
        with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
            json.dump(info, f)
        os._exit(3)  # the parameter server waits for the lost worker: leave without a goodbye

    arrays = {name: p.data().asnumpy() for name, p in net.collect_params().items()}
    np.savez(os.path.join(out, f"rank{rank}.npz"), losses=np.array(rec.losses), **arrays)
    run: dict[str, Any] = {}
    if handler is not None:
        eng = handler.engine
        assert eng is not None  # built at the first batch
        sizes = [m[1] for m in eng.last_messages]
        run = {
            "iterations": eng.iteration,
            "config": eng.config.to_dict(),
            "reconfigurations": [r.to_dict() for r in handler.reconfigurations],
            "n_messages": len(eng.last_messages),
            "n_tensors": len(eng.tensors),
            "max_message_bytes": max(sizes),
            "message_bytes": sum(sizes),
            "tensor_bytes": int(sum(t.nbytes for t in eng.tensors)),
            "layouts": {str(p): len(l.messages) for p, l in eng._layouts.items()},
            "arch": eng.arch,
            "n_windows": len(handler.controller.history) if handler.controller is not None else 0,
        }
    info["runs"] = [run]
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(info, f)


if __name__ == "__main__":
    main()
