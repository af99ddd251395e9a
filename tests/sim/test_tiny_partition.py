"""The simulator refuses a partition size that plans too many messages, at once (the check lives in core)."""

from __future__ import annotations

import time

import pytest

from autobyte.core import Config
from autobyte.sim import Cluster, get_model, simulate


def test_simulator_answers_at_once_for_a_tiny_partition():
    t0 = time.monotonic()
    with pytest.raises(ValueError, match=r"partition_bytes=1 would split .* use partition_bytes >= 100\."):
        simulate(get_model("resnet50"), Cluster.from_gbps(2, 10), Config(1, 1), n_iters=1)
    assert time.monotonic() - t0 < 5
