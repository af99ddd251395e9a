from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from autobyte import sim
from autobyte.core.metrics import WindowStats
from autobyte.core.space import Config, MiB, SearchSpace
from autobyte.core.tuning import Controller, Observation
from autobyte.meta import Adapter, AutoByteTuner

SPACE = SearchSpace.grid([MiB, 4 * MiB, 16 * MiB], [1, 2, 4])


def obs(config: Config, w: int = 0, gbps: float = 5.0, per_message_s: float | None = None) -> Observation:
    cl = sim.Cluster.from_gbps(4, gbps, "ps")
    if per_message_s is not None:
        cl = cl.replace(per_message_s=per_message_s)
    res = sim.simulate(sim.get_model("resnet50"), cl, config, n_iters=2, seed=w)
    f = res.features()
    return Observation(w, config, float(f.speed.sum()), f)


def test_one_candidate_space_warns_and_never_moves(fresh_net):
    t = AutoByteTuner(fresh_net, background=False)
    only = SearchSpace([Config(4 * MiB, 8 * MiB)])
    with pytest.warns(UserWarning, match=r"search space has one candidate"):
        cur = t.start(only, only[0])
    for w in range(3):
        assert t.observe(obs(cur, w)) is None


@pytest.mark.parametrize("speed", [math.nan, math.inf, 0.0, -5.0])
def test_unusable_speed_keeps_config_and_warns(fresh_net, speed):
    t = AutoByteTuner(fresh_net, background=False)
    cur = t.start(SPACE, SPACE[0])
    o = obs(cur)
    with pytest.warns(UserWarning, match=r"keeping"):
        assert t.observe(Observation(o.iteration, cur, speed, o.features)) is None


def test_zero_sample_and_missing_statistics_windows_fall_back_via_controller(fresh_net):
    t = AutoByteTuner(fresh_net, background=False)
    ctl = Controller(t, SPACE, SPACE[4], "ps", layer_bytes=[4e6, 4e6])
    empty = WindowStats(0, 0.0, 0.0, 0.0, (0.0, 0.0), 0, 0, 0.0, 0.0)
    with pytest.warns(UserWarning, match=r"unusable statistics"):
        assert ctl.decide(10, [empty, empty]) is None
    missing = WindowStats(10, 0.1, 100.0, 0.01, (), 1, 1, 0.1, 1e9)  # no per-layer times
    with pytest.warns(UserWarning, match=r"unusable statistics"):
        assert ctl.decide(20, [missing, missing]) is None
    nan = WindowStats(10, 0.1, 100.0, 0.01, (math.nan, 0.01), 1, 1, 0.1, 1e9)
    with pytest.warns(UserWarning, match=r"unusable statistics"):
        assert ctl.decide(30, [nan, nan]) is None
    assert ctl.current == SPACE[4]


def test_corrupted_weights_file_is_a_clear_error(fresh_net, tmp_path):
    p = tmp_path / "x.npz"
    fresh_net.save(p)
    data = bytearray(p.read_bytes())
    data[len(data) // 2] ^= 0x08
    p.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"does not match the sha256 in its sidecar"):
        AutoByteTuner(weights=str(p))


@pytest.mark.parametrize("kw, match", [
    ({"min_gain": -1}, r"min_gain must be a finite number"),
    ({"max_error": math.nan}, r"max_error must be a finite number"),
    ({"replay_size": 0}, r"replay_size must be a positive integer, but got replay_size=0"),
    ({"adapt_time_s": 0}, r"time_budget_s must be a positive finite number, but got time_budget_s=0"),
])
def test_rejects_bad_arguments(fresh_net, kw, match):
    with pytest.raises(ValueError, match=match):
        AutoByteTuner(fresh_net, **kw)


def test_disabled_never_reconfigures(fresh_net):
    t = AutoByteTuner(fresh_net, background=False, enabled=False)
    cur = t.start(SPACE, SPACE[0])
    assert all(t.observe(obs(cur, w)) is None for w in range(4))
    assert t.n_decisions == 4


def test_large_error_triggers_adaptation_that_reduces_error(fresh_net):
    # a cluster far from the training data: per-message cost x20
    t = AutoByteTuner(fresh_net, background=False, adapt_time_s=0.5)
    t.start(SPACE, SPACE[0])
    for w, c in enumerate(list(SPACE) * 2):  # visit configs: every window labels the earlier ones
        t.observe(obs(c, w, per_message_s=2e-3))
    assert t.adapter.n_runs >= 1
    first, last = t.adapter.last_loss
    assert last < first


def test_adaptation_runs_in_background_and_does_not_block(fresh_net):
    net = fresh_net
    ad = Adapter(net, time_budget_s=1.5, max_epochs=10**6)
    rng = np.random.default_rng(0)
    e = rng.random((32, net.shape.lstm_units + net.shape.job_units))
    c = rng.random((32, 12))
    y = rng.random(32)
    before = net._np_head
    assert ad.start(e, c, y, background=True)
    assert ad.running
    assert not ad.start(e, c, y, background=True)  # one at a time
    # scoring still works while adapting (reads the old head)
    assert np.all(np.isfinite(net.head_predict(e[:1], c)))
    ad.join()
    assert not ad.running and ad.n_runs == 1
    assert net._np_head is not before
    assert ad.last_duration_s < 3.0  # bounded by its budget (with slack for a loaded machine)


def test_adaptation_never_raises_into_training(fresh_net):
    ad = Adapter(fresh_net, time_budget_s=0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ad.start(np.zeros((2, 3)), np.zeros((2, 12)), np.zeros(2), background=False)  # wrong width
    assert ad.n_runs == 1  # failed, logged, predictor unchanged


def test_rollback_after_a_measured_slowdown(fresh_net):
    t = AutoByteTuner(fresh_net, background=False)
    cur = t.start(SPACE, SPACE[4])
    fast = obs(cur, 0)
    t.observe(fast)
    # pretend it moved to SPACE[0] and it was much slower there
    t._prev = (SPACE[4], fast.speed)
    slow = obs(SPACE[0], 1)
    slow = Observation(1, SPACE[0], fast.speed * 0.5, slow.features)
    d = t.observe(slow)
    assert d is not None and d.config == SPACE[4] and d.reason.startswith("rollback")


def test_rejects_bad_explore_gain(fresh_net):
    with pytest.raises(ValueError, match=r"explore_gain must be a finite number in \[-0.5, 10\] or None, but got explore_gain=-0.6"):
        AutoByteTuner(fresh_net, explore_gain=-0.6)


def test_explores_at_most_once_per_regime(fresh_net):
    t = AutoByteTuner(fresh_net, background=False, explore_gain=0.0, min_gain=3.0)  # only exploration can move it
    cur = t.start(SPACE, SPACE[4])
    reasons = []
    for w in range(8):
        d = t.observe(obs(cur, w))
        if d is not None:
            reasons.append(d.reason.split(":")[0])
            cur = d.config
    assert reasons.count("explore") <= 1


WIDE = SearchSpace.grid([64 * 1024 * 4**k for k in range(6)], [1, 4])  # 64 KiB .. 64 MiB, factor 4 apart


def _far_first_move(net) -> tuple[Config, Observation, Config] | None:
    """A start whose first observation makes an unlimited tuner jump more than 4x in partition."""
    for start in WIDE:
        o = obs(start, 0)
        t = AutoByteTuner(net, background=False, min_gain=0.01, explore_gain=-0.5, reach=None)
        t.start(WIDE, start)
        d = t.observe(o)
        if d is not None and abs(math.log2(d.config.partition_bytes / start.partition_bytes)) > 2:
            return start, o, d.config
    return None


def test_trust_region_limits_moves_to_unmeasured_configs(fresh_net):
    found = _far_first_move(fresh_net)
    assert found is not None, "the tiny network never predicts a far move; the scenario needs one"
    start, o, far = found
    t = AutoByteTuner(fresh_net, background=False, min_gain=0.01, explore_gain=-0.5, reach=2.0)
    t.start(WIDE, start)
    d = t.observe(o)
    assert d is None or abs(math.log2(d.config.partition_bytes / start.partition_bytes)) <= 2, (far, d)


def test_trust_region_narrows_after_a_bad_move_and_outlives_a_regime_change(fresh_net):
    t = AutoByteTuner(fresh_net, background=False, reach=4.0)
    cur = t.start(SPACE, SPACE[4])
    t.observe(obs(cur, 0))
    assert t._reach == 4.0
    # pretend the last decision moved to an unmeasured config predicted 2x faster than it ran
    t._moved, t._pred_next = True, 2 * obs(cur, 1).speed
    t.observe(obs(cur, 1))
    assert t._reach == 2.0 and t._move_error > 0.4
    bar = t._bar = 4.0
    o = obs(cur, 2, gbps=1.0)
    t.observe(Observation(2, cur, o.speed, o.features, regime_changed=True))
    assert t._reach == 2.0 and t._move_error > 0.4 and t._bar == bar / 2  # kept, the bar decays
    assert t._measured == {cur: o.speed}  # measurements of the old regime are forgotten


@pytest.mark.parametrize("reach", [0.5, float("inf"), True, "2"])
def test_rejects_bad_reach(fresh_net, reach):
    with pytest.raises(ValueError, match=r"reach must be a finite number >= 1 or None, but got reach="):
        AutoByteTuner(fresh_net, reach=reach)


def test_a_prediction_made_before_a_change_of_conditions_does_not_count_against_the_predictor(fresh_net):
    t = AutoByteTuner(fresh_net, background=False, reach=4.0)
    cur = t.start(SPACE, SPACE[4])
    t.observe(obs(cur, 0))
    t._moved, t._pred_next = True, 2 * obs(cur, 1).speed  # a move predicted for the old conditions
    o = obs(cur, 1, gbps=1.0)
    t.observe(Observation(1, cur, o.speed, o.features, regime_changed=True))
    assert t._reach == 4.0 and t._move_error == 0.0 and not t._explored  # still trusted: explores the new regime
    t._reach = 2.0  # a predictor that proved wrong here ...
    o = obs(cur, 2, gbps=5.0)
    t.observe(Observation(2, cur, o.speed, o.features, regime_changed=True))
    assert t._explored  # ... does not explore again after the next change


def test_a_move_not_judged_before_conditions_changed_is_judged_after(fresh_net):
    t = AutoByteTuner(fresh_net, background=False, explore_gain=None, min_gain=3.0)  # it never moves on its own
    a, b = SPACE[4], SPACE[0]
    t.start(SPACE, a)
    t.observe(obs(a, 0))
    t._prev, t._judged = (a, obs(a, 0).speed), False  # pretend it just moved a -> b
    o = obs(b, 1, gbps=1.0)  # first window at b: conditions changed at the same time
    d = t.observe(Observation(1, b, o.speed, o.features, regime_changed=True))
    assert d is not None and d.config == a and d.reason.startswith("re-measure")
    # a is 10% slower than b in the new conditions: back to b (1% rule), and nothing more to re-judge
    o = obs(a, 2, gbps=1.0)
    d = t.observe(Observation(2, a, t._measured[b] * 0.9, o.features))
    assert d is not None and d.config == b and d.reason.startswith("rollback")
    o = obs(b, 3, gbps=1.0)
    assert t.observe(Observation(3, b, o.speed, o.features)) is None


def test_a_judged_move_is_not_re_measured_after_a_change(fresh_net):
    t = AutoByteTuner(fresh_net, background=False, explore_gain=None, min_gain=3.0)
    a, b = SPACE[4], SPACE[0]
    t.start(SPACE, a)
    t._prev, t._judged = (a, 100.0), False  # it moved a -> b ...
    o = obs(b, 0)
    t.observe(Observation(0, b, 100.0, o.features))  # ... and b measured as fast: judged
    o = obs(b, 1, gbps=1.0)
    assert t.observe(Observation(1, b, o.speed, o.features, regime_changed=True)) is None
