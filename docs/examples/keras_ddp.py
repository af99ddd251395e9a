"""Keras 3 ``model.fit`` on 2 CPU processes (torch backend), gradients averaged by AutoByte's scheduler.

Run it as is (it starts itself twice with torchrun)::

    python docs/examples/keras_ddp.py

or start the processes yourself::

    KERAS_BACKEND=torch torchrun --standalone --nproc_per_node=2 docs/examples/keras_ddp.py

Each process trains on its own shard of the data; after every ``backward()``
the callback averages the gradients across processes before Keras's optimizer
applies them, so both processes hold the same model. Rank 0 prints the
decisions and the final check.
"""

from __future__ import annotations

import os
import subprocess
import sys

os.environ.setdefault("KERAS_BACKEND", "torch")

if "RANK" not in os.environ:  # not started by torchrun: start 2 processes with it
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", __file__, *sys.argv[1:]]
    sys.exit(subprocess.call(cmd, env=dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))))

import keras  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from autobyte.integrations.keras import AutoByteCallback  # noqa: E402


def main() -> None:
    cb = AutoByteCallback()  # joins torchrun's process group
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2048, 16, 16, 3)).astype("float32")
    y = (x[..., 0].mean((1, 2)) > 0).astype("int64") * 5 + (x[..., 1].mean((1, 2)) > 0).astype("int64")
    x, y = x[cb.rank::cb.world_size], y[cb.rank::cb.world_size]  # each process its own shard

    keras.utils.set_random_seed(cb.rank)  # different initial weights: rank 0's are broadcast at fit()
    model = keras.Sequential([
        keras.Input((16, 16, 3)),
        keras.layers.Conv2D(32, 3, activation="relu"), keras.layers.MaxPooling2D(),
        keras.layers.Conv2D(64, 3, activation="relu"), keras.layers.MaxPooling2D(),
        keras.layers.Flatten(), keras.layers.Dense(128, activation="relu"), keras.layers.Dense(10),
    ])
    model.compile(optimizer=keras.optimizers.SGD(0.05, momentum=0.9),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    model.fit(x, y, batch_size=32, epochs=1, verbose=2 if cb.rank == 0 else 0, callbacks=[cb])

    # Both processes hold the same weights: compare a checksum.
    mine = torch.tensor([sum(float(np.abs(w).sum()) for w in model.get_weights())], dtype=torch.float64)
    gathered = [torch.zeros_like(mine) for _ in range(cb.world_size)]
    if cb.world_size > 1:  # the callback joined torchrun's group at fit
        dist.all_gather(gathered, mine)
    else:  # one process (torchrun --nproc_per_node=1): nothing to compare
        gathered = [mine]
    if cb.rank == 0:
        same = all(bool(g == gathered[0]) for g in gathered)
        print(f"done: {cb.world_size} processes, weights identical on every rank: {same}")


if __name__ == "__main__":
    main()
