"""The meta-network (paper Fig. 4(a)) at run time, in numpy: no framework.

encoder: per-layer bins -> Dense embedding -> two-layer LSTM; job vector
(static + bandwidth + configuration in force) -> Dense; concatenated into a
job embedding. head: job embedding + candidate features -> two dense layers ->
``log(speed(candidate) / observed speed)``.

Scoring a whole grid runs the encoder once and the head on a batch of
candidates. Online adaptation (:class:`autobyte.meta.Adapter`) fine-tunes the
head only, in numpy too. Keras only *trains* the network offline
(``autobyte train-meta``, :mod:`autobyte.meta._keras`); the trained weights
travel as a plain ``.npz`` (no pickle) with a JSON sidecar that carries the
shape, the feature version and the file's SHA-256, all checked before any
array is allocated.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import threadpoolctl

from ._features import F_CAND, F_JOB, F_LAYER, FEATURE_VERSION, JobInputs, candidate_features

#: Marker written in the sidecar JSON of every weights file autobyte saves.
FORMAT = "autobyte-meta-network-npz"
#: Keras' ``backend.epsilon()``: the floor of a Normalization layer's standard deviation.
EPSILON = 1e-7
#: Bounds of every size in :class:`NetworkShape` (the shipped network uses 32..128).
MAX_UNITS = 4096
#: Largest sidecar read (bytes): it holds a few sizes and a training report.
MAX_SIDECAR_BYTES = 1 << 20
_SIDECAR_KEYS = {"format", "feature_version", "shape", "sha256", "info"}
_SHAPE_KEYS = ("layer_embed", "lstm_units", "job_units", "head_units")


@dataclass(frozen=True)
class NetworkShape:
    """Sizes of the meta-network (stored beside the weights).

    Raises:
        ValueError: a size that is not an integer in ``1..MAX_UNITS``.
    """

    layer_embed: int = 32
    lstm_units: int = 32
    job_units: int = 32
    head_units: tuple[int, int] = (128, 64)

    def __post_init__(self) -> None:
        for name in ("layer_embed", "lstm_units", "job_units"):
            _check_units(name, getattr(self, name))
        if not isinstance(self.head_units, tuple) or len(self.head_units) != 2:
            raise ValueError(f"head_units must be a tuple of two integers, but got head_units={self.head_units!r}.")
        for u in self.head_units:
            _check_units("head_units", u, self.head_units)

    @property
    def embedding(self) -> int:
        """Width of the job embedding (LSTM output + job branch)."""
        return self.lstm_units + self.job_units

    def arrays(self) -> dict[str, tuple[int, ...]]:
        """Name -> shape of every array of the network, in the file's naming (Keras layer/variable)."""
        s, u = self, self.lstm_units
        return {
            "layers_norm/mean": (F_LAYER,), "layers_norm/variance": (F_LAYER,),
            "layer_embed/kernel": (F_LAYER, s.layer_embed), "layer_embed/bias": (s.layer_embed,),
            "lstm_1/kernel": (s.layer_embed, 4 * u), "lstm_1/recurrent_kernel": (u, 4 * u), "lstm_1/bias": (4 * u,),
            "lstm_2/kernel": (u, 4 * u), "lstm_2/recurrent_kernel": (u, 4 * u), "lstm_2/bias": (4 * u,),
            "job_norm/mean": (F_JOB,), "job_norm/variance": (F_JOB,),
            "job_dense/kernel": (F_JOB, s.job_units), "job_dense/bias": (s.job_units,),
            "cand_norm/mean": (F_CAND,), "cand_norm/variance": (F_CAND,),
            "head_1/kernel": (s.embedding + F_CAND, s.head_units[0]), "head_1/bias": (s.head_units[0],),
            "head_2/kernel": (s.head_units[0], s.head_units[1]), "head_2/bias": (s.head_units[1],),
            "log_ratio/kernel": (s.head_units[1], 1), "log_ratio/bias": (1,),
        }

    def n_bytes(self) -> int:
        """Bytes of all arrays in float32 (what a file of this shape holds)."""
        return 4 * sum(int(np.prod(v)) for v in self.arrays().values())


def _check_units(name: str, v: Any, whole: Any = None) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_UNITS:
        shown = v if whole is None else whole
        raise ValueError(f"{name} must be an integer in 1..{MAX_UNITS}, but got {name}={shown!r}.")


_BLAS: list[Any] = []  # this process's threadpoolctl controller, made at first use (numpy's BLAS is loaded by then)


@contextlib.contextmanager
def one_blas_thread() -> Iterator[None]:
    """numpy's BLAS on one thread inside the block; its threads as they were after it.

    What the network multiplies at run time is small (a window's layers, a
    grid of candidates, tens of units): split over threads it takes more CPU,
    not less, and OpenBLAS's threads then spin on the cores the training
    needs. The tuner's decisions run inside this (docs/benchmarks.md 2.8).
    """
    if not _BLAS:
        _BLAS.append(threadpoolctl.ThreadpoolController())
    with _BLAS[0].limit(limits=1, user_api="blas"):
        yield


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))


class _Head:
    """The head's forward pass: ``cn`` = candidate normalisation (mean, std), ``d`` = three (kernel, bias)."""

    def __init__(self, cn: tuple[np.ndarray, np.ndarray], d: list[tuple[np.ndarray, np.ndarray]]) -> None:
        self.cn = cn
        self.d = d

    def __call__(self, emb: np.ndarray, cand: np.ndarray) -> np.ndarray:
        e = emb.shape[1]
        (k1, b1), (k2, b2), (k3, b3) = self.d
        # the embedding's share of the first layer is the same for every candidate: compute it once
        h = (emb @ k1[:e]) + ((cand - self.cn[0]) / self.cn[1]) @ k1[e:] + b1
        h = np.maximum(h, 0.0)
        h = np.maximum(h @ k2 + b2, 0.0)
        return np.asarray((h @ k3 + b3)[:, 0])


def _norm(w: dict[str, np.ndarray], name: str) -> tuple[np.ndarray, np.ndarray]:
    return w[name + "/mean"], np.maximum(np.sqrt(w[name + "/variance"]), EPSILON)


def _dense(w: dict[str, np.ndarray], name: str) -> tuple[np.ndarray, np.ndarray]:
    return w[name + "/kernel"], w[name + "/bias"]


class MetaNetwork:
    """Predicts training speed of candidate configurations from one window's statistics (numpy).

    Args:
        shape: layer sizes (:class:`NetworkShape`).
        weights: name -> array for every name of ``shape.arrays()``; ``None``
            gives an untrained network (zeros, unit normalisation) of that shape.

    Raises:
        ValueError: ``weights`` misses an array, has one of the wrong shape, or holds NaN/inf;
            :meth:`load` of a file that is not autobyte meta-network weights.

    Example:
        >>> net = MetaNetwork.load_default()
        >>> speeds = net.predict_speeds(job, space.to_array())  # doctest: +SKIP
    """

    def __init__(self, shape: NetworkShape | None = None, weights: dict[str, np.ndarray] | None = None) -> None:
        self.shape = shape or NetworkShape()
        want = self.shape.arrays()
        if weights is None:
            weights = {k: (np.ones(v) if k.endswith("/variance") else np.zeros(v)) for k, v in want.items()}
        missing = sorted(set(want) - set(weights))
        extra = sorted(set(weights) - set(want))
        if missing or extra:
            raise ValueError(f"weights must hold exactly the arrays of {self.shape}, but missing={missing}, unexpected={extra}.")
        w: dict[str, np.ndarray] = {}
        for k, v in want.items():
            a = np.asarray(weights[k], dtype=np.float64)
            if a.shape != v:
                raise ValueError(f"weights[{k!r}] must have shape {v}, but got shape {a.shape}.")
            if not np.all(np.isfinite(a)):
                raise ValueError(f"weights[{k!r}] holds NaN or inf values.")
            w[k] = a
        self._w = w
        self.info: dict[str, Any] = {}
        self._ln, self._jn = _norm(w, "layers_norm"), _norm(w, "job_norm")
        self._emb, self._jd = _dense(w, "layer_embed"), _dense(w, "job_dense")
        self._lstm = [(w[f"lstm_{i}/kernel"], w[f"lstm_{i}/recurrent_kernel"], w[f"lstm_{i}/bias"]) for i in (1, 2)]
        self.reset_head()

    # ----------------------------------------------------------------- weights
    def reset_head(self) -> None:
        """Back to the offline head (undo online adaptation)."""
        self._np_head = _Head(_norm(self._w, "cand_norm"), [_dense(self._w, n) for n in ("head_1", "head_2", "log_ratio")])

    def weights(self) -> dict[str, np.ndarray]:
        """Name -> float32 array of every weight, the adapted head included (what :meth:`save` writes)."""
        w = dict(self._w)
        for name, (k, b) in zip(("head_1", "head_2", "log_ratio"), self._np_head.d):
            w[name + "/kernel"], w[name + "/bias"] = k, b
        return {k: v.astype(np.float32) for k, v in w.items()}

    # ----------------------------------------------------------------- inference
    def encode(self, job: JobInputs) -> np.ndarray:
        """``(1, E)`` job embedding (the encoder runs once per window)."""
        return self.encode_batch(job.layers[None], job.job[None])

    def encode_batch(self, layers: np.ndarray, job: np.ndarray) -> np.ndarray:
        """``(B, E)`` embeddings of ``B`` windows (Keras LSTM gate order i, f, c, o)."""
        x = (np.asarray(layers, dtype=np.float64) - self._ln[0]) / self._ln[1]
        x = np.maximum(x @ self._emb[0] + self._emb[1], 0.0)  # (B, K, D)
        for kern, rec, bias in self._lstm:
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
        j = np.maximum(((np.asarray(job, dtype=np.float64) - self._jn[0]) / self._jn[1]) @ self._jd[0] + self._jd[1], 0.0)
        return np.concatenate([x[:, -1], j], axis=1)

    def head_batch(self, emb: np.ndarray, cand: np.ndarray) -> np.ndarray:
        """``(B,)`` log-ratios, one embedding per row (or one embedding ``(1, E)`` for all rows)."""
        return self._np_head(np.asarray(emb, dtype=np.float64), np.asarray(cand, dtype=np.float64))

    def head_predict(self, emb: np.ndarray, cand: np.ndarray) -> np.ndarray:
        """``(M,)`` log-ratios for one embedding ``(1, E)`` and candidate features ``(M, F_CAND)``."""
        return self.head_batch(emb, cand)

    def predict_log_ratio(self, job: JobInputs, candidates: np.ndarray) -> np.ndarray:
        """``(M,)`` predicted ``log(speed(c) / observed speed)`` for candidates ``(M, 2)``."""
        cand = candidate_features(job.layer_bytes, candidates, job.current)
        return self.head_predict(self.encode(job), cand)

    def predict_speeds(self, job: JobInputs, candidates: np.ndarray) -> np.ndarray:
        """``(M,)`` predicted samples/s of every candidate."""
        return job.observed_speed * np.exp(self.predict_log_ratio(job, candidates))

    # ----------------------------------------------------------------- files
    def save(self, path: str | os.PathLike[str], **info: Any) -> None:
        """Write ``path`` (``.npz``, float32 arrays) and ``path + ".json"`` (format, feature version, shape, SHA-256, info).

        Raises:
            ValueError: ``path`` does not end with ``.npz``.
        """
        path = Path(path)
        if path.suffix != ".npz":
            raise ValueError(f"path must end with '.npz', but got path={str(path)!r}.")
        with open(path, "wb") as f:
            np.savez(f, **self.weights())  # type: ignore[arg-type]
        shape = asdict(self.shape)
        shape["head_units"] = list(self.shape.head_units)
        meta = {"format": FORMAT, "feature_version": FEATURE_VERSION, "shape": shape, "sha256": _sha256(path),
                "info": {**self.info, **info}}
        Path(str(path) + ".json").write_text(json.dumps(meta, indent=1, default=float))

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> "MetaNetwork":
        """Load weights written by :meth:`save`; nothing is allocated before the sidecar checks out.

        Raises:
            FileNotFoundError: ``path`` or its ``.json`` sidecar is missing.
            ValueError: the sidecar is foreign, out of range or of another feature
                version; the file does not match the sidecar's checksum or shape.
        """
        path = Path(path)
        side = Path(str(path) + ".json")
        if not path.is_file():
            raise FileNotFoundError(f"path must be an existing meta-network weights file, but got path={str(path)!r} (not found).")
        if not side.is_file():
            raise FileNotFoundError(f"meta-network weights {str(path)!r} need their sidecar {str(side)!r}, which is missing.")
        shape, sha, info = _read_sidecar(side, path)
        size = path.stat().st_size
        limit = shape.n_bytes() + 64 * 1024
        if size > limit:
            raise ValueError(f"weights file {str(path)!r} has {size} bytes, more than a network of {shape} needs ({limit}); refusing it.")
        if _sha256(path) != sha:
            raise ValueError(
                f"weights file {str(path)!r} does not match the sha256 in its sidecar {str(side)!r}: "
                "the file is corrupted or was changed; reinstall autobyte or retrain with `autobyte train-meta`."
            )
        net = cls(shape, _read_arrays(path, shape))
        net.info = info
        return net

    @classmethod
    def load_default(cls) -> "MetaNetwork":
        """The pretrained weights shipped in ``autobyte/meta/weights/``."""
        return cls.load(default_weights_path())


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _read_sidecar(side: Path, path: Path) -> tuple[NetworkShape, str, dict[str, Any]]:
    n = side.stat().st_size
    if n > MAX_SIDECAR_BYTES:
        raise ValueError(f"sidecar {str(side)!r} has {n} bytes, more than {MAX_SIDECAR_BYTES}; it is not an autobyte sidecar.")
    try:
        meta = json.loads(side.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"sidecar {str(side)!r} is not valid JSON ({exc}); the weights file is corrupted.") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        got = meta.get("format") if isinstance(meta, dict) else None
        hint = " (an older .weights.h5 file? convert it with `python -m autobyte.meta._keras convert OLD.weights.h5 NEW.npz`)" if got == "autobyte-meta-network" else ""
        raise ValueError(f"{str(side)!r} is not an autobyte meta-network file: format must be {FORMAT!r}, but got format={got!r}{hint}.")
    unknown = sorted(set(meta) - _SIDECAR_KEYS)
    if unknown:
        raise ValueError(f"sidecar {str(side)!r} may hold only {sorted(_SIDECAR_KEYS)}, but got unexpected keys {unknown}.")
    fv = meta.get("feature_version")
    if fv != FEATURE_VERSION:
        raise ValueError(
            f"weights {str(path)!r} were trained for feature_version={fv!r}, "
            f"but this autobyte uses feature_version={FEATURE_VERSION}; retrain with `autobyte train-meta`."
        )
    s = meta.get("shape")
    if not isinstance(s, dict) or set(s) != set(_SHAPE_KEYS):
        raise ValueError(f"sidecar {str(side)!r}: shape must be an object with exactly the keys {list(_SHAPE_KEYS)}, but got shape={s!r}.")
    hu = s["head_units"]
    if not isinstance(hu, list) or len(hu) != 2:
        raise ValueError(f"sidecar {str(side)!r}: head_units must be a list of two integers in 1..{MAX_UNITS}, but got head_units={hu!r}.")
    try:
        shape = NetworkShape(s["layer_embed"], s["lstm_units"], s["job_units"], (hu[0], hu[1]))
    except ValueError as exc:
        raise ValueError(f"sidecar {str(side)!r}: {exc}") from None
    sha = meta.get("sha256")
    if not isinstance(sha, str) or len(sha) != 64 or any(ch not in "0123456789abcdef" for ch in sha):
        raise ValueError(f"sidecar {str(side)!r}: sha256 must be 64 lowercase hex digits, but got sha256={sha!r}.")
    info = meta.get("info", {})
    if not isinstance(info, dict):
        raise ValueError(f"sidecar {str(side)!r}: info must be an object, but got info={info!r}.")
    return shape, sha, info


def _read_arrays(path: Path, shape: NetworkShape) -> dict[str, np.ndarray]:
    want = shape.arrays()
    # look at the archive's table before numpy reads anything: names and
    # uncompressed sizes must be those of this shape (no inflating surprises)
    try:
        with zipfile.ZipFile(path) as z:
            entries = {i.filename: i for i in z.infolist()}
    except (zipfile.BadZipFile, OSError) as exc:
        raise ValueError(f"weights file {str(path)!r} is not an .npz archive ({exc}).") from None
    names = {n[:-4] for n in entries if n.endswith(".npy")}
    if names != set(want) or len(entries) != len(want):
        raise ValueError(
            f"weights file {str(path)!r} must hold the arrays of {shape}, but "
            f"missing={sorted(set(want) - names)}, unexpected={sorted(set(entries) - {k + '.npy' for k in want})}."
        )
    for k, v in want.items():
        n = entries[k + ".npy"].file_size
        if n > 8 * int(np.prod(v)) + 1024:
            raise ValueError(f"weights file {str(path)!r}: array {k!r} takes {n} bytes, more than its shape {v} allows.")
    out: dict[str, np.ndarray] = {}
    try:
        with np.load(path, allow_pickle=False) as z:
            for k in want:
                out[k] = z[k]
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:  # ValueError: an object array (pickle refused)
        raise ValueError(f"weights file {str(path)!r} is corrupted ({type(exc).__name__}: {exc}).") from None
    for k, v in want.items():
        a = out[k]
        if a.dtype not in (np.float32, np.float64) or a.shape != v:
            raise ValueError(f"weights file {str(path)!r}: array {k!r} must be float32 of shape {v}, but got {a.dtype} {a.shape}.")
    return out


def default_weights_path() -> Path:
    """The shipped pretrained weights (``autobyte/meta/weights/meta.weights.npz``)."""
    return Path(__file__).parent / "weights" / "meta.weights.npz"


def relative_error(pred: np.ndarray, true: np.ndarray) -> np.ndarray:
    return np.asarray(np.abs(pred - true) / np.abs(true))
