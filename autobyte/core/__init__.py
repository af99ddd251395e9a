"""Framework-free core of autobyte: configuration space, scheduler, statistics, the tuner interface.

Nothing in this package imports a deep-learning framework.
"""

from __future__ import annotations

from .metrics import ARCHITECTURES, RuntimeFeatures, StatsCollector, WindowStats
from .scheduler import (
    CreditQueue,
    Message,
    Scheduler,
    Segment,
    TensorSpec,
    estimated_order,
    plan_messages,
    plan_order,
    schedule_classes,
    tensors_from_sizes,
)
from .space import (
    BYTEPS_DEFAULT,
    BYTESCHEDULER_DEFAULT,
    DDP_DEFAULT,
    GiB,
    KiB,
    MAX_BYTES,
    MiB,
    P3_DEFAULT,
    UNLIMITED,
    Config,
    SearchSpace,
    WIRES,
    check_bytes,
    check_wire,
)
from .scheduler import on_wire
from .tuners import import_tuners, make_tuner, register_tuner, tuner_names
from .tuning import Controller, Decision, Observation, Tuner
from .window import Collective, DecisionRecord, LocalCollective, WindowCoordinator, WindowOutcome
from .wire import AutoWire, WireTuner

__all__ = [
    "ARCHITECTURES", "AutoWire", "BYTEPS_DEFAULT", "BYTESCHEDULER_DEFAULT", "Collective", "Config", "Controller", "CreditQueue",
    "DDP_DEFAULT", "Decision", "DecisionRecord", "GiB", "KiB", "LocalCollective", "MAX_BYTES", "Message", "MiB",
    "Observation", "P3_DEFAULT", "RuntimeFeatures", "Scheduler", "SearchSpace", "Segment", "StatsCollector",
    "TensorSpec", "Tuner", "UNLIMITED", "WIRES", "WindowCoordinator", "WindowOutcome", "WindowStats", "WireTuner",
    "check_bytes", "check_wire", "on_wire",
    "estimated_order", "import_tuners", "make_tuner", "plan_messages", "plan_order", "register_tuner", "schedule_classes", "tensors_from_sizes",
    "tuner_names",
]
