"""The issuer/completer pipeline of the PyTorch engine.

Two threads per handle: the issuer starts each message's all-reduce in the
iteration's agreed order as its gradients become ready and the credit
allows; the completer waits for each in issue order, averages, copies back
fused messages and (in overlap mode) updates the parameters whose chunks are
all done: every parameter completed by one message, or by the messages found
complete together, in one optimizer step (its multi-tensor path).

On CUDA parameters both threads run on the engine's own stream
(``_stream``): the issuer makes it wait on the event each gradient hook
recorded where autograd produced the gradient, the update runs on it after
the collective, and each module's next forward waits on the update's event;
no thread of the engine blocks the host on the device except the completer
(gloo's host copy; with NCCL, to learn a message's end for the credit).
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from ..core.metrics import StatsCollector
from ..core.scheduler import Message, TensorSpec
from ..core.timeline import Timeline
from ._torch_overlap import base_class
from ._imports import require_torch

torch = require_torch()
import torch.distributed as dist  # noqa: E402


@dataclass
class _IterPlan:
    iteration: int
    messages: list[Message]
    order: list[int]
    credit_bytes: int
    hypers: list[dict[str, Any]]
    version: int = 0


class _Pipeline:
    """Mixin of :class:`~autobyte.integrations.torch.ScheduledTraining`: the two communication threads."""

    params: list[Any]
    tensors: list[TensorSpec]
    world_size: int
    overlap: bool
    optimizer: Any
    comm_group: Any
    device: Any
    stats: StatsCollector
    timeline: Timeline | None
    _stats_lock: threading.Lock
    _ready_q: "queue.Queue[tuple]"
    _done_q: "queue.Queue[tuple]"
    _updated: list[threading.Event]
    _fused_key: int | None
    _fused: dict[int, Any]
    _slot: dict[int, tuple[Any, int]]
    _group_of: dict[int, int]
    _shadow: Any
    _fail: Any
    _finish_iteration: Any
    #: the engine's CUDA stream (communication and updates), None on CPU
    _stream: Any
    _nccl: bool
    #: the stream autograd produced gradients on (seen by the gradient hooks), CUDA only
    _compute_stream: Any
    #: per parameter: (sequence number, CUDA event recorded after its latest update), CUDA only
    _update_ev: list[Any]
    _update_seq: int
    #: optimizer.step() calls the engine made for grouped updates (one per group)
    update_steps: int
    thread_s: dict[str, float]

    def _use_stream(self) -> None:
        """Run this thread's device work on the engine's stream (and the parameters' device)."""
        if self._stream is not None:
            torch.cuda.set_device(self.device)
            torch.cuda.set_stream(self._stream)

    def _issue_loop(self) -> None:
        try:
            self._use_stream()
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
        events: list[Any] = [None] * n_params  # CUDA: the event after each gradient's accumulation
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
                if self._stream is not None:
                    for t in m.tensors:
                        if events[t] is not None:
                            self._stream.wait_event(events[t])  # device-side: the host does not wait
                t_enter = time.perf_counter()
                self._issue(m, plan.version)
                self.thread_s["issue"] += time.perf_counter() - t_enter
                in_flight.append((mi, m.nbytes))
                in_flight_bytes += m.nbytes
                nxt += 1
            cmd = self._ready_q.get()
            kind = cmd[0]
            if kind == "ready":
                i = cmd[1]
                if not ready[i]:
                    ready[i] = True
                    events[i] = cmd[2] if len(cmd) > 2 else None
                    for mi in by_tensor[i]:
                        missing[mi] -= 1
                        if missing[mi] == 0:
                            msg_ready[mi] = True
            elif kind == "end":
                # Backward finished: parameters that got no gradient contribute zeros.
                for i, p in enumerate(self.params):
                    if not ready[i]:
                        if p.grad is None:
                            p.grad = torch.zeros_like(p)  # on the engine's stream, where it is used next
                            if self._stream is not None and self._compute_stream is not None:
                                p.grad.record_stream(self._compute_stream)  # the user's step may read it there
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
            if self._stream is not None:
                # Made on autograd's stream, read and freed on the engine's: the allocator
                # must not hand its memory out again before this stream is done with it.
                p.grad.record_stream(self._stream)
        if _cast(m, self.tensors):
            # 16 bits on the wire, as DDP's compression hooks: cast into the message's 16-bit buffer,
            # divide by the world size there (the sum of the ranks' shares is the average), sum, and
            # cast back at completion
            buf = self._fused_buffer(m, version)
            parts = [self.params[sg.tensor].grad.view(-1)[sg.start:sg.stop] for sg in segs]
            if len(parts) == 1:
                buf.copy_(parts[0])
            else:
                torch._foreach_copy_(list(buf.split([sg.numel for sg in segs])), parts)
            buf.div_(self.world_size)
            if buf.dtype == torch.float16:
                _divide_first_where_the_cast_overflowed(buf, parts, self.world_size)
            view = False
        elif len(segs) == 1:
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
                parts = [self.params[sg.tensor].grad.reshape(-1)[sg.start:sg.stop] for sg in segs]
                if any(g.untyped_storage().data_ptr() == buf.untyped_storage().data_ptr() for g in parts):
                    # Some gradients are still views into buf (others were replaced): copy one by one.
                    off = 0
                    for g in parts:
                        buf[off:off + g.numel()].copy_(g)
                        off += g.numel()
                else:
                    torch.cat(parts, out=buf)  # one copy for the whole message (fused segments are whole tensors)
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
            buf = torch.zeros(m.numel, dtype=getattr(torch, m.dtype), device=self.device)
            self._fused[m.index] = buf
            if not _cast(m, self.tensors):  # gradients stay in their own precision, so they can live in buf
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
        backlog: deque[tuple] = deque()  # at most one command taken from the queue while grouping
        try:
            self._use_stream()
            while True:
                cmd = backlog.popleft() if backlog else self._done_q.get()
                if cmd[0] == "stop":
                    return
                if cmd[0] == "iter":
                    plan, chunks_left = cmd[1], cmd[2]
                    n_left = len(plan.messages)
                    continue
                if cmd[0] == "abandon":
                    self._finish_iteration(cmd[1])
                    continue
                if plan is None:
                    raise RuntimeError("autobyte: internal error, a message completed before its iteration began")
                # Messages whose collective has already finished behind this one join its update.
                batch = [cmd]
                while not backlog:
                    try:
                        nxt = self._done_q.get_nowait()
                    except queue.Empty:
                        break
                    if nxt[0] == "msg" and nxt[4].is_completed():
                        batch.append(nxt)
                    else:
                        backlog.append(nxt)
                done: list[int] = []  # parameters whose last chunk arrived
                for _, m, buf, view, work, t0 in batch:
                    t_enter = time.perf_counter()
                    self._complete_message(m, buf, view, work, t0)
                    self.thread_s["complete"] += time.perf_counter() - t_enter
                    for t in m.tensors:
                        chunks_left[t] -= 1
                        if chunks_left[t] == 0:
                            done.append(t)
                if self.overlap:
                    t_enter = time.perf_counter()
                    self._apply_updates(done, plan)
                    self.thread_s["update"] += time.perf_counter() - t_enter
                else:
                    for t in done:
                        self._updated[t].set()
                for _ in batch:
                    self._ready_q.put(("done",))
                n_left -= len(batch)
                if n_left == 0:
                    self._finish_iteration(plan.iteration)
        except BaseException as exc:  # noqa: BLE001 - reported to the main thread
            self._fail(exc)
            self._ready_q.put(("failed",))

    def _complete_message(self, m: Message, buf: Any, view: bool, work: Any, t0: float) -> None:
        """Wait for message ``m``'s all-reduce, average it and copy it back to the gradients it does not view."""
        # CPU: blocks until the sum is in buf. CUDA: makes this thread's stream (the engine's) wait
        # for the collective; gloo also blocks the host here until its copy through host memory is done.
        work.wait()
        if self._nccl:
            # NCCL's wait returns before the collective ends; the credit and the statistics need its
            # end. This thread (not the training loop) sleeps until then, without spinning.
            ev = torch.cuda.Event(blocking=True)
            ev.record()
            ev.synchronize()
        t1 = time.perf_counter()
        with torch.no_grad():
            if not _cast(m, self.tensors):  # a 16-bit message was divided before its sum
                buf.div_(self.world_size)
            if not view:
                dst, src, off = [], [], 0
                for s in m.segments:
                    dst.append(self.params[s.tensor].grad.view(-1)[s.start:s.stop])
                    src.append(buf[off:off + s.numel])
                    off += s.numel
                if len(dst) == 1:
                    dst[0].copy_(src[0])
                else:
                    torch._foreach_copy_(dst, src)  # one multi-tensor launch on CUDA (casting back from 16 bits)
        with self._stats_lock:
            self.stats.message_done(m.nbytes, t0, t1)
        if self.timeline is not None:
            self.timeline.span(f"msg {m.index}", "communication", t0, t1, bytes=m.nbytes, priority=m.priority, chunk=m.chunk,
                               tensors=[self.tensors[t].name for t in m.tensors])

    def _apply_updates(self, done: list[int], plan: _IterPlan) -> None:
        """Update the parameters ``done`` in one optimizer step, then give each a cleared gradient.

        One step over every optimizer group involved, each restricted to its parameters among
        ``done``, with the hyper-parameters the iteration began with; ``foreach`` left unset
        becomes True (the multi-tensor path: one launch per operation for the whole group on
        CUDA); a ``fused`` or ``foreach`` you set is kept.
        """
        if not done:
            return
        by_group: dict[int, list[Any]] = {}
        for t in done:
            gi = self._group_of.get(id(self.params[t]))
            if gi is not None:
                by_group.setdefault(gi, []).append(self.params[t])
        if by_group:
            t0 = time.perf_counter()
            groups = []
            for gi, ps in by_group.items():
                group = dict(plan.hypers[gi])
                group["params"] = ps
                if "foreach" in group and group["foreach"] is None and not group.get("fused") and not group.get("differentiable"):
                    group["foreach"] = True
                groups.append(group)
            self._shadow.param_groups = groups
            base_class(self.optimizer).step(self._shadow)
            self.update_steps += 1
            if self.timeline is not None:
                names = [self.tensors[t].name for t in done]
                self.timeline.span(f"update {names[0]}" + (f" +{len(names) - 1}" if len(names) > 1 else ""), "update", t0,
                                   time.perf_counter(), tensors=names)
        views = []
        for t in done:
            p = self.params[t]
            slot = self._slot.get(t)
            if slot is not None:
                buf, off = slot
                view = buf[off:off + p.numel()].view_as(p)
                views.append(view)
                p.grad = view  # the next backward accumulates into the message buffer in place
            else:
                p.grad = None
        if views:
            torch._foreach_zero_(views)
        if self._stream is not None:
            # The next forward of each module waits for this event on its own stream (device-side).
            ev = torch.cuda.Event()
            ev.record()
            self._update_seq += 1
            for t in done:
                self._update_ev[t] = (self._update_seq, ev)
        for t in done:
            self._updated[t].set()


def _cast(m: Message, tensors: list[TensorSpec]) -> bool:
    """Whether message ``m`` travels in another precision than some of its gradients (a 16-bit wire)."""
    return any(tensors[sg.tensor].dtype != m.dtype for sg in m.segments)


def _divide_first_where_the_cast_overflowed(buf: Any, parts: list[Any], world_size: int) -> None:
    """fp16: an element whose gradient exceeds 65504 but whose share ``g / world_size`` does not gets the share.

    Elsewhere the buffer is the hook's, bit for bit (cast, then divide in 16 bits); there the hook's
    cast makes inf, while the average the ranks' shares sum to may well be finite. Read on the
    gradients (a min/max pass in their precision costs a tenth of a finiteness test of the fp16 buffer).
    """
    off = 0
    for g in parts:
        lo, hi = torch.aminmax(g)
        if not (float(hi) < _FP16_ROUNDS_TO_INF and float(lo) > -_FP16_ROUNDS_TO_INF):  # NaN: looked at too
            dst = buf[off:off + g.numel()]
            bad = torch.isinf(dst) & torch.isfinite(g)
            if bool(bad.any()):
                dst[bad] = (g[bad] / world_size).to(buf.dtype)
        off += g.numel()


#: the smallest magnitude that rounds to inf in float16 (65504 is the largest finite value)
_FP16_ROUNDS_TO_INF = 65520.0
