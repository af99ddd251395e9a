"""PyTorch ``DistributedDataParallel`` as DDP runs, on the simulator's link and compute model.

What DDP does (``torch/nn/parallel/distributed.py`` and the C++ ``Reducer``,
torch 2.13 here; checked against the real Reducer in ``tests/sim/test_ddp.py``):

* **Buckets.** After its first iteration the Reducer rebuilds its buckets from
  the order in which gradients became ready (for a feed-forward model, the
  reverse of registration order: the last layer first), with
  ``compute_bucket_assignment_by_size``: tensors are added to the open
  bucket, and the bucket closes as soon as its size **reaches** the current
  limit (so a bucket may overshoot it by up to one tensor); the first bucket's
  limit is ``first_bucket_bytes``, every later one's ``bucket_cap_mb``.
  ``bucket_cap_mb=None`` means 25 MiB with a 1 MiB first bucket
  (``torch.distributed._DEFAULT_FIRST_BUCKET_BYTES``); an explicit
  ``bucket_cap_mb`` also sets the first bucket (``_BucketCapacityConfig``:
  the 1 MiB first bucket is kept only for the default); ``bucket_cap_mb_list``
  sets each bucket's limit, the last one repeating.
* **Communication.** A bucket's all-reduce starts when its last gradient is
  ready on every rank; buckets are reduced in bucket order, one after the
  other (no priority: a bucket holding the first layers goes last), each
  paying the per-message cost and the ring's ``2(n-1)`` steps of latency.
* **No cross-iteration overlap.** ``backward()`` returns when every bucket is
  reduced; then the optimizer step runs over all parameters, then the next
  forward, which waits for nothing.

* **Compression hooks** (``hook="bf16"`` / ``"fp16"``:
  ``register_comm_hook(None, bf16_compress_hook)``, ``fp16_compress_hook``,
  ``torch/distributed/algorithms/ddp_comm_hooks/default_hooks.py``): a bucket
  travels in 16 bits (half its bytes). The hook casts it (``buffer.to(dtype)
  .div_(world_size)``) when the Reducer calls it, from the autograd hook of
  the bucket's last gradient: on the backward's thread (CPU) or stream (GPU),
  so the cast delays the rest of the backward. The cast back runs in the
  all-reduce future's ``then`` callback, serial over buckets, before
  ``backward()`` returns. Both at ``cluster.cast_Bps``.

Compute, jitter, link, latency and per-message cost are the simulator's
(:class:`~autobyte.sim.Cluster`, same meaning and calibration as for the
scheduled engine); the message transfers reuse the engine's exact
processor-sharing model (``_engine._comm``) with a window of one bucket.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..core.scheduler import Message, Segment
from ._cluster import Cluster
from ._engine import _comm, _Plan, cast_s
from ._models import ModelProfile

#: ``torch.distributed._DEFAULT_FIRST_BUCKET_BYTES``.
FIRST_BUCKET_BYTES = 1 << 20
#: DDP's default ``bucket_cap_mb``.
DEFAULT_BUCKET_CAP_MB = 25.0
#: DDP's compression hooks by the precision they send: ``hook=`` of :func:`simulate_ddp`.
HOOKS: dict[str, str] = {"bf16": "bf16_compress_hook", "fp16": "fp16_compress_hook"}
_MB = 1 << 20


def _check_mb(name: str, value: object, *, allow_none: bool = False) -> float | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive number of MiB, but got {name}={value!r}.")
    return float(value)


def bucket_limits(bucket_cap_mb: float | None = None, first_bucket_mb: float | None = None) -> tuple[int, int]:
    """``(first_bucket_bytes, bucket_bytes)`` DDP uses for ``bucket_cap_mb``.

    Args:
        bucket_cap_mb: as passed to ``DistributedDataParallel`` (``None``: the default, 25 MiB).
        first_bucket_mb: the first bucket's limit; ``None`` (default): what
            ``bucket_cap_mb`` implies in current PyTorch (1 MiB for the default,
            ``bucket_cap_mb`` otherwise). Pass 1 for ``bucket_cap_mb_list=[1, cap]``
            or for older PyTorch releases, whose first bucket was always 1 MiB.

    Raises:
        ValueError: a non-positive or non-finite size.
    """
    cap = _check_mb("bucket_cap_mb", bucket_cap_mb, allow_none=True)
    first = _check_mb("first_bucket_mb", first_bucket_mb, allow_none=True)
    cap_b = int((DEFAULT_BUCKET_CAP_MB if cap is None else cap) * _MB)
    if first is not None:
        first_b = int(first * _MB)
    else:
        first_b = FIRST_BUCKET_BYTES if cap is None else cap_b
    return first_b, cap_b


def ddp_buckets(tensor_bytes: Sequence[int], bucket_bytes: int, first_bucket_bytes: int | None = None,
                *, ready_order: Sequence[int] | None = None) -> list[list[int]]:
    """The buckets DDP's Reducer forms over tensors, in reduction order.

    Args:
        tensor_bytes: gradient bytes of each tensor, in registration order
            (``model.parameters()``; index 0 nearest the input).
        bucket_bytes: the limit of every bucket after the first.
        first_bucket_bytes: the first bucket's limit (default ``bucket_bytes``).
        ready_order: tensor indices in the order their gradients become ready
            (default: reverse registration order, as in a feed-forward model).

    Returns:
        a list of buckets, each the list of its tensor indices in ready order;
        bucket 0 is reduced first.

    Raises:
        ValueError: no tensor, a negative size, a non-positive limit, or a
            ``ready_order`` that is not a permutation of the tensors.
    """
    sizes = [int(b) for b in tensor_bytes]
    if not sizes:
        raise ValueError("tensor_bytes must hold at least one tensor, but got none.")
    if any(b < 0 for b in sizes):
        raise ValueError(f"tensor_bytes must be non-negative, but got tensor_bytes={sizes!r}.")
    for nm, v in (("bucket_bytes", bucket_bytes), ("first_bucket_bytes", first_bucket_bytes)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v <= 0):
            raise ValueError(f"{nm} must be a positive integer, but got {nm}={v!r}.")
    order = list(range(len(sizes) - 1, -1, -1)) if ready_order is None else [int(i) for i in ready_order]
    if sorted(order) != list(range(len(sizes))):
        raise ValueError(f"ready_order must be a permutation of range({len(sizes)}), but got ready_order={list(ready_order or [])!r}.")
    limits = [int(first_bucket_bytes if first_bucket_bytes is not None else bucket_bytes), int(bucket_bytes)]
    out: list[list[int]] = []
    cur: list[int] = []
    size = 0
    for i in order:
        cur.append(i)
        size += sizes[i]
        if size >= limits[min(len(out), 1)]:
            out.append(cur)
            cur, size = [], 0
    if cur:
        out.append(cur)
    return out


@dataclass
class DDPResult:
    """What :func:`simulate_ddp` returns.

    Attributes:
        model, cluster: the inputs.
        bucket_cap_mb, first_bucket_mb: the bucket limits simulated (MiB).
        buckets: layer indices of each bucket, in reduction order.
        bucket_bytes: ``(n_buckets,)`` payload bytes.
        iter_time_s: ``(n_iters,)`` cluster iteration time (mean over workers).
        samples_per_s: cluster throughput (sum over workers).
        compute_s: mean compute per iteration with no communication
            (forward + backward + optimizer step): the compute-only bound.
        step_s: optimizer step per iteration (before compute scale and jitter).
        hook: the compression hook simulated (``"bf16"``, ``"fp16"``) or ``None``.
    """

    model: ModelProfile
    cluster: Cluster
    bucket_cap_mb: float
    first_bucket_mb: float
    buckets: list[list[int]]
    bucket_bytes: np.ndarray
    iter_time_s: np.ndarray
    samples_per_s: float
    compute_s: float
    step_s: float
    hook: str | None = None

    @property
    def n_buckets(self) -> int:
        return len(self.buckets)

    @property
    def compute_samples_per_s(self) -> float:
        """Throughput of the compute-only bound (no communication at all)."""
        return self.cluster.n_workers * self.model.batch_size / self.compute_s if self.compute_s > 0 else math.inf


def default_step_s(model: ModelProfile, cluster: Cluster) -> float:
    """Optimizer step time the simulator assumes: every parameter byte at ``cluster.update_Bps``."""
    return float(model.total_bytes / cluster.update_Bps)


def simulate_ddp(
    model: ModelProfile,
    cluster: Cluster,
    bucket_cap_mb: float | None = None,
    *,
    first_bucket_mb: float | None = None,
    step_s: float | None = None,
    n_iters: int = 5,
    warmup_iters: int = 1,
    seed: int = 0,
    hook: str | None = None,
) -> DDPResult:
    """Simulate ``n_iters`` iterations of ``DistributedDataParallel(model, bucket_cap_mb=...)``.

    One tensor per layer of ``model`` (a layer's weight and bias become ready
    together); ring all-reduce only (DDP has no parameter server).

    Args:
        model: a :class:`ModelProfile`.
        cluster: the :class:`Cluster` (``arch="allreduce"``).
        bucket_cap_mb: DDP's argument; ``None`` is its default (25 MiB, 1 MiB first bucket).
        first_bucket_mb: see :func:`bucket_limits`.
        step_s: optimizer step per iteration in seconds (scaled by
            ``cluster.compute_scale`` and jitter); default :func:`default_step_s`.
        n_iters, warmup_iters, seed: iterations reported, dropped first, jitter seed.
        hook: ``None`` (default: fp32 buckets), ``"bf16"`` for
            ``bf16_compress_hook`` or ``"fp16"`` for ``fp16_compress_hook``
            (half the bytes on the wire, casts at ``cluster.cast_Bps``; see
            the module's docstring).

    Returns:
        :class:`DDPResult`.

    Raises:
        TypeError: ``model`` or ``cluster`` of the wrong type.
        ValueError: a parameter-server cluster, bad sizes or counts, an unknown ``hook``.
    """
    if not isinstance(model, ModelProfile):
        raise TypeError(f"model must be a ModelProfile (see autobyte.sim.get_model), but got model={model!r}.")
    if not isinstance(cluster, Cluster):
        raise TypeError(f"cluster must be a Cluster, but got cluster={cluster!r}.")
    if cluster.arch != "allreduce":
        raise ValueError(f"cluster.arch must be 'allreduce' (DDP all-reduces its buckets), but got cluster.arch={cluster.arch!r}.")
    for nm, v, lo in (("n_iters", n_iters, 1), ("warmup_iters", warmup_iters, 0)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
            raise ValueError(f"{nm} must be an integer >= {lo}, but got {nm}={v!r}.")
    if hook is not None and (not isinstance(hook, str) or hook not in HOOKS):
        raise ValueError(f"hook must be None, 'bf16' or 'fp16' (DDP's bf16_compress_hook / fp16_compress_hook), but got hook={hook!r}.")
    if step_s is None:
        step_s = default_step_s(model, cluster)
    elif isinstance(step_s, bool) or not isinstance(step_s, (int, float, np.number)) or not math.isfinite(step_s) or step_s < 0:
        raise ValueError(f"step_s must be a finite non-negative number of seconds, but got step_s={step_s!r}.")
    first_b, cap_b = bucket_limits(bucket_cap_mb, first_bucket_mb)
    n, L = cluster.n_workers, model.n_layers
    buckets = ddp_buckets(model.layer_bytes.tolist(), cap_b, first_b)
    nbytes = np.array([float(model.layer_bytes[b].sum()) for b in buckets])
    wire = "fp32" if hook is None else hook
    wire_nbytes = nbytes if hook is None else nbytes / 2  # the hook sends the bucket in 16 bits
    msgs = [Message(k, tuple(Segment(int(l), 0, int(model.layer_bytes[l]) // 4) for l in b), int(wire_nbytes[k]), k, 0,
                    "float32" if hook is None else "bfloat16" if hook == "bf16" else "float16")
            for k, b in enumerate(buckets)]
    # each bucket's cast (on the backward's path) and cast back (in the future's callback), seconds
    cast = np.asarray(cast_s(wire_nbytes, wire, cluster.cast_Bps))
    cast_through = np.cumsum(cast)  # casts run by the backward up to and including bucket k's
    plan = _Plan(messages=msgs, nbytes=wire_nbytes, last_tensor=np.array([min(b) for b in buckets], dtype=np.int64),
                 seg_msg=np.zeros(0, dtype=np.int64), seg_tensor=np.zeros(0, dtype=np.int64),
                 chunks=np.ones(len(msgs), dtype=np.int64), n_real=len(msgs))
    link = float(np.minimum(cluster.bw_up_Bps, cluster.bw_down_Bps).min())
    total = warmup_iters + n_iters
    rng = np.random.default_rng(seed)
    if cluster.jitter > 0:  # same draws as the engine's simulator for the same seed
        s = cluster.jitter
        noise = rng.lognormal(-s * s / 2, s, size=(total, n, 1)) * rng.lognormal(-s * s / 8, s / 2, size=(total, n, L))
    else:
        noise = np.ones((total, n, L))
    mult = noise * np.asarray(cluster.compute_scale)[None, :, None]
    F = model.forward_s[None, None, :] * mult
    B = model.backward_s[None, None, :] * mult
    S = float(step_s) * mult.mean(axis=2)  # (total, n)
    overhead = np.full(len(msgs), cluster.per_message_s)
    delay = 2.0 * (n - 1) * cluster.latency_s
    start = np.zeros(n)
    iters = []
    for it in range(total):
        fwd_end = start + F[it].sum(axis=1)
        gr = fwd_end[:, None] + np.cumsum(B[it][:, ::-1], axis=1)[:, ::-1]  # (n, L) gradient ready
        bwd_end = gr[:, 0]
        if n == 1:
            comm_end = -math.inf
        elif hook is None:
            ready = gr.max(axis=0)[plan.last_tensor]
            _, done = _comm(plan, 1, ready, ps=False, n=n, link_Bps=link, overhead_s=overhead, delay_s=delay,
                            between_s=np.zeros(len(msgs)), contention=cluster.contention)
            comm_end = float(done.max())
        else:
            # the backward pauses for each bucket's cast: bucket k leaves once the casts up to its own are done
            ready = (gr[:, plan.last_tensor] + cast_through[None, :]).max(axis=0)
            bwd_end = bwd_end + cast_through[-1]
            _, done = _comm(plan, 1, ready, ps=False, n=n, link_Bps=link, overhead_s=overhead, delay_s=delay,
                            between_s=np.zeros(len(msgs)), contention=cluster.contention)
            back = -math.inf
            for k in np.argsort(done, kind="stable").tolist():  # the casts back, one callback after the other
                back = max(back, float(done[k])) + float(cast[k])
            comm_end = back
        end = np.maximum(bwd_end, comm_end) + S[it]
        iters.append(end - start)
        start = end
    wit = np.stack(iters[warmup_iters:])  # (n_iters, n)
    comp = float(np.mean([(F[i].sum() + B[i].sum() + S[i].sum()) / n for i in range(warmup_iters, total)]))
    sps = float((model.batch_size * n_iters / wit.sum(axis=0)).sum())
    return DDPResult(model=model, cluster=cluster, bucket_cap_mb=cap_b / _MB, first_bucket_mb=first_b / _MB, buckets=buckets,
                     bucket_bytes=nbytes, iter_time_s=wit.mean(axis=1), samples_per_s=sps, compute_s=comp, step_s=float(step_s), hook=hook)
