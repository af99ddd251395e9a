"""The meta-network as a Keras 3 model: what trains it offline (``autobyte train-meta``).

Run time never imports this module: :class:`autobyte.meta.MetaNetwork` runs the
trained weights in numpy. This module builds the same network in Keras,
copies weights both ways (:meth:`KerasMetaModel.from_network`,
:meth:`KerasMetaModel.to_network`) and converts a ``.weights.h5`` of autobyte
0.1 into the ``.npz`` format::

    python -m autobyte.meta._keras convert OLD.weights.h5 NEW.weights.npz

Keras 3 picks its backend from ``KERAS_BACKEND`` (default TensorFlow). When the
user set nothing and TensorFlow is absent, PyTorch (or JAX) is used. A user's
choice always wins.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

from ._features import F_CAND, F_JOB, F_LAYER, FEATURE_VERSION, N_BINS
from ._network import MetaNetwork, NetworkShape

#: The install line that brings Keras and a backend.
KERAS_HINT = "pip install 'autobyte[keras]'"  # Keras 3 and torch, its backend here


def import_keras() -> Any:
    if "KERAS_BACKEND" not in os.environ and importlib.util.find_spec("tensorflow") is None:
        if importlib.util.find_spec("torch") is not None:
            os.environ["KERAS_BACKEND"] = "torch"
        elif importlib.util.find_spec("jax") is not None:
            os.environ["KERAS_BACKEND"] = "jax"
    try:
        import keras  # type: ignore[import-untyped]
    except ImportError as exc:
        raise ImportError(
            "training the meta-network needs Keras 3 and one backend (torch, jax or tensorflow); "
            f"install them with `{KERAS_HINT}`. Using the shipped network needs neither."
        ) from exc
    return keras


_NORMS = ("layers_norm", "job_norm", "cand_norm")
_DENSE = ("layer_embed", "job_dense", "head_1", "head_2", "log_ratio")
_LSTMS = ("lstm_1", "lstm_2")


class KerasMetaModel:
    """The meta-network in Keras: ``encoder``, ``head`` and the training graph ``model``.

    Args:
        shape: layer sizes (:class:`~autobyte.meta.NetworkShape`).

    Raises:
        ImportError: Keras or a backend is missing (names the pip line).
    """

    def __init__(self, shape: NetworkShape | None = None) -> None:
        self.keras = import_keras()
        self.shape = shape or NetworkShape()
        self.encoder, self.head, self.model = _build(self.keras, self.shape)

    def _layer(self, name: str) -> Any:
        return (self.head if name in ("cand_norm", "head_1", "head_2", "log_ratio") else self.encoder).get_layer(name)

    def adapt_normalization(self, layers: np.ndarray, job: np.ndarray, cand: np.ndarray) -> None:
        self._layer("layers_norm").adapt(layers.astype("float32"))
        self._layer("job_norm").adapt(job.astype("float32"))
        self._layer("cand_norm").adapt(cand.astype("float32"))

    def to_network(self, info: dict[str, Any] | None = None) -> MetaNetwork:
        """The trained weights as a numpy :class:`~autobyte.meta.MetaNetwork`."""
        k = self.keras
        w: dict[str, np.ndarray] = {}
        for n in _NORMS:
            layer = self._layer(n)
            w[n + "/mean"] = np.asarray(k.ops.convert_to_numpy(layer.mean)).reshape(-1)
            w[n + "/variance"] = np.asarray(k.ops.convert_to_numpy(layer.variance)).reshape(-1)
        for n in _DENSE:
            w[n + "/kernel"], w[n + "/bias"] = self._layer(n).get_weights()
        for n in _LSTMS:
            w[n + "/kernel"], w[n + "/recurrent_kernel"], w[n + "/bias"] = self._layer(n).get_weights()
        net = MetaNetwork(self.shape, w)
        net.info = dict(info or {})
        return net

    @classmethod
    def from_network(cls, net: MetaNetwork) -> "KerasMetaModel":
        """A Keras model holding ``net``'s weights (its adapted head included)."""
        m = cls(net.shape)
        w = net.weights()
        for n in _NORMS:
            layer = m._layer(n)
            count = layer.get_weights()[2]
            layer.set_weights([w[n + "/mean"], w[n + "/variance"], count])
            layer.finalize_state()
        for n in _DENSE:
            m._layer(n).set_weights([w[n + "/kernel"], w[n + "/bias"]])
        for n in _LSTMS:
            m._layer(n).set_weights([w[n + "/kernel"], w[n + "/recurrent_kernel"], w[n + "/bias"]])
        return m

    def predict_log_ratio(self, layers: np.ndarray, job: np.ndarray, cand: np.ndarray) -> np.ndarray:
        """``(M,)`` log-ratios of the Keras graph for one window ``(K, F_LAYER)``, ``(F_JOB,)`` and ``(M, F_CAND)``."""
        x = [layers[None].astype("float32"), job[None].astype("float32"), cand[None].astype("float32")]
        return np.asarray(self.keras.ops.convert_to_numpy(self.model(x, training=False)))[0, :, 0]


def _build(keras: Any, shape: NetworkShape) -> tuple[Any, Any, Any]:
    L = keras.layers
    layers_in = keras.Input((N_BINS, F_LAYER), name="layers")
    job_in = keras.Input((F_JOB,), name="job")
    x = L.Normalization(axis=-1, name="layers_norm")(layers_in)
    x = L.Dense(shape.layer_embed, activation="relu", name="layer_embed")(x)
    x = L.LSTM(shape.lstm_units, return_sequences=True, name="lstm_1")(x)
    x = L.LSTM(shape.lstm_units, name="lstm_2")(x)
    j = L.Normalization(axis=-1, name="job_norm")(job_in)
    j = L.Dense(shape.job_units, activation="relu", name="job_dense")(j)
    emb = L.Concatenate(name="job_embedding")([x, j])
    encoder = keras.Model([layers_in, job_in], emb, name="encoder")

    # the head's layers are shared by a 2-D model (one row per candidate) and
    # the 3-D training graph (all candidates of a window at once)
    cand_norm = L.Normalization(axis=-1, name="cand_norm")
    dense = [L.Dense(shape.head_units[0], activation="relu", name="head_1"),
             L.Dense(shape.head_units[1], activation="relu", name="head_2"),
             L.Dense(1, name="log_ratio")]

    def head_fn(e: Any, c: Any) -> Any:
        h = L.Concatenate(axis=-1)([e, cand_norm(c)])
        for d in dense:
            h = d(h)
        return h

    e_dim = shape.embedding
    emb_in = keras.Input((e_dim,), name="embedding")
    cand_in = keras.Input((F_CAND,), name="candidate")
    head = keras.Model([emb_in, cand_in], head_fn(emb_in, cand_in), name="head")

    l2, j2 = keras.Input((N_BINS, F_LAYER), name="layers"), keras.Input((F_JOB,), name="job")
    c3 = keras.Input((None, F_CAND), name="candidates")
    e3 = encoder([l2, j2])
    # broadcast the window's embedding over its candidates
    e3 = L.Lambda(lambda t: keras.ops.broadcast_to(keras.ops.expand_dims(t[0], 1), (keras.ops.shape(t[1])[0], keras.ops.shape(t[1])[1], e_dim)), name="per_candidate")([e3, c3])
    full = keras.Model([l2, j2, c3], head_fn(e3, c3), name="meta_network")
    return encoder, head, full


def convert_h5(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> MetaNetwork:
    """Convert autobyte 0.1 weights (``NAME.weights.h5`` + ``.json`` sidecar) to the ``.npz`` format.

    Raises:
        ValueError: the sidecar is not autobyte 0.1's, or of another feature version.
    """
    side = json.loads(Path(str(src) + ".json").read_text())
    if side.get("format") != "autobyte-meta-network" or side.get("feature_version") != FEATURE_VERSION:
        raise ValueError(f"src must be autobyte 0.1 weights of feature_version={FEATURE_VERSION}, but its sidecar says "
                         f"format={side.get('format')!r}, feature_version={side.get('feature_version')!r}.")
    s = side["shape"]
    shape = NetworkShape(int(s["layer_embed"]), int(s["lstm_units"]), int(s["job_units"]), (int(s["head_units"][0]), int(s["head_units"][1])))
    m = KerasMetaModel(shape)
    m.model.load_weights(str(src))
    net = m.to_network(side.get("info", {}))
    net.save(dst)
    return net


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 3 or args[0] != "convert":
        print("usage: python -m autobyte.meta._keras convert OLD.weights.h5 NEW.weights.npz", file=sys.stderr)
        return 2
    convert_h5(args[1], args[2])
    print(f"wrote {args[2]} and {args[2]}.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
