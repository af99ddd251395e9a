"""What a simulation returns: per-iteration times and the statistics a real engine would have measured."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..core.metrics import RuntimeFeatures, WindowStats
from ..core.scheduler import Message
from ..core.space import Config
from ._cluster import Cluster
from ._models import ModelProfile


@dataclass
class _Plan:
    """Messages of one configuration as the simulator runs them."""

    messages: list[Message]
    nbytes: np.ndarray  # (M,) payload bytes
    last_tensor: np.ndarray  # (M,) the member tensor whose gradient is ready last
    seg_msg: np.ndarray  # (S,) message of each segment
    seg_tensor: np.ndarray  # (S,) tensor of each segment
    chunks: np.ndarray  # (M,) real messages each simulated message stands for
    n_real: int


@dataclass
class _IterRecord:
    start: np.ndarray  # (n,) compute stream free = iteration start per worker
    fwd_end: np.ndarray  # (n, L) forward end per layer
    fwd: np.ndarray  # (n, L) forward compute per layer (no waits)
    bwd: np.ndarray  # (n, L) backward per layer
    grad_ready: np.ndarray  # (n, L)
    release: np.ndarray  # (M,)
    done: np.ndarray  # (M,)
    param_ready: np.ndarray  # (L,)
    end: np.ndarray  # (n,) = backward end = next iteration start
    link_Bps: float


@dataclass
class SimResult:
    """What :func:`simulate` returns.

    Attributes:
        model, cluster, config: the inputs.
        iter_time_s: ``(n_iters,)`` cluster iteration time (mean over workers).
        worker_iter_time_s: ``(n_iters, n_workers)``.
        samples_per_s: cluster throughput (sum over workers) over all iterations.
        compute_s: ``(n_iters,)`` mean pure compute time (forward + backward).
        n_messages: messages per iteration under the config.
    """

    model: ModelProfile
    cluster: Cluster
    config: Config
    iter_time_s: np.ndarray
    worker_iter_time_s: np.ndarray
    samples_per_s: float
    compute_s: np.ndarray
    n_messages: int
    _records: list[_IterRecord] = field(repr=False, default_factory=list)
    _plan: Any = field(repr=False, default=None)

    @property
    def n_iters(self) -> int:
        return int(self.iter_time_s.size)

    def worker_samples_per_s(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        """``(n_workers,)`` samples/s of each worker over iterations ``[start, stop)``."""
        t = self.worker_iter_time_s[start:stop]
        return self.model.batch_size * t.shape[0] / t.sum(axis=0)

    def window_samples_per_s(self, start: int = 0, stop: int | None = None) -> float:
        """Cluster samples/s over iterations ``[start, stop)``."""
        return float(self.worker_samples_per_s(start, stop).sum())

    def layer_comm_delay_s(self) -> np.ndarray:
        """``(n_iters, l)``: per layer, time from its gradient being ready on
        every worker to its parameters being updated (communication + waiting
        in the credit queue + update). Priority scheduling keeps it short for
        the front layers, which the next forward needs first."""
        return np.stack([r.param_ready - r.grad_ready.max(axis=0) for r in self._records])

    def window_stats(self, start: int = 0, stop: int | None = None) -> list[WindowStats]:
        """Per-worker statistics over iterations ``[start, stop)``, measured as an
        engine measures them (per-tensor backward times from gradient-ready
        timestamps, achieved bandwidth = payload bytes / time with a message in
        flight)."""
        recs = self._records[start:stop]
        if not recs:
            raise ValueError(f"window [start={start}, stop={stop}) holds no iteration of the {self.n_iters} simulated.")
        n = self.cluster.n_workers
        plan: _Plan = self._plan
        iters = np.stack([r.end - r.start for r in recs])  # (k, n)
        fwd = np.stack([r.fwd_end[:, -1] - r.start for r in recs])
        bwd = np.mean(np.stack([r.bwd for r in recs]), axis=0)  # (n, L)
        busy = 0.0
        for r in recs:
            busy += _union_length(r.release, r.done)
        if n == 1:
            payload, n_msgs = 0, 0
        else:
            payload = int(plan.nbytes.sum()) * len(recs)
            n_msgs = plan.n_real * len(recs)
        total = iters.sum(axis=0)
        out = []
        for w in range(n):
            out.append(
                WindowStats(
                    n_iters=len(recs),
                    iter_time_s=float(total[w] / len(recs)),
                    samples_per_s=float(self.model.batch_size * len(recs) / total[w]) if total[w] > 0 else 0.0,
                    forward_s=float(fwd[:, w].mean()),
                    layer_backward_s=tuple(float(x) for x in bwd[w]),
                    bytes_sent=payload,
                    n_messages=n_msgs,
                    comm_busy_s=float(busy),
                    bandwidth_Bps=float(payload / busy) if busy > 0 else 0.0,
                )
            )
        return out

    def features(self, start: int = 0, stop: int | None = None) -> RuntimeFeatures:
        """Table II features of the window, as an engine would report them."""
        return RuntimeFeatures.from_windows(
            self.cluster.arch, self.model.layer_bytes, self.window_stats(start, stop), link_factor=self.cluster.link_factor
        )

    @property
    def timeline(self) -> list[dict[str, Any]]:
        """Events for drawing: ``{"kind", "iteration", "worker", "index", "start", "end"}``.

        ``kind`` is ``"forward"`` / ``"backward"`` (``index`` = layer,
        ``start``/``end`` of the compute) or ``"message"`` (``worker`` = -1,
        ``index`` = message, from its release by the credit queue to its
        completion, with ``"bytes"``).
        """
        ev: list[dict[str, Any]] = []
        plan: _Plan = self._plan
        for it, r in enumerate(self._records):
            n, L = r.fwd.shape
            for w in range(n):
                for l in range(L):
                    e = float(r.fwd_end[w, l])
                    ev.append({"kind": "forward", "iteration": it, "worker": w, "index": l, "start": e - float(r.fwd[w, l]), "end": e})
                for l in range(L):
                    e = float(r.grad_ready[w, l])
                    ev.append({"kind": "backward", "iteration": it, "worker": w, "index": l, "start": e - float(r.bwd[w, l]), "end": e})
            for m in range(len(r.release)):
                ev.append({"kind": "message", "iteration": it, "worker": -1, "index": m, "start": float(r.release[m]),
                           "end": float(r.done[m]), "bytes": int(plan.nbytes[m])})
        return ev


def _union_length(start: np.ndarray, end: np.ndarray) -> float:
    if start.size == 0:
        return 0.0
    o = np.argsort(start, kind="stable")
    s = start[o]
    e = end[o]
    cm = np.maximum.accumulate(e)
    gaps = np.maximum(0.0, s[1:] - cm[:-1])
    return float(cm[-1] - s[0] - gaps.sum())
