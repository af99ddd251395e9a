"""Horovod engine: a Gluon Trainer's gradients all-reduced by Horovod in scheduled messages.

The same messages as the KVStore engine (split views, fused buffers), each
one ``horovod.mxnet.allreduce_`` named after its plan and index. Collectives
need every rank to issue the same messages in the same order, so the order
is computed from the plan alone (``plan_order``: the credit policy run on
the plan with ready times = backward order) and the credit window gates
issue in that order. Gradients are averaged, as ``hvd.DistributedTrainer``
does.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

import numpy as np

from ._mxnet_gluon import _GluonEngine
from ._mxnet_layout import _Layout

HOROVOD_HINT = (
    "install it with MXNet support: HOROVOD_WITH_MXNET=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_PYTORCH=1 "
    "HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MPI=1 pip install --no-build-isolation horovod==0.28.1 "
    "(after mxnet==1.9.1 and numpy<1.24)"
)


def import_horovod_mxnet() -> ModuleType:
    """``import horovod.mxnet`` with an install hint.

    Raises:
        ImportError: Horovod is missing or was built without MXNet.
    """
    try:
        return importlib.import_module("horovod.mxnet")
    except ImportError as exc:
        raise ImportError(f"the Horovod engine needs horovod.mxnet, which could not be imported ({exc}); {HOROVOD_HINT}.") from exc


class HorovodEngine(_GluonEngine):
    """Scheduled gradient all-reduce of a Gluon ``Trainer`` through Horovod (gloo or MPI).

    Call :meth:`step` where you called ``trainer.step``; start the processes
    with ``horovodrun`` as usual. With one process, :meth:`step` is
    ``trainer.step``.

    Args:
        trainer: a ``mxnet.gluon.Trainer`` without a distributed kvstore, or a
            ``horovod.mxnet.DistributedTrainer``, on one context, before its
            first ``step``.
        partition_bytes: largest message.
        credit_bytes: most bytes in flight at once.
        timeout_s: longest wait for the other workers (the tuning window's
            collectives) before :class:`PeerLostError` (300).

    Raises:
        ImportError: MXNet or horovod.mxnet missing. RuntimeError: MXNet not
        1.9.x, or the trainer already communicated. TypeError, ValueError:
        bad arguments (each message names the argument).
    """

    arch = "allreduce"
    fixed_order = True

    def __init__(self, trainer: Any, *, partition_bytes: int, credit_bytes: int, timeout_s: float = 300.0) -> None:
        super().__init__(trainer, partition_bytes=partition_bytes, credit_bytes=credit_bytes, timeout_s=timeout_s)
        mx = self._mx
        if trainer._kv_initialized and trainer._kvstore is not None:
            raise RuntimeError("trainer has already created its KVStore (trainer.step was called); build the engine before the first trainer.step().")
        spec = trainer._kvstore_params["kvstore"]
        kv_type = spec if isinstance(spec, str) else getattr(spec, "type", "") if isinstance(spec, mx.kvstore.KVStoreBase) else ""
        if "dist" in kv_type:
            raise ValueError(f"the Horovod engine all-reduces; the trainer's kvstore must not be a parameter server, but got kvstore={kv_type!r} (use engine='kvstore').")
        if len(trainer._contexts) != 1:
            raise ValueError(f"the Horovod engine needs one context per process, but the trainer has {len(trainer._contexts)}: {trainer._contexts}.")
        self._hvd = hvd = import_horovod_mxnet()
        if not hvd.is_initialized():
            hvd.init()
        self._rank, self._size = int(hvd.rank()), int(hvd.size())
        if self._size > 1:
            trainer._kvstore_params = {"kvstore": None, "update_on_kvstore": False}
            trainer._kv_initialized = False
            if not isinstance(trainer, hvd.DistributedTrainer):
                trainer._scale /= self._size  # average, as DistributedTrainer does

    @property
    def distributed(self) -> bool:
        return self._size > 1

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def num_workers(self) -> int:
        return self._size

    @property
    def link_factor(self) -> float:
        n = self._size
        return 2.0 * (n - 1) / n if n > 1 else 1.0

    def _setup_comm(self, params: list[Any], n_tensors: int) -> None:
        for i, p in enumerate(params):
            self._hvd.broadcast_(p.data(), root_rank=0, name=f"autobyte.weight.{i}")
        for p in params:
            p.data().wait_to_read()

    def _register_layout(self, layout: _Layout) -> None:
        layout.names = [f"autobyte.p{layout.partition_bytes}.m{m.index}" for m in layout.messages]

    def _issue(self, layout: _Layout, index: int, bufs: list[Any]) -> None:
        self._hvd.allreduce_(bufs[0], average=False, name=layout.names[index], priority=layout.mx_priority[index])

    def all_gather(self, vector: np.ndarray) -> list[np.ndarray]:
        """Every worker's ``vector``, in rank order: each worker fills its row, an all-reduce sums the rows."""
        vec = np.asarray(vector, dtype=np.float64).reshape(-1)
        if not self.distributed:
            return [vec]
        rows = np.zeros((self._size, vec.size), dtype=np.float64)
        rows[self._rank] = vec
        nd = self._mx.nd.array(rows, dtype="float64")
        self._hvd.allreduce_(nd, average=False, name="autobyte.stats")
        self._wait([nd], "the tuning window's statistics")
        return list(np.asarray(nd.asnumpy(), dtype=np.float64))

    def broadcast(self, vector: np.ndarray) -> np.ndarray:
        """Rank 0's ``vector`` (Horovod broadcast from root 0)."""
        vec = np.asarray(vector, dtype=np.float64).reshape(-1)
        if not self.distributed:
            return vec
        nd = self._mx.nd.array(vec, dtype="float64")
        self._hvd.broadcast_(nd, root_rank=0, name="autobyte.decision")
        self._wait([nd], "the tuning decision")
        return np.asarray(nd.asnumpy(), dtype=np.float64)
