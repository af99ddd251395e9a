"""What ``autobyte advise`` answers: the predictions, the advice, and its one-screen text (see :mod:`autobyte._advise`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .core.space import Config, MiB
from .sim import GBPS, V100, Cluster, Device, ModelProfile
from .sim._ddp import HOOKS


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
