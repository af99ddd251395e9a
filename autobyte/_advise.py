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
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from .core._checks import check_int, check_positive
from .core.metrics import ARCHITECTURES, WindowStats
from .core.space import Config, MiB, SearchSpace
from ._advise_inputs import calibrated_gbps, cast_rate_here, load_calibration, profile_from_windows, resolve_model
from .sim import GBPS, V100, Cluster, Device, ModelProfile, simulate
from .sim._cluster import DEFAULT_CAST_BPS
from .sim._ddp import DEFAULT_BUCKET_CAP_MB, HOOKS, DDPResult, default_step_s, simulate_ddp

#: ``bucket_cap_mb`` values the advice chooses from (DDP's default is compared too).
DEFAULT_BUCKET_CAPS_MB: tuple[float, ...] = (1, 2, 4, 8, 16, 25, 32, 64, 128, 256)
#: Bandwidth multiples of the sensitivity table.
SENSITIVITY_FACTORS: tuple[float, ...] = (0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 10.0)
#: A candidate this close to the best (relative samples/s) counts as equally good.
TIE_TOLERANCE = 0.01
#: Sizes predicted this close to the best are equal; the advice takes the one with the fewest buckets.
EQUAL_TOLERANCE = 0.002
_N_ITERS = 3
#: Most workers the advice simulates (as ``autobyte simulate``): the simulator's memory and time grow with n.
MAX_WORKERS = 4096
#: Named devices whose roofline compute model (docs/simulator.md) can stand in for a measurement.
DEVICES: dict[str, Device] = {"v100": V100}
#: Below this predicted gain of 16 bits over fp32 (relative samples/s) the report says they buy little.
LITTLE_GAIN = 0.05
#: When 16 bits are safe, per precision (docs/torch.md, "16-bit gradients on the wire").
WIRE_SAFETY: dict[str, str] = {
    "bf16": "bf16 keeps fp32's exponent range (no overflow beyond fp32's) with 8 bits of mantissa: each averaged "
            "gradient element is rounded to about 0.4%; the choice for training without a loss scaler.",
    "fp16": "fp16 has 11 bits of mantissa but overflows beyond 65504: an averaged gradient element (divided by the world "
            "size) above it becomes inf and reaches the update (no step is skipped), and elements below about 6e-8 x the "
            "world size become 0; safe only where gradients stay well inside that range (or a loss scaler checks them).",
}


@dataclass(frozen=True)
class Prediction:
    """One simulated configuration: ``label``, iteration time, cluster samples/s."""

    label: str
    iter_time_s: float
    samples_per_s: float

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "iter_time_s": self.iter_time_s, "samples_per_s": self.samples_per_s}


@dataclass(frozen=True)
class SensitivityRow:
    """The advice at one bandwidth of the sensitivity table."""

    bandwidth_gbps: float
    bucket_cap_mb: float | None
    ddp_samples_per_s: float
    default_samples_per_s: float
    engine_config: Config | None
    engine_samples_per_s: float
    compute_samples_per_s: float

    def to_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["engine_config"] = self.engine_config.to_dict() if self.engine_config is not None else None
        return d


@dataclass
class Advice:
    """What :func:`advise` returns; ``str(advice)`` is the one-screen answer, ``to_dict()`` the same as plain data.

    Attributes:
        model: the :class:`~autobyte.sim.ModelProfile` simulated.
        cluster: the :class:`~autobyte.sim.Cluster` simulated.
        bucket_cap_mb: the advised ``bucket_cap_mb`` (``None``: keep DDP's default).
        first_bucket_mb: the first bucket to pair with it, or ``None`` when a
            small first bucket does not help (more than :data:`TIE_TOLERANCE`).
        ddp: predictions for every ``bucket_cap_mb`` considered (label ``"default"`` for DDP's default).
        ddp_best, ddp_default, first_bucket: the advised one, the default, the
            advised size with a 1 MiB first bucket.
        engine_config, engine: autobyte's best ``<partition, credit>`` and its prediction.
        compute: the compute-only bound (no communication).
        sensitivity: the advice over a range of bandwidths.
        sources: which inputs were measured and which numbers simulated.
        notes: assumptions the numbers rest on.
        wire16: the 16-bit precision reported (``"bf16"``, ``"fp16"``) or ``None`` (none reported).
        ddp_hook: DDP at the advised bucket size with the compression hook of ``wire16``.
        engine16_config, engine16: autobyte's best ``<partition, credit>`` at ``wire16`` and its prediction.
    """

    model: ModelProfile
    cluster: Cluster
    bucket_cap_mb: float | None
    first_bucket_mb: float | None
    ddp: list[Prediction]
    ddp_best: Prediction | None
    ddp_default: Prediction | None
    first_bucket: Prediction | None
    engine_config: Config | None
    engine: Prediction | None
    compute: Prediction
    sensitivity: list[SensitivityRow] = field(default_factory=list)
    sources: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    wire16: str | None = None
    ddp_hook: Prediction | None = None
    engine16_config: Config | None = None
    engine16: Prediction | None = None

    @property
    def ddp_gain(self) -> float:
        """Predicted speed-up of the advised bucket size over DDP's default (1.0 when the default is kept)."""
        if self.ddp_best is None or self.ddp_default is None:
            return math.nan
        return self.ddp_best.samples_per_s / self.ddp_default.samples_per_s

    def ddp_args(self) -> str:
        """The keyword arguments to give ``DistributedDataParallel``."""
        if self.bucket_cap_mb is None:
            return "(defaults: leave bucket_cap_mb unset)"
        cap = _fmt_mb(self.bucket_cap_mb)
        if self.first_bucket_mb is not None:
            return f"bucket_cap_mb_list=[{_fmt_mb(self.first_bucket_mb)}, {cap}]"
        return f"bucket_cap_mb={cap}"

    def ddp_hook_code(self) -> str | None:
        """The one line that sends DDP's buckets at 16 bits (``None`` when no 16-bit precision is reported)."""
        if self.wire16 is None:
            return None
        return (f"ddp_model.register_comm_hook(None, {HOOKS[self.wire16]})  "
                "# from torch.distributed.algorithms.ddp_comm_hooks.default_hooks")

    def engine16_code(self) -> str | None:
        """The one line that runs autobyte's engine at 16 bits with the advised ``<partition, credit>``."""
        if self.wire16 is None or self.engine16_config is None:
            return None
        c = self.engine16_config
        return (f'schedule(model, optimizer, partition_bytes={c.partition_bytes}, credit_bytes={c.credit_bytes}, '
                f'wire="{self.wire16}")  # from autobyte.integrations.torch')

    def wire16_gain(self) -> dict[str, float]:
        """Predicted speed-up of 16 bits over fp32: DDP + hook over the advised DDP, autobyte at 16 bits over autobyte at fp32."""
        out: dict[str, float] = {}
        if self.ddp_hook is not None and self.ddp_best is not None:
            out["ddp"] = self.ddp_hook.samples_per_s / self.ddp_best.samples_per_s
        if self.engine16 is not None and self.engine is not None:
            out["engine"] = self.engine16.samples_per_s / self.engine.samples_per_s
        return out

    def wire16_verdict(self) -> str | None:
        """Whether 16 bits pay here, in one sentence (``None`` when none is reported)."""
        gains = self.wire16_gain()
        if self.wire16 is None or not gains:
            return None
        fp32 = {"ddp": self.ddp_best, "engine": self.engine}
        name = {"ddp": "DDP", "engine": "autobyte"}

        def pct(keys: list[str]) -> str:
            return ", ".join(f"{name[k]} {(gains[k] - 1) * 100:+.1f}%" for k in keys)

        def why(keys: list[str]) -> str:
            of = max(fp32[k].samples_per_s for k in keys if fp32[k] is not None) / self.compute.samples_per_s  # type: ignore[union-attr]
            if of >= 0.9:
                return f"already compute-bound at fp32 ({of * 100:.0f}% of compute-only)"
            return "halving the bytes saves little time on this link"

        pay = [k for k in gains if gains[k] >= 1 + LITTLE_GAIN]
        little = [k for k in gains if k not in pay]
        if not pay:
            return (f"16 bits buy little here ({pct(little)} over fp32): {why(little)}, and the casts to and from 16 bits "
                    "cost time; keep fp32.")
        text = f"16 bits pay here ({pct(pay)} over fp32): communication is on the critical path and they halve its bytes"
        if little:
            k = little[0]  # two predictions: one pays, the other not
            text += f"; for {name[k]} they buy little ({(gains[k] - 1) * 100:+.1f}%): {why(little)}"
        return text + "."

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model.name, "n_workers": self.cluster.n_workers, "arch": self.cluster.arch,
            "bandwidth_gbps": _gbps(self.cluster), "latency_s": self.cluster.latency_s,
            "per_message_s": self.cluster.per_message_s, "batch_size": self.model.batch_size,
            "gradient_bytes": int(self.model.total_bytes), "n_layers": self.model.n_layers,
            "bucket_cap_mb": self.bucket_cap_mb, "first_bucket_mb": self.first_bucket_mb, "ddp_args": self.ddp_args(),
            "ddp_gain_over_default": self.ddp_gain,
            "ddp": [p.to_dict() for p in self.ddp],
            "ddp_best": self.ddp_best.to_dict() if self.ddp_best else None,
            "ddp_default": self.ddp_default.to_dict() if self.ddp_default else None,
            "first_bucket": self.first_bucket.to_dict() if self.first_bucket else None,
            "engine_config": self.engine_config.to_dict() if self.engine_config else None,
            "engine": self.engine.to_dict() if self.engine else None,
            "compute": self.compute.to_dict(),
            "sensitivity": [r.to_dict() for r in self.sensitivity],
            "sources": dict(self.sources), "notes": list(self.notes),
            "wire16": self.wire16,
            "ddp_hook": self.ddp_hook.to_dict() if self.ddp_hook else None,
            "ddp_hook_code": self.ddp_hook_code(),
            "engine16_config": self.engine16_config.to_dict() if self.engine16_config else None,
            "engine16": self.engine16.to_dict() if self.engine16 else None,
            "engine16_code": self.engine16_code(),
            "wire16_gain": self.wire16_gain(),
            "wire16_verdict": self.wire16_verdict(),
            "wire16_safety": WIRE_SAFETY[self.wire16] if self.wire16 else None,
        }

    def __str__(self) -> str:
        c = self.cluster
        lat = f", latency {c.latency_s * 1e6:g} us/hop" if c.latency_s else ""
        lines = [
            f"autobyte advise: {self.model.name} (batch {self.model.batch_size}/worker, "
            f"{self.model.total_bytes / MiB:.1f} MiB of gradients in {self.model.n_layers} layers), "
            f"{c.n_workers} workers, {c.arch}, {_gbps(c):g} Gbit/s{lat}",
            "",
        ]
        if self.ddp_best is not None:
            lines.append(f"DDP:      DistributedDataParallel(model, {self.ddp_args()})")
            if self.bucket_cap_mb is None:
                lines.append("          the default is within 1% of the best bucket size here.")
            else:
                lines.append(f"          predicted {self.ddp_gain:.2f}x DDP's default (25 MiB, 1 MiB first bucket).")
            if self.first_bucket is not None:
                d = self.first_bucket.samples_per_s / self.ddp_best.samples_per_s - 1
                if self.bucket_cap_mb is None:
                    lines.append(f"          first bucket: 25 MiB instead of the default's 1 MiB (bucket_cap_mb=25) changes "
                                 f"samples/s by {d * 100:+.1f}%.")
                else:
                    verdict = "matters: use the list above" if self.first_bucket_mb is not None else "does not matter here"
                    lines.append(f"          first bucket: 1 MiB instead of {_fmt_mb(self.bucket_cap_mb)} MiB changes "
                                 f"samples/s by {d * 100:+.1f}% ({verdict}).")
            near = [p.label for p in self.ddp if p.label != "default"
                    and p.samples_per_s >= self.ddp_best.samples_per_s * (1 - TIE_TOLERANCE)]
            if near:
                lines.append(f"          within 1% of the best: bucket_cap_mb in {{{', '.join(near)}}}.")
        if self.engine_config is not None:
            lines.append(f"autobyte: partition_bytes={self.engine_config.partition_bytes}, "
                         f"credit_bytes={self.engine_config.credit_bytes}  ({self.engine_config})")
        if self.wire16 is not None and (self.ddp_hook is not None or self.engine16 is not None):
            code = [("DDP + hook", self.ddp_hook_code() if self.ddp_hook is not None else None),
                    ("autobyte", self.engine16_code())]
            first = True
            for who, line in code:
                if line is not None:
                    lines.append(f"{'16 bits:' if first else '':<10}{who + ':':<12}{line}")
                    first = False
            for text in (self.wire16_verdict(), WIRE_SAFETY[self.wire16],
                         "16 bits change the numerics: results are not bit-identical to fp32's (docs/torch.md)."):
                if text:
                    lines.append(f"{'':<10}{text}")
        base = self.ddp_default.samples_per_s if self.ddp_default else math.nan
        rows = [self.compute]
        rows += [p for p in (self.ddp_default, self.ddp_best, self.first_bucket, self.engine, self.ddp_hook, self.engine16)
                 if p is not None]
        w = max([42] + [len(p.label) for p in rows])
        lines += ["", f"{'predicted (simulator)':<{w}} {'iteration':>10} {'samples/s':>10} {'vs DDP default':>15} {'of compute-only':>16}"]
        seen: set[str] = set()
        for p in rows:
            if p.label in seen:
                continue
            seen.add(p.label)
            lines.append(f"{p.label:<{w}} {p.iter_time_s * 1e3:>8.1f}ms {p.samples_per_s:>10.1f} "
                         f"{p.samples_per_s / base:>14.2f}x {p.samples_per_s / self.compute.samples_per_s * 100:>15.0f}%")
        if self.sensitivity:
            lines += ["", "sensitivity to bandwidth (simulator; * = the advice changes there):",
                      f"{'Gbit/s':>8} {'bucket_cap_mb':>13} {'DDP samples/s':>14} {'vs default':>10} {'autobyte':>30} {'samples/s':>10}"]
            prev: tuple[Any, Any] | None = None
            for r in self.sensitivity:
                key = (r.bucket_cap_mb, r.engine_config)
                mark = "*" if prev is not None and key != prev else " "
                prev = key
                cap = "default" if r.bucket_cap_mb is None else _fmt_mb(r.bucket_cap_mb)
                eng = str(r.engine_config) if r.engine_config is not None else "-"
                lines.append(f"{mark}{r.bandwidth_gbps:>7g} {cap:>13} {r.ddp_samples_per_s:>14.1f} "
                             f"{r.ddp_samples_per_s / r.default_samples_per_s:>9.2f}x {eng:>30} {r.engine_samples_per_s:>10.1f}")
        lines += ["", "sources:"] + [f"  {k}: {v}" for k, v in self.sources.items()]
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


def _fmt_mb(x: float) -> str:
    return f"{x:g}"


def _gbps(c: Cluster) -> float:
    return float(np.minimum(c.bw_up_Bps, c.bw_down_Bps).min() / GBPS)


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
