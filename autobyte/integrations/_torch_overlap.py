"""Optimizer takeover of the PyTorch engine, keeping the user's optimizer class.

As Horovod's ``DistributedOptimizer`` does, the optimizer becomes an instance
of a dynamic subclass of its own class (``isinstance`` checks, ``param_groups``,
``state`` and learning-rate schedulers keep working); the subclass routes
``step``/``zero_grad``/``state_dict`` through the engine. The instance is
kept (Lightning and schedulers hold references to it) and gets its class
back on :func:`release`.
"""

from __future__ import annotations

from typing import Any

from ._imports import require_torch

torch = require_torch()

#: Optimizers whose update needs every gradient at once: refused in overlap mode.
GLOBAL_OPTIMIZERS = ("LBFGS",)

_SUBCLASSES: dict[tuple[type, bool], type] = {}


def _overlap_step(self: Any, closure: Any = None) -> Any:
    # Parameters are updated one by one as their averaged gradients arrive;
    # step() only runs the closure (forward + backward) when one is given, as
    # Lightning's automatic optimization does, and reports a failure.
    loss = None
    if closure is not None:
        with torch.enable_grad():
            loss = closure()
    self._autobyte_handle.stepped()
    self._opt_called = True  # keeps lr_scheduler's order check quiet
    return loss


def _overlap_zero_grad(self: Any, set_to_none: bool = True) -> None:
    # Gradients are consumed and cleared by the engine after each update.
    return None


def _state_dict(self: Any) -> dict[str, Any]:
    self._autobyte_handle.synchronize()  # every pending update lands first
    return self._autobyte_base.state_dict(self)  # type: ignore[no-any-return]


def base_class(optimizer: Any) -> Any:
    """The user's optimizer class (the same before and after :func:`take_over`)."""
    return getattr(type(optimizer), "_autobyte_base", type(optimizer))


def take_over(optimizer: Any, handle: Any, overlap: bool) -> None:
    """Give ``optimizer`` a subclass of its class whose methods go through ``handle``."""
    base = base_class(optimizer)
    cls = _SUBCLASSES.get((base, overlap))
    if cls is None:
        ns: dict[str, Any] = {"state_dict": _state_dict, "_autobyte_base": base, "__module__": base.__module__,
                              "__doc__": base.__doc__}
        if overlap:
            ns.update(step=_overlap_step, zero_grad=_overlap_zero_grad)
        cls = _SUBCLASSES[(base, overlap)] = type(base.__name__, (base,), ns)
    # An instance-level step (an lr scheduler's step counter wraps it) would bypass the subclass.
    overridden = ("step", "zero_grad", "state_dict") if overlap else ("state_dict",)
    optimizer._autobyte_saved = {k: optimizer.__dict__.pop(k) for k in overridden if k in optimizer.__dict__}
    optimizer._autobyte_handle = handle
    optimizer.__class__ = cls


def release(optimizer: Any) -> None:
    """Undo :func:`take_over`."""
    if "_autobyte_handle" not in optimizer.__dict__:
        return
    optimizer.__class__ = base_class(optimizer)
    optimizer.__dict__.update(optimizer.__dict__.pop("_autobyte_saved", {}))
    del optimizer.__dict__["_autobyte_handle"]
