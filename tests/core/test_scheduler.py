from __future__ import annotations

import random

import pytest

from autobyte.core import CreditQueue, Scheduler, TensorSpec, estimated_order, plan_messages, plan_order, tensors_from_sizes
from autobyte.core.space import Config


def _coverage(tensors, messages):
    seen = {i: [] for i in range(len(tensors))}
    for m in messages:
        for s in m.segments:
            seen[s.tensor].append((s.start, s.stop))
    for i, t in enumerate(tensors):
        spans = sorted(seen[i])
        assert spans[0][0] == 0 and spans[-1][1] == t.numel
        assert all(a[1] == b[0] for a, b in zip(spans, spans[1:])), f"gap or overlap in tensor {i}: {spans}"


@pytest.mark.parametrize("partition", [4, 40, 400, 4000, 10**9])
def test_every_element_in_exactly_one_message_and_size_bound(partition):
    rng = random.Random(partition)
    tensors = tensors_from_sizes([rng.randint(1, 700) for _ in range(30)])
    msgs = plan_messages(tensors, partition)
    _coverage(tensors, msgs)
    for m in msgs:
        assert m.nbytes == sum(s.numel for s in m.segments) * 4
        assert m.nbytes <= max(partition, 4)


def test_split_large_and_fuse_small_neighbours():
    tensors = tensors_from_sizes([100, 10, 5000, 3, 3])  # bytes: 400, 40, 20000, 12, 12
    msgs = plan_messages(tensors, 1000)
    # backward order: layers 4 and 3 fused, layer 2 split in 20 chunks, layers 1 and 0 fused
    assert [s.tensor for s in msgs[0].segments] == [4, 3]
    assert sum(1 for m in msgs if m.tensors == (2,)) == 20
    assert [s.tensor for s in msgs[-1].segments] == [1, 0]
    assert msgs[-1].priority == 0
    assert [m.chunk for m in msgs if m.tensors == (2,)] == list(range(20))


def test_fusion_never_mixes_dtypes():
    tensors = [TensorSpec("a", 4, 4, 0, "float32"), TensorSpec("b", 4, 2, 1, "float16"), TensorSpec("c", 4, 4, 2, "float32")]
    msgs = plan_messages(tensors, 10**6)
    assert all(len({tensors[s.tensor].dtype for s in m.segments}) == 1 for m in msgs)
    assert len(msgs) == 3


def test_plan_errors():
    with pytest.raises(ValueError, match="at least one gradient tensor"):
        plan_messages([], 100)
    with pytest.raises(ValueError, match="numel > 0"):
        plan_messages([TensorSpec("x", 0, 4, 0)], 100)
    with pytest.raises(ValueError, match="permutation"):
        plan_messages(tensors_from_sizes([1, 2]), 100, ready_order=[0, 0])
    with pytest.raises(ValueError, match="partition_bytes must be a positive integer"):
        plan_messages(tensors_from_sizes([1]), 0)


def test_credit_queue_priority_and_window():
    msgs = plan_messages(tensors_from_sizes([250, 250, 250, 250]), 1000)  # 4 messages of 1000 B, one per layer
    q = CreditQueue(msgs, 2000)
    by_layer = {m.priority: m.index for m in msgs}
    q.mark_ready(by_layer[3])
    q.mark_ready(by_layer[2])
    assert q.release() == [by_layer[2], by_layer[3]]  # both fit: higher priority first
    q.mark_ready(by_layer[1])
    q.mark_ready(by_layer[0])
    assert q.release() == []  # window full: 2000 B in flight
    q.mark_done(by_layer[3])
    assert q.release() == [by_layer[0]]  # the layer nearest the input jumps the queue
    assert q.in_flight_bytes == 2000


def test_credit_queue_fixed_order_mode():
    msgs = plan_messages(tensors_from_sizes([250, 250, 250, 250]), 1000)  # 4 messages of 1000 B
    order = [m.index for m in reversed(msgs)]
    q = CreditQueue(msgs, 2000, order=order)
    q.mark_ready(order[1])
    assert q.release() == [] and q.n_waiting == 1  # ready, but its turn has not come
    q.mark_ready(order[0])
    assert q.release() == [order[0], order[1]]
    q.mark_ready(order[3])
    q.mark_ready(order[2])
    assert q.release() == []  # credit full (2000 B in flight); no jumping ahead by priority
    q.mark_done(order[0])
    assert q.release() == [order[2]]
    q.mark_done(order[1])
    q.mark_done(order[2])
    assert q.release() == [order[3]]
    q.mark_done(order[3])
    assert q.finished and q.n_waiting == 0
    with pytest.raises(ValueError, match="order must be a permutation of the 4 message indices"):
        CreditQueue(msgs, 2000, order=[0, 1, 1, 2])


def test_lone_message_larger_than_credit_runs_alone():
    msgs = plan_messages(tensors_from_sizes([1000, 1000]), 4000)
    big = max(msgs, key=lambda m: m.nbytes)
    q = CreditQueue(msgs, 16)
    for m in msgs:
        q.mark_ready(m.index)
    first = q.release()
    assert len(first) == 1
    q.mark_done(first[0])
    assert len(q.release()) == 1
    assert big.nbytes > 16


def test_plan_order_reorders_only_under_congestion():
    tensors = tensors_from_sizes([250] * 6)
    msgs = plan_messages(tensors, 1000)  # 6 messages, ready from layer 5 down to 0
    ready = lambda m: float(5 - m.priority)  # one second apart
    fast = plan_order(msgs, 1000, ready, lambda m: 0.1)
    assert fast == [m.index for m in msgs]  # idle link: ready order
    slow = plan_order(msgs, 1000, ready, lambda m: 10.0)
    assert slow[0] == msgs[0].index and slow[1] == next(m.index for m in msgs if m.priority == 0)


def test_scheduler_reconfigure_at_boundary():
    s = Scheduler(tensors_from_sizes([1000] * 4), Config(4000, 8000))
    assert len(s.messages) == 4
    s.begin_iteration(0)
    s.reconfigure(1000, 1000, at_iteration=3, reason="test")
    assert not s.begin_iteration(1) and not s.begin_iteration(2)
    assert s.config == Config(4000, 8000)
    assert s.begin_iteration(3)
    assert s.config == Config(1000, 1000) and len(s.messages) == 16
    assert s.history[-1] == (3, Config(1000, 1000), "test")
    with pytest.raises(ValueError, match="at_iteration must be after the current iteration 3"):
        s.reconfigure(1000, 1000, at_iteration=3)
    with pytest.raises(ValueError, match="partition_bytes must be a positive integer"):
        s.reconfigure(0, 1000)


def test_estimated_order_from_measured_backward_times():
    tensors = tensors_from_sizes([250] * 6)
    msgs = plan_messages(tensors, 1000)  # one message per tensor
    times = [1.0] * 6
    # idle link: backward order (last tensor first)
    assert estimated_order(msgs, 1000, times, 1e9) == plan_order(msgs, 1000, lambda m: float(6 - m.tensors[0]), lambda m: 1e-6)
    # congested link: the front layers jump ahead of those still waiting, as the live policy does
    slow = estimated_order(msgs, 1000, [0.01] * 6, 1000.0)
    assert slow == plan_order(msgs, 1000, lambda m: 0.01 * (6 - m.tensors[0]), lambda m: 1.0)
    by_tensor = {m.tensors[0]: m.index for m in msgs}
    assert slow[0] == by_tensor[5] and slow[1] == by_tensor[0]  # first ready goes; then the front layer
    with pytest.raises(ValueError, match="bandwidth_Bps must be positive"):
        estimated_order(msgs, 1000, times, 0.0)
    with pytest.raises(ValueError, match="one time per tensor of the plan .6., but got 5"):
        estimated_order(msgs, 1000, times[:5], 1e9)


# ---------------------------------------------------------------- schedule classes
def _release_trace(messages, credit):
    """Release pattern of a plan under a credit, for one fixed pattern of ready and done events."""
    q = CreditQueue(messages, credit)
    trace, flight = [], []
    for k, m in enumerate(messages):
        q.mark_ready(m.index)
        out = q.release()
        flight.extend(out)
        trace.append(tuple(messages[i].segments for i in out))
        if k % 2 == 1 and flight:  # every other step the oldest message in flight completes
            q.mark_done(flight.pop(0))
    while flight:
        q.mark_done(flight.pop(0))
        out = q.release()
        flight.extend(out)
        trace.append(tuple(messages[i].segments for i in out))
    return tuple(trace)


def test_schedule_classes_group_configs_that_run_the_same_schedule():
    from autobyte.core import schedule_classes

    tensors = tensors_from_sizes([1000, 250, 3000, 500, 64, 2000])  # 4000 .. 12000 B, 27256 B in all
    total = sum(t.nbytes for t in tensors)
    configs = [Config.from_multiple(p, m) for p in [2 ** k for k in range(10, 18)] for m in (0.25, 1, 2, 4, 16)]
    ids = schedule_classes([t.nbytes for t in tensors], configs)
    assert ids.shape == (len(configs),) and ids[0] == 0
    n_same = 0
    for i, a in enumerate(configs):
        pa = plan_messages(tensors, a.partition_bytes)
        for j, b in enumerate(configs[:i]):
            if ids[i] != ids[j]:
                continue
            n_same += 1
            pb = plan_messages(tensors, b.partition_bytes)
            assert [m.segments for m in pa] == [m.segments for m in pb], (a, b)  # the same messages
            assert _release_trace(pa, a.credit_bytes) == _release_trace(pb, b.credit_bytes), (a, b)  # released alike
    assert n_same > 20  # partitions above the total fuse everything into one message; credits above it never bind
    one = [ids[k] for k, c in enumerate(configs) if c.partition_bytes >= total]
    assert len(set(one)) == 1
    # a tensor split differently, or a credit that binds differently, is another class
    by = dict(zip(configs, ids))
    assert by[Config(8192, 8192)] != by[Config(16384, 16384)]  # 12000 B split into two, or not
    assert by[Config(32768, 8192)] == by[Config(32768, 32768)]  # one message of 27256 B: alone either way
    assert by[Config(16384, 16384)] != by[Config(16384, 65536)]  # 2 messages: one at a time, or both at once


def test_schedule_classes_rejects_no_gradients():
    from autobyte.core import schedule_classes

    with pytest.raises(ValueError, match="tensor_bytes must be a non-empty sequence of positive byte counts, but got"):
        schedule_classes([], [Config(1024, 1024)])
    with pytest.raises(ValueError, match=r"but got \[4, 0\]"):
        schedule_classes([4, 0], [Config(1024, 1024)])


def test_a_16_bit_wire_plans_bytes_on_the_wire():
    from autobyte.core.scheduler import on_wire

    tensors = tensors_from_sizes([1000, 3000, 500])  # float32
    assert on_wire(tensors, "fp32") == tensors
    half = on_wire(tensors, "bf16")
    assert [t.itemsize for t in half] == [2, 2, 2] and {t.dtype for t in half} == {"bfloat16"}
    # the same 4000-byte partition holds twice the elements at 16 bits
    assert max(m.numel for m in plan_messages(tensors, 4000)) == 1000
    assert max(m.numel for m in plan_messages(half, 4000)) == 2000
    s = Scheduler(tensors, Config(4000, 8000))
    assert s.total_bytes == 4 * 4500
    s.reconfigure(4000, 8000, wire="fp16", at_iteration=2)
    assert not s.begin_iteration(1) and s.begin_iteration(2)
    assert s.config == Config(4000, 8000, "fp16") and s.total_bytes == 2 * 4500
    assert {m.dtype for m in s.messages} == {"float16"} and max(m.numel for m in s.messages) == 2000
    s.reconfigure(8000, 8000, at_iteration=3)  # wire=None keeps the precision in force
    s.begin_iteration(3)
    assert s.config == Config(8000, 8000, "fp16")
    with pytest.raises(ValueError, match="wire must be one of"):
        s.reconfigure(8000, 8000, wire="fp8")
