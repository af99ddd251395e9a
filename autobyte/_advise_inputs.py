"""What goes into ``autobyte advise``: the model's compute profile and the link's calibration.

The compute comes from the zoo (a device's roofline), a given
:class:`~autobyte.sim.ModelProfile`, a ``torch.nn.Module`` profiled on this
machine (or by a named device's roofline of its FLOPs), or a running job's
window statistics (:func:`profile_from_windows`). The link model comes from a
calibration: ``"testbed"`` (the one fitted on this project's testbed, shipped
with the package) or a ``calib_params.json`` that ``benchmarks/calibrate.py``
wrote on your own network.
"""

from __future__ import annotations

import json
import math
import time
from importlib import resources
from typing import Any, Sequence

import numpy as np

from .core.metrics import WindowStats
from .sim import GBPS, MODELS, Device, ModelProfile, get_model

#: Calibrations shipped with the package (``autobyte/sim/data/``), by name.
CALIBRATIONS: dict[str, str] = {"testbed": "calibration.json"}


def resolve_model(model: Any, example_input: Any, batch_size: int | None, compute_scale: float,
                   profile_runs: int, loss_fn: Any, device: Device | None = None) -> tuple[ModelProfile, str, float | None]:
    """(profile, where its compute comes from, measured optimizer step or None)."""
    if isinstance(model, str):
        if example_input is not None:
            raise ValueError(f"example_input is only for a torch.nn.Module, but got example_input with model={model!r}.")
        prof = get_model(model, batch_size=batch_size)
        src = f"zoo profile ({prof.device} roofline, docs/simulator.md)"
        step = None
    elif isinstance(model, ModelProfile):
        prof = model if batch_size is None else model.with_batch_size(batch_size)
        src = f"given ModelProfile ({prof.device})"
        step = None
    else:
        torch = _torch_or_none()
        if torch is None or not isinstance(model, torch.nn.Module):
            raise TypeError(f"model must be a zoo name (one of {MODELS}), a ModelProfile or a torch.nn.Module, "
                            f"but got model={type(model).__name__}.")
        if example_input is None:
            raise ValueError("example_input must be one batch of input for the torch.nn.Module (a tensor or a tuple), but got example_input=None.")
        if device is not None:
            prof, step = _device_profile(torch, model, example_input, device), None
            src = f"{device.name} roofline of the module's FLOPs (torch.utils.flop_counter) and activation bytes"
        else:
            prof, step = _profile_torch(torch, model, example_input, profile_runs, loss_fn)
            src = f"measured on this machine ({prof.device}, profile_module, {profile_runs} run{'s' if profile_runs != 1 else ''})"
        if batch_size is not None:
            prof = prof.with_batch_size(batch_size)
    if compute_scale != 1.0:
        prof = ModelProfile(prof.name, prof.layer_bytes, prof.forward_s * compute_scale, prof.backward_s * compute_scale,
                            prof.batch_size, device=f"{prof.device} x{compute_scale:g}", layer_names=prof.layer_names)
        step = step * compute_scale if step is not None else None
        src += f", compute x{compute_scale:g}"
    return prof, src, step


def _torch_or_none() -> Any:
    try:
        import torch
    except ModuleNotFoundError:  # pragma: no cover - torch is installed here
        return None
    return torch


def _profile_torch(torch: Any, module: Any, example_input: Any, n_runs: int, loss_fn: Any) -> tuple[ModelProfile, float]:
    from .sim import profile_module

    try:
        prof = profile_module(module, example_input, loss_fn=loss_fn, n_runs=n_runs)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"cannot profile the model: {exc}") from exc
    except Exception as exc:  # noqa: BLE001 - the user's forward/backward failed: say so, with its error
        raise ValueError(f"cannot profile the model: running it on example_input failed with "
                         f"{type(exc).__name__}: {exc}") from exc
    # profile_module times the modules that own parameters; the rest of a training step (activations,
    # pooling, the loss) shows in a plain forward + backward without hooks: scale the profile to it
    import time

    plain = []
    for _ in range(n_runs):
        module.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        out = module(*example_input) if isinstance(example_input, (tuple, list)) else module(example_input)
        loss = loss_fn(out) if loss_fn is not None else (out[0] if isinstance(out, (tuple, list)) else out).float().sum()
        loss.backward()
        plain.append(time.perf_counter() - t0)
    module.zero_grad(set_to_none=True)
    prof = fit_compute_total(prof, float(np.median(plain)))
    # the optimizer step DDP runs after the all-reduce: SGD with momentum over every parameter, lr=0 so
    # that the user's parameters do not change
    params = [p for p in module.parameters() if p.requires_grad]
    opt = torch.optim.SGD(params, lr=0.0, momentum=0.9)
    times = []
    try:
        for p in params:
            p.grad = torch.zeros_like(p)
        for _ in range(4):
            t0 = time.perf_counter()
            opt.step()
            times.append(time.perf_counter() - t0)
    finally:
        for p in params:
            p.grad = None
    times = times[1:]  # the first step allocates the momentum buffers
    return prof, float(np.median(times))


def _device_profile(torch: Any, module: Any, example_input: Any, device: Device) -> ModelProfile:
    """Per-layer compute of ``module`` on ``device`` by the zoo's roofline: forward FLOPs counted by
    ``torch.utils.flop_counter``, activation bytes by forward hooks (layers without parameters add none)."""
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"module must be a torch.nn.Module, but got module={type(module).__name__}.")
    # Count on the meta device (shapes only, no arithmetic) when the module allows it.
    import copy

    try:
        meta = copy.deepcopy(module).to("meta")
        meta_in = tuple(x.to("meta") if isinstance(x, torch.Tensor) else x for x in
                        (example_input if isinstance(example_input, (tuple, list)) else (example_input,)))
        return _device_profile_on(torch, meta, meta_in, device, name=type(module).__name__)
    except ValueError:
        raise
    except Exception:  # noqa: BLE001 - a module the meta device cannot run: count on the real one
        return _device_profile_on(torch, module, example_input, device, name=type(module).__name__)


def _device_profile_on(torch: Any, module: Any, example_input: Any, device: Device, *, name: str) -> ModelProfile:
    from torch.utils.flop_counter import FlopCounterMode

    owners = [(n, m) for n, m in module.named_modules() if any(p.requires_grad for p in m.parameters(recurse=False))]
    if not owners:
        raise ValueError("cannot profile the model: module must have at least one trainable parameter, but it has none.")
    inputs = example_input if isinstance(example_input, (tuple, list)) else (example_input,)
    order: dict[str, int] = {}
    act: dict[str, float] = {}

    def nbytes(x: Any) -> float:
        if isinstance(x, torch.Tensor):
            return float(x.numel() * x.element_size())
        if isinstance(x, (tuple, list)):
            return sum(nbytes(y) for y in x)
        return 0.0

    handles = []
    for n, m in owners:
        def hook(mod: Any, args: Any, out: Any, n: str = n) -> None:
            order.setdefault(n, len(order))
            act[n] = act.get(n, 0.0) + nbytes(args) + nbytes(out)

        handles.append(m.register_forward_hook(hook))
    try:
        with torch.no_grad(), FlopCounterMode(display=False) as fc:
            module(*inputs)
    except Exception as exc:  # noqa: BLE001 - the user's forward failed: say so, with its error
        if str(getattr(inputs[0], "device", "")) == "meta":
            raise RuntimeError("meta device") from exc  # retried on the real device
        raise ValueError(f"cannot profile the model: running it on example_input failed with "
                         f"{type(exc).__name__}: {exc}") from exc
    finally:
        for h in handles:
            h.remove()
    counts = {k: float(sum(v.values())) for k, v in fc.get_flop_counts().items()}
    root = type(module).__name__
    used = sorted((n for n, _ in owners if n in order), key=lambda n: order[n])
    if not used:
        raise ValueError("cannot profile the model: its forward did not call any module that owns parameters.")
    mods = dict(owners)
    lb = np.array([sum(p.numel() * p.element_size() for p in mods[n].parameters(recurse=False) if p.requires_grad)
                   for n in used], dtype=np.int64)
    flops = np.array([counts.get(f"{root}.{n}" if n else root, 0.0) for n in used])
    mem = np.array([act[n] for n in used]) + lb
    fwd = np.maximum(flops / (device.peak_flops * device.compute_efficiency),
                     mem / (device.mem_Bps * device.memory_efficiency)) + device.launch_s
    first = inputs[0]
    batch = int(first.shape[0]) if hasattr(first, "shape") and len(first.shape) > 0 else 1
    return ModelProfile(name, lb, fwd, device.backward_factor * fwd, batch, device=device.name, layer_names=tuple(used))


def fit_compute_total(prof: ModelProfile, total_s: float) -> ModelProfile:
    """``prof`` with forward + backward summing to ``total_s``: time missing from the profile (layers
    without parameters, the loss) goes to the forward times in proportion; a profile longer than
    ``total_s`` (hook overhead) is scaled down."""
    fwd, bwd = prof.forward_s.copy(), prof.backward_s.copy()
    have = float(fwd.sum() + bwd.sum())
    if total_s <= 0 or have <= 0:
        return prof
    missing = total_s - have
    if missing > 0:
        fwd = fwd * (1.0 + missing / fwd.sum()) if fwd.sum() > 0 else fwd + missing / fwd.size
    else:
        fwd, bwd = fwd * (total_s / have), bwd * (total_s / have)
    return ModelProfile(prof.name, prof.layer_bytes, fwd, bwd, prof.batch_size, device=prof.device, layer_names=prof.layer_names)


def profile_from_windows(windows: Sequence[WindowStats], tensor_bytes: Sequence[int], *, name: str = "running job") -> ModelProfile:
    """A :class:`ModelProfile` from a running job's window statistics (one per rank, or one).

    Per-tensor backward times are the mean over ranks of ``layer_backward_s``;
    the forward time (``forward_s``, mean over ranks) is spread over the
    tensors in proportion to their backward times; the batch size is
    ``samples_per_s x iter_time_s``.

    Raises:
        ValueError: no window, windows without per-tensor times, or sizes that disagree.
    """
    ws = list(windows)
    if not ws or not all(isinstance(w, WindowStats) for w in ws):
        raise ValueError(f"windows must be a non-empty list of WindowStats, but got windows={windows!r}.")
    tb = np.asarray(list(tensor_bytes), dtype=np.int64)
    for w in ws:
        if len(w.layer_backward_s) != tb.size:
            raise ValueError(f"windows must hold one backward time per tensor ({tb.size} tensors), "
                             f"but got a window with {len(w.layer_backward_s)} (was the window empty?).")
        if w.n_iters < 1 or w.iter_time_s <= 0:
            raise ValueError(f"windows must cover at least one iteration, but got n_iters={w.n_iters}, iter_time_s={w.iter_time_s}.")
    bwd = np.mean([np.asarray(w.layer_backward_s, dtype=np.float64) for w in ws], axis=0)
    fwd_total = float(np.mean([w.forward_s for w in ws]))
    fwd = bwd / bwd.sum() * fwd_total if bwd.sum() > 0 else np.full(tb.size, fwd_total / tb.size)
    batch = max(1, int(round(float(np.mean([w.samples_per_s * w.iter_time_s for w in ws])))))
    keep = tb > 0
    return ModelProfile(name, tb[keep], fwd[keep], bwd[keep], batch, device="measured")


#: fp32 elements of the message :func:`cast_rate_here` casts (16 MiB, as ``benchmarks/cast_rate.py``).
CAST_NUMEL = 4 << 20


def measure_cast(torch: Any, numel: int = CAST_NUMEL, reps: int = 30, dtype: Any = None, world_size: int = 2) -> dict[str, float]:
    """Time the two passes of a 16-bit message as the torch engine and DDP's compression hooks run them.

    To 16 bits: copy ``numel`` fp32 gradients into a 16-bit buffer and divide it
    by ``world_size`` there; back: copy the buffer into the fp32 gradients.
    Medians over ``reps`` after 3 warm-up runs, with torch's current threads.

    Returns:
        ``to16_s``, ``back_s`` (seconds), ``to16_Bps``, ``back_Bps`` and
        ``cast_Bps = 2 * fp32_bytes / (to16_s + back_s)``: fp32 bytes per second of
        one pass, the simulator's :attr:`~autobyte.sim.Cluster.cast_Bps`.
    """
    g = torch.randn(numel)
    buf = torch.empty(numel, dtype=torch.bfloat16 if dtype is None else dtype)

    def to16() -> None:
        buf.copy_(g)
        buf.div_(world_size)

    def back() -> None:
        g.copy_(buf)

    def median_s(fn: Any) -> float:
        for _ in range(3):
            fn()
        ts = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
        return float(np.median(ts))

    t_to, t_back = median_s(to16), median_s(back)
    nbytes = 4.0 * numel
    return {"to16_s": t_to, "back_s": t_back, "to16_Bps": nbytes / t_to, "back_Bps": nbytes / t_back,
            "cast_Bps": 2 * nbytes / (t_to + t_back)}


def cast_rate_here() -> tuple[float, str]:
    """(``cast_Bps`` of bf16 measured on this machine, where it comes from), for a module profiled here."""
    import torch

    r = measure_cast(torch, reps=5)
    return r["cast_Bps"], (f"{r['cast_Bps'] / 1e9:.3g} GB/s, measured on this machine (torch, "
                           f"{torch.get_num_threads()} threads, bf16)")


def load_calibration(calibration: str | dict[str, Any] | None) -> dict[str, Any] | None:
    """The link model's parameters: from a shipped calibration's name, a ``calib_params.json`` path, or its ``"params"`` dict.

    A file's ``"cast"`` block (``{"cast_Bps": ...}``, measured by
    ``benchmarks/cast_rate.py``) joins its parameters as ``cast_Bps`` unless
    they hold one; files without it (all that ``benchmarks/calibrate.py``
    writes) load as before.

    Raises:
        ValueError: an unreadable file, or a value that is not a finite non-negative number.
    """
    if calibration is None:
        return None
    if isinstance(calibration, str):
        try:
            if calibration in CALIBRATIONS:
                data = json.loads((resources.files("autobyte.sim") / "data" / CALIBRATIONS[calibration]).read_text())
            else:
                with open(calibration) as f:
                    data = json.load(f)
        except (OSError, ValueError) as exc:
            raise ValueError(f"calibration must be {' or '.join(map(repr, CALIBRATIONS))} or a readable calib_params.json, "
                             f"but got calibration={calibration!r} ({exc}).") from None
        calibration = data.get("params", data) if isinstance(data, dict) else data
        cast = data.get("cast") if isinstance(data, dict) else None
        if isinstance(calibration, dict) and isinstance(cast, dict) and "cast_Bps" in cast and "cast_Bps" not in calibration:
            calibration = {**calibration, "cast_Bps": cast["cast_Bps"]}
    if not isinstance(calibration, dict) or not calibration:
        raise ValueError(f"calibration must be a calib_params.json path or its 'params' dict, but got calibration={calibration!r}.")
    for k, v in calibration.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise ValueError(f"calibration['{k}'] must be a finite non-negative number, but got {v!r}.")
    return calibration


def calibrated_gbps(calib: dict[str, Any], gbps: float) -> float:
    """The goodput of a shaped ``gbps`` link under a calibration: ``efficiency`` x rate in series with ``cap_Bps``."""
    eff = float(calib.get("efficiency", 1.0)) or 1.0
    cap = float(calib.get("cap_Bps", math.inf)) or math.inf
    return 1.0 / (1.0 / (eff * gbps * GBPS) + 1.0 / cap) / GBPS
