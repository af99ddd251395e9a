"""AutoByte on an MXNet parameter server, all on this machine (CPU is enough).

    python docs/examples/gluon_ps.py

Run without DMLC_* variables, the script starts a loopback ``dist_sync`` job
(1 scheduler, 1 server, 2 workers, each a process) and runs itself as the
workers. Each worker trains a small Gluon MLP on its own shard through the
Estimator, with ``AutoByteHandler`` scheduling the gradients; at the end the
launcher checks that both workers hold the same parameters.
"""

from __future__ import annotations

import os
import sys
import tempfile

import numpy as np


def worker(out_dir: str) -> None:
    import mxnet as mx
    from mxnet import gluon
    from mxnet.gluon.contrib.estimator import Estimator

    from autobyte.core.space import KiB, SearchSpace
    from autobyte.integrations.mxnet import AutoByteHandler

    kv = mx.kv.create("dist_sync")  # joins the job described by the DMLC_* variables
    rng = np.random.RandomState(kv.rank)  # each worker its own data
    X = rng.randn(2048, 32).astype("float32")
    y = (X[:, :8].sum(axis=1) > 0).astype("float32")
    data = gluon.data.DataLoader(gluon.data.ArrayDataset(X, y), batch_size=32, shuffle=True)

    mx.random.seed(0)
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(128, activation="relu"), gluon.nn.Dense(64, activation="relu"), gluon.nn.Dense(2))
    net.initialize(mx.init.Xavier())
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.02, "momentum": 0.9}, kvstore=kv)
    est = Estimator(net, loss=gluon.loss.SoftmaxCrossEntropyLoss(), train_metrics=mx.metric.Accuracy(), trainer=trainer)

    # Small candidates for a small model: 4-32 KiB partitions, credit 1X-4X. The grid
    # tuner measures each for one window (5 batches after 2 of warm-up), then keeps the
    # fastest; tuner="autobyte" would predict the best one with the meta-network instead.
    space = SearchSpace.grid([4 * KiB, 8 * KiB, 16 * KiB, 32 * KiB], [1, 2, 4])
    handler = AutoByteHandler(tuner="grid", partition_bytes=16 * KiB, credit_bytes=32 * KiB, window_iters=5,
                              space=space, tuner_kwargs={"space": space})
    est.fit(data, epochs=2, event_handlers=[handler])

    params = {name: p.data().asnumpy() for name, p in net.collect_params().items()}
    np.savez(os.path.join(out_dir, f"rank{kv.rank}.npz"), **params)
    if kv.rank == 0:
        stats = handler.engine.last_messages
        print(f"rank 0: last batch sent {len(stats)} messages, {sum(m[1] for m in stats)} bytes, config {handler.engine.config}, "
              f"{len(handler.reconfigurations)} reconfigurations")


def main() -> int:
    if "DMLC_ROLE" in os.environ:
        worker(os.environ["AUTOBYTE_EXAMPLE_OUT"])
        return 0
    from autobyte.integrations.mxnet import launch_local_ps

    with tempfile.TemporaryDirectory() as out:
        results = launch_local_ps([sys.executable, os.path.abspath(__file__)], n_workers=2, n_servers=1,
                                  timeout_s=300, env={"AUTOBYTE_EXAMPLE_OUT": out})
        for r in results:
            print(f"--- worker process {r.rank_hint} (exit {r.returncode}) ---\n{r.output}")
        if any(r.returncode != 0 for r in results):
            return 1
        a, b = (np.load(os.path.join(out, f"rank{k}.npz")) for k in (0, 1))
        diff = max(float(np.abs(a[k] - b[k]).max()) for k in a.files)
        print(f"workers agree: max |rank0 - rank1| over all parameters = {diff:g}")
        return 0 if diff == 0.0 else 1


if __name__ == "__main__":
    sys.exit(main())
