"""The PyTorch engine: scheduled gradient all-reduce on ``torch.distributed``.

Usage in a ``torchrun`` script (no Lightning needed)::

    import torch.distributed as dist
    from autobyte.integrations.torch import schedule

    dist.init_process_group("gloo")          # or "nccl" on GPUs
    model = MyModel()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    handle = schedule(model, optimizer, partition_bytes=4_000_000, credit_bytes=16_000_000)
    for x, y in loader:
        loss = loss_fn(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    handle.synchronize()                      # all updates applied (before eval/saving)

What happens: each parameter's gradient is copied into its message as soon
as autograd has accumulated it; messages (split/fused by
:func:`autobyte.core.scheduler.plan_messages`) are all-reduced
asynchronously under the credit window, in an order every rank shares; when
all chunks of a parameter are averaged the optimizer updates it (one
multi-tensor step for all parameters completed together), and each module's
next forward waits only for its own parameters (cross-iteration overlap, as
ByteScheduler's PyTorch plugin). CUDA: docs/torch.md, "GPU path".
"""

from __future__ import annotations

import contextlib
import threading
import time
import warnings
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable, Iterator

import numpy as np

from ..core.metrics import StatsCollector, WindowStats
from ..core.scheduler import Scheduler, TensorSpec
from ..core.space import BYTESCHEDULER_DEFAULT, Config, SearchSpace
from ..core.timeline import Timeline
from ..core.tuning import Controller, Tuner
from ..core.window import WindowCoordinator, WindowOutcome
from ..core.wire import AutoWire, check_wire_choice, tuner_for
from ._common import check_tuning_args
from ._imports import require_torch
from ._torch_failures import CollectiveMismatchError, PeerLostError, _Failures
from ._torch_overlap import GLOBAL_OPTIMIZERS, release
from ._torch_pipeline import _IterPlan, _Pipeline
from ._torch_setup import _batch_size, _refuse_sparse, _SetUp, _unique_trainable, device_problem
from ._torch_window import _ControlCollective, _Window

torch = require_torch()
import torch.distributed as dist  # noqa: E402

if TYPE_CHECKING:  # `torch` above is a module value (with its install hint), which mypy cannot read types from
    from torch.nn import Module as _Module
    from torch.optim import Optimizer as _Optimizer

__all__ = ["CollectiveMismatchError", "PeerLostError", "ScheduledTraining", "device_problem", "schedule"]


class ScheduledTraining(_SetUp, _Window, _Pipeline, _Failures):
    """Handle returned by :func:`schedule`: owns hooks, threads and statistics.

    Use :meth:`reconfigure` to change ``<partition_bytes, credit_bytes>`` or
    the ``wire`` precision (a collective call: every rank must pass the same values), :meth:`synchronize`
    before reading parameters outside the training loop, :meth:`window_stats`
    for statistics, :meth:`no_sync` for gradient accumulation and :meth:`close`
    to restore the model and optimizer. Counters: ``update_steps``, ``host_s``, ``thread_s`` (docs/torch.md).
    """

    def __init__(
        self,
        model: Any,
        optimizer: Any,
        config: Config,
        *,
        iteration_hooks: bool = True,
        process_group: Any = None,
        overlap: bool = True,
        broadcast_buffers: bool = True,
        timeout_s: float = 300.0,
        tuner: Tuner | None = None,
        space: SearchSpace | None = None,
        window_iters: int = 10,
        warmup_iters: int = 2,
        on_decision: Callable[[WindowOutcome], None] | None = None,
        verbose: bool = False,
    ) -> None:
        self.model = model
        self.optimizer = optimizer
        self.overlap = overlap
        self.timeout_s = timeout_s
        self.broadcast_buffers = broadcast_buffers
        self.on_decision = on_decision
        self.verbose = verbose
        self.iteration_hooks = iteration_hooks

        # Zero-size parameters carry no gradient element: nothing to average (DDP skips them the same way).
        self.params = [p for p in _unique_trainable(model) if p.numel() > 0]
        if not self.params:
            raise ValueError("model has no trainable parameters with elements (every parameter has requires_grad=False or numel 0); there is nothing to synchronise.")
        _refuse_sparse(model)
        in_opt = {id(p) for g in optimizer.param_groups for p in g["params"]} if optimizer is not None else set()
        missing = [n for n, p in model.named_parameters() if p.requires_grad and id(p) not in in_opt]
        if optimizer is not None and missing:
            warnings.warn(f"autobyte: {len(missing)} trainable parameters are not in the optimizer (e.g. {missing[0]!r}); their gradients are averaged but never applied.", stacklevel=3)
        if overlap and type(optimizer).__name__ in GLOBAL_OPTIMIZERS:
            raise ValueError(
                f"optimizer {type(optimizer).__name__} needs all gradients at once and cannot update parameters one by one; "
                "pass overlap=False (synchronous mode: gradients are averaged at the end of backward, then your step() runs)."
            )

        self.group = process_group
        self.distributed = dist.is_available() and dist.is_initialized()
        self.world_size = dist.get_world_size(process_group) if self.distributed else 1
        self.rank = dist.get_rank(process_group) if self.distributed else 0
        self.active = self.world_size > 1
        names = {id(p): n for n, p in model.named_parameters()}
        self.tensors = [
            TensorSpec(names.get(id(p), f"param{i}"), p.numel(), p.element_size(), i, str(p.dtype).replace("torch.", ""))
            for i, p in enumerate(self.params)
        ]
        self.scheduler = Scheduler(self.tensors, config)
        self.stats = StatsCollector(len(self.params))
        self._stats_lock = threading.Lock()
        self.iteration = -1
        self._in_iteration = False
        self._batch = 0
        self._no_sync = False
        self._stepped = True  # whether optimizer.step() ran since the last backward (overlap mode)
        self._order: list[int] = list(range(len(self.scheduler.messages)))
        self._error: BaseException | None = None
        self._closed = False
        self._hooks: list[Any] = []
        self._layer_estimate: np.ndarray | None = None
        self._bw_estimate: float | None = None
        self.controller: Controller | None = None
        #: core's window protocol (check timing, gathering, rank 0's decision, agreement); None without a tuner
        self.coordinator: WindowCoordinator | None = None
        self.timeline: Timeline | None = None
        self._fwd_start = 0.0
        if tuner is not None:
            link = 2.0 * (self.world_size - 1) / self.world_size if self.world_size > 1 else 1.0
            # the wire's precision is the tuner's where it chooses it (wire="auto"), else the job's, held by the
            # coordinator: the tuner then sees fp32 configurations
            mine = tuner.chooses_wire
            self.controller = Controller(
                tuner, space or SearchSpace.default(), config if mine else replace(config, wire="fp32"), "allreduce",
                [t.nbytes for t in self.tensors], window_iters=window_iters, warmup_iters=warmup_iters, link_factor=link,
                world_size=self.world_size,
            )
            self.coordinator = WindowCoordinator(self.controller, _ControlCollective(self), wire=None if mine else config.wire)
            if not self.active:  # one process: the tuner's start is the start (agreed at set-up otherwise)
                self._follow(self.coordinator.start(0, config))
        self.window_iters = window_iters
        self._init_counters_and_streams()

        if self.active:
            self._start_distributed(process_group, timeout_s, optimizer)
        self._install_hooks()

    # ------------------------------------------------------------ main thread
    def _root_pre_forward(self, module: Any, args: tuple, kwargs: dict) -> None:
        if not (torch.is_grad_enabled() and module.training):
            return  # evaluation forward: not an iteration
        if self._no_sync:
            # A micro-batch accumulated locally belongs to the next synchronised step
            # (DDP's no_sync: no buffer broadcast, no communication).
            self.add_samples(_batch_size(args, kwargs))
            return
        self.begin_iteration(_batch_size(args, kwargs))

    def begin_iteration(self, batch: int = 1) -> int:
        """Mark the start of a training iteration of ``batch`` samples on this rank.

        Called by the model's forward pre-hook; call it yourself (on every
        rank, once per training step, before the forward) when the handle was
        made with ``iteration_hooks=False``. Returns the iteration number.
        """
        self._raise_if_failed()
        t_enter = time.perf_counter()
        if self.active and self.overlap and self.optimizer is not None and not self._stepped and self._backward_iter == self.iteration >= 0:
            self._stepped = True  # said once; the caller fixes the loop
            raise RuntimeError(
                f"autobyte: iteration {self.iteration} ran backward() but not optimizer.step() before the next training forward. "
                "With overlap=True each parameter is updated as soon as its averaged gradient arrives, during backward(), "
                "so several backward() per step() would apply several updates. For gradient accumulation, run the "
                "micro-batches before the last one inside `with handle.no_sync():` (as with DDP), or pass overlap=False."
            )
        self._stepped = False
        self._waited.clear()
        now = time.perf_counter()
        with self._stats_lock:
            if self._in_iteration:
                self.stats.end_iteration(now, self._batch)
        self._in_iteration = False
        self.iteration += 1
        it = self.iteration
        if self.coordinator is not None and self.coordinator.due(self.stats.n_iters):
            self._window_boundary(it)
        changed = self.scheduler.begin_iteration(it)
        if changed:
            if self.coordinator is not None:  # a user's or restored switch: the coordinator holds the config in force
                self.coordinator.apply(it, self.scheduler.config, self.scheduler.history[-1][2])
            self._order = self._planned_order()
        if self.active:
            if self.broadcast_buffers:
                self._sync_buffers()
            hypers: list[dict[str, Any]] = []
            if self.optimizer is not None:
                if self.overlap:
                    self._shadow.state = self.optimizer.state
                    self._shadow.defaults = self.optimizer.defaults
                hypers = [{k: v for k, v in g.items() if k != "params"} for g in self.optimizer.param_groups]
            if self.scheduler.messages is not self._plan_messages:
                self._plan_messages = self.scheduler.messages
                self._plan_version += 1
            self._ready_q.put(("iter", _IterPlan(it, self.scheduler.messages, list(self._order), self.scheduler.config.credit_bytes,
                                                 hypers, self._plan_version)))
        counted = self.coordinator is None or self.coordinator.counts(it)
        self._fwd_start = time.perf_counter()
        with self._stats_lock:
            if counted:
                # Iterations are timed start to start on the wall clock, so the
                # agreement and buffer broadcast above (waiting for slower ranks) count.
                self.stats.begin_iteration(now)
                self._in_iteration = True
        self._batch = batch
        self.host_s["iteration_start"] += time.perf_counter() - t_enter
        return it

    def add_samples(self, batch: int) -> None:
        """Count ``batch`` samples of a micro-batch accumulated under :meth:`no_sync` toward the current step."""
        self._batch += int(batch)

    def forward_done(self) -> None:
        """Mark the end of the forward pass (called by the model's forward hook)."""
        now = time.perf_counter()
        if self.timeline is not None:
            self.timeline.span(f"forward {self.iteration}", "compute", self._fwd_start, now)
        if self._in_iteration:
            with self._stats_lock:
                self.stats.forward_done(now)

    def _root_post_forward(self, module: Any, args: Any, output: Any) -> None:
        self.forward_done()

    def stepped(self) -> None:
        """The user's ``optimizer.step()`` ran (overlap mode): report a failure, allow the next iteration."""
        self._raise_if_failed()
        self._stepped = True

    # ------------------------------------------------------------- public API
    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """Accumulate gradients locally, as ``DistributedDataParallel.no_sync()``.

        Backward passes inside the context add into ``.grad`` without any
        communication; the first backward outside it averages the sum, so
        ``N`` micro-batches cost one communication round per optimizer step::

            for i, (x, y) in enumerate(loader):
                ctx = handle.no_sync() if (i + 1) % N else contextlib.nullcontext()
                with ctx:
                    loss_fn(model(x), y).backward()
                if (i + 1) % N == 0:
                    optimizer.step()
                    optimizer.zero_grad()

        Training forwards inside the context do not start an iteration (nor
        broadcast buffers), as in DDP. With ``overlap=True`` the update of
        the accumulated gradient is applied during the last backward.
        """
        prev = self._no_sync
        self._no_sync = True
        try:
            yield
        finally:
            self._no_sync = prev

    def start_trace(self) -> Timeline:
        """Record compute and each message's communication from now on."""
        self.timeline = Timeline(f"rank {self.rank}", pid=self.rank)
        return self.timeline

    def save_trace(self, path: str) -> None:
        """Write the recorded timeline as Chrome-trace/Perfetto JSON.

        Raises:
            RuntimeError: :meth:`start_trace` was not called.
        """
        if self.timeline is None:
            raise RuntimeError("no timeline recorded; call start_trace() first.")
        self.timeline.save(path)

    @property
    def config(self) -> Config:
        return self.scheduler.config

    def window_stats(self, reset: bool = True) -> WindowStats:
        """This rank's statistics since the last call (see :class:`WindowStats`)."""
        with self._stats_lock:
            return self.stats.window(reset=reset)

    @property
    def bytes_per_iteration(self) -> int:
        """Gradient bytes the scheduler carries per iteration (every parameter)."""
        return self.scheduler.total_bytes

    def synchronize(self) -> None:
        """Wait until every update of the current iteration has been applied."""
        if self.active and not self._closed:
            self._raise_if_failed()
            self._wait_iteration(self._backward_iter, "the pending updates")
            self._join_stream()  # CUDA: what the caller runs next sees the updates

    def close(self) -> None:
        """Finish pending work, remove hooks and give the optimizer its own class back."""
        if self._closed:
            return
        try:
            if self.active and self._error is None:
                self.synchronize()
        finally:
            self._closed = True
            for h in self._hooks:
                h.remove()
            if self.optimizer is not None:
                release(self.optimizer)
            self.model.__dict__.pop("zero_grad", None)
            if self.active:
                self._ready_q.put(("stop",))
                self._issuer.join(timeout=5)
                self._completer.join(timeout=5)
                if self._error is None and not (self._issuer.is_alive() or self._completer.is_alive()):
                    self._release_groups()


def schedule(
    model: "_Module",
    optimizer: "_Optimizer | None",
    *,
    partition_bytes: int = BYTESCHEDULER_DEFAULT.partition_bytes,
    credit_bytes: int = BYTESCHEDULER_DEFAULT.credit_bytes,
    process_group: Any = None,
    overlap: bool = True,
    broadcast_buffers: bool = True,
    timeout_s: float = 300.0,
    tuner: Tuner | str | None = None,
    space: SearchSpace | None = None,
    window_iters: int = 10,
    warmup_iters: int = 2,
    on_decision: Callable[[WindowOutcome], None] | None = None,
    iteration_hooks: bool = True,
    verbose: bool | None = None,
    wire: "str | AutoWire" = "fp32",
) -> ScheduledTraining:
    """Take over gradient synchronisation of ``model`` with scheduled all-reduce.

    Call it on every rank after ``torch.distributed.init_process_group`` (or
    without a process group: world size 1 trains unchanged and only
    statistics are collected), after creating the optimizer and before the
    first forward. Do not also wrap the model in ``DistributedDataParallel``.

    Args:
        model: the module to train; parameters are broadcast from rank 0.
        optimizer: any per-parameter torch optimizer (SGD, Adam, AdamW, ...);
            ``None`` with ``overlap=False`` when another library applies the
            averaged gradients (Keras).
        partition_bytes: message size (split larger tensors, fuse smaller ones).
        credit_bytes: most bytes in flight (``autobyte.core.UNLIMITED`` for none).
        process_group: group to average over (default: the world).
        overlap: True: update each parameter as soon as its gradient is
            averaged, gating each module's next forward on its own parameters.
            False: average every gradient by the end of ``backward()`` (as DDP
            does), then your ``optimizer.step()`` runs as usual; use it for
            global-norm clipping or optimizers such as LBFGS.
        broadcast_buffers: broadcast buffers (e.g. batch-norm statistics) from
            rank 0 before every training forward, as DDP does.
        timeout_s: longest wait for a peer before :class:`PeerLostError`.
        tuner: ``None`` (fixed config), a :class:`~autobyte.core.tuning.Tuner`,
            or a registered name (``"static"``, ``"grid"``, ``"bo"``, ``"autobyte"``).
        space: candidate configurations for the tuner.
        window_iters: iterations per tuning window.
        warmup_iters: iterations skipped after start and each reconfiguration.
        on_decision: called on every rank after each window with the
            window protocol's :class:`~autobyte.core.window.WindowOutcome`
            (``decision``: a :class:`~autobyte.core.window.DecisionRecord` or
            ``None``; ``config`` in force; observed ``speed``).
        iteration_hooks: find iteration boundaries from the model's training
            forwards; False: call :meth:`ScheduledTraining.begin_iteration`.
        verbose: print one line per reconfiguration on rank 0 (iteration,
            old and new configuration, reason). Default: on, unless
            ``on_decision`` is given (the framework callbacks report decisions themselves).
        wire: the gradients' precision on the wire: ``"fp32"`` (default,
            exact: DDP's results bit for bit), ``"bf16"`` or ``"fp16"``: each
            message is divided by the world size, cast to 16 bits, summed in
            16 bits and cast back before the update, the numerics of DDP's
            ``bf16_compress_hook``/``fp16_compress_hook`` (docs/torch.md, "16-bit
            gradients on the wire"). Sizes count bytes on the wire. ``"auto"``
            (or :class:`autobyte.core.wire.AutoWire` for another preference):
            fp32 unless bf16 is measured at least 5% faster in the current
            conditions; the tuner (``tuner``, or none: partition and credit
            stay) runs inside :class:`~autobyte.core.wire.WireTuner`, which
            measures both precisions in every set of conditions (a tuner
            given by name: one of its kind per precision), starting at
            16 bits, the first precision measured.

    Returns:
        A :class:`ScheduledTraining` handle.

    Raises:
        TypeError, ValueError: invalid sizes or timeout, a model without
            trainable parameters, a global optimizer in overlap mode, a
            module with sparse gradients (named), a partition size that
            would plan more than ``autobyte.core.scheduler.MAX_MESSAGES`` messages,
            parameters on a device the process group's backend cannot serve
            (CPU tensors with NCCL).

    Example:
        >>> handle = schedule(model, opt, partition_bytes=1 << 20, credit_bytes=4 << 20)  # doctest: +SKIP
    """
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, but got {type(model).__name__}.")
    if optimizer is None:
        if overlap:
            raise ValueError("optimizer=None needs overlap=False (the engine then only averages gradients; your own code applies them).")
    elif not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer must be a torch.optim.Optimizer, but got {type(optimizer).__name__}.")
    config = check_tuning_args(tuner, partition_bytes, credit_bytes, window_iters, warmup_iters, space,
                               True if verbose is None else verbose, timeout_s, wire)
    tuner = tuner_for(tuner, check_wire_choice(wire))
    if dist.is_available() and dist.is_initialized():
        problem = device_problem(str(dist.get_backend(process_group)), {p.device.type for p in model.parameters() if p.requires_grad})
        if problem is not None:
            raise ValueError(problem)
    return ScheduledTraining(
        model, optimizer, config, process_group=process_group, overlap=overlap, broadcast_buffers=broadcast_buffers,
        timeout_s=float(timeout_s), tuner=tuner, space=space, window_iters=window_iters, warmup_iters=warmup_iters,
        on_decision=on_decision, iteration_hooks=iteration_hooks,
        verbose=(on_decision is None) if verbose is None else verbose,
    )
