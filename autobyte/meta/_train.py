"""Offline training (Keras) and evaluation (numpy) of the meta-network."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from autobyte.core.space import Config

from ._data import MetaDataset
from ._features import candidate_features
from ._keras import KerasMetaModel, import_keras
from ._network import MetaNetwork, NetworkShape


def row_inputs(ds: MetaDataset) -> tuple[list[np.ndarray], np.ndarray]:
    """Model inputs ``[layers, job, cand]`` per row and targets ``log(speed / observed)``."""
    cand = np.zeros((len(ds.row_ctx), 12))
    for i in range(len(ds.observed)):
        rows = np.flatnonzero(ds.row_ctx == i)
        if rows.size:
            cur = Config(int(ds.current[i, 0]), int(ds.current[i, 1]))
            cand[rows] = candidate_features(ds.ctx_layer_bytes(i), ds.cand[rows], cur)
    x = [ds.layers[ds.row_ctx].astype("float32"), ds.job[ds.row_ctx].astype("float32"), cand.astype("float32")]
    y = np.log(ds.speed / ds.observed[ds.row_ctx]).astype("float32")
    return x, y


def context_inputs(ds: MetaDataset) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    """Per-window inputs ``[layers, job, cands (C, R, F)]``, targets ``(C, R)`` and a row mask."""
    _, y, cand = _rows(ds)
    counts = np.bincount(ds.row_ctx, minlength=len(ds.observed))
    R = int(counts.max()) if counts.size else 0
    C = len(ds.observed)
    c3 = np.zeros((C, R, cand.shape[1]), np.float32)
    y3 = np.zeros((C, R), np.float32)
    m3 = np.zeros((C, R), np.float32)
    order = np.argsort(ds.row_ctx, kind="stable")
    pos = np.arange(len(order)) - np.repeat(np.concatenate([[0], np.cumsum(counts)[:-1]]), counts)
    ctx = ds.row_ctx[order]
    c3[ctx, pos] = cand[order]
    y3[ctx, pos] = y[order]
    m3[ctx, pos] = 1.0
    return [ds.layers.astype("float32"), ds.job.astype("float32"), c3], y3[..., None], m3


def _rows(ds: MetaDataset) -> tuple[None, np.ndarray, np.ndarray]:
    x, y = row_inputs(ds)
    return None, y, x[2]  # (unused, targets, candidate features)


def train(
    ds: MetaDataset,
    *,
    epochs: int = 60,
    batch_size: int = 32,
    learning_rate: float = 3e-3,
    shape: NetworkShape | None = None,
    seed: int = 0,
    validation: MetaDataset | None = None,
    verbose: int = 0,
) -> MetaNetwork:
    """Train a meta-network on ``ds`` (L2 loss on the log speed ratio).

    One training sample is one window with all its candidates, so the LSTM
    encoder runs once per window, as at inference. Keras trains; the result
    is the numpy :class:`MetaNetwork` that :meth:`MetaNetwork.save` writes.

    Raises:
        ImportError: Keras or a backend is missing (names the pip line).
    """
    if len(ds.speed) == 0:
        raise ValueError("ds must hold at least one row, but got an empty dataset.")
    keras = import_keras()
    keras.utils.set_random_seed(seed)  # before building: the initial weights follow the seed
    km = KerasMetaModel(shape)
    x, y, m = context_inputs(ds)
    km.adapt_normalization(ds.layers, ds.job, x[2][m > 0])
    steps = max(1, int(np.ceil(len(y) / batch_size))) * epochs
    sched = keras.optimizers.schedules.CosineDecay(learning_rate, steps, alpha=0.05)
    km.model.compile(optimizer=keras.optimizers.Adam(sched), loss="mse")
    val = None
    if validation is not None and len(validation.speed):
        vx, vy, vm = context_inputs(validation)
        val = (vx, vy, vm)
    t0 = time.time()
    hist = km.model.fit(x, y, sample_weight=m, batch_size=batch_size, epochs=epochs, verbose=verbose, shuffle=True, validation_data=val)
    return km.to_network({
        "rows": int(m.sum()), "contexts": int(len(ds.observed)), "epochs": epochs, "train_s": round(time.time() - t0, 1),
        "models": sorted({str(ds.model_names[k]) for k in np.unique(ds.model)}),
        "final_loss": float(hist.history["loss"][-1]),
    })


def evaluate(net: MetaNetwork, ds: MetaDataset) -> dict[str, float]:
    """MAPE of predicted speeds and how often the predicted best is within 5% of the true best."""
    x, y = row_inputs(ds)
    pred = np.zeros_like(y, dtype=np.float64)
    for i in range(len(ds.observed)):
        rows = np.flatnonzero(ds.row_ctx == i)
        if rows.size:
            emb = net.encode_batch(ds.layers[i:i + 1], ds.job[i:i + 1])
            pred[rows] = net.head_predict(emb, x[2][rows])
    return _scores(ds, pred)


def _scores(ds: MetaDataset, logr: np.ndarray, rows_mask: np.ndarray | None = None) -> dict[str, float]:
    mask = np.ones(len(ds.speed), bool) if rows_mask is None else rows_mask
    sp = ds.observed[ds.row_ctx] * np.exp(logr)
    ape = np.abs(sp - ds.speed) / ds.speed
    within = []
    for i in range(len(ds.observed)):
        rows = np.flatnonzero((ds.row_ctx == i) & mask)
        if rows.size:
            chosen = rows[np.argmax(sp[rows])]
            within.append(ds.speed[chosen] >= 0.95 * ds.speed[rows].max())
    return {
        "mape": float(np.mean(ape[mask])), "median_ape": float(np.median(ape[mask])),
        "top1_within_5pct": float(np.mean(within)) if within else float("nan"), "rows": int(mask.sum()),
    }


def evaluate_adaptation(
    net: MetaNetwork, ds: MetaDataset, *, n_observed: int = 5, n_contexts: int = 30, seed: int = 0, time_budget_s: float = 1.0
) -> dict[str, Any]:
    """Per held-out context: adapt the head on ``n_observed`` of its rows, score the others.

    Each context starts again from the offline weights (one job each). Also
    reports the error on *other* contexts after adapting (forgetting).
    """
    from ._adapter import Adapter

    rng = np.random.default_rng(seed)
    x, y = row_inputs(ds)
    ctxs = rng.choice(len(ds.observed), min(n_contexts, len(ds.observed)), replace=False)
    before, after, forget, durations = [], [], [], []
    others = rng.choice(len(ds.observed), min(40, len(ds.observed)), replace=False)
    for i in ctxs:
        rows = np.flatnonzero(ds.row_ctx == i)
        rng.shuffle(rows)
        fit_rows, test_rows = rows[:n_observed], rows[n_observed:]
        emb = net.encode_batch(ds.layers[i:i + 1], ds.job[i:i + 1])
        def ape(r: np.ndarray) -> np.ndarray:
            p = ds.observed[i] * np.exp(net.head_predict(emb, x[2][r]))
            return np.abs(p - ds.speed[r]) / ds.speed[r]
        before.append(ape(test_rows))
        ad = Adapter(net, time_budget_s=time_budget_s)
        ad.start(np.repeat(emb, len(fit_rows), 0), x[2][fit_rows], y[fit_rows], background=False)
        durations.append(ad.last_duration_s)
        after.append(ape(test_rows))
        # forgetting: error on other contexts with the head adapted to this one
        o = others[others != i][:10]
        orows = np.flatnonzero(np.isin(ds.row_ctx, o))
        embs = net.encode_batch(ds.layers[ds.row_ctx[orows]], ds.job[ds.row_ctx[orows]])
        p = ds.observed[ds.row_ctx[orows]] * np.exp(net.head_batch(embs, x[2][orows]))
        forget.append(np.abs(p - ds.speed[orows]) / ds.speed[orows])
        net.reset_head()
    o = others
    orows = np.flatnonzero(np.isin(ds.row_ctx, o))
    embs = net.encode_batch(ds.layers[ds.row_ctx[orows]], ds.job[ds.row_ctx[orows]])
    p = ds.observed[ds.row_ctx[orows]] * np.exp(net.head_batch(embs, x[2][orows]))
    base_other = float(np.mean(np.abs(p - ds.speed[orows]) / ds.speed[orows]))
    return {
        "mape_before": float(np.mean(np.concatenate(before))), "mape_after": float(np.mean(np.concatenate(after))),
        "other_contexts_mape_offline": base_other, "other_contexts_mape_after_adapting": float(np.mean(np.concatenate(forget))),
        "adapt_s_mean": float(np.mean(durations)), "adapt_s_max": float(np.max(durations)), "contexts": int(len(ctxs)),
        "n_observed": n_observed,
    }
