"""Real samples on the testbed: windows of real training under a grid of (rate, config).

Two users:

* :mod:`autobyte.testbed.calibrate` measures the calibration grid with it and
  fits the simulator to the measurements;
* ``autobyte collect`` (:func:`collect`) turns the same kind of measurement
  into **real rows for the meta-network**, in the simulator dataset's format
  (``docs/simulator.md``, "Dataset": ``meta.json`` + ``shard-*.npz``, loadable
  with :func:`autobyte.sim.dataset.load_dataset`), plus the raw windows as
  JSON lines.

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

The rank side runs as ``python -m autobyte.bench.collect rank SPEC_JSON OUT_DIR``.
"""

from __future__ import annotations

import json
import math
import os
import random
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from ..core.space import Config, KiB, MiB

#: Rate standing for "no network limit": above what two namespaces reach over
#: a veth pair on this CPU (11-15 Gbit/s unshaped, docs/testbed.md), so the
#: ``tbf`` never throttles; kept a real shaped rate so one trace covers the grid.
UNLIMITED_MBIT = 40000.0

#: Gradient bytes of the default CNN (``make_cnn()``: 3,386,698 FP32 parameters).
CNN_BYTES = 13_546_792


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
) -> list[Segment]:
    """Every (rate, config) ``reps`` times, interleaved.

    ``order="rate-runs"`` (default): the rates in a random order, each visited
    once, and at each rate every repetition runs the configs in a new random
    order (one launch per rate at a constant shaped rate: see :func:`measure`).
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
    if order == "rate-runs":
        rs = list(rates_mbit)
        rng.shuffle(rs)
        for r in rs:
            n = size_segment(r, target_s, min_iters=min_iters, max_iters=max_iters)
            for rep in range(reps):
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
    from ..core.metrics import WindowStats

    ranks = []
    r = 0
    while os.path.exists(os.path.join(out_dir, f"rank{r}.json")):
        with open(os.path.join(out_dir, f"rank{r}.json")) as f:
            ranks.append(json.load(f))
        r += 1
    if not ranks:
        raise FileNotFoundError(f"out_dir must hold the ranks' rank0.json, but {out_dir!r} has none (did the launch fail?).")
    segs = [Segment.from_dict(d) for d in ranks[0]["segments"]]
    windows = [[WindowStats.from_vector(rk["windows"][i]) for rk in ranks] for i in range(len(segs))]
    by_rank = [[rk["iter_s"][i] for rk in ranks] for i in range(len(segs))]
    return Measurement(segs, ranks[0]["iter_s"], windows, ranks[0]["profile"], ranks[0]["tensor_bytes"], ranks[0]["info"], by_rank)


def measure(
    segments: Sequence[Segment],
    out_dir: str,
    *,
    batch_size: int = 16,
    width: int = 32,
    hidden: int = 1536,
    profile_runs: int = 8,
    timeout_s: float = 1800.0,
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
    from ..testbed._netns import require_root

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
        parts.append(_launch(run, d, batch_size=batch_size, width=width, hidden=hidden, profile_runs=profile_runs,
                             timeout_s=max(60.0, timeout_s - (time.monotonic() - t0)), log=log))
    m = _merge(parts)
    m.info["wall_s"] = time.monotonic() - t0
    m.info["launches"] = len(parts)
    with open(os.path.join(out_dir, "measurement.json"), "w") as f:
        json.dump({"launches": [f"launch-{i:02d}" for i in range(len(parts))], "wall_s": m.info["wall_s"]}, f)
    log(f"  measured in {m.info['wall_s']:.0f} s ({len(parts)} launches)")
    return m


def _launch(segments: list[Segment], out_dir: str, *, batch_size: int, width: int, hidden: int, profile_runs: int,
            timeout_s: float, log: Callable[[str], None]) -> Measurement:
    from ..testbed import Testbed

    os.makedirs(out_dir, exist_ok=True)
    spec = {"segments": [s.to_dict() for s in segments], "batch_size": batch_size, "width": width, "hidden": hidden,
            "profile_runs": profile_runs}
    spec_path = os.path.join(out_dir, "spec.json")
    with open(spec_path, "w") as f:
        json.dump(spec, f)
    cmd = [sys.executable, "-m", "autobyte.bench.collect", "rank", spec_path, out_dir]
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


# --------------------------------------------------------------------------- rank side
def _rank_main(spec_path: str, out_dir: str) -> None:
    from ..integrations._imports import require_torch

    torch = require_torch()
    import torch.distributed as dist

    from ..integrations.torch import schedule
    from ..sim import profile_module
    from ..testbed import notify_iteration
    from .models import make_cnn, synthetic_batches

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
    data = synthetic_batches(8, bs, rank, seed=0)
    model = make_cnn(width=int(spec.get("width", 32)), hidden=int(spec.get("hidden", 1536)))
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
    # WindowStats covers iterations whose end the engine has seen: before the
    # forward of iteration g it covers iterations <= g - 2. Reset before g =
    # first + warmup + 1, read before g = first + length + 1 (next segment's
    # second... first iteration + 1): see the loop.
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


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) == 3 and args[0] == "rank":
        _rank_main(args[1], args[2])
        return 0
    print("usage: python -m autobyte.bench.collect rank SPEC_JSON OUT_DIR (the testbed runs this on every worker)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
