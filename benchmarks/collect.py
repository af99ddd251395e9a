"""Real samples on the testbed: windows of real training under a grid of (rate, config).

Two users:

* ``benchmarks/calibrate.py`` measures the calibration grid with it and
  fits the simulator to the measurements;
* ``python benchmarks/collect.py --out DIR`` (:func:`collect`) turns the same
  kind of measurement into **real rows for the meta-network**, in the format
  of ``autobyte dataset generate`` (one ``.npz`` that ``autobyte train-meta
  --data`` reads), plus the ranks' raw JSON. ``--evaluate RAW`` scores the
  meta-network on such windows (before and after fine-tuning), ``--finetune
  RAW`` fine-tunes its head on them.

A measurement is one launch of 2 workers on the testbed
(:class:`autobyte.testbed.Testbed`) training the CNN of
:func:`autobyte.bench.models.make_cnn` with the scheduled engine
(:func:`autobyte.integrations.torch.schedule`) through a list of
*segments*: each segment has a link rate and a ``<partition, credit>``
config, runs ``warmup`` iterations, then measures ``iters`` iterations.
Consecutive segments at one rate share a launch (links shaped at that
constant rate); between segments the config changes with the engine's
``reconfigure`` at an iteration boundary. Every rank writes ``rank<R>.json``: per-iteration wall
times, the engine's :class:`~autobyte.core.metrics.WindowStats` of every
segment's measured window, and a per-layer compute profile taken on the
same CPU before training (:func:`autobyte.sim.profile_module`).

The rank side runs as ``python benchmarks/collect.py rank SPEC_JSON OUT_DIR``.
Run with the package importable (the editable install, or ``PYTHONPATH=$PWD``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from autobyte.core._checks import check_int
from autobyte.core.space import Config, KiB, MiB

#: Rate standing for "no network limit": above what two namespaces reach over
#: a veth pair on this CPU (11-15 Gbit/s unshaped, docs/testbed.md), so the
#: ``tbf`` never throttles; kept a real shaped rate so one trace covers the grid.
UNLIMITED_MBIT = 40000.0

#: Gradient bytes of the default CNN (``make_cnn()``: 3,404,170 FP32 parameters).
CNN_BYTES = 13_616_680


@dataclass(frozen=True)
class Segment:
    """One measured point: a link rate and a config for ``warmup + iters`` iterations.

    Args:
        rate_mbit: shaped rate of every link, both directions, Mbit/s.
        config: ``<partition_bytes, credit_bytes>``.
        warmup: iterations run and not measured (slow start after a rate
            change, the first plan after a reconfiguration).
        iters: measured iterations (>= 2).
        rep: repetition index (bookkeeping only).

    Raises:
        ValueError: a non-positive rate, ``warmup < 1`` or ``iters < 2``.
    """

    rate_mbit: float
    config: Config
    warmup: int = 2
    iters: int = 10
    rep: int = 0

    def __post_init__(self) -> None:
        r = self.rate_mbit
        if isinstance(r, bool) or not isinstance(r, (int, float)) or not math.isfinite(r) or r <= 0:
            raise ValueError(f"rate_mbit must be a positive number of Mbit/s, but got rate_mbit={r!r}.")
        if not isinstance(self.config, Config):
            raise TypeError(f"config must be a Config, but got config={self.config!r}.")
        if isinstance(self.warmup, bool) or not isinstance(self.warmup, int) or self.warmup < 1:
            raise ValueError(f"warmup must be an integer >= 1, but got warmup={self.warmup!r}.")
        if isinstance(self.iters, bool) or not isinstance(self.iters, int) or self.iters < 2:
            raise ValueError(f"iters must be an integer >= 2, but got iters={self.iters!r}.")

    @property
    def length(self) -> int:
        return self.warmup + self.iters

    def to_dict(self) -> dict[str, Any]:
        return {"rate_mbit": self.rate_mbit, "config": [self.config.partition_bytes, self.config.credit_bytes],
                "warmup": self.warmup, "iters": self.iters, "rep": self.rep}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Segment":
        return cls(float(d["rate_mbit"]), Config(int(d["config"][0]), int(d["config"][1])), int(d["warmup"]),
                   int(d["iters"]), int(d.get("rep", 0)))


def estimate_iter_s(rate_mbit: float, compute_s: float = 0.25, model_bytes: int = CNN_BYTES) -> float:
    """Rough iteration time at ``rate_mbit`` (for sizing segments): max(compute, 2 workers' ring bytes / goodput)."""
    return max(compute_s, model_bytes * 8 / (0.9 * rate_mbit * 1e6))


def size_segment(rate_mbit: float, target_s: float, *, min_iters: int = 6, max_iters: int = 40) -> int:
    """Measured iterations so a segment lasts about ``target_s`` seconds (clamped)."""
    return int(min(max_iters, max(min_iters, round(target_s / estimate_iter_s(rate_mbit)))))


def schedule_segments(
    rates_mbit: Sequence[float],
    configs: Sequence[Config],
    *,
    reps: int = 1,
    target_s: float = 3.0,
    warmup: int = 2,
    min_iters: int = 6,
    max_iters: int = 40,
    seed: int = 0,
    order: str = "rate-runs",
    passes: int = 1,
) -> list[Segment]:
    """Every (rate, config) ``reps`` times, interleaved.

    ``order="rate-runs"`` (default): ``passes`` times, the rates in a new
    random order, and at each rate that pass's repetitions (``rep % passes ==
    pass``) each run the configs in a new random order (one launch per rate
    and pass, at a constant shaped rate: see :func:`measure`; two passes put
    a burst of the shared machine's load on half of a rate's repetitions,
    not all).
    ``"rate-blocks"``: each repetition visits the rates in a random order
    and, within a rate, the configs in a random order (one rate change per
    block: few slow-start transients). ``"shuffle"``: every point in a random
    order. Repetitions are drawn independently, so slow drift of the shared
    machine's load spreads over every point instead of biasing some.
    """
    if order not in ("rate-runs", "rate-blocks", "shuffle"):
        raise ValueError(f"order must be 'rate-runs', 'rate-blocks' or 'shuffle', but got order={order!r}.")
    if isinstance(reps, bool) or not isinstance(reps, int) or reps < 1:
        raise ValueError(f"reps must be a positive integer, but got reps={reps!r}.")
    if not rates_mbit or not configs:
        raise ValueError("rates_mbit and configs must both be non-empty.")
    rng = random.Random(seed)
    out: list[Segment] = []
    if isinstance(passes, bool) or not isinstance(passes, int) or not 1 <= passes <= reps:
        raise ValueError(f"passes must be an integer in [1, reps={reps}], but got passes={passes!r}.")
    if order == "rate-runs":
        for p in range(passes):
            rs = list(rates_mbit)
            rng.shuffle(rs)
            for r in rs:
                n = size_segment(r, target_s, min_iters=min_iters, max_iters=max_iters)
                for rep in range(p, reps, passes):
                    cs = list(configs)
                    rng.shuffle(cs)
                    out += [Segment(float(r), c, warmup, n, rep) for c in cs]
        return out
    for rep in range(reps):
        points = [(r, c) for r in rates_mbit for c in configs]
        if order == "shuffle":
            rng.shuffle(points)
        else:
            rs = list(rates_mbit)
            rng.shuffle(rs)
            points = []
            for r in rs:
                cs = list(configs)
                rng.shuffle(cs)
                points += [(r, c) for c in cs]
        for r, c in points:
            out.append(Segment(float(r), c, warmup, size_segment(r, target_s, min_iters=min_iters, max_iters=max_iters), rep))
    return out


@dataclass
class Measurement:
    """What one launch measured (read back from the ranks' files).

    Attributes:
        segments: the plan.
        iter_s: per segment, rank 0's wall time of each measured iteration.
        windows: per segment, one :class:`~autobyte.core.metrics.WindowStats` per rank.
        profile: rank 0's compute profile (``layer_bytes``, ``forward_s``,
            ``backward_s``, ``layer_names``, ``batch_size``, ``compute_only_s``).
        tensor_bytes: the engine's gradient tensors' bytes (the granularity of
            ``WindowStats.layer_backward_s``).
        info: the spec and timing of the launch(es).
        iter_s_by_rank: per segment, per rank, its measured iterations' wall times.
    """

    segments: list[Segment]
    iter_s: list[list[float]]
    windows: list[list[Any]]
    profile: dict[str, Any]
    tensor_bytes: list[int]
    info: dict[str, Any] = field(default_factory=dict)
    iter_s_by_rank: list[list[list[float]]] = field(default_factory=list)

    def segment_iter_s(self, i: int) -> float:
        """Mean iteration time of segment ``i`` (rank 0, measured iterations)."""
        return float(np.mean(self.iter_s[i]))


def read_measurement(out_dir: str) -> Measurement:
    """Read what :func:`measure` wrote into ``out_dir`` (its ``launch-NN`` folders, or one launch's files)."""
    launches = sorted(d for d in os.listdir(out_dir) if d.startswith("launch-")) if os.path.isdir(out_dir) else []
    if launches:
        return _merge([_read_launch(os.path.join(out_dir, d)) for d in launches])
    return _read_launch(out_dir)


def _read_launch(out_dir: str) -> Measurement:
    from autobyte.core.metrics import WindowStats

    ranks = []
    r = 0
    while os.path.exists(os.path.join(out_dir, f"rank{r}.json")):
        path = os.path.join(out_dir, f"rank{r}.json")
        try:
            with open(path, encoding="utf-8") as f:
                ranks.append(json.load(f))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"measurement file {path!r} is not valid JSON ({exc}); was the run cut off?") from None
        r += 1
    if not ranks:
        raise FileNotFoundError(f"out_dir must hold the ranks' rank0.json, but {out_dir!r} has none (did the launch fail?).")
    try:
        segs = [Segment.from_dict(d) for d in ranks[0]["segments"]]
        windows = [[WindowStats.from_vector(rk["windows"][i]) for rk in ranks] for i in range(len(segs))]
        by_rank = [[rk["iter_s"][i] for rk in ranks] for i in range(len(segs))]
        return Measurement(segs, ranks[0]["iter_s"], windows, ranks[0]["profile"], ranks[0]["tensor_bytes"], ranks[0]["info"], by_rank)
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise ValueError(f"measurement files {os.path.join(out_dir, 'rank*.json')!r} are incomplete or of another "
                         f"format ({type(exc).__name__}: {exc}).") from None


def measure(
    segments: Sequence[Segment],
    out_dir: str,
    *,
    batch_size: int = 16,
    width: int = 32,
    hidden: int = 1536,
    profile_runs: int = 8,
    timeout_s: float = 1800.0,
    model: str = "cnn",
    log: Callable[[str], None] = print,
) -> Measurement:
    """Run ``segments`` on the testbed with 2 workers (needs root) and read the result.

    Consecutive segments at one rate run in one launch whose links are shaped
    at that constant rate (``out_dir/launch-NN/``); every change of rate
    starts a new launch. Re-shaping links under live gloo traffic
    (``tc qdisc change``) left TCP connections of the run in retransmission
    back-off with every retransmit dropped (RTO 26-52 s, both ranks stuck in
    a collective) several times on this host, so rates never change inside
    a measured launch.
    """
    from autobyte.testbed._netns import require_root

    require_root()
    segments = list(segments)
    if not segments:
        raise ValueError("segments must hold at least one Segment, but got none.")
    os.makedirs(out_dir, exist_ok=True)
    runs: list[list[Segment]] = []
    for seg in segments:
        if runs and runs[-1][-1].rate_mbit == seg.rate_mbit:
            runs[-1].append(seg)
        else:
            runs.append([seg])
    t0 = time.monotonic()
    parts = []
    for i, run in enumerate(runs):
        d = os.path.join(out_dir, f"launch-{i:02d}")
        parts.append(_launch(run, d, batch_size=batch_size, width=width, hidden=hidden, profile_runs=profile_runs, model=model,
                             timeout_s=max(60.0, timeout_s - (time.monotonic() - t0)), log=log))
    m = _merge(parts)
    m.info["wall_s"] = time.monotonic() - t0
    m.info["launches"] = len(parts)
    with open(os.path.join(out_dir, "measurement.json"), "w") as f:
        json.dump({"launches": [f"launch-{i:02d}" for i in range(len(parts))], "wall_s": m.info["wall_s"]}, f)
    log(f"  measured in {m.info['wall_s']:.0f} s ({len(parts)} launches)")
    return m


def _launch(segments: list[Segment], out_dir: str, *, batch_size: int, width: int, hidden: int, profile_runs: int,
            timeout_s: float, log: Callable[[str], None], model: str = "cnn") -> Measurement:
    from autobyte.testbed import Testbed

    os.makedirs(out_dir, exist_ok=True)
    spec = {"segments": [s.to_dict() for s in segments], "batch_size": batch_size, "width": width, "hidden": hidden,
            "profile_runs": profile_runs, "model": model}
    spec_path = os.path.join(out_dir, "spec.json")
    with open(spec_path, "w") as f:
        json.dump(spec, f)
    cmd = [sys.executable, os.path.abspath(__file__), "rank", spec_path, out_dir]
    t0 = time.monotonic()
    rate = segments[0].rate_mbit
    n_it = sum(s.length for s in segments)
    log(f"  launch at {rate:g} Mbit/s: 2 workers, {len(segments)} segments, {n_it} iterations")
    env = {"PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    with open(os.path.join(out_dir, "launch.log"), "w") as f, Testbed(2, bandwidth_mbit=rate) as tb:
        rc = tb.run(cmd, timeout_s=timeout_s, events_log=os.path.join(out_dir, "events.jsonl"), env=env, stdout=f)
    if rc != 0:
        raise RuntimeError(f"measurement in {out_dir} failed with exit code {rc}; see {out_dir}/launch.log")
    m = _read_launch(out_dir)
    m.info["wall_s"] = time.monotonic() - t0
    log(f"    done in {m.info['wall_s']:.0f} s")
    return m


def _merge(parts: Sequence[Measurement]) -> Measurement:
    """One :class:`Measurement` from launches in order; ``compute_only_s`` pools every launch's plain steps."""
    first = parts[0]
    profile = dict(first.profile)
    profile["compute_only_s"] = [v for p in parts for v in p.profile["compute_only_s"][1:]]
    profile["compute_only_s_per_launch"] = [p.profile["compute_only_s"] for p in parts]
    return Measurement(
        [s for p in parts for s in p.segments], [x for p in parts for x in p.iter_s], [w for p in parts for w in p.windows],
        profile, first.tensor_bytes, {"spec": first.info.get("spec"), "launch_wall_s": [p.info.get("wall_s") for p in parts]},
        [x for p in parts for x in p.iter_s_by_rank] if all(p.iter_s_by_rank for p in parts) else [],
    )


# --------------------------------------------------------------------------- real rows for the meta-network
#: Link rates of ``benchmarks/collect.py`` (Mbit/s): communication-bound, middle, compute-bound on this CPU,
#: none of them a calibration rate.
COLLECT_RATES_MBIT: tuple[float, ...] = (150.0, 500.0, 2000.0)
#: Configs measured per condition: the rows are every ordered pair of them.
COLLECT_CONFIGS: tuple[Config, ...] = (
    Config(64 * KiB, 128 * KiB), Config(128 * KiB, 512 * KiB), Config(256 * KiB, 256 * KiB), Config(512 * KiB, 2 * MiB),
    Config(1 * MiB, 2 * MiB), Config(2 * MiB, 8 * MiB), Config(4 * MiB, 4 * MiB), Config(16 * MiB, 16 * MiB),
)
#: Per-worker batch of each model in ``benchmarks/collect.py`` (the benchmark suite's batch sizes).
COLLECT_BATCH: dict[str, int] = {"cnn": 16, "transformer": 32, "mlp": 64}


def conditions(measurement: Measurement) -> list[list[int]]:
    """Segment indices grouped into *conditions*: consecutive segments at one rate and repetition."""
    out: list[list[int]] = []
    for i, s in enumerate(measurement.segments):
        prev = measurement.segments[i - 1] if i else None
        if prev is not None and prev.rate_mbit == s.rate_mbit and prev.rep == s.rep:
            out[-1].append(i)
        else:
            out.append([i])
    return out


def write_dataset(measurements: Sequence[Measurement], path: str, *, model_name: str = "cnn-3.4M",
                  min_configs: int = 2) -> dict[str, Any]:
    """Write real windows as meta-network training data: one ``.npz`` of :class:`autobyte.meta._data.MetaDataset`.

    The format ``autobyte dataset generate`` writes and ``autobyte train-meta
    --data`` reads. Each condition (one rate, one repetition; the configs
    measured one after the other within minutes at that rate) gives one
    context per config ``c0`` measured in it: the statistics the engine
    measured under ``c0`` over its window, featurized as the live tuner
    featurizes them, and as rows every config ``c`` measured in the same
    condition with its label, the real cluster samples/s under ``c`` (from
    each rank's iteration wall times, so synchronisation waits count). Layers
    are the engine's gradient tensors (weights and biases apart), the
    granularity a live tuner sees; ``gbps`` is the shaped rate.

    Returns:
        ``{"rows", "contexts", "conditions", "path"}``.

    Raises:
        ValueError: no condition with at least ``min_configs`` configs, or
            measurements of different models.
    """
    from autobyte.meta import featurize
    from autobyte.meta._data import MetaDataset

    layers, jobs, layer_bytes, current, observed, gbps = [], [], [], [], [], []
    row_ctx: list[int] = []
    cand: list[np.ndarray] = []
    speed: list[float] = []
    tensor_bytes: list[int] | None = None
    n_conditions = 0
    for m in measurements:
        if tensor_bytes is not None and [int(b) for b in m.tensor_bytes] != tensor_bytes:
            raise ValueError("measurements must all be of one model (same gradient tensors).")
        tensor_bytes = [int(b) for b in m.tensor_bytes]
        n_conditions += sum(len(c) >= min_configs for c in conditions(m))
        for ctx in meta_contexts(m):
            if len(ctx["speed"]) < min_configs:
                continue
            job = featurize(ctx["features"], ctx["current"], ctx["observed"])
            i = len(observed)
            layers.append(job.layers)
            jobs.append(job.job)
            layer_bytes.append(np.asarray(job.layer_bytes, dtype=np.float64))
            current.append([ctx["current"].partition_bytes, ctx["current"].credit_bytes])
            observed.append(float(ctx["observed"]))
            gbps.append(ctx["rate_mbit"] / 1000.0)
            row_ctx += [i] * len(ctx["speed"])
            cand.append(np.asarray(ctx["candidates"], dtype=np.float64))
            speed += [float(v) for v in ctx["speed"]]
    if not observed:
        raise ValueError(f"measurements hold no condition with at least min_configs={min_configs} configs at one rate.")
    offsets = np.concatenate([[0], np.cumsum([len(x) for x in layer_bytes])]).astype(np.int64)
    data = MetaDataset(
        np.array(layers), np.array(jobs), np.concatenate(layer_bytes), offsets, np.array(current, dtype=np.float64),
        np.array(observed), np.array(gbps), np.zeros(len(observed), dtype=np.int64), np.array([model_name]),
        np.array(row_ctx, dtype=np.int64), np.concatenate(cand), np.array(speed),
    )
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    data.save(path)
    return {"rows": len(speed), "contexts": len(observed), "conditions": n_conditions, "path": path}


def collect(
    out: str,
    *,
    rates_mbit: Sequence[float] = COLLECT_RATES_MBIT,
    configs: Sequence[Config] = COLLECT_CONFIGS,
    reps: int = 2,
    window_iters: int = 10,
    warmup: int = 2,
    seed: int = 1,
    timeout_s: float = 1800.0,
    model: str = "cnn",
    batch_size: int | None = None,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Measure real windows on the testbed (needs root) and write them as a meta-network dataset.

    Every rate is one launch; at each rate every repetition measures every
    config for ``window_iters`` iterations after ``warmup``, in a new random
    order. ``model`` is one of :data:`autobyte.bench.models.MODELS`
    (``batch_size`` per worker; default :data:`COLLECT_BATCH`'s). Writes
    ``out/raw/`` (the ranks' JSON) and ``out/data.npz`` (the windows as
    meta-network training data, :func:`write_dataset`).

    Raises:
        ValueError: an unknown model or a bad batch size.
    """
    from autobyte.bench.models import MODELS

    if model not in MODELS:
        raise ValueError(f"model must be one of {', '.join(MODELS)}, but got model={model!r}.")
    bs = COLLECT_BATCH[model] if batch_size is None else batch_size
    if isinstance(bs, bool) or not isinstance(bs, int) or bs < 1:
        raise ValueError(f"batch_size must be a positive integer, but got batch_size={bs!r}.")
    segs = schedule_segments(rates_mbit, configs, reps=reps, warmup=warmup, min_iters=window_iters,
                             max_iters=window_iters, seed=seed)
    log(f"collect: {model} (batch {bs}), {len(rates_mbit)} rates x {len(configs)} configs x {reps} repetitions, "
        f"windows of {window_iters} iterations")
    m = measure(segs, os.path.join(out, "raw"), timeout_s=timeout_s, log=log, profile_runs=3, model=model, batch_size=bs)
    res = write_dataset([m], os.path.join(out, "data.npz"), model_name="cnn-3.4M" if model == "cnn" else model)
    log(f"wrote {res['rows']} rows of {res['contexts']} windows from {res['conditions']} conditions to {res['path']}")
    return res


def meta_contexts(measurement: Measurement) -> list[dict[str, Any]]:
    """Every (condition, current config) window as the live tuner sees it, with its condition's candidates.

    Returns dicts with ``features`` (:class:`~autobyte.core.metrics.RuntimeFeatures`
    from the engine's windows of every rank), ``current`` (:class:`Config`),
    ``observed`` (real cluster samples/s under it), ``rate_mbit``, ``rep``,
    ``candidates`` ``(K, 2)`` and ``speed`` ``(K,)`` (real cluster samples/s).
    """
    from autobyte.core.metrics import RuntimeFeatures

    out = []
    batch = int(measurement.profile["batch_size"])
    for cond in conditions(measurement):
        speeds, cands = [], []
        for i in cond:
            per_rank = measurement.iter_s_by_rank[i] if measurement.iter_s_by_rank else [measurement.iter_s[i]]
            speeds.append(sum(batch / float(np.mean(x)) for x in per_rank))
            c = measurement.segments[i].config
            cands.append([c.partition_bytes, c.credit_bytes])
        for j, i in enumerate(cond):
            ws = measurement.windows[i]
            n = len(ws)
            f = RuntimeFeatures.from_windows("allreduce", measurement.tensor_bytes, ws, link_factor=2.0 * (n - 1) / n)
            seg = measurement.segments[i]
            out.append({"features": f, "current": seg.config, "observed": speeds[j], "rate_mbit": seg.rate_mbit,
                        "rep": seg.rep, "candidates": np.array(cands, dtype=np.int64), "speed": np.array(speeds)})
    return out


def _load_net(weights: str | None) -> tuple[Any, str]:
    """The meta-network of ``weights`` (default: the shipped ones) and its path.

    Raises:
        FileNotFoundError: no weights there.
    """
    from autobyte.meta import MetaNetwork, default_weights_path

    path = weights or str(default_weights_path())
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"weights must name trained meta-network weights, but {path!r} does not exist "
            "(no shipped weights yet: train them with `autobyte train-meta`, or pass --weights)."
        )
    return MetaNetwork.load(path), path


def meta_rows(net: Any, ctxs: Sequence[dict[str, Any]]) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[tuple[int, int]]]:
    """The meta-network's rows of :func:`meta_contexts` windows: embeddings, candidate features, targets, spans per window.

    Target: ``log(speed(c) / speed(c0))`` for every candidate ``c`` measured in the window's condition.
    """
    from autobyte.meta import candidate_features, featurize

    embs, cands, ys, spans = [], [], [], []
    r = 0
    for c in ctxs:
        job = featurize(c["features"], c["current"], c["observed"])
        emb = net.encode(job)
        k = len(c["speed"])
        embs.append(np.repeat(np.atleast_2d(emb), k, axis=0))
        cands.append(candidate_features(job.layer_bytes, c["candidates"], c["current"]))
        ys.append(np.log(c["speed"] / c["observed"]))
        spans.append((r, r + k))
        r += k
    return np.concatenate(embs), np.concatenate(cands), np.concatenate(ys), spans


def finetune_meta(
    raw_dirs: Sequence[str],
    out: str,
    *,
    weights: str | None = None,
    time_budget_s: float = 30.0,
    max_epochs: int = 2000,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Fine-tune the meta-network's head on every real window of ``raw_dirs`` and save the weights to ``out``.

    For a cluster unlike the simulated V100 clusters the shipped network was
    trained on: a few minutes of ``benchmarks/collect.py`` on it, then
    ``AutoByteTuner(weights=out)`` starts from a head that has seen its
    per-message costs. The meta side's own transfer learning
    (:class:`autobyte.meta.Adapter`: encoder frozen, head fine-tuned, anchored
    to the offline head) with a larger time budget than online.

    Returns:
        ``{"path", "rows", "windows", "fit_mape_before", "fit_mape_after", "adapt_s"}``.

    Raises:
        FileNotFoundError: no weights at the given / shipped path.
        ValueError: ``out`` not ending in ``.npz``, or no window in ``raw_dirs``.
    """
    from autobyte.meta import Adapter

    if not isinstance(out, str) or not out.endswith(".npz"):
        raise ValueError(f"out must be a path ending in '.npz', but got out={out!r}.")
    net, path = _load_net(weights)
    ctxs = [c for d in raw_dirs for c in meta_contexts(read_measurement(d))]
    if not ctxs:
        raise ValueError(f"raw_dirs must hold measured windows, but got none in {list(raw_dirs)!r}.")
    emb, cand, y, _ = meta_rows(net, ctxs)

    def mape() -> float:
        pred = np.asarray(net.head_batch(emb, cand), dtype=np.float64).reshape(-1)
        return float(np.mean(np.abs(np.exp(pred - y) - 1.0)))

    before = mape()
    ad = Adapter(net, time_budget_s=time_budget_s, max_epochs=max_epochs)
    ad.start(emb, cand, y, background=False)
    res = {"path": out, "rows": int(y.size), "windows": len(ctxs), "fit_mape_before": before, "fit_mape_after": mape(),
           "adapt_s": ad.last_duration_s, "base_weights": path}
    net.save(out, finetuned_on=[os.path.abspath(d) for d in raw_dirs], finetune_rows=int(y.size))
    log(f"fine-tuned on {res['rows']} real rows ({res['windows']} windows): MAPE on them "
        f"{100 * before:.1f}% -> {100 * res['fit_mape_after']:.1f}%; wrote {out}")
    return res


def evaluate_meta(
    raw_dirs: Sequence[str],
    *,
    weights: str | None = None,
    holdout: str = "rep",
    time_budget_s: float = 20.0,
    max_epochs: int = 2000,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Prediction error of the meta-network on held-out real windows, before and after fine-tuning on the others.

    The network (``weights``, default the shipped ones) predicts, for every
    window, the speed of every candidate measured in the same condition.
    Fine-tuning uses the meta side's own transfer learning
    (:class:`autobyte.meta.Adapter`: encoder frozen, head fine-tuned) on the
    rows of the *fit* windows, with a larger time budget than online.
    ``holdout="rep"``: the last repetition of every rate is held out (same
    rates, another time); ``"rate"``: the highest rate is held out.

    Returns:
        ``{"before": {"mape", "top1_within_5pct", "rows"}, "after": {...},
        "fit_rows", "holdout", "weights"}``.

    Raises:
        FileNotFoundError: no weights at the given / shipped path (the
            meta-network must be trained first: ``autobyte train-meta``).
        ValueError: ``holdout`` unknown, or nothing left on one side of the split.
    """
    if holdout not in ("rep", "rate"):
        raise ValueError(f"holdout must be 'rep' or 'rate', but got holdout={holdout!r}.")
    from autobyte.meta import Adapter

    net, path = _load_net(weights)
    ctxs = [c for d in raw_dirs for c in meta_contexts(read_measurement(d))]
    if holdout == "rep":
        last = max(c["rep"] for c in ctxs)
        held = [c["rep"] == last for c in ctxs]
    else:
        top = max(c["rate_mbit"] for c in ctxs)
        held = [c["rate_mbit"] == top for c in ctxs]
    if all(held) or not any(held):
        raise ValueError(f"holdout={holdout!r} leaves no window on one side (need at least 2 repetitions / rates).")

    def score(sel: list[dict[str, Any]]) -> dict[str, float]:
        emb, cand, y, spans = meta_rows(net, sel)
        pred = np.asarray(net.head_batch(emb, cand), dtype=np.float64).reshape(-1)
        ape = np.abs(np.exp(pred - y) - 1.0)  # |predicted speed - real| / real
        top = [float(np.exp(y[a:b][np.argmax(pred[a:b])]) >= 0.95 * np.exp(y[a:b]).max()) for a, b in spans]
        return {"mape": float(ape.mean()), "median_ape": float(np.median(ape)), "top1_within_5pct": float(np.mean(top)),
                "rows": int(y.size), "windows": len(sel)}

    fit_ctx = [c for c, h in zip(ctxs, held) if not h]
    test_ctx = [c for c, h in zip(ctxs, held) if h]
    before = score(test_ctx)
    before_fit = score(fit_ctx)
    emb, cand, y, _ = meta_rows(net, fit_ctx)
    ad = Adapter(net, time_budget_s=time_budget_s, max_epochs=max_epochs)
    ad.start(emb, cand, y, background=False)
    after = score(test_ctx)
    res = {"before": before, "after": after, "fit_before": before_fit, "fit_after": score(fit_ctx),
           "fit_rows": int(y.size), "holdout": holdout, "weights": path, "adapt_s": ad.last_duration_s}
    log(f"meta-network on held-out real windows ({holdout}): MAPE {100 * before['mape']:.1f}% -> {100 * after['mape']:.1f}% "
        f"after fine-tuning on {res['fit_rows']} real rows; top-1 within 5%: {before['top1_within_5pct']:.2f} -> "
        f"{after['top1_within_5pct']:.2f}")
    return res


def _repeat_errors(by_cond: dict[tuple[str, float, int], list[dict[str, Any]]]) -> list[np.ndarray]:
    """The noise floor of real labels: speed ratios measured in one repetition of a rate predicting the next one's.

    A predictor that remembered every speed measured minutes earlier in the
    same condition scores this; a network cannot be checked below it.
    """
    errs: list[np.ndarray] = []
    groups: dict[tuple[str, float], dict[int, dict[Config, float]]] = {}
    for (d, rate, rep), ctxs in by_cond.items():
        groups.setdefault((d, rate), {})[rep] = {c["current"]: float(c["observed"]) for c in ctxs}
    for reps in groups.values():
        keys = sorted(reps)
        for a, b in zip(keys, keys[1:]):
            sa, sb = reps[a], reps[b]
            common = [c for c in sa if c in sb]
            errs.append(np.array([abs((sa[j] / sa[i]) / (sb[j] / sb[i]) - 1.0) for i in common for j in common if i != j]))
    return errs


def evaluate_meta_online(
    raw_dirs: Sequence[str],
    *,
    weights: str | None = None,
    n_observed: int = 5,
    orders: int = 4,
    time_budget_s: float = 1.0,
    seed: int = 0,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """The meta-network on real windows as a live tuner meets them: before adapting, and after ``n_observed`` windows.

    Every condition (one rate, one repetition; its configs measured one after
    the other) is replayed ``orders`` times in a seeded random order of its
    configs. **Before**: the offline network predicts, from each window's
    statistics under its config ``c0``, the speed of every other config
    measured in the condition (every ordered pair; the trivial ``c == c0``
    rows are left out). **After**: the first ``n_observed`` windows of the
    order are what a tuner has seen; the head is adapted on the rows among
    them (the meta side's :class:`~autobyte.meta.Adapter` with the tuner's own
    time budget, starting again from the offline weights for every order), and
    the rows from an observed window to a config not yet observed are
    predicted. ``before`` is also given on exactly those rows.

    Returns:
        ``{"before_all": {...}, "before": {...}, "after": {...}, "n_observed", "orders", "conditions", "weights"}``,
        each score ``{"mape", "median_ape", "rows"}``.

    Raises:
        FileNotFoundError: no weights at the given / shipped path.
        ValueError: ``n_observed`` not below the configs of a condition, or no condition to score.
    """
    from autobyte.meta import Adapter

    check_int("n_observed", n_observed)
    check_int("orders", orders)
    net, path = _load_net(weights)
    by_cond: dict[tuple[str, float, int], list[dict[str, Any]]] = {}
    for d in raw_dirs:
        for c in meta_contexts(read_measurement(d)):
            by_cond.setdefault((d, c["rate_mbit"], c["rep"]), []).append(c)
    by_cond = {k: v for k, v in by_cond.items() if len(v) > n_observed}
    if not by_cond:
        raise ValueError(f"n_observed must be below the number of configs measured in a condition, but got n_observed={n_observed}.")

    def predict(c: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        emb, cand, y, _ = meta_rows(net, [c])
        return emb[:1], cand, y  # one window: its embedding once

    def ape(emb: np.ndarray, cand: np.ndarray, y: np.ndarray) -> np.ndarray:
        pred = np.asarray(net.head_batch(np.repeat(emb, len(y), 0), cand), dtype=np.float64).reshape(-1)
        return np.abs(np.exp(pred - y) - 1.0)

    def summary(errs: list[np.ndarray]) -> dict[str, Any]:
        e = np.concatenate(errs) if errs else np.zeros(0)
        return {"mape": float(e.mean()) if e.size else float("nan"), "median_ape": float(np.median(e)) if e.size else float("nan"),
                "rows": int(e.size)}

    rng = np.random.default_rng(seed)
    before_all: list[np.ndarray] = []
    before: list[np.ndarray] = []
    after: list[np.ndarray] = []
    durations: list[float] = []
    for ctxs in by_cond.values():
        pre = [predict(c) for c in ctxs]
        k = len(ctxs)
        for i, (emb, cand, y) in enumerate(pre):
            keep = np.arange(len(y)) != i  # window i's own config: the trivial row
            before_all.append(ape(emb, cand[keep], y[keep]))
        for _ in range(orders):
            order = rng.permutation(k)
            seen, unseen = order[:n_observed], order[n_observed:]
            fit_e, fit_c, fit_y = [], [], []
            for i in seen:
                emb, cand, y = pre[i]
                j = [x for x in seen if x != i]
                fit_e.append(np.repeat(emb, len(j), 0))
                fit_c.append(cand[j])
                fit_y.append(y[j])
            before += [ape(pre[i][0], pre[i][1][unseen], pre[i][2][unseen]) for i in seen]
            ad = Adapter(net, time_budget_s=time_budget_s)
            ad.start(np.concatenate(fit_e), np.concatenate(fit_c), np.concatenate(fit_y), background=False)
            durations.append(float(ad.last_duration_s or 0.0))
            after += [ape(pre[i][0], pre[i][1][unseen], pre[i][2][unseen]) for i in seen]
            net.reset_head()
    res: dict[str, Any] = {"before_all": summary(before_all), "before": summary(before), "after": summary(after), "n_observed": n_observed,
           "orders": orders, "conditions": len(by_cond), "weights": path,
           "adapt_s_mean": float(np.mean(durations)) if durations else 0.0, "repeat": summary(_repeat_errors(by_cond))}
    log(f"meta-network on real windows: MAPE {100 * res['before_all']['mape']:.1f}% before adapting (all rows); "
        f"on the rows to configs not yet seen {100 * res['before']['mape']:.1f}% -> {100 * res['after']['mape']:.1f}% "
        f"after {n_observed} windows; a repeat of the measurement predicts its own ratios within "
        f"{100 * res['repeat']['mape']:.1f}% (the labels' noise)")
    return res


# --------------------------------------------------------------------------- rank side
def _rank_main(spec_path: str, out_dir: str) -> None:
    from autobyte.integrations._imports import require_torch

    torch = require_torch()
    import torch.distributed as dist

    from autobyte.bench.models import make_model, model_batches
    from autobyte.integrations.torch import schedule
    from autobyte.sim import profile_module
    from autobyte.testbed import notify_iteration

    import faulthandler
    import signal

    faulthandler.register(signal.SIGUSR1, all_threads=True)  # `kill -USR1 PID` prints every thread's stack
    with open(spec_path) as f:
        spec = json.load(f)
    segs = [Segment.from_dict(d) for d in spec["segments"]]
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    bs = int(spec.get("batch_size", 16))
    model_name = str(spec.get("model", "cnn"))
    data = model_batches(model_name, 8, bs, rank, seed=0)
    model = make_model(model_name, width=int(spec.get("width", 32)), hidden=int(spec.get("hidden", 1536)))
    loss_fn = torch.nn.functional.cross_entropy

    # Compute profile on this CPU, both ranks at once (as during training).
    x0, y0 = data[0]
    prof = profile_module(model, x0, loss_fn=lambda out: loss_fn(out, y0), n_runs=int(spec.get("profile_runs", 8)))
    opt0 = torch.optim.SGD(model.parameters(), lr=0.0, momentum=0.9)
    only = []
    for k in range(6):  # forward + backward + step, no communication (lr 0: weights unchanged)
        t = time.perf_counter()
        opt0.zero_grad()
        loss_fn(model(data[k % len(data)][0]), data[k % len(data)][1]).backward()
        opt0.step()
        only.append(time.perf_counter() - t)
    del opt0
    model.zero_grad(set_to_none=True)
    dist.barrier()

    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    c0 = segs[0].config
    handle = schedule(model, opt, partition_bytes=c0.partition_bytes, credit_bytes=c0.credit_bytes,
                      timeout_s=float(spec.get("timeout_s", 600)))
    firsts = np.cumsum([0] + [s.length for s in segs]).tolist()
    # The engine records an iteration's end when the next one begins, so
    # before the forward of iteration g its window covers iterations <= g - 2.
    # A segment's measured iterations are [first + warmup, first + length):
    # reset the window before g = first + warmup + 1 and read it before
    # g = first + length + 1 (the second iteration of the next segment, or of
    # the two trailing iterations after the last one).
    reset_at = {firsts[i] + s.warmup + 1: i for i, s in enumerate(segs)}
    read_at = {firsts[i] + s.length + 1: i for i, s in enumerate(segs)}
    switch = {firsts[i]: s.config for i, s in enumerate(segs) if i > 0}
    n_total = firsts[-1] + 2  # two trailing iterations so the last window can be read
    windows: list[list[float]] = [[] for _ in segs]
    starts: list[float] = []
    for g in range(n_total):
        if g in switch:
            c = switch[g]
            handle.reconfigure(c.partition_bytes, c.credit_bytes)
        if rank == 0:
            notify_iteration(g)
        starts.append(time.perf_counter())
        if g in read_at:
            windows[read_at[g]] = handle.window_stats(reset=True).to_vector().tolist()
        if g in reset_at:
            handle.window_stats(reset=True)
        x, y = data[g % len(data)]
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()
    handle.synchronize()
    dist.barrier()
    starts.append(time.perf_counter())
    iters = np.diff(starts)
    iter_s = [iters[firsts[i] + s.warmup:firsts[i] + s.length].tolist() for i, s in enumerate(segs)]
    out = {
        "rank": rank,
        "segments": [s.to_dict() for s in segs],
        "iter_s": iter_s,
        "windows": windows,
        "tensor_bytes": [int(t.nbytes) for t in handle.tensors],
        "profile": {
            "layer_bytes": [int(b) for b in prof.layer_bytes], "forward_s": [float(v) for v in prof.forward_s],
            "backward_s": [float(v) for v in prof.backward_s], "layer_names": list(prof.layer_names),
            "batch_size": bs, "compute_only_s": [float(v) for v in only],
        },
        "info": {"spec": {k: v for k, v in spec.items() if k != "segments"}, "world_size": dist.get_world_size()},
    }
    handle.close()
    os.makedirs(out_dir, exist_ok=True)
    tmp = os.path.join(out_dir, f"rank{rank}.json.tmp")
    with open(tmp, "w") as f:
        json.dump(out, f)
    os.replace(tmp, os.path.join(out_dir, f"rank{rank}.json"))
    dist.destroy_process_group()


# --------------------------------------------------------------------------- command line
def build_parser() -> argparse.ArgumentParser:
    """``python benchmarks/collect.py``'s arguments (errors are one line, as the ``autobyte`` commands')."""
    from autobyte.cli import Parser, file_arg, int_arg, out_arg, rates_arg

    p = Parser(
        prog="benchmarks/collect.py",
        description="Real samples for the meta-network on the testbed (needs root): measure real 2-worker training windows "
                    "over link rates x configs and write them as meta-network training data (out/data.npz, the format "
                    "of `autobyte dataset generate`); or, with --evaluate, score the meta-network on held-out real windows "
                    "before and after fine-tuning on the others; or, with --finetune, fine-tune its head on them. "
                    "See docs/calibration.md.",
        epilog="examples:\n  python benchmarks/collect.py --out runs/real\n"
               "  python benchmarks/collect.py --evaluate runs/real/raw --weights meta.weights.npz --holdout rep\n"
               "  python benchmarks/collect.py --finetune runs/real/raw --weights-out my-cluster.npz\n"
               "  python benchmarks/collect.py --evaluate runs/other/raw --weights my-cluster.npz --holdout online\n",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--out", type=out_arg("--out", kind="dir"), help="output folder (raw/ and data.npz)")
    p.add_argument("--rates-mbit", type=rates_arg("--rates-mbit"), default=None,
                   help=f"comma-separated link rates, Mbit/s (default {','.join(f'{r:g}' for r in COLLECT_RATES_MBIT)})")
    p.add_argument("--reps", type=int_arg("--reps", 1, 1000), default=2, help="repetitions (conditions per rate; default 2)")
    p.add_argument("--window-iters", type=int_arg("--window-iters", 2, 10_000), default=10,
                   help="measured iterations per window (default 10)")
    p.add_argument("--model", default="cnn", choices=("cnn", "transformer", "mlp"),
                   help="the model trained (autobyte.bench.models; default cnn)")
    p.add_argument("--evaluate", nargs="+", metavar="RAW", type=file_arg("--evaluate", kind="dir"),
                   help="instead of measuring: evaluate the meta-network on these raw/ folders")
    p.add_argument("--finetune", nargs="+", metavar="RAW", type=file_arg("--finetune", kind="dir"),
                   help="instead of measuring: fine-tune the meta-network's head on every window of these raw/ folders "
                        "and write the weights to --weights-out (for AutoByteTuner(weights=...))")
    p.add_argument("--weights-out", default=None, type=out_arg("--weights-out", suffix=".npz"),
                   help="with --finetune: where to write the fine-tuned weights (.npz)")
    p.add_argument("--weights", default=None, type=file_arg("--weights"),
                   help="meta-network weights for --evaluate / --finetune (default: the shipped ones)")
    p.add_argument("--holdout", default="rep", choices=("rep", "rate", "online"),
                   help="held-out windows for --evaluate (default rep); online: every window as a live tuner meets it, "
                        "before adapting and after --n-observed windows of its condition")
    p.add_argument("--n-observed", type=int_arg("--n-observed", 1, 1000), default=5,
                   help="with --holdout online: windows seen before the head adapts (default 5)")
    p.add_argument("--report", default=None, type=out_arg("--report"), help="with --evaluate: write the result as JSON here")
    p.set_defaults(func=_command)
    return p


def _command(args: argparse.Namespace) -> int:
    from autobyte.cli import CLIError
    from autobyte.meta._cli import _check_weights
    from autobyte.testbed import TestbedError

    try:
        if args.finetune:
            if args.evaluate or args.out:
                raise CLIError("--finetune RAW goes alone: not with --evaluate or --out.")
            if not args.weights_out:
                raise CLIError("--finetune RAW needs --weights-out FILE.npz (where to write the fine-tuned weights).")
            _check_weights(args.weights)
            for raw in args.finetune:
                read_measurement(raw)
            res = finetune_meta(args.finetune, args.weights_out, weights=args.weights)
            if args.report:
                with open(args.report, "w") as f:
                    json.dump(res, f, indent=1)
            return 0
        if args.weights_out is not None:
            raise CLIError("--weights-out goes with --finetune RAW.")
        if args.evaluate:
            _check_weights(args.weights)
            for raw in args.evaluate:  # a bad raw folder is reported before the network loads
                read_measurement(raw)
            if args.holdout == "online":
                res = evaluate_meta_online(args.evaluate, weights=args.weights, n_observed=args.n_observed)
            else:
                res = evaluate_meta(args.evaluate, weights=args.weights, holdout=args.holdout)
            if args.report:
                with open(args.report, "w") as f:
                    json.dump(res, f, indent=1)
            print(json.dumps(res, indent=1))
            return 0
        if not args.out:
            raise CLIError("give --out DIR (where to write the samples) or --evaluate RAW.")
        if args.weights is not None or args.report is not None:
            raise CLIError("--weights and --report go with --evaluate RAW, not with --out.")
        from autobyte.testbed._netns import require_root

        rates = COLLECT_RATES_MBIT if args.rates_mbit is None else args.rates_mbit
        require_root()
        collect(args.out, rates_mbit=rates, reps=args.reps, window_iters=args.window_iters, model=args.model)
    except (ValueError, TypeError, FileNotFoundError) as exc:
        raise CLIError(str(exc)) from None
    except (TestbedError, OSError, RuntimeError) as exc:
        raise CLIError(str(exc), 1) from None
    return 0


def main(argv: list[str] | None = None) -> int:
    """The command line; ``rank SPEC_JSON OUT_DIR`` is the rank side (the testbed runs it on every worker)."""
    from autobyte.cli import dispatch, parse, tag_progs

    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["rank"]:
        if len(args) != 3:
            print("usage: python benchmarks/collect.py rank SPEC_JSON OUT_DIR (the testbed runs this on every worker)",
                  file=sys.stderr)
            return 2
        _rank_main(args[1], args[2])
        return 0
    parser = build_parser()
    tag_progs(parser)
    parsed = parse(parser, args)
    return parsed if isinstance(parsed, int) else dispatch(parsed)


if __name__ == "__main__":
    sys.exit(main())
