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
all chunks of a parameter are averaged the optimizer updates that parameter
alone, and each module's next forward waits only for its own parameters
(cross-iteration overlap, as ByteScheduler's PyTorch plugin).
"""

from __future__ import annotations

import contextlib
import copy
import os
import queue
import socket
import threading
import time
import warnings
import zlib
from collections import deque
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from ..core._checks import check_positive
from ..core.metrics import StatsCollector, WindowStats
from ..core.scheduler import Message, Scheduler, TensorSpec, plan_order
from ..core.space import BYTESCHEDULER_DEFAULT, Config, SearchSpace
from ..core.timeline import Timeline
from ..core.tuning import Controller, Decision, Tuner
from ._imports import require_torch

torch = require_torch()
import torch.distributed as dist  # noqa: E402

__all__ = ["CollectiveMismatchError", "PeerLostError", "ScheduledTraining", "schedule"]

#: Optimizers whose update needs every gradient at once: refused in overlap mode.
_GLOBAL_OPTIMIZERS = ("LBFGS",)


class PeerLostError(RuntimeError):
    """A peer rank stopped answering (crashed, killed, or hung past the timeout)."""


class CollectiveMismatchError(RuntimeError):
    """Ranks reached different collective calls (e.g. ``reconfigure()`` called on one rank only)."""


#: What a control collective is for; every rank announces it in a fixed-size header first.
_CONTROL_KINDS = {1: "start-up", 2: "buffer broadcast", 3: "tuning window", 4: "reconfigure()", 5: "issue-order broadcast"}


@dataclass
class _IterPlan:
    iteration: int
    messages: list[Message]
    order: list[int]
    credit_bytes: int
    hypers: list[dict[str, Any]]
    version: int = 0


class ScheduledTraining:
    """Handle returned by :func:`schedule`: owns hooks, threads and statistics.

    Use :meth:`reconfigure` to change ``<partition_bytes, credit_bytes>`` (a
    collective call: every rank must pass the same values), :meth:`synchronize`
    before reading parameters outside the training loop, :meth:`window_stats`
    for statistics, :meth:`no_sync` for gradient accumulation and :meth:`close`
    to restore the model and optimizer.
    """

    def __init__(
        self,
        model: "torch.nn.Module",
        optimizer: "torch.optim.Optimizer | None",
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
        on_decision: Callable[[int, Decision | None, Config], None] | None = None,
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
        if overlap and type(optimizer).__name__ in _GLOBAL_OPTIMIZERS:
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
        self.timeline: Timeline | None = None
        self._fwd_start = 0.0
        if tuner is not None:
            link = 2.0 * (self.world_size - 1) / self.world_size if self.world_size > 1 else 1.0
            self.controller = Controller(
                tuner, space or SearchSpace.default(), config, "allreduce", [t.nbytes for t in self.tensors],
                window_iters=window_iters, warmup_iters=warmup_iters, link_factor=link,
            )
            if self.controller.current != config:
                self.scheduler = Scheduler(self.tensors, self.controller.current)
                self._order = list(range(len(self.scheduler.messages)))
        self.window_iters = window_iters

        if self.active:
            backend = dist.get_backend(process_group)
            ranks = None if process_group is None else dist.get_process_group_ranks(process_group)
            # Gradient traffic runs on its own group, issued by one thread, so the
            # main thread's own collectives (buffers, statistics) never interleave with it.
            self.comm_group = dist.new_group(ranks=ranks, backend=backend, timeout=timedelta(seconds=timeout_s))
            # Every control collective (start-up, buffers, statistics, decisions, reconfigure) runs on a
            # group of its own with the same timeout: a hung peer can never hold the main thread for
            # longer than timeout_s (the user's default group may have torch's 30-minute timeout).
            self.ctl_group = dist.new_group(ranks=ranks, backend=backend, timeout=timedelta(seconds=timeout_s))
            self._src = dist.get_global_rank(self.ctl_group, 0)
            self.device = self.params[0].device
            # NCCL collectives need device tensors; gloo takes CPU tensors.
            self._cdev = self.device if backend == "nccl" else torch.device("cpu")
            self._peers = self._exchange_identity()
            n_state = sum(t.numel() for t in list(self.params) + list(self.model.buffers()))
            self._control(1, len(self.params), n_state)
            self._agree_on_start()
            self._broadcast_state()
            self._ready_q: "queue.Queue[tuple]" = queue.Queue()
            self._done_q: "queue.Queue[tuple]" = queue.Queue()
            self._updated = [threading.Event() for _ in self.params]
            for ev in self._updated:
                ev.set()
            self._cv = threading.Condition()
            self._done_iter = -1  # last iteration whose messages are all done
            self._backward_iter = -1  # last iteration that ran a backward
            self._group_of = {}
            self._fused_key: int | None = None
            self._plan_messages: list[Message] | None = None
            self._plan_version = 0
            self._fused: dict[int, Any] = {}
            self._slot: dict[int, tuple[Any, int]] = {}  # tensor -> (fused buffer, offset) of the latest plan
            if optimizer is not None:
                self._shadow = copy.copy(optimizer)
                for gi, g in enumerate(optimizer.param_groups):
                    for p in g["params"]:
                        self._group_of[id(p)] = gi
            self._issuer = threading.Thread(target=self._issue_loop, name="autobyte-issuer", daemon=True)
            self._completer = threading.Thread(target=self._complete_loop, name="autobyte-completer", daemon=True)
            self._issuer.start()
            self._completer.start()
        self._install_hooks()

    # ------------------------------------------------------------------ set-up
    def _exchange_identity(self) -> list[tuple[int, int]]:
        """Every rank's (host hash, pid), to name a lost peer later."""
        me = torch.tensor([zlib.crc32(socket.gethostname().encode()), os.getpid()], dtype=torch.int64, device=self._cdev)
        out = [torch.zeros_like(me) for _ in range(self.world_size)]
        self._collective(lambda: dist.all_gather(out, me, group=self.ctl_group))
        return [(int(t[0]), int(t[1])) for t in out]

    def _agree_on_start(self) -> None:
        """Every rank starts from rank 0's configuration (a tuner may pick a random first probe)."""
        cfg = self.scheduler.config
        msg = torch.tensor([cfg.partition_bytes, cfg.credit_bytes], dtype=torch.int64, device=self._cdev)
        src = self._src
        self._collective(lambda: dist.broadcast(msg, src, group=self.ctl_group))
        agreed = Config(int(msg[0]), int(msg[1]))
        if agreed != cfg:
            self.scheduler = Scheduler(self.tensors, agreed)
            self._order = list(range(len(self.scheduler.messages)))
        if self.controller is not None:
            self.controller.current = agreed

    def _broadcast_state(self) -> None:
        """Start from rank 0's parameters and buffers, as DDP does."""
        src = self._src
        with torch.no_grad():
            for t in list(self.params) + [b for b in self.model.buffers()]:
                self._collective(lambda t=t: dist.broadcast(t.data, src, group=self.ctl_group))

    def _install_hooks(self) -> None:
        m = self.model
        if self.iteration_hooks:
            self._hooks.append(m.register_forward_pre_hook(self._root_pre_forward, with_kwargs=True))
            self._hooks.append(m.register_forward_hook(self._root_post_forward))
        if not self.active:
            return
        for i, p in enumerate(self.params):
            self._hooks.append(p.register_post_accumulate_grad_hook(self._make_grad_hook(i)))
        if self.overlap:
            index = {id(p): i for i, p in enumerate(self.params)}
            for mod in m.modules():
                own = [index[id(p)] for p in mod.parameters(recurse=False) if id(p) in index]
                if own:
                    self._hooks.append(mod.register_forward_pre_hook(self._make_wait_hook(own)))
            self._orig_step = self.optimizer.step
            self._orig_zero_grad = self.optimizer.zero_grad
            self.optimizer.step = self._step  # type: ignore[method-assign]
            self.optimizer.zero_grad = self._zero_grad  # type: ignore[method-assign]
            # model.zero_grad() (user loops, Lightning before validation) would drop gradients in flight.
            self.model.zero_grad = self._zero_grad  # type: ignore[method-assign]
        self._hooks.append(self.model.register_state_dict_pre_hook(lambda *a, **k: self.synchronize()))
        if self.optimizer is not None:
            self._orig_opt_state_dict = self.optimizer.state_dict
            self.optimizer.state_dict = self._opt_state_dict  # type: ignore[method-assign]

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
        if self.active and self.overlap and self.optimizer is not None and not self._stepped and self._backward_iter == self.iteration >= 0:
            self._stepped = True  # said once; the caller fixes the loop
            raise RuntimeError(
                f"autobyte: iteration {self.iteration} ran backward() but not optimizer.step() before the next training forward. "
                "With overlap=True each parameter is updated as soon as its averaged gradient arrives, during backward(), "
                "so several backward() per step() would apply several updates. For gradient accumulation, run the "
                "micro-batches before the last one inside `with handle.no_sync():` (as with DDP), or pass overlap=False."
            )
        self._stepped = False
        now = time.perf_counter()
        with self._stats_lock:
            if self._in_iteration:
                self.stats.end_iteration(now, self._batch)
        self._in_iteration = False
        self.iteration += 1
        it = self.iteration
        if self.controller is not None and self.controller.check_due(self.stats.n_iters):
            self._window_boundary(it)
        changed = self.scheduler.begin_iteration(it)
        if changed:
            if self.controller is not None:
                self.controller.applied(it, self.scheduler.config)
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
        counted = self.controller is None or self.controller.counts(it)
        self._fwd_start = time.perf_counter()
        with self._stats_lock:
            if counted:
                # Iterations are timed start to start on the wall clock, so the
                # agreement and buffer broadcast above (waiting for slower ranks) count.
                self.stats.begin_iteration(now)
                self._in_iteration = True
        self._batch = batch
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

    def _make_grad_hook(self, i: int) -> Callable[[Any], None]:
        def hook(p: Any) -> None:
            if self._no_sync:
                return  # accumulated locally; averaged with the next synchronised backward
            if p.grad is not None and p.grad.layout != torch.strided:
                self._fail(ValueError(
                    f"parameter {self.tensors[i].name!r} got a {p.grad.layout} gradient; autobyte averages dense gradients only."
                ))
                raise self._error  # type: ignore[misc]
            now = time.perf_counter()
            with self._stats_lock:
                self.stats.grad_ready(i, now)
            if self.timeline is not None:
                self.timeline.instant(f"grad {self.tensors[i].name}", "compute", now)
            if not self._backward_open:
                self._backward_open = True
                self._backward_iter = self.iteration
                torch.autograd.Variable._execution_engine.queue_callback(self._end_backward)
            self._updated[i].clear()
            self._ready_q.put(("ready", i))

        return hook

    _backward_open = False

    def _end_backward(self) -> None:
        self._backward_open = False
        self._ready_q.put(("end",))
        if not self.overlap:
            self._wait_iteration(self._backward_iter, "all gradients of this iteration")

    def _make_wait_hook(self, own: Sequence[int]) -> Callable[..., None]:
        def hook(module: Any, args: Any) -> None:
            for i in own:
                if not self._updated[i].is_set():
                    self._wait(self._updated[i], f"the update of parameter {self.tensors[i].name!r}")

        return hook

    def _step(self, closure: Any = None) -> Any:
        # Parameters are updated one by one as their gradients arrive; step()
        # only runs the closure (forward + backward) when one is given, as
        # Lightning's automatic optimization does.
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self._raise_if_failed()
        self._stepped = True
        self.optimizer._opt_called = True  # type: ignore[attr-defined]  # keeps lr_scheduler's order check quiet
        return loss

    def _zero_grad(self, set_to_none: bool = True) -> None:
        # Gradients are consumed and cleared by the scheduler after each update.
        return None

    def _opt_state_dict(self) -> dict[str, Any]:
        self.synchronize()
        return self._orig_opt_state_dict()

    def _sync_buffers(self) -> None:
        bufs = [b for b in self.model.buffers() if b.numel()]
        if not bufs:
            return
        src = self._src
        with torch.no_grad():
            flat = torch.cat([b.detach().reshape(-1).to(torch.float64) for b in bufs])
            self._control(2, len(bufs), flat.numel())
            self._collective(lambda: dist.broadcast(flat, src, group=self.ctl_group), "rank 0's buffers")
            off = 0
            for b in bufs:
                n = b.numel()
                b.copy_(flat[off:off + n].view_as(b).to(b.dtype))
                off += n

    def _window_boundary(self, it: int) -> None:
        """A controller check: gather every rank's statistics, let rank 0 decide, apply everywhere at ``it``."""
        assert self.controller is not None
        with self._stats_lock:
            mine = self.stats.window()
        windows = [mine]
        if self.active:
            vec = torch.tensor(mine.to_vector(), dtype=torch.float64, device=self._cdev)
            self._control(3, vec.numel())
            out = [torch.zeros_like(vec) for _ in range(self.world_size)]
            self._collective(lambda: dist.all_gather(out, vec, group=self.ctl_group), "every rank's window statistics")
            windows = [WindowStats.from_vector(v.cpu().numpy()) for v in out]
        self._learn_estimates(windows)
        decision, observed = None, False
        previous = self.scheduler.config
        if self.rank == 0:
            seen = self.controller.n_windows
            decision = self.controller.decide(it, windows)
            observed = self.controller.n_windows > seen
        cfg = decision.config if decision is not None else self.scheduler.config
        if self.active:
            msg = torch.tensor([cfg.partition_bytes, cfg.credit_bytes, int(decision is not None), int(observed)], dtype=torch.int64, device=self._cdev)
            src = self._src
            self._collective(lambda: dist.broadcast(msg, src, group=self.ctl_group), "rank 0's decision")
            cfg, observed = Config(int(msg[0]), int(msg[1])), bool(msg[3])
        if cfg != self.scheduler.config:
            self.scheduler.reconfigure(cfg.partition_bytes, cfg.credit_bytes, at_iteration=it, reason=decision.reason if decision else "rank 0")
        else:
            self._order = self._planned_order()
        if self.on_decision is not None and observed:  # a window ended (checks in between are silent)
            self.on_decision(it, decision, cfg)
        if self.verbose and self.rank == 0 and decision is not None and observed:
            print(f"AutoByte reconfigured at iteration {it}: {previous} -> {cfg}: {decision.reason}", flush=True)

    def _learn_estimates(self, windows: Sequence[WindowStats]) -> None:
        self._layer_estimate = np.mean([w.layer_backward_s for w in windows], axis=0)
        bws = [w.bandwidth_Bps for w in windows if w.bandwidth_Bps > 0]
        self._bw_estimate = float(np.mean(bws)) if bws else None

    def _planned_order(self) -> list[int]:
        """Issue order for the current plan, identical on every rank.

        Without timing estimates: plan order (gradients' ready order). With
        them (gathered from all ranks, so every rank computes the same
        numbers), the order a credit-based priority queue would produce; rank
        0's result is broadcast so float differences can never split ranks.
        """
        msgs = self.scheduler.messages
        order = list(range(len(msgs)))
        if self._layer_estimate is not None and self._bw_estimate:
            lay = self._layer_estimate
            rank_in_ready: dict[int, float] = {}
            t = 0.0
            for ti in sorted(range(len(self.tensors)), key=lambda i: -i):
                t += float(lay[ti])
                rank_in_ready[ti] = t
            bw = self._bw_estimate
            order = plan_order(
                msgs, self.scheduler.config.credit_bytes,
                lambda m: max(rank_in_ready[s.tensor] for s in m.segments),
                lambda m: m.nbytes / bw,
            )
        if self.active:
            tensor = torch.tensor(order, dtype=torch.int64, device=self._cdev)
            src = self._src
            self._control(5, len(order))
            self._collective(lambda: dist.broadcast(tensor, src, group=self.ctl_group), "rank 0's issue order")
            order = [int(x) for x in tensor]
        return order

    # ------------------------------------------------------------- public API
    def reconfigure(self, partition_bytes: int, credit_bytes: int, *, at_iteration: int | None = None) -> Config:
        """Switch to ``<partition_bytes, credit_bytes>`` at an iteration boundary.

        A collective call: every rank must call it with the same values.
        Called before the first training step, the configuration applies
        from the first step; a call for the configuration in force (with
        nothing else pending) changes nothing.

        Raises:
            TypeError, ValueError: invalid sizes or iteration, or ranks disagree.
            CollectiveMismatchError: called on some ranks only (the others
                reached another collective call).
            PeerLostError: a peer did not call it within ``timeout_s``.
        """
        cfg = Config(partition_bytes, credit_bytes)
        self.scheduler.check_config(cfg)
        if at_iteration is not None and (isinstance(at_iteration, bool) or not isinstance(at_iteration, int)):
            raise TypeError(f"at_iteration must be an integer or None, but got at_iteration={at_iteration!r}.")
        first = max(self.iteration + 1, 0)
        at = first if at_iteration is None else at_iteration
        if at < first:
            raise ValueError(f"at_iteration must be at least the next iteration {first}, but got at_iteration={at}.")
        self._raise_if_failed()
        if self.active:
            self._control(4)
            mine = torch.tensor([cfg.partition_bytes, cfg.credit_bytes, at], dtype=torch.int64, device=self._cdev)
            out = [torch.zeros_like(mine) for _ in range(self.world_size)]
            self._collective(lambda: dist.all_gather(out, mine, group=self.ctl_group), "reconfigure() on every rank")
            seen = [tuple(int(x) for x in t) for t in out]
            if len(set(seen)) > 1:
                detail = ", ".join(f"rank {r}: partition_bytes={s[0]}, credit_bytes={s[1]}, at_iteration={s[2]}" for r, s in enumerate(seen))
                raise ValueError(f"reconfigure must be called with the same arguments on every rank, but got {detail}.")
        if self.iteration < 0 and at == 0:
            # Nothing ran yet: the first step starts with this plan.
            if cfg != self.scheduler.config or self.scheduler.pending is not None:
                self.scheduler = Scheduler(self.tensors, cfg)
                self._order = list(range(len(self.scheduler.messages)))
            if self.controller is not None:
                self.controller.current = cfg
            return cfg
        if cfg == self.scheduler.config and self.scheduler.pending is None:
            return cfg  # already in force: nothing to do
        self.scheduler.reconfigure(cfg.partition_bytes, cfg.credit_bytes, at_iteration=at, reason="user")
        return cfg

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

    def close(self) -> None:
        """Finish pending work, remove hooks and restore the optimizer's methods."""
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
                for name in ("step", "zero_grad", "state_dict"):
                    self.optimizer.__dict__.pop(name, None)
            self.model.__dict__.pop("zero_grad", None)
            if self.active:
                self._ready_q.put(("stop",))
                self._issuer.join(timeout=5)
                self._completer.join(timeout=5)

    def state_dict(self) -> dict[str, Any]:
        """Plain-typed state: configuration, iteration, controller/tuner state."""
        out: dict[str, Any] = {"config": self.config.to_dict(), "iteration": self.iteration}
        if self.controller is not None:
            out["controller"] = self.controller.state_dict()
        return out

    def load_state_dict(self, state: dict[str, Any]) -> None:
        cfg = Config(**state["config"]) if "config" in state else self.config
        if self.controller is not None and "controller" in state:
            self.controller.load_state_dict(state["controller"])
        if cfg != self.config:
            if self.iteration < 0:
                # Nothing ran yet: start from the restored plan (every rank loads the same state).
                self.scheduler = Scheduler(self.tensors, cfg)
                self._order = list(range(len(self.scheduler.messages)))
            else:
                self.scheduler.reconfigure(cfg.partition_bytes, cfg.credit_bytes, at_iteration=self.iteration + 1, reason="restored")

    # --------------------------------------------------------------- failures
    def _collective(self, fn: Callable[[], Any], what: str = "") -> Any:
        try:
            return fn()
        except RuntimeError as exc:
            err = self._lost(exc, what)
            self._fail(err)
            raise err from exc

    def _control(self, kind: int, a: int = 0, b: int = 0) -> None:
        """Announce the next control collective and check that every rank announced the same one.

        A fixed-size header is all-gathered first, so ranks that reached
        different calls (a collective method called on one rank only) get
        :class:`CollectiveMismatchError` instead of a size-mismatched
        collective, which gloo answers by aborting the process.
        """
        mine = torch.tensor([kind, a, b, self.iteration], dtype=torch.int64, device=self._cdev)
        out = [torch.zeros_like(mine) for _ in range(self.world_size)]
        what = "the other ranks to call reconfigure() (a collective call: every rank must call it)" if kind == 4 else f"the {_CONTROL_KINDS[kind]} of every rank"
        self._collective(lambda: dist.all_gather(out, mine, group=self.ctl_group), what)
        seen = [tuple(int(x) for x in t) for t in out]
        if len(set(seen)) == 1:
            return
        detail = ", ".join(f"rank {r}: {_CONTROL_KINDS.get(k, f'kind {k}')} ({x}, {y}) at iteration {i}" for r, (k, x, y, i) in enumerate(seen))
        hint = ""
        if any(k == 4 for k, *_ in seen):
            hint = " reconfigure() is a collective call: call it on every rank, at the same point, with the same arguments."
        elif all(k == 1 for k, *_ in seen):
            hint = " The (parameter count, element count) differ: every rank must schedule the same model."
        err = CollectiveMismatchError(
            f"autobyte: ranks reached different collective calls: {detail}. Every rank must make the same calls in the same order;{hint} "
            f"Rank {self.rank} stops here."
        )
        self._fail(err)
        raise err

    def _wait(self, ev: threading.Event, what: str) -> None:
        if not ev.wait(self.timeout_s):
            self._error = self._error or TimeoutError(f"waited {self.timeout_s:g} s for {what}")
        self._raise_if_failed()

    def _wait_iteration(self, it: int, what: str) -> None:
        deadline = time.monotonic() + self.timeout_s
        with self._cv:
            while self._done_iter < it and self._error is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    self._error = TimeoutError(f"waited {self.timeout_s:g} s for {what}")
                    break
                self._cv.wait(left)
        self._raise_if_failed()

    def _finish_iteration(self, it: int) -> None:
        with self._cv:
            self._done_iter = max(self._done_iter, it)
            self._cv.notify_all()

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            err = self._error
            lost = self._lost(err)
            if lost is err:
                raise err
            raise lost from err

    def _lost(self, exc: BaseException, what: str = "") -> BaseException:
        if isinstance(exc, (PeerLostError, CollectiveMismatchError, ValueError, TypeError)):
            return exc  # not a communication failure: reported as is
        host = zlib.crc32(socket.gethostname().encode())
        dead: list[str] = []
        peers = [(r, h, pid) for r, (h, pid) in enumerate(getattr(self, "_peers", [])) if r != self.rank]
        local = [(r, pid) for r, h, pid in peers if h == host]
        remote = [f"rank {r}" for r, h, _ in peers if h != host]
        # A crashing peer may take a moment to exit: look for up to 2 s.
        deadline = time.monotonic() + 2.0
        stopped: list[str] = []
        while local:
            dead = [f"rank {r} (pid {pid}, exited)" for r, pid in local if _pid_state(pid) == "exited"]
            stopped = [f"rank {r} (pid {pid}, stopped by a signal)" for r, pid in local if _pid_state(pid) == "stopped"]
            if dead or stopped or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        if dead:
            who = "lost peer: " + ", ".join(dead)
        elif stopped:
            who = "peer not answering: " + ", ".join(stopped)
        elif len(peers) == 1:
            r, _, pid = peers[0]
            who = f"peer not answering: rank {r} (pid {pid}{', on another host' if remote else ', running'}): hung, overloaded, or the network is down"
        else:
            others = [f"rank {r} (pid {pid}, running)" for r, pid in local] + [f"{x} (another host)" for x in remote]
            who = "peer not answering, one of: " + ", ".join(others)
        during = f" waiting for {what}" if what else ""
        return PeerLostError(
            f"autobyte: rank {self.rank} stopped at iteration {self.iteration}{during}: {who} ({type(exc).__name__}: {exc}). "
            f"Timeout is timeout_s={self.timeout_s:g}."
        )

    def _fail(self, exc: BaseException) -> None:
        if self._error is None:
            self._error = exc
        for ev in getattr(self, "_updated", []):
            ev.set()
        cv = getattr(self, "_cv", None)
        if cv is not None:
            with cv:
                cv.notify_all()

    # ------------------------------------------------------- background threads
    def _issue_loop(self) -> None:
        try:
            self._issue_loop_inner()
        except BaseException as exc:  # noqa: BLE001 - reported to the main thread
            self._fail(exc)
            self._done_q.put(("stop",))

    def _issue_loop_inner(self) -> None:
        deferred: list[tuple] = []
        while True:
            cmd = deferred.pop() if deferred else self._ready_q.get()
            kind = cmd[0]
            if kind == "stop":
                self._done_q.put(("stop",))
                return
            if kind == "iter":
                # The next iteration's forward may begin while this one's last
                # messages are in flight (overlap); its plan waits its turn.
                nxt = self._run_iteration(cmd[1])
                if nxt is not None:
                    deferred.append(nxt)
            # 'ready'/'end' outside an iteration (e.g. a backward with no forward hook) are ignored.

    def _run_iteration(self, plan: _IterPlan) -> tuple | None:
        msgs = plan.messages
        n_params = len(self.params)
        ready = [False] * n_params
        missing = [len(m.tensors) for m in msgs]
        by_tensor: list[list[int]] = [[] for _ in range(n_params)]
        for m in msgs:
            for t in m.tensors:
                by_tensor[t].append(m.index)
        chunks_left = [len(b) for b in by_tensor]
        msg_ready = [False] * len(msgs)
        in_flight: deque[tuple[int, int]] = deque()
        in_flight_bytes = 0
        nxt = 0
        n_done = 0
        self._done_q.put(("iter", plan, chunks_left))
        deferred: tuple | None = None
        while n_done < len(msgs):
            # Issue as far as readiness and credit allow, in the agreed order.
            while nxt < len(msgs):
                mi = plan.order[nxt]
                m = msgs[mi]
                if not msg_ready[mi]:
                    break
                if in_flight and in_flight_bytes + m.nbytes > plan.credit_bytes:
                    break
                self._issue(m, plan.version)
                in_flight.append((mi, m.nbytes))
                in_flight_bytes += m.nbytes
                nxt += 1
            cmd = self._ready_q.get()
            kind = cmd[0]
            if kind == "ready":
                i = cmd[1]
                if not ready[i]:
                    ready[i] = True
                    for mi in by_tensor[i]:
                        missing[mi] -= 1
                        if missing[mi] == 0:
                            msg_ready[mi] = True
            elif kind == "end":
                # Backward finished: parameters that got no gradient contribute zeros.
                for i, p in enumerate(self.params):
                    if not ready[i]:
                        if p.grad is None:
                            p.grad = torch.zeros_like(p)
                        self._updated[i].clear()
                        self._ready_q.put(("ready", i))
            elif kind == "done":
                mi, nb = in_flight.popleft()
                in_flight_bytes -= nb
                n_done += 1
            elif kind == "failed":
                return None
            elif kind == "iter" and deferred is None:
                if not any(ready):
                    # That iteration never ran a backward (forward only): drop it.
                    self._done_q.put(("abandon", plan.iteration))
                    return cmd
                deferred = cmd
            else:
                raise RuntimeError(f"autobyte: internal error, got {kind!r} while iteration {plan.iteration} has {len(msgs) - n_done} messages left")
        return deferred

    def _issue(self, m: Message, version: int) -> None:
        segs = m.segments
        for t in m.tensors:
            p = self.params[t]
            if not p.grad.is_contiguous():
                p.grad = p.grad.contiguous()
        if len(segs) == 1:
            g = self.params[segs[0].tensor].grad
            buf = g.view(-1)[segs[0].start:segs[0].stop]
            view = True
        else:
            # Fused message: gradients normally already live in the message's
            # flat buffer (bound after the previous update, like DDP's
            # gradient_as_bucket_view); otherwise copy them in once.
            buf = self._fused_buffer(m, version)
            view = self._bound(m, buf)
            if not view:
                off = 0
                for sg in segs:
                    buf[off:off + sg.numel].copy_(self.params[sg.tensor].grad.reshape(-1)[sg.start:sg.stop])
                    off += sg.numel
        t0 = time.perf_counter()
        work = dist.all_reduce(buf, group=self.comm_group, async_op=True)
        self._done_q.put(("msg", m, buf, view, work, t0))

    def _fused_buffer(self, m: Message, version: int) -> Any:
        """The persistent flat buffer of fused message ``m`` of plan number ``version``."""
        key = version
        if self._fused_key != key:
            # A new plan: new buffers; gradients get bound to them after their next update.
            self._fused_key, self._fused, self._slot = key, {}, {}
        buf = self._fused.get(m.index)
        if buf is None:
            buf = torch.zeros(m.numel, dtype=self.params[m.segments[0].tensor].dtype, device=self.device)
            self._fused[m.index] = buf
            off = 0
            for sg in m.segments:
                self._slot[sg.tensor] = (buf, off)
                off += sg.numel
        return buf

    def _bound(self, m: Message, buf: Any) -> bool:
        """Whether every gradient of fused message ``m`` is a view at its place in ``buf``."""
        off = 0
        for sg in m.segments:
            g = self.params[sg.tensor].grad
            if g is None or g.data_ptr() != buf[off:].data_ptr():
                return False
            off += sg.numel
        return True

    def _complete_loop(self) -> None:
        plan: _IterPlan | None = None
        chunks_left: list[int] = []
        try:
            while True:
                cmd = self._done_q.get()
                if cmd[0] == "stop":
                    return
                if cmd[0] == "iter":
                    plan, chunks_left = cmd[1], cmd[2]
                    n_left = len(plan.messages)
                    continue
                if cmd[0] == "abandon":
                    self._finish_iteration(cmd[1])
                    continue
                _, m, buf, view, work, t0 = cmd
                work.wait()
                t1 = time.perf_counter()
                with torch.no_grad():
                    buf.div_(self.world_size)
                    if not view:
                        off = 0
                        for s in m.segments:
                            n = s.numel
                            self.params[s.tensor].grad.view(-1)[s.start:s.stop].copy_(buf[off:off + n])
                            off += n
                with self._stats_lock:
                    self.stats.message_done(m.nbytes, t0, t1)
                if self.timeline is not None:
                    self.timeline.span(f"msg {m.index}", "communication", t0, t1, bytes=m.nbytes, priority=m.priority, chunk=m.chunk,
                                       tensors=[self.tensors[t].name for t in m.tensors])
                for t in m.tensors:
                    chunks_left[t] -= 1
                    if chunks_left[t] == 0:
                        if self.overlap:
                            self._apply_update(t, plan)
                        else:
                            self._updated[t].set()
                self._ready_q.put(("done",))
                n_left -= 1
                if n_left == 0:
                    self._finish_iteration(plan.iteration)
        except BaseException as exc:  # noqa: BLE001 - reported to the main thread
            self._fail(exc)
            self._ready_q.put(("failed",))

    def _apply_update(self, t: int, plan: _IterPlan) -> None:
        p = self.params[t]
        gi = self._group_of.get(id(p))
        if gi is not None:
            t0 = time.perf_counter()
            group = dict(plan.hypers[gi])
            group["params"] = [p]
            self._shadow.param_groups = [group]
            type(self.optimizer).step(self._shadow)
            if self.timeline is not None:
                self.timeline.span(f"update {self.tensors[t].name}", "update", t0, time.perf_counter())
        slot = self._slot.get(t)
        if slot is not None:
            buf, off = slot
            view = buf[off:off + p.numel()].view_as(p)
            view.zero_()  # the next backward accumulates into the message buffer in place
            p.grad = view
        else:
            p.grad = None
        self._updated[t].set()


def _pid_state(pid: int) -> str:
    """``"exited"`` (zombies count), ``"stopped"`` (SIGSTOP, a debugger) or ``"running"`` for process ``pid`` on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return "exited"
    except PermissionError:
        return "running"
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "running"
    if state in ("Z", "X"):
        return "exited"
    return "stopped" if state in ("T", "t") else "running"


def _unique_trainable(model: Any) -> list[Any]:
    seen: set[int] = set()
    out = []
    for p in model.parameters():
        if p.requires_grad and id(p) not in seen:
            seen.add(id(p))
            out.append(p)
    return out


def _refuse_sparse(model: Any) -> None:
    """Refuse modules that produce sparse gradients (``nn.Embedding(sparse=True)``, ``nn.EmbeddingBag(sparse=True)``)."""
    for name, mod in model.named_modules():
        if getattr(mod, "sparse", False) is True and any(p.requires_grad for p in mod.parameters(recurse=False)):
            pname = next(f"{name}.{n}" if name else n for n, p in mod.named_parameters(recurse=False) if p.requires_grad)
            raise ValueError(
                f"parameter {pname!r} gets sparse gradients ({type(mod).__name__}(sparse=True)); autobyte averages dense "
                f"gradients only. Construct it with sparse=False (the trained values are the same, the gradient is sent dense)."
            )


def _batch_size(args: tuple, kwargs: dict) -> int:
    for a in list(args) + list(kwargs.values()):
        if isinstance(a, torch.Tensor) and a.dim() > 0:
            return int(a.shape[0])
    return 1


def schedule(
    model: "torch.nn.Module",
    optimizer: "torch.optim.Optimizer | None",
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
    on_decision: Callable[[int, Decision | None, Config], None] | None = None,
    iteration_hooks: bool = True,
    verbose: bool | None = None,
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
        on_decision: called on every rank after each window with
            ``(iteration, decision or None, config in force)``.
        iteration_hooks: find iteration boundaries from the model's training
            forwards; False: call :meth:`ScheduledTraining.begin_iteration`.
        verbose: print one line per reconfiguration on rank 0 (iteration,
            old and new configuration, reason). Default: on, unless
            ``on_decision`` is given (the framework callbacks report decisions themselves).

    Returns:
        A :class:`ScheduledTraining` handle.

    Raises:
        TypeError, ValueError: invalid sizes or timeout, a model without
            trainable parameters, a global optimizer in overlap mode, a
            module with sparse gradients (named), a partition size that
            would plan more than ``autobyte.core.scheduler.MAX_MESSAGES`` messages.

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
    config = Config(partition_bytes, credit_bytes)
    check_positive("timeout_s", timeout_s, "seconds")
    if isinstance(tuner, str):
        from ..core.tuners import make_tuner

        tuner = make_tuner(tuner)
    if tuner is not None and not isinstance(tuner, Tuner):
        raise TypeError(f"tuner must be None, a tuner name or an autobyte Tuner, but got {tuner!r}.")
    return ScheduledTraining(
        model, optimizer, config, process_group=process_group, overlap=overlap, broadcast_buffers=broadcast_buffers,
        timeout_s=float(timeout_s), tuner=tuner, space=space, window_iters=window_iters, warmup_iters=warmup_iters,
        on_decision=on_decision, iteration_hooks=iteration_hooks,
        verbose=(on_decision is None) if verbose is None else bool(verbose),
    )
