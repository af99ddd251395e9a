"""One worker of a 2-worker job: trains a small Gluon MLP through the Estimator.

``--engine kvstore``: a loopback dist_sync job started by ``launch_local_ps``
(tests/integrations/test_mxnet_ps.py); ``--engine horovod``: a ``horovodrun
--gloo`` job (tests/integrations/test_mxnet_horovod.py). Writes
``rank<r>.npz`` (final parameters, per-batch losses) and ``rank<r>.json``
(reconfigurations and statistics) into ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import warnings

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--mode", choices=["plain", "scheduled"], required=True)
    ap.add_argument("--partition", type=int, default=4096)
    ap.add_argument("--credit", type=int, default=8192)
    ap.add_argument("--switch-partition", type=int, default=0, help="scripted tuner: switch to this partition at the first window")
    ap.add_argument("--switch-credit", type=int, default=0)
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--window", type=int, default=5)
    ap.add_argument("--engine", choices=["kvstore", "horovod"], default="kvstore")
    ap.add_argument("--contexts", type=int, default=1, help="CPU contexts per worker (the batch is split across them)")
    args = ap.parse_args()

    import mxnet as mx
    from mxnet import gluon
    from mxnet.gluon.contrib.estimator import Estimator
    from mxnet.gluon.contrib.estimator.event_handler import BatchEnd

    from autobyte.core.space import Config
    from autobyte.core.tuning import Decision, Observation, Tuner
    from autobyte.integrations.mxnet import AutoByteHandler

    class SwitchOnce(Tuner):
        """Reconfigures once, at the first window: a scripted decision through the real Controller."""

        name = "switch-once"

        def __init__(self, target: Config) -> None:
            self.target, self.done = target, False

        def observe(self, obs: Observation) -> Decision | None:
            if self.done:
                return None
            self.done = True
            return Decision(self.target, "scripted switch")

    class RecordLoss(BatchEnd):
        def __init__(self) -> None:
            self.losses: list[float] = []
            self.priority = 10  # after the gradient update

        def batch_end(self, estimator, *a, **kw):  # type: ignore[no-untyped-def]
            losses = kw["loss"]  # one per context
            self.losses.append(float(sum(l.sum().asscalar() for l in losses)) / sum(l.shape[0] for l in losses))

    if args.engine == "kvstore":
        kv = mx.kv.create("dist_sync")
        rank, size = kv.rank, kv.num_workers
    else:
        import horovod.mxnet as hvd

        hvd.init()
        rank, size = hvd.rank(), hvd.size()
    mx.random.seed(7)
    np.random.seed(7)
    rs = np.random.RandomState(100 + rank)  # every worker its own shard
    n = 16 * args.batches
    X = rs.randn(n, 20).astype("float32")
    y = (np.abs(X[:, :10]).argmax(axis=1)).astype("float32")
    data = gluon.data.DataLoader(gluon.data.ArrayDataset(X, y), batch_size=16, shuffle=False)

    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(64, activation="relu"), gluon.nn.Dense(32, activation="relu"), gluon.nn.Dense(10))
    ctx = [mx.cpu(i) for i in range(args.contexts)]
    net.initialize(mx.init.Xavier(), ctx=ctx)
    opt = {"learning_rate": 0.05, "momentum": 0.9, "wd": 1e-4}
    if args.engine == "kvstore":
        trainer = gluon.Trainer(net.collect_params(), "sgd", opt, kvstore=kv)
    elif args.mode == "plain":  # Horovod's own unscheduled path
        hvd.broadcast_parameters(net.collect_params(), root_rank=0)
        trainer = hvd.DistributedTrainer(net.collect_params(), "sgd", opt)
    else:
        trainer = gluon.Trainer(net.collect_params(), "sgd", opt, kvstore=None)
    est = Estimator(net, loss=gluon.loss.SoftmaxCrossEntropyLoss(), trainer=trainer, context=ctx)
    rec = RecordLoss()
    handlers: list = [rec]
    handler = None
    if args.mode == "scheduled":
        tuner: Tuner | str = "static"
        if args.switch_partition:
            tuner = SwitchOnce(Config(args.switch_partition, args.switch_credit or args.switch_partition))
        handler = AutoByteHandler(tuner, args.partition, args.credit, window_iters=args.window, engine=args.engine)
        handlers.append(handler)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(data, batches=args.batches, event_handlers=handlers)

    params = {name: p.data().asnumpy() for name, p in net.collect_params().items()}
    np.savez(os.path.join(args.out, f"rank{rank}.npz"), losses=np.array(rec.losses), **params)
    info: dict = {"rank": rank, "num_workers": size}
    if handler is not None:
        eng = handler.engine
        info.update(
            iterations=eng.iteration,
            config=eng.config.to_dict(),
            tensor_bytes=[t.nbytes for t in eng.tensors],
            reconfigurations=[r.to_dict() for r in handler.reconfigurations],
            layouts={str(p): len(l.messages) for p, l in eng._layouts.items()},
            arch=eng.arch,
            last_messages=eng.last_messages,
            history=handler.controller.history,
        )
    with open(os.path.join(args.out, f"rank{rank}.json"), "w") as f:
        json.dump(info, f)


if __name__ == "__main__":
    main()
