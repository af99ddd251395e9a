"""Emulated compute on real traffic: what a worker emulates, framework-free.

An :class:`Emulation` turns a layer-wise :class:`~autobyte.sim.ModelProfile`
(a zoo model on a V100, or any profile) into what one worker of a testbed run
does instead of real compute:

* it **holds real parameter tensors of the real sizes** (one flat FP32 tensor
  per profile layer, ``layer_bytes / 4`` elements, layer 0 nearest the
  input), so gradients of the real sizes go through the real engines over
  real TCP;
* its forward and backward **take each layer's time from the profile**,
  multiplied by ``compute_scale`` (the host's 2 CPU cores cannot compute a
  ResNet-50 at V100 speed; slowing compute down by ``compute_scale`` and the
  links by the same factor keeps the paper's compute/communication ratios);
* backward produces each layer's gradient after that layer's backward time,
  from the output layer to the input one, so gradients become ready over the
  backward pass in the order and at the times the profile says.

The framework side (torch: :mod:`autobyte.bench.emulate_torch`; MXNet: the
parameter-server runner) reads the per-layer element counts and seconds from
here; links are scaled with :func:`scaled_mbit`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core._checks import check_int

#: Prefix of emulated model names in specs and suites: ``emu:resnet50``.
PREFIX = "emu:"

#: Default slow-down of compute (and of the links it is compared with) relative to the paper's V100 testbed.
DEFAULT_SCALE = 10.0


def is_emulated(model: Any) -> bool:
    """Whether ``model`` names an emulated model (``emu:NAME``)."""
    return isinstance(model, str) and model.startswith(PREFIX)


def scaled_mbit(paper_gbps: float, compute_scale: float = DEFAULT_SCALE) -> float:
    """The testbed rate, in Mbit/s, standing for the paper's ``paper_gbps`` when compute is ``compute_scale`` times slower."""
    for name, v in (("paper_gbps", paper_gbps), ("compute_scale", compute_scale)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise ValueError(f"{name} must be a positive number, but got {name}={v!r}.")
    return paper_gbps * 1000.0 / compute_scale


@dataclass(frozen=True)
class Emulation:
    """One worker's emulated model: real tensor sizes, per-layer times from a profile.

    Args:
        model: a zoo name (:data:`autobyte.sim.MODELS`), with or without the ``emu:`` prefix.
        compute_scale: compute runs this many times slower than the profile (>= 1; default 10).
        batch_size: per-worker batch of the profile (default: the zoo's).

    Raises:
        ValueError: an unknown model, a scale below 1 or not finite, a bad batch size.
    """

    model: str
    compute_scale: float = DEFAULT_SCALE
    batch_size: int | None = None

    def __post_init__(self) -> None:
        from ..sim import get_model

        name = self.model[len(PREFIX):] if is_emulated(self.model) else self.model
        get_model(name)  # raises naming the zoo's models
        object.__setattr__(self, "model", name)
        s = self.compute_scale
        if isinstance(s, bool) or not isinstance(s, (int, float)) or not math.isfinite(s) or s < 1:
            raise ValueError(f"compute_scale must be a number >= 1, but got compute_scale={s!r}.")
        object.__setattr__(self, "compute_scale", float(s))
        if self.batch_size is not None:
            check_int("batch_size", self.batch_size)

    def profile(self) -> Any:
        """The :class:`~autobyte.sim.ModelProfile` at the profile's own speed (V100)."""
        from ..sim import get_model

        return get_model(self.model, batch_size=self.batch_size)

    def scaled_profile(self) -> Any:
        """The profile with every compute time multiplied by ``compute_scale``: what the worker emulates."""
        from ..sim import ModelProfile

        p = self.profile()
        k = self.compute_scale
        return ModelProfile(p.name, p.layer_bytes, p.forward_s * k, p.backward_s * k, p.batch_size, f"{p.device}/{k:g}",
                            p.layer_names)

    @property
    def layer_elements(self) -> list[int]:
        """FP32 elements of each layer's parameter tensor, layer 0 nearest the input."""
        return [int(b) // 4 for b in self.profile().layer_bytes]

    @property
    def forward_s(self) -> np.ndarray:
        return np.asarray(self.scaled_profile().forward_s)

    @property
    def backward_s(self) -> np.ndarray:
        return np.asarray(self.scaled_profile().backward_s)

    @property
    def compute_s(self) -> float:
        """Emulated forward + backward seconds of one iteration."""
        return float(self.forward_s.sum() + self.backward_s.sum())

    @property
    def total_bytes(self) -> int:
        return int(self.profile().total_bytes)

    def to_dict(self) -> dict[str, Any]:
        return {"model": PREFIX + self.model, "compute_scale": self.compute_scale, "batch_size": self.batch_size}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Emulation":
        return cls(str(d["model"]), float(d.get("compute_scale", DEFAULT_SCALE)), d.get("batch_size"))
