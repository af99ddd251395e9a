"""The window protocol (core/window.py) driven by in-process ranks (threads) over a fake Collective.

The real transports (torch.distributed, KVStore keys, Horovod) are covered by
the engines' distributed tests; here the protocol logic: check timing,
gathering, rank 0 deciding alone, one agreed decision applied everywhere at
one iteration, the fixed-length wire format.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

import numpy as np
import pytest

from autobyte.core import Collective, Config, DecisionRecord, LocalCollective, SearchSpace, StatsCollector, WindowCoordinator, WindowStats
from autobyte.core.tuning import Controller, Decision, Observation, StaticTuner, Tuner
from autobyte.core.window import FLAG_DECISION, REASON_BYTES, WIRE_LEN, Wire, decode, encode

SPACE = SearchSpace([Config(1000, 1000), Config(2000, 4000)])


class _Hub:
    def __init__(self, n: int) -> None:
        self.n = n
        self.barrier = threading.Barrier(n, timeout=20)
        self.slots: list[Any] = [None] * n


class ThreadCollective:
    """One rank of an in-process group: all-gather and broadcast through shared slots and a barrier."""

    def __init__(self, hub: _Hub, rank: int) -> None:
        self.hub, self.rank, self.world_size = hub, rank, hub.n
        self.calls: list[str] = []

    def all_gather(self, vector: np.ndarray) -> list[np.ndarray]:
        self.calls.append("all_gather")
        self.hub.slots[self.rank] = np.array(vector, dtype=np.float64)
        self.hub.barrier.wait()
        out = [np.array(s) for s in self.hub.slots]
        self.hub.barrier.wait()
        return out

    def broadcast(self, vector: np.ndarray) -> np.ndarray:
        self.calls.append("broadcast")
        if self.rank == 0:
            self.hub.slots[0] = np.array(vector, dtype=np.float64)
        self.hub.barrier.wait()
        out = np.array(self.hub.slots[0])
        self.hub.barrier.wait()
        if out.shape != np.shape(vector):  # a real transport would hang or crash on a length mismatch
            raise RuntimeError(f"broadcast length mismatch: {out.shape} vs {np.shape(vector)}")
        return out


class Flip(Tuner):
    """Moves to the other candidate whenever the cluster is slower than ``threshold``."""

    name = "flip"

    def __init__(self, threshold: float = 1e9) -> None:
        self.threshold = threshold
        self.calls = 0

    def observe(self, obs: Observation) -> Decision | None:
        self.calls += 1
        if obs.speed < self.threshold:
            return Decision([c for c in self.space if c != obs.config][0], "slow: " + "é" * 80, predicted_speed=123.0)
        return None


class Refuses(Tuner):
    """A tuner that must never be asked (a non-zero rank's)."""

    def observe(self, obs: Observation) -> Decision | None:
        raise AssertionError("only rank 0's tuner is asked")


class StartsElsewhere(Flip):
    def start(self, space: SearchSpace, initial: Config) -> Config:
        super().start(space, initial)
        return space[1]


def _controller(tuner: Tuner, world_size: int = 2, **kw: Any) -> Controller:
    return Controller(tuner, SPACE, SPACE[0], "allreduce", [400, 600], window_iters=kw.pop("window_iters", 4),
                      warmup_iters=kw.pop("warmup_iters", 1), world_size=world_size, **kw)


def _run_ranks(n: int, body: Callable[[int, ThreadCollective], Any]) -> list[Any]:
    hub = _Hub(n)
    results: list[Any] = [None] * n
    errors: list[BaseException] = []

    def main(r: int) -> None:
        try:
            results[r] = body(r, ThreadCollective(hub, r))
        except BaseException as exc:  # surfaced in the test thread
            errors.append(exc)
            hub.barrier.abort()

    threads = [threading.Thread(target=main, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    if errors:
        raise errors[0]
    return results


def _train(coord: WindowCoordinator, rank: int, n_iters: int) -> list[Any]:
    """Feed ``n_iters`` iterations of timestamps (rank 1 twice as slow) and collect every outcome."""
    stats = StatsCollector(2)
    t, out = 0.0, []
    for it in range(n_iters):
        dt = 0.1 * (1 + rank)
        stats.begin_iteration(t)
        stats.forward_done(t + dt / 4)
        stats.grad_ready(1, t + dt / 2)
        stats.grad_ready(0, t + 3 * dt / 4)
        stats.message_done(1000, t + dt / 2, t + dt)
        t += dt
        stats.end_iteration(t, 8)
        out.append(coord.end_iteration(it, stats))
    return out


def test_two_ranks_agree_on_one_decision_applied_at_one_iteration():
    def body(rank: int, coll: ThreadCollective) -> tuple[list[Any], WindowCoordinator]:
        coord = WindowCoordinator(_controller(Flip() if rank == 0 else Refuses()), coll)
        coord.start(0)
        return _train(coord, rank, 14), coord

    (out0, c0), (out1, c1) = _run_ranks(2, body)
    # the same outcome on every rank, but rank 0's history entry
    for a, b in zip(out0, out1):
        assert (a.checked, a.window_closed, a.decision, a.config, a.config_from, a.windows, a.speed) == \
               (b.checked, b.window_closed, b.decision, b.config, b.config_from, b.windows, b.speed)
        assert b.entry is None
    # warm-up iteration 0 dropped; checks every 2 counted iterations; a window of 4 iterations closes at 4
    assert [o.iteration for o in out0 if o.checked][:2] == [2, 4]
    closed = [o for o in out0 if o.window_closed]
    assert closed[0].iteration == 4 and closed[0].entry is not None and closed[0].entry["iterations"] == 4
    d = closed[0].decision
    assert d is not None and d.iteration == 5 and d.old == SPACE[0] and d.new == SPACE[1]
    assert d.predicted_speed == 123.0 and d.reason.startswith("slow: é")
    assert closed[0].config == SPACE[1] and closed[0].config_from == 5
    # the gathered statistics: rank 1 is twice as slow
    w0, w1 = closed[0].windows
    assert w1.iter_time_s == pytest.approx(2 * w0.iter_time_s)
    # speed = 80 + 40 samples/s over the window
    assert closed[0].speed == pytest.approx(120.0)
    # after the switch, warm-up (1 iteration) again: next check at 5 + 1 + 2
    assert [o.iteration for o in out0 if o.checked][2] == 7
    assert c0.history == c1.history and len(c0.history) == len([o for o in out0 if o.decision])
    assert c0.config == c1.config
    assert isinstance(c0.history[0], DecisionRecord)


def test_a_rank_with_another_tuner_start_follows_rank_0():
    def body(rank: int, coll: ThreadCollective) -> tuple[Any, Config]:
        coord = WindowCoordinator(_controller(StartsElsewhere() if rank == 0 else Flip()), coll)
        out = coord.start(0)
        return out, coord.config

    (o0, cfg0), (o1, cfg1) = _run_ranks(2, body)
    assert cfg0 == cfg1 == SPACE[1]
    assert o0.decision == o1.decision == DecisionRecord(0, SPACE[0], SPACE[1], "tuner start")


def test_rank_0_keeping_its_start_overrules_a_rank_that_would_move():
    def body(rank: int, coll: ThreadCollective) -> Config:
        coord = WindowCoordinator(_controller(Flip() if rank == 0 else StartsElsewhere()), coll)
        assert coord.start(3).decision is None
        return coord.config

    assert _run_ranks(2, body) == [SPACE[0], SPACE[0]]


def test_a_rank_built_with_another_config_starts_from_rank_0s():
    def body(rank: int, coll: ThreadCollective) -> tuple[Any, Config]:
        coord = WindowCoordinator(_controller(Flip()), coll)
        out = coord.start(0, SPACE[0] if rank == 0 else SPACE[1])
        return out.decision, coord.config

    (d0, cfg0), (d1, cfg1) = _run_ranks(2, body)
    assert cfg0 == cfg1 == SPACE[0]
    assert d0 is None and d1 == DecisionRecord(0, SPACE[1], SPACE[0], "rank 0's configuration")


def test_checks_are_one_gather_and_one_fixed_length_broadcast():
    def body(rank: int, coll: ThreadCollective) -> list[str]:
        coord = WindowCoordinator(_controller(StaticTuner()), coll)
        _train(coord, rank, 5)
        return coll.calls

    calls = _run_ranks(3, body)
    assert calls[0] == calls[1] == calls[2] == ["all_gather", "broadcast"] * 2


def test_world_size_one_decides_nothing_and_sends_nothing():
    coll = LocalCollective()
    coord = WindowCoordinator(_controller(Flip(), world_size=1), coll)
    assert coord.start(0).decision is None
    out = _train(coord, 0, 12)
    assert any(o.window_closed for o in out) and not any(o.decision for o in out) and coord.config == SPACE[0]


def test_local_collective_holds_a_simulators_ranks():
    coll = LocalCollective()
    ws = [WindowStats(2, 0.1, 80.0, 0.01, (0.001, 0.002), 1000, 2, 0.05, 2e4),
          WindowStats(2, 0.2, 40.0, 0.01, (0.001, 0.002), 1000, 2, 0.05, 2e4)]
    tuner = Flip()
    coord = WindowCoordinator(_controller(tuner, world_size=2, warmup_iters=0), coll)
    coll.hold(ws)
    assert coll.world_size == 2
    assert not coord.check(2, ws[0]).window_closed
    assert coll.world_size == 1  # held statistics serve one gather
    coll.hold(ws)
    out = coord.check(4, ws[0], apply_at=4)
    assert out.window_closed and out.windows == tuple(ws) and out.speed == pytest.approx(120.0)
    assert out.decision is not None and out.config_from == 4 and coord.config == SPACE[1] and tuner.calls == 1
    with pytest.raises(ValueError, match="one WindowStats per simulated worker"):
        coll.hold([])


def test_wire_round_trip_and_refusal():
    msg = Wire(FLAG_DECISION, Config(2**30 + 1, 2**31 + 3), 123456789, 1.5, None, "x" * (REASON_BYTES + 10))
    vec = encode(msg)
    assert vec.shape == (WIRE_LEN,) and vec.dtype == np.float64
    back = decode(vec)
    assert back.config == msg.config and back.at_iteration == msg.at_iteration and back.speed == 1.5
    assert back.predicted_speed is None and back.reason == "x" * REASON_BYTES
    assert len(encode(Wire(0, Config(1, 1), 0))) == WIRE_LEN  # every message has one length
    with pytest.raises(ValueError, match=f"must be {WIRE_LEN} float64 values"):
        decode(vec[:-1])
    with pytest.raises(ValueError, match="starting with"):
        decode(np.zeros(WIRE_LEN))


def test_apply_history_and_state():
    coord = WindowCoordinator(_controller(StaticTuner(), world_size=1), LocalCollective())
    assert coord.apply(5, SPACE[0], "user") is None and coord.history == []
    rec = coord.apply(5, SPACE[1], "user")
    assert rec == DecisionRecord(5, SPACE[0], SPACE[1], "user") and coord.config == SPACE[1]
    assert not coord.counts(5) and coord.counts(6)  # warm-up after a switch
    assert coord.due(2) and not coord.due(1)  # a check every half window of 4
    again = WindowCoordinator(_controller(StaticTuner(), world_size=1), LocalCollective())
    again.load_state_dict(coord.state_dict())
    assert again.history == coord.history and again.config == SPACE[1]


def test_bad_arguments():
    assert isinstance(LocalCollective(), Collective)
    with pytest.raises(TypeError, match="controller must be a Controller"):
        WindowCoordinator(object(), LocalCollective())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="collective must implement Collective"):
        WindowCoordinator(_controller(StaticTuner()), object())  # type: ignore[arg-type]


def test_the_wire_format_carries_the_precision():
    for wire in ("fp32", "bf16", "fp16"):
        back = decode(encode(Wire(FLAG_DECISION, Config(4096, 8192, wire), 7)))
        assert back.config == Config(4096, 8192, wire) and back.at_iteration == 7
    bad = encode(Wire(0, Config(1, 1), 0))
    bad[7] = 5
    with pytest.raises(ValueError, match="wire precision must be an index"):
        decode(bad)


class ToBf16(Flip):
    """A tuner whose space holds the wire: it moves to bf16 at its first window."""

    def observe(self, obs: Observation) -> Decision | None:
        self.calls += 1
        return Decision(Config(obs.config.partition_bytes, obs.config.credit_bytes, "bf16"), "to 16 bits") if self.calls == 1 else None


def test_a_tuners_precision_applies_at_one_iteration_on_every_rank():
    space = SearchSpace([SPACE[0], Config(1000, 1000, "bf16")])

    def body(rank: int, coll: ThreadCollective) -> tuple[list[Any], Config]:
        ctl = Controller(ToBf16() if rank == 0 else Refuses(), space, SPACE[0], "allreduce", [400, 600], window_iters=4,
                         warmup_iters=1, world_size=2)
        coord = WindowCoordinator(ctl, coll)  # wire=None: the controller's configurations carry it
        coord.start(0)
        return [o.decision for o in _train(coord, rank, 8) if o.decision], coord.config

    (d0, c0), (d1, c1) = _run_ranks(2, body)
    assert d0 == d1 == [DecisionRecord(5, SPACE[0], Config(1000, 1000, "bf16"), "to 16 bits", None, 120.0)]
    assert c0 == c1 == Config(1000, 1000, "bf16")


def test_a_jobs_precision_is_kept_whatever_the_tuner_picks():
    def body(rank: int, coll: ThreadCollective) -> tuple[list[Any], Config, Controller]:
        ctl = _controller(Flip() if rank == 0 else Refuses())
        coord = WindowCoordinator(ctl, coll, wire="fp16")
        coord.start(0, Config(1000, 1000, "fp16"))
        return [o.decision for o in _train(coord, rank, 8) if o.decision], coord.config, ctl

    (d0, c0, ctl0), (d1, c1, _) = _run_ranks(2, body)
    # the tuner saw fp32 configurations of its own space; the decision travels and applies at the job's fp16
    assert d0 == d1 and d0[0].old == Config(1000, 1000, "fp16") and d0[0].new == Config(2000, 4000, "fp16")
    assert c0 == c1 == Config(2000, 4000, "fp16") and ctl0.current == SPACE[1]
    assert all("wire" not in e["config"] for e in ctl0.history)


def test_a_users_change_of_precision_is_a_record_and_the_tuner_keeps_its_configuration():
    ctl = _controller(StaticTuner(), world_size=1)
    coord = WindowCoordinator(ctl, LocalCollective(), wire="fp32")
    rec = coord.apply(3, Config(1000, 1000, "bf16"), "user")
    assert rec == DecisionRecord(3, SPACE[0], Config(1000, 1000, "bf16"), "user")
    assert coord.config == Config(1000, 1000, "bf16") and coord.wire == "bf16" and ctl.current == SPACE[0]
    assert DecisionRecord.from_dict(rec.to_dict()) == rec
    with pytest.raises(ValueError, match="wire must be one of"):
        WindowCoordinator(ctl, LocalCollective(), wire="int8")
