"""Profile a user's ``torch.nn.Module`` into a :class:`ModelProfile` (torch imported lazily)."""

from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np

from ._models import ModelProfile


def _import_torch() -> Any:
    try:
        import torch
    except ModuleNotFoundError as exc:  # pragma: no cover - torch is installed here
        raise ModuleNotFoundError(
            "profile_module needs PyTorch; install it with `pip install 'autobyte[torch]'`."
        ) from exc
    return torch


def profile_module(
    module: Any,
    example_input: Any,
    *,
    loss_fn: Callable[[Any], Any] | None = None,
    n_runs: int = 3,
    batch_size: int | None = None,
    name: str | None = None,
) -> ModelProfile:
    """Measure per-layer gradient bytes and forward/backward times of ``module``.

    A layer is a sub-module that directly owns trainable parameters; layers are
    ordered by their first forward call (layer 0 nearest the input). Forward
    time is taken between the module's forward pre-hook and hook; backward time
    of a layer is the time from the previous gradient becoming ready to its
    own last parameter's gradient being accumulated (as engines measure it).
    Times are medians over ``n_runs`` runs after one warm-up run, on whatever
    device ``module`` and ``example_input`` live on (CUDA is synchronised).

    Args:
        module: the ``torch.nn.Module``.
        example_input: a tensor (or tuple of tensors) for one batch.
        loss_fn: maps the output to a scalar; default ``output.float().sum()``.
        n_runs: measured runs (>= 1).
        batch_size: samples per batch; default: first dim of the first input.
        name: profile name; default: the module's class name.

    Raises:
        TypeError: ``module`` is not a ``torch.nn.Module``.
        ValueError: the module has no trainable parameter, or ``n_runs < 1``.
    """
    torch = _import_torch()
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"module must be a torch.nn.Module, but got module={type(module).__name__}.")
    if isinstance(n_runs, bool) or not isinstance(n_runs, int) or n_runs < 1:
        raise ValueError(f"n_runs must be a positive integer, but got n_runs={n_runs!r}.")
    owners = [(n, m) for n, m in module.named_modules() if any(p.requires_grad for p in m.parameters(recurse=False))]
    if not owners:
        raise ValueError("module must have at least one trainable parameter, but it has none (an empty model).")
    inputs = example_input if isinstance(example_input, (tuple, list)) else (example_input,)
    if batch_size is None:
        first = inputs[0]
        batch_size = int(first.shape[0]) if hasattr(first, "shape") and len(first.shape) > 0 else 1
    cuda = any(getattr(x, "is_cuda", False) for x in inputs)

    def now() -> float:
        if cuda:
            torch.cuda.synchronize()
        return time.perf_counter()

    order: dict[str, int] = {}
    fwd_t: dict[str, float] = {}
    starts: dict[str, float] = {}
    ready: dict[str, float] = {}
    handles = []
    param_owner: dict[int, str] = {}
    for n, m in owners:
        def pre(mod: Any, args: Any, n: str = n) -> None:
            order.setdefault(n, len(order))
            starts[n] = now()

        def post(mod: Any, args: Any, out: Any, n: str = n) -> None:
            fwd_t[n] = fwd_t.get(n, 0.0) + now() - starts[n]

        handles.append(m.register_forward_pre_hook(pre))
        handles.append(m.register_forward_hook(post))
        for p in m.parameters(recurse=False):
            if p.requires_grad:
                param_owner[id(p)] = n

                def on_grad(p: Any, n: str = n) -> None:
                    ready[n] = now()

                handles.append(p.register_post_accumulate_grad_hook(on_grad))

    names = [n for n, _ in owners]
    fwd_runs: list[list[float]] = []
    bwd_runs: list[list[float]] = []
    try:
        for run in range(n_runs + 1):
            fwd_t.clear()
            ready.clear()
            module.zero_grad(set_to_none=True)
            out = module(*inputs)
            loss = loss_fn(out) if loss_fn is not None else (out[0] if isinstance(out, (tuple, list)) else out).float().sum()
            t0 = now()
            loss.backward()
            if run == 0:
                continue
            fwd_runs.append([fwd_t.get(n, 0.0) for n in names])
            prev = t0
            bw = {}
            for n, t in sorted(ready.items(), key=lambda kv: kv[1]):
                bw[n] = max(0.0, t - prev)
                prev = t
            bwd_runs.append([bw.get(n, 0.0) for n in names])
    finally:
        for h in handles:
            h.remove()
        module.zero_grad(set_to_none=True)

    used = [n for n in names if n in order]
    if not used:
        raise ValueError("module's forward did not call any module that owns parameters; cannot profile it.")
    used.sort(key=lambda n: order[n])
    col = {n: i for i, n in enumerate(names)}
    fwd = np.median(np.array(fwd_runs), axis=0)
    bwd = np.median(np.array(bwd_runs), axis=0)
    mods = dict(owners)
    layer_bytes = [
        sum(p.numel() * p.element_size() for p in mods[n].parameters(recurse=False) if p.requires_grad) for n in used
    ]
    return ModelProfile(
        name=name or type(module).__name__,
        layer_bytes=np.array(layer_bytes, dtype=np.int64),
        forward_s=np.array([fwd[col[n]] for n in used]),
        backward_s=np.array([bwd[col[n]] for n in used]),
        batch_size=batch_size,
        device="cuda" if cuda else "cpu",
        layer_names=tuple(used),
    )
