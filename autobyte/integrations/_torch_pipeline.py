"""The issuer/completer pipeline of the PyTorch engine.

Two threads per handle: the issuer starts each message's all-reduce in the
iteration's agreed order as its gradients become ready and the credit
allows; the completer waits for each in issue order, averages, copies back
fused messages and (in overlap mode) updates each parameter as soon as all
of its chunks are done.
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
                if plan is None:
                    raise RuntimeError("autobyte: internal error, a message completed before its iteration began")
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
            base_class(self.optimizer).step(self._shadow)
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
