"""The one regime detector and the do-no-harm guard, alone and inside the Controller (real simulator)."""

from __future__ import annotations

import json
import math

import pytest

from autobyte import sim
from autobyte.core import BYTESCHEDULER_DEFAULT, Config, Controller, Decision, KiB, MiB, SearchSpace, Tuner, WindowStats
from autobyte.core.regime import HarmGuard, RegimeDetector
from autobyte.core.tuners import make_tuner

A, B = Config(MiB, MiB), Config(4 * MiB, 4 * MiB)


def test_detector_compares_a_config_with_itself_only():
    d = RegimeDetector(0.15)
    assert not d.observe(A, 100.0)
    assert not d.observe(B, 40.0)  # another config, slower: not a change
    assert not d.observe(A, 110.0)  # +10%: noise
    assert d.rule is None
    assert d.observe(B, 20.0)  # B again, half as fast: conditions changed
    assert d.seen == {B: [20.0]} and not d.settling  # the regime starts afresh, from this measurement
    assert d.rule == "speed"  # what showed it
    assert not d.observe(A, 50.0)  # A is new to this regime


def test_a_faster_link_shows_on_a_configuration_never_measured_here():
    small, C = Config(256 * KiB, MiB), Config(2 * MiB, 2 * MiB)
    d = RegimeDetector(0.15, rate_rise=0.5)
    assert not d.observe(B, 100.0, rate=60e6)  # 4 MiB partitions achieve 60 MB/s of a slow link
    assert not d.observe(small, 80.0, rate=30e6)  # smaller partitions achieve less of it: no change
    assert not d.observe(B, 101.0, rate=80e6)  # +33%: within what windows vary by
    assert d.observe(C, 150.0, rate=130e6)  # 2 MiB achieving 1.6x the most 4 MiB did: the link got faster
    assert d.seen == {C: [150.0]} and d.rates == {C: 130e6} and d.rule == "rate"  # the new regime starts from it
    assert not d.observe(Config(16 * MiB, 16 * MiB), 160.0, rate=400e6)  # larger than anything seen here: not comparable
    assert not d.observe(C, 151.0, rate=300e6)  # 2.3x C's own, but under 1.5x what 16 MiB achieved


def test_the_rate_signal_is_off_by_default_and_kept_in_the_state():
    d = RegimeDetector(0.15)
    assert not d.observe(B, 100.0, rate=60e6) and not d.observe(A, 150.0, rate=600e6)  # not read
    assert d.rates == {}
    d = RegimeDetector(0.15, rate_rise=0.5)
    d.observe(B, 100.0, rate=60e6)
    e = RegimeDetector(0.15, rate_rise=0.5)
    e.load_state_dict(json.loads(json.dumps(d.state_dict())))
    assert e.rates == {B: 60e6} and e.observe(A, 150.0, rate=100e6)  # 1 MiB achieving 1.67x what 4 MiB did
    f = RegimeDetector(0.15, rate_rise=0.5)
    f.load_state_dict(json.loads(json.dumps(e.state_dict())))
    assert f.rule == "rate"
    assert not RegimeDetector(0.15, rate_rise=0.5).observe(A, 1.0, rate=0.0)  # no message: no rate


@pytest.mark.parametrize("bad", [0, -1, 100, float("inf"), True, "0.5"])
def test_detector_rejects_a_bad_rate_rise(bad):
    with pytest.raises(ValueError, match=r"rate_rise must be None or a number in \(0, 100\), but got rate_rise="):
        RegimeDetector(0.15, rate_rise=bad)


def test_detector_state_round_trips():
    d = RegimeDetector()
    d.observe(A, 100.0)
    e = RegimeDetector()
    e.load_state_dict(json.loads(json.dumps(d.state_dict())))
    assert e.observe(A, 50.0)  # the measurement that shows the change starts the new regime
    d = RegimeDetector()
    d.observe(A, 100.0)
    assert not d.observe(A, 50.0, step=math.log(2.0)) and d.settling  # a step inside: that measurement is dropped
    f = RegimeDetector()
    f.load_state_dict(json.loads(json.dumps(d.state_dict())))
    assert f.settling and f.observe(A, 49.0) and f.seen == {A: [49.0]}
    # a state saved when the detector had a settle mode loads (the key is ignored)
    g = RegimeDetector()
    g.load_state_dict(dict(json.loads(json.dumps(d.state_dict())), settle=False))
    assert g.state_dict() == d.state_dict()


@pytest.mark.parametrize("bad", [0, -0.1, 10, float("nan"), True, "0.2"])
def test_detector_rejects_bad_threshold(bad):
    with pytest.raises(ValueError, match=r"threshold must be a number in \(0, 10\), but got threshold="):
        RegimeDetector(bad)


def test_guard_counts_time_lost_against_the_start_and_sends_the_run_back():
    g = HarmGuard(A, budget=0.03, span=50)
    g.record(10, A, 100.0, 10, False)
    assert g.reference == 100.0 and g.allowance() == pytest.approx(1.5)
    g.record(20, B, 110.0, 10, False)  # faster: gains are banked
    assert g.cost() < 0 and g.trip(20, B) is None
    g.record(30, B, 80.0, 10, False)  # 10 * (100/80 - 1) = 2.5 lost, net 1.59 > 1.5 allowed
    why = g.trip(30, B)
    assert why is not None and why.startswith("guard:") and g.holding(31) and not g.holding(80)


def test_guard_reference_is_the_mean_of_the_starts_windows_in_these_conditions():
    g = HarmGuard(A, budget=0.03, span=50)
    g.record(10, A, 100.0, 10, False)
    g.record(20, A, 110.0, 10, False)
    assert g.reference == pytest.approx(105.0)
    g.record(30, B, 105.0, 10, False)  # as fast as the start's mean: no cost, though slower than its last window
    assert g.cost() == pytest.approx(0.0)
    for i in range(4):
        g.record(40 + 10 * i, A, 90.0, 10, False)
    assert g.reference == pytest.approx((110.0 + 4 * 90.0) / 5)  # the start's last 50 iterations
    g.record(80, B, 50.0, 10, True)  # a change seen at B: carried in proportion to B's own
    assert g.reference == pytest.approx(94.0 * 50.0 / 105.0)
    g.record(90, A, 60.0, 10, False)  # measured in the new conditions: nothing of the old ones is averaged in
    assert g.reference == 60.0
    h = HarmGuard(A, budget=0.03, span=50)
    h.load_state_dict(json.loads(json.dumps(g.state_dict())))
    h.record(100, A, 70.0, 10, False)
    assert h.reference == pytest.approx(65.0)
    last = HarmGuard(A, budget=0.03, span=50, reference_iters=1)  # the start's last window alone
    last.record(10, A, 100.0, 10, False)
    last.record(20, A, 110.0, 10, False)
    assert last.reference == 110.0


def test_guard_carries_its_reference_across_a_change_and_clears_its_span():
    g = HarmGuard(A, budget=0.03, span=50)
    g.record(10, A, 100.0, 10, False)
    g.record(20, B, 50.0, 10, False)
    assert g.trip(20, B) is not None and g.holding(25)
    g.record(30, A, 40.0, 5, True)  # back at the start: it is slow too, so conditions changed
    assert g.reference == 40.0 and not g.holding(31) and g.cost() == 0
    g.record(40, B, 30.0, 10, False)
    g.record(50, B, 15.0, 10, True)  # a change seen at B: the reference follows B's own change
    assert g.reference == pytest.approx(20.0)


def test_16_bit_configurations_keep_their_precision_through_the_state():
    # wire="auto" measures one partition and credit at two precisions: two configurations, also after a restore
    a16 = Config(MiB, MiB, "bf16")
    d = RegimeDetector(0.15, rate_rise=0.5)
    d.observe(A, 100.0, rate=50e6)
    assert not d.observe(a16, 180.0, rate=60e6)
    e = RegimeDetector(0.15, rate_rise=0.5)
    e.load_state_dict(json.loads(json.dumps(d.state_dict())))
    assert e.seen == {A: [100.0], a16: [180.0]} and e.rates == {A: 50e6, a16: 60e6}
    assert not e.observe(a16, 175.0) and e.observe(A, 180.0)  # each compared with itself only
    g = HarmGuard(A, budget=0.03, span=50)
    g.record(10, A, 100.0, 10, False)
    g.record(20, a16, 60.0, 10, False)
    assert g.trip(20, a16) is not None
    h = HarmGuard(A, budget=0.03, span=50)
    h.load_state_dict(json.loads(json.dumps(g.state_dict())))
    assert h.state_dict() == g.state_dict() and h._tripped is not None and h._tripped[0] == a16


def test_guard_state_round_trips():
    g = HarmGuard(A)
    g.record(10, A, 100.0, 10, False)
    g.record(20, B, 60.0, 10, False)
    g.trip(20, B)
    h = HarmGuard(A)
    h.load_state_dict(json.loads(json.dumps(g.state_dict())))
    assert h.state_dict() == g.state_dict() and h.holding(21)


@pytest.mark.parametrize("kw,match", [({"budget": 0}, "budget must be"), ({"budget": 1.5}, "budget must be"),
                                      ({"span": 0}, "span must be"),
                                      ({"measure_after": -1}, "measure_after must be a non-negative integer"),
                                      ({"measure_after": 2.5}, "measure_after must be a non-negative integer"),
                                      ({"reference_iters": 0}, "reference_iters must be")])
def test_guard_rejects_bad_arguments(kw, match):
    with pytest.raises(ValueError, match=match):
        HarmGuard(A, **kw)


class _Reckless(Tuner):
    """Always moves to the slowest configuration it knows of (a tuner that does harm)."""

    name = "reckless"

    def observe(self, obs):
        return Decision(self.worst, "reckless") if obs.config != self.worst else None


MODEL = sim.get_model("resnet50")
CLUSTER = sim.Cluster.from_gbps(4, 2, "ps")
SPACE = SearchSpace.grid([64 * KiB, MiB, 4 * MiB], [1, 4])


def _run(tuner: Tuner, start: Config, iters: int = 200, **kw) -> tuple[list[tuple[int, float]], Controller]:
    """The controller over the simulator, 5 iterations a check; (iteration, seconds) of every check."""
    ctl = Controller(tuner, SPACE, start, "ps", MODEL.layer_bytes, window_iters=10, warmup_iters=0, **kw)
    cur, out = ctl.current, []
    for c in range(iters // 5):
        res = sim.simulate(MODEL, CLUSTER, cur, n_iters=5, seed=c)
        out.append(((c + 1) * 5, float(res.iter_time_s.sum())))
        d = ctl.decide((c + 1) * 5, res.window_stats())
        if d is not None:
            ctl.applied((c + 1) * 5, d.config)
            cur = d.config
    return out, ctl


def test_the_guard_bounds_what_a_harmful_tuner_costs_every_50_iterations():
    speeds = {c: sim.simulate(MODEL, CLUSTER, c, n_iters=5, seed=0).samples_per_s for c in SPACE}
    worst = min(speeds, key=speeds.__getitem__)
    start = max(speeds, key=speeds.__getitem__)
    assert speeds[worst] < 0.8 * speeds[start], "the scenario needs a harmful configuration"
    reckless = _Reckless()
    reckless.worst = worst
    base, _ = _run(make_tuner("static"), start)
    guarded, ctl = _run(reckless, start)
    assert ctl.guard is not None and ctl.guard.trips >= 2
    assert any(h.get("reason", "").startswith("guard:") for h in ctl.history)
    # over every 50-iteration span: the guard's budget plus at most one check (5 iterations) of the harm it reacts to
    check_cost = 5 * (speeds[start] / speeds[worst] - 1)
    for end in range(50, 201, 5):
        t_g = sum(t for it, t in guarded if end - 50 < it <= end)
        t_b = sum(t for it, t in base if end - 50 < it <= end)
        assert t_g / t_b - 1 <= 0.03 + check_cost / 50 + 0.01, (end, t_g / t_b)
    # without the guard the same tuner loses far more
    reckless2 = _Reckless()
    reckless2.worst = worst
    free, _ = _run(reckless2, start, harm_budget=None)
    assert sum(t for _, t in free) > 1.2 * sum(t for _, t in guarded)


def test_an_offline_search_can_switch_the_guard_off():
    t = make_tuner("grid")
    t.guarded = False
    ctl = Controller(t, SPACE, BYTESCHEDULER_DEFAULT, "ps", MODEL.layer_bytes)
    assert ctl.guard is None
    assert Controller(make_tuner("grid"), SPACE, BYTESCHEDULER_DEFAULT, "ps", MODEL.layer_bytes).guard is not None


def test_a_trip_caused_by_the_conditions_ends_its_hold_once_the_start_is_measured_again():
    g = HarmGuard(A, budget=0.03, span=50)
    g.record(10, A, 100.0, 10, False)
    g.record(20, B, 60.0, 10, False)  # the link dropped as the tuner moved: B looks 40% slower
    assert g.trip(20, B) is not None and g.holding(25)
    g.record(30, A, 58.0, 10, False)  # back at the start: just as slow (no detector signal: A's last run is old)
    assert not g.holding(31) and g.reference == 58.0
    g.record(40, B, 60.0, 10, False)
    g.record(50, B, 30.0, 10, False)  # now B really is slower than the start
    assert g.trip(50, B) is not None
    g.record(60, A, 58.0, 10, False)  # the start is faster than B was: the hold stays
    assert g.holding(61)


class _Crashes(Tuner):
    name = "crashes"

    def observe(self, obs):
        raise IndexError("list index out of range")


def test_a_tuner_that_raises_keeps_the_configuration_and_training_goes_on():
    with pytest.warns(UserWarning, match=r"tuner 'crashes' failed at iteration \d+ \(IndexError: list index out of range\); keeping"):
        out, ctl = _run(_Crashes(), SPACE[0], iters=40)
    assert ctl.current == SPACE[0] and len(out) == 8


def test_guard_carries_its_reference_across_a_change_seen_after_a_trial():
    # B runs, a trial of another configuration, back to B: the detector compares B with B's last speed, and so does the guard
    c = Config(16 * MiB, 16 * MiB)
    g = HarmGuard(A, budget=0.03, span=50)
    g.record(5, A, 100.0, 5, False)
    g.record(10, B, 110.0, 5, False)
    g.record(15, c, 90.0, 5, False)  # the trial, ended at its first check
    g.record(20, B, 55.0, 5, True)  # back at B: half its speed, conditions changed
    assert g.reference == pytest.approx(50.0) and g.trip(20, B) is None


def test_guard_measures_a_carried_reference_once_after_a_change():
    g = HarmGuard(A, budget=0.03, span=50)
    g.record(10, A, 100.0, 10, False)
    assert g.carried_since is None and g.measure(40, B) is None  # measured in these conditions
    g.record(20, B, 100.0, 10, False)
    g.record(30, B, 170.0, 10, True)  # B 1.7x faster: so is the start, by assumption
    assert g.reference == pytest.approx(170.0) and g.carried_since == 30
    assert g.measure(75, B) is None  # not yet: 50 iterations after the change
    why = g.measure(80, B)
    assert why is not None and why.startswith(f"guard: {A}'s speed in these conditions was carried across the change at "
                                              f"iteration 30") and g.measures == 1 and not g.holding(56)
    assert g.measure(90, B) is None  # asked once
    g.record(90, A, 181.0, 10, False)  # the start measured: 1.81x, not 1.7x
    assert g.reference == 181.0 and g.carried_since is None
    g.record(100, B, 170.0, 10, False)
    assert g.cost() == pytest.approx(10 * (181 / 170 - 1))  # what the carried reference hid


def test_guard_measures_after_a_change_seen_in_a_configuration_new_to_it_and_not_at_the_start():
    c = Config(16 * MiB, 16 * MiB)
    g = HarmGuard(A, budget=0.03, span=50, measure_after=0)
    g.record(10, A, 100.0, 10, False)
    g.record(20, c, 50.0, 10, True)  # a change seen at c, never measured before it: the reference is from before
    assert g.reference == 100.0 and g.measure(20, c) is not None
    g.record(30, A, 60.0, 10, True)  # a change seen at the start measures it there
    assert g.carried_since is None and g.measure(30, c) is None
    h = HarmGuard(A, budget=0.03, span=50, measure_after=None)  # carried until the run comes back to the start
    h.record(10, A, 100.0, 10, False)
    h.record(20, B, 100.0, 10, False)
    h.record(30, B, 50.0, 10, True)
    assert h.carried_since == 30 and h.measure(1000, B) is None


class _Scripted(Tuner):
    """Decides ``moves`` one window at a time (``None``: stays), then stays; keeps every observation it is given."""

    name = "scripted"

    def __init__(self, moves):
        self.moves, self.seen = list(moves), []

    def observe(self, obs):
        self.seen.append(obs)
        move = self.moves.pop(0) if self.moves else None
        return None if move is None else Decision(move, "scripted")


def _check_at(speed):
    """One rank's statistics of a 5-iteration check at ``speed``."""
    return [WindowStats(5, 0.1, speed, 0.01, (0.001, 0.002), 1000, 2, 0.05, 2e4)]


def test_a_change_seen_at_the_check_where_the_guard_trips_still_reaches_the_tuner():
    fast, slow = Config(2 * MiB, 2 * MiB), Config(64 * KiB, 64 * KiB)
    tuner = _Scripted([fast, slow, None, Config(MiB, 4 * MiB)])
    ctl = Controller(tuner, SearchSpace([A, fast, slow, Config(MiB, 4 * MiB)]), A, "allreduce", [1000, 1000],
                     window_iters=10, check_iters=5, warmup_iters=0)
    for it, speed in [(5, 100.0), (10, 100.0), (15, 200.0), (20, 200.0), (25, 70.0), (30, 70.0)]:
        d = ctl.decide(it, _check_at(speed))
        if d is not None:
            ctl.applied(it, d.config)
    assert ctl.current == slow  # gains banked at `fast` keep the guard quiet at `slow` so far
    d = ctl.decide(35, _check_at(35.0))  # the link halved: `slow` runs at half its speed, and the guard trips on it
    assert d is not None and d.config == A and d.reason.startswith("guard:")
    assert tuner.seen[-1].iteration == 35 and tuner.seen[-1].regime_changed  # the tuner learns of the change
    entry = ctl.history[-1]
    assert entry["regime_changed"] and entry["new_config"] == A.to_dict()
    assert entry["held"].startswith(f"guard holds {A}: {Config(MiB, 4 * MiB)} not applied")


def test_the_guard_waits_for_the_detector_to_judge_a_suspected_change():
    g = HarmGuard(A, budget=0.03, span=50)
    g.record(10, A, 100.0, 10, False)
    g.record(20, B, 97.0, 10, False)
    g.record(25, B, 60.0, 5, False, unjudged=True)  # far slower, but the detector has not judged it
    assert g.cost() == pytest.approx(10 * (100 / 97 - 1)) and g.trip(25, B) is None
    h = HarmGuard(A)
    h.load_state_dict(json.loads(json.dumps(g.state_dict())))
    assert h._unjudged == (25, B, 60.0, 5)
    g.record(30, B, 60.0, 5, True)  # confirmed: the reference carried from B's speed before the suspicion
    assert g.reference == pytest.approx(100 * 60 / 97) and g.trip(30, B) is None
    assert g.cost() == pytest.approx(5 * (100 / 97 - 1))  # the costs before it cleared; B is as far behind as it was
    h.record(30, B, 97.0, 5, False)  # noise: the held check counts as any other, and the guard trips on it
    assert h.cost() == pytest.approx(10 * (100 / 97 - 1) + 5 * (100 / 60 - 1) + 5 * (100 / 97 - 1))
    assert h.trip(30, B) is not None


def _suspected(then):
    """A run moved to ``fast`` (3% slower than the start), whose speed falls 20% at iteration 25 and is ``then`` at 30."""
    fast = Config(2 * MiB, 2 * MiB)
    tuner = _Scripted([fast])
    ctl = Controller(tuner, SearchSpace([A, fast]), A, "allreduce", [1000, 1000],
                     window_iters=10, check_iters=5, warmup_iters=0)
    decisions = []
    for it, speed in [(5, 100.0), (10, 100.0), (15, 97.0), (20, 97.0), (25, 78.0), (30, then)]:
        d = ctl.decide(it, _check_at(speed))
        decisions.append(d)
        if d is not None:
            ctl.applied(it, d.config)
    return ctl, tuner, decisions


def test_a_guard_trip_waits_while_the_detector_holds_a_suspicion():
    # 78 after 97 is a suspicion (within twice the detector's threshold), and its cost alone would trip the guard
    ctl, tuner, decisions = _suspected(78.0)
    assert decisions[4] is None and ctl.guard.trips == 0  # nothing moves on the suspicion: the detector judges it next
    assert decisions[5] is None and tuner.seen[-1].iteration == 30 and tuner.seen[-1].regime_changed  # confirmed
    assert ctl.current.partition_bytes == 2 * MiB and ctl.guard.trips == 0
    # noise instead: the held check's cost counts, and the guard trips one check later
    ctl, tuner, decisions = _suspected(97.0)
    assert decisions[4] is None and decisions[5] is not None and decisions[5].reason.startswith("guard:")
    assert ctl.guard.trips == 1 and not any(o.regime_changed for o in tuner.seen)


def test_a_trial_cut_short_by_the_guard_is_still_measured_by_the_tuner():
    slow = Config(64 * KiB, 64 * KiB)
    tuner = _Scripted([slow, Config(MiB, 4 * MiB)])
    ctl = Controller(tuner, SearchSpace([A, slow, Config(MiB, 4 * MiB)]), A, "allreduce", [1000, 1000],
                     window_iters=10, check_iters=5, warmup_iters=0)
    for it in (5, 10):
        d = ctl.decide(it, _check_at(100.0))
    assert d is not None and d.config == slow
    ctl.applied(10, slow)
    d = ctl.decide(15, _check_at(50.0))  # half a window at half the speed: 2.5 iterations lost, more than the 1.5 allowed
    assert d is not None and d.config == A and d.reason.startswith("guard:")
    seen = tuner.seen[-1]  # the trial's half window reached the tuner as a measurement
    assert (seen.iteration, seen.config, seen.speed, seen.window_share, seen.regime_changed) == (15, slow, 50.0, 0.5, False)
    assert ctl.history[-1]["iterations"] == 5
    assert ctl.history[-1]["held"] == f"guard holds {A}: {Config(MiB, 4 * MiB)} not applied (scripted)"
    assert ctl.n_windows == 2


def test_guard_trips_back_to_the_start_even_past_a_faster_configuration():
    c = Config(16 * MiB, 16 * MiB)
    g = HarmGuard(A, budget=0.03, span=50)
    g.record(10, A, 100.0, 10, False)
    g.record(20, B, 113.0, 10, False)  # a configuration 13% faster than the start: gains banked
    g.record(30, c, 50.0, 10, False)  # a trial twice slower: 10 lost, 1.5 banked, 1.5 allowed
    why = g.trip(30, c)
    assert why is not None and g.holding(31) and why.endswith("back to the starting configuration for 50 iterations")
    # a state saved when the guard could trip elsewhere loads (the key is ignored)
    r = HarmGuard(A)
    r.load_state_dict(dict(json.loads(json.dumps(g.state_dict())), refuge=[4 * MiB, 4 * MiB]))
    assert r.state_dict() == g.state_dict() and r.holding(31)


def test_the_controller_holds_the_start_a_trip_went_to():
    speeds = {c: sim.simulate(MODEL, CLUSTER, c, n_iters=5, seed=0).samples_per_s for c in SPACE}
    order = sorted(speeds, key=speeds.__getitem__)
    worst, start, best = order[0], order[len(order) // 2], order[-1]
    assert speeds[best] > 1.05 * speeds[start] and speeds[worst] < 0.8 * speeds[start]

    class _FindsThenHarms(Tuner):
        name = "finds-then-harms"

        def observe(self, obs):
            return Decision(best, "found") if obs.config == start else (Decision(worst, "harm") if obs.config == best else None)

    _, ctl = _run(_FindsThenHarms(), start, iters=100)
    trips = [h for h in ctl.history if h.get("reason", "").startswith("guard:")]
    assert trips and trips[0]["new_config"] == start.to_dict()
    held = [h for h in ctl.history if "held" in h]
    assert held and all(h["held"].startswith(f"guard holds {start}") for h in held)


# ------------------------------------------------------------ the step rule: a change inside one measurement
def test_within_step_finds_the_largest_step_with_two_iterations_or_more_on_each_side():
    from autobyte.core.regime import within_step

    assert within_step([0.1] * 5) == pytest.approx(0.0)
    assert within_step([0.1, 0.1, 0.2, 0.2, 0.2]) == pytest.approx(math.log(2))  # slower: positive
    assert within_step([0.2, 0.2, 0.2, 0.1, 0.1]) == pytest.approx(-math.log(2))  # faster: negative
    # one slow iteration at an end is averaged with another on its side, never alone
    assert within_step([0.1, 0.1, 0.1, 0.1, 0.3]) == pytest.approx(math.log(0.2 / 0.1))
    assert within_step([0.1, 0.1, 0.3]) == 0.0  # fewer than 4 iterations: nothing to read
    assert within_step([0.1, 0.1, 0.0, 0.2]) == 0.0 and within_step([0.1, float("nan"), 0.1, 0.1]) == 0.0
    assert within_step([0.1] * 3 + [0.2] * 3, min_side=3) == pytest.approx(math.log(2))


def test_detector_step_rule_drops_the_mixed_measurement_and_starts_the_regime_at_the_next():
    d = RegimeDetector(0.15)
    assert d.step_change == 0.5
    assert not d.observe(A, 100.0)
    assert not d.observe(A, 101.0, step=math.log(1.4))  # a 40% step: below 50%
    assert not d.observe(B, 80.0, step=math.log(2.0)) and d.settling and d.rule == "step"  # a configuration new here too
    assert d.seen == {}
    assert d.observe(B, 50.0)  # the next measurement starts the new regime
    assert d.seen == {B: [50.0]} and not d.settling
    off = RegimeDetector(0.15, step_change=None)
    off.observe(A, 100.0)
    assert not off.observe(A, 101.0, step=math.log(3.0)) and not off.settling
    with pytest.raises(ValueError, match=r"step_change must be None or a number in \(0, 100\), but got step_change=-1"):
        RegimeDetector(0.15, step_change=-1)


# ------------------------------------------------------------ noise_z: the speed threshold follows the job's noise
def test_pair_scatter_is_the_normal_spread_of_the_median_gap():
    from autobyte.core.regime import pair_scatter

    assert pair_scatter([]) == 0.0
    assert pair_scatter([0.1, -0.3, 0.2]) == pytest.approx(1.4826 * 0.2)  # gaps read as magnitudes
    assert pair_scatter([0.1, 0.2, 0.3, 5.0]) == pytest.approx(1.4826 * 0.25)  # one change among them moves it little


def _noisy(d, speeds):
    """Feed ``A`` at each of ``speeds``; the indices where the detector saw a change."""
    return [i for i, s in enumerate(speeds) if d.observe(A, s)]


def test_noise_z_raises_the_threshold_to_the_jobs_own_scatter_and_no_higher_than_the_cap():
    from autobyte.core.regime import NOISE_CAP, PAIR_MIN

    # checks of one configuration 8-13% apart, nothing changed, then one 22% off and then a halving
    speeds = [100.0, 108.0, 97.0, 109.0, 96.0, 108.0, 99.0, 110.0, 100.0] + [122.0, 100.0] + [50.0]
    fixed = RegimeDetector(0.15, confirm=None)
    assert _noisy(fixed, speeds) == [9, 10, 11]  # the 22% check, the one after it (its pair), the halving
    assert len(fixed.gaps) == 0  # without noise_z no pair is kept
    assert fixed.speed_threshold() == pytest.approx(math.log1p(0.15))
    d = RegimeDetector(0.15, noise_z=3.0, confirm=None)
    assert _noisy(d, speeds) == [11]  # the odd check reads as noise there; the halving is still a change
    assert len(d.gaps) >= PAIR_MIN and max(d.gaps) < math.log(1.25)  # the halving's pair is not kept as noise
    assert math.log1p(0.15) < d.speed_threshold() <= math.log1p(NOISE_CAP)
    # a quiet host keeps the fixed threshold
    quiet = RegimeDetector(0.15, noise_z=3.0, confirm=None)
    assert _noisy(quiet, [100.0, 101.0, 99.0, 100.5, 99.5, 100.0, 101.0, 100.0, 120.0]) == [8]
    assert quiet.speed_threshold() == pytest.approx(math.log1p(0.15))


def test_noise_z_needs_pair_min_pairs_and_caps_the_threshold():
    from autobyte.core.regime import NOISE_CAP, PAIR_MIN

    d = RegimeDetector(0.15, noise_z=3.0, confirm=None, reference_memory=1)  # each pair's gap: 10%
    for s in [100.0, 110.0][: 2] * 3:  # 5 pairs of 10%: not yet enough to read a scatter
        d.observe(A, s)
    assert len(d.gaps) == PAIR_MIN - 1 and d.speed_threshold() == pytest.approx(math.log1p(0.15))
    d.observe(A, 100.0)
    assert len(d.gaps) == PAIR_MIN and d.speed_threshold() == pytest.approx(math.log1p(NOISE_CAP))  # 3 x 0.14 > cap
    assert d.observe(A, 100.0 * (1 + NOISE_CAP) * 1.01)  # past the cap: a change on any host


def test_noise_z_pairs_live_across_regimes_and_in_the_state():
    d = RegimeDetector(0.15, noise_z=3.0)
    _noisy(d, [100.0, 108.0, 97.0, 109.0, 96.0, 108.0, 99.0])
    assert d.observe(A, 40.0)  # a change: the pairs stay, the references go
    assert d.seen == {A: [40.0]} and len(d.gaps) == 6
    e = RegimeDetector(0.15, noise_z=3.0)
    e.load_state_dict(json.loads(json.dumps(d.state_dict())))
    assert list(e.gaps) == pytest.approx(list(d.gaps)) and e.speed_threshold() == pytest.approx(d.speed_threshold())
    assert d.state_dict()["noise_z"] == 3.0


def test_a_moderate_speed_change_is_confirmed_by_the_next_measurement_of_its_configuration():
    d = RegimeDetector(0.15)  # confirm=2.0: changes within 2 thresholds (log) wait for the next measurement
    assert not d.observe(A, 100.0)
    assert not d.observe(A, 80.0) and d.suspect is not None and d.suspect[0] == A  # -20%: suspected
    assert d.seen == {A: [100.0]}  # the reference stays the measurement before
    assert d.observe(A, 79.0) and d.rule == "speed" and d.seen == {A: [79.0]}  # still beyond, same side: the change
    assert d.suspect is None


def test_a_suspicion_the_next_measurement_denies_is_noise_and_raises_the_threshold():
    d = RegimeDetector(0.15, noise_z=3.0, reference_memory=1)  # each pair's gap against the last alone
    for s in [100.0, 104.0, 100.0, 104.0, 100.0, 104.0, 100.0]:
        assert not d.observe(A, s)
    n = len(d.gaps)
    assert not d.observe(A, 80.0)  # suspected
    assert not d.observe(A, 101.0) and d.suspect is None  # back: noise
    assert len(d.gaps) == n + 2 and max(d.gaps) == pytest.approx(math.log(100.0 / 80.0))  # the suspicion's gap kept
    # a suspicion of a rise followed by a fall beyond the threshold (the other side) is no change either
    e = RegimeDetector(0.15)
    e.observe(A, 100.0)
    assert not e.observe(A, 120.0) and not e.observe(A, 84.0) and e.suspect is None


def test_a_large_change_counts_at_once_and_another_configuration_drops_the_suspicion():
    d = RegimeDetector(0.15)
    d.observe(A, 100.0)
    assert d.observe(A, 60.0)  # -40%: log 0.51 > 2 x log 1.15: at once
    d.observe(B, 50.0)
    assert not d.observe(A, 75.0) and d.suspect is not None  # +25% on A: suspected
    assert not d.observe(B, 50.0) and d.suspect is None  # B measured: A's suspicion goes unjudged
    assert d.seen[A][-1] == 60.0
    off = RegimeDetector(0.15, confirm=None)
    off.observe(A, 100.0)
    assert off.observe(A, 80.0)  # without confirm: at once
    # the suspicion lives in the state
    d.observe(A, 48.0)
    assert d.suspect is not None
    e = RegimeDetector(0.15)
    e.load_state_dict(json.loads(json.dumps(d.state_dict())))
    assert e.suspect == d.suspect and e.observe(A, 47.0)


@pytest.mark.parametrize("bad", [0, 0.5, 100, float("nan"), True, "2"])
def test_detector_rejects_a_bad_confirm(bad):
    with pytest.raises(ValueError, match=r"confirm must be None or a number in \[1, 100\), but got confirm="):
        RegimeDetector(0.15, confirm=bad)


@pytest.mark.parametrize("bad", [0, -1, 100, float("nan"), True, "3"])
def test_detector_rejects_a_bad_noise_z(bad):
    with pytest.raises(ValueError, match=r"noise_z must be None or a number in \(0, 100\), but got noise_z="):
        RegimeDetector(0.15, noise_z=bad)


def test_the_controller_reads_noise_z_from_its_tuner():
    class _Still(Tuner):
        name = "still"
        noise_z = 3.0

        def observe(self, obs):
            return None

    assert Tuner.noise_z is None
    def ctl(tuner):
        return Controller(tuner, SPACE, A, "ps", MODEL.layer_bytes)

    assert ctl(make_tuner("static")).detector.noise_z is None
    assert ctl(_Still()).detector.noise_z == 3.0
    _Still.noise_z = -1.0
    with pytest.raises(ValueError, match=r"noise_z must be None or a number in \(0, 100\), but got noise_z=-1.0"):
        ctl(_Still())


def test_the_controller_runs_one_window_of_the_start_where_its_speed_was_carried():
    tuner = _Scripted([B] + [None] * 8 + [B])
    ctl = Controller(tuner, SearchSpace([A, B]), A, "allreduce", [1000, 1000], window_iters=10, check_iters=5,
                     warmup_iters=0)
    moves = []
    speeds = {A: [100.0] * 2 + [181.0] * 2, B: [100.0] * 4 + [170.0] * 20}
    it = 0
    while it < 110:
        it += 5
        d = ctl.decide(it, _check_at(speeds[ctl.current].pop(0)))
        if d is not None:
            moves.append((it, d.config, d.reason))
            ctl.applied(it, d.config)
    # the tuner moved to B at 10; the link changed at 35 (seen at B: 100 -> 170); at the first window boundary 50
    # iterations later the guard runs the start for one window; the tuner's next decision (back to B) is applied at once
    assert [(i, c) for i, c, _ in moves] == [(10, B), (85, A), (95, B)]
    assert moves[1][2].startswith(f"guard: {A}'s speed in these conditions was carried across the change at iteration 35")
    assert ctl.guard is not None and ctl.guard.reference == 181.0 and ctl.guard.measures == 1 and ctl.guard.trips == 0
    assert [(o.iteration, o.config, o.speed) for o in tuner.seen if o.config == A][-1] == (95, A, 181.0)  # the tuner too


class _CarriesTheReference(_Scripted):
    guard_measure_after = None


def test_a_tuner_can_leave_the_reference_carried():
    ctl = Controller(_CarriesTheReference([]), SearchSpace([A, B]), A, "allreduce", [1000, 1000])
    assert ctl.guard is not None and ctl.guard.measure_after is None
    assert Controller(_Scripted([]), SearchSpace([A, B]), A, "allreduce", [1000, 1000]).guard.measure_after == 50


def test_confirm_takes_its_lower_bound_inclusive():
    assert RegimeDetector(0.15, confirm=1).confirm == 1.0 and RegimeDetector(0.15, confirm=None).confirm is None
    from autobyte.core._checks import check_fraction
    assert check_fraction("x", 0.5, 1.0) == 0.5
    with pytest.raises(ValueError, match=r"x must be a number in \(0, 1\), but got x=0."):
        check_fraction("x", 0, 1.0)
    with pytest.raises(ValueError, match=r"x must be a number in \[2, 5\), but got x=1.5."):
        check_fraction("x", 1.5, 5.0, lowest=2.0)


def test_a_change_split_over_two_checks_is_measured_from_the_mean_of_the_last_two():
    # a tuned run's checks of one configuration on the CPU testbed when its link halved (threshold 0.41 in log units):
    # against the last check alone each step stays under the threshold; against the mean of the last two, the
    # second step is a suspicion and the next check confirms it
    checks = [432.0, 347.0, 251.0, 217.0, 225.0]
    last = RegimeDetector(0.5, reference_memory=1)
    assert [last.observe(A, v) for v in checks] == [False] * 5
    d = RegimeDetector(0.5)
    assert d.reference_memory == 2
    assert [d.observe(A, v) for v in checks[:3]] == [False] * 3 and d.suspect is not None
    assert d.reference(A) == pytest.approx(math.sqrt(432.0 * 347.0))  # the suspicion is not in the reference
    assert d.observe(A, 217.0) and d.rule == "speed" and d.seen == {A: [217.0]}
    assert not d.observe(A, 225.0) and d.reference(A) == pytest.approx(math.sqrt(217.0 * 225.0))
    d.observe(A, 230.0)
    assert d.seen == {A: [225.0, 230.0]}  # the last two only
    assert d.reference(B) is None
    # the references live in the state; a state saved with the last measurement alone still loads
    e = RegimeDetector(0.5)
    e.load_state_dict(json.loads(json.dumps(d.state_dict())))
    assert e.seen == d.seen
    e.load_state_dict({"last": [[A.partition_bytes, A.credit_bytes, 99.0]]})
    assert e.seen == {A: [99.0]}


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2", None])
def test_reference_memory_must_be_a_positive_integer(bad):
    with pytest.raises(ValueError, match="reference_memory"):
        RegimeDetector(0.15, reference_memory=bad)
