"""The message-count limit: one check in core, shared by the engines and the simulator."""

from __future__ import annotations

import pytest

from autobyte.core import Config, KiB, Scheduler, plan_messages, tensors_from_sizes
from autobyte.core.scheduler import MAX_MESSAGES, check_message_count, n_messages_bound


def test_bound_is_exact_for_split_tensors_and_never_below_the_plan():
    tensors = tensors_from_sizes([1000, 3, 5, 70000, 2])
    for p in (4, 8, 40, 4 * KiB, 1 << 20):
        assert len(plan_messages(tensors, p)) <= n_messages_bound(tensors, p)
    assert n_messages_bound(tensors, 4) == len(plan_messages(tensors, 4)) == 1000 + 3 + 5 + 70000 + 2


def test_too_many_messages_is_refused_with_the_smallest_partition_allowed():
    tensors = tensors_from_sizes([MAX_MESSAGES])
    check_message_count(tensors, 4)  # exactly MAX_MESSAGES: allowed
    tensors = tensors_from_sizes([MAX_MESSAGES + 1])
    with pytest.raises(ValueError, match=rf"partition_bytes=4 would split {4 * (MAX_MESSAGES + 1)} gradient bytes into {MAX_MESSAGES + 1} "
                                         rf"messages per iteration, more than the limit of {MAX_MESSAGES} .* use partition_bytes >= 8\."):
        plan_messages(tensors, 4)
    assert len(plan_messages(tensors, 8)) <= MAX_MESSAGES


def test_scheduler_refuses_at_reconfigure_time_not_at_the_switch():
    s = Scheduler(tensors_from_sizes([4 << 20]), Config(64 * KiB, 64 * KiB))
    with pytest.raises(ValueError, match="partition_bytes=1 would split"):
        s.reconfigure(1, 1)
    assert s.pending is None
