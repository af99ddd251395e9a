"""autobyte.sim: a discrete-event simulator of scheduled data-parallel training.

It runs the scheduler's own decisions (:func:`autobyte.core.scheduler.plan_messages`
and :class:`autobyte.core.scheduler.CreditQueue`) against a model of compute,
ring all-reduce or parameter-server communication, and time-varying
conditions. Start with::

    from autobyte.sim import Cluster, get_model, simulate
    from autobyte.core import Config, MiB
    res = simulate(get_model("resnet50"), Cluster.from_gbps(8, 10), Config(MiB, 4 * MiB))
    res.samples_per_s

See ``docs/simulator.md``.
"""

from __future__ import annotations

from typing import Any

from ._cluster import GBPS, BandwidthTrace, Cluster, ComputeTrace
from ._ddp import DDPResult, bucket_limits, ddp_buckets, simulate_ddp
from ._engine import SimResult, evaluate_configs, simulate
from ._models import MODELS, V100, Device, ModelProfile, get_model


def profile_module(module: Any, example_input: Any, **kwargs: Any) -> ModelProfile:
    """Profile a ``torch.nn.Module`` into a :class:`ModelProfile` (imports torch lazily).

    See :func:`autobyte.sim._torch_profile.profile_module` for the arguments.
    """
    from ._torch_profile import profile_module as _pm

    return _pm(module, example_input, **kwargs)


__all__ = [
    "BandwidthTrace", "Cluster", "ComputeTrace", "DDPResult", "Device", "GBPS", "MODELS", "ModelProfile", "SimResult",
    "V100", "bucket_limits", "ddp_buckets", "evaluate_configs", "get_model", "profile_module", "simulate",
    "simulate_ddp",
]
