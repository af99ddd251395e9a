"""KVStore engine: a Gluon Trainer's gradients pushed and pulled by priority under a credit window.

The engine takes over the communication of a ``gluon.Trainer`` built on a
``dist_sync`` KVStore (a real parameter server). Gradients are cut into
messages by :func:`autobyte.core.scheduler.plan_messages`; each message is one
KVStore key (a split tensor's chunks are views of the gradient, fused small
tensors share a buffer). Messages are released by
:class:`autobyte.core.scheduler.CreditQueue` as their gradients become ready;
servers sum them (no optimizer runs on the servers) and every worker applies
the optimizer locally with ``Trainer.update``, which is what ``dist_sync``
with ``update_on_kvstore=True`` computes on the servers.

Servers match pushes by key, so no global issue order is needed: the live
priority policy applies on each worker directly. All-reduce engines (Horovod,
in ``_mxnet_horovod``) share everything here but the transport, and issue in
one order computed from the plan alone (``fixed_order``), so that rank skew
can never deadlock the credit window.
"""

from __future__ import annotations

import time
import warnings
from collections import deque
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ..core.metrics import StatsCollector
from ..core.scheduler import CreditQueue, Message, Scheduler, TensorSpec, plan_order
from ..core.space import Config
from ..core.window import WIRE_LEN
from ._mxnet_imports import import_mxnet

#: Reserved KVStore keys; MXNet hashes a key as ``key * 9973`` in 32-bit
#: arithmetic to pick its server, so every key must stay below this bound.
MAX_KEY = 200_000
_KEY_STATS = 0
_KEY_DECISION = 1
_KEY_WEIGHTS0 = 2


@dataclass
class _Layout:
    """The engine side of one message plan: keys or names, fused buffers, readiness."""

    partition_bytes: int
    messages: list[Message]
    keys: list[int]
    fused: dict[int, list[Any]]  # message index -> one buffer per context
    completes: list[list[int]]  # tensor index -> messages that become ready with it
    mx_priority: list[int]
    names: list[str]  # collective names (all-reduce engines)


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

    def __init__(self, trainer: Any, *, partition_bytes: int, credit_bytes: int) -> None:
        self._mx = mx = import_mxnet()
        if not isinstance(trainer, mx.gluon.Trainer):
            raise TypeError(f"trainer must be a mxnet.gluon.Trainer, but got trainer={trainer!r}.")
        self.config = Config(partition_bytes, credit_bytes)
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
        #: ``(key, nbytes, seconds from issue to completion)`` of every message of the last iteration.
        self.last_messages: list[tuple[int, int, float]] = []

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
        tensors = [
            TensorSpec(p.name, int(np.prod(p.shape)), int(np.dtype(p.dtype).itemsize), i, str(np.dtype(p.dtype)))
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
            self._setup_comm(params, len(tensors))
            self._layout = self._layout_for(self.config.partition_bytes)

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
        """Synchronise gradients by schedule, then update the parameters (``trainer.step``)."""
        t_begin = self._t_begin if self._t_begin is not None else time.perf_counter()
        self._t_begin = None
        if self.scheduler is None:
            self._build()
        assert self.scheduler is not None and self.stats is not None
        self.stats.begin_iteration(t_begin)
        if self.scheduler.begin_iteration(self.iteration) or self._layout is None:
            self.config = self.scheduler.config
            if self.distributed:
                self._layout = self._layout_for(self.config.partition_bytes)
        if not self.distributed:
            self._trainer.step(batch_size, ignore_stale_grad)
        else:
            self._communicate()
            self._trainer.update(batch_size, ignore_stale_grad)
        self.stats.end_iteration(time.perf_counter(), int(batch_size))
        self.iteration += 1

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
                m = layout.messages[i]
                if i in layout.fused:
                    bufs = layout.fused[i]
                    off = 0
                    for s in m.segments:
                        for buf, src in zip(bufs, flat[s.tensor]):
                            buf[off:off + s.numel] = src[s.start:s.stop]
                        off += s.numel
                else:
                    s = m.segments[0]
                    bufs = [g[s.start:s.stop] for g in flat[s.tensor]]
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
            for b in bufs:
                b.wait_to_read()
            t1 = time.perf_counter()
            nbytes = layout.messages[i].nbytes
            stats.message_done(nbytes, t0, t1)
            self.last_messages.append((layout.keys[i] if layout.keys else i, nbytes, t1 - t0))
            queue.mark_done(i)
            issue(queue.release())
        if not queue.finished:
            raise RuntimeError(f"only {queue.n_done} of {len(layout.messages)} messages were sent; this is a bug in autobyte.")
        for i, bufs in layout.fused.items():
            off = 0
            for s in layout.messages[i].segments:
                for buf, dst in zip(bufs, flat[s.tensor]):
                    dst[s.start:s.stop] = buf[off:off + s.numel]
                off += s.numel

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


class KVStoreEngine(_GluonEngine):
    """Scheduled gradient synchronisation of a Gluon ``Trainer`` on a ``dist_sync`` parameter server.

    Call :meth:`step` where you called ``trainer.step``. Build it with
    :func:`schedule`.

    Args:
        trainer: a ``mxnet.gluon.Trainer`` created with ``kvstore="dist_sync"``
            (or a ``dist_sync`` KVStore object), before its first ``step``.
            Any other kvstore (``"device"``, ``"local"``, ``None``) means one
            worker: :meth:`step` is then ``trainer.step``.
        partition_bytes: largest message; bigger gradients are split, smaller
            neighbouring ones fused.
        credit_bytes: most bytes in flight at once.
        kvstore: overrides the trainer's kvstore (type string or KVStore).

    Raises:
        ImportError: MXNet is missing. RuntimeError: MXNet is not 1.9.x, or
        the trainer already communicated. TypeError, ValueError: bad arguments
        (each message names the argument).
    """

    arch = "ps"
    fixed_order = False  # servers match pushes by key: the live priority policy applies

    def __init__(self, trainer: Any, *, partition_bytes: int, credit_bytes: int, kvstore: Any = None) -> None:
        super().__init__(trainer, partition_bytes=partition_bytes, credit_bytes=credit_bytes)
        self._kv = self._take_over(trainer, kvstore)
        self._next_key = _KEY_WEIGHTS0
        self._control_shapes: dict[int, tuple[int, ...]] = {}

    def _take_over(self, trainer: Any, kvstore: Any) -> Any:
        mx = self._mx
        if trainer._kv_initialized and trainer._kvstore is not None:
            raise RuntimeError(
                "trainer has already created its KVStore (trainer.step was called); "
                "build the autobyte engine or handler before the first trainer.step()."
            )
        spec = trainer._kvstore_params["kvstore"] if kvstore is None else kvstore
        if isinstance(spec, str):
            kv = mx.kv.create(spec) if "dist" in spec else None
        elif isinstance(spec, mx.kvstore.KVStoreBase):
            kv = spec
        elif spec is None:
            kv = None
        else:
            raise TypeError(f"kvstore must be a KVStore type string, a KVStore or None, but got kvstore={spec!r}.")
        if kv is None or "dist" not in kv.type:
            return None  # one worker: leave the trainer as it is
        if "async" in kv.type:
            raise ValueError(f"kvstore must be a synchronous parameter server ('dist_sync'), but got kvstore type {kv.type!r}.")
        if trainer._kvstore_params.get("update_on_kvstore"):
            warnings.warn(
                "autobyte: update_on_kvstore=True is ignored; servers sum the scheduled gradients and every "
                "worker applies the optimizer (the same update, with no optimizer sent to the servers).",
                stacklevel=3,
            )
        # The trainer keeps its optimizer and updates locally; it no longer talks to the servers.
        trainer._kvstore_params = {"kvstore": None, "update_on_kvstore": False}
        trainer._kv_initialized = False
        return kv

    @property
    def distributed(self) -> bool:
        """Whether a parameter server carries the gradients (False: one worker)."""
        return self._kv is not None

    @property
    def rank(self) -> int:
        return 0 if self._kv is None else int(self._kv.rank)

    @property
    def num_workers(self) -> int:
        return 1 if self._kv is None else int(self._kv.num_workers)

    def _setup_comm(self, params: list[Any], n_tensors: int) -> None:
        if _KEY_WEIGHTS0 + len(params) > MAX_KEY:
            raise RuntimeError(f"the model has {len(params)} parameters; the KVStore engine supports at most {MAX_KEY - _KEY_WEIGHTS0}.")
        self._next_key = _KEY_WEIGHTS0 + len(params)
        mx = self._mx
        width = 8 + n_tensors  # WindowStats.to_vector(): 8 scalars, then one time per tensor
        # Control keys of a fixed shape: a statistics row per worker, one decision message.
        self._control_shapes = {_KEY_STATS: (self.num_workers, width), _KEY_DECISION: (WIRE_LEN,)}
        # One init call = one barrier: control keys, then rank 0's weights for everyone.
        self._kv.init(
            [_KEY_STATS, _KEY_DECISION],
            [mx.nd.zeros(self._control_shapes[k], dtype="float64") for k in (_KEY_STATS, _KEY_DECISION)],
        )
        wkeys = [_KEY_WEIGHTS0 + i for i in range(len(params))]
        self._kv.broadcast(wkeys, [p.list_data()[0] for p in params], out=[p.list_data() for p in params])

    def _register_layout(self, layout: _Layout) -> None:
        n = len(layout.messages)
        if self._next_key + n > MAX_KEY:
            raise RuntimeError(
                f"partition_bytes={layout.partition_bytes} needs {n} KVStore keys but only "
                f"{MAX_KEY - self._next_key} are left (MXNet keys must stay below {MAX_KEY}); "
                "use a larger partition or fewer distinct partitions."
            )
        layout.keys = list(range(self._next_key, self._next_key + n))
        self._next_key += n
        mx = self._mx
        # A new plan's keys are initialised on the servers by every worker at the same
        # iteration (KVStore init ends with a barrier): no gradient can miss its key.
        self._kv.init(layout.keys, [mx.nd.zeros((m.numel,), dtype=m.dtype) for m in layout.messages])

    def _issue(self, layout: _Layout, index: int, bufs: list[Any]) -> None:
        self._kv.pushpull(layout.keys[index], bufs, out=bufs, priority=layout.mx_priority[index])

    def all_gather(self, vector: np.ndarray) -> list[np.ndarray]:
        """Every worker's ``vector``, in rank order: each worker fills its row, the servers sum the rows."""
        vec = np.asarray(vector, dtype=np.float64).reshape(-1)
        if self._kv is None:
            return [vec]
        rows = np.zeros((self.num_workers, vec.size), dtype=np.float64)
        rows[self.rank] = vec
        return list(self._sum_on_servers(_KEY_STATS, rows))

    def broadcast(self, vector: np.ndarray) -> np.ndarray:
        """Rank 0's ``vector``: rank 0 sends it, every other worker zeros, the servers sum."""
        vec = np.asarray(vector, dtype=np.float64).reshape(-1)
        if self._kv is None:
            return vec
        return self._sum_on_servers(_KEY_DECISION, vec if self.rank == 0 else np.zeros_like(vec))

    def _sum_on_servers(self, key: int, values: np.ndarray) -> np.ndarray:
        shape = self._control_shapes[key]
        if values.shape != shape:
            raise ValueError(f"control key {key} carries float64 arrays of shape {shape}, but got shape {values.shape}.")
        nd = self._mx.nd.array(values, dtype="float64")
        self._kv.pushpull(key, nd, out=nd)
        return np.asarray(nd.asnumpy(), dtype=np.float64)


def schedule(trainer: Any, *, partition_bytes: int, credit_bytes: int, kvstore: Any = None) -> KVStoreEngine:
    """Take over ``trainer``'s parameter-server communication; call ``engine.step(batch_size)`` instead of ``trainer.step``.

    See :class:`KVStoreEngine` for the arguments and errors.
    """
    return KVStoreEngine(trainer, partition_bytes=partition_bytes, credit_bytes=credit_bytes, kvstore=kvstore)
