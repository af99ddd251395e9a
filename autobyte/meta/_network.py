"""The meta-network (paper Fig. 4(a)), in Keras 3, split in an encoder and a head.

encoder: per-layer bins -> Dense embedding -> two-layer LSTM; job vector
(static + bandwidth + configuration in force) -> Dense; concatenated into a
job embedding. head: job embedding + candidate features -> two dense layers ->
``log(speed(candidate) / observed speed)``.

Scoring a whole grid runs the encoder once and the head on a batch of
candidates. Online adaptation fine-tunes the head only (encoder frozen).
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ._features import F_CAND, F_JOB, F_LAYER, FEATURE_VERSION, N_BINS, JobInputs, candidate_features
from ._keras import import_keras

keras = import_keras()

#: Marker written in the sidecar JSON of every weights file autobyte saves.
FORMAT = "autobyte-meta-network"


@dataclass(frozen=True)
class NetworkShape:
    """Sizes of the meta-network (stored beside the weights)."""

    layer_embed: int = 32
    lstm_units: int = 32
    job_units: int = 32
    head_units: tuple[int, int] = (128, 64)


def _build(shape: NetworkShape) -> tuple[Any, Any, Any]:
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

    e_dim = shape.lstm_units + shape.job_units
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


def _np(x: Any) -> np.ndarray:
    return np.asarray(keras.ops.convert_to_numpy(x))


class MetaNetwork:
    """Predicts training speed of candidate configurations from one window's statistics.

    Args:
        shape: layer sizes (:class:`NetworkShape`).

    Raises:
        ValueError: :meth:`load` of a file that is not autobyte meta-network weights.

    Example:
        >>> net = MetaNetwork.load_default()                 # doctest: +SKIP
        >>> speeds = net.predict_speeds(job, space.to_array())  # doctest: +SKIP
    """

    def __init__(self, shape: NetworkShape | None = None) -> None:
        self.shape = shape or NetworkShape()
        self.encoder, self.head, self.model = _build(self.shape)
        self.info: dict[str, Any] = {}
        self.lock = threading.Lock()  # serialises Keras training of the head
        self.sync()

    # ----------------------------------------------------------------- inference
    # Inference runs on a numpy copy of the weights: a Keras call costs
    # milliseconds of dispatch per layer on CPU, the whole grid in numpy well
    # under one. The copy is refreshed (one reference swap) after training.
    def sync(self) -> None:
        """Refresh the numpy inference copy from the Keras weights."""
        self._np_enc = _NumpyEncoder(self.encoder)
        self._np_head = _NumpyHead(self.head)

    def encode(self, job: JobInputs) -> np.ndarray:
        """``(1, E)`` job embedding (the encoder runs once per window)."""
        return self._np_enc(job.layers[None], job.job[None])

    def encode_batch(self, layers: np.ndarray, job: np.ndarray) -> np.ndarray:
        """``(B, E)`` embeddings of ``B`` windows."""
        return self._np_enc(layers, job)

    def head_batch(self, emb: np.ndarray, cand: np.ndarray) -> np.ndarray:
        """``(B,)`` log-ratios, one embedding per row."""
        return self._np_head(emb, cand)

    def encode_keras(self, layers: np.ndarray, job: np.ndarray) -> np.ndarray:
        return _np(self.encoder([layers.astype("float32"), job.astype("float32")], training=False))

    def head_predict(self, emb: np.ndarray, cand: np.ndarray) -> np.ndarray:
        """``(M,)`` log-ratios for one embedding ``(1, E)`` and candidate features ``(M, F_CAND)``."""
        return self._np_head(emb, cand)

    def predict_log_ratio(self, job: JobInputs, candidates: np.ndarray) -> np.ndarray:
        """``(M,)`` predicted ``log(speed(c) / observed speed)`` for candidates ``(M, 2)``."""
        cand = candidate_features(job.layer_bytes, candidates, job.current)
        return self.head_predict(self.encode(job), cand)

    def predict_speeds(self, job: JobInputs, candidates: np.ndarray) -> np.ndarray:
        """``(M,)`` predicted samples/s of every candidate."""
        return job.observed_speed * np.exp(self.predict_log_ratio(job, candidates))

    # ----------------------------------------------------------------- training
    def adapt_normalization(self, layers: np.ndarray, job: np.ndarray, cand: np.ndarray) -> None:
        self.encoder.get_layer("layers_norm").adapt(layers.astype("float32"))
        self.encoder.get_layer("job_norm").adapt(job.astype("float32"))
        self.head.get_layer("cand_norm").adapt(cand.astype("float32"))

    # ----------------------------------------------------------------- files
    def save(self, path: str | os.PathLike[str], **info: Any) -> None:
        """Write ``path`` (``.weights.h5``, Keras' format) and ``path + ".json"`` (shape, feature version, info)."""
        path = Path(path)
        if not path.name.endswith(".weights.h5"):
            raise ValueError(f"path must end with '.weights.h5', but got path={str(path)!r}.")
        self.model.save_weights(str(path))
        meta = {"format": FORMAT, "feature_version": FEATURE_VERSION, "shape": asdict(self.shape), "info": {**self.info, **info}}
        Path(str(path) + ".json").write_text(json.dumps(meta, indent=1, default=float))

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> "MetaNetwork":
        """Load weights written by :meth:`save`.

        Raises:
            FileNotFoundError: ``path`` or its ``.json`` sidecar is missing.
            ValueError: the file is corrupted, foreign, or of another feature version.
        """
        path = Path(path)
        side = Path(str(path) + ".json")
        if not path.is_file():
            raise FileNotFoundError(f"path must be an existing meta-network weights file, but got path={str(path)!r} (not found).")
        if not side.is_file():
            raise FileNotFoundError(f"meta-network weights {str(path)!r} need their sidecar {str(side)!r}, which is missing.")
        try:
            meta = json.loads(side.read_text())
        except (ValueError, UnicodeDecodeError) as exc:
            raise ValueError(f"sidecar {str(side)!r} is not valid JSON ({exc}); the weights file is corrupted.") from None
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            raise ValueError(f"{str(side)!r} is not an autobyte meta-network file (format={meta.get('format') if isinstance(meta, dict) else None!r}).")
        if meta.get("feature_version") != FEATURE_VERSION:
            raise ValueError(
                f"weights {str(path)!r} were trained for feature_version={meta.get('feature_version')!r}, "
                f"but this autobyte uses feature_version={FEATURE_VERSION}; retrain with `autobyte train-meta`."
            )
        try:
            s = meta["shape"]
            shape = NetworkShape(int(s["layer_embed"]), int(s["lstm_units"]), int(s["job_units"]), tuple(int(u) for u in s["head_units"]))  # type: ignore[arg-type]
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"sidecar {str(side)!r} has no valid 'shape' ({exc!r}).") from None
        net = cls(shape)
        before = [w.copy() for w in net.model.get_weights()]
        try:
            import warnings

            with warnings.catch_warnings():
                warnings.simplefilter("error")  # Keras only warns on some mismatches
                net.model.load_weights(str(path))
        except Exception as exc:  # h5py OSError, Keras ValueError/UserWarning: all mean "not our weights"
            raise ValueError(f"weights file {str(path)!r} is corrupted or not an autobyte meta-network ({type(exc).__name__}: {exc}).") from None
        after = net.model.get_weights()
        if not all(np.all(np.isfinite(w)) for w in after):
            raise ValueError(f"weights file {str(path)!r} holds NaN or inf values.")
        if all(np.array_equal(a, b) for a, b in zip(before, after)):
            raise ValueError(f"weights file {str(path)!r} loaded nothing into the meta-network.")
        net.info = dict(meta.get("info", {}))
        net.sync()
        return net

    @classmethod
    def load_default(cls) -> "MetaNetwork":
        """The pretrained weights shipped in ``autobyte/meta/weights/``."""
        return cls.load(default_weights_path())


def _norm(layer: Any) -> tuple[np.ndarray, np.ndarray]:
    mean = np.asarray(_np(layer.mean), dtype=np.float64).reshape(-1)
    var = np.asarray(_np(layer.variance), dtype=np.float64).reshape(-1)
    return mean, np.maximum(np.sqrt(var), keras.backend.epsilon())


def _dense(layer: Any) -> tuple[np.ndarray, np.ndarray]:
    k, b = layer.get_weights()
    return k.astype(np.float64), b.astype(np.float64)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))


class _NumpyEncoder:
    """The encoder's forward pass in numpy (Keras LSTM gate order i, f, c, o)."""

    def __init__(self, enc: Any) -> None:
        self.ln = _norm(enc.get_layer("layers_norm"))
        self.jn = _norm(enc.get_layer("job_norm"))
        self.emb = _dense(enc.get_layer("layer_embed"))
        self.jd = _dense(enc.get_layer("job_dense"))
        self.lstm = [tuple(w.astype(np.float64) for w in enc.get_layer(n).get_weights()) for n in ("lstm_1", "lstm_2")]

    def __call__(self, layers: np.ndarray, job: np.ndarray) -> np.ndarray:
        x = (layers - self.ln[0]) / self.ln[1]
        x = np.maximum(x @ self.emb[0] + self.emb[1], 0.0)  # (B, K, D)
        for kern, rec, bias in self.lstm:
            u = rec.shape[0]
            zx = x @ kern + bias  # input part of all steps at once
            h = np.zeros((x.shape[0], u))
            c = np.zeros_like(h)
            hs = []
            for t in range(x.shape[1]):
                z = zx[:, t] + h @ rec
                i, f, g, o = _sigmoid(z[:, :u]), _sigmoid(z[:, u:2 * u]), np.tanh(z[:, 2 * u:3 * u]), _sigmoid(z[:, 3 * u:])
                c = f * c + i * g
                h = o * np.tanh(c)
                hs.append(h)
            x = np.stack(hs, axis=1)
        j = np.maximum(((job - self.jn[0]) / self.jn[1]) @ self.jd[0] + self.jd[1], 0.0)
        return np.concatenate([x[:, -1], j], axis=1)


class _NumpyHead:
    def __init__(self, head: Any) -> None:
        self.cn = _norm(head.get_layer("cand_norm"))
        self.d = [_dense(head.get_layer(n)) for n in ("head_1", "head_2", "log_ratio")]

    def __call__(self, emb: np.ndarray, cand: np.ndarray) -> np.ndarray:
        e = emb.shape[1]
        (k1, b1), (k2, b2), (k3, b3) = self.d
        # the embedding's share of the first layer is the same for every candidate: compute it once
        h = (emb @ k1[:e]) + ((cand - self.cn[0]) / self.cn[1]) @ k1[e:] + b1
        h = np.maximum(h, 0.0)
        h = np.maximum(h @ k2 + b2, 0.0)
        return (h @ k3 + b3)[:, 0]


def default_weights_path() -> Path:
    return Path(__file__).parent / "weights" / "meta.weights.h5"


def relative_error(pred: np.ndarray, true: np.ndarray) -> np.ndarray:
    return np.abs(pred - true) / np.abs(true)

