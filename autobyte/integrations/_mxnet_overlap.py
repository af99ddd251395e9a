"""Overlap of a parameter server's communication with the next forward: the credit window inside MXNet's engine.

Plain ``dist_sync`` returns from ``Trainer.step`` at once: MXNet's dependency
engine runs each layer's next forward as soon as that layer's weight is
back. The scheduled engine keeps that property. ``step()`` pushes, for every
message of the plan, a chain of operations into MXNet's engine and returns:

* ``gate``: an asynchronous operation that runs when the message's gradients
  are written and is held until the credit window releases the message;
* the KVStore ``pushpull`` of the message;
* ``done``: runs when the pull has landed (statistics, credit returned,
  held gates released);

then one ``land`` operation per buffer the messages write into (a
gradient, or a fused buffer followed by its copies back into the
gradients), held until every message writing into it is done, and the
Trainer's update, which reads each gradient after its land. The next
forward reads each weight after its own update, so front layers start while
the back layers' messages are still on the wire.

Two things make this work with MXNet 1.9's public C API:

* ``MXEnginePushAsyncND`` runs a Python function as an engine operation whose
  completion callback (``engine::CallbackOnComplete``, three pointers) is
  copied and called later, from any thread: the hold of ByteScheduler's
  MXNet plugin, with ctypes instead of a compiled helper;
* every message is sent from an *avatar*: an NDArray that shares the
  memory of its slice of the gradient (``MXNDArrayToDLPack`` then
  ``MXNDArrayFromDLPackEx``) but has an engine variable of its own. MXNet
  orders every operation on views of one array, so without avatars the
  chunks of one gradient would go one after the other; and the gradient
  becomes readable only through the land, which a lost peer's timeout can
  release (the forward then goes on with a partial gradient and the next
  ``step`` raises :class:`PeerLostError`: the job cannot go on).

The host waits only in the next ``step`` (or :meth:`_Overlap.wait`), for the
previous iteration's messages, which the next forward needs anyway.
"""

from __future__ import annotations

import ctypes
import functools
import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from ..core.scheduler import CreditQueue, Message

_ASYNC_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
_ON_COMPLETE_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
_CPU = (ctypes.c_int * 2)(1, 0)  # mxnet::Context{kCPU, 0}: where the engine runs these host-only operations
_CPU_PRIORITIZED = ctypes.c_int(3)  # FnProperty::kCPUPrioritized: MXNet's own pool, never behind compute


class _OnComplete(ctypes.Structure):
    """``engine::CallbackOnComplete`` of MXNet 1.9 (``include/mxnet/engine.h``): the engine's callback, engine, block."""

    _fields_ = [("callback", ctypes.c_void_p), ("engine", ctypes.c_void_p), ("param", ctypes.c_void_p)]


class _Completion:
    """A held engine operation: calling it (once; later calls do nothing) lets the operations after it run."""

    __slots__ = ("_args", "_lock")

    def __init__(self, oc: _OnComplete) -> None:
        self._args: tuple[int, int, int] | None = (int(oc.callback), int(oc.engine or 0), int(oc.param or 0))
        self._lock = threading.Lock()

    def __call__(self) -> None:
        with self._lock:
            args, self._args = self._args, None
        if args is not None:
            _ON_COMPLETE_FN(args[0])(args[1], args[2], None)


class _EngineOps:
    """Python functions as asynchronous MXNet engine operations (``MXEnginePushAsyncND``)."""

    def __init__(self, mx: Any) -> None:
        self._lib = mx.base._LIB
        self._check = mx.base.check_call
        self._handle_t = mx.base.NDArrayHandle
        self._nd = mx.nd.NDArray
        self._jobs: dict[int, Callable[[_Completion], None]] = {}
        self._next = 1
        self._lock = threading.Lock()
        #: exceptions raised by jobs (on MXNet's threads); the engine re-raises the first at its next step
        self.errors: list[BaseException] = []
        self._fn = _ASYNC_FN(self._run)  # kept alive as long as this object: MXNet calls it

    def push(self, job: Callable[[_Completion], None], *, const: Sequence[Any] = (), mutable: Sequence[Any] = (),
             priority: int = 0, name: bytes = b"autobyte") -> None:
        """Run ``job(completion)`` once the engine allows (after writes to ``const``, after all uses of ``mutable``).

        Operations pushed later that use ``mutable`` wait until ``completion()`` is called.
        """
        with self._lock:
            tag = self._next
            self._next += 1
            self._jobs[tag] = job
        c = (self._handle_t * len(const))(*[a.handle for a in const])
        m = (self._handle_t * len(mutable))(*[a.handle for a in mutable])
        self._check(self._lib.MXEnginePushAsyncND(
            self._fn, ctypes.c_void_p(tag), None, _CPU, c, len(const), m, len(mutable),
            ctypes.byref(_CPU_PRIORITIZED), int(priority), name, False))

    def _run(self, _run_ctx: int, on_complete: int, tag: int) -> None:
        done = _Completion(_OnComplete.from_address(on_complete))
        with self._lock:
            job = self._jobs.pop(tag, None)
        try:
            if job is not None:
                job(done)
        except BaseException as exc:  # an exception must never leave an operation pending in MXNet's engine
            self.errors.append(exc)
            done()

    def avatar(self, arr: Any) -> Any:
        """An NDArray on ``arr``'s memory with an engine variable of its own (no wait, no copy)."""
        dl, h = ctypes.c_void_p(), self._handle_t()
        self._check(self._lib.MXNDArrayToDLPack(arr.handle, ctypes.byref(dl)))
        self._check(self._lib.MXNDArrayFromDLPackEx(dl, False, ctypes.byref(h)))  # owns dl: keeps arr's memory alive
        return self._nd(handle=h)


@dataclass
class _Land:
    """Where messages land: a gradient (its views, one per context) or a fused buffer copied back after."""

    arrays: list[Any]
    messages: list[int]
    fused: int | None = None


@dataclass
class _Bindings:
    """The arrays of one plan bound to the current gradient arrays."""

    grads: tuple[int, ...]  # handles of the gradient arrays these are views of
    flat: list[list[Any]]  # tensor -> flat gradient, one per context
    sources: list[list[Any]]  # message -> what its gate waits for (gradient views, or its fused buffer)
    avatars: list[list[Any]]  # message -> the arrays it is pushed from and pulled into
    lands: list[_Land]
    land_of: list[list[int]] = field(default_factory=list)  # message -> its lands


class _Round:
    """One iteration's messages in flight; its methods run on MXNet's engine threads, under ``cv``."""

    def __init__(self, iteration: int, messages: Sequence[Message], keys: Sequence[int], bindings: _Bindings,
                 queue: CreditQueue, cv: threading.Condition, t_begin: float, batch_size: int) -> None:
        self.iteration, self.messages, self.keys, self.queue, self.cv = iteration, list(messages), list(keys), queue, cv
        self.land_of = bindings.land_of
        self.t_begin, self.batch_size = t_begin, batch_size
        self.gates: dict[int, _Completion] = {}
        self.t_issue: dict[int, float] = {}
        self.ready: dict[int, float] = {}
        #: ``(key, nbytes, t_issue, t_done)`` of every message done
        self.records: list[tuple[int, int, float, float]] = []
        self.lands_left = [len(land.messages) for land in bindings.lands]
        self.lands_held: dict[int, _Completion] = {}
        # tensors not yet seen ready + messages not done + lands not released
        self.n_open = len(bindings.flat) + len(self.messages) + len(bindings.lands)
        self.t_progress = time.perf_counter()
        self.t_finished: float | None = None
        self.abandoned = False

    @property
    def finished(self) -> bool:
        return self.n_open == 0

    # ------------------------------------------------ on MXNet's engine threads
    def on_ready(self, tensor: int, done: _Completion) -> None:
        t = time.perf_counter()
        with self.cv:
            self.ready.setdefault(tensor, t)
            self._close(t)
        done()

    def on_gate(self, index: int, done: _Completion) -> None:
        with self.cv:
            if self.abandoned:
                go = [done]
            else:
                self.gates[index] = done
                self.queue.mark_ready(index)
                go = self._release(time.perf_counter())
        for g in go:
            g()

    def on_done(self, index: int, done: _Completion) -> None:
        t = time.perf_counter()
        with self.cv:
            go: list[_Completion] = []
            if not self.abandoned:
                self.records.append((self.keys[index], self.messages[index].nbytes, self.t_issue[index], t))
                self.queue.mark_done(index)
                self.t_progress = t
                self._close(t)
                for k in self.land_of[index]:
                    self.lands_left[k] -= 1
                    if self.lands_left[k] == 0 and k in self.lands_held:
                        go.append(self.lands_held.pop(k))
                        self._close(t)
                go += self._release(t)
        for g in go:
            g()
        done()

    def on_land(self, land: int, done: _Completion) -> None:
        with self.cv:
            if self.lands_left[land] > 0 and not self.abandoned:
                self.lands_held[land] = done
                return
            self._close(time.perf_counter())
        done()

    # --------------------------------------------------------- under self.cv
    def _release(self, t: float) -> list[_Completion]:
        go = []
        for i in self.queue.release():
            self.t_issue[i] = t
            go.append(self.gates.pop(i))
        if go:
            self.t_progress = t
        return go

    def _close(self, t: float) -> None:
        self.n_open -= 1
        if self.n_open == 0:
            self.t_finished = t
            self.cv.notify_all()

    def stalled(self, now: float, timeout_s: float) -> int | None:
        """The oldest message in flight when nothing moved for ``timeout_s`` (a peer is gone), else ``None``."""
        if self.abandoned or not self.queue.in_flight or now - self.t_progress < timeout_s:
            return None
        return next(iter(self.queue.in_flight))

    def abandon(self) -> list[_Completion]:
        """Release every held operation (a lost peer): the training thread must not wait forever in MXNet."""
        self.abandoned = True
        go = list(self.gates.values()) + list(self.lands_held.values())
        self.gates.clear()
        self.lands_held.clear()
        self.cv.notify_all()
        return go


class _Watch:
    """What the training thread and the watchdog share: the round in flight, the lost peer's error.

    It holds nothing that keeps the engine or its KVStore alive (the
    watchdog thread holds it for ever, and MXNet's KVStore must be freed
    before the process exits).
    """

    def __init__(self, timeout_s: float, lost: Callable[[str], BaseException]) -> None:
        self.timeout_s = timeout_s
        self._make_lost = lost
        self.cv = threading.Condition()
        self.round: _Round | None = None
        self.lost: BaseException | None = None
        self.closed = False

    def check(self, r: _Round) -> list[_Completion] | None:
        """Under ``cv``: declare the peer lost if ``r`` stalled; the operations to release then."""
        if self.lost is not None or r.finished:
            return None
        index = r.stalled(time.perf_counter(), self.timeout_s)
        if index is None:
            return None
        self.lost = self._make_lost(f"message {index} of iteration {r.iteration}")
        return r.abandon()

    def close(self) -> None:
        with self.cv:
            self.closed = True
            self.cv.notify_all()


class _Overlap:
    """The overlapped path of a parameter-server engine: binds plans to gradients, issues rounds, waits, watches.

    Args:
        mx: the MXNet module.
        timeout_s: longest time with messages in flight and none done.
        lost: builds the :class:`PeerLostError` for a message that got no answer (``"message 3 of iteration 8"``).
    """

    def __init__(self, mx: Any, timeout_s: float, lost: Callable[[str], BaseException]) -> None:
        self.ops = _EngineOps(mx)
        self.watch = _Watch(timeout_s, lost)
        self._bindings: dict[int, _Bindings] = {}
        self._watchdog: threading.Thread | None = None

    @property
    def lost(self) -> BaseException | None:
        return self.watch.lost

    # ------------------------------------------------------------ binding
    def bind(self, layout: Any, params: Sequence[Any]) -> _Bindings:
        """The avatars, sources and lands of ``layout`` for the current gradient arrays (cached)."""
        grads = [p.list_grad() for p in params]
        key = tuple(int(g.handle.value) for gs in grads for g in gs)
        b = self._bindings.get(layout.partition_bytes)
        if b is not None and b.grads == key:
            return b
        flat = [[g.reshape((-1,)) for g in gs] for gs in grads]
        sources: list[list[Any]] = []
        avatars: list[list[Any]] = []
        lands: list[_Land] = []
        by_tensor: dict[int, _Land] = {}
        for m in layout.messages:
            if m.index in layout.fused:
                bufs = layout.fused[m.index]
                sources.append(list(bufs))
                avatars.append([self.ops.avatar(b_) for b_ in bufs])
                lands.append(_Land(list(bufs), [m.index], m.index))
            else:
                s = m.segments[0]
                sources.append(flat[s.tensor])
                avatars.append([self.ops.avatar(g[s.start:s.stop]) for g in flat[s.tensor]])
                if s.tensor not in by_tensor:
                    by_tensor[s.tensor] = _Land(flat[s.tensor], [])
                    lands.append(by_tensor[s.tensor])
                by_tensor[s.tensor].messages.append(m.index)
        land_of: list[list[int]] = [[] for _ in layout.messages]
        for k, land in enumerate(lands):
            for i in land.messages:
                land_of[i].append(k)
        b = _Bindings(key, flat, sources, avatars, lands, land_of)
        self._bindings[layout.partition_bytes] = b
        return b

    # ------------------------------------------------------------ one round
    def issue_round(self, iteration: int, layout: Any, params: Sequence[Any], ready_order: Sequence[int],
                    queue: CreditQueue, issue: Callable[[Any, int, list[Any]], None], t_begin: float,
                    batch_size: int) -> _Round:
        """Push one iteration's messages into MXNet's engine (``issue(layout, index, arrays)`` sends one); return at once."""
        b = self.bind(layout, params)
        w = self.watch
        r = _Round(iteration, layout.messages, layout.keys, b, queue, w.cv, t_begin, batch_size)
        push = self.ops.push
        for t in ready_order:
            push(functools.partial(r.on_ready, t), const=b.flat[t], name=b"autobyte_ready")
        for m in layout.messages:
            i = m.index
            if i in layout.fused:
                layout.gather(i, b.flat)  # queued copies into the fused buffer
            prio = layout.mx_priority[i]
            push(functools.partial(r.on_gate, i), const=b.sources[i], mutable=b.avatars[i], priority=prio,
                 name=b"autobyte_gate")
            issue(layout, i, b.avatars[i])
            push(functools.partial(r.on_done, i), mutable=b.avatars[i], priority=prio, name=b"autobyte_done")
        for k, land in enumerate(b.lands):
            push(functools.partial(r.on_land, k), mutable=land.arrays, name=b"autobyte_land")
            if land.fused is not None:
                layout.scatter(b.flat, [land.fused])  # land.arrays are the fused buffers
        with w.cv:
            w.round = r
            w.cv.notify_all()
        self._start_watchdog()
        return r

    def wait(self, r: _Round) -> None:
        """Wait until ``r`` is done; :class:`PeerLostError` when nothing moved for ``timeout_s`` with messages in flight."""
        w = self.watch
        go: list[_Completion] = []
        with w.cv:
            while not r.finished and w.lost is None and not self.ops.errors:
                go = w.check(r) or []
                if w.lost is None:
                    w.cv.wait(min(1.0, w.timeout_s))
            if w.round is r:
                w.round = None
        for g in go:
            g()
        if self.ops.errors:
            raise RuntimeError("an autobyte engine callback failed; this is a bug in autobyte.") from self.ops.errors[0]
        if w.lost is not None:
            raise w.lost

    def _start_watchdog(self) -> None:
        if self._watchdog is None:
            self._watchdog = threading.Thread(target=_watch, args=(self.watch,), name="autobyte-mxnet-watchdog", daemon=True)
            self._watchdog.start()
            weakref.finalize(self, self.watch.close)


def _watch(w: _Watch) -> None:
    """Release a stalled round's held operations after ``timeout_s`` even while the training thread waits inside MXNet.

    The training thread may wait on an array the next forward computes
    (``loss.asnumpy()``) before it calls ``step`` again; without this, a lost
    peer would hang it for ever.
    """
    while True:
        with w.cv:
            if w.closed:
                return
            r = w.round
            go = w.check(r) if r is not None else None
            if go is None:
                w.cv.wait(min(1.0, w.timeout_s))
        for g in go or ():
            g()


def measure_ready_times(ops: _EngineOps, arrays: Sequence[Sequence[Any]]) -> list[float]:
    """When each group of ``arrays`` became readable (``perf_counter`` seconds); waits for all of them.

    Called while a backward pass runs, it tells the order in which the
    backward writes the gradients.
    """
    times: list[float] = [0.0] * len(arrays)
    left = [len(arrays)]
    cv = threading.Condition()

    def seen(k: int, done: _Completion) -> None:
        t = time.perf_counter()
        with cv:
            times[k] = t
            left[0] -= 1
            cv.notify_all()
        done()

    for k, group in enumerate(arrays):
        ops.push(functools.partial(seen, k), const=group, name=b"autobyte_probe")
    with cv:
        while left[0] and not ops.errors:
            cv.wait(1.0)
    if ops.errors:
        raise RuntimeError("an autobyte engine callback failed; this is a bug in autobyte.") from ops.errors[0]
    return times
