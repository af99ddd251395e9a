from __future__ import annotations

import math

import pytest

from autobyte.core import Config, SearchSpace, WindowStats
from autobyte.core.tuning import Controller, Decision, Observation, StaticTuner, Tuner


class Flip(Tuner):
    """Reconfigures to the other candidate whenever speed drops below 100."""

    name = "flip"

    def observe(self, obs: Observation) -> Decision | None:
        if obs.speed < 100:
            other = [c for c in self.space if c != obs.config][0]
            return Decision(other, "slow", predicted_speed=150.0)
        return None


def _w(speed: float, n_iters: int = 10) -> WindowStats:
    return WindowStats(n_iters, 0.1, speed, 0.01, (0.001, 0.002), 1000, 2, 0.05, 2e4)


SPACE = SearchSpace([Config(1000, 1000), Config(2000, 4000)])


def test_controller_decides_and_logs():
    c = Controller(Flip(), SPACE, SPACE[0], "allreduce", [400, 600], window_iters=10)
    assert c.decide(9, [_w(55), _w(50)]) is None  # 105 samples/s in all: keep
    d = c.decide(19, [_w(45), _w(50)])  # 95: slow (and within 15% of 105: the same conditions)
    assert d is not None and d.config == SPACE[1] and d.reason == "slow"
    assert c.history[-1]["new_config"] == SPACE[1].to_dict()
    c.applied(20, d.config)
    assert not c.counts(20) and not c.counts(21) and c.counts(22)
    state = c.state_dict()
    c2 = Controller(Flip(), SPACE, SPACE[0], "allreduce", [400, 600])
    c2.load_state_dict(state)
    assert c2.current == SPACE[1] and c2.history == c.history


def test_unusable_window_keeps_config_and_warns():
    c = Controller(StaticTuner(), SPACE, SPACE[0], "allreduce", [400, 600])
    with pytest.warns(UserWarning, match="unusable statistics"):
        assert c.decide(9, [_w(0.0), _w(0.0)]) is None
    with pytest.warns(UserWarning, match="zero iterations"):
        assert c.decide(9, [_w(10, n_iters=0)]) is None
    with pytest.warns(UserWarning, match="must be finite"):
        assert c.decide(9, [_w(float("nan"))]) is None


@pytest.mark.parametrize("kw, match", [({"window_iters": 0}, "window_iters must be a positive integer"), ({"warmup_iters": -1}, "warmup_iters must be a non-negative integer")])
def test_controller_bad_arguments(kw, match):
    with pytest.raises(ValueError, match=match):
        Controller(StaticTuner(), SPACE, SPACE[0], "allreduce", [1], **kw)


class _Keeps(StaticTuner):
    """Never moves; keeps every observation."""

    def __init__(self) -> None:
        self.seen: list[Observation] = []

    def observe(self, obs: Observation) -> Decision | None:
        self.seen.append(obs)
        return None


def test_checks_join_into_one_window_per_tuner_call():
    t = _Keeps()
    seen = t.seen
    c = Controller(t, SPACE, SPACE[0], "allreduce", [400, 600], window_iters=10)
    assert c.check_iters == 5 and not c.check_due(4) and c.check_due(5)
    assert Controller(StaticTuner(), SPACE, SPACE[0], "allreduce", [1], window_iters=5).check_iters == 5  # odd: whole windows
    assert c.decide(4, [_w(100, 5), _w(100, 5)]) is None and not seen  # half a window: wait
    c.decide(9, [_w(110, 5), _w(110, 5)])
    assert len(seen) == 1 and c.history[-1]["iterations"] == 10
    assert seen[0].speed == pytest.approx(2 * 105) and not seen[0].regime_changed  # 2 ranks, equal-length halves
    assert seen[0].link_busy == pytest.approx(0.1)  # each rank's messages in flight 0.05 s of each half's 0.5 s


def test_link_busy_is_the_busiest_ranks_share_of_the_time_capped_at_one():
    t = _Keeps()
    c = Controller(t, SPACE, SPACE[0], "allreduce", [400, 600], window_iters=10)
    busy = WindowStats(10, 0.1, 100, 0.01, (0.001, 0.002), 1000, 2, 0.7, 2e4)
    c.decide(9, [_w(100), busy])
    assert t.seen[-1].link_busy == pytest.approx(0.7)  # 0.7 s of the window's 1 s, against the other rank's 0.05
    over = WindowStats(10, 0.1, 100, 0.01, (0.001, 0.002), 1000, 2, 1.3, 2e4)  # overlapping messages counted twice
    c.decide(19, [over, over])
    assert t.seen[-1].link_busy == 1.0
    assert WindowStats(0, 0.0, 0, 0.0, (0.0,), 0, 0, 0.0, 0.0).busy_share == 0.0  # nothing measured: no share


class _Recorder(Flip):
    """Flip, keeping every observation."""

    def __init__(self) -> None:
        self.seen: list[Observation] = []

    def observe(self, obs: Observation) -> Decision | None:
        self.seen.append(obs)
        return super().observe(obs)


def _steady() -> tuple[_Recorder, Controller]:
    """A controller that has seen a full window at 100 samples/s and half a window at 99 (the same conditions)."""
    t = _Recorder()
    c = Controller(t, SPACE, SPACE[0], "allreduce", [400, 600], window_iters=10, warmup_iters=0)
    c.decide(9, [_w(100, 10)])  # a full window at 100 samples/s: keep
    assert c.decide(14, [_w(99, 5)]) is None and len(t.seen) == 1  # 1% slower: same conditions, wait
    return t, c


def test_a_speed_jump_under_one_config_is_acted_on_at_once():
    t, c = _steady()
    d = c.decide(19, [_w(60, 5)])  # 40% slower half a window later: conditions changed
    assert len(t.seen) == 2 and t.seen[1].regime_changed and t.seen[1].speed == pytest.approx(60)
    assert t.seen[1].features.layer_time_s.shape == (2, 1) and c.history[-1]["iterations"] == 5
    assert c.history[-1]["regime_changed"] is True and c.history[-1]["regime_rule"] == "speed"
    assert d is not None and d.config == SPACE[1]
    # after a reconfiguration, the first check has nothing to compare with
    c.applied(20, d.config)
    assert c.decide(24, [_w(300, 5)]) is None and len(t.seen) == 2


def test_a_check_that_mixes_both_regimes_unseen_starts_the_new_regime_and_is_its_reference():
    t = _Keeps()
    seen = t.seen
    c = Controller(t, SPACE, SPACE[0], "allreduce", [400, 600], window_iters=10, warmup_iters=0)
    c.decide(9, [_w(100, 10)])
    c.decide(14, [_w(70, 5)])  # the mixed check is the new regime's first
    assert len(seen) == 2 and seen[1].regime_changed and seen[1].speed == pytest.approx(70)
    # and its reference: the clean 55 against the mixed 70 (-21%, within twice the threshold) is a suspected change,
    # which the next check confirms: the tuner is not asked at the suspect check, and hears of the change at the next
    assert c.decide(19, [_w(55, 5)]) is None and len(seen) == 2 and c.detector.suspect is not None
    c.decide(24, [_w(55, 5)])
    assert len(seen) == 3 and seen[2].regime_changed and c.detector.seen == {SPACE[0]: [55]}
    assert seen[2].window_share == pytest.approx(0.5)  # the confirming check alone: the suspect one may mix both


def test_a_suspected_change_that_the_next_check_denies_is_noise_and_the_window_goes_on():
    t = _Keeps()
    c = Controller(t, SPACE, SPACE[0], "allreduce", [400, 600], window_iters=10, warmup_iters=0)
    c.decide(4, [_w(100, 5)])
    c.decide(9, [_w(100, 5)])
    assert len(t.seen) == 1 and not t.seen[0].regime_changed
    assert c.decide(14, [_w(81, 5)]) is None and c.detector.suspect is not None  # -19%: suspected
    c.decide(19, [_w(99, 5)])  # back: noise, and the window of the 2 checks completes as one
    assert len(t.seen) == 2 and not t.seen[1].regime_changed and c.detector.suspect is None
    assert 81 < t.seen[1].speed < 99
    assert c.history[-1]["iterations"] == 10 and "regime_changed" not in c.history[-1]
    c.decide(24, [_w(100, 5)])
    c.decide(29, [_w(60, 5)])  # -40%, beyond twice the threshold: a change at once
    assert t.seen[-1].regime_changed and t.seen[-1].speed == pytest.approx(60)


def test_a_check_that_steps_inside_is_kept_in_the_statistics_of_a_single_process():
    c = Controller(StaticTuner(), SPACE, SPACE[0], "allreduce", [400, 600], window_iters=5, warmup_iters=0, world_size=1)
    for i, speed in enumerate([100, 50, 50]):
        c.decide(5 * i + 4, [_w(speed, 5)], STEP_TIMES if i == 1 else ())
    assert [h["speed"] for h in c.history] == [100, 50, 50]


def test_regime_detection_can_be_switched_off():
    c = Controller(StaticTuner(), SPACE, SPACE[0], "allreduce", [400, 600], regime_change=None)
    c.decide(4, [_w(100, 5)])
    c.decide(9, [_w(10, 5)])
    c.decide(14, [_w(100, 5)])
    assert [h["iteration"] for h in c.history] == [9] and "regime_changed" not in c.history[0]


class _KeepsNoisy(_Keeps):
    noise_z = 3.0


@pytest.mark.parametrize("tuner, regime_change", [(_Keeps, 0.15), (_Keeps, 0.3), (_Keeps, None), (_KeepsNoisy, 0.15)])
def test_every_observation_carries_the_detectors_threshold_now(tuner, regime_change):
    t = tuner()
    c = Controller(t, SPACE, SPACE[0], "allreduce", [400, 600], window_iters=10, warmup_iters=0, regime_change=regime_change)
    for k in range(8):  # checks 10% apart: noise to the detector (the noisy tuner's threshold rises with it)
        c.decide(5 * k + 4, [_w(100 if k % 2 else 110, 5)])
    c.decide(44, [_w(50, 5)], STEP_TIMES)  # a check that steps inside: told at once, mixed
    if regime_change is None:
        assert c.detector is None and all(o.change_threshold is None for o in t.seen)
        return
    now = math.expm1(c.detector.speed_threshold())
    assert t.seen[-1].mixed and all(o.change_threshold == pytest.approx(now) for o in t.seen[-2:])
    if tuner is _KeepsNoisy:  # raised by the job's own scatter
        assert now > 0.15 and t.seen[0].change_threshold == pytest.approx(0.15)
    else:
        assert now == pytest.approx(regime_change)


def test_a_bad_check_is_dropped_not_merged():
    c = Controller(StaticTuner(), SPACE, SPACE[0], "allreduce", [400, 600])
    c.decide(4, [_w(100, 5)])
    with pytest.warns(UserWarning, match="must be finite"):
        assert c.decide(9, [_w(float("inf"), 5)]) is None
    c.decide(14, [_w(100, 5)])
    assert [h["iteration"] for h in c.history] == [14] and c.history[0]["iterations"] == 10


@pytest.mark.parametrize("kw, match", [
    ({"check_iters": 0}, "check_iters must be a positive integer"),
    ({"check_iters": 3}, "check_iters must divide window_iters=10, but got check_iters=3"),
    ({"check_iters": 20}, "check_iters must divide window_iters=10, but got check_iters=20"),
    ({"regime_change": 0.0}, r"regime_change must be a number in \(0, 10\) or None, but got regime_change=0.0"),
    ({"regime_change": float("nan")}, "regime_change must be a number"),
    ({"regime_change": True}, "regime_change must be a number"),
])
def test_controller_bad_check_arguments(kw, match):
    with pytest.raises(ValueError, match=match):
        Controller(StaticTuner(), SPACE, SPACE[0], "allreduce", [1], **kw)


def test_window_stats_merge():
    a = WindowStats(5, 0.1, 100.0, 0.02, (0.01, 0.02), 1000, 4, 0.2, 5000.0)
    b = WindowStats(5, 0.2, 50.0, 0.04, (0.03, 0.04), 1000, 4, 0.6, 1000 / 0.6)
    m = WindowStats.merge([a, b])
    assert m.n_iters == 10 and m.iter_time_s == pytest.approx(0.15)
    assert m.samples_per_s == pytest.approx((100 * 0.5 + 50 * 1.0) / 1.5)
    assert m.layer_backward_s == pytest.approx((0.02, 0.03)) and m.forward_s == pytest.approx(0.03)
    assert (m.bytes_sent, m.n_messages) == (2000, 8) and m.bandwidth_Bps == pytest.approx(2000 / 0.8)
    assert WindowStats.merge([a]) is a
    with pytest.raises(ValueError, match="at least one WindowStats"):
        WindowStats.merge([])
    with pytest.raises(ValueError, match=r"same number of tensors, but got \[1, 2\]"):
        WindowStats.merge([a, WindowStats(5, 0.1, 100.0, 0.02, (0.01,), 1000, 4, 0.2, 5000.0)])


class Abort(Tuner):
    """Ends a window at a check slower than ``limit``; records what it was offered."""

    name = "abort"

    def __init__(self, limit: float = 100.0) -> None:
        self.limit = limit
        self.checks: list[Observation] = []
        self.windows: list[Observation] = []

    def check(self, obs: Observation) -> Decision | None:
        self.checks.append(obs)
        if obs.speed < self.limit:
            return Decision([c for c in self.space if c != obs.config][0], "abort: slow", predicted_speed=150.0)
        return None

    def observe(self, obs: Observation) -> Decision | None:
        self.windows.append(obs)
        return None


def test_each_check_of_a_window_in_progress_is_offered_to_the_tuner():
    t = Abort()
    c = Controller(t, SPACE, SPACE[0], "allreduce", [400, 600], window_iters=10, harm_budget=None)
    assert c.decide(4, [_w(110, 5)]) is None  # fast enough: the window goes on
    assert len(t.checks) == 1 and t.checks[0].window_share == 0.5 and t.checks[0].speed == pytest.approx(110)
    assert not c.history and c.n_windows == 0
    c.decide(9, [_w(120, 5)])  # the window completes: observe, not check
    assert len(t.checks) == 1 and len(t.windows) == 1 and t.windows[0].window_share == 1.0
    assert t.windows[0].speed == pytest.approx(115)  # both halves, the one offered to check included


def test_a_decision_at_a_check_ends_the_window_there():
    t = Abort()
    c = Controller(t, SPACE, SPACE[0], "allreduce", [400, 600], window_iters=10, harm_budget=None)
    d = c.decide(4, [_w(90, 5)])
    assert d is not None and d.config == SPACE[1] and d.reason == "abort: slow"
    assert c.n_windows == 1 and c._pending == []
    entry = c.history[-1]
    assert entry["check"] is True and entry["iterations"] == 5 and entry["speed"] == pytest.approx(90)
    assert entry["new_config"] == SPACE[1].to_dict() and entry["reason"] == "abort: slow"
    c.applied(5, d.config)
    c.decide(11, [_w(200, 5)])
    c.decide(16, [_w(200, 5)])
    assert [w.iteration for w in t.windows] == [16]  # a fresh window under the new configuration


def test_tuners_without_check_see_whole_windows_only():
    seen: list[Observation] = []

    class Record(Flip):
        def observe(self, obs: Observation) -> Decision | None:
            seen.append(obs)
            return super().observe(obs)

    c = Controller(Record(), SPACE, SPACE[0], "allreduce", [400, 600], window_iters=10, harm_budget=None)
    assert c.decide(4, [_w(50, 5)]) is None  # slow, but Tuner.check's default waits for the window
    assert not seen and not c.history
    d = c.decide(9, [_w(50, 5)])
    assert d is not None and len(seen) == 1 and "check" not in c.history[-1]


def test_a_check_that_raises_warns_and_the_window_goes_on():
    class Crashes(Abort):
        name = "crashes"

        def check(self, obs: Observation) -> Decision | None:
            raise IndexError("list index out of range")

    t = Crashes()
    c = Controller(t, SPACE, SPACE[0], "allreduce", [400, 600], window_iters=10, harm_budget=None)
    with pytest.warns(UserWarning, match=r"tuner 'crashes' failed at iteration 4 \(check of a window in progress\) \(IndexError"):
        assert c.decide(4, [_w(90, 5)]) is None
    c.decide(9, [_w(90, 5)])
    assert len(t.windows) == 1


def test_one_process_offers_no_check():
    t = Abort()
    c = Controller(t, SPACE, SPACE[0], "allreduce", [400, 600], window_iters=10, world_size=1)
    assert c.decide(4, [_w(10, 5)]) is None and not t.checks


# ------------------------------------------------------------ a step inside one check (the detector's step rule)
STEP_TIMES = (0.1, 0.1, 0.2, 0.21, 0.19)  # rank 0's iteration times: 2x slower from the third iteration on


def test_a_check_that_steps_inside_is_dropped_and_the_tuner_told_at_once():
    t = _Keeps()
    seen = t.seen
    c = Controller(t, SPACE, SPACE[0], "allreduce", [400, 600], window_iters=10, warmup_iters=0)
    # a configuration new to the regime (a trial): no measurement to confirm a step against, so it counts at once
    c.decide(4, [_w(90, 5)], STEP_TIMES)
    assert len(seen) == 1 and seen[0].regime_changed and seen[0].mixed and seen[0].speed == pytest.approx(90)
    assert c.history[-1]["mixed"] is True and c.history[-1]["regime_rule"] == "step"
    assert c.detector.settling and c.detector.seen == {}  # no reference from the mixed check
    assert c.decide(9, [_w(50, 5)], (0.2,) * 5) is None and len(seen) == 1  # the new regime's reference, not told again
    assert c.detector.seen == {SPACE[0]: [50]}
    c.decide(14, [_w(51, 5)], (0.2,) * 5)
    assert len(seen) == 2 and not seen[1].regime_changed and not seen[1].mixed


def test_a_step_in_a_configuration_measured_before_waits_for_the_next_check():
    t = _Keeps()
    seen = t.seen
    c = Controller(t, SPACE, SPACE[0], "allreduce", [400, 600], window_iters=10, warmup_iters=0)
    c.decide(9, [_w(100, 10)])
    # 10% slower on average (below the speed rule's 15%), its iterations stepping 2x inside it: a suspicion
    assert c.decide(14, [_w(90, 5)], STEP_TIMES) is None and len(seen) == 1
    assert c.detector.suspect is not None and c.detector.suspect[2] and not c.detector.settling
    c.decide(19, [_w(50, 5)], (0.2,) * 5)  # the next check, half as fast: the change, told on that check alone
    assert len(seen) == 2 and seen[1].regime_changed and not seen[1].mixed and seen[1].speed == pytest.approx(50)
    assert c.history[-1]["regime_rule"] == "step" and c.detector.seen == {SPACE[0]: [50]}
    # a step the next check does not confirm was noise: the window goes on with both checks
    c.decide(24, [_w(50, 5)], (0.2,) * 5)
    assert c.decide(29, [_w(48, 5)], STEP_TIMES) is None and c.detector.suspect is not None
    c.decide(34, [_w(50, 5)], (0.2,) * 5)
    assert len(seen) == 3 and not seen[2].regime_changed and c.history[-1]["iterations"] == 15


def test_a_step_is_read_whatever_configuration_runs_and_not_without_times_or_below_the_threshold():
    t = _Keeps()
    c = Controller(t, SPACE, SPACE[0], "allreduce", [400, 600], window_iters=10, warmup_iters=0)
    c.decide(4, [_w(100, 5)], STEP_TIMES)  # the first check of a configuration: no speed to compare, the step shows it
    assert c.history[-1]["regime_rule"] == "step" and c.history[-1]["mixed"] is True
    t2 = _Keeps()
    c2 = Controller(t2, SPACE, SPACE[0], "allreduce", [400, 600], window_iters=10, warmup_iters=0)
    c2.decide(9, [_w(100, 10)])
    assert c2.decide(14, [_w(100, 5)], (0.1, 0.1, 0.13, 0.13, 0.13)) is None  # a 30% step: below 50%, half a window
    c2.decide(19, [_w(100, 5)])  # no times (a gathered window): nothing to read
    assert not any(h.get("regime_changed") for h in c2.history) and len(t2.seen) == 2


def test_a_tuner_without_the_step_rule():
    off = _Keeps()
    off.step_change = None
    c = Controller(off, SPACE, SPACE[0], "allreduce", [400, 600], window_iters=10, warmup_iters=0)
    c.decide(9, [_w(100, 10)])
    c.decide(14, [_w(90, 5)], STEP_TIMES)
    assert not any(h.get("regime_changed") for h in c.history) and c.detector.step_change is None
    bad = _Keeps()
    bad.step_change = 0
    with pytest.raises(ValueError, match=r"step_change must be None or a number in \(0, 100\), but got step_change=0"):
        Controller(bad, SPACE, SPACE[0], "allreduce", [400, 600])
