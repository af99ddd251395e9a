"""Training data for the meta-network, drawn from the simulator (``autobyte.sim``): ``autobyte dataset generate``.

One *context* is a window of statistics observed under a current config
``c0`` (model, n workers, architecture, bandwidth, compute and network
overheads drawn at random); its *rows* are candidate configs ``c`` with the
speed the simulator measures under ``c`` in the same conditions. Stored as a
``.npz`` of plain arrays (no pickle):

``layers (C, K, F_LAYER)``, ``job (C, F_JOB)``, ``layer_bytes`` flat with
``lb_offsets (C+1,)``, ``current (C, 2)``, ``observed (C,)`` speed under c0,
``gbps (C,)``, ``model (C,)`` model index into ``model_names``, ``row_ctx (R,)``,
``cand (R, 2)``, ``speed (R,)``. The same format holds real windows
(``benchmarks/collect.py``); ``autobyte train-meta --data`` reads it.
"""

from __future__ import annotations

import math
import time
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from autobyte.core.space import Config, SearchSpace

from ._features import F_JOB, F_LAYER, N_BINS, featurize

#: Models held out of training (the prediction-quality targets are measured on them).
HELDOUT_MODELS = ("resnet101", "densenet169", "vgg19")
#: Smallest partition drawn into the data (and scored by the tuner's default space).
MIN_PARTITION_BYTES = 256 * 1024
#: Bandwidth band held out of training, Gbit/s.
HELDOUT_GBPS = (6.0, 9.0)


@dataclass
class MetaDataset:
    layers: np.ndarray
    job: np.ndarray
    layer_bytes: np.ndarray
    lb_offsets: np.ndarray
    current: np.ndarray
    observed: np.ndarray
    gbps: np.ndarray
    model: np.ndarray
    model_names: np.ndarray
    row_ctx: np.ndarray
    cand: np.ndarray
    speed: np.ndarray

    def save(self, path: str | Path) -> None:
        np.savez_compressed(path, **{k: getattr(self, k) for k in self.__dataclass_fields__})

    @classmethod
    def load(cls, path: str | Path) -> "MetaDataset":
        try:
            with np.load(path, allow_pickle=False) as z:
                d = {k: z[k] for k in cls.__dataclass_fields__}
        except (KeyError, ValueError, OSError, EOFError, zipfile.BadZipFile, zlib.error) as exc:
            raise ValueError(f"data file {str(path)!r} is not an autobyte meta-network dataset ({exc}).") from None
        if d["layers"].ndim != 3 or d["layers"].shape[2] != F_LAYER or d["layers"].shape[1] % N_BINS:
            raise ValueError(f"data file {str(path)!r} has layers of shape {d['layers'].shape}, expected (C, {N_BINS}, {F_LAYER}).")
        while d["layers"].shape[1] > N_BINS:  # data pooled finer than this version: merge neighbouring bins
            d["layers"] = _halve_bins(d["layers"])
        if d["job"].shape[1] == 21:  # feature version 1: drop the max bandwidths, straggling from the layer sums
            j = d["job"][:, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 14, 15, 16, 17, 18, 19, 20]].copy()
            t_mean = np.expm1(d["layers"][:, :, 1]).sum(axis=1)
            t_max = np.expm1(d["layers"][:, :, 2]).sum(axis=1)
            j[:, 7] = np.log(np.maximum(t_max, 1e-12) / np.maximum(t_mean, 1e-12))
            d["job"] = j
        if d["job"].shape[1] != F_JOB:
            raise ValueError(f"data file {str(path)!r} has job vectors of width {d['job'].shape[1]}, expected {F_JOB}.")
        return cls(**d)

    @classmethod
    def concat(cls, parts: Sequence["MetaDataset"]) -> "MetaDataset":
        names = sorted({str(n) for p in parts for n in p.model_names})
        out: dict[str, list[np.ndarray]] = {k: [] for k in cls.__dataclass_fields__}
        n_ctx = 0
        lb_base = 0
        for p in parts:
            remap = np.array([names.index(str(n)) for n in p.model_names], dtype=np.int64)
            for k in ("layers", "job", "current", "observed", "gbps", "cand", "speed", "layer_bytes"):
                out[k].append(getattr(p, k))
            out["model"].append(remap[p.model])
            out["row_ctx"].append(p.row_ctx + n_ctx)
            out["lb_offsets"].append(p.lb_offsets[:-1] + lb_base)
            n_ctx += len(p.observed)
            lb_base += len(p.layer_bytes)
        d = {k: np.concatenate(v) for k, v in out.items() if k not in ("model_names", "lb_offsets")}
        d["lb_offsets"] = np.concatenate(out["lb_offsets"] + [np.array([lb_base])])
        d["model_names"] = np.array(names)
        return cls(**d)

    def ctx_layer_bytes(self, i: int) -> np.ndarray:
        return self.layer_bytes[self.lb_offsets[i]:self.lb_offsets[i + 1]]

    def subset(self, ctx_mask: np.ndarray) -> "MetaDataset":
        idx = np.flatnonzero(ctx_mask)
        new_id = -np.ones(len(ctx_mask), dtype=np.int64)
        new_id[idx] = np.arange(len(idx))
        rows = ctx_mask[self.row_ctx]
        lbs = [self.ctx_layer_bytes(i) for i in idx]
        offs = np.concatenate([[0], np.cumsum([len(x) for x in lbs])]).astype(np.int64)
        return MetaDataset(
            self.layers[idx], self.job[idx], np.concatenate(lbs) if lbs else np.zeros(0), offs, self.current[idx],
            self.observed[idx], self.gbps[idx], self.model[idx], self.model_names, new_id[self.row_ctx[rows]],
            self.cand[rows], self.speed[rows],
        )

    def split(self) -> dict[str, "MetaDataset"]:
        """``train`` / ``heldout_model`` / ``heldout_condition`` by :data:`HELDOUT_MODELS` and :data:`HELDOUT_GBPS`."""
        names = np.array([str(n) for n in self.model_names])
        ho_model = np.isin(names[self.model], HELDOUT_MODELS)
        ho_cond = (self.gbps >= HELDOUT_GBPS[0]) & (self.gbps <= HELDOUT_GBPS[1])
        return {
            "train": self.subset(~ho_model & ~ho_cond),
            "heldout_model": self.subset(ho_model & ~ho_cond),
            "heldout_condition": self.subset(~ho_model & ho_cond),
        }


def _halve_bins(x: np.ndarray) -> np.ndarray:
    a, b = x[:, 0::2], x[:, 1::2]
    out = np.empty_like(a)
    for k in (0, 1, 2, 4):  # log1p of sums
        out[..., k] = np.log1p(np.expm1(a[..., k]) + np.expm1(b[..., k]))
    out[..., 3] = np.maximum(a[..., 3], b[..., 3])
    out[..., 5] = np.maximum(a[..., 5], b[..., 5])
    return out


def generate(
    n_contexts: int,
    *,
    models: Sequence[str] | None = None,
    n_candidates: int = 24,
    seed: int = 0,
    n_iters: int = 10,
    progress: bool = False,
) -> MetaDataset:
    """Draw ``n_contexts`` contexts from the simulator, ``n_candidates`` rows each."""
    from autobyte import sim

    rng = np.random.default_rng(seed)
    names = list(models) if models is not None else list(sim.MODELS)
    profiles = {m: sim.get_model(m) for m in names}
    space = SearchSpace.default().to_array()
    # partitions under 256 KiB are never competitive on these models and cost the
    # simulator thousands of messages per iteration: leave them out of the data
    space = space[space[:, 0] >= MIN_PARTITION_BYTES]
    paper = SearchSpace.paper_grid_search().to_array()
    base = sim.Cluster(2)
    columns: list[list[Any]] = [[] for _ in range(10)]
    L, J, LB, CUR, OBS, GB, MOD, RC, CA, SP = columns
    t0 = time.time()
    for i in range(n_contexts):
        m = names[int(rng.integers(len(names)))]
        prof = profiles[m]
        n = int(rng.choice([2, 3, 4, 6, 8, 12, 16]))
        arch = str(rng.choice(["ps", "allreduce"]))
        gbps = float(math.exp(rng.uniform(math.log(0.5), math.log(25.0))))
        up = np.full(n, gbps)
        if rng.random() < 0.3:
            up[int(rng.integers(n))] *= rng.uniform(0.3, 1.0)
        down = up.copy() if rng.random() < 0.7 else up * rng.uniform(0.5, 1.5, n)
        scale = np.full(n, 1.0)
        if rng.random() < 0.4:
            scale *= rng.uniform(1.0, 3.0)
        if rng.random() < 0.2:
            scale[int(rng.integers(n))] *= rng.uniform(1.0, 2.0)
        cl = sim.Cluster(
            n, arch, bw_up_Bps=up * sim.GBPS, bw_down_Bps=down * sim.GBPS,
            latency_s=base.latency_s * float(np.exp(rng.uniform(math.log(0.5), math.log(2.0)))),
            per_message_s=base.per_message_s * float(np.exp(rng.uniform(math.log(0.5), math.log(2.0)))),
            compute_scale=scale,
        )
        c0_arr = space[int(rng.integers(len(space)))] if rng.random() < 0.7 else paper[int(rng.integers(len(paper)))]
        c0 = Config(int(c0_arr[0]), int(c0_arr[1]))
        s = int(rng.integers(1 << 30))
        r0 = sim.simulate(prof, cl, c0, n_iters=n_iters, seed=s)
        feats = r0.features()
        obs = float(np.sum(feats.speed))
        job = featurize(feats, c0, obs)
        ci = len(OBS)
        L.append(job.layers); J.append(job.job); LB.append(feats.layer_bytes); CUR.append(c0_arr); OBS.append(obs)
        GB.append(gbps); MOD.append(names.index(m))
        k_space = n_candidates * 2 // 3
        cands = np.concatenate([space[rng.choice(len(space), k_space, replace=False)],
                                paper[rng.choice(len(paper), n_candidates - k_space, replace=False)], c0_arr[None]])
        for c in cands:
            cfg = Config(int(c[0]), int(c[1]))
            sp = obs if cfg == c0 else sim.simulate(prof, cl, cfg, n_iters=n_iters, seed=s).samples_per_s
            RC.append(ci); CA.append(c); SP.append(sp)
        if progress and (i + 1) % 100 == 0:
            print(f"  {i + 1}/{n_contexts} contexts, {time.time() - t0:.0f}s", flush=True)
    lbo = np.concatenate([[0], np.cumsum([len(x) for x in LB])]).astype(np.int64)
    return MetaDataset(
        np.array(L), np.array(J), np.concatenate(LB), lbo, np.array(CUR), np.array(OBS), np.array(GB),
        np.array(MOD, dtype=np.int64), np.array(names), np.array(RC, dtype=np.int64), np.array(CA), np.array(SP),
    )
