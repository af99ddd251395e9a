"""The tuning window and agreement of the PyTorch engine.

Everything the ranks agree on runs on the main thread, on the control group
(``timeout_s``), behind a fixed-size header (:meth:`_Failures._control`):
buffer broadcast, the window's statistics gather and rank 0's decision, the
issue order, and :meth:`reconfigure`.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from ..core.metrics import StatsCollector, WindowStats
from ..core.scheduler import Scheduler, TensorSpec, plan_order
from ..core.space import Config
from ..core.tuning import Controller, Decision
from ._imports import require_torch

torch = require_torch()
import torch.distributed as dist  # noqa: E402


class _Window:
    """Mixin of :class:`~autobyte.integrations.torch.ScheduledTraining`: statistics, decisions, agreement."""

    model: Any
    tensors: list[TensorSpec]
    scheduler: Scheduler
    controller: Controller | None
    stats: StatsCollector
    rank: int
    world_size: int
    active: bool
    iteration: int
    verbose: bool
    ctl_group: Any
    on_decision: Callable[[int, Decision | None, Config], None] | None
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
