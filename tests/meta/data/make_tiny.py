"""Writes tiny.weights.npz (+ .json): the small network the meta tests use, trained once with Keras.

Checked in so that tests/meta runs without Keras (an install with only ``[torch]`` or
``[lightning]``). Regenerate after a change of the feature layout:

    python tests/meta/data/make_tiny.py
"""

from __future__ import annotations

from pathlib import Path

from autobyte.meta import NetworkShape
from autobyte.meta._data import generate
from autobyte.meta._train import train

TINY = NetworkShape(layer_embed=8, lstm_units=8, job_units=8, head_units=(16, 16))

if __name__ == "__main__":
    data = generate(10, models=["alexnet", "resnet50"], n_candidates=6, seed=3, n_iters=3)  # = conftest's small_data
    net = train(data, epochs=3, batch_size=16, shape=TINY, seed=0)
    out = Path(__file__).with_name("tiny.weights.npz")
    net.save(out, note="tests/meta fixture, python tests/meta/data/make_tiny.py")
    print(f"wrote {out}")
