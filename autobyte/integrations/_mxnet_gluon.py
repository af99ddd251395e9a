"""The shared part of the MXNet engines: a Gluon Trainer's gradients sent by priority under a credit window.

Gradients are cut into messages by :func:`autobyte.core.scheduler.plan_messages`
(a split tensor's chunks are views of the gradient, fused small tensors share
a buffer). Messages are released by :class:`autobyte.core.scheduler.CreditQueue`
as their gradients become ready; every worker applies the optimizer locally
with ``Trainer.update`` on the synchronised gradients. The transport is the
subclass's: the KVStore engine (``_mxnet_kvstore``: one ``dist_sync`` key per
message, the live priority policy, since servers match pushes by key) and the
Horovod engine (``_mxnet_horovod``: all-reduce collectives, issued in one
order computed from the plan alone, ``fixed_order``, so that rank skew can
never deadlock the credit window).

With ``overlap`` (the KVStore engine), ``step`` queues the whole chain in
MXNet's dependency engine and returns: each layer's next forward waits for
its own parameters' update only (:mod:`._mxnet_overlap`); the host waits for
an iteration's messages in the next ``step`` (or :meth:`_GluonEngine.synchronize`).

Every wait for a peer ends within ``timeout_s`` with :class:`PeerLostError`.
"""

from __future__ import annotations

import functools
import time
from collections import deque
from typing import Any, Callable, Sequence

import numpy as np

from ..core.metrics import StatsCollector
from ..core.scheduler import CreditQueue, Message, Scheduler, TensorSpec, plan_order
from ..core.space import Config
from ..core._checks import check_positive
from ._common import PeerLostError
from ._mxnet_imports import import_mxnet
from ._mxnet_layout import _Layout, _peer_lost, _Timing, _Waiter
from ._mxnet_overlap import _Overlap, _Round


class _GluonEngine:
    """Shared part of the MXNet engines: trainer take-over, message plans, scheduled step, statistics.

    Subclasses provide the communication: ``_take_over``, ``_setup_comm``,
    ``_register_layout``, ``_issue``, and the window protocol's transport
    (:class:`autobyte.core.window.Collective`: ``all_gather`` and ``broadcast``
    of a float64 vector).
    """

    #: ``"ps"`` or ``"allreduce"`` (Table II architecture feature).
    arch = "ps"
    #: Whether every rank must issue messages in one agreed order (collectives).
    fixed_order = False
    #: Whether :meth:`step` returns before the communication is done (:mod:`._mxnet_overlap`).
    overlap = False

    def __init__(self, trainer: Any, *, partition_bytes: int, credit_bytes: int, timeout_s: float = 300.0) -> None:
        self._mx = mx = import_mxnet()
        if not isinstance(trainer, mx.gluon.Trainer):
            raise TypeError(f"trainer must be a mxnet.gluon.Trainer, but got trainer={trainer!r}.")
        self.config = Config(partition_bytes, credit_bytes)
        #: longest wait for the other workers before :class:`PeerLostError`
        self.timeout_s = float(check_positive("timeout_s", timeout_s, "seconds"))
        self._waiter: _Waiter | None = None
        self._lost: PeerLostError | None = None
        self._trainer = trainer
        self.iteration = 0
        self.scheduler: Scheduler | None = None
        self.stats: StatsCollector | None = None
        self._params: list[Any] = []
        self._layouts: dict[int, _Layout] = {}
        self._layout: _Layout | None = None
        self._orders: dict[tuple[int, int], list[int]] = {}
        self._pending: tuple[Config, int | None, str] | None = None
        self._t_begin: float | None = None
        #: ``(key, nbytes, seconds from issue to completion)`` of every message of the last iteration
        #: whose communication is complete.
        self.last_messages: list[tuple[int, int, float]] = []
        #: Called on the training thread with each iteration whose communication is complete (its statistics are
        #: in :attr:`stats`), before the next iteration's messages are issued: a reconfiguration made there
        #: applies from ``self.iteration`` (the handler's window protocol).
        self.on_iteration_end: Callable[[int], None] | None = None
        self._ov: _Overlap | None = None
        self._round: _Round | None = None
        self._timing = _Timing()  # rank 0's measured timing of overlapped rounds
        self._next_order: tuple[_Layout, Any] | None = None  # the next round's order, on its way from rank 0

    # ----------------------------------------------------------- to provide
    @property
    def distributed(self) -> bool:
        """Whether the engine communicates (False: one worker, ``trainer.step`` runs unchanged)."""
        raise NotImplementedError

    @property
    def rank(self) -> int:
        raise NotImplementedError

    @property
    def num_workers(self) -> int:
        raise NotImplementedError

    @property
    def link_factor(self) -> float:
        """Link bytes per payload byte (ring all-reduce moves ``2(n-1)/n``)."""
        return 1.0

    def _setup_comm(self, params: list[Any], n_tensors: int) -> None:
        raise NotImplementedError

    def _register_layout(self, layout: _Layout) -> None:
        raise NotImplementedError

    def _issue(self, layout: _Layout, index: int, bufs: list[Any]) -> None:
        raise NotImplementedError

    # The window protocol's transport (autobyte.core.window.Collective): every
    # worker calls each method at the same step.
    @property
    def world_size(self) -> int:
        return self.num_workers

    def all_gather(self, vector: np.ndarray) -> list[np.ndarray]:
        """Every worker's ``vector`` (all of one length), in rank order."""
        raise NotImplementedError

    def broadcast(self, vector: np.ndarray) -> np.ndarray:
        """Rank 0's ``vector`` on every worker."""
        raise NotImplementedError

    # ------------------------------------------------------------------ set-up
    @property
    def tensors(self) -> list[TensorSpec]:
        return [] if self.scheduler is None else list(self.scheduler.tensors)

    @property
    def built(self) -> bool:
        return self.scheduler is not None

    def _build(self) -> None:
        params = [p for p in self._trainer._params if p.grad_req != "null"]
        if not params:
            raise ValueError("trainer holds no trainable parameter (every grad_req is 'null'); nothing to schedule.")
        for p in params:
            if p._deferred_init:
                raise RuntimeError(f"parameter {p.name!r} is still uninitialised (deferred); run a forward pass before step().")
            if p._stype != "default" or p._grad_stype != "default":
                raise ValueError(f"parameter {p.name!r} has sparse storage; autobyte schedules dense gradients only.")
        self._params = params
        # A Trainer holds its parameters sorted by name (conv10 before conv2, batchnorm before conv): the
        # priority of each comes from the engine (the order the forward needs them, where it can tell), measured
        # before anything here waits (the first backward is running), then agreed once communication is set up.
        order = list(range(len(params)))
        if self.distributed:
            order = self._forward_order(params)
            self._setup_comm(params, len(params))
            order = self._agree_order(order)
        position = {t: k for k, t in enumerate(order)}
        tensors = [
            TensorSpec(p.name, int(np.prod(p.shape)), int(np.dtype(p.dtype).itemsize), position[i], str(np.dtype(p.dtype)))
            for i, p in enumerate(params)
        ]
        pending, self._pending = self._pending, None
        if pending is not None and (pending[1] is None or pending[1] <= self.iteration):
            self.config, pending = pending[0], None
        self.scheduler = Scheduler(tensors, self.config, iteration=self.iteration)
        if pending is not None:
            cfg, at, reason = pending
            self.scheduler.reconfigure(cfg.partition_bytes, cfg.credit_bytes, at_iteration=at, reason=reason)
        self.stats = StatsCollector(len(tensors))
        if self.distributed:
            self._layout = self._layout_for(self.config.partition_bytes)

    def _forward_order(self, params: list[Any]) -> list[int]:
        """This worker's parameter indices, the one the forward needs first first (default: the Trainer's order)."""
        return list(range(len(params)))

    def _agree_order(self, order: list[int]) -> list[int]:
        """One parameter order on every worker (the transport's: rank 0's; default ``order``)."""
        return order

    def _layout_for(self, partition_bytes: int) -> _Layout:
        """The buffers and names of a plan; a plan seen before is reused as it was."""
        if partition_bytes in self._layouts:
            return self._layouts[partition_bytes]
        assert self.scheduler is not None
        mx = self._mx
        messages = list(self.scheduler.messages)
        ctxs = self._params[0].list_ctx()
        fused = {
            m.index: [mx.nd.zeros((m.numel,), ctx=c, dtype=m.dtype) for c in ctxs]
            for m in messages if len(m.segments) > 1
        }
        tensors = self.scheduler.tensors
        pos = {t: k for k, t in enumerate(self._ready_order())}
        completes: list[list[int]] = [[] for _ in tensors]
        for m in messages:
            completes[max(m.tensors, key=pos.__getitem__)].append(m.index)
        rank_of = {m.index: r for r, m in enumerate(sorted(messages, key=Message.sort_key))}
        layout = _Layout(partition_bytes, messages, [], fused, completes, [-rank_of[m.index] for m in messages], [])
        self._register_layout(layout)
        self._layouts[partition_bytes] = layout
        return layout

    def _ready_order(self) -> list[int]:
        assert self.scheduler is not None
        tensors = self.scheduler.tensors
        return sorted(range(len(tensors)), key=lambda i: (-tensors[i].priority, -i))

    def _issue_order(self, layout: _Layout) -> list[int]:
        """One order for every rank: the credit policy run on the plan alone (no local timing)."""
        key = (layout.partition_bytes, self.config.credit_bytes)
        if key not in self._orders:
            pos = {t: k for k, t in enumerate(self._ready_order())}
            ready_at = [float(max(pos[t] for t in m.tensors)) for m in layout.messages]
            self._orders[key] = plan_order(
                layout.messages, self.config.credit_bytes,
                ready_time_s=lambda m: ready_at[m.index], transfer_time_s=lambda m: 1e-9 * m.nbytes,
            )
        return self._orders[key]

    # ---------------------------------------------------------------- training
    def begin_iteration(self) -> None:
        """Mark the start of an iteration (before the forward pass) for statistics."""
        self._t_begin = time.perf_counter()

    def step(self, batch_size: int, ignore_stale_grad: bool = False) -> None:
        """Synchronise gradients by schedule, then update the parameters (``trainer.step``).

        With :attr:`overlap`, it returns once the messages and the update are
        queued in MXNet's engine (each parameter's next use waits for its own
        update); the previous iteration's messages are waited for first.

        Raises:
            PeerLostError: a message got no answer within ``timeout_s``.
        """
        t_begin = self._t_begin if self._t_begin is not None else time.perf_counter()
        self._t_begin = None
        self._raise_if_lost()
        if self.scheduler is None:
            self._build()
        assert self.scheduler is not None and self.stats is not None
        if self._round is not None:
            self._end_round(t_begin)  # may reconfigure from this iteration (on_iteration_end)
        if self.scheduler.begin_iteration(self.iteration) or self._layout is None:
            self.config = self.scheduler.config
            if self.distributed:
                self._layout = self._layout_for(self.config.partition_bytes)
        if self.distributed and self.overlap:
            layout = self._layout
            assert layout is not None
            queue = CreditQueue(layout.messages, self.config.credit_bytes, self._overlap_order(layout))
            # Ask now for the next round's order: it travels with this round's messages, so the next step, which
            # waits for them anyway, never waits for a slower worker here.
            self._next_order = (layout, self._send_order(layout, self._estimated_order(layout)))
            self._round = self._overlapper().issue_round(self.iteration, layout, self._params, self._ready_order(), queue,
                                                         self._issue, t_begin, int(batch_size))
            # One optimizer op per parameter: MXNet's aggregated multi-tensor updates (4 parameters per op) ask for
            # temporary workspace, and an op waiting for its gradients holds its workspace copy, so the next
            # forward's layers (custom or convolution ops, which ask for workspace too) would wait behind updates
            # of layers they do not use: measured, the whole next forward waited for the last message.
            for updater in self._trainer._updaters:
                updater.aggregate_updates = False
            self._trainer.update(batch_size, ignore_stale_grad)  # queued after each gradient's messages
            self.iteration += 1
            return
        self.stats.begin_iteration(t_begin)
        if not self.distributed:
            self._trainer.step(batch_size, ignore_stale_grad)
        else:
            self._communicate()
            self._trainer.update(batch_size, ignore_stale_grad)
        self.stats.end_iteration(time.perf_counter(), int(batch_size))
        self.iteration += 1
        if self.distributed:
            self._iteration_end(self.iteration - 1)

    def synchronize(self) -> None:
        """Wait until the last step's communication is complete (its statistics, :attr:`on_iteration_end`).

        The parameters need no call: reading one waits for its update in
        MXNet's engine. Call it after the last step (the handler does at
        ``train_end``) so that the last iteration counts and a lost peer is
        reported.

        Raises:
            PeerLostError: a message got no answer within ``timeout_s``.
        """
        if self._round is not None:
            self._end_round(None)
        self._raise_if_lost()

    def _overlapper(self) -> _Overlap:
        if self._ov is None:
            # (no reference back to the engine: a cycle would keep the KVStore alive until exit)
            self._ov = _Overlap(self._mx, self.timeout_s, functools.partial(_peer_lost, self.timeout_s, self._peers_hint()))
        return self._ov

    def _end_round(self, t_end: float | None) -> None:
        """Wait for the iteration in flight, then record it as the synchronous path would have."""
        r, self._round = self._round, None
        assert r is not None and self._ov is not None and self.stats is not None
        try:
            self._ov.wait(r)
        except PeerLostError as exc:
            self._lost = exc
            raise
        stats = self.stats
        stats.begin_iteration(r.t_begin)
        for t, ts in r.ready.items():
            stats.grad_ready(t, ts)
        for _key, nbytes, t0, t1 in r.records:
            stats.message_done(nbytes, t0, t1)
        # An iteration lasts until the next one starts (the next forward waited for this one's updates).
        stats.end_iteration(t_end if t_end is not None else (r.t_finished or time.perf_counter()), r.batch_size)
        self.last_messages = [(key, nbytes, t1 - t0) for key, nbytes, t0, t1 in r.records]
        self._timing.learn(r.ready, r.records, len(self.tensors))
        self._iteration_end(r.iteration)

    def _overlap_order(self, layout: _Layout) -> list[int]:
        """This round's issue order, one for every worker.

        Messages complete only when every worker has sent them (a
        ``dist_sync`` server answers a push once all workers pushed it), and
        with overlap each worker releases messages as its own gradients become
        ready and its own messages come back. Two workers following the live
        priority policy on their own timing can each fill their credit with
        messages the other has not sent yet, and wait for each other for ever.
        So every worker releases in one order (a ready message waits for those
        before it): the order the live policy would produce on rank 0's
        measured timing (:meth:`_estimated_order`), asked for at the previous
        step; the plan's ready order for the first round of a plan.
        """
        pending, self._next_order = self._next_order, None
        if pending is not None and pending[0] is layout:
            return self._receive_order(layout, pending[1])
        return self._issue_order(layout)

    def _estimated_order(self, layout: _Layout) -> list[int]:
        """Rank 0: the live credit policy run on the measured timing; the plan's order before any (other ranks too)."""
        order = self._timing.order(layout.messages, self.config.credit_bytes) if self.rank == 0 else None
        return self._issue_order(layout) if order is None else order

    def _send_order(self, layout: _Layout, order: list[int]) -> Any:
        """Start sending rank 0's ``order`` to every worker (the transport's); a handle for :meth:`_receive_order`."""
        return order

    def _receive_order(self, layout: _Layout, handle: Any) -> list[int]:
        """Rank 0's order sent by :meth:`_send_order` (waits for it)."""
        return list(handle)

    def _iteration_end(self, iteration: int) -> None:
        if self.on_iteration_end is not None:
            self.on_iteration_end(iteration)

    def _communicate(self) -> None:
        layout = self._layout
        assert layout is not None and self.stats is not None and self.scheduler is not None
        stats = self.stats
        flat = [[g.reshape((-1,)) for g in p.list_grad()] for p in self._params]
        # Collectives: one agreed order on every rank; a parameter server: the live priority policy.
        queue = CreditQueue(layout.messages, self.config.credit_bytes, self._issue_order(layout) if self.fixed_order else None)
        in_flight: deque[tuple[int, list[Any], float]] = deque()
        self.last_messages = []

        def issue(indices: Sequence[int]) -> None:
            for i in indices:
                bufs = layout.gather(i, flat)
                self._issue(layout, i, bufs)
                in_flight.append((i, bufs, time.perf_counter()))

        for t in self._ready_order():
            for g in flat[t]:
                g.wait_to_read()
            stats.grad_ready(t, time.perf_counter())
            for i in layout.completes[t]:
                queue.mark_ready(i)
            issue(queue.release())
        while in_flight:
            i, bufs, t0 = in_flight.popleft()
            self._wait(bufs, f"message {i} of iteration {self.iteration}")
            t1 = time.perf_counter()
            nbytes = layout.messages[i].nbytes
            stats.message_done(nbytes, t0, t1)
            self.last_messages.append((layout.keys[i] if layout.keys else i, nbytes, t1 - t0))
            queue.mark_done(i)
            issue(queue.release())
        if not queue.finished:
            raise RuntimeError(f"only {queue.n_done} of {len(layout.messages)} messages were sent; this is a bug in autobyte.")
        layout.scatter(flat)

    def _wait(self, arrays: Sequence[Any], what: str) -> None:
        """Wait for arrays that other workers complete; :class:`PeerLostError` after ``timeout_s``."""
        self._raise_if_lost()
        if self._waiter is None:
            self._waiter = _Waiter()
        if not self._waiter.wait(arrays, self.timeout_s):
            self._lost = self._lost_error(what)
            raise self._lost

    def _lost_error(self, what: str) -> PeerLostError:
        return _peer_lost(self.timeout_s, self._peers_hint(), what)

    def _raise_if_lost(self) -> None:
        if self._lost is None and self._ov is not None and isinstance(self._ov.lost, PeerLostError):
            self._lost = self._ov.lost  # found by the watchdog while the training thread was elsewhere
        if self._lost is not None:
            raise self._lost

    def _peers_hint(self) -> str:
        return "another worker stopped, crashed or is stuck (every worker must run the same number of batches)."

    # ------------------------------------------------------- reconfiguration
    def reconfigure(self, partition_bytes: int, credit_bytes: int, *, at_iteration: int | None = None, reason: str = "") -> Config:
        """Switch to ``<partition_bytes, credit_bytes>`` from ``at_iteration`` on (default: the next step).

        Every worker must make the same call before the same step (the
        handler agrees through :meth:`agree`).

        Raises:
            TypeError, ValueError: bad sizes, or ``at_iteration`` in the past.
        """
        cfg = Config(partition_bytes, credit_bytes)
        at = self.iteration if at_iteration is None else at_iteration
        if isinstance(at, bool) or not isinstance(at, int) or at < self.iteration:
            raise ValueError(f"at_iteration must be an integer >= the next step {self.iteration}, but got at_iteration={at_iteration!r}.")
        if self.scheduler is None:
            self._pending = (cfg, at, reason)
        else:
            # Between steps the scheduler sits at the last step run (self.iteration - 1).
            self.scheduler.reconfigure(cfg.partition_bytes, cfg.credit_bytes, at_iteration=at, reason=reason)
        return cfg

    # ----------------------------------------------------------------- state
    def state_dict(self) -> dict[str, Any]:
        return {"iteration": self.iteration, "config": self.config.to_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the step count and configuration (in-flight messages are never saved)."""
        self.iteration = int(state.get("iteration", self.iteration))
        if "config" in state:
            cfg = Config(**state["config"])
            if self.scheduler is None:
                self.config = cfg
            elif cfg != self.config:
                self.reconfigure(cfg.partition_bytes, cfg.credit_bytes, reason="restored")
