"""ByteScheduler-style communication scheduling, engine-agnostic.

Three pieces, all pure Python:

* :func:`plan_messages` turns the model's gradient tensors into *messages*:
  tensors larger than ``partition_bytes`` are split into contiguous chunks,
  small tensors of neighbouring layers are fused up to ``partition_bytes``.
* :class:`CreditQueue` is the live policy: a priority queue of ready
  messages (layer nearest the input first, ties by chunk order) released
  under a credit window of bytes in flight.
* :class:`Scheduler` owns the current configuration and applies a
  ``reconfigure`` at an agreed iteration boundary.

Engines (``autobyte.integrations``) and the simulator (``autobyte.sim``) make
their decisions through :class:`CreditQueue`, so both follow the same rules.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from .space import Config, check_bytes, check_wire

#: Most messages one iteration's plan may hold. Every message is one
#: collective (tens of microseconds at least) and one small object; beyond a
#: million a plan costs hundreds of MB and an iteration minutes, so a smaller
#: ``partition_bytes`` is refused up front (engines and simulator alike).
MAX_MESSAGES = 1 << 20


def n_messages_bound(tensors: Sequence[TensorSpec], partition_bytes: int) -> int:
    """An upper bound on the messages :func:`plan_messages` makes, computed without planning."""
    n = 0
    for t in tensors:
        if t.nbytes > partition_bytes:
            per = max(1, partition_bytes // max(1, t.itemsize))
            n += -(-t.numel // per)
        else:
            n += 1
    return n


def check_message_count(tensors: Sequence[TensorSpec], partition_bytes: int) -> None:
    """Refuse a partition size that would split ``tensors`` into more than :data:`MAX_MESSAGES` messages.

    Raises:
        ValueError: naming the partition size, the message count and the smallest size allowed.
    """
    n = n_messages_bound(tensors, partition_bytes)
    if n <= MAX_MESSAGES:
        return
    total = sum(t.nbytes for t in tensors)
    lo, hi = partition_bytes, max(partition_bytes + 1, total)  # the bound never grows with the partition size
    while lo + 1 < hi:
        mid = (lo + hi) // 2
        if n_messages_bound(tensors, mid) > MAX_MESSAGES:
            lo = mid
        else:
            hi = mid
    floor = hi
    raise ValueError(
        f"partition_bytes={partition_bytes} would split {total} gradient bytes into {n} messages per iteration, "
        f"more than the limit of {MAX_MESSAGES} (autobyte.core.scheduler.MAX_MESSAGES); "
        f"use partition_bytes >= {floor}."
    )


@dataclass(frozen=True)
class TensorSpec:
    """One gradient tensor as the scheduler sees it.

    Args:
        name: for messages and statistics.
        numel: number of elements (> 0).
        itemsize: bytes per element.
        priority: layer index, 0 = nearest the input (sent first).
        dtype: element type name; only tensors of one dtype are fused.
    """

    name: str
    numel: int
    itemsize: int
    priority: int
    dtype: str = "float32"

    @property
    def nbytes(self) -> int:
        return self.numel * self.itemsize


@dataclass(frozen=True)
class Segment:
    """Elements ``[start, stop)`` of tensor number ``tensor``."""

    tensor: int
    start: int
    stop: int

    @property
    def numel(self) -> int:
        return self.stop - self.start


@dataclass(frozen=True)
class Message:
    """One unit of communication: a contiguous run of one or more segments."""

    index: int
    segments: tuple[Segment, ...]
    nbytes: int
    priority: int
    chunk: int
    dtype: str

    @property
    def tensors(self) -> tuple[int, ...]:
        return tuple(dict.fromkeys(s.tensor for s in self.segments))

    @property
    def numel(self) -> int:
        return sum(s.numel for s in self.segments)

    def sort_key(self) -> tuple[int, int, int]:
        """Priority order: nearest-input layer first, then chunk order, then plan order."""
        return (self.priority, self.chunk, self.index)


#: Element type and size of each 16-bit wire precision (``"fp32"``: every tensor travels in its own type).
WIRE_TYPES = {"bf16": ("bfloat16", 2), "fp16": ("float16", 2)}
_FLOAT_TYPES = ("float64", "float32", "float16", "bfloat16")


def on_wire(tensors: Sequence[TensorSpec], wire: str) -> list[TensorSpec]:
    """``tensors`` as they travel at precision ``wire`` (see :data:`~autobyte.core.space.WIRES`).

    At ``"fp32"`` every tensor travels in its own type (the list is returned
    as it is). At 16 bits every floating-point tensor travels as ``bfloat16``
    or ``float16``, two bytes an element, so a partition of ``n`` bytes holds
    ``n / 2`` elements; other tensors keep their type.

    Raises:
        ValueError: ``wire`` is not one of the precisions.
    """
    check_wire(wire)
    if wire == "fp32":
        return list(tensors)
    dtype, size = WIRE_TYPES[wire]
    return [TensorSpec(t.name, t.numel, size, t.priority, dtype) if t.dtype in _FLOAT_TYPES else t for t in tensors]


def plan_messages(
    tensors: Sequence[TensorSpec],
    partition_bytes: int,
    ready_order: Sequence[int] | None = None,
) -> list[Message]:
    """Split and fuse ``tensors`` into messages of at most ``partition_bytes``.

    Args:
        tensors: the gradient tensors.
        partition_bytes: message size limit.
        ready_order: tensor indices in the order their gradients become ready
            (default: highest layer index first, as in backward). Fusion only
            joins tensors adjacent in this order, so a fused message becomes
            ready soon after its first member.

    Returns:
        Messages in ``ready_order`` (the order they can first be sent).
        Every element of every tensor appears in exactly one segment.

    Raises:
        ValueError: empty ``tensors``, a tensor with no elements, or a bad order.
    """
    partition_bytes = check_bytes("partition_bytes", partition_bytes)
    if not tensors:
        raise ValueError("tensors must hold at least one gradient tensor, but got none (does the model have trainable parameters?).")
    for t in tensors:
        if t.numel <= 0 or t.itemsize <= 0:
            raise ValueError(f"tensor {t.name!r} must have numel > 0 and itemsize > 0, but got numel={t.numel}, itemsize={t.itemsize}.")
    if ready_order is None:
        ready_order = sorted(range(len(tensors)), key=lambda i: (-tensors[i].priority, -i))
    if sorted(ready_order) != list(range(len(tensors))):
        raise ValueError(f"ready_order must be a permutation of range({len(tensors)}), but got {list(ready_order)!r}.")
    check_message_count(tensors, partition_bytes)

    messages: list[Message] = []
    pending: list[Segment] = []
    pending_bytes = 0

    def emit(segs: list[Segment], nbytes: int, chunk: int) -> None:
        prio = min(tensors[s.tensor].priority for s in segs)
        messages.append(Message(len(messages), tuple(segs), nbytes, prio, chunk, tensors[segs[0].tensor].dtype))

    for ti in ready_order:
        t = tensors[ti]
        if t.nbytes > partition_bytes:
            if pending:
                emit(pending, pending_bytes, 0)
                pending, pending_bytes = [], 0
            per = max(1, partition_bytes // t.itemsize)
            # Chunks of a split tensor: the one holding the tensor's start goes first.
            for chunk, start in enumerate(range(0, t.numel, per)):
                stop = min(t.numel, start + per)
                emit([Segment(ti, start, stop)], (stop - start) * t.itemsize, chunk)
            continue
        fits = pending_bytes + t.nbytes <= partition_bytes and (not pending or tensors[pending[0].tensor].dtype == t.dtype)
        if pending and not fits:
            emit(pending, pending_bytes, 0)
            pending, pending_bytes = [], 0
        pending.append(Segment(ti, 0, t.numel))
        pending_bytes += t.nbytes
    if pending:
        emit(pending, pending_bytes, 0)
    return messages


def schedule_classes(tensor_bytes: Sequence[int] | np.ndarray, configs: Iterable[Config]) -> np.ndarray:
    """Which configurations run the same schedule on these gradients: one class id per configuration.

    Two configurations ``<partition, credit>`` are in one class when
    :func:`plan_messages` cuts the gradients into the same messages under
    both, and :class:`CreditQueue` releases them the same way: a credit of at
    least the gradients' total bytes never binds, and a credit below the
    smallest message releases every message alone (with a single message,
    both are the same). On a model of a few MB,
    every partition above its total fuses it into one message, so most of a
    search space of partitions up to 1 GiB is one class; a tuner that has
    measured one member knows them all and need not measure another.

    The messages are planned in the default backward order (last tensor
    first) with every tensor of one element type, as :func:`plan_messages`
    does without a ``ready_order``; an engine whose measured ready order or
    mixed dtypes fuse differently may run two members of a class slightly
    differently. Splitting is compared in bytes: exact for partitions that
    are multiples of the element size, as every candidate of
    :meth:`~autobyte.core.space.SearchSpace.default` is.

    Args:
        tensor_bytes: gradient bytes per tensor, tensor 0 nearest the input.
        configs: the configurations to classify.

    Returns:
        ``(len(configs),)`` int array; equal ids mean the same schedule, ids
        numbered from 0 in order of first appearance.

    Raises:
        ValueError: ``tensor_bytes`` empty or not all positive.
    """
    sizes = [int(b) for b in np.asarray(tensor_bytes).ravel()]
    if not sizes or min(sizes) <= 0:
        raise ValueError(f"tensor_bytes must be a non-empty sequence of positive byte counts, but got {list(sizes)[:8]!r}.")
    total, largest = sum(sizes), max(sizes)
    tensors = tensors_from_sizes(sizes, itemsize=1, dtype="bytes")  # one element type; sizes in bytes
    plans: dict[int, tuple[Any, int, int]] = {}

    def plan(p: int) -> tuple[Any, int, int]:
        """(key of the messages, their number, the smallest) under partition ``p``."""
        if p not in plans:
            if largest > p:  # a split tensor's first chunk is p bytes: no other partition cuts it alike
                plans[p] = (("split", p), 2, min(min(sizes), p))
            else:  # fusion only: plan_messages' own cuts
                nbytes = tuple(m.nbytes for m in plan_messages(tensors, p))
                plans[p] = (("fused", nbytes), len(nbytes), min(nbytes))
        return plans[p]

    ids: dict[Any, int] = {}
    result = []
    for c in configs:
        key, n, smallest = plan(int(c.partition_bytes))
        credit = int(c.credit_bytes)
        # one message goes alike under any credit
        ckey = "unbound" if credit >= total or n == 1 else "alone" if credit < smallest else credit
        result.append(ids.setdefault((key, ckey), len(ids)))
    return np.asarray(result, dtype=np.int64)


class CreditQueue:
    """Credit-based release of ready messages.

    The policy of ByteScheduler's core: ready messages wait in a priority
    queue; a message is released while the bytes in flight plus its size fit
    in ``credit_bytes``; a message larger than the whole credit is released
    alone when nothing is in flight (no starvation).

    With ``order`` (fixed-order mode, for collectives, which every rank must
    issue in one order), messages are released in that order only, under
    the same credit rule: a ready message waits for every message before it
    in ``order``.

    Args:
        messages: the plan (from :func:`plan_messages`).
        credit_bytes: the window.
        order: an issue order (a permutation of the message indices, e.g.
            from :func:`plan_order`), or ``None`` for priority order.

    Raises:
        ValueError: ``credit_bytes`` out of range, or ``order`` not a
            permutation of the message indices.
    """

    def __init__(self, messages: Sequence[Message], credit_bytes: int, order: Sequence[int] | None = None) -> None:
        self.messages = list(messages)
        self.credit_bytes = check_bytes("credit_bytes", credit_bytes)
        if order is not None and sorted(order) != list(range(len(self.messages))):
            raise ValueError(f"order must be a permutation of the {len(self.messages)} message indices, but got order={list(order)!r}.")
        self.order = None if order is None else list(order)
        self._heap: list[tuple[tuple[int, int, int], int]] = []
        self._ready: set[int] = set()  # fixed-order mode: ready, not yet released
        self._next = 0  # fixed-order mode: position of the next message to release
        self.in_flight: dict[int, int] = {}
        self.in_flight_bytes = 0
        self.n_done = 0

    def mark_ready(self, index: int) -> None:
        if self.order is None:
            heapq.heappush(self._heap, (self.messages[index].sort_key(), index))
        else:
            self._ready.add(index)

    def _fits(self, index: int) -> bool:
        return not self.in_flight or self.in_flight_bytes + self.messages[index].nbytes <= self.credit_bytes

    def _start(self, index: int, out: list[int]) -> None:
        nbytes = self.messages[index].nbytes
        self.in_flight[index] = nbytes
        self.in_flight_bytes += nbytes
        out.append(index)

    def release(self) -> list[int]:
        """Pop every message the credit allows now (highest priority first, or in ``order``)."""
        out: list[int] = []
        if self.order is not None:
            while self._next < len(self.order) and self.order[self._next] in self._ready and self._fits(self.order[self._next]):
                idx = self.order[self._next]
                self._ready.discard(idx)
                self._next += 1
                self._start(idx, out)
            return out
        while self._heap and self._fits(self._heap[0][1]):
            self._start(heapq.heappop(self._heap)[1], out)
        return out

    def mark_done(self, index: int) -> None:
        self.in_flight_bytes -= self.in_flight.pop(index)
        self.n_done += 1

    @property
    def n_waiting(self) -> int:
        return len(self._heap) + len(self._ready)

    @property
    def finished(self) -> bool:
        return self.n_done == len(self.messages)


def plan_order(
    messages: Sequence[Message],
    credit_bytes: int,
    ready_time_s: Callable[[Message], float],
    transfer_time_s: Callable[[Message], float],
) -> list[int]:
    """The order in which a :class:`CreditQueue` would issue ``messages``.

    Runs the live policy against predicted times: message ``m`` becomes
    ready at ``ready_time_s(m)``; in-flight messages share one link in FIFO
    order, each taking ``transfer_time_s(m)``. All-reduce engines use the
    result as the issue order of one iteration, so that every rank issues
    collectives in the same order whatever its local timing (the order is a
    function of the plan and of agreed timing estimates only).
    """
    q = CreditQueue(messages, credit_bytes)
    events = sorted(((ready_time_s(m), m.index) for m in messages))
    order: list[int] = []
    link_free = 0.0
    finishing: list[tuple[float, int]] = []  # (finish time, index)
    now = 0.0
    ei = 0
    while len(order) < len(messages):
        # Next event: a message becoming ready or an in-flight one finishing.
        next_ready = events[ei][0] if ei < len(events) else float("inf")
        next_done = finishing[0][0] if finishing else float("inf")
        if next_ready <= next_done:
            now = next_ready
            while ei < len(events) and events[ei][0] <= now:
                q.mark_ready(events[ei][1])
                ei += 1
        else:
            now, idx = heapq.heappop(finishing)
            q.mark_done(idx)
        for idx in q.release():
            order.append(idx)
            start = max(now, link_free)
            link_free = start + transfer_time_s(messages[idx])
            heapq.heappush(finishing, (link_free, idx))
    return order


def estimated_order(
    messages: Sequence[Message],
    credit_bytes: int,
    layer_backward_s: Sequence[float],
    bandwidth_Bps: float,
    ready_order: Sequence[int] | None = None,
) -> list[int]:
    """The issue order from measured timing: :func:`plan_order` with ready times from the statistics.

    ``layer_backward_s[t]`` is the measured backward time of tensor ``t``
    (:attr:`~autobyte.core.metrics.WindowStats.layer_backward_s`: the time from
    the previous gradient becoming ready); tensors become ready in
    ``ready_order`` (default: last tensor first, backward order), so tensor
    ``t`` is ready at the sum of the times up to it. A message is ready with
    its last tensor and takes ``nbytes / bandwidth_Bps`` on the link. The
    result depends on these numbers only: ranks that agree on them (gathered
    statistics) compute one order.

    Raises:
        ValueError: ``layer_backward_s`` does not hold one time per tensor, or
            ``bandwidth_Bps`` is not positive.
    """
    n = len(layer_backward_s)
    if not bandwidth_Bps > 0:
        raise ValueError(f"bandwidth_Bps must be positive, but got bandwidth_Bps={bandwidth_Bps!r}.")
    tensors = {s.tensor for m in messages for s in m.segments}
    if tensors and (min(tensors) < 0 or max(tensors) >= n):
        raise ValueError(f"layer_backward_s must hold one time per tensor of the plan ({max(tensors) + 1}), but got {n}.")
    ready_at: dict[int, float] = {}
    t = 0.0
    for ti in (range(n - 1, -1, -1) if ready_order is None else ready_order):
        t += float(layer_backward_s[ti])
        ready_at[ti] = t
    return plan_order(messages, credit_bytes, lambda m: max(ready_at[s.tensor] for s in m.segments),
                      lambda m: m.nbytes / bandwidth_Bps)


@dataclass
class _Pending:
    config: Config
    at_iteration: int
    reason: str = ""


@dataclass
class Scheduler:
    """Current configuration, its message plan, and pending reconfigurations.

    Args:
        tensors: the gradient tensors in priority terms.
        config: initial configuration.

    A reconfiguration requested with :meth:`reconfigure` takes effect at the
    start of iteration ``at_iteration`` (:meth:`begin_iteration`), so that
    every rank switches at the same boundary. The plan is made of the
    tensors as they travel at the configuration's wire precision
    (:func:`on_wire`): ``tensors`` are the model's, ``wire_tensors`` the
    plan's.
    """

    tensors: Sequence[TensorSpec]
    config: Config
    ready_order: Sequence[int] | None = None
    iteration: int = 0
    messages: list[Message] = field(init=False)
    history: list[tuple[int, Config, str]] = field(init=False)
    _pending: _Pending | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        if not isinstance(self.config, Config):
            raise TypeError(f"config must be a Config, but got {self.config!r}.")
        self.messages = plan_messages(self.wire_tensors, self.config.partition_bytes, self.ready_order)
        self.history = [(self.iteration, self.config, "initial")]

    @property
    def wire_tensors(self) -> list[TensorSpec]:
        """The tensors as they travel under the configuration in force (:func:`on_wire`)."""
        return on_wire(self.tensors, self.config.wire)

    @property
    def total_bytes(self) -> int:
        """Bytes one iteration sends (on the wire: half the gradients' fp32 bytes at 16 bits)."""
        return sum(t.nbytes for t in self.wire_tensors)

    def reconfigure(self, partition_bytes: int, credit_bytes: int, *, wire: str | None = None,
                    at_iteration: int | None = None, reason: str = "") -> Config:
        """Request ``<partition_bytes, credit_bytes>`` at precision ``wire`` from ``at_iteration`` on (default: the next one).

        ``wire=None`` keeps the precision in force (or pending).

        Raises:
            ValueError: an iteration already entered, a bad ``wire``, or too many messages (:func:`check_message_count`).
        """
        if wire is None:
            wire = self._pending.config.wire if self._pending is not None else self.config.wire
        cfg = Config(partition_bytes, credit_bytes, wire)
        self.check_config(cfg)
        at = self.iteration + 1 if at_iteration is None else int(at_iteration)
        if at <= self.iteration:
            raise ValueError(f"at_iteration must be after the current iteration {self.iteration}, but got at_iteration={at}.")
        self._pending = _Pending(cfg, at, reason)
        return cfg

    def check_config(self, config: Config) -> None:
        """Raise ValueError if ``config`` cannot be planned for these tensors (see :func:`check_message_count`)."""
        check_message_count(on_wire(self.tensors, config.wire), config.partition_bytes)

    @property
    def pending(self) -> tuple[Config, int] | None:
        return None if self._pending is None else (self._pending.config, self._pending.at_iteration)

    def begin_iteration(self, iteration: int) -> bool:
        """Enter ``iteration``; apply a due reconfiguration. Returns True if the plan changed."""
        self.iteration = int(iteration)
        p = self._pending
        if p is None or iteration < p.at_iteration:
            return False
        self._pending = None
        changed = p.config.partition_bytes != self.config.partition_bytes or p.config.wire != self.config.wire
        self.config = p.config
        self.history.append((iteration, p.config, p.reason))
        if changed:
            self.messages = plan_messages(self.wire_tensors, self.config.partition_bytes, self.ready_order)
        return True

    def queue(self) -> CreditQueue:
        """A fresh credit queue for one iteration under the current config."""
        return CreditQueue(self.messages, self.config.credit_bytes)


def tensors_from_sizes(sizes: Iterable[int], itemsize: int = 4, dtype: str = "float32") -> list[TensorSpec]:
    """TensorSpecs for per-layer element counts, layer 0 nearest the input."""
    return [TensorSpec(f"layer{i}", int(n), itemsize, i, dtype) for i, n in enumerate(sizes)]
