"""One rank of the Keras integration test (run by tests/integrations/test_keras.py).

usage: keras_train.py OUT_DIR [--wire bf16]
Rank r trains with ``model.fit`` on its half of every global batch, with
AutoByteCallback and a grid tuner that reconfigures every few steps; ranks
start from different initial weights (the callback broadcasts rank 0's).
Rank 0 then trains a fresh model in one process on the union of both ranks'
batches. Writes OUT_DIR/rank{r}.npz (and reference.npz from rank 0).
With ``--wire bf16`` only the 2-rank fit runs, with ``AutoByteCallback(wire="bf16")``
and no tuner, and the references from rank 0.
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("KERAS_BACKEND", "torch")

import keras  # noqa: E402
import numpy as np  # noqa: E402

from autobyte.core import KiB, MiB, Config, SearchSpace  # noqa: E402
from autobyte.integrations.keras import AutoByteCallback  # noqa: E402

STEPS, BATCH, EPOCHS = 12, 8, 2


def build(seed: int) -> keras.Model:
    keras.utils.set_random_seed(seed)
    model = keras.Sequential([
        keras.Input((8, 8, 3)),
        keras.layers.Conv2D(8, 3, activation="relu"),
        keras.layers.Flatten(),
        keras.layers.Dense(16, activation="relu"),
        keras.layers.Dense(4),
    ])
    model.compile(optimizer=keras.optimizers.SGD(0.05, momentum=0.9), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    x = rng.normal(size=(STEPS, 2, BATCH, 8, 8, 3)).astype("float32")
    y = (x[..., 0].mean((-1, -2)) > 0).astype("int64") + 2 * (x[..., 1].mean((-1, -2)) > 0).astype("int64")
    return x, y


def references(out: str, x: np.ndarray, y: np.ndarray) -> None:
    """Rank 0: one process on the union of both ranks' batches, and on rank 0's batches alone."""
    ref = build(seed=1)
    ref.fit(x.reshape(-1, 8, 8, 3), y.reshape(-1), batch_size=2 * BATCH, epochs=EPOCHS, shuffle=False, verbose=0)
    np.savez(os.path.join(out, "reference.npz"), *ref.get_weights())
    alone = build(seed=1)  # rank 0's batches only: what training without averaging would give
    alone.fit(x[:, 0].reshape(-1, 8, 8, 3), y[:, 0].reshape(-1), batch_size=BATCH, epochs=EPOCHS, shuffle=False, verbose=0)
    np.savez(os.path.join(out, "alone.npz"), *alone.get_weights())


def main() -> None:
    out = sys.argv[1]
    wire = sys.argv[sys.argv.index("--wire") + 1] if "--wire" in sys.argv else None
    space = SearchSpace([Config(4 * KiB, 8 * KiB), Config(16 * KiB, 16 * KiB), Config(1 * MiB, 1 * MiB)])
    from autobyte.core.tuners import GridTuner

    if wire is not None:
        cb = AutoByteCallback(tuner=None, partition_bytes=4 * KiB, credit_bytes=8 * KiB, wire=wire, verbose=True)
    else:
        cb = AutoByteCallback(tuner=GridTuner(space), window_iters=3, warmup_iters=1, space=space, verbose=True)
    rank, world = cb.rank, cb.world_size
    x, y = data()
    model = build(seed=1 + rank)  # different initial weights on each rank
    hist = model.fit(x[:, rank].reshape(-1, 8, 8, 3), y[:, rank].reshape(-1), batch_size=BATCH, epochs=EPOCHS,
                     shuffle=False, verbose=0, callbacks=[cb])
    h = cb.handle
    if wire is not None:
        np.savez(os.path.join(out, f"rank{rank}.npz"), *model.get_weights(), bytes_per_iteration=h.bytes_per_iteration,
                 wire=str(h.config.wire))
        if rank == 0:
            references(out, x, y)
        print(f"rank {rank} of {world} done", flush=True)
        return
    np.savez(
        os.path.join(out, f"rank{rank}.npz"), *model.get_weights(),
        world=world, n_decisions=len(cb.decisions), bytes_per_iteration=h.bytes_per_iteration,
        param_bytes=sum(int(np.prod(w.shape)) * 4 for w in model.trainable_weights),
        partition_logged=np.array(hist.history["autobyte_partition_bytes"]),
    )
    # Batch norm: its moving statistics are non-trainable weights; they must end equal on every rank too.
    keras.utils.set_random_seed(10 + rank)
    bn = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Conv2D(4, 3), keras.layers.BatchNormalization(),
                           keras.layers.Flatten(), keras.layers.Dense(4)])
    bn.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    bn.fit(x[:4, rank].reshape(-1, 8, 8, 3), y[:4, rank].reshape(-1), batch_size=BATCH, verbose=0,
           callbacks=[AutoByteCallback(tuner=None, verbose=False)])
    np.savez(os.path.join(out, f"bn{rank}.npz"), *bn.get_weights(),
             moving=np.concatenate([np.ravel(w) for w in bn.non_trainable_weights]))
    if rank == 0:
        references(out, x, y)
        with open(os.path.join(out, "decisions.json"), "w") as f:
            json.dump(cb.decisions, f)
    print(f"rank {rank} of {world} done", flush=True)


if __name__ == "__main__":
    main()
