"""Framework-free core of autobyte: configuration space, scheduler, statistics.

Nothing in this package imports a deep-learning framework.
"""

from __future__ import annotations

from .metrics import ARCHITECTURES, RuntimeFeatures, StatsCollector, WindowStats
from .scheduler import CreditQueue, Message, Scheduler, Segment, TensorSpec, plan_messages, plan_order, tensors_from_sizes
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
    check_bytes,
)

__all__ = [
    "ARCHITECTURES", "BYTEPS_DEFAULT", "BYTESCHEDULER_DEFAULT", "Config", "CreditQueue", "DDP_DEFAULT", "GiB", "KiB",
    "MAX_BYTES", "Message", "MiB", "P3_DEFAULT", "RuntimeFeatures", "Scheduler", "SearchSpace", "Segment",
    "StatsCollector", "TensorSpec", "UNLIMITED", "WindowStats", "check_bytes", "plan_messages", "plan_order",
    "tensors_from_sizes",
]
