"""MXNet Gluon integration: a scheduled, tuned parameter server in one Estimator event handler.

Add one object to an Estimator whose Trainer uses ``kvstore="dist_sync"``::

    est.fit(train_data, epochs=2, event_handlers=[AutoByteHandler()])

The handler builds a :class:`KVStoreEngine` (gradients pushed and pulled by
priority under a credit window, one KVStore key per message), feeds every
window of statistics to a tuner on rank 0, and switches every worker to the
chosen ``<partition_bytes, credit_bytes>`` at the same batch boundary.
"""

from __future__ import annotations

import warnings
import weakref
from typing import Any

from ..core.space import BYTESCHEDULER_DEFAULT, Config, SearchSpace
from ..core.tuning import Controller, StaticTuner, Tuner
from ..core.window import DecisionRecord, WindowCoordinator, WindowOutcome
from ._common import CollectiveMismatchError, PeerLostError, check_tuning_args
from ._mxnet_gluon import _GluonEngine
from ._mxnet_kvstore import KVStoreEngine, schedule
from ._mxnet_horovod import HOROVOD_HINT, HorovodEngine
from ._mxnet_imports import INSTALL_HINT, SUPPORTED_MXNET, check_mxnet_version, import_mxnet
from ._mxnet_launch import WorkerResult, free_port, launch_local_ps

try:
    from mxnet.gluon.contrib.estimator.event_handler import BatchBegin, GradientUpdateHandler, TrainBegin, TrainEnd  # type: ignore[import-untyped]

    _IMPORT_ERROR: BaseException | None = None
except ImportError as _exc:  # MXNet missing: the handler raises with an install hint when built
    _IMPORT_ERROR = _exc
    TrainBegin = type("TrainBegin", (), {})  # type: ignore[misc,assignment]
    BatchBegin = type("BatchBegin", (), {})  # type: ignore[misc,assignment]
    GradientUpdateHandler = type("GradientUpdateHandler", (), {})  # type: ignore[misc,assignment]
    TrainEnd = type("TrainEnd", (), {})  # type: ignore[misc,assignment]


def _make_tuner(tuner: str | Tuner, tuner_kwargs: dict[str, Any]) -> Tuner:
    if isinstance(tuner, Tuner):
        return tuner
    if not isinstance(tuner, str):
        raise TypeError(f"tuner must be a tuner name (str) or a autobyte Tuner instance, but got tuner={tuner!r}.")
    try:
        from ..core.tuners import make_tuner, tuner_names
    except ImportError:
        if tuner == "static":
            return StaticTuner(**tuner_kwargs)
        raise ValueError(
            f"tuner must be 'static' or a Tuner instance (the tuner registry autobyte.core.tuners is not available), "
            f"but got tuner={tuner!r}."
        ) from None
    names = tuner_names()
    if tuner not in names:
        raise ValueError(f"tuner must be one of {names} or a Tuner instance, but got tuner={tuner!r}.")
    try:
        return make_tuner(tuner, **tuner_kwargs)
    except (ImportError, AttributeError, OSError) as exc:
        # e.g. the meta-network's package or weights are missing: say which tuner, and the way out.
        raise type(exc)(f"tuner={tuner!r} could not be built ({exc}); install what it needs or pass tuner='static'.") from exc


ENGINES = ("horovod", "kvstore")


class _WeakHook:
    """A bound method that does not keep its object alive (no engine <-> handler cycle holding the KVStore)."""

    def __init__(self, method: Any) -> None:
        self._method = weakref.WeakMethod(method)

    def __call__(self, iteration: int) -> None:
        method = self._method()
        if method is not None:
            method(iteration)


def _record(saved: Any) -> DecisionRecord:
    """A saved reconfiguration: a record's dict, or the ``(iteration, old, new, reason)`` of autobyte 0.1."""
    if isinstance(saved, dict):
        return DecisionRecord.from_dict(saved)
    i, a, b, r = saved
    return DecisionRecord(int(i), Config(**a), Config(**b), str(r))


class AutoByteHandler(TrainBegin, BatchBegin, GradientUpdateHandler, TrainEnd):  # type: ignore[misc,valid-type]
    """Gluon Estimator event handler: scheduled, auto-tuned gradient communication (parameter server or Horovod).

    It replaces the Estimator's ``GradientUpdateHandler``: at the end of each
    batch it pushes and pulls the gradients through a :class:`KVStoreEngine`
    (``engine="kvstore"``, a ``dist_sync`` parameter server) or all-reduces
    them through a :class:`HorovodEngine` (``engine="horovod"``), then
    applies the optimizer. Every ``window_iters`` batches (sooner when
    conditions change, see :class:`~autobyte.core.tuning.Controller`), rank
    0's tuner sees every worker's statistics and may pick a new
    configuration, which every worker applies from the next batch. With a non-distributed kvstore
    (one worker) it warns once and training runs exactly as without it.

    Args:
        tuner: ``"autobyte"`` (default, the meta-network), ``"static"`` or
            ``None`` (never reconfigures), ``"grid"``, ``"bo"``, or a
            :class:`~autobyte.core.tuning.Tuner` instance.
        partition_bytes: initial partition (default ByteScheduler's, 4 MB).
        credit_bytes: initial credit (default ByteScheduler's, 16 MB).
        window_iters: batches per decision window (default 10).
        warmup_iters: batches ignored at the start and after each
            reconfiguration (default 2).
        space: candidate configurations (default
            :meth:`SearchSpace.default`).
        timeout_s: longest wait for the other workers before
            :class:`PeerLostError` (default 300).
        engine: ``"kvstore"`` (default) or ``"horovod"``.
        kvstore: overrides the Trainer's kvstore (type string or KVStore;
            ``engine="kvstore"`` only).
        tuner_kwargs: keyword arguments for a tuner built by name.
        verbose: log windows and decisions with the Estimator's logger (rank 0 only).
        priority: Estimator handler priority (default -2000, the slot of
            ``GradientUpdateHandler``).
        search_space: deprecated name of ``space``.
        wire: the gradients' precision on the wire; only ``"fp32"`` (the
            gradients' own): the KVStore and Horovod engines send gradients
            in their own precision (docs/mxnet.md). 16 bits on the wire are
            in the PyTorch engine (``autobyte.integrations.torch.schedule(wire=...)``,
            the Lightning and Keras callbacks).

    Raises:
        ImportError: MXNet is missing (with the install command).
        RuntimeError: MXNet is not 1.9.x.
        TypeError, ValueError: bad arguments; the message names the argument.
        PeerLostError: (while training) another worker stopped answering for ``timeout_s``.

    Example::

        trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1}, kvstore="dist_sync")
        est = Estimator(net, loss=gluon.loss.SoftmaxCrossEntropyLoss(), trainer=trainer)
        est.fit(train_data, epochs=2, event_handlers=[AutoByteHandler(tuner="static")])
    """

    def __init__(
        self,
        tuner: str | Tuner | None = "autobyte",
        *,
        partition_bytes: int = BYTESCHEDULER_DEFAULT.partition_bytes,
        credit_bytes: int = BYTESCHEDULER_DEFAULT.credit_bytes,
        window_iters: int = 10,
        warmup_iters: int = 2,
        space: SearchSpace | None = None,
        timeout_s: float = 300.0,
        verbose: bool = True,
        engine: str = "kvstore",
        kvstore: Any = None,
        tuner_kwargs: dict[str, Any] | None = None,
        priority: float = -2000,
        search_space: SearchSpace | None = None,
        wire: str = "fp32",
    ) -> None:
        if _IMPORT_ERROR is not None:
            raise ImportError(f"AutoByteHandler needs MXNet, which could not be imported ({_IMPORT_ERROR}); {INSTALL_HINT}.")
        import_mxnet()
        if search_space is not None:
            if space is not None:
                raise ValueError("space and search_space are the same argument; pass space only.")
            warnings.warn("AutoByteHandler(search_space=...) is deprecated; pass space=... as every autobyte callback takes.",
                          DeprecationWarning, stacklevel=2)
            space = search_space
        self.initial = check_tuning_args(tuner, partition_bytes, credit_bytes, window_iters, warmup_iters, space, verbose,
                                         timeout_s, wire)
        if wire != "fp32":
            why = ("MXNet 1.9 has no bfloat16 arrays" if wire == "bf16" else "the KVStore and Horovod engines send gradients in "
                   "their own precision (a dist_sync KVStore sums float16 arrays, but this engine does not cast to them)")
            raise ValueError(f"wire must be 'fp32' with AutoByteHandler, but got wire={wire!r}: {why}; 16-bit gradients on the wire "
                             "are in the PyTorch engine: autobyte.integrations.torch.schedule(wire=...) and the Lightning and "
                             "Keras AutoByteCallback(wire=...).")
        self.window_iters = window_iters
        self.warmup_iters = warmup_iters
        self.timeout_s = float(timeout_s)
        if tuner_kwargs is not None and not isinstance(tuner_kwargs, dict):
            raise TypeError(f"tuner_kwargs must be a dict or None, but got tuner_kwargs={tuner_kwargs!r}.")
        if engine not in ENGINES:
            raise ValueError(f"engine must be one of {ENGINES}, but got engine={engine!r}.")
        if engine != "kvstore" and kvstore is not None:
            raise ValueError(f"kvstore applies to engine='kvstore' only, but got kvstore={kvstore!r} with engine={engine!r}.")
        self.engine_name = engine
        self.tuner = _make_tuner("static" if tuner is None else tuner, dict(tuner_kwargs or {}))
        #: candidate configurations of the tuner
        self.space = space if space is not None else SearchSpace.default()
        self.kvstore = kvstore
        self.verbose = verbose
        self.priority = priority
        self.engine: _GluonEngine | None = None
        #: the window protocol (built at the first distributed step)
        self.coordinator: WindowCoordinator | None = None
        #: every reconfiguration applied, on every rank (:class:`~autobyte.core.window.DecisionRecord`).
        self.reconfigurations: list[DecisionRecord] = []
        self._restored: dict[str, Any] | None = None
        self._logger: Any = None

    # ---------------------------------------------------------------- events
    def train_begin(self, estimator: Any, *args: Any, **kwargs: Any) -> None:
        self._logger = getattr(estimator, "logger", None)
        if self.engine is None:
            sizes: dict[str, Any] = {"partition_bytes": self.initial.partition_bytes,
                                     "credit_bytes": self.initial.credit_bytes, "timeout_s": self.timeout_s}
            if self.engine_name == "horovod":
                self.engine = HorovodEngine(estimator.trainer, **sizes)
                how = "start the processes with horovodrun"
            else:
                self.engine = schedule(estimator.trainer, kvstore=self.kvstore, **sizes)
                how = "use kvstore='dist_sync' with DMLC_* variables set to train on a parameter server"
            if not self.engine.distributed:
                warnings.warn(
                    f"AutoByteHandler: there is one worker (engine={self.engine_name!r}), so there is no "
                    f"communication to schedule; training runs unchanged ({how}).",
                    stacklevel=2,
                )
            if self._restored is not None:
                self.engine.load_state_dict(self._restored.get("engine", {}))
            # The engine reports each iteration once its communication is complete (with overlap, inside the next step).
            self.engine.on_iteration_end = _WeakHook(self._after_iteration)

    def batch_begin(self, estimator: Any, *args: Any, **kwargs: Any) -> None:
        if self.engine is None:
            self.train_begin(estimator)
        assert self.engine is not None
        self.engine.begin_iteration()

    def batch_end(self, estimator: Any, *args: Any, **kwargs: Any) -> None:
        if self.engine is None:
            self.train_begin(estimator)
        engine = self.engine
        assert engine is not None
        loss = kwargs["loss"]
        losses = loss if isinstance(loss, (list, tuple)) else [loss]
        engine.step(sum(int(l.shape[0]) for l in losses))

    def train_end(self, estimator: Any, *args: Any, **kwargs: Any) -> None:
        if self.engine is not None:
            self.engine.synchronize()  # the last batch's communication: its statistics, a lost peer
        if self.engine is not None and self.engine.distributed and self.engine.rank == 0 and self.verbose:
            self._log(f"autobyte: finished at {self.engine.config} after {self.engine.iteration} batches, "
                      f"{len(self.reconfigurations)} reconfiguration(s).")

    # ------------------------------------------------------------ decisions
    def _after_iteration(self, iteration: int) -> None:
        """The engine's ``on_iteration_end``: ``iteration``'s statistics are in; a decision applies from the next one."""
        engine = self.engine
        assert engine is not None
        if self.coordinator is None:
            self._start_coordinator(engine)
        assert self.coordinator is not None and engine.stats is not None
        self._follow(engine, self.coordinator.end_iteration(iteration, engine.stats))

    def _start_coordinator(self, engine: _GluonEngine) -> None:
        controller = Controller(
            self.tuner, self.space, engine.config, engine.arch, [t.nbytes for t in engine.tensors],
            window_iters=self.window_iters, warmup_iters=self.warmup_iters, link_factor=engine.link_factor,
        )
        self.coordinator = WindowCoordinator(controller, engine)
        self.coordinator.history = self.reconfigurations
        if self._restored is not None:
            controller.load_state_dict(self._restored.get("controller", {}))
            self._restored = None
        # The tuner may choose where to begin; rank 0's choice holds everywhere.
        self._follow(engine, self.coordinator.start(engine.iteration, engine.config))

    def _follow(self, engine: _GluonEngine, out: WindowOutcome) -> None:
        """Apply what the window protocol returned: the engine's scheduler follows the coordinator."""
        if out.decision is not None:
            d = out.decision
            engine.reconfigure(d.new.partition_bytes, d.new.credit_bytes, at_iteration=d.iteration, reason=d.reason)
        if engine.rank == 0 and self.verbose:
            for line in out.log_lines("batch"):
                self._log(line)

    @property
    def controller(self) -> Controller | None:
        """The tuning controller (built at the first distributed step)."""
        return None if self.coordinator is None else self.coordinator.controller

    def _log(self, msg: str) -> None:
        if self._logger is not None:
            self._logger.info(msg)
        else:
            print(msg, flush=True)

    # ----------------------------------------------------------------- state
    def state_dict(self) -> dict[str, Any]:
        """Plain-type state: the controller (tuner included) and the engine's step and config."""
        return {
            "controller": self.controller.state_dict() if self.controller is not None else {},
            "engine": self.engine.state_dict() if self.engine is not None else {},
            "reconfigurations": [r.to_dict() for r in self.reconfigurations],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict` (applied when training starts if it has not yet)."""
        self.reconfigurations[:] = [_record(r) for r in state.get("reconfigurations", [])]
        if self.controller is not None:
            self.controller.load_state_dict(state.get("controller", {}))
        if self.engine is not None:
            self.engine.load_state_dict(state.get("engine", {}))
        if self.controller is None or self.engine is None:
            self._restored = dict(state)


__all__ = [
    "AutoByteHandler", "CollectiveMismatchError", "ENGINES", "HOROVOD_HINT", "HorovodEngine", "INSTALL_HINT",
    "KVStoreEngine", "PeerLostError", "SUPPORTED_MXNET", "WorkerResult", "check_mxnet_version", "free_port",
    "launch_local_ps", "schedule",
]
