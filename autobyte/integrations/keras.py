"""Keras 3 integration: a ``model.fit`` callback for data-parallel training on the torch backend.

Usage, one copy per process (``torchrun --nproc_per_node=2 train.py``)::

    import os
    os.environ["KERAS_BACKEND"] = "torch"
    import keras
    from autobyte.integrations.keras import AutoByteCallback

    cb = AutoByteCallback()                      # joins the torchrun process group
    x, y = x[cb.rank::cb.world_size], y[cb.rank::cb.world_size]   # each rank its own shard
    model.fit(x, y, batch_size=32, callbacks=[cb])

On GPUs, one process per GPU: the callback puts each process on the GPU of
its ``LOCAL_RANK`` (``torch.cuda.set_device``) when it is created, so create
it before building the model, and averages over NCCL. Where more processes
than GPUs share a machine it falls back to gloo and says so.

Each rank computes gradients on its own batches; the callback averages them
across ranks through the scheduler of :mod:`autobyte.integrations.torch`
(partitioned, prioritised, under a credit window) by the end of
``backward()``, before Keras's optimizer reads ``variable.value.grad`` and
applies them, so every rank applies the same averaged update.
"""

from __future__ import annotations

import atexit
import os
from dataclasses import dataclass
from typing import Any, Mapping

from ..core.space import BYTESCHEDULER_DEFAULT, SearchSpace
from ..core.tuning import Tuner
from ..core.window import DecisionRecord, WindowOutcome
from ..core.wire import AutoWire
from ._common import CallbackState, check_tuning_args
from ._imports import require

__all__ = ["AutoByteCallback", "Placement", "gpu_placement"]

#: Keras backends this callback runs on.
SUPPORTED_BACKENDS = ("torch",)


def _import_keras() -> Any:
    """Import Keras, telling a missing Keras apart from a Keras whose backend cannot load."""
    try:
        return require("keras")
    except ImportError as exc:
        missing = getattr(exc.__cause__, "name", None) or ""
        if missing and missing.split(".")[0] != "keras":
            backend = os.environ.get("KERAS_BACKEND", "from ~/.keras/keras.json, tensorflow by default")
            raise ImportError(
                f"keras is installed but cannot load its backend (KERAS_BACKEND: {backend}; {exc.__cause__}); "
                "autobyte's Keras callback supports only the torch backend: set the environment variable "
                "KERAS_BACKEND=torch before importing keras."
            ) from exc.__cause__
        raise


keras = _import_keras()
# A name mypy accepts as a base class (keras is a module value here, imported with its install hint).
_KerasCallback: Any = keras.callbacks.Callback


def _check_backend() -> None:
    backend = keras.backend.backend()
    if backend not in SUPPORTED_BACKENDS:
        raise RuntimeError(
            f"autobyte's Keras callback supports only the {' / '.join(SUPPORTED_BACKENDS)} backend, but Keras runs on "
            f"backend {backend!r}; set the environment variable KERAS_BACKEND=torch before importing keras "
            "(and install torch: pip install \"autobyte[keras]\", which brings it)."
        )


class AutoByteCallback(CallbackState, _KerasCallback):
    """Average gradients across processes with AutoByte's scheduler during ``model.fit`` (torch backend).

    Start one process per worker with ``torchrun`` (or any launcher that sets
    ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT``); the
    callback joins that process group (gloo on CPU, NCCL when the model is on
    a GPU) unless ``torch.distributed`` is already initialised. Feed each rank
    its own shard of the data (:attr:`rank`, :attr:`world_size`). At the start
    of ``fit`` every weight is broadcast from rank 0; in every training step
    the gradients are averaged exactly once, when ``backward()`` ends, before
    the optimizer applies them, and non-trainable weights (batch-norm
    statistics) follow rank 0 as with PyTorch DDP. In a single process it
    trains unchanged and only collects statistics.

    ``<partition_bytes, credit_bytes>`` are tuned between steps by ``tuner``;
    ``logs`` of every epoch get ``autobyte_partition_bytes`` and
    ``autobyte_credit_bytes`` (and, on rank 0, ``autobyte_speed``, the last
    window's samples/s), so they appear in ``History`` and in Keras's
    TensorBoard/CSVLogger callbacks listed after this one.

    Args:
        tuner: ``"autobyte"`` (default), ``"static"``, ``"grid"``, ``"bo"``, a
            :class:`~autobyte.core.tuning.Tuner`, or ``None`` (fixed configuration).
        partition_bytes: first message size (default 4 MB, ByteScheduler's).
        credit_bytes: first credit, most bytes in flight (default 16 MB).
        window_iters: steps per tuning window (default 10).
        warmup_iters: steps ignored at start and after each change (default 2).
        space: candidate configurations for the tuner.
        verbose: print each reconfiguration on rank 0 (default True).
        timeout_s: longest wait for a peer process before failing (default 300).
        wire: the gradients' precision on the wire, ``"fp32"`` (default, exact),
            ``"bf16"`` or ``"fp16"`` (the numerics of DDP's compression hooks;
            docs/torch.md, "16-bit gradients on the wire"); ``"auto"``: fp32
            unless bf16 is measured at least 5% faster in the current conditions,
            starting at bf16, the first precision measured
            (:class:`autobyte.core.wire.AutoWire` for another preference).

    Raises:
        RuntimeError: Keras does not run on the torch backend.
        TypeError, ValueError: an invalid argument; at ``fit``: a model
            compiled with ``jit_compile=True``, or one whose trainable weights
            are not its torch parameters.

    Example:
        >>> model.fit(x, y, callbacks=[AutoByteCallback(tuner="static")])  # doctest: +SKIP
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
        verbose: bool = True,
        timeout_s: float = 300.0,
        wire: "str | AutoWire" = "fp32",
    ) -> None:
        _check_backend()
        super().__init__()
        self.initial = check_tuning_args(tuner, partition_bytes, credit_bytes, window_iters, warmup_iters, space, verbose, timeout_s, wire)
        self.wire = wire
        self._tuner_arg = tuner
        self.tuner: Tuner | None = tuner if isinstance(tuner, Tuner) else None
        self.window_iters = window_iters
        self.warmup_iters = warmup_iters
        self.space = space
        self.verbose = verbose
        self.timeout_s = float(timeout_s)
        #: The engine's handle of the current (or last) ``fit``.
        self.handle: Any = None
        #: Rank 0: one record per reconfiguration (step, configurations, reason, speeds).
        self.decisions: list[dict[str, Any]] = []
        self._restored: dict[str, Any] | None = None
        self._active = False
        self._extra: list[Any] = []
        #: Where this process computes and which backend averages (set where a launcher started several processes).
        self.placement: Placement | None = _place()

    # ------------------------------------------------------------ processes
    # Reading these never starts a process group: they come from the group when
    # there is one, else from the launcher's environment (RANK, WORLD_SIZE).
    @property
    def world_size(self) -> int:
        """Number of processes (from the process group, else ``WORLD_SIZE``; 1 without a launcher)."""
        dist = _dist()
        return int(dist.get_world_size()) if dist.is_initialized() else _env_int("WORLD_SIZE", 1, minimum=1)

    @property
    def rank(self) -> int:
        """This process's rank (from the process group, else ``RANK``), 0 in a single process."""
        dist = _dist()
        if dist.is_initialized():
            return int(dist.get_rank())
        return _env_int("RANK", 0, minimum=0) if self.world_size > 1 else 0

    # ------------------------------------------------------------------ fit
    def on_train_begin(self, logs: dict | None = None) -> None:
        from . import torch as engine

        _check_backend()
        model = self.model
        self._finish(model)  # a previous fit that raised never reached on_train_end
        if getattr(model, "jit_compile", False):
            raise ValueError(
                "AutoByteCallback needs eager training steps (it hooks backward()), but the model was compiled with "
                "jit_compile=True; pass jit_compile=False to model.compile()."
            )
        holder = _parameters_of(model, engine.torch)
        if self.tuner is None and isinstance(self._tuner_arg, str):
            from ..core.tuners import make_tuner

            self.tuner = make_tuner(self._tuner_arg)
        self.placement = _ensure_group() or self.placement
        _check_model_device(holder, self.placement)
        self.handle = engine.schedule(
            holder, None, overlap=False, iteration_hooks=False,
            partition_bytes=self.initial.partition_bytes, credit_bytes=self.initial.credit_bytes, wire=self.wire,
            timeout_s=self.timeout_s, tuner=self.tuner, space=self.space,
            window_iters=self.window_iters, warmup_iters=self.warmup_iters, on_decision=self._on_decision,
        )
        self._active = True
        if self._restored is not None:
            self.handle.load_state_dict(self._restored.get("engine", {}))
            self.decisions = [dict(d) for d in self._restored.get("decisions", [])]
            self._restored = None
        handle = self.handle
        self._holder = holder

        # Keras's batch hooks do not see the batch (nor its size) and turn off
        # async dispatch; wrapping this model's train_step marks each step instead.
        inner = model.train_step

        def train_step(data: Any) -> Any:
            handle.begin_iteration(_batch_size(data))
            return inner(data)

        model.train_step = train_step
        if self.verbose and handle.rank == 0:
            what = "collecting statistics only (one process)" if handle.world_size == 1 else (
                f"averaging {handle.bytes_per_iteration} gradient bytes per step over {handle.world_size} processes")
            where = f" ({self.placement.note})" if self.placement is not None and handle.world_size > 1 else ""
            print(f"AutoByte: {what}, starting at {handle.config}{where}.", flush=True)

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        if logs is None or not self._active:
            return
        cfg = self.handle.config
        logs["autobyte_partition_bytes"] = float(cfg.partition_bytes)
        logs["autobyte_credit_bytes"] = float(cfg.credit_bytes)
        ctl = self.handle.controller
        if ctl is not None and ctl.history:
            logs["autobyte_speed"] = float(ctl.history[-1]["speed"])

    def on_train_end(self, logs: dict | None = None) -> None:
        if self._active and self.handle.active:
            # Batch-norm statistics moved on every rank after the last broadcast: end on rank 0's.
            self.handle._sync_buffers()
        self._finish(self.model)

    def _finish(self, model: Any) -> None:
        model.__dict__.pop("train_step", None)
        if self._active:
            self._active = False
            self.handle.close()

    def _on_decision(self, out: WindowOutcome) -> None:
        d = out.decision
        if d is None or self.handle is None or self.handle.rank != 0:
            return
        record = {"iteration": d.iteration, "previous": d.old.to_dict(), "config": d.new.to_dict(),
                  "reason": d.reason, "observed_speed": d.observed_speed, "predicted_speed": d.predicted_speed}
        self.decisions.append(record)
        if self.verbose:
            print(f"AutoByte reconfigured at step {d.iteration}: {d.old} -> {d.new}: {d.reason}", flush=True)

    @property
    def reconfigurations(self) -> list[DecisionRecord]:
        """Every reconfiguration of the current (or last) ``fit`` on this rank, as the engines record them."""
        return [] if self.handle is None else self.handle.reconfigurations



def _dist() -> Any:
    from . import torch as engine

    return engine.dist


@dataclass(frozen=True)
class Placement:
    """Where one process computes and which backend averages its gradients."""

    backend: str  #: "nccl" or "gloo"
    cuda_index: int | None  #: the GPU this process uses, None on CPU
    note: str  #: said in the callback's start-up line


def gpu_placement(*, on_cuda: bool, n_gpus: int, local_rank: int, local_world_size: int) -> Placement:
    """Each process on the GPU of its ``LOCAL_RANK``, NCCL; gloo where processes would share a GPU.

    NCCL refuses two ranks on one GPU ("Duplicate GPU detected"), so with more
    processes on a machine than GPUs each process still computes on GPU
    ``LOCAL_RANK % n_gpus`` but gradients are averaged over gloo.

    Args:
        on_cuda: Keras computes on CUDA (its torch backend's device).
        n_gpus: CUDA devices this process sees.
        local_rank: the process's index on its machine (``LOCAL_RANK``).
        local_world_size: processes on this machine (``LOCAL_WORLD_SIZE``).

    Raises:
        ValueError: ``local_rank`` outside ``0..local_world_size - 1``.
    """
    if not 0 <= local_rank < local_world_size:
        raise ValueError(f"LOCAL_RANK must be in 0..{local_world_size - 1} (LOCAL_WORLD_SIZE={local_world_size}), but got LOCAL_RANK={local_rank}.")
    if not on_cuda or n_gpus < 1:
        return Placement("gloo", None, "on CPU, gloo")
    if local_world_size <= n_gpus:
        return Placement("nccl", local_rank, f"each process on the GPU of its LOCAL_RANK, this one cuda:{local_rank}, nccl")
    i = local_rank % n_gpus
    return Placement("gloo", i, (
        f"{local_world_size} processes share {n_gpus} GPU(s), this one on cuda:{i}: averaging over gloo, because NCCL needs "
        f"one GPU per process; for NCCL start at most {n_gpus} process(es) per machine (torchrun --nproc_per_node={n_gpus})"))


def _env_int(name: str, default: int, *, minimum: int, env: Mapping[str, str] | None = None) -> int:
    raw = (os.environ if env is None else env).get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise RuntimeError(f"the environment variable {name} must be an integer >= {minimum}, but got {name}={raw!r}.")
    return value


def _place() -> Placement | None:
    """Put this process on its GPU, as a launcher that started several expects; None in one process."""
    dist = _dist()
    if dist.is_initialized() or _env_int("WORLD_SIZE", 1, minimum=1) <= 1:
        return None
    from keras.src.backend.torch.core import get_device  # type: ignore[import-untyped]

    from . import torch as engine

    torch = engine.torch
    world = _env_int("WORLD_SIZE", 1, minimum=1)
    local_world = _env_int("LOCAL_WORLD_SIZE", world, minimum=1)
    local_rank = _env_int("LOCAL_RANK", 0, minimum=0)
    on_cuda = str(get_device()).startswith("cuda")
    p = gpu_placement(on_cuda=on_cuda, n_gpus=torch.cuda.device_count() if on_cuda else 0, local_rank=local_rank, local_world_size=local_world)
    if p.cuda_index is not None:
        torch.cuda.set_device(p.cuda_index)  # before the model is built: Keras creates its weights on the current GPU
    return p


def _ensure_group() -> Placement | None:
    """Join the launcher's process group if there is one; the placement used when this call created it."""
    dist = _dist()
    if dist.is_initialized():
        return None
    world = _env_int("WORLD_SIZE", 1, minimum=1)
    if world <= 1:
        return None
    for var in ("RANK", "MASTER_ADDR", "MASTER_PORT"):
        if var not in os.environ:
            raise RuntimeError(f"WORLD_SIZE={world} is set but {var} is not; start the processes with torchrun, or set RANK, MASTER_ADDR and MASTER_PORT.")
    placement = _place()
    assert placement is not None
    dist.init_process_group(placement.backend, init_method="env://")
    # The callback made the group, so it also ends it: a gloo group still alive
    # at interpreter exit can abort the process ("terminate called ...").
    atexit.register(_destroy_group)
    return placement


def _check_model_device(holder: Any, placement: Placement | None) -> None:
    if placement is None or placement.cuda_index is None:
        return
    where = {str(p.device) for p in holder.parameters()}
    want = f"cuda:{placement.cuda_index}"
    if where != {want}:
        raise RuntimeError(
            f"this process computes on {want} (LOCAL_RANK={os.environ.get('LOCAL_RANK', '0')}), but the model's weights "
            f"sit on {sorted(where)}; create AutoByteCallback() before building the model (it sets each process's GPU), "
            "or call torch.cuda.set_device(int(os.environ['LOCAL_RANK'])) first."
        )


def _destroy_group() -> None:
    dist = _dist()
    if dist.is_initialized():
        dist.destroy_process_group()


def _parameters_of(model: Any, torch: Any) -> Any:
    """The model's trainable torch parameters in Keras order (input first), plus its other weights as buffers."""
    trainable = [v.value for v in model.trainable_weights]
    if not trainable:
        raise ValueError("the model has no trainable weights; there is nothing to synchronise (build and compile it before fit).")
    mine = {id(p) for p in model.parameters() if p.requires_grad}
    if mine != {id(p) for p in trainable}:
        raise ValueError(
            f"the model's trainable weights ({len(trainable)}) are not its torch parameters with requires_grad "
            f"({len(mine)}); AutoByteCallback supports Keras models whose weights are Keras variables."
        )
    holder = torch.nn.Module()
    holder.params = torch.nn.ParameterList(trainable)
    for i, v in enumerate(model.non_trainable_weights):
        t = v.value
        if isinstance(t, torch.Tensor) and t.is_floating_point():
            holder.register_buffer(f"state{i}", t.data)
    return holder


def _batch_size(data: Any) -> int:
    for t in keras.tree.flatten(data):
        shape = getattr(t, "shape", None)
        if shape is not None and len(shape) > 0:
            return int(shape[0])
    return 1
