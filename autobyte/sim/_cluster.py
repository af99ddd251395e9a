"""The simulated cluster and the traces that change it between iterations."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence, Union

import numpy as np

from ..core.metrics import ARCHITECTURES

#: 1 Gbit/s in bytes per second.
GBPS = 1e9 / 8

#: Default one-way latency of one network hop (one ring step, or half of a PS
#: request/response round trip): 25 us, typical of kernel TCP between hosts in
#: one rack (the paper's testbed runs TCP). Refit by testbed calibration.
DEFAULT_LATENCY_S = 25e-6

#: Default serial CPU cost of handling one message in the scheduler and the
#: engine (queueing, op launch, request/response bookkeeping): 100 us. This is
#: the cost that makes tiny partitions slow (paper §II-D, "partition
#: overhead"); with it ResNet-50's best partition at 10 Gbps falls near 1 MB,
#: as in the paper's Fig. 3. Refit by testbed calibration.
DEFAULT_PER_MESSAGE_S = 100e-6

#: Rate at which a worker applies an optimizer update, bytes of parameters per
#: second (SGD with momentum reads/writes ~4 FP32 arrays; ~1/4 of V100's 900 GB/s).
DEFAULT_UPDATE_BPS = 200e9

#: Rate at which a parameter server sums pushed gradients and updates, bytes per
#: second per server (CPU memory bandwidth of a server process, MXNet KVStore).
DEFAULT_PS_AGGREGATE_BPS = 10e9

#: Default goodput loss per additional concurrent transfer on a link: with k
#: transfers in flight the link delivers 1 / (1 + contention * (k - 1)) of its
#: rate. Many concurrent TCP flows into one bottleneck lose goodput to queue
#: build-up, drops and retransmissions (TCP incast: Vasudevan et al.,
#: SIGCOMM 2009; Chen et al., WREN 2009); ByteScheduler's paper names this as
#: the cost of a large credit. 2% per flow is an assumption, refit by testbed
#: calibration.
DEFAULT_CONTENTION = 0.02

#: A PS message of at least this many bytes is sliced over all servers; a
#: smaller one goes to one server. MXNet KVStore's MXNET_KVSTORE_BIGARRAY_BOUND
#: default is 1,000,000 elements (4,000,000 bytes in FP32).
DEFAULT_PS_BIGARRAY_BYTES = 4_000_000

#: Default rate at which a worker casts gradients between fp32 and 16 bits, in
#: bytes of fp32 gradient per second of one pass (a 16-bit message pays one pass
#: before it is sent, cast + divide, and one after it arrives, cast back):
#: 315 GB/s, the V100 roofline of the simulator's zoo (900 GB/s x 0.70 of
#: memory bandwidth; the two passes move 10 + 6 bytes per element). The
#: testbed's CPU, one thread: ``cast_Bps`` in ``autobyte/sim/data/calibration.json``,
#: measured by ``benchmarks/cast_rate.py`` (docs/simulator.md).
DEFAULT_CAST_BPS = 315e9

#: Default compute jitter: log-normal sigma of per-iteration, per-worker compute speed.
DEFAULT_JITTER = 0.02

ArrayLike = Union[float, Sequence[float], np.ndarray]


def _per_worker(name: str, value: ArrayLike, n: int, *, allow_inf: bool = False, allow_zero: bool = False) -> np.ndarray:
    arr = np.asarray(value, dtype=np.float64)
    if arr.ndim == 0:
        arr = np.full(n, float(arr))
    if arr.shape != (n,):
        raise ValueError(f"{name} must be a scalar or have shape ({n},) (one value per worker), but got shape {arr.shape}.")
    if np.any(np.isnan(arr)) or (not allow_inf and np.any(np.isinf(arr))):
        raise ValueError(f"{name} must be finite, but got {name}={arr.tolist()!r}.")
    bad = arr < 0 if allow_zero else arr <= 0
    if np.any(bad):
        rule = "non-negative" if allow_zero else "positive"
        raise ValueError(f"{name} must be {rule}, but got {name}={arr.tolist()!r}.")
    arr.setflags(write=False)
    return arr


def _nonneg(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.number)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a finite non-negative number, but got {name}={value!r}.")
    return float(value)


@dataclass(frozen=True)
class Cluster:
    """Workers, their links and the communication architecture.

    Args:
        n_workers: number of data-parallel workers (>= 1).
        arch: ``"allreduce"`` (ring) or ``"ps"`` (parameter servers co-located
            with the workers, one per worker, as in the paper).
        bw_up_Bps, bw_down_Bps: link bandwidth of each worker, bytes/s
            (scalar or one per worker; ``math.inf`` allowed for what-if).
            Default 10 Gbit/s.
        latency_s: one-way latency per hop.
        per_message_s: serial CPU cost per message on the sending side.
        compute_scale: compute-time multiplier per worker (2.0 = twice slower).
        jitter: log-normal sigma of compute speed per iteration and worker.
        update_Bps: optimizer update rate on a worker (all-reduce), bytes/s.
        ps_aggregate_Bps: gradient summation + update rate of one server, bytes/s.
        ps_bigarray_bytes: PS messages this large are sliced over all servers
            (see :data:`DEFAULT_PS_BIGARRAY_BYTES`); ``inf`` = never.
        contention: goodput loss per extra concurrent transfer (see
            :data:`DEFAULT_CONTENTION`).
        cast_Bps: rate of one cast between fp32 and 16 bits, bytes of fp32
            gradient per second (see :data:`DEFAULT_CAST_BPS`); used only by
            configurations with a 16-bit ``wire`` and DDP's compression hooks.

    Raises:
        ValueError: unknown ``arch``, ``n_workers < 1``, zero / negative / NaN
            bandwidth, negative latency or overhead, bad shapes.

    Example:
        >>> Cluster(8, "allreduce", bw_up_Bps=10 * GBPS, bw_down_Bps=10 * GBPS)  # doctest: +ELLIPSIS
        Cluster(n_workers=8, ...)
    """

    n_workers: int
    arch: str = "allreduce"
    bw_up_Bps: ArrayLike = 10 * GBPS
    bw_down_Bps: ArrayLike = 10 * GBPS
    latency_s: float = DEFAULT_LATENCY_S
    per_message_s: float = DEFAULT_PER_MESSAGE_S
    compute_scale: ArrayLike = 1.0
    jitter: float = DEFAULT_JITTER
    update_Bps: float = DEFAULT_UPDATE_BPS
    ps_aggregate_Bps: float = DEFAULT_PS_AGGREGATE_BPS
    contention: float = DEFAULT_CONTENTION
    ps_bigarray_bytes: float = DEFAULT_PS_BIGARRAY_BYTES
    cast_Bps: float = DEFAULT_CAST_BPS

    def __post_init__(self) -> None:
        n = self.n_workers
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(f"n_workers must be a positive integer, but got n_workers={n!r}.")
        object.__setattr__(self, "n_workers", int(n))
        if self.arch not in ARCHITECTURES:
            raise ValueError(f"arch must be one of {ARCHITECTURES}, but got arch={self.arch!r}.")
        object.__setattr__(self, "bw_up_Bps", _per_worker("bw_up_Bps", self.bw_up_Bps, n, allow_inf=True))
        object.__setattr__(self, "bw_down_Bps", _per_worker("bw_down_Bps", self.bw_down_Bps, n, allow_inf=True))
        object.__setattr__(self, "compute_scale", _per_worker("compute_scale", self.compute_scale, n, allow_zero=True))
        for nm in ("latency_s", "per_message_s", "jitter", "contention"):
            object.__setattr__(self, nm, _nonneg(nm, getattr(self, nm)))
        for nm in ("update_Bps", "ps_aggregate_Bps", "ps_bigarray_bytes", "cast_Bps"):
            v = getattr(self, nm)
            if isinstance(v, bool) or not isinstance(v, (int, float, np.number)) or math.isnan(v) or v <= 0:
                raise ValueError(f"{nm} must be a positive number (inf allowed), but got {nm}={v!r}.")
            object.__setattr__(self, nm, float(v))

    @classmethod
    def from_gbps(cls, n_workers: int, gbps: float, arch: str = "allreduce", **kwargs: object) -> "Cluster":
        """A cluster whose every link runs at ``gbps`` Gbit/s both ways."""
        if isinstance(gbps, bool) or not isinstance(gbps, (int, float, np.number)) or math.isnan(gbps) or gbps <= 0:
            raise ValueError(f"gbps must be a positive number, but got gbps={gbps!r}.")
        return cls(n_workers, arch, bw_up_Bps=gbps * GBPS, bw_down_Bps=gbps * GBPS, **kwargs)  # type: ignore[arg-type]

    def replace(self, **changes: object) -> "Cluster":
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        d.update(changes)
        return Cluster(**d)  # type: ignore[arg-type]

    @property
    def link_factor(self) -> float:
        """Link bytes per payload byte (2(n-1)/n for both ring all-reduce and
        co-located PS); converts achieved payload throughput to link rate."""
        n = self.n_workers
        return 2.0 * (n - 1) / n if n > 1 else 1.0


def _check_starts(name: str, start_iters: Sequence[int]) -> np.ndarray:
    s = np.asarray(start_iters)
    if s.ndim != 1 or s.size == 0:
        raise ValueError(f"{name}.start_iters must be a non-empty 1-D sequence of iterations, but got shape {s.shape}.")
    if not np.issubdtype(s.dtype, np.integer):
        if not np.all(np.isfinite(s.astype(np.float64))) or np.any(s != np.round(s)):
            raise ValueError(f"{name}.start_iters must be integers, but got {s.tolist()!r}.")
        s = s.astype(np.int64)
    if s[0] != 0:
        raise ValueError(
            f"{name}.start_iters must begin at iteration 0 (a trace must cover every iteration, no gap at the start), "
            f"but got start_iters[0]={int(s[0])}."
        )
    if np.any(np.diff(s) <= 0):
        raise ValueError(f"{name}.start_iters must be strictly increasing (no gaps or overlaps), but got {s.tolist()!r}.")
    return s.astype(np.int64)


def _check_values(name: str, values: ArrayLike, n_steps: int, *, allow_inf: bool) -> np.ndarray:
    v = np.asarray(values, dtype=np.float64)
    if v.ndim not in (1, 2) or v.shape[0] != n_steps:
        raise ValueError(
            f"{name} must have shape ({n_steps},) or ({n_steps}, n_workers) (one value per step), but got shape {v.shape}."
        )
    if np.any(np.isnan(v)) or (not allow_inf and np.any(np.isinf(v))):
        raise ValueError(f"{name} must not hold NaN{'' if allow_inf else ' or inf'}, but got {v.tolist()!r}.")
    if np.any(v <= 0):
        raise ValueError(f"{name} must be positive, but got {v.tolist()!r}.")
    return v


@dataclass(frozen=True)
class BandwidthTrace:
    """Link bandwidth as a step function of the iteration.

    Step ``i`` holds from iteration ``start_iters[i]`` until the next start
    (the last step holds for ever). Values replace the cluster's bandwidth
    from that iteration's communication on, so a change lands at an iteration
    boundary, as when a competing job starts or stops.

    Args:
        start_iters: first iteration of each step; must begin at 0 and increase.
        up_Bps: ``(steps,)`` or ``(steps, n_workers)`` upload bandwidth, bytes/s.
        down_Bps: same for download; default: equal to ``up_Bps``.

    Raises:
        ValueError: a first step not at 0, non-increasing steps, NaN, zero or
            negative values, shapes that disagree.
    """

    start_iters: Sequence[int]
    up_Bps: ArrayLike
    down_Bps: ArrayLike | None = None

    def __post_init__(self) -> None:
        s = _check_starts("BandwidthTrace", self.start_iters)
        object.__setattr__(self, "start_iters", s)
        up = _check_values("BandwidthTrace.up_Bps", self.up_Bps, s.size, allow_inf=True)
        down = up if self.down_Bps is None else _check_values("BandwidthTrace.down_Bps", self.down_Bps, s.size, allow_inf=True)
        object.__setattr__(self, "up_Bps", up)
        object.__setattr__(self, "down_Bps", down)

    @classmethod
    def from_gbps(cls, start_iters: Sequence[int], gbps: ArrayLike) -> "BandwidthTrace":
        g = np.asarray(gbps, dtype=np.float64)
        return cls(start_iters, g * GBPS)

    @classmethod
    def alternating(cls, gbps: Sequence[float], every: int, n_iters: int) -> "BandwidthTrace":
        """Cycle through ``gbps`` every ``every`` iterations (the paper's Fig. 6 set-up)."""
        if every <= 0:
            raise ValueError(f"every must be a positive number of iterations, but got every={every!r}.")
        starts = list(range(0, max(1, n_iters), every))
        return cls.from_gbps(starts, [gbps[i % len(gbps)] for i in range(len(starts))])

    def at(self, iteration: int, n_workers: int) -> tuple[np.ndarray, np.ndarray]:
        i = int(np.searchsorted(self.start_iters, iteration, side="right")) - 1
        up = np.broadcast_to(np.asarray(self.up_Bps)[i], (n_workers,))
        down = np.broadcast_to(np.asarray(self.down_Bps)[i], (n_workers,))
        return up, down


@dataclass(frozen=True)
class ComputeTrace:
    """Compute-time multiplier per worker as a step function of the iteration.

    Multiplies the cluster's ``compute_scale``: 2.0 = compute twice as slow
    (another job sharing the GPU, a straggler).

    Args:
        start_iters: first iteration of each step; must begin at 0 and increase.
        scale: ``(steps,)`` or ``(steps, n_workers)`` positive multipliers.

    Raises:
        ValueError: as :class:`BandwidthTrace`; inf is rejected.
    """

    start_iters: Sequence[int]
    scale: ArrayLike

    def __post_init__(self) -> None:
        s = _check_starts("ComputeTrace", self.start_iters)
        object.__setattr__(self, "start_iters", s)
        object.__setattr__(self, "scale", _check_values("ComputeTrace.scale", self.scale, s.size, allow_inf=False))

    def at(self, iteration: int, n_workers: int) -> np.ndarray:
        i = int(np.searchsorted(self.start_iters, iteration, side="right")) - 1
        return np.broadcast_to(np.asarray(self.scale)[i], (n_workers,))


Trace = Union[BandwidthTrace, ComputeTrace]


@dataclass
class _Resolved:
    """Per-iteration conditions: arrays (n_iters, n_workers)."""

    up: np.ndarray
    down: np.ndarray
    scale: np.ndarray
    extra: dict[str, object] = field(default_factory=dict)


def resolve_traces(cluster: Cluster, traces: Sequence[Trace] | Trace | None, n_iters: int) -> _Resolved:
    """Per-iteration bandwidth and compute scale, shape ``(n_iters, n_workers)``."""
    n = cluster.n_workers
    up = np.tile(np.asarray(cluster.bw_up_Bps), (n_iters, 1))
    down = np.tile(np.asarray(cluster.bw_down_Bps), (n_iters, 1))
    scale = np.tile(np.asarray(cluster.compute_scale), (n_iters, 1))
    if traces is None:
        return _Resolved(up, down, scale)
    if isinstance(traces, (BandwidthTrace, ComputeTrace)):
        traces = [traces]
    seen_bw = seen_c = False
    for tr in traces:
        if isinstance(tr, BandwidthTrace):
            if seen_bw:
                raise ValueError("traces must hold at most one BandwidthTrace, but got two.")
            seen_bw = True
            for name, vals in (("up_Bps", tr.up_Bps), ("down_Bps", tr.down_Bps)):
                v = np.asarray(vals)
                if v.ndim == 2 and v.shape[1] != n:
                    raise ValueError(f"BandwidthTrace.{name} must have {n} columns (one per worker), but got shape {v.shape}.")
            idx = np.searchsorted(tr.start_iters, np.arange(n_iters), side="right") - 1
            u = np.asarray(tr.up_Bps)[idx]
            d = np.asarray(tr.down_Bps)[idx]
            up = np.broadcast_to(u[:, None] if u.ndim == 1 else u, (n_iters, n)).copy()
            down = np.broadcast_to(d[:, None] if d.ndim == 1 else d, (n_iters, n)).copy()
        elif isinstance(tr, ComputeTrace):
            if seen_c:
                raise ValueError("traces must hold at most one ComputeTrace, but got two.")
            seen_c = True
            v = np.asarray(tr.scale)
            if v.ndim == 2 and v.shape[1] != n:
                raise ValueError(f"ComputeTrace.scale must have {n} columns (one per worker), but got shape {v.shape}.")
            idx = np.searchsorted(tr.start_iters, np.arange(n_iters), side="right") - 1
            s = v[idx]
            scale = scale * (s[:, None] if s.ndim == 1 else s)
        else:
            raise TypeError(f"traces must be BandwidthTrace or ComputeTrace objects, but got {tr!r}.")
    return _Resolved(up, down, scale)
