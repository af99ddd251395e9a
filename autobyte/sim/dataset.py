"""Training data for the meta-network, generated with the simulator.

Contract (see ``docs/simulator.md``, "Dataset"): every row is one question a
tuner asks during training:

* the job ran the *current* configuration ``c0`` for a 10-iteration window,
  and the engine measured its runtime statistics (paper Table II) and speed;
* a *candidate* configuration ``c`` is proposed;
* the label is the 10-iteration average cluster samples/s under ``c`` in the
  same conditions (same model, workers, bandwidth and compute traces, same
  jitter draws).

Rows are grouped by *condition* (model, n workers, architecture, traces);
``configs_per_condition`` configurations are simulated per condition and
every ordered pair (c0, c) is a row, so one simulation serves many rows.

Storage: a directory of ``shard-XXXXX.npz`` files (``np.savez``; load with
``allow_pickle=False``) and a ``meta.json`` with the schema, the generation
parameters and the model table. Shards are written atomically, one by one;
a rerun with the same arguments skips the shards already present
(resumable), and the content depends only on the seed (deterministic).
"""

from __future__ import annotations

import json
import math
import os
import zipfile
import zlib
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from ..core._checks import check_int
from ..core.space import SearchSpace
from ._cluster import GBPS, BandwidthTrace, Cluster, ComputeTrace
from ._engine import simulate
from ._models import MODELS, get_model

FORMAT = "autobyte-sim-dataset"
VERSION = 1
WINDOW_ITERS = 10
#: The paper's bandwidth levels (§III-B), Gbit/s.
PAPER_GBPS = (0.5, 1.0, 5.0, 10.0, 25.0)

#: Per-row columns returned by :func:`load_dataset`, with their meaning.
ROW_COLUMNS: dict[str, str] = {
    "condition": "int64, index of the condition (rows of one condition share model, workers, traces)",
    "arch": "int8, 0 = allreduce, 1 = ps",
    "n_workers": "int16, workers",
    "model": "int16, index into meta['models']",
    "n_layers": "int32, layers of the model",
    "partition_cur": "int64, current config c0: partition bytes",
    "credit_cur": "int64, current config c0: credit bytes",
    "partition": "int64, candidate config c: partition bytes",
    "credit": "int64, candidate config c: credit bytes",
    "speed": "float64, LABEL: cluster samples/s under c over the 10-iteration window",
    "speed_cur": "float64, observed cluster samples/s under c0 over the same window",
    "forward_s": "float32, forward time per iteration under c0 (incl. waits for parameters), mean over workers",
    "bw_up_mean": "float32, achieved upload rate under c0 (payload/busy x 2(n-1)/n), mean over workers, bytes/s",
    "bw_up_min": "float32, same, min over workers",
    "bw_down_mean": "float32, achieved download rate under c0, mean over workers, bytes/s",
    "bw_down_min": "float32, same, min over workers",
    "worker_speed_mean": "float32, per-worker samples/s under c0, mean over workers",
    "worker_speed_min": "float32, per-worker samples/s under c0, min over workers",
    "layer_start": "int64, row's per-layer times are layer_backward_*[layer_start : layer_start + n_layers]",
    "link_gbps_mean": "float32, configured link bandwidth min(up, down), mean over workers and window (not observable by an engine)",
    "link_gbps_min": "float32, same, min over workers and window",
    "compute_scale_mean": "float32, configured compute slowdown, mean over workers and window (not observable)",
}
#: Flat per-layer arrays (indexed through ``layer_start``).
FLAT_COLUMNS: dict[str, str] = {
    "layer_backward_mean": "float32, per-layer backward time under c0, mean over workers and window, seconds",
    "layer_backward_max": "float32, per-layer backward time under c0, max over workers of the window mean, seconds",
}


@dataclass(frozen=True)
class DatasetSpec:
    """What to generate.

    Args:
        n_samples: rows.
        seed: master seed; the dataset is a function of it.
        models: model names drawn uniformly.
        min_workers, max_workers: worker count range (uniform).
        min_gbps, max_gbps: bandwidth range (log-uniform and the paper's levels).
        configs_per_condition: configurations simulated per condition (K);
            each condition gives up to K*K rows.
        conditions_per_shard: conditions per ``.npz`` shard.
        dynamic_prob: probability that bandwidth changes inside the window.

    Raises:
        ValueError: any argument out of range.
    """

    n_samples: int
    seed: int = 0
    models: tuple[str, ...] = MODELS
    min_workers: int = 2
    max_workers: int = 16
    min_gbps: float = 0.5
    max_gbps: float = 25.0
    configs_per_condition: int = 12
    conditions_per_shard: int = 25
    dynamic_prob: float = 0.5

    def __post_init__(self) -> None:
        for nm, lo in (("n_samples", 1), ("configs_per_condition", 2), ("conditions_per_shard", 1), ("min_workers", 2)):
            v = getattr(self, nm)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
                raise ValueError(f"{nm} must be an integer >= {lo}, but got {nm}={v!r}.")
        if isinstance(self.seed, bool) or not isinstance(self.seed, (int, np.integer)) or self.seed < 0:
            raise ValueError(f"seed must be a non-negative integer, but got seed={self.seed!r}.")
        if not isinstance(self.max_workers, int) or self.max_workers < self.min_workers:
            raise ValueError(f"max_workers must be an integer >= min_workers={self.min_workers}, but got max_workers={self.max_workers!r}.")
        if not (0 < self.min_gbps <= self.max_gbps) or not math.isfinite(self.max_gbps):
            raise ValueError(f"bandwidth range must satisfy 0 < min_gbps <= max_gbps < inf, but got min_gbps={self.min_gbps!r}, max_gbps={self.max_gbps!r}.")
        if not self.models:
            raise ValueError("models must name at least one model, but got none.")
        for m in self.models:
            get_model(m)
        if not 0 <= self.dynamic_prob <= 1:
            raise ValueError(f"dynamic_prob must be in [0, 1], but got dynamic_prob={self.dynamic_prob!r}.")
        object.__setattr__(self, "models", tuple(self.models))

    @property
    def rows_per_condition(self) -> int:
        return self.configs_per_condition ** 2

    @property
    def n_conditions(self) -> int:
        return math.ceil(self.n_samples / self.rows_per_condition)

    @property
    def n_shards(self) -> int:
        return math.ceil(self.n_conditions / self.conditions_per_shard)

    def to_dict(self) -> dict[str, Any]:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}


def _space_arrays() -> tuple[np.ndarray, np.ndarray]:
    arr = SearchSpace.default().to_array().astype(np.int64)
    return arr[:, 0], arr[:, 1]


def _draw_gbps(rng: np.random.Generator, spec: DatasetSpec) -> float:
    levels = [g for g in PAPER_GBPS if spec.min_gbps <= g <= spec.max_gbps]
    if levels and rng.random() < 0.4:
        return float(rng.choice(levels))
    return float(np.exp(rng.uniform(math.log(spec.min_gbps), math.log(spec.max_gbps))))


def _condition(spec: DatasetSpec, index: int) -> dict[str, Any]:
    """Draw condition ``index`` (depends only on the seed and the index)."""
    rng = np.random.default_rng([spec.seed, index])
    model = int(rng.integers(len(spec.models)))
    n = int(rng.integers(spec.min_workers, spec.max_workers + 1))
    arch = "ps" if rng.random() < 0.5 else "allreduce"
    total = 1 + WINDOW_ITERS  # warm-up + window, trace iterations 0..10
    g0 = _draw_gbps(rng, spec)
    up = np.full((2, n), g0 * GBPS)
    starts = [0, 1]
    if rng.random() < spec.dynamic_prob:  # a competing flow starts or stops inside the window
        starts = [0, int(rng.integers(1, total))]
        up[1] = _draw_gbps(rng, spec) * GBPS
    else:
        up[1] = up[0]
    if rng.random() < 0.3:  # one worker behind a slower link
        w = int(rng.integers(n))
        up[:, w] *= rng.uniform(0.3, 1.0)
    down = up.copy()
    if rng.random() < 0.2:  # asymmetric links
        down *= rng.uniform(0.5, 2.0)
        down = np.clip(down, spec.min_gbps * GBPS, None)
    scale = np.ones((2, n)) * rng.uniform(0.8, 1.5)  # shared GPU / other job
    if rng.random() < 0.3:  # a straggler
        scale[:, int(rng.integers(n))] *= rng.uniform(1.2, 3.0)
    cstarts = [0, 1]
    if rng.random() < 0.2:
        cstarts = [0, int(rng.integers(1, total))]
        scale[1] *= rng.uniform(0.6, 2.0)
    parts, creds = _space_arrays()
    pick = rng.choice(len(parts), size=spec.configs_per_condition, replace=False)
    return {
        "model": model,
        "n": n,
        "arch": arch,
        "bw": BandwidthTrace(starts, up, down),
        "compute": ComputeTrace(cstarts, scale),
        "configs": [(int(parts[i]), int(creds[i])) for i in pick],
        "sim_seed": int(rng.integers(2**31)),
    }


def _simulate_condition(spec: DatasetSpec, index: int) -> dict[str, Any]:
    from ..core.space import Config

    cond = _condition(spec, index)
    m = get_model(spec.models[cond["model"]])
    n = cond["n"]
    cluster = Cluster(n, cond["arch"])
    traces = [cond["bw"], cond["compute"]]
    obs: dict[str, list[Any]] = {k: [] for k in OBS_KEYS}
    for p, c in cond["configs"]:
        # trace iteration 0 is the warm-up, iterations 1..10 the window
        r = simulate(m, cluster, Config(p, c), n_iters=WINDOW_ITERS, seed=cond["sim_seed"], traces=traces, warmup_iters=1, start_iter=1)
        ws = r.window_stats()
        bw = np.array([w.bandwidth_Bps for w in ws]) * cluster.link_factor
        sp = np.array([w.samples_per_s for w in ws])
        T = np.array([w.layer_backward_s for w in ws])
        obs["partition"].append(p)
        obs["credit"].append(c)
        obs["speed"].append(r.samples_per_s)
        obs["forward_s"].append(float(np.mean([w.forward_s for w in ws])))
        obs["bw_up_mean"].append(bw.mean())
        obs["bw_up_min"].append(bw.min())
        obs["bw_down_mean"].append(bw.mean())
        obs["bw_down_min"].append(bw.min())
        obs["worker_speed_mean"].append(sp.mean())
        obs["worker_speed_min"].append(sp.min())
        obs["layer_backward_mean"].append(T.mean(axis=0))
        obs["layer_backward_max"].append(T.max(axis=0))
    link = np.minimum(cond["bw"].up_Bps, cond["bw"].down_Bps)
    idx = np.searchsorted(cond["bw"].start_iters, np.arange(1, 1 + WINDOW_ITERS), side="right") - 1
    link_w = link[idx] / GBPS
    cidx = np.searchsorted(cond["compute"].start_iters, np.arange(1, 1 + WINDOW_ITERS), side="right") - 1
    return {
        "model": cond["model"],
        "n": n,
        "arch": 1 if cond["arch"] == "ps" else 0,
        "n_layers": m.n_layers,
        "link_gbps_mean": float(link_w.mean()),
        "link_gbps_min": float(link_w.min()),
        "compute_scale_mean": float(cond["compute"].scale[cidx].mean()),
        "obs": obs,
    }


def _shard_path(out: str, i: int) -> str:
    return os.path.join(out, f"shard-{i:05d}.npz")


#: Per measured configuration of a condition: the observation keys :func:`condition_rows` takes.
OBS_KEYS = ("partition", "credit", "speed", "forward_s", "bw_up_mean", "bw_up_min", "bw_down_mean", "bw_down_min",
            "worker_speed_mean", "worker_speed_min", "layer_backward_mean", "layer_backward_max")


def condition_rows(obs: Mapping[str, Sequence[Any]], *, condition: int, arch: int, n_workers: int, model: int,
                   n_layers: int, link_gbps_mean: float, link_gbps_min: float, compute_scale_mean: float,
                   flat_start: int, n_rows: int | None = None) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The rows of one condition in the dataset's columns: every current config ``c0`` x every candidate ``c``.

    Args:
        obs: one list entry per configuration measured (or simulated) in the
            condition, under :data:`OBS_KEYS`; ``layer_backward_*`` entries
            are arrays of ``n_layers`` values.
        flat_start: rows already in the shard's flat per-layer arrays.
        n_rows: keep only the first rows (the last condition of a dataset).

    Returns:
        ``(rows, flat)``: the :data:`ROW_COLUMNS` and :data:`FLAT_COLUMNS` arrays of the condition.
    """
    K = len(obs["partition"])
    flat = {k: np.concatenate(obs[k]).astype(np.float32) for k in FLAT_COLUMNS}
    starts = flat_start + n_layers * np.arange(K)
    cur, cand = np.meshgrid(np.arange(K), np.arange(K), indexing="ij")
    cur, cand = cur.ravel()[:n_rows], cand.ravel()[:n_rows]
    nr = cur.size
    arr = {k: np.asarray(v) for k, v in obs.items() if k not in FLAT_COLUMNS}
    cols = {
        "condition": np.full(nr, condition, np.int64),
        "arch": np.full(nr, arch, np.int8),
        "n_workers": np.full(nr, n_workers, np.int16),
        "model": np.full(nr, model, np.int16),
        "n_layers": np.full(nr, n_layers, np.int32),
        "partition_cur": arr["partition"][cur].astype(np.int64),
        "credit_cur": arr["credit"][cur].astype(np.int64),
        "partition": arr["partition"][cand].astype(np.int64),
        "credit": arr["credit"][cand].astype(np.int64),
        "speed": arr["speed"][cand].astype(np.float64),
        "speed_cur": arr["speed"][cur].astype(np.float64),
        "layer_start": starts[cur].astype(np.int64),
        "link_gbps_mean": np.full(nr, link_gbps_mean, np.float32),
        "link_gbps_min": np.full(nr, link_gbps_min, np.float32),
        "compute_scale_mean": np.full(nr, compute_scale_mean, np.float32),
    }
    for k in ("forward_s", "bw_up_mean", "bw_up_min", "bw_down_mean", "bw_down_min", "worker_speed_mean", "worker_speed_min"):
        cols[k] = arr[k][cur].astype(np.float32)
    return {k: cols[k] for k in ROW_COLUMNS}, flat


def write_shard(path: str, rows: Mapping[str, Sequence[np.ndarray]], flat: Mapping[str, Sequence[np.ndarray]]) -> int:
    """Write one shard (the conditions' :func:`condition_rows`, concatenated) atomically; its row count."""
    data = {k: np.concatenate(rows[k]) for k in ROW_COLUMNS}
    data.update({k: np.concatenate(flat[k]) for k in FLAT_COLUMNS})
    tmp = path + ".tmp.npz"
    np.savez(tmp, **data)  # type: ignore[arg-type]
    os.replace(tmp, path)
    return int(data["speed"].size)


def write_meta(out_dir: str, meta: Mapping[str, Any]) -> None:
    """Write a dataset's ``meta.json`` atomically."""
    tmp = os.path.join(out_dir, "meta.json.tmp")
    with open(tmp, "w") as f:
        json.dump(meta, f, indent=1)
    os.replace(tmp, os.path.join(out_dir, "meta.json"))


def _make_shard(args: tuple[DatasetSpec, str, int]) -> int:
    spec, out, shard = args
    path = _shard_path(out, shard)
    if os.path.exists(path):
        return _shard_rows(spec, shard)
    K = spec.configs_per_condition
    first = shard * spec.conditions_per_shard
    last = min(spec.n_conditions, first + spec.conditions_per_shard)
    rows: dict[str, list[np.ndarray]] = {k: [] for k in ROW_COLUMNS}
    flat: dict[str, list[np.ndarray]] = {k: [] for k in FLAT_COLUMNS}
    flat_len = 0
    for ci in range(first, last):
        res = _simulate_condition(spec, ci)
        cols, fl = condition_rows(
            res["obs"], condition=ci, arch=res["arch"], n_workers=res["n"], model=res["model"], n_layers=res["n_layers"],
            link_gbps_mean=res["link_gbps_mean"], link_gbps_min=res["link_gbps_min"],
            compute_scale_mean=res["compute_scale_mean"], flat_start=flat_len, n_rows=min(K * K, spec.n_samples - ci * K * K),
        )
        flat_len += res["n_layers"] * K
        for k in ROW_COLUMNS:
            rows[k].append(cols[k])
        for k in FLAT_COLUMNS:
            flat[k].append(fl[k])
    return write_shard(path, rows, flat)


def _shard_rows(spec: DatasetSpec, shard: int) -> int:
    K2 = spec.rows_per_condition
    first = shard * spec.conditions_per_shard
    last = min(spec.n_conditions, first + spec.conditions_per_shard)
    return sum(min(K2, spec.n_samples - ci * K2) for ci in range(first, last))


def _meta(spec: DatasetSpec) -> dict[str, Any]:
    models = [get_model(m) for m in spec.models]
    return {
        "format": FORMAT,
        "version": VERSION,
        "spec": spec.to_dict(),
        "window_iters": WINDOW_ITERS,
        "n_shards": spec.n_shards,
        "arch_codes": {"allreduce": 0, "ps": 1},
        "row_columns": ROW_COLUMNS,
        "flat_columns": FLAT_COLUMNS,
        "models": [
            {"name": p.name, "layer_bytes": [int(x) for x in p.layer_bytes], "batch_size": p.batch_size,
             "forward_s": [float(x) for x in p.forward_s], "backward_s": [float(x) for x in p.backward_s]}
            for p in models
        ],
    }


def generate(
    out_dir: str | os.PathLike[str],
    n_samples: int,
    seed: int = 0,
    *,
    n_jobs: int = 1,
    progress: bool = True,
    **spec_kwargs: Any,
) -> str:
    """Generate (or finish generating) a dataset in ``out_dir``.

    Args:
        out_dir: directory (created); holds ``meta.json`` and the shards.
        n_samples: rows.
        seed: master seed.
        n_jobs: worker processes (shards are independent).
        progress: show a tqdm progress bar (if tqdm is installed).
        **spec_kwargs: other :class:`DatasetSpec` fields.

    Returns:
        ``out_dir`` as a string.

    Raises:
        ValueError: bad arguments, or ``out_dir`` holds a dataset generated
            with other arguments (refuses to mix them).
    """
    spec = DatasetSpec(n_samples=n_samples, seed=seed, **spec_kwargs)
    check_int("n_jobs", n_jobs)
    out = os.fspath(out_dir)
    os.makedirs(out, exist_ok=True)
    meta_path = os.path.join(out, "meta.json")
    meta = _meta(spec)
    if os.path.exists(meta_path):
        old = read_meta(meta_path)
        if old.get("spec") != meta["spec"] or old.get("version") != VERSION:
            raise ValueError(
                f"out_dir={out!r} already holds a dataset generated with other arguments ({old.get('spec')}); "
                "use an empty directory or the same arguments to resume."
            )
    else:
        write_meta(out, meta)
    todo = [i for i in range(spec.n_shards) if not os.path.exists(_shard_path(out, i))]
    done_rows = sum(_shard_rows(spec, i) for i in range(spec.n_shards) if i not in set(todo))
    bar = None
    if progress:
        try:
            from tqdm import tqdm

            bar = tqdm(total=spec.n_samples, initial=done_rows, unit="rows", desc="autobyte dataset")
        except ModuleNotFoundError:  # pragma: no cover
            bar = None
    args = [(spec, out, i) for i in todo]
    try:
        if n_jobs == 1 or len(todo) <= 1:
            for a in args:
                n = _make_shard(a)
                if bar is not None:
                    bar.update(n)
        else:
            import multiprocessing as mp

            with mp.get_context("fork").Pool(n_jobs) as pool:
                for n in pool.imap_unordered(_make_shard, args):
                    if bar is not None:
                        bar.update(n)
    finally:
        if bar is not None:
            bar.close()
    return out


def read_meta(meta_path: str | os.PathLike[str]) -> dict[str, Any]:
    """A dataset's ``meta.json``, checked; every error names the file.

    Raises:
        FileNotFoundError: it does not exist.
        ValueError: not UTF-8 JSON, not an autobyte dataset, or a field missing or out of range.
    """
    mp = os.fspath(meta_path)
    if not os.path.isfile(mp):
        raise FileNotFoundError(f"path must be a simulator dataset directory holding meta.json, but {mp!r} does not exist.")
    try:
        with open(mp, encoding="utf-8") as fh:
            meta = json.load(fh)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"dataset file {mp!r} is not valid JSON ({exc}).") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        got = meta.get("format") if isinstance(meta, dict) else type(meta).__name__
        raise ValueError(f"dataset file {mp!r} is not an {FORMAT} meta.json (format={got!r}).")
    n = meta.get("n_shards")
    if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= 10**6:
        raise ValueError(f"dataset file {mp!r}: n_shards must be an integer in [0, 1000000], but got n_shards={n!r}.")
    models = meta.get("models")
    if not isinstance(models, list) or not all(isinstance(m, dict) and isinstance(m.get("name"), str)
                                               and isinstance(m.get("layer_bytes"), list) for m in models):
        raise ValueError(f"dataset file {mp!r}: models must be a list of {{name, layer_bytes, ...}} entries.")
    codes = meta.get("arch_codes")
    if not isinstance(codes, dict) or not all(isinstance(v, int) for v in codes.values()):
        raise ValueError(f"dataset file {mp!r}: arch_codes must map architecture names to integers, but got arch_codes={codes!r}.")
    return meta


def read_shard(path: str | os.PathLike[str], columns: Sequence[str] | None = None) -> dict[str, np.ndarray]:
    """The arrays of one shard (all, or ``columns``); every error names the file.

    Raises:
        ValueError: the file is truncated or corrupt (an interrupted copy), not an
            ``.npz`` of plain arrays, or lacks a column.
    """
    sp = os.fspath(path)
    try:
        with np.load(sp, allow_pickle=False) as z:
            missing = [k for k in (columns or ()) if k not in z.files]
            if missing:
                raise ValueError(f"shard {sp!r} lacks columns {missing}.")
            return {k: z[k] for k in (columns if columns is not None else z.files)}
    except (zipfile.BadZipFile, EOFError, OSError, KeyError, zlib.error) as exc:
        raise ValueError(f"shard {sp!r} is unreadable, truncated or corrupt ({type(exc).__name__}: {exc}); "
                         "delete it and rerun generate with the same arguments to remake it.") from None
    except ValueError as exc:
        if str(exc).startswith(f"shard {sp!r}"):
            raise
        raise ValueError(f"shard {sp!r} is unreadable, truncated or corrupt ({exc}); "
                         "delete it and rerun generate with the same arguments to remake it.") from None


def load_dataset(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Load a dataset directory into numpy columns (no pickle).

    Returns:
        A dict with every column of :data:`ROW_COLUMNS` (one entry per row,
        shards concatenated, ``layer_start`` made global), the flat arrays of
        :data:`FLAT_COLUMNS`, ``"model_names"`` (list), ``"model_layer_bytes"``
        (list of int64 arrays) and ``"meta"`` (the parsed ``meta.json``).

    Raises:
        FileNotFoundError: no ``meta.json`` in ``path``.
        ValueError: not an autobyte dataset, a missing shard, or a shard
            without the expected columns.
    """
    root = os.fspath(path)
    meta = read_meta(os.path.join(root, "meta.json"))
    cols: dict[str, list[np.ndarray]] = {k: [] for k in list(ROW_COLUMNS) + list(FLAT_COLUMNS)}
    offset = 0
    for i in range(int(meta["n_shards"])):
        sp = _shard_path(root, i)
        if not os.path.exists(sp):
            raise ValueError(f"shard {sp!r} is missing; the dataset is incomplete (rerun generate with the same arguments to finish it).")
        z = read_shard(sp, list(cols))
        for k in cols:
            a = z[k]
            if k == "layer_start":
                a = a + offset
            cols[k].append(a)
        offset += int(z["layer_backward_mean"].size)
    data: dict[str, Any] = {k: np.concatenate(v) for k, v in cols.items()}
    data["model_names"] = [m["name"] for m in meta["models"]]
    data["model_layer_bytes"] = [np.asarray(m["layer_bytes"], dtype=np.int64) for m in meta["models"]]
    data["meta"] = meta
    return data


def row_layers(data: dict[str, Any], row: int, column: str = "layer_backward_mean") -> np.ndarray:
    """Per-layer array of one row (a view into the flat column)."""
    s = int(data["layer_start"][row])
    return data[column][s : s + int(data["n_layers"][row])]


__all__ = [
    "DatasetSpec", "FLAT_COLUMNS", "ROW_COLUMNS", "generate", "load_dataset", "read_meta", "read_shard", "row_layers",
]
