"""Runtime statistics: timestamps in, per-window numbers and Table II features out.

Engines call :class:`StatsCollector` with timestamps they already have
(a gradient became ready, a message started and finished, an iteration
ended). Nothing here reads a clock, so the logic is tested by feeding
timestamps.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

ARCHITECTURES = ("allreduce", "ps")
#: iteration times a window keeps (:attr:`WindowStats.iter_times`): a collector never read stays bounded
ITER_TIMES_KEPT = 256


@dataclass(frozen=True)
class WindowStats:
    """One rank's statistics over a window of iterations (plain numbers).

    Attributes:
        n_iters: iterations in the window.
        iter_time_s: mean wall time of one iteration.
        samples_per_s: samples processed per second by this rank.
        forward_s: mean forward time per iteration (0 when unknown).
        layer_backward_s: mean backward time per gradient tensor, in tensor
            order (time from the previous gradient becoming ready).
        bytes_sent: payload bytes this rank handed to the engine.
        n_messages: messages sent.
        comm_busy_s: time during which at least one message was in flight.
        bandwidth_Bps: payload bytes / busy time (achieved throughput).
        iter_times: this rank's iteration times in the window, in order (the
            last :data:`ITER_TIMES_KEPT`), for telling a window that conditions
            changed inside (:func:`~autobyte.core.regime.within_step`). Local:
            not in :meth:`to_vector`, nor in equality; ``()`` when unknown (the
            simulator's windows, a gathered window).
    """

    n_iters: int
    iter_time_s: float
    samples_per_s: float
    forward_s: float
    layer_backward_s: tuple[float, ...]
    bytes_sent: int
    n_messages: int
    comm_busy_s: float
    bandwidth_Bps: float
    iter_times: tuple[float, ...] = field(default=(), compare=False)

    def to_dict(self) -> dict[str, object]:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}

    @property
    def busy_share(self) -> float:
        """The share of the window's wall time during which a message of this rank was in flight (0 when unknown)."""
        wall = self.n_iters * self.iter_time_s
        return min(1.0, self.comm_busy_s / wall) if wall > 0 else 0.0

    _SCALARS = ("n_iters", "iter_time_s", "samples_per_s", "forward_s", "bytes_sent", "n_messages", "comm_busy_s", "bandwidth_Bps")

    def to_vector(self) -> np.ndarray:
        """Flat float64 vector (8 scalars then per-tensor times), for a collective."""
        head = [float(getattr(self, k)) for k in self._SCALARS]
        return np.array(head + list(self.layer_backward_s), dtype=np.float64)

    @classmethod
    def from_vector(cls, vec: Sequence[float]) -> "WindowStats":
        v = [float(x) for x in vec]
        kw = dict(zip(cls._SCALARS, v[:8]))
        for k in ("n_iters", "bytes_sent", "n_messages"):
            kw[k] = int(round(kw[k]))
        return cls(layer_backward_s=tuple(v[8:]), **kw)  # type: ignore[arg-type]

    @classmethod
    def merge(cls, parts: Sequence["WindowStats"]) -> "WindowStats":
        """One rank's consecutive windows as one window (means weighted by iterations).

        Raises:
            ValueError: ``parts`` is empty or holds windows of different tensor counts.
        """
        if not parts:
            raise ValueError("parts must hold at least one WindowStats to merge, but got none.")
        if len(parts) == 1:
            return parts[0]
        widths = {len(p.layer_backward_s) for p in parts}
        if len(widths) != 1:
            raise ValueError(f"windows to merge must have the same number of tensors, but got {sorted(widths)}.")
        n = np.array([p.n_iters for p in parts], dtype=np.float64)
        if n.sum() <= 0:
            raise ValueError("windows to merge hold zero iterations in total.")
        w = n / n.sum()
        times = np.array([p.iter_time_s * p.n_iters for p in parts])
        samples = np.array([p.samples_per_s * p.iter_time_s * p.n_iters for p in parts])
        layer = np.array([p.layer_backward_s for p in parts], dtype=np.float64)
        nbytes = sum(p.bytes_sent for p in parts)
        busy = float(sum(p.comm_busy_s for p in parts))
        return cls(
            n_iters=int(n.sum()),
            iter_time_s=float(times.sum() / n.sum()),
            samples_per_s=float(samples.sum() / times.sum()) if times.sum() > 0 else 0.0,
            forward_s=float(np.dot(w, [p.forward_s for p in parts])),
            layer_backward_s=tuple(float(x) for x in w @ layer),
            bytes_sent=nbytes,
            n_messages=sum(p.n_messages for p in parts),
            comm_busy_s=busy,
            bandwidth_Bps=nbytes / busy if busy > 0 else 0.0,
            iter_times=tuple(t for p in parts for t in p.iter_times)[-ITER_TIMES_KEPT:],
        )


@dataclass
class StatsCollector:
    """Accumulates timestamps of one rank into :class:`WindowStats`.

    Memory is bounded whatever the window length: iterations and messages
    are folded into running sums as they arrive (a job that never reads a
    window, e.g. ``tuner=None``, keeps a constant footprint).

    Args:
        n_tensors: number of gradient tensors the engine tracks.
    """

    n_tensors: int
    _n_iters: int = 0
    _iter_total: float = 0.0
    _samples: int = 0
    _fwd_total: float = 0.0
    _fwd_n: int = 0
    _layer_sum: np.ndarray = field(init=False)
    _layer_n: int = 0
    _bytes: int = 0
    _n_msgs: int = 0
    _busy: "_BusyTime" = field(init=False)
    _iter_start: float | None = None
    _fwd_end: float | None = None
    _ready: dict[int, float] = field(default_factory=dict)
    _times: deque[float] = field(init=False)

    def __post_init__(self) -> None:
        if self.n_tensors <= 0:
            raise ValueError(f"n_tensors must be positive, but got n_tensors={self.n_tensors}.")
        self._layer_sum = np.zeros(self.n_tensors)
        self._busy = _BusyTime()
        self._times = deque(maxlen=ITER_TIMES_KEPT)

    def begin_iteration(self, t: float) -> None:
        self._iter_start = t
        self._fwd_end = None
        self._ready = {}

    def forward_done(self, t: float) -> None:
        if self._iter_start is not None and self._fwd_end is None:
            self._fwd_end = t
            self._fwd_total += t - self._iter_start
            self._fwd_n += 1

    def grad_ready(self, tensor: int, t: float) -> None:
        self._ready.setdefault(tensor, t)

    def message_done(self, nbytes: int, t_start: float, t_end: float) -> None:
        self._bytes += int(nbytes)
        self._n_msgs += 1
        self._busy.add(t_start, max(t_start, t_end))

    def end_iteration(self, t: float, n_samples: int) -> None:
        if self._iter_start is None:
            return
        self._n_iters += 1
        self._iter_total += t - self._iter_start
        self._times.append(t - self._iter_start)
        self._samples += int(n_samples)
        if len(self._ready) == self.n_tensors:
            prev = self._fwd_end if self._fwd_end is not None else min(self._ready.values())
            for tensor, ts in sorted(self._ready.items(), key=lambda kv: kv[1]):
                self._layer_sum[tensor] += max(0.0, ts - prev)
                prev = ts
            self._layer_n += 1
        self._iter_start = None

    @property
    def n_iters(self) -> int:
        return self._n_iters

    def window(self, reset: bool = True) -> WindowStats:
        """Summarise the iterations recorded since the last reset.

        Raises:
            ValueError: no iteration was recorded (a window with zero samples).
        """
        if not self._n_iters:
            raise ValueError("window has no completed iteration; record at least one before asking for statistics.")
        total = self._iter_total
        busy = self._busy.total()
        layer = self._layer_sum / self._layer_n if self._layer_n else np.zeros(self.n_tensors)
        ws = WindowStats(
            n_iters=self._n_iters,
            iter_time_s=total / self._n_iters,
            samples_per_s=self._samples / total if total > 0 else 0.0,
            forward_s=self._fwd_total / self._fwd_n if self._fwd_n else 0.0,
            layer_backward_s=tuple(float(x) for x in layer),
            bytes_sent=self._bytes,
            n_messages=self._n_msgs,
            comm_busy_s=busy,
            bandwidth_Bps=self._bytes / busy if busy > 0 else 0.0,
            iter_times=tuple(self._times),
        )
        if reset:
            self.reset()
        return ws

    def reset(self) -> None:
        self._n_iters = self._samples = self._bytes = self._n_msgs = self._layer_n = self._fwd_n = 0
        self._iter_total = self._fwd_total = 0.0
        self._layer_sum = np.zeros(self.n_tensors)
        self._times.clear()
        self._busy = _BusyTime()


class _BusyTime:
    """Length of the union of time intervals, in bounded memory.

    Intervals arrive roughly in start order (messages complete about in the
    order they were issued). Up to ``keep`` recent ones are held unmerged;
    beyond that, all but the latest are merged and folded into a running
    total, and later intervals are clipped to start after what was folded.
    """

    def __init__(self, keep: int = 256) -> None:
        self.keep = keep
        self._folded = 0.0
        self._floor = -math.inf
        self._open: list[tuple[float, float]] = []

    def add(self, start: float, end: float) -> None:
        start = max(start, self._floor)
        if end <= start:
            return
        self._open.append((start, end))
        if len(self._open) > 2 * self.keep:
            merged = _merge(self._open)
            old, self._open = merged[:-self.keep], merged[-self.keep:]
            self._folded += sum(e - s for s, e in old)
            self._floor = max(self._floor, old[-1][1]) if old else self._floor

    def total(self) -> float:
        return self._folded + sum(e - s for s, e in _merge(self._open))


def _merge(intervals: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            if e > out[-1][1]:
                out[-1] = (out[-1][0], e)
        else:
            out.append((s, e))
    return out


@dataclass(frozen=True)
class RuntimeFeatures:
    """The meta-network's input for one job (the paper's Table II, extended).

    Attributes:
        arch: ``"allreduce"`` or ``"ps"``.
        layer_bytes: ``(l,)`` gradient bytes per layer, layer 0 nearest the
            input; describes the model (replaces the paper's model one-hot).
        layer_time_s: ``(l, n)`` per-layer backward time of every worker (T).
        forward_s: ``(n,)`` forward time of every worker.
        bw_up_Bps, bw_down_Bps: ``(n,)`` achieved upload / download rate (B_u, B_d).
        speed: ``(n,)`` samples/s of every worker (V).

    Raises:
        ValueError: unknown ``arch``, shapes that disagree, NaN, inf or negative values.
    """

    arch: str
    layer_bytes: np.ndarray
    layer_time_s: np.ndarray
    forward_s: np.ndarray
    bw_up_Bps: np.ndarray
    bw_down_Bps: np.ndarray
    speed: np.ndarray

    def __post_init__(self) -> None:
        if self.arch not in ARCHITECTURES:
            raise ValueError(f"arch must be one of {ARCHITECTURES}, but got arch={self.arch!r}.")
        for name in ("layer_bytes", "layer_time_s", "forward_s", "bw_up_Bps", "bw_down_Bps", "speed"):
            arr = np.asarray(getattr(self, name), dtype=np.float64)
            object.__setattr__(self, name, arr)
            if arr.size == 0:
                raise ValueError(f"{name} must not be empty (missing statistics).")
            if not np.all(np.isfinite(arr)):
                raise ValueError(f"{name} must be finite, but it holds NaN or inf: {arr!r}.")
            if np.any(arr < 0):
                raise ValueError(f"{name} must be non-negative, but got min {arr.min()}.")
        if self.layer_bytes.ndim != 1 or self.layer_time_s.ndim != 2:
            raise ValueError("layer_bytes must be 1-D (l,) and layer_time_s 2-D (l, n).")
        l, n = self.layer_time_s.shape
        if self.layer_bytes.shape != (l,):
            raise ValueError(f"layer_bytes must have shape ({l},) to match layer_time_s {self.layer_time_s.shape}, but got {self.layer_bytes.shape}.")
        for name in ("forward_s", "bw_up_Bps", "bw_down_Bps", "speed"):
            if getattr(self, name).shape != (n,):
                raise ValueError(f"{name} must have shape ({n},) for n={n} workers, but got {getattr(self, name).shape}.")

    @property
    def n_workers(self) -> int:
        return int(self.layer_time_s.shape[1])

    @property
    def n_layers(self) -> int:
        return int(self.layer_time_s.shape[0])

    @classmethod
    def from_windows(
        cls, arch: str, layer_bytes: Sequence[int] | np.ndarray, windows: Sequence[WindowStats], link_factor: float = 1.0
    ) -> "RuntimeFeatures":
        """Features from every rank's :class:`WindowStats` (rank order).

        ``link_factor`` converts payload throughput into link throughput
        (ring all-reduce moves ``2(n-1)/n`` of the payload over each link).
        """
        if not windows:
            raise ValueError("windows must hold one WindowStats per worker, but got none.")
        T = np.array([w.layer_backward_s for w in windows], dtype=np.float64).T
        bw = np.array([w.bandwidth_Bps * link_factor for w in windows])
        return cls(
            arch=arch,
            layer_bytes=np.asarray(layer_bytes, dtype=np.float64),
            layer_time_s=T,
            forward_s=np.array([w.forward_s for w in windows]),
            bw_up_Bps=bw,
            bw_down_Bps=bw,
            speed=np.array([w.samples_per_s for w in windows]),
        )
