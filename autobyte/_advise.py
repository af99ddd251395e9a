"""``autobyte advise``: the bucket size (and schedule) a DDP user should run, before switching anything.

Every prediction comes from the simulator (:mod:`autobyte.sim`): DDP as DDP
runs (:func:`autobyte.sim.simulate_ddp`) and autobyte's scheduled engine
(:func:`autobyte.sim.simulate`), on one calibrated link and compute model.
What is *measured* is only what goes in: the model's per-layer compute when
a ``torch.nn.Module`` is profiled on this machine, or a running job's
window statistics (:func:`advise_from_windows`); where those inputs come
from is :mod:`autobyte._advise_inputs`. See ``docs/advise.md``.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from ._advise_inputs import calibrated_gbps, cast_rate_here, load_calibration, profile_from_windows, resolve_model
from ._advise_report import (
    DEFAULT_BUCKET_CAPS_MB,
    DEVICES,
    EQUAL_TOLERANCE,
    MAX_WORKERS,
    SENSITIVITY_FACTORS,
    TIE_TOLERANCE,
    _N_ITERS,
    Advice,
    Prediction,
    SensitivityRow,
    _fmt_mb,
)
from .core._checks import check_int, check_positive
from .core.metrics import ARCHITECTURES, WindowStats
from .core.space import Config, SearchSpace
from .sim import GBPS, Cluster, ModelProfile, simulate
from .sim._cluster import DEFAULT_CAST_BPS
from .sim._ddp import DEFAULT_BUCKET_CAP_MB, HOOKS, DDPResult, default_step_s, simulate_ddp

#: what ``autobyte advise`` and its callers read from here
__all__ = ["Advice", "DEFAULT_BUCKET_CAPS_MB", "DEVICES", "MAX_WORKERS", "Prediction", "SENSITIVITY_FACTORS",
           "SensitivityRow", "advise", "advise_from_handle", "advise_from_windows", "profile_from_windows"]


def _engine_space() -> SearchSpace:
    # autobyte's grid without the partitions that are never best on a real link (<64 KiB, >256 MiB): 3x faster
    parts = [64 * 1024 << k for k in range(13)]
    return SearchSpace.grid(parts, [1, 2, 4, 8, 16])


def _ddp_predict(model: ModelProfile, cluster: Cluster, cap: float | None, step_s: float, first: float | None = None,
                 hook: str | None = None) -> DDPResult:
    return simulate_ddp(model, cluster, cap, first_bucket_mb=first, step_s=step_s, n_iters=_N_ITERS, warmup_iters=1, hook=hook)


def _best_ddp(model: ModelProfile, cluster: Cluster, caps: Sequence[float], step_s: float,
              first: float | None = None) -> tuple[list[tuple[float | None, DDPResult]], int]:
    res: list[tuple[float | None, DDPResult]] = [(None, _ddp_predict(model, cluster, None, step_s))]
    res += [(c, _ddp_predict(model, cluster, c, step_s, first)) for c in caps]
    speeds = np.array([r.samples_per_s for _, r in res])
    best = int(np.argmax(speeds))
    if speeds[0] >= speeds[best] * (1 - TIE_TOLERANCE):  # the default is as good: nothing to change
        return res, 0
    # Sizes predicted equally fast (within EQUAL_TOLERANCE): the one with the fewest buckets. Each bucket
    # costs CPU (copies, a collective's set-up) that the simulator charges to the link only, not to the
    # compute it runs beside, so among equals fewer buckets is the safer choice.
    equal = [i for i in range(1, len(res)) if speeds[i] >= speeds[best] * (1 - EQUAL_TOLERANCE)]
    best = min(equal, key=lambda i: (res[i][1].n_buckets, -speeds[i]))
    return res, best


def _best_engine(model: ModelProfile, cluster: Cluster, space: SearchSpace, wire: str = "fp32") -> tuple[Config, float, float]:
    best: tuple[Config, float, float] | None = None
    for c in space:
        if wire != "fp32":
            c = Config(c.partition_bytes, c.credit_bytes, wire)
        r = simulate(model, cluster, c, n_iters=_N_ITERS, warmup_iters=1)
        if best is None or r.samples_per_s > best[1]:
            best = (c, r.samples_per_s, float(r.iter_time_s.mean()))
    assert best is not None
    return best


def _check_workers(n_workers: Any) -> int:
    n = check_int("n_workers", n_workers, minimum=2)
    if n > MAX_WORKERS:
        raise ValueError(f"n_workers must be an integer in [2, {MAX_WORKERS}], but got n_workers={n_workers!r}.")
    return n


def advise(
    model: Any,
    example_input: Any = None,
    *,
    n_workers: int,
    bandwidth_gbps: float,
    latency_s: float | None = None,
    arch: str = "allreduce",
    batch_size: int | None = None,
    compute_scale: float = 1.0,
    per_message_s: float | None = None,
    cluster_kwargs: dict[str, Any] | None = None,
    calibration: str | dict[str, Any] | None = None,
    step_s: float | None = None,
    bucket_caps_mb: Sequence[float] = DEFAULT_BUCKET_CAPS_MB,
    first_bucket_mb: float | None = None,
    device: str | None = None,
    sensitivity: bool | Sequence[float] = True,
    engine: bool = True,
    profile_runs: int = 3,
    loss_fn: Any = None,
    sources: dict[str, str] | None = None,
    wire16: str | None = "bf16",
) -> Advice:
    """The ``bucket_cap_mb`` for DDP and the ``<partition, credit>`` for autobyte's engine, predicted by the simulator.

    Args:
        model: a zoo name (one of :data:`autobyte.sim.MODELS`, V100 compute),
            a :class:`~autobyte.sim.ModelProfile`, or a ``torch.nn.Module``
            (profiled on this machine with ``example_input``).
        example_input: one batch for a ``torch.nn.Module`` (a tensor or a tuple).
        n_workers: data-parallel workers (2 to :data:`MAX_WORKERS`).
        bandwidth_gbps: each worker's link, Gbit/s.
        latency_s: one-way latency per hop (default: the simulator's, 25 us).
        arch: ``"allreduce"`` (DDP and autobyte's engine) or ``"ps"``
            (autobyte's engine on a parameter server only; DDP has none).
        batch_size: samples per worker (default: the zoo's, or the example's first dimension).
        compute_scale: multiplies every compute time (e.g. 0.05 for a device 20x faster than the one profiled).
        per_message_s: per-message (per-bucket) cost; default the simulator's.
        cluster_kwargs: any other :class:`~autobyte.sim.Cluster` argument
            (e.g. a calibration's ``contention``); jitter is off unless given.
        calibration: the link model: ``"testbed"`` (fitted on this
            project's testbed, shipped with the package), a
            ``calib_params.json`` path (``benchmarks/calibrate.py`` on your
            own network) or its ``"params"`` dict. Its
            ``latency_s``, ``per_message_s`` and ``contention`` are used, and
            the link becomes the calibrated goodput of ``bandwidth_gbps``
            (``efficiency`` in series with ``cap_Bps``); its compute and update
            terms (fitted to autobyte's engine) are not. Explicit
            ``latency_s`` / ``per_message_s`` win.
        step_s: optimizer step per iteration (default: measured with the
            module, else the simulator's update model).
        bucket_caps_mb: ``bucket_cap_mb`` values to choose from.
        first_bucket_mb: the first bucket's limit under an explicit
            ``bucket_cap_mb``: ``None`` (default) as in this PyTorch (2.13:
            ``bucket_cap_mb`` itself); 1 for releases that always kept DDP's
            1 MiB first bucket.
        device: for a ``torch.nn.Module``, the named device (one of
            :data:`DEVICES`) whose roofline replaces the measurement here:
            FLOPs counted by ``torch.utils.flop_counter``, activation bytes
            by forward hooks, backward = 2 x forward, as the zoo.
        sensitivity: True for bandwidths x :data:`SENSITIVITY_FACTORS`, a
            list of Gbit/s, or False for none.
        engine: also advise autobyte's engine.
        profile_runs: measured runs when profiling a module.
        loss_fn: maps the module's output to a scalar for profiling (default ``output.sum()``).
        sources: extra provenance lines (e.g. where the bandwidth was measured).
        wire16: the 16-bit precision to predict beside fp32, ``"bf16"``
            (default) or ``"fp16"``: DDP at the advised bucket size with its
            compression hook, and autobyte's engine at that ``wire``; ``None``
            for no 16-bit prediction. The casts between fp32 and 16 bits run at
            the calibration's ``cast_Bps``, else at a rate measured here for a
            module profiled here, else at the simulator's default.

    Returns:
        :class:`Advice`.

    Raises:
        TypeError: ``model`` of an unsupported type.
        ValueError: any other invalid argument (the message names it), or a
            module that cannot be profiled.

    Example:
        >>> a = advise("resnet50", n_workers=8, bandwidth_gbps=10, sensitivity=False, engine=False)
        >>> a.ddp_args()  # doctest: +SKIP
        'bucket_cap_mb=...'
    """
    n_workers = _check_workers(n_workers)
    bw = check_positive("bandwidth_gbps", bandwidth_gbps, "Gbit/s")
    if latency_s is not None and (isinstance(latency_s, bool) or not isinstance(latency_s, (int, float))
                                  or not math.isfinite(latency_s) or latency_s < 0):
        raise ValueError(f"latency_s must be a finite non-negative number of seconds, but got latency_s={latency_s!r}.")
    if arch not in ARCHITECTURES:
        raise ValueError(f"arch must be one of {ARCHITECTURES}, but got arch={arch!r}.")
    if batch_size is not None:
        batch_size = check_int("batch_size", batch_size)
    compute_scale = check_positive("compute_scale", compute_scale)
    if per_message_s is not None and (isinstance(per_message_s, bool) or not isinstance(per_message_s, (int, float))
                                      or not math.isfinite(per_message_s) or per_message_s < 0):
        raise ValueError(f"per_message_s must be a finite non-negative number of seconds, but got per_message_s={per_message_s!r}.")
    if step_s is not None and (isinstance(step_s, bool) or not isinstance(step_s, (int, float)) or not math.isfinite(step_s) or step_s < 0):
        raise ValueError(f"step_s must be a finite non-negative number of seconds, but got step_s={step_s!r}.")
    caps = list(bucket_caps_mb) if not isinstance(bucket_caps_mb, (str, bytes)) else []
    if not caps or any(isinstance(c, bool) or not isinstance(c, (int, float)) or not math.isfinite(c) or c <= 0 for c in caps):
        raise ValueError(f"bucket_caps_mb must be a non-empty list of positive MiB, but got bucket_caps_mb={bucket_caps_mb!r}.")
    if isinstance(sensitivity, bool):
        sens = [bw * f for f in SENSITIVITY_FACTORS] if sensitivity else []
    else:
        sens = list(sensitivity)
        if any(isinstance(s, bool) or not isinstance(s, (int, float)) or not math.isfinite(s) or s <= 0 for s in sens):
            raise ValueError(f"sensitivity must be True, False or a list of positive Gbit/s, but got sensitivity={sensitivity!r}.")
    profile_runs = check_int("profile_runs", profile_runs)
    if first_bucket_mb is not None:
        first_bucket_mb = check_positive("first_bucket_mb", first_bucket_mb, "MiB")
    if wire16 is not None and (not isinstance(wire16, str) or wire16 not in HOOKS):
        raise ValueError(f"wire16 must be 'bf16', 'fp16' or None (no 16-bit prediction), but got wire16={wire16!r}.")
    if cluster_kwargs is not None and not isinstance(cluster_kwargs, dict):
        raise ValueError(f"cluster_kwargs must be a dict of Cluster arguments, but got cluster_kwargs={cluster_kwargs!r}.")

    if device is not None and (not isinstance(device, str) or device.lower() not in DEVICES):
        raise ValueError(f"device must be one of {sorted(DEVICES)} (or None to measure on this machine), but got device={device!r}.")
    dev = DEVICES[device.lower()] if device is not None else None
    calib = load_calibration(calibration)
    prof, compute_src, measured_step = resolve_model(model, example_input, batch_size, compute_scale, profile_runs, loss_fn, dev)
    kw: dict[str, Any] = {"jitter": 0.0}
    link_gbps = bw
    cast_src = f"{DEFAULT_CAST_BPS / 1e9:g} GB/s, simulator default (V100 memory roofline, docs/simulator.md)"
    if calib is not None:
        kw.update({k: float(calib[k]) for k in ("latency_s", "per_message_s", "contention", "cast_Bps") if k in calib})
        link_gbps = calibrated_gbps(calib, bw)
        if "cast_Bps" in calib:
            cast_src = f"{kw['cast_Bps'] / 1e9:.3g} GB/s, calibrated (benchmarks/cast_rate.py)"
    if wire16 is not None and "cast_Bps" not in kw and compute_src.startswith("measured on this machine"):
        kw["cast_Bps"], cast_src = cast_rate_here()
    kw.update(cluster_kwargs or {})
    if "cast_Bps" in (cluster_kwargs or {}):
        cast_src = "given (cluster_kwargs)"
    if latency_s is not None:
        kw["latency_s"] = float(latency_s)
    if per_message_s is not None:
        kw["per_message_s"] = float(per_message_s)
    for bad in ("n_workers", "arch", "bw_up_Bps", "bw_down_Bps"):
        if bad in kw:
            raise ValueError(f"cluster_kwargs must not set {bad} (use the argument of advise), but got cluster_kwargs={cluster_kwargs!r}.")
    try:
        cluster = Cluster(n_workers, arch, bw_up_Bps=link_gbps * GBPS, bw_down_Bps=link_gbps * GBPS, **kw)
    except TypeError as exc:
        raise ValueError(f"cluster_kwargs must hold Cluster arguments only, but got cluster_kwargs={cluster_kwargs!r} ({exc}).") from exc
    if step_s is None:
        step_s = measured_step if measured_step is not None else default_step_s(prof, cluster)
        step_src = "measured (SGD momentum step)" if measured_step is not None else "simulator's update model"
    else:
        step_src = "given"
    # autobyte's engine updates each layer as its messages land: same total step time
    if step_s > 0:
        cluster = cluster.replace(update_Bps=prof.total_bytes / step_s)
    else:
        cluster = cluster.replace(update_Bps=math.inf)

    n = n_workers
    comp_iter = float(prof.compute_s + step_s)
    compute = Prediction("compute only (no communication)", comp_iter, n * prof.batch_size / comp_iter if comp_iter > 0 else math.inf)
    ddp_preds: list[Prediction] = []
    best_p = default_p = first_p = None
    best_cap: float | None = None
    first_mb: float | None = None
    notes = []
    if arch == "allreduce":
        res, bi = _best_ddp(prof, cluster, caps, step_s, first_bucket_mb)
        for cap, r in res:
            label = "default" if cap is None else _fmt_mb(cap)
            ddp_preds.append(Prediction(label, float(r.iter_time_s.mean()), r.samples_per_s))
        default_p = Prediction("DDP default (25 MiB, 1 MiB first)", ddp_preds[0].iter_time_s, ddp_preds[0].samples_per_s)
        best_cap = res[bi][0]
        if best_cap is not None:
            r = res[bi][1]
            best_p = Prediction(f"DDP bucket_cap_mb={_fmt_mb(best_cap)} ({r.n_buckets} buckets)",
                                float(r.iter_time_s.mean()), r.samples_per_s)
        else:
            best_p = default_p
        if first_bucket_mb is not None:
            notes.append(f"first bucket fixed at {first_bucket_mb:g} MiB for every bucket_cap_mb (first_bucket_mb).")
        elif best_cap is not None and best_cap > 1:  # the advised size with a 1 MiB first bucket (bucket_cap_mb_list=[1, X])
            rf = _ddp_predict(prof, cluster, best_cap, step_s, first=1.0)
            first_p = Prediction(f"DDP bucket_cap_mb_list=[1, {_fmt_mb(best_cap)}]", float(rf.iter_time_s.mean()), rf.samples_per_s)
            if first_p.samples_per_s > best_p.samples_per_s * (1 + TIE_TOLERANCE):
                first_mb = 1.0
        elif best_cap is None:  # the default with its first bucket as large as the others (what bucket_cap_mb=25 does)
            rf = _ddp_predict(prof, cluster, DEFAULT_BUCKET_CAP_MB, step_s)
            first_p = Prediction("DDP bucket_cap_mb=25 (25 MiB first)", float(rf.iter_time_s.mean()), rf.samples_per_s)
    else:
        notes.append("DDP all-reduces its buckets; with arch='ps' only autobyte's engine (MXNet KVStore) is advised.")
    eng_cfg = None
    eng_p = None
    space = _engine_space()
    if engine:
        eng_cfg, sps, it = _best_engine(prof, cluster, space)
        eng_p = Prediction(f"autobyte {eng_cfg}", it, sps)
    hook_p = eng16_p = None
    eng16_cfg = None
    if wire16 is not None:
        if arch == "allreduce":
            first16 = first_mb if first_mb is not None else first_bucket_mb if best_cap is not None else None
            rh = _ddp_predict(prof, cluster, best_cap, step_s, first16, hook=wire16)
            where = ("default buckets" if best_cap is None else f"bucket_cap_mb={_fmt_mb(best_cap)}" if first_mb is None
                     else f"[{_fmt_mb(first_mb)}, {_fmt_mb(best_cap)}]")
            hook_p = Prediction(f"DDP + {HOOKS[wire16]} ({where})", float(rh.iter_time_s.mean()), rh.samples_per_s)
        if engine:
            eng16_cfg, sps16, it16 = _best_engine(prof, cluster, space, wire16)
            eng16_p = Prediction(f"autobyte {eng16_cfg}", it16, sps16)
    rows = []
    for g in sens:
        lg = calibrated_gbps(calib, g) if calib is not None else g
        cg = cluster.replace(bw_up_Bps=lg * GBPS, bw_down_Bps=lg * GBPS)
        if arch == "allreduce":
            rr, bj = _best_ddp(prof, cg, caps, step_s, first_bucket_mb)
            cap_j, dsp, dflt = rr[bj][0], rr[bj][1].samples_per_s, rr[0][1].samples_per_s
        else:
            cap_j, dsp, dflt = None, math.nan, math.nan
        if engine:
            ec, es, _ = _best_engine(prof, cg, space)
        else:
            ec, es = None, math.nan
        rows.append(SensitivityRow(float(g), cap_j, dsp, dflt, ec, es, compute.samples_per_s))
    srcs = {
        "compute": compute_src,
        "optimizer step": f"{step_s * 1e3:.2f} ms, {step_src}",
        "link": f"{bw:g} Gbit/s given" + (f" ({link_gbps:.4g} Gbit/s of calibrated goodput)" if calib is not None else "")
                + f"; latency {cluster.latency_s * 1e6:.4g} us/hop and {cluster.per_message_s * 1e6:.4g} us per message/bucket "
                + ("(given)" if latency_s is not None or per_message_s is not None
                   else "(calibrated)" if calib is not None else "(simulator defaults)"),
        "every iteration time and samples/s above": "simulator (autobyte.sim: simulate_ddp for DDP, simulate for autobyte's engine)",
    }
    if wire16 is not None:
        srcs["casts (16 bits)"] = (f"{cast_src}; fp32 bytes per second of one pass, two passes per message/bucket "
                                   "(docs/simulator.md)")
    srcs.update(sources or {})
    notes.append("DDP simulated as it runs: buckets in reverse registration order, all-reduced one after the other as "
                 "each fills, optimizer step after the last one, no overlap with the next forward.")
    if first_bucket_mb is None:
        notes.append("in this PyTorch an explicit bucket_cap_mb also sizes the first bucket (DDP keeps 1 MiB only for the "
                     "default); bucket_cap_mb_list=[1, X] keeps a 1 MiB first bucket.")
    return Advice(model=prof, cluster=cluster, bucket_cap_mb=best_cap, first_bucket_mb=first_mb, ddp=ddp_preds,
                  ddp_best=best_p, ddp_default=default_p, first_bucket=first_p, engine_config=eng_cfg, engine=eng_p,
                  compute=compute, sensitivity=rows, sources=srcs, notes=notes, wire16=wire16, ddp_hook=hook_p,
                  engine16_config=eng16_cfg, engine16=eng16_p)


def advise_from_windows(windows: Sequence[WindowStats], tensor_bytes: Sequence[int], *, n_workers: int,
                        bandwidth_gbps: float | None = None, **kwargs: Any) -> Advice:
    """:func:`advise` for a running job, from the window statistics its engine collected.

    Args:
        windows: :class:`~autobyte.core.metrics.WindowStats` of one window
            (one per rank, or this rank's only).
        tensor_bytes: gradient bytes per tensor, in the windows' tensor order.
        n_workers: data-parallel workers.
        bandwidth_gbps: the link; default: measured in the window (achieved
            payload rate x 2(n-1)/n, a lower bound of the link when messages were small).
        **kwargs: passed to :func:`advise`.

    Raises:
        ValueError: see :func:`profile_from_windows` and :func:`advise`; no
            bandwidth given and none measured.
    """
    prof = profile_from_windows(windows, tensor_bytes)
    n_workers = _check_workers(n_workers)
    extra = dict(kwargs.pop("sources", None) or {})
    extra["compute"] = (f"measured in the running job (window of {windows[0].n_iters} iterations: per-tensor backward, "
                        f"forward, batch {prof.batch_size})")
    if bandwidth_gbps is None:
        bws = [w.bandwidth_Bps for w in windows if w.bandwidth_Bps > 0]
        if not bws:
            raise ValueError("bandwidth_gbps must be given when the windows measured no bandwidth (no message sent), "
                             "but got bandwidth_gbps=None.")
        bandwidth_gbps = float(min(bws)) * 2.0 * (n_workers - 1) / n_workers / GBPS
        extra["bandwidth"] = f"{bandwidth_gbps:.3g} Gbit/s measured in the window (achieved, payload x 2(n-1)/n over busy time)"
    return advise(prof, n_workers=n_workers, bandwidth_gbps=bandwidth_gbps, sources=extra, **kwargs)


def advise_from_handle(handle: Any, **kwargs: Any) -> Advice:
    """:func:`advise_from_windows` on a running engine's handle (``AutoByteCallback.handle``): this rank's window so far."""
    if handle is None:
        raise RuntimeError("no running engine: call advise_ddp() while fitting, after the first window.")
    w = handle.window_stats(reset=False)
    if w.n_iters < 1:
        raise RuntimeError("no iteration measured yet: call advise_ddp() after the first window.")
    tb = [t.nbytes for t in handle.scheduler.tensors]
    kwargs.setdefault("n_workers", handle.world_size)
    return advise_from_windows([w], tb, **kwargs)
