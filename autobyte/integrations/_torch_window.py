"""The tuning window and agreement of the PyTorch engine.

The window protocol itself is core's :class:`~autobyte.core.window.WindowCoordinator`;
this module is its transport (:class:`_ControlCollective`) and what the
engine does with the outcome (the scheduler follows the agreed decision).
Everything the ranks agree on runs on the main thread, on the control group
(``timeout_s``), behind a fixed-size header (:meth:`_Failures._control`):
buffer broadcast, the window's statistics gather and rank 0's decision, the
issue order, and :meth:`reconfigure`.
"""

from __future__ import annotations

import weakref
from typing import Any, Callable, Sequence

import numpy as np

from ..core.metrics import StatsCollector, WindowStats
from ..core.scheduler import Scheduler, TensorSpec, estimated_order
from ..core.space import WIRES, Config, check_wire
from ..core.tuning import Controller
from ..core.window import DecisionRecord, Wire, WindowCoordinator, WindowOutcome, decode, encode
from ._imports import require_torch

torch = require_torch()
import torch.distributed as dist  # noqa: E402


class _ControlCollective:
    """The window protocol's transport (:class:`autobyte.core.window.Collective`) on the handle's control group.

    Each call runs under the handle's ``timeout_s`` (a lost peer raises
    ``PeerLostError``); a gather is announced by the fixed-size header first,
    so ranks that reached different calls get ``CollectiveMismatchError``.
    In one process it is the identity.
    """

    def __init__(self, handle: Any) -> None:
        # A weak reference: the handle owns the coordinator that owns this transport, and a
        # cycle would keep the handle's process groups alive until interpreter teardown.
        self._ref = weakref.ref(handle)

    @property
    def _h(self) -> Any:
        handle = self._ref()
        if handle is None:
            raise RuntimeError("the ScheduledTraining handle of this transport no longer exists.")
        return handle

    @property
    def rank(self) -> int:
        return int(self._h.rank)

    @property
    def world_size(self) -> int:
        return int(self._h.world_size)

    def all_gather(self, vector: np.ndarray) -> list[np.ndarray]:
        h = self._h
        if not h.active:
            return [np.asarray(vector, dtype=np.float64)]
        vec = torch.tensor(np.asarray(vector, dtype=np.float64), dtype=torch.float64, device=h._cdev)
        h._control(3, vec.numel())
        out = [torch.zeros_like(vec) for _ in range(h.world_size)]
        h._collective(lambda: dist.all_gather(out, vec, group=h.ctl_group), "every rank's window statistics")
        return list(torch.stack(out).cpu().numpy())  # one copy to the host (a device tensor with NCCL)

    def broadcast(self, vector: np.ndarray) -> np.ndarray:
        h = self._h
        if not h.active:
            return np.asarray(vector, dtype=np.float64)
        msg = torch.tensor(np.asarray(vector, dtype=np.float64), dtype=torch.float64, device=h._cdev)
        h._collective(lambda: dist.broadcast(msg, h._src, group=h.ctl_group), "rank 0's decision")
        return msg.cpu().numpy()


class _Window:
    """Mixin of :class:`~autobyte.integrations.torch.ScheduledTraining`: statistics, decisions, agreement."""

    model: Any
    tensors: list[TensorSpec]
    scheduler: Scheduler
    controller: Controller | None
    coordinator: WindowCoordinator | None
    stats: StatsCollector
    rank: int
    world_size: int
    active: bool
    iteration: int
    verbose: bool
    ctl_group: Any
    on_decision: Callable[[WindowOutcome], None] | None
    _src: int
    _cdev: Any
    _stats_lock: Any
    _order: list[int]
    _layer_estimate: np.ndarray | None
    _bw_estimate: float | None
    _collective: Any
    _control: Any
    _raise_if_failed: Any

    def _sync_buffers(self) -> None:
        bufs = [b for b in self.model.buffers() if b.numel()]
        if not bufs:
            return
        src = self._src
        with torch.no_grad():
            # One flat float64 message (exact for integer counters too), made and unpacked in one
            # launch each; rank 0's buffers are the source and stay as they are.
            flat = torch.empty(sum(b.numel() for b in bufs), dtype=torch.float64, device=bufs[0].device)
            torch.cat([b.detach().reshape(-1) for b in bufs], out=flat)
            self._control(2, len(bufs), flat.numel())
            self._collective(lambda: dist.broadcast(flat, src, group=self.ctl_group), "rank 0's buffers")
            if self.rank != 0:
                parts = flat.split([b.numel() for b in bufs])
                torch._foreach_copy_(bufs, [v.view_as(b) for v, b in zip(parts, bufs)])

    def _agree_on_start(self) -> None:
        """Every rank starts from rank 0's configuration (a tuner may pick a random first probe)."""
        if self.coordinator is not None:
            self._follow(self.coordinator.start(0, self.scheduler.config))
            return
        cfg = self.scheduler.config  # no tuner: rank 0's configuration, in the protocol's one wire format
        agreed = decode(_ControlCollective(self).broadcast(encode(Wire(0, cfg, 0)))).config
        if agreed != cfg:
            self.scheduler = Scheduler(self.tensors, agreed)
            self._order = list(range(len(self.scheduler.messages)))

    def _window_boundary(self, it: int) -> None:
        """A check: core's window protocol gathers, decides on rank 0 and agrees; the scheduler follows from ``it``."""
        assert self.coordinator is not None
        with self._stats_lock:
            mine = self.stats.window()
        out = self.coordinator.check(it, mine, apply_at=it)
        self._learn_estimates(out.windows)
        self._follow(out)
        if out.decision is None:
            self._order = self._planned_order()
        if not out.window_closed:  # checks in between are silent
            return
        if self.on_decision is not None:
            self.on_decision(out)
        if self.verbose and self.rank == 0 and out.decision is not None:
            d = out.decision
            print(f"AutoByte reconfigured at iteration {it}: {d.old} -> {d.new}: {d.reason}", flush=True)

    def _follow(self, out: WindowOutcome) -> None:
        """The scheduler follows the coordinator: an agreed decision applies from its iteration."""
        d = out.decision
        if d is None:
            return
        if self.iteration < 0 and d.iteration == 0:  # nothing ran yet: the first step starts with that plan
            self.scheduler = Scheduler(self.tensors, d.new)
            self._order = list(range(len(self.scheduler.messages)))
        else:
            self.scheduler.reconfigure(d.new.partition_bytes, d.new.credit_bytes, wire=d.new.wire, at_iteration=d.iteration,
                                       reason=d.reason)

    @property
    def reconfigurations(self) -> list[DecisionRecord]:
        """Every reconfiguration applied (tuned, a tuner's start, user's or restored), the same on every rank."""
        return [] if self.coordinator is None else list(self.coordinator.history)

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
            order = estimated_order(msgs, self.scheduler.config.credit_bytes, list(self._layer_estimate), self._bw_estimate)
        if self.active:
            tensor = torch.tensor(order, dtype=torch.int64, device=self._cdev)
            src = self._src
            self._control(5, len(order))
            self._collective(lambda: dist.broadcast(tensor, src, group=self.ctl_group), "rank 0's issue order")
            order = [int(x) for x in tensor.tolist()]
        return order

    def reconfigure(self, partition_bytes: int | None = None, credit_bytes: int | None = None, *, wire: str | None = None,
                    at_iteration: int | None = None) -> Config:
        """Switch to ``<partition_bytes, credit_bytes>`` at precision ``wire`` at an iteration boundary.

        A collective call: every rank must call it with the same values.
        An argument left ``None`` keeps its value in force (or already
        requested): ``reconfigure(wire="bf16")`` changes the precision only.
        Called before the first training step, the configuration applies
        from the first step; a call for the configuration in force (with
        nothing else pending) changes nothing. The iteration before
        ``at_iteration`` is averaged at the old configuration, every later
        one at the new: no update is lost or applied twice.

        Raises:
            TypeError, ValueError: invalid sizes or iteration, or ranks disagree.
            CollectiveMismatchError: called on some ranks only (the others
                reached another collective call).
            PeerLostError: a peer did not call it within ``timeout_s``.
        """
        pending = self.scheduler.pending
        base = pending[0] if pending is not None else self.scheduler.config
        cfg = Config(base.partition_bytes if partition_bytes is None else partition_bytes,
                     base.credit_bytes if credit_bytes is None else credit_bytes,
                     base.wire if wire is None else check_wire(wire))
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
            mine = torch.tensor([cfg.partition_bytes, cfg.credit_bytes, at, WIRES.index(cfg.wire)], dtype=torch.int64, device=self._cdev)
            out = [torch.zeros_like(mine) for _ in range(self.world_size)]
            self._collective(lambda: dist.all_gather(out, mine, group=self.ctl_group), "reconfigure() on every rank")
            seen = [tuple(row) for row in torch.stack(out).tolist()]
            if len(set(seen)) > 1:
                detail = ", ".join(f"rank {r}: partition_bytes={s[0]}, credit_bytes={s[1]}, at_iteration={s[2]}, "
                                   f"wire={WIRES[s[3]]!r}" for r, s in enumerate(seen))
                raise ValueError(f"reconfigure must be called with the same arguments on every rank, but got {detail}.")
        if self.iteration < 0 and at == 0:
            # Nothing ran yet: the first step starts with this plan.
            if cfg != self.scheduler.config or self.scheduler.pending is not None:
                self.scheduler = Scheduler(self.tensors, cfg)
                self._order = list(range(len(self.scheduler.messages)))
            if self.coordinator is not None:
                self.coordinator.apply(0, cfg, "user")
            return cfg
        if cfg == self.scheduler.config and self.scheduler.pending is None:
            return cfg  # already in force: nothing to do
        self.scheduler.reconfigure(cfg.partition_bytes, cfg.credit_bytes, wire=cfg.wire, at_iteration=at, reason="user")
        return cfg

    def state_dict(self) -> dict[str, Any]:
        """Plain-typed state: configuration, iteration, controller/tuner state."""
        out: dict[str, Any] = {"config": self.scheduler.config.to_dict(), "iteration": self.iteration}
        if self.coordinator is not None:
            out["controller"] = self.coordinator.controller.state_dict()
            out["reconfigurations"] = [r.to_dict() for r in self.coordinator.history]
        return out

    def load_state_dict(self, state: dict[str, Any]) -> None:
        cfg = Config.from_dict(state["config"]) if "config" in state else self.scheduler.config
        if self.coordinator is not None and "controller" in state:
            self.coordinator.load_state_dict({"controller": state["controller"], "history": state.get("reconfigurations", [])})
        if cfg != self.scheduler.config:
            if self.iteration < 0:
                # Nothing ran yet: start from the restored plan (every rank loads the same state).
                self.scheduler = Scheduler(self.tensors, cfg)
                self._order = list(range(len(self.scheduler.messages)))
                if self.coordinator is not None and self.coordinator.wire is not None:
                    self.coordinator.wire = cfg.wire  # the coordinator's configuration in force is the restored one
            else:
                self.scheduler.reconfigure(cfg.partition_bytes, cfg.credit_bytes, wire=cfg.wire, at_iteration=self.iteration + 1,
                                           reason="restored")
