"""A torch model with emulated compute and real gradients (see :mod:`autobyte.bench.emulation`).

:class:`EmulatedModel` holds one real FP32 parameter per profile layer (flat,
``Emulation.layer_elements[i]`` elements), each in its own submodule, so the
scheduled engine's per-module hooks (wait for a layer's update before its
forward) and DDP's per-parameter hooks see the same structure as with a real
network. What it does instead of arithmetic:

* **forward**: layers in order, input to output; layer ``i`` takes
  ``forward_s[i]`` seconds (times ``time_factor``), slept;
* **backward**: one custom autograd Function per layer, run by autograd from
  the output layer to the input one; layer ``i`` produces its gradient (a copy
  of a fixed pattern: real tensor, real size, deterministic, ``rank + 1``
  times a per-layer pattern so that the average over ranks is checkable:
  :func:`expected_average`) and then sleeps until ``backward_s[i]`` seconds
  (times ``time_factor``) have passed since its backward began. The
  parameter's gradient hooks (the engine's, DDP's) then fire, layer by
  layer, at the profile's times, exactly as with a real model.

Sleep, not a busy loop: on this 2-core host a busy loop would take a core
from the communication threads (gloo's reductions, the engine's issuer), the
very thing being measured; ``time.sleep`` overshoots by tens of microseconds
(measured in ``docs/emulation.md``), against per-layer times of 0.3-125 ms at
``compute_scale=10``.

The model's output is a scalar; train with ``model(x).backward()`` (the
input is ignored; any tensor or ``None``).
"""

from __future__ import annotations

import time
from typing import Any

from ..integrations._imports import require_torch
from .emulation import Emulation

torch = require_torch()
_Function: Any = torch.autograd.Function
_Module: Any = torch.nn.Module

#: Distinct values of the gradient pattern (``(k % PATTERN) + 1`` over element ``k``).
PATTERN = 251


def sleep_overshoot_s(n: int = 21, nap_s: float = 1e-3) -> float:
    """Median seconds ``time.sleep(nap_s)`` oversleeps here and now (the wake-up latency of the host)."""
    over = []
    for _ in range(n):
        t0 = time.perf_counter()
        time.sleep(nap_s)
        over.append(time.perf_counter() - t0 - nap_s)
    return max(0.0, sorted(over)[n // 2])


def _sleep_until(deadline: float, overshoot_s: float) -> None:
    """Sleep until ``deadline`` (perf_counter seconds), waking ``overshoot_s`` early to make up for the wake-up latency."""
    left = deadline - time.perf_counter() - overshoot_s
    if left > 0:
        time.sleep(left)


def grad_pattern(n: int, layer: int, rank: int) -> Any:
    """The gradient layer ``layer`` of rank ``rank`` produces: ``(rank + 1) * ((k % 251) + 1) * 1e-3 * (layer + 1)``."""
    k = torch.arange(n, dtype=torch.float32).remainder_(PATTERN).add_(1.0)
    return k.mul_(1e-3 * (layer + 1) * (rank + 1))


def expected_average(n: int, layer: int, world_size: int) -> Any:
    """The average over ``world_size`` ranks of :func:`grad_pattern`: the pattern of rank 0 times ``(world_size + 1) / 2``."""
    return grad_pattern(n, layer, 0).mul_((world_size + 1) / 2.0)


class _Backward(_Function):
    """Identity on the activation; its backward makes layer ``i``'s gradient, then sleeps out the layer's backward time."""

    @staticmethod
    def forward(ctx: Any, h: Any, weight: Any, layer: Any) -> Any:
        ctx.layer = layer
        return h.clone()

    @staticmethod
    def backward(ctx: Any, grad_h: Any) -> Any:
        layer = ctx.layer
        t0 = time.perf_counter()
        g = layer.pattern.clone()  # made within the layer's time; autograd hands it to .grad without a copy when .grad is None
        _sleep_until(t0 + layer.backward_s * layer.owner.time_factor, layer.owner.overshoot_s)
        layer.owner.backward_order.append(layer.index)
        return grad_h, g, None


class EmulatedLayer(_Module):
    """One profile layer: a flat parameter ``weight`` of the layer's size and its emulated times."""

    def __init__(self, owner: "EmulatedModel", index: int, n: int, forward_s: float, backward_s: float, rank: int) -> None:
        super().__init__()
        self.index, self.forward_s, self.backward_s = index, float(forward_s), float(backward_s)
        self.weight = torch.nn.Parameter(torch.zeros(n, dtype=torch.float32))
        self.pattern = grad_pattern(n, index, rank)
        object.__setattr__(self, "owner", owner)  # not a submodule: no cycle in the module tree

    def forward(self, h: Any) -> Any:
        t0 = time.perf_counter()
        out = _Backward.apply(h, self.weight, self)
        _sleep_until(t0 + self.forward_s * self.owner.time_factor, self.owner.overshoot_s)
        return out


class EmulatedModel(_Module):
    """An :class:`~autobyte.bench.emulation.Emulation` as a ``torch.nn.Module`` (see the module's docs).

    Args:
        emulation: what to emulate (model, ``compute_scale``, batch).
        rank: this worker's rank (the gradient pattern is ``rank + 1`` times rank 0's).

    Attributes:
        time_factor: multiplies every slept time (1.0; a straggler sets it above 1).
        backward_order: layer indices in the order their gradients were made (appended to; clear it yourself).
        overshoot_s: the host's median oversleep, measured at construction (:func:`sleep_overshoot_s`);
            every sleep wakes this much early.

    Raises:
        ValueError: ``emulation`` not an :class:`Emulation`, ``rank`` not a non-negative integer.
    """

    def __init__(self, emulation: Emulation, rank: int = 0) -> None:
        super().__init__()
        if not isinstance(emulation, Emulation):
            raise ValueError(f"emulation must be an autobyte.bench.emulation.Emulation, but got emulation={emulation!r}.")
        if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
            raise ValueError(f"rank must be a non-negative integer, but got rank={rank!r}.")
        self.emulation = emulation
        self.time_factor = 1.0
        self.backward_order: list[int] = []
        self.overshoot_s = sleep_overshoot_s()
        fwd, bwd = emulation.forward_s, emulation.backward_s
        self.layers = torch.nn.ModuleList(
            EmulatedLayer(self, i, n, fwd[i], bwd[i], rank) for i, n in enumerate(emulation.layer_elements))

    def example_input(self) -> Any:
        """An input of the profile's batch (``batch x 0`` elements: no memory) for ``model(x)``.

        The model ignores it; an engine that counts samples from the forward's
        first tensor (:func:`autobyte.integrations.torch.schedule`'s hooks) then
        counts the emulated batch, so speeds are in the emulated samples/s
        (called with no input, every iteration counts as one sample).
        """
        return torch.empty((self.emulation.profile().batch_size, 0), dtype=torch.float32)

    def forward(self, x: Any = None) -> Any:
        h = torch.zeros((), dtype=torch.float32)
        for layer in self.layers:
            h = layer(h)
        return h


def make_emulated(model: str, compute_scale: float, *, batch_size: int | None = None, rank: int = 0) -> EmulatedModel:
    """``EmulatedModel(Emulation(model, compute_scale, batch_size), rank)``."""
    return EmulatedModel(Emulation(model, compute_scale, batch_size), rank)
