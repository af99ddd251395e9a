"""KVStore engine: a Gluon Trainer's gradients pushed and pulled on a ``dist_sync`` parameter server.

The engine takes over the communication of a ``gluon.Trainer`` built on a
``dist_sync`` KVStore (a real parameter server). Each message of the plan
(:mod:`._mxnet_gluon`) is one KVStore key; servers sum the messages (no
optimizer runs on the servers) and every worker applies the optimizer locally
with ``Trainer.update``, which is what ``dist_sync`` with
``update_on_kvstore=True`` computes on the servers. Servers match pushes by
key, so no global issue order is needed: the live priority policy applies on
each worker directly.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from ..core._checks import check_bool
from ..core.window import WIRE_LEN
from ._mxnet_gluon import _GluonEngine
from ._mxnet_layout import _Layout
from ._mxnet_overlap import measure_ready_times

#: Reserved KVStore keys; MXNet hashes a key as ``key * 9973`` in 32-bit
#: arithmetic to pick its server, so every key must stay below this bound.
MAX_KEY = 200_000
_KEY_STATS = 0
_KEY_DECISION = 1
_KEY_WEIGHTS0 = 2



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
        timeout_s: longest wait for the other workers (a message, a
            window's statistics) before :class:`PeerLostError` (300).
        overlap: let :meth:`step` return once the messages and the update
            are queued in MXNet's engine, so that each layer's next forward
            waits only for its own parameters, as plain ``dist_sync`` does
            (default True); False waits for every message in :meth:`step`.
            With overlap, call :meth:`synchronize` after the last step.

    Raises:
        ImportError: MXNet is missing. RuntimeError: MXNet is not 1.9.x, or
        the trainer already communicated. TypeError, ValueError: bad arguments
        (each message names the argument).
    """

    arch = "ps"
    fixed_order = False  # servers match pushes by key: the live priority policy applies

    def __init__(self, trainer: Any, *, partition_bytes: int, credit_bytes: int, kvstore: Any = None,
                 timeout_s: float = 300.0, overlap: bool = True) -> None:
        super().__init__(trainer, partition_bytes=partition_bytes, credit_bytes=credit_bytes, timeout_s=timeout_s)
        self.overlap = check_bool("overlap", overlap)
        self._kv = self._take_over(trainer, kvstore)
        self._next_key = _KEY_WEIGHTS0
        self._order_key = -1
        self._control_shapes: dict[int, tuple[int, ...]] = {}
        self._control_names: dict[int, str] = {}

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
        if _KEY_WEIGHTS0 + len(params) + 1 > MAX_KEY:
            raise RuntimeError(f"the model has {len(params)} parameters; the KVStore engine supports at most {MAX_KEY - _KEY_WEIGHTS0 - 1}.")
        self._order_key = _KEY_WEIGHTS0 + len(params)  # rank 0's parameter order (_forward_order)
        self._next_key = self._order_key + 1
        mx = self._mx
        width = 8 + n_tensors  # WindowStats.to_vector(): 8 scalars, then one time per tensor
        # Control keys of a fixed shape: a statistics row per worker, one decision message, one parameter order.
        self._control_shapes = {_KEY_STATS: (self.num_workers, width), _KEY_DECISION: (WIRE_LEN,),
                                self._order_key: (len(params),)}
        self._control_names = {_KEY_STATS: "the tuning window's statistics", _KEY_DECISION: "the tuning decision",
                               self._order_key: "rank 0's parameter order"}
        # One init call = one barrier: control keys, then rank 0's weights for everyone.
        control = [_KEY_STATS, _KEY_DECISION, self._order_key]
        self._kv.init(control, [mx.nd.zeros(self._control_shapes[k], dtype="float64") for k in control])
        wkeys = [_KEY_WEIGHTS0 + i for i in range(len(params))]
        self._kv.broadcast(wkeys, [p.list_data()[0] for p in params], out=[p.list_data() for p in params])

    def _register_layout(self, layout: _Layout) -> None:
        n = len(layout.messages)
        if self._next_key + n + 1 > MAX_KEY:
            raise RuntimeError(
                f"partition_bytes={layout.partition_bytes} needs {n + 1} KVStore keys but only "
                f"{MAX_KEY - self._next_key} are left (MXNet keys must stay below {MAX_KEY}); "
                "use a larger partition or fewer distinct partitions."
            )
        layout.keys = list(range(self._next_key, self._next_key + n))
        layout.order_key = self._next_key + n  # rank 0's issue order for this plan (overlap)
        self._next_key += n + 1
        mx = self._mx
        # A new plan's keys are initialised on the servers by every worker at the same
        # iteration (KVStore init ends with a barrier): no gradient can miss its key.
        self._kv.init(layout.keys + [layout.order_key],
                      [mx.nd.zeros((m.numel,), dtype=m.dtype) for m in layout.messages] + [mx.nd.zeros((n,), dtype="float64")])

    def _issue(self, layout: _Layout, index: int, bufs: list[Any]) -> None:
        self._kv.pushpull(layout.keys[index], bufs, out=bufs, priority=layout.mx_priority[index])

    def _forward_order(self, params: list[Any]) -> list[int]:
        """The reverse of the order in which the first backward pass produces the gradients.

        Called at the first step, while that backward runs: the priorities
        follow the network's real layer order, not the Trainer's (names sorted
        as text). Gradients ready together keep the Trainer's order.
        """
        ready = measure_ready_times(self._overlapper().ops, [p.list_grad() for p in params])
        return sorted(range(len(params)), key=lambda i: (ready[i], -i))[::-1]

    def _agree_order(self, order: list[int]) -> list[int]:
        """Rank 0's parameter order on every worker (the plans, hence the keys, must be the same everywhere)."""
        got = self._sum_on_servers(self._order_key, self._from_rank0(np.asarray(order, dtype=np.float64)))
        return _permutation(got, len(order), "parameter order")

    def _send_order(self, layout: _Layout, order: list[int]) -> Any:
        """Push and pull the plan's order key without waiting: rank 0 sends ``order``, the others zeros, the servers sum."""
        assert layout.order_key is not None
        nd = self._mx.nd.array(self._from_rank0(np.asarray(order, dtype=np.float64)), dtype="float64")
        self._kv.pushpull(layout.order_key, nd, out=nd, priority=1)  # (messages have priorities <= 0)
        return nd

    def _receive_order(self, layout: _Layout, handle: Any) -> list[int]:
        self._wait([handle], "rank 0's issue order")
        return _permutation(handle.asnumpy(), len(layout.messages), "issue order")

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
        return self._sum_on_servers(_KEY_DECISION, self._from_rank0(vec))

    def _peers_hint(self) -> str:
        return ("another worker (or a parameter server) stopped, crashed or is stuck: a dist_sync key completes "
                "only when every worker pushed it (every worker must run the same number of batches).")

    def _from_rank0(self, values: np.ndarray) -> np.ndarray:
        """``values`` on rank 0, zeros elsewhere: the servers' sum is rank 0's values on every worker."""
        return values if self.rank == 0 else np.zeros_like(values)

    def _sum_on_servers(self, key: int, values: np.ndarray) -> np.ndarray:
        shape = self._control_shapes[key]
        if values.shape != shape:
            raise ValueError(f"control key {key} carries float64 arrays of shape {shape}, but got shape {values.shape}.")
        nd = self._mx.nd.array(values, dtype="float64")
        self._kv.pushpull(key, nd, out=nd)
        self._wait([nd], self._control_names[key])
        return np.asarray(nd.asnumpy(), dtype=np.float64)


def _permutation(values: np.ndarray, n: int, what: str) -> list[int]:
    """Rank 0's ``what`` as received: a permutation of ``range(n)``, or a RuntimeError (a bug, never user input)."""
    agreed = [int(x) for x in values]
    if sorted(agreed) != list(range(n)):
        raise RuntimeError(f"the {what} received from rank 0 is not a permutation of {n} indices; this is a bug in autobyte.")
    return agreed


def schedule(trainer: Any, *, partition_bytes: int, credit_bytes: int, kvstore: Any = None,
             timeout_s: float = 300.0, overlap: bool = True) -> KVStoreEngine:
    """Take over ``trainer``'s parameter-server communication; call ``engine.step(batch_size)`` instead of ``trainer.step``.

    See :class:`KVStoreEngine` for the arguments and errors.
    """
    return KVStoreEngine(trainer, partition_bytes=partition_bytes, credit_bytes=credit_bytes, kvstore=kvstore,
                         timeout_s=timeout_s, overlap=overlap)
