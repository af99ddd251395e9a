"""Set-up of the PyTorch engine: groups, agreement at start, hooks.

Creates the gradient and control process groups (both with ``timeout_s``),
names every rank's process for diagnostics, agrees on rank 0's starting
configuration, parameters and buffers, installs the gradient-ready and
forward-gating hooks, and takes over the optimizer
(:mod:`autobyte.integrations._torch_overlap`).
"""

from __future__ import annotations

import atexit
import copy
import os
import queue
import socket
import sys
import threading
import time
import zlib
from datetime import timedelta
from typing import Any, Callable, Sequence

from ..core.metrics import StatsCollector
from ..core.scheduler import Message, Scheduler, TensorSpec
from ..core.timeline import Timeline
from ..core.tuning import Controller
from ._torch_overlap import take_over
from ._imports import require_torch

torch = require_torch()
import torch.distributed as dist  # noqa: E402


class _SetUp:
    """Mixin of :class:`~autobyte.integrations.torch.ScheduledTraining`: groups, agreement at start, hooks."""

    model: Any
    optimizer: Any
    params: list[Any]
    tensors: list[TensorSpec]
    scheduler: Scheduler
    controller: Controller | None
    stats: StatsCollector
    timeline: Timeline | None
    world_size: int
    iteration: int
    active: bool
    overlap: bool
    iteration_hooks: bool
    group: Any
    _order: list[int]
    _hooks: list[Any]
    _no_sync: bool
    _stats_lock: threading.Lock
    _collective: Any
    _control: Any
    _agree_on_start: Any
    _fail: Any
    _error: BaseException | None
    _wait: Any
    _wait_iteration: Any
    _issue_loop: Any
    _complete_loop: Any
    _root_pre_forward: Any
    _root_post_forward: Any
    synchronize: Any
    _stream: Any
    _nccl: bool
    _compute_stream: Any
    _ready_ev: list[Any]
    _update_ev: list[Any]
    _waited: set[tuple[int, int]]
    _update_seq: int
    host_s: dict[str, float]
    thread_s: dict[str, float]
    update_steps: int

    def _init_counters_and_streams(self) -> None:
        # update_steps: the optimizer.step() calls the engine made (overlap mode: one per group of
        # parameters completed together); host_s: host seconds the training loop spent in the engine;
        # thread_s: host seconds of the engine's threads (complete includes waiting for the collective)
        self.update_steps = 0
        self.host_s = {"iteration_start": 0.0, "grad_hooks": 0.0, "forward_waits": 0.0}
        self.thread_s = {"issue": 0.0, "complete": 0.0, "update": 0.0}
        # CUDA parameters (made in _start_distributed): the engine's stream; per parameter, the event
        # after its gradient's accumulation and (sequence number, event) after its latest update
        self._stream = None
        self._nccl = False
        self._compute_stream = None
        self._ready_ev = [None] * len(self.params)
        self._update_ev = [None] * len(self.params)
        self._update_seq = 0
        self._waited = set()  # (update sequence number, stream) waited on in this iteration

    def _start_distributed(self, process_group: Any, timeout_s: float, optimizer: Any) -> None:
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
        if self.device.type == "cuda" and all(p.device == self.device for p in self.params):
            # The engine's own stream: collectives are issued and updates run on it, ordered
            # after each gradient by events, so autograd's stream never waits for them.
            self._stream = torch.cuda.Stream(self.device)
            self._nccl = backend == "nccl"
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

    def _release_groups(self) -> None:
        """Destroy the two groups this engine made, once its threads are done.

        Gloo's worker threads hold the async works of the gradient traffic; left to the
        interpreter's finalization they are destroyed without the GIL and the process can
        abort after training finished ("terminate called without an active exception",
        pytorch/pytorch#179291). Destroying the groups here, while Python is alive, joins
        those threads. It is local: no collective, nothing the peer must match.
        """
        fused, self._fused = self._fused, {}
        fused.clear()
        self._slot = {}
        for name in ("comm_group", "ctl_group"):
            group = getattr(self, name, None)
            if group is not None and dist.is_initialized():
                try:
                    dist.destroy_process_group(group)
                except (ValueError, RuntimeError):
                    pass  # already destroyed with the default group by the user or the framework
            setattr(self, name, None)

    def _exchange_identity(self) -> list[tuple[int, int]]:
        """Every rank's (host hash, pid), to name a lost peer later."""
        me = torch.tensor([zlib.crc32(socket.gethostname().encode()), os.getpid()], dtype=torch.int64, device=self._cdev)
        out = [torch.zeros_like(me) for _ in range(self.world_size)]
        self._collective(lambda: dist.all_gather(out, me, group=self.ctl_group))
        return [(int(t[0]), int(t[1])) for t in out]

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
            # model.zero_grad() (user loops, Lightning before validation) would drop gradients in flight.
            self.model.zero_grad = _no_zero_grad  # type: ignore[method-assign]
        self._hooks.append(self.model.register_state_dict_pre_hook(lambda *a, **k: self.synchronize()))
        if self.optimizer is not None:
            take_over(self.optimizer, self, self.overlap)

    def _make_grad_hook(self, i: int) -> Callable[[Any], None]:
        def hook(p: Any) -> None:
            if self._no_sync:
                return  # accumulated locally; averaged with the next synchronised backward
            t_enter = time.perf_counter()
            if p.grad is not None and p.grad.layout != torch.strided:
                self._fail(ValueError(
                    f"parameter {self.tensors[i].name!r} got a {p.grad.layout} gradient; autobyte averages dense gradients only."
                ))
                raise self._error  # type: ignore[misc]
            ev = None
            if self._stream is not None:
                # Recorded on the stream autograd accumulated this gradient on (its current
                # stream here); the engine's stream waits on it before reading the gradient.
                self._compute_stream = torch.cuda.current_stream(p.device)
                ev = self._ready_ev[i]
                if ev is None:
                    ev = self._ready_ev[i] = torch.cuda.Event()
                ev.record(self._compute_stream)
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
            self._ready_q.put(("ready", i, ev))
            self.host_s["grad_hooks"] += time.perf_counter() - t_enter

        return hook

    _backward_open = False

    def _end_backward(self) -> None:
        self._backward_open = False
        self._ready_q.put(("end",))
        if not self.overlap:
            self._wait_iteration(self._backward_iter, "all gradients of this iteration")
            # Autograd runs final callbacks on the streams current around backward(): the
            # user's step() after it reads the averaged gradients in order (device-side).
            self._join_stream()

    def _join_stream(self) -> None:
        """Order the calling thread's current stream after everything the engine's stream has queued."""
        if self._stream is not None:
            torch.cuda.current_stream(self.device).wait_stream(self._stream)

    def _make_wait_hook(self, own: Sequence[int]) -> Callable[..., None]:
        def hook(module: Any, args: Any) -> None:
            t_enter = time.perf_counter()
            for i in own:
                if not self._updated[i].is_set():
                    self._wait(self._updated[i], f"the update of parameter {self.tensors[i].name!r}")
                if self._stream is not None:
                    # The update is queued on the engine's stream: this module's kernels wait for
                    # it on the device, once per update group and iteration; the host goes on.
                    done = self._update_ev[i]
                    if done is not None:
                        stream = torch.cuda.current_stream(self.device)
                        key = (done[0], stream.cuda_stream)
                        if key not in self._waited:
                            self._waited.add(key)
                            stream.wait_event(done[1])
            self.host_s["forward_waits"] += time.perf_counter() - t_enter

        return hook


def _no_zero_grad(set_to_none: bool = True) -> None:
    """Stands in for ``model.zero_grad`` in overlap mode: the engine clears each gradient after its update."""


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


def device_problem(backend: str, device_types: set[str]) -> str | None:
    """Why a process group on ``backend`` cannot average parameters on ``device_types``, or ``None``.

    NCCL serves CUDA tensors only; gloo serves CPU tensors (the engine stages
    CUDA gradients through the CPU for it). Other backends are not checked.
    """
    backend = backend.lower()
    if backend == "nccl" and device_types - {"cuda"}:
        return (f"the process group's backend is nccl, which averages CUDA tensors only, but the model's parameters "
                f"sit on {sorted(device_types)}; move the model to this rank's GPU (torch.cuda.set_device(LOCAL_RANK); "
                "model.to('cuda')) before schedule(), or create the group with init_process_group('gloo') to train on CPU.")
    if backend == "gloo" and device_types - {"cpu", "cuda"}:
        return (f"the process group's backend is gloo, which averages CPU (and CUDA) tensors, but the model's parameters "
                f"sit on {sorted(device_types)}; move the model to the CPU or a GPU before schedule().")
    return None


def end_gloo_at_exit() -> None:
    """Destroy the default process group at interpreter exit when it runs on gloo (registered once).

    Lightning destroys the group it made at exit for NCCL only. A gloo group left to the
    interpreter's finalization can abort the process after training finished: a worker
    thread of gloo releases the tensors of the last collective (``trainer.log_dir`` after
    ``fit`` is one) while Python is shutting down, cannot take the GIL and calls
    ``std::terminate`` (see :meth:`_SetUp._release_groups`; measured in docs/lightning.md).
    From ``atexit`` the group's threads are joined while Python is whole. Local: no collective.
    """
    atexit.unregister(_destroy_gloo_default_group)  # one registration, however many fits
    atexit.register(_destroy_gloo_default_group)


def _destroy_gloo_default_group() -> None:
    try:
        if dist.is_available() and dist.is_initialized() and str(dist.get_backend()).lower() == "gloo":
            dist.destroy_process_group()
    except (RuntimeError, ValueError) as exc:  # at exit: say it, do not raise
        print(f"autobyte: could not destroy gloo's default process group at exit: {exc}", file=sys.stderr)
