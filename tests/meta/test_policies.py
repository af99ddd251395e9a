"""The AutoByte tuner's policies, one by one, and the tuner they make (numpy only, real simulator)."""

from __future__ import annotations

import json
import logging
import math
import re

import numpy as np
import pytest

from autobyte import sim
from autobyte.core.space import Config, KiB, MiB, SearchSpace
from autobyte.core.tuning import Observation
from autobyte.meta import AutoByteTuner
from autobyte.meta._policies import Aborter, Equivalence, Explorer, Ledger, Mover, Payoff, Scorer, Verifier, _below

A, B, C, D = Config(MiB, MiB), Config(4 * MiB, 4 * MiB), Config(16 * MiB, 16 * MiB), Config(256 * KiB, 256 * KiB)
SPACE = SearchSpace([A, B, C, D])


# ---------------------------------------------------------------- ledger
def test_ledger_averages_a_configs_windows_and_keeps_regimes_apart():
    led = Ledger(memory=3)
    led.observe(10, A, 100.0, False)
    led.observe(20, A, 110.0, False)
    led.observe(30, B, 90.0, False)
    assert led.current.speeds(30) == {A: pytest.approx(105.0), B: 90.0}
    r = led.observe(40, A, 50.0, True)  # conditions changed
    assert r.ident == 1 and r.speeds(30) == {A: 50.0}
    assert led.regimes[0].durations == [40]


def test_ledger_recalls_a_past_regime_when_a_config_runs_as_it_did_there():
    led = Ledger()
    led.observe(10, A, 100.0, False)
    led.observe(20, B, 130.0, False)  # regime 0: B is the best
    led.observe(30, A, 40.0, True)  # regime 1 (slow link)
    led.observe(40, C, 45.0, False)
    r = led.observe(50, C, 150.0, True)  # a change seen on C: new, young regime
    assert led.recalled is None and r.ident == 2
    # the probe names the best of the regime before the one just left (regime 1 is ruled out)
    assert led.probe(C) == B
    r = led.observe(60, B, 128.0, False)  # B runs as in regime 0: the same conditions
    assert led.recalled is r and r.ident == 0
    assert r.speeds(30) == {A: 100.0, B: 129.0, C: 150.0}  # joined; B averaged over both


def test_ledger_probe_names_the_fastest_record_when_one_condition_sits_in_two_regimes():
    # fast conditions seen twice, never with a configuration in common: two regimes (0 and 2);
    # the probe after the next change names the faster record (regime 0's B), not the most recent one's
    led = Ledger()
    led.observe(10, B, 280.0, False)  # regime 0 (fast): B best
    led.observe(20, C, 100.0, True)  # regime 1 (slow)
    led.observe(30, A, 250.0, True)  # regime 2: fast again, but A was never measured in regime 0
    led.observe(40, D, 102.0, True)  # regime 3: slow again
    led.observe(50, D, 101.0, False)
    r = led.observe(60, D, 240.0, True)  # a change: regime 4, young; regime 3 was just left
    assert r.ident == 4 and led.recalled is None
    assert led.probe(D) == B  # 280 (regime 0) beats 250 (regime 2, more recent)
    r = led.observe(70, B, 279.0, False)
    assert led.recalled is r and r.ident == 0


def test_ledger_without_recall_never_merges():
    led = Ledger(recall=False)
    led.observe(10, A, 100.0, False)
    led.observe(20, A, 40.0, True)
    r = led.observe(30, A, 100.0, True)
    assert led.recalled is None and r.ident == 2 and led.probe(B) is None


def test_ledger_forgets_stale_measurements_and_estimates_the_horizon():
    led = Ledger(stale_windows=2, default_horizon=123)
    assert led.horizon(0) == 123  # nothing has ended yet
    led.observe(10, A, 100.0, False)
    for it in (20, 30, 40):
        led.observe(it, B, 90.0, False)
    assert led.current.speeds(2) == {B: 90.0}  # A's measurement is 3 windows old
    led.observe(50, B, 30.0, True)  # regime 0 lasted 50 iterations
    assert led.horizon(60) == pytest.approx(40.0)  # 50 typical, 10 spent, never seen before
    led.observe(100, B, 90.0, True)  # regime 1 lasted 50
    led.observe(110, B, 91.0, False)  # recalled regime 0
    assert led.current.ident == 0 and led.horizon(110) == pytest.approx(40.0 + 50.0)  # one more recurrence expected


def test_ledger_state_round_trips_through_json():
    led = Ledger()
    led.observe(10, A, 100.0, False)
    led.observe(20, B, 40.0, True)
    back = Ledger()
    back.load_state_dict(json.loads(json.dumps(led.state_dict())))
    assert back.state_dict() == led.state_dict() and back.current.ident == 1


@pytest.mark.parametrize("kw", [{"match": 0}, {"memory": 0}, {"stale_windows": "3"}, {"young_windows": -1}])
def test_ledger_rejects_bad_arguments(kw):
    name = next(iter(kw))
    with pytest.raises(ValueError, match=rf"{name} must be a number in"):
        Ledger(**kw)


def test_ledger_rejects_a_withdraw_that_is_not_a_bool():
    with pytest.raises(ValueError, match=r"withdraw must be True or False, but got withdraw='yes'"):
        Ledger(withdraw="yes")  # type: ignore[arg-type]


def _spike(led):
    """Regime 0: A 100 (two windows), B 90 (slower); then one check of A at 130 shows a change (regime 1)."""
    led.observe(10, A, 100.0, False)
    led.observe(20, B, 90.0, False)
    led.observe(30, A, 100.0, False)
    led.current.misses = 2
    r = led.observe(35, A, 130.0, True)
    assert r.ident == 1 and led.recalled is None and led.probe(A) is None  # regime 0 ruled out by A's own speed
    return led


def test_ledger_withdraws_a_change_the_configuration_that_showed_it_does_not_confirm():
    led = _spike(Ledger(withdraw=True))
    r = led.observe(45, A, 102.0, False)  # A runs as it ran before the change: that check was a transient
    assert led.recalled is r and r.ident == 0 and led.current is r
    assert [g.ident for g in led.regimes] == [0]  # the young regime is gone
    assert r.durations == [] and r.started == 0  # the occurrence goes on: nothing ended at 35
    assert r.misses == 2  # what its trials found (nothing) still counts
    # the check at 130 is dropped, not averaged in: A's two windows at 100 and this one at 102; B as it was
    assert r.speeds(30) == {A: pytest.approx((2 * 100.0 + 102.0) / 3), B: 90.0}


def test_ledger_keeps_a_change_another_configuration_cannot_withdraw():
    led = _spike(Ledger(withdraw=True))
    r = led.observe(45, B, 91.0, False)  # B as before, but the change was seen on A's own speed
    assert led.recalled is None and r.ident == 1
    r = led.observe(55, A, 131.0, False)  # A confirms it: the new conditions stay
    assert led.recalled is None and r.ident == 1 and r.speeds(30) == {A: pytest.approx(130.5), B: 91.0}


def test_ledger_without_withdraw_keeps_an_unconfirmed_change():
    led = _spike(Ledger())  # the default: off
    r = led.observe(45, A, 102.0, False)
    assert led.recalled is None and r.ident == 1 and r.speeds(30) == {A: pytest.approx(116.0)}


def test_ledger_state_keeps_the_configuration_that_showed_the_change():
    led = _spike(Ledger(withdraw=True))
    back = Ledger(withdraw=True)
    back.load_state_dict(json.loads(json.dumps(led.state_dict())))
    assert back.state_dict() == led.state_dict()
    r = back.observe(45, A, 102.0, False)  # a restored job withdraws it as the uninterrupted one does
    assert back.recalled is r and r.ident == 0


# ---------------------------------------------------------------- mover and verifier
def test_mover_goes_to_the_fastest_measured_beyond_its_threshold():
    m = Mover(min_gain=0.02)
    assert m.propose(1, {A: 100.0}, A, 100.0, None) is None  # nothing else measured
    assert m.propose(2, {A: 100.0, B: 101.0}, A, 100.0, None) is None  # within noise
    cfg, why = m.propose(3, {A: 100.0, B: 110.0, C: 105.0}, A, 100.0, None)
    assert cfg == B and why.startswith("measured best")
    cfg, why = Mover().propose(1, {A: 100.0, B: 80.0}, B, 80.0, A)
    assert cfg == A and why.startswith("rollback")


def test_mover_with_noise_z_judges_an_established_configuration_by_its_mean():
    m = Mover(min_gain=0.02, noise_z=2.0)
    # A has run 3 windows (mean 100), its last one dipped to 95; B's mean over 3 windows is 104. Without noise_z the
    # 95 against 104 moves; with it 104 against A's mean 100 is 3.9%, under exp(2 * 0.04 * sqrt(2/3)) - 1 = 6.8%: it stays
    assert Mover(min_gain=0.02).propose(1, {A: 100.0, B: 104.0}, A, 95.0, None)[0] == B
    assert m.propose(1, {A: 100.0, B: 104.0}, A, 95.0, None, {A: 3.0, B: 3.0}, 0.04) is None
    cfg, why = m.propose(2, {A: 100.0, B: 108.0}, A, 95.0, None, {A: 3.0, B: 3.0}, 0.04)  # 8% > 6.8%: it moves
    assert cfg == B and "means of 3 and 3 windows, 6.8% needed at a scatter of 4.0%" in why and "(+8.0%" in why
    # a configuration on its first window here (a trial) is judged by that window and min_gain alone: rolled back
    cfg, why = m.propose(3, {A: 100.0, B: 97.0}, B, 97.0, A, {A: 3.0, B: 1.0}, 0.04)
    assert cfg == A and why.startswith("rollback") and "needed" not in why
    # before the ledger has a scatter, or without counts, min_gain against the window as without noise_z
    assert m.propose(4, {A: 100.0, B: 104.0}, A, 95.0, None, {A: 3.0, B: 3.0}, None)[0] == B
    assert m.propose(5, {A: 100.0, B: 104.0}, A, 95.0, None)[0] == B
    with pytest.raises(ValueError, match="noise_z"):
        Mover(noise_z=-1.0)


def test_ledger_scatter_is_read_from_windows_measured_again_in_unchanged_conditions():
    led = Ledger()
    assert led.scatter() is None and led.counts() == {}
    led.observe(0, A, 100.0, False)
    for i, v in enumerate([104.0, 97.0, 103.0, 98.0, 102.0]):
        led.observe(i + 1, A, v, False)
    assert led.scatter() is None and len(led.gaps) == 5  # PAIR_MIN is 6
    led.observe(6, A, 100.0, False, weight=0.5)  # half a window (a trial ended at its first check): not a gap
    led.observe(7, B, 80.0, False)  # a configuration new here: not a gap
    led.observe(8, A, 60.0, True)  # conditions changed: not a gap
    assert len(led.gaps) == 5
    led.observe(9, A, 61.0, False)
    g = sorted(led.gaps)
    assert len(g) == 6 and led.scatter() == pytest.approx(1.4826 * (g[2] + g[3]) / 2)  # pair_scatter: the median's
    assert led.counts() == {A: 2.0}  # the new regime: A measured twice there
    back = Ledger()
    back.load_state_dict(json.loads(json.dumps(led.state_dict())))
    assert back.gaps == led.gaps and back.scatter() == led.scatter()


def test_verifier_re_measures_the_config_a_surprising_trial_left():
    v = Verifier(surprise=0.5)
    assert v.propose((B, 100.0, A), B, 120.0, False) is None  # within 50% of its prediction
    cfg, why = v.propose((B, 100.0, A), B, 260.0, False)
    assert cfg == A and why.startswith("verify")
    assert v.propose((B, 100.0, A), B, 260.0, True) is None  # the detector already saw the change
    assert v.propose((B, 100.0, A), C, 260.0, False) is None  # not the trial's window


# ---------------------------------------------------------------- explorer
def _expected_improvement(mu: float, s: float) -> float:
    """``E[max(X, 0)]`` for ``X ~ N(mu, s^2)``, in closed form: what the explorer's gain must equal."""
    return s * math.exp(-0.5 * (mu / s) ** 2) / math.sqrt(2 * math.pi) + mu * 0.5 * (1 + math.erf(mu / s / math.sqrt(2)))


def _explore(predicted, measured, current=A, speed=100.0, sigma=0.05, horizon=200.0, allowance=None, misses=0, **kw):
    return Explorer(**kw).propose(SPACE, SPACE.to_array(), np.asarray(predicted, float), measured, current, speed, sigma,
                                  horizon, allowance, misses)


def test_ledger_weighs_a_half_window_by_its_share():
    led = Ledger(memory=3)
    led.observe(10, A, 100.0, False, weight=0.5)  # a trial ended at its first check
    assert led.current.measured[A][:2] == [100.0, 0.5]
    led.observe(20, A, 130.0, False)  # a full window counts twice as much
    assert led.current.measured[A][0] == pytest.approx((100.0 * 0.5 + 130.0) / 1.5)
    assert led.current.measured[A][1] == pytest.approx(1.5)


# ---------------------------------------------------------------- aborting
def test_aborter_ends_a_trial_clearly_slower_than_the_best_measured():
    ab = Aborter(margin=0.10)
    trial = (C, 120.0, A)  # C tried, predicted 120, left A
    measured = {A: 100.0, B: 104.0, C: 0.0}
    got = ab.propose(trial, C, 92.0, measured)  # 11.5% below B, the fastest measured
    assert got is not None and got[0] == B
    assert got[1].startswith("abort:") and "92.0 samples/s" in got[1] and "104.0" in got[1] and "predicted 120.0" in got[1]
    assert ab.propose(trial, C, 94.0, measured) is None  # within the margin: the trial may still come out ahead


def test_aborter_acts_only_on_the_trial_in_force():
    ab = Aborter()
    measured = {A: 100.0}
    assert ab.propose(None, C, 10.0, measured) is None  # no trial
    assert ab.propose((C, 120.0, A), B, 10.0, measured) is None  # the trial is not what runs
    assert ab.propose((C, 120.0, A), C, 10.0, {C: 10.0}) is None  # nothing else measured to go back to


def test_aborter_goes_back_to_the_config_left_on_a_tie():
    ab = Aborter()
    assert ab.propose((C, 120.0, B), C, 50.0, {A: 100.0, B: 100.0})[0] == B
    assert ab.propose((C, 120.0, A), C, 50.0, {A: 100.0, B: 100.0})[0] == A


@pytest.mark.parametrize("margin", [0, 0.95, -0.1, float("nan"), True, "0.1"])
def test_aborter_rejects_a_bad_margin(margin):
    with pytest.raises(ValueError, match=r"margin must be a number in \[0.001, 0.9\], but got margin="):
        Aborter(margin)


def test_explorer_tries_the_candidate_worth_most():
    cfg, why, gain = _explore([100.0, 120.0, 104.0, 90.0], {A: 100.0})
    assert cfg == B and why.startswith("explore")


def test_explorer_skips_what_it_is_told_not_to_try():
    # B is worth most; told not to try it (past jobs measured it slower), the next candidate, D, is tried
    pred = [100.0, 120.0, 90.0, 115.0]
    plain = _explore(pred, {A: 100.0})
    assert plain is not None and plain[0] == B

    def skipping(skip):
        return Explorer().propose(SPACE, SPACE.to_array(), np.asarray(pred), {A: 100.0}, A, 100.0, 0.05, 200.0, None,
                                  skip=skip)

    got = skipping(frozenset({B}))
    assert got is not None and got[0] == D
    assert skipping(frozenset({B, D})) is None  # C is out of reach (4 powers of two from A)


def test_explorer_within_phase_starts_a_trial_only_when_it_can_end_before_the_change():
    def explore(left, horizon=200.0):
        return Explorer(within_phase=True).propose(SPACE, SPACE.to_array(), np.asarray([100.0, 120.0, 104.0, 90.0]), {A: 100.0},
                                                   A, 100.0, 0.05, horizon, None, 0, left=left)

    assert explore(left=11.0) is None  # 11 iterations left in these conditions: a 12-iteration trial would straddle the change
    cfg, why, _ = explore(left=12.0)  # it fits; its gain counts from its end: 200 - 12 iterations, recurrences included
    assert cfg == B and "over 188 left" in why
    assert explore(left=None, horizon=11.0) is None  # no occurrence length: the horizon bounds it
    plain = Explorer().propose(SPACE, SPACE.to_array(), np.asarray([100.0, 120.0, 104.0, 90.0]), {A: 100.0}, A, 100.0, 0.05,
                               200.0, None, 0, left=5.0)
    assert plain is not None and "over 200 left" in plain[1]  # off by default: left is not read


def test_ledger_expects_what_is_left_of_this_occurrence():
    led = Ledger(default_horizon=123)
    assert led.left(0) == 123
    led.observe(10, A, 100.0, False)
    led.observe(20, A, 50.0, True)  # the first regime lasted 20 iterations
    assert led.left(25) == pytest.approx(15.0) and led.left(45) == 0.0  # a new regime: the run's typical 20, 5 (25) spent
    led.observe(60, A, 100.0, True)  # back: regime 0 recalled, its one occurrence lasted 20
    assert led.current.ident == 0 and led.left(70) == pytest.approx(10.0)
    assert led.horizon(70) == pytest.approx(10.0 + 20.0)  # and one more occurrence expected


def test_explorer_stops_when_no_trial_pays():
    assert _explore([100.0, 80.0, 75.0, 70.0], {A: 100.0}) is None  # every candidate predicted far slower
    assert _explore([100.0, 103.0, 90.0, 90.0], {A: 100.0}, horizon=1.0) is None  # nothing left to gain it over
    assert _explore([100.0, 120.0, 104.0, 90.0], {A: 100.0}, misses=3) is None  # three misses in a row here
    assert _explore([100.0, 120.0, 104.0, 90.0], {A: 100.0, B: 95.0, C: 99.0, D: 80.0}) is None  # all measured


def test_explorer_keeps_a_trial_inside_the_guards_allowance():
    # B is predicted a little faster but uncertain: its cost one sigma below prediction is ~3.7 iterations
    assert _explore([100.0, 102.0, 60.0, 60.0], {A: 100.0}, sigma=0.2, allowance=1.0) is None
    assert _explore([100.0, 102.0, 60.0, 60.0], {A: 100.0}, sigma=0.2, allowance=10.0)[0] == B


def test_explorer_counts_a_trial_the_aborter_would_end_at_its_first_check():
    # B: as fast as the best on average, but uncertain (30%): its downside costs a whole trial without
    # aborts, only its first check (7 iterations, not 12) with them
    assert _explore([100.0, 100.0, 60.0, 60.0], {A: 100.0}, sigma=0.2, horizon=10.0) is None
    cfg, why, _ = _explore([100.0, 100.0, 60.0, 60.0], {A: 100.0}, sigma=0.2, horizon=10.0, abort_margin=0.1)
    assert cfg == B and "expected cost 0.87" in why
    # and one sigma below its prediction it would be ended, so the guard's allowance covers 7 iterations of it
    assert _explore([100.0, 102.0, 60.0, 60.0], {A: 100.0}, sigma=0.2, allowance=2.5) is None
    assert _explore([100.0, 102.0, 60.0, 60.0], {A: 100.0}, sigma=0.2, allowance=2.5, abort_margin=0.1)[0] == B


def test_explorer_reaches_only_near_measured_configs():
    # D (256 KiB) is 2 powers of two from A; with max_distance=1 it is out of reach
    assert _explore([100.0, 90.0, 90.0, 150.0], {A: 100.0}, max_distance=1.0) is None
    assert _explore([100.0, 90.0, 90.0, 150.0], {A: 100.0}, max_distance=2.0)[0] == D


# ---------------------------------------------------------------- one schedule, one class
#: a 3-tensor model of 1.5 MiB: every partition from 2 MiB up fuses it into one message, which no credit holds back
SMALL = np.array([512 * KiB, 256 * KiB, 768 * KiB], dtype=np.float64)
E1, E2, E3 = Config(4 * MiB, 4 * MiB), Config(16 * MiB, 16 * MiB), Config(2 * MiB, 2 * MiB)  # one schedule
F1, F2 = Config(256 * KiB, 256 * KiB), Config(256 * KiB, 512 * KiB)  # split tensors: schedules of their own
ESPACE = SearchSpace([E1, E2, E3, F1, F2])


def test_equivalence_classes_candidates_by_schedule():
    eq = Equivalence(ESPACE)
    assert list(eq.ids) == [0, 1, 2, 3, 4]  # before any gradients: every candidate its own
    eq.update(SMALL)
    assert eq.ids[0] == eq.ids[1] == eq.ids[2] and len({int(eq.ids[0]), int(eq.ids[3]), int(eq.ids[4])}) == 3
    assert eq.n_classes == 3
    assert eq.of(Config(64 * MiB, 64 * MiB)) == eq.of(E1)  # outside the space, runs as E1 does
    odd = eq.of(Config(128 * KiB, 128 * KiB))  # a schedule no candidate runs: an id of its own
    assert odd >= eq.n_classes and eq.of(Config(128 * KiB, 128 * KiB)) == odd
    assert list(eq.members([E2])) == [True, True, True, False, False]
    off = Equivalence(ESPACE, enabled=False)
    off.update(SMALL)
    assert list(off.ids) == [0, 1, 2, 3, 4]


def test_explorer_does_not_try_what_was_measured_under_another_name():
    eq = Equivalence(ESPACE)
    eq.update(SMALL)
    cands = ESPACE.to_array()
    # E2 and E3 run what E1 (measured) runs: predicted faster or not, trying them would measure E1 again
    got = Explorer().propose(ESPACE, cands, np.array([100.0, 130.0, 130.0, 90.0, 90.0]), {E1: 100.0}, E1, 100.0, 0.05,
                             200.0, None, 0, eq)
    assert got is None
    without = Explorer().propose(ESPACE, cands, np.array([100.0, 130.0, 130.0, 90.0, 90.0]), {E1: 100.0}, E1, 100.0, 0.05,
                                 200.0, None, 0)
    assert without is not None and without[0] in (E2, E3)
    # an unmeasured class is tried through one member, and distances count from every member of a measured class:
    # F1 <256 KiB, 256 KiB> is 3 powers of two from E3 <2 MiB, 2 MiB>, which E1 measured; 4 from E1 itself
    got = Explorer(max_distance=3.0).propose(ESPACE, cands, np.array([100.0, 100.0, 100.0, 150.0, 90.0]), {E1: 100.0}, E1,
                                             100.0, 0.05, 200.0, None, 0, eq)
    assert got is not None and got[0] == F1
    blind = Explorer(max_distance=3.0).propose(ESPACE, cands, np.array([100.0, 100.0, 100.0, 150.0, 90.0]), {E1: 100.0}, E1,
                                               100.0, 0.05, 200.0, None, 0)
    assert blind is not None and blind[0] in (E2, E3)  # F1 out of reach; E2 or E3 (E1 again) tried instead


def _features(cfg: Config):
    res = sim.simulate(sim.ModelProfile("small", SMALL, np.full(3, 1e-3), np.full(3, 2e-3), 32), FAST, cfg, n_iters=4, seed=0)
    return res.features()


def test_scorer_gives_one_schedule_one_prediction(fresh_net):
    f = _features(E1)
    sc = Scorer(fresh_net, ESPACE).score(E1, 100.0, f)
    assert sc.predicted[0] == sc.predicted[1] == sc.predicted[2] == 100.0  # the class in force: what it measured
    assert sc.raw[0] == sc.raw[1] == sc.raw[2] == 0.0
    sc = Scorer(fresh_net, ESPACE).score(F1, 100.0, f)
    assert sc.predicted[3] == 100.0 and sc.predicted[0] == sc.predicted[1] == sc.predicted[2]
    raw = Scorer(fresh_net, ESPACE, equivalent=False).score(F1, 100.0, f).raw
    assert sc.raw[0] == pytest.approx(np.mean(raw[:3]))  # the geometric mean of the network's predictions
    assert len(set(np.round(raw[:3], 9))) > 1  # which differed


def test_scorer_believes_a_network_whose_gains_fail_here_less(fresh_net):
    s = Scorer(fresh_net, ESPACE)
    assert s.slope() == 1.0 and s.sigma() == s.sigma0
    for _ in range(3):  # predicted +50%, measured -10%: the favourites keep failing
        s.checked(150.0, 90.0, raw=math.log(1.5), anchor=100.0)
    assert s.slope() == 0.25  # the floor
    assert s.sigma() == pytest.approx(abs(math.log(0.9) - 0.25 * math.log(1.5)))
    f = _features(E1)
    sc = s.score(F1, 100.0, f)
    assert sc.predicted[0] == pytest.approx(100.0 * math.exp(0.25 * sc.raw[0]))
    right = Scorer(fresh_net, ESPACE)
    for r in (0.3, -0.2, 0.1):  # predictions that came true
        right.checked(100.0 * math.exp(r), 100.0 * math.exp(r), raw=r, anchor=100.0)
    assert right.slope() == 1.0 and right.sigma() == right.sigma_min
    half = Scorer(fresh_net, ESPACE)
    for _ in range(4):
        half.checked(150.0, 100.0 * 1.5 ** 0.5, raw=math.log(1.5), anchor=100.0)  # half the predicted log gain
    assert half.slope() == pytest.approx((4 * 0.5 * math.log(1.5) ** 2 + 0.05) / (4 * math.log(1.5) ** 2 + 0.05))
    off = Scorer(fresh_net, ESPACE, calibrate=False)
    off.checked(150.0, 90.0, raw=math.log(1.5), anchor=100.0)
    assert off.slope() == 1.0
    back = Scorer(fresh_net, ESPACE)
    back.load_state_dict(json.loads(json.dumps(s.state_dict())))
    assert back.slope() == s.slope() and back.sigma() == s.sigma()


@pytest.mark.parametrize("kw", [{"prior": 0.0}, {"min_slope": 1.5}, {"min_slope": -0.1}])
def test_scorer_rejects_a_bad_calibration(fresh_net, kw):
    with pytest.raises(ValueError, match=rf"{next(iter(kw))} must be a number in"):
        Scorer(fresh_net, ESPACE, **kw)


@pytest.mark.parametrize("kw", [{"trial_iters": 0}, {"widen": -1}, {"max_distance": float("nan")}, {"max_misses": 0},
                                {"abort_margin": 0.0}, {"abort_iters": 13}])
def test_explorer_rejects_bad_arguments(kw):
    with pytest.raises(ValueError, match=rf"{next(iter(kw))} must be a number in"):
        Explorer(**kw)


# ---------------------------------------------------------------- the tuner composed
MODEL = sim.get_model("resnet50")
FAST, SLOW = sim.Cluster.from_gbps(4, 10, "ps"), sim.Cluster.from_gbps(4, 1, "ps")
GRID = SearchSpace.grid([256 * KiB, MiB, 4 * MiB, 16 * MiB], [1, 2, 4])


def _window(cfg: Config, cl, w: int, changed: bool = False) -> Observation:
    res = sim.simulate(MODEL, cl, cfg, n_iters=4, seed=w)
    f = res.features()
    return Observation(10 * (w + 1), cfg, float(f.speed.sum()), f, regime_changed=changed)


def _drive(t: AutoByteTuner, start: Config, conds: list, per_phase: int) -> list[tuple[int, Config, str]]:
    """Alternate conditions every ``per_phase`` windows; the controller's signal set at each switch."""
    cur, out, w = t.start(GRID, start), [], 0
    for p, cl in enumerate(conds):
        for k in range(per_phase):
            d = t.observe(_window(cur, cl, w, changed=(p > 0 and k == 0)))
            if d is not None:
                out.append((w, d.config, d.reason.split(":")[0]))
                cur = d.config
            w += 1
    return out


def test_a_regime_seen_before_is_reused_at_once(fresh_net, caplog):
    # shrink off in both: the trial record it reads is the job's, not a regime's, so it curbs the forgetful
    # tuner's trials as well and would hide what memory alone spares
    t = AutoByteTuner(fresh_net, background=False, shrink=None)
    with caplog.at_level(logging.INFO, logger="autobyte.meta"):
        decisions = _drive(t, GRID[4], [FAST, SLOW, FAST, SLOW], per_phase=6)
    # both returns are recognised (the second at once, from the configuration in force), and the
    # first one's first decisions go to what was measured there, not to new trials
    assert caplog.text.count("seen before") >= 2, caplog.text
    first = [d for d in decisions if 12 <= d[0] < 14]
    assert first and all(r in ("measured best", "recall", "rollback") for _, _, r in first[:1]), decisions
    forgetful = AutoByteTuner(fresh_net, background=False, remember=False, shrink=None)
    forgot = _drive(forgetful, GRID[4], [FAST, SLOW, FAST, SLOW], per_phase=6)
    # from the first return on (window 12), memory spares trials
    later = [r for w, _, r in decisions if w >= 12]
    forgot_later = [r for w, _, r in forgot if w >= 12]
    assert later.count("explore") < forgot_later.count("explore"), (decisions, forgot)


def test_a_trial_that_measured_slower_is_rolled_back(fresh_net):
    t = AutoByteTuner(fresh_net, background=False)
    cur = t.start(GRID, GRID[4])
    t.observe(_window(cur, FAST, 0))
    t._trial, t._left = (GRID[0], 1e9, cur), cur  # pretend it just tried GRID[0]
    slow = _window(GRID[0], FAST, 1)
    d = t.observe(Observation(slow.iteration, GRID[0], t.ledger.current.measured[cur][0] * 0.7, slow.features))
    assert d is not None and d.config == cur and d.reason.startswith("rollback")


def test_every_decision_says_what_was_measured_and_predicted(fresh_net, caplog):
    t = AutoByteTuner(fresh_net, background=False)
    with caplog.at_level(logging.DEBUG, logger="autobyte.meta"):
        _drive(t, GRID[0], [FAST], per_phase=25)  # trials here found 2-3x: the explorer goes on for 15 windows
    lines = [r.getMessage() for r in caplog.records]
    assert lines and all("samples/s" in m for m in lines if " -> " in m or " keeps " in m)
    assert any(" keeps " in m and "fastest measured" in m for m in lines)  # a window that stays says why


def test_state_round_trip_continues_as_if_not_stopped(fresh_net):
    conds = [FAST, SLOW, FAST]
    a = AutoByteTuner(fresh_net, background=False)
    full = _drive(a, GRID[4], conds, per_phase=4)
    fresh_net.reset_head()
    b = AutoByteTuner(fresh_net, background=False)
    cur, first, w = b.start(GRID, GRID[4]), [], 0
    for k in range(6):  # the first 6 windows, then a checkpoint
        d = b.observe(_window(cur, conds[k // 4], w, changed=(k == 4)))
        if d is not None:
            first.append((w, d.config, d.reason.split(":")[0]))
            cur = d.config
        w += 1
    state = json.loads(json.dumps(b.state_dict()))
    fresh_net.reset_head()
    c = AutoByteTuner(fresh_net, background=False)
    c.start(GRID, GRID[4])
    c.load_state_dict(state)
    rest = []
    for k in range(6, 12):
        d = c.observe(_window(cur, conds[k // 4], w, changed=(k == 8)))
        if d is not None:
            rest.append((w, d.config, d.reason.split(":")[0]))
            cur = d.config
        w += 1
    assert first + rest == full


def test_a_trial_far_slower_than_the_best_is_ended_at_its_first_check(fresh_net):
    t = AutoByteTuner(fresh_net, background=False)
    cur = t.start(GRID, GRID[4])
    win = _window(cur, FAST, 0)
    assert t.check(Observation(5, cur, win.speed * 0.5, win.features, window_share=0.5)) is None  # no trial: nothing to end
    t.observe(win)
    best = t.ledger.current.measured[cur][0]
    t._trial, t._left = (GRID[0], best * 1.2, cur), cur  # pretend it just tried GRID[0]
    state = json.loads(json.dumps(t.state_dict()))
    half = _window(GRID[0], FAST, 1)
    windows = t.ledger.current.windows
    # within the margin: the trial goes on, and nothing is recorded (the whole window will be)
    assert t.check(Observation(15, GRID[0], best * 0.95, half.features, window_share=0.5)) is None
    assert t._trial is not None and t.ledger.current.windows == windows and GRID[0] not in t.ledger.current.measured
    d = t.check(Observation(15, GRID[0], best * 0.8, half.features, window_share=0.5))
    assert d is not None and d.config == cur and d.reason.startswith("abort:") and d.predicted_speed == pytest.approx(best)
    assert t._trial is None and t.n_aborts == 1 and t.ledger.current.misses == 1
    assert t.ledger.current.measured[GRID[0]][:2] == [pytest.approx(best * 0.8), 0.5]  # half a window, recorded
    # the check's prediction of the configuration gone back to is checked by the next window, as after any move
    assert t._last_pred is not None and t._last_pred[0] == GRID[0]
    # the same check, after a restore, ends the trial the same way
    fresh_net.reset_head()
    r = AutoByteTuner(fresh_net, background=False)
    r.start(GRID, GRID[4])
    r.load_state_dict(state)
    again = r.check(Observation(15, GRID[0], best * 0.8, half.features, window_share=0.5))
    assert again == d and r.state_dict()["n_aborts"] == 1


def test_abort_can_be_switched_off_and_its_margin_is_validated(fresh_net):
    t = AutoByteTuner(fresh_net, background=False, abort_margin=None)
    cur = t.start(GRID, GRID[4])
    win = _window(cur, FAST, 0)
    t.observe(win)
    t._trial = (GRID[0], 1e9, cur)
    assert t.check(Observation(15, GRID[0], 1.0, win.features, window_share=0.5)) is None
    with pytest.raises(ValueError, match=r"abort_margin must be a number in \[0.001, 0.9\], but got abort_margin=1.5"):
        AutoByteTuner(fresh_net, abort_margin=1.5)


def test_a_trial_holding_up_in_short_conditions_is_judged_on_its_first_check(fresh_net):
    t = AutoByteTuner(fresh_net, background=False)
    cur = t.start(GRID, GRID[4])
    win = _window(cur, FAST, 0)
    t.observe(win)
    t.ledger.current.durations.append(30)  # these conditions lasted 30 iterations last time: 30 + 20 left
    assert t.ledger.horizon(15) < 100
    best = t.ledger.current.measured[cur][0]
    t._trial, t._left = (GRID[0], best, cur), cur
    half = _window(GRID[0], FAST, 1)
    d = t.check(Observation(15, GRID[0], best * 0.97, half.features, window_share=0.5))  # within the abort margin
    assert d is not None and t._trial is None and t.n_aborts == 0
    assert d.reason.startswith(("short:", "rollback:")), d.reason
    assert t.ledger.current.measured[GRID[0]][:2] == [pytest.approx(best * 0.97), 0.5]
    off = AutoByteTuner(fresh_net, background=False, short_horizon_iters=None)
    off.start(GRID, GRID[4])
    off.observe(win)
    off.ledger.current.durations.append(30)
    off._trial, off._left = (GRID[0], best, cur), cur
    assert off.check(Observation(15, GRID[0], best * 0.97, half.features, window_share=0.5)) is None
    with pytest.raises(ValueError, match=r"short_horizon_iters must be a number in \[0, 1e\+09\], but got short_horizon_iters=-1"):
        AutoByteTuner(fresh_net, short_horizon_iters=-1)


def test_ledger_state_keeps_the_regime_just_left():
    led = Ledger()
    led.observe(10, A, 100.0, False)
    led.observe(20, B, 130.0, False)
    led.observe(30, A, 40.0, True)  # regime 1; regime 0 was just left (the probe must not name its best)
    again = Ledger()
    again.load_state_dict(json.loads(json.dumps(led.state_dict())))
    assert again.probe(A) == led.probe(A)
    led.observe(40, C, 45.0, True)  # regime 2: regime 1 left, regime 0's B may be back
    again.observe(40, C, 45.0, True)
    assert again.probe(C) == led.probe(C) == B



def test_ledger_undoes_a_change_not_seen_on_a_configuration_measured_there():
    # a change inferred at a configuration new to the regime (the detector's link-rate rule at a trial):
    # the regime left stays a candidate, the probe names its best, and the probe running as it ran there
    # undoes the change: one regime, the trial's measurement in it, its occurrence not cut in two
    led = Ledger()
    led.observe(10, A, 100.0, False)
    led.observe(20, B, 130.0, False)  # regime 0, started at 0
    r = led.observe(30, C, 400.0, True)  # the change shown by C, never measured in regime 0
    assert r.ident == 1 and led.regimes[0].durations == [30]
    assert led.probe(C) == B  # regime 0 is not ruled out: its best tells
    r = led.observe(40, B, 131.0, False)
    assert led.recalled is r and r.ident == 0 and len(led.regimes) == 1
    assert r.speeds(30) == {A: 100.0, B: pytest.approx(130.5), C: 400.0}
    assert r.durations == [] and r.started == 0


def test_ledger_keeps_the_change_when_the_probe_runs_otherwise():
    led = Ledger()
    led.observe(10, B, 130.0, False)
    led.observe(20, C, 400.0, True)  # inferred change
    r = led.observe(30, B, 60.0, False)  # B ran 2x slower: the conditions did change
    assert led.recalled is None and r.ident == 1 and r.speeds(30) == {C: 400.0, B: 60.0}
    assert led.regimes[0].durations == [20]


def test_ledger_rules_out_the_regime_left_when_a_measured_configuration_showed_the_change():
    led = Ledger()
    led.observe(10, A, 100.0, False)
    led.observe(20, B, 130.0, False)
    led.observe(30, A, 40.0, True)  # A, measured there, ran 2.5x slower: regime 0 ruled out
    assert led.probe(A) is None
    led.observe(40, B, 130.0, False)  # B runs as in regime 0 (it does not depend on what changed): no recall
    assert led.recalled is None and led.current.ident == 1


def test_ledger_files_a_measurement_set_aside_when_the_change_is_undone():
    # a mixed check (the caller files nothing of it) showed an inferred change; the probe finds the
    # conditions unchanged, so the check was clean: its measurement joins the regime
    led = Ledger()
    led.observe(10, B, 130.0, False)
    led.change(15, C, 400.0, aside=0.5)
    assert C not in led.current.measured
    back = Ledger()
    back.load_state_dict(json.loads(json.dumps(led.state_dict())))  # what is set aside survives a restore
    for lg in (led, back):
        r = lg.observe(20, B, 129.0, False)
        assert lg.recalled is r and r.ident == 0 and r.measured[C][:2] == [400.0, 0.5]
    # a change seen on a measured configuration sets nothing aside
    led.change(30, B, 60.0, aside=0.5)
    led.observe(40, A, 10.0, False)
    assert all(C not in x.measured or x.ident == 0 for x in led.regimes) and led._aside is None


# ---------------------------------------------------------------- a measurement that ran in other conditions
def test_ledger_refile_undoes_an_average_and_files_elsewhere():
    led = Ledger(memory=3)
    led.observe(10, A, 100.0, False)
    led.observe(20, A, 130.0, False)  # averaged: 115
    old = led.current
    new = led.observe(30, B, 50.0, True)
    led.refile(A, 130.0, 1.0, old, new)
    assert old.measured[A][:2] == [pytest.approx(100.0), 1.0]  # the first window alone again
    assert new.measured[A][:2] == [130.0, 1.0]
    led.refile(B, 50.0, 1.0, new, None)  # one window: taken out, filed nowhere
    assert B not in new.measured
    led.refile(A, 100.0, 1.0, old, new)  # into a regime that has it: averaged there
    assert A not in old.measured and new.measured[A][:2] == [pytest.approx(115.0), 2.0]


def _tried(t: AutoByteTuner, trial_speed: float):
    """The tuner measured ``cur`` and tried GRID[0] (predicted ~1.2x ``cur``) at ``trial_speed`` x ``cur``'s speed;
    returns ``cur``, its window, its speed and the tuner's decision after the trial."""
    cur = t.start(GRID, GRID[4])
    win = _window(cur, FAST, 0)
    t.observe(win)
    base = t.ledger.current.measured[cur][0]
    t._last_pred = (cur, np.full(len(GRID), base * 1.2), np.zeros(len(GRID)), base)
    t._trial, t._left = (GRID[0], base * 1.2, cur), cur
    d = t.observe(Observation(20, GRID[0], base * trial_speed, _window(GRID[0], FAST, 1).features))
    return cur, win, base, d


def _held_then_change(t: AutoByteTuner, trial_speed: float, after: float):
    """As :func:`_tried`; the run went back, and ``cur`` measured ``after`` x its speed (a change of
    conditions, the detector says)."""
    cur, win, base, d = _tried(t, trial_speed)
    assert d is not None and d.config == cur and d.reason.startswith(("verify", "rollback")), d  # back to cur either way
    old = t.ledger.current
    assert GRID[0] in old.measured
    t.observe(Observation(30, cur, base * after, win.features, regime_changed=True))
    return old, t.ledger.current, base


def test_a_trial_that_ran_in_the_new_conditions_is_moved_to_them(fresh_net, caplog):
    t = AutoByteTuner(fresh_net, background=False)
    with caplog.at_level(logging.INFO, logger="autobyte.meta"):
        old, new, base = _held_then_change(t, trial_speed=3.0, after=3.2)  # both 3x faster: the trial ran after the change
    assert old is not new and GRID[0] not in old.measured
    assert new.measured[GRID[0]][0] == pytest.approx(3.0 * base)
    assert "ran in the new conditions" in caplog.text
    kept = AutoByteTuner(fresh_net, background=False, refile=False)
    old, new, base = _held_then_change(kept, trial_speed=3.0, after=3.2)
    assert old.measured[GRID[0]][0] == pytest.approx(3.0 * base) and GRID[0] not in new.measured


@pytest.mark.parametrize("trial_speed, after", [
    (3.0, 0.3),  # the trial fast, the conditions then slower
    (0.7, 0.15),  # the trial 42% slower than predicted, the conditions then 6.7x slower: the change came after it
    (1.2 / 3.8, 1 / 6.0),  # the trial 3.8x slower than predicted, the link then 6x slower: 0.45 log units remain
])
def test_a_surprise_the_change_does_not_explain_stays_where_it_was_measured(fresh_net, trial_speed, after):
    t = AutoByteTuner(fresh_net, background=False)
    old, new, base = _held_then_change(t, trial_speed=trial_speed, after=after)
    assert old.measured[GRID[0]][0] == pytest.approx(trial_speed * base) and GRID[0] not in new.measured


def _verifying(t: AutoByteTuner):
    """Up to the verifier's decision: a trial 3x its predicted 1.2x of ``cur`` sends the run back to ``cur`` to check."""
    cur, win, base, d = _tried(t, 3.0)
    assert d is not None and d.config == cur and d.reason.startswith("verify"), d
    return cur, win, base


def test_a_verification_is_answered_at_its_first_check(fresh_net):
    t = AutoByteTuner(fresh_net, background=False)
    cur, win, base = _verifying(t)
    assert t._asked == cur
    # the first check of the re-measured configuration runs as it did: conditions unchanged, back to the trial
    d = t.check(Observation(25, cur, base * 1.01, win.features, window_share=0.5))
    assert d is not None and d.config == GRID[0] and d.reason.startswith("rollback"), d
    assert t.ledger.current.measured[cur][1] == pytest.approx(1.5)  # the check counted as half a window
    assert t._asked is None and t.check(Observation(30, GRID[0], base * 3.0, win.features, window_share=0.5)) is None
    whole = AutoByteTuner(fresh_net, background=False, answer_at_check=False)
    cur, win, base = _verifying(whole)
    assert whole.check(Observation(25, cur, base * 1.01, win.features, window_share=0.5)) is None  # the window runs on


def test_a_recall_probe_is_answered_at_its_first_check(fresh_net):
    t = AutoByteTuner(fresh_net, background=False)
    t.start(GRID, GRID[4])
    lo, hi = _window(GRID[4], SLOW, 0), _window(GRID[4], FAST, 1)
    t.observe(lo)
    t.observe(Observation(20, GRID[8], lo.speed * 1.3, lo.features))  # a faster configuration measured in the slow regime
    t.observe(Observation(30, GRID[4], hi.speed, hi.features, regime_changed=True))
    d = t.observe(Observation(40, GRID[4], lo.speed * 0.6, lo.features, regime_changed=True))  # a third set of conditions
    assert d is not None and d.config == GRID[8] and d.reason.startswith("recall"), d
    # the probe runs as it did in the first regime: that one is back, and what was measured there counts at once
    d = t.check(Observation(45, GRID[8], lo.speed * 1.3, lo.features, window_share=0.5))
    assert d is not None and t.ledger.recalled is not None and t.ledger.current.ident == 0, d


def test_a_mixed_check_starts_a_regime_with_nothing_filed_and_probes_at_once(fresh_net):
    t = AutoByteTuner(fresh_net, background=False)
    t.start(GRID, GRID[4])
    lo, hi = _window(GRID[4], SLOW, 0), _window(GRID[4], FAST, 1)
    t.observe(lo)
    t.observe(Observation(20, GRID[8], lo.speed * 1.3, lo.features))  # a faster configuration of the slow regime
    t.observe(Observation(30, GRID[4], hi.speed, hi.features, regime_changed=True))  # fast conditions: regime 1
    t._trial = (GRID[0], hi.speed, GRID[4])  # a trial under way when the conditions change again
    n, rows = len(t.ledger.regimes), len(t.learner.rows)
    mixed = Observation(40, GRID[4], (lo.speed + hi.speed) / 2, lo.features, regime_changed=True, mixed=True)
    d = t.observe(mixed)
    # a new regime, nothing of the mixed speed kept: not filed, no pair for adaptation, the trial dropped
    assert len(t.ledger.regimes) == n + 1 and t.ledger.current.measured == {} and len(t.learner.rows) == rows
    assert t._trial is None and not t.learner.recent
    assert d is not None and d.config == GRID[8] and d.reason.startswith("recall") and t._asked == GRID[8]
    # the probe's first check, wholly in the new conditions, finds the slow regime back
    t.check(Observation(45, GRID[8], lo.speed * 1.3, lo.features, window_share=0.5))
    assert t.ledger.recalled is not None and t.ledger.current.ident == 0


def test_a_clean_check_judges_a_held_surprise_before_a_later_change(fresh_net):
    # the verification runs whole (answer_at_check off): its first check, clean, shows the surprise was the
    # predictor's; a change seen at the end of the window, however well it would account for the surprise, came after
    t = AutoByteTuner(fresh_net, background=False, answer_at_check=False)
    cur, win, base = _verifying(t)
    n = len(t.errors)
    assert t.check(Observation(25, cur, base, win.features, window_share=0.5)) is None
    assert t._held is None and len(t.errors) == n + 1
    old = t.ledger.current
    t.observe(Observation(30, cur, base * 3.2, win.features, regime_changed=True))
    assert old.measured[GRID[0]][0] == pytest.approx(3.0 * base) and GRID[0] not in t.ledger.current.measured
    # without the rule the held surprise is refiled into the new conditions
    off = AutoByteTuner(fresh_net, background=False, answer_at_check=False, clean_check=False)
    cur, win, base = _verifying(off)
    off.check(Observation(25, cur, base, win.features, window_share=0.5))
    off.observe(Observation(30, cur, base * 3.2, win.features, regime_changed=True))
    assert GRID[0] in off.ledger.current.measured


def test_asked_round_trips_in_the_state(fresh_net):
    t = AutoByteTuner(fresh_net, background=False)
    cur, _, _ = _verifying(t)
    r = AutoByteTuner(fresh_net, background=False)
    r.start(GRID, GRID[4])
    r.load_state_dict(json.loads(json.dumps(t.state_dict())))
    assert r._asked == cur


def test_held_state_round_trips_and_an_old_state_drops_it(fresh_net):
    t = AutoByteTuner(fresh_net, background=False)
    t.start(GRID, GRID[4])
    t._held = (GRID[0], 120.0, 300.0, 0.1, 100.0, 0.5)
    state = json.loads(json.dumps(t.state_dict()))
    r = AutoByteTuner(fresh_net, background=False)
    r.start(GRID, GRID[4])
    r.load_state_dict(state)
    assert r._held == t._held
    r.load_state_dict({"held": [120.0, 300.0, 0.1, 100.0]})  # saved before the configuration was kept
    assert r._held is None


# ---------------------------------------------------------------- explorer options
def test_explorer_trust_region_is_around_configs_measured_near_the_best():
    # D (256 KiB) is 2 powers of two from A and 4 from B; B was measured but runs far below A
    measured = {A: 100.0, B: 60.0}
    assert _explore([100.0, 60.0, 90.0, 150.0], measured, max_distance=2.0)[0] == D
    assert _explore([100.0, 60.0, 150.0, 90.0], measured, current=A, max_distance=2.0)[0] == C  # C: 2 from B, 4 from A
    assert _explore([100.0, 60.0, 150.0, 90.0], measured, current=A, max_distance=2.0, near_best=0.1) is None


def test_explorer_can_require_a_predicted_gain():
    # D predicted below the best measured: tried for its uncertainty, unless a predicted gain is required
    assert _explore([100.0, 90.0, 90.0, 99.0], {A: 100.0}, sigma=0.25, max_distance=3.0)[0] == D
    assert _explore([100.0, 90.0, 90.0, 99.0], {A: 100.0}, sigma=0.25, max_distance=3.0, min_predicted_gain=0.0) is None
    assert _explore([100.0, 90.0, 90.0, 110.0], {A: 100.0}, sigma=0.25, min_predicted_gain=0.05)[0] == D


@pytest.mark.parametrize("kw, message", [({"near_best": 1.0}, "near_best must be a number in [0, 0.9]"),
                                         ({"min_predicted_gain": -1.0}, "min_predicted_gain must be a number in [-0.5, 10]")])
def test_explorer_rejects_bad_options(kw, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        Explorer(**kw)


# ---------------------------------------------------------------- the worst miss bounds a trial's worst case
def test_scorer_downside_is_the_worst_over_prediction(fresh_net):
    s = Scorer(fresh_net, ESPACE)
    assert s.downside() == 0.0
    s.checked(110.0, 110.0, raw=math.log(1.1), anchor=100.0)  # came true
    assert s.downside() == pytest.approx(0.0, abs=1e-12)
    s.checked(120.0, 30.0, raw=math.log(1.2), anchor=100.0)  # predicted +20%, ran 3.3x slower
    b = s.slope()
    assert s.downside() == pytest.approx(b * math.log(1.2) - math.log(0.3))
    assert s.downside() > s.sigma()


def test_explorer_keeps_room_for_the_worst_miss_seen():
    # D predicted 50% faster: fits the allowance one error below its prediction, not 3x below
    args = ([100.0, 90.0, 90.0, 150.0], {A: 100.0})
    assert _explore(*args, sigma=0.1, allowance=1.5)[0] == D
    assert _explore(*args, sigma=0.1, allowance=1.5, abort_margin=0.1) is not None
    ex = Explorer(abort_margin=0.1)
    miss = math.log(3.0)
    assert ex.propose(SPACE, SPACE.to_array(), np.asarray(args[0]), args[1], A, 100.0, 0.1, 200.0, 1.5, 0, None, miss) is None
    # with gains banked (a larger allowance) the same trial fits again
    assert ex.propose(SPACE, SPACE.to_array(), np.asarray(args[0]), args[1], A, 100.0, 0.1, 200.0, 40.0, 0, None, miss)[0] == D


# ---------------------------------------------------------------- trials' own bias (the winner's curse)
def test_scorer_trial_bias_is_the_shrunk_mean_of_trials_below_prediction(fresh_net):
    s = Scorer(fresh_net, ESPACE)
    assert s.trial_bias() == 0.0
    s.trial(110.0, 100.0)  # the trial ran 9% below its prediction
    assert s.trial_bias() == pytest.approx(math.log(100 / 110) / 3)  # one trial against the prior of two at 0
    s.trial(105.0, 100.0)
    s.trial(108.0, 100.0)
    assert s.trial_bias() == pytest.approx((math.log(100 / 110) + math.log(100 / 105) + math.log(100 / 108)) / 5)
    s.trial(100.0, 200.0)  # one far faster than predicted: the bias is never positive
    s.trial(100.0, 200.0)
    assert s.trial_bias() == 0.0
    s.trial(float("nan"), 100.0)  # an unusable pair is not kept
    s.trial(100.0, 0.0)
    assert len(s.trials) == 5
    r = Scorer(fresh_net, ESPACE)
    r.load_state_dict(json.loads(json.dumps(s.state_dict())))
    assert list(r.trials) == list(s.trials)


def test_explorer_lowers_predictions_by_how_trials_ran():
    # B predicted 6% above the best measured, 5% error: tried; after trials that ran ~8% below
    # their predictions it is expected 2% below the best, and no trial pays
    args = ([100.0, 106.0, 60.0, 60.0], {A: 100.0})
    cfg, why, _ = _explore(*args, horizon=20.0)
    assert cfg == B and "lowered" not in why
    ex = Explorer()
    pick = ex.propose(SPACE, SPACE.to_array(), np.asarray(args[0]), args[1], A, 100.0, 0.05, 20.0, None, 0, None, 0.0, math.log(0.92))
    assert pick is None
    # a candidate predicted far enough above still is, with the bias in its reason
    pick = ex.propose(SPACE, SPACE.to_array(), np.asarray([100.0, 125.0, 60.0, 60.0]), args[1], A, 100.0, 0.05, 20.0, None, 0,
                      None, 0.0, math.log(0.92))
    assert pick is not None and pick[0] == B and "predicted 115.0 samples/s, lowered 8% as this job's trials ran" in pick[1]


@pytest.mark.parametrize("bad", [0.1, float("nan"), float("-inf"), True, "0"])
def test_explorer_rejects_a_bad_bias(bad):
    with pytest.raises(ValueError, match=r"bias must be a finite number <= 0 \(log units\), but got bias="):
        Explorer().propose(SPACE, SPACE.to_array(), np.asarray([100.0, 106.0, 60.0, 60.0]), {A: 100.0}, A, 100.0, 0.05, 20.0,
                           None, 0, None, 0.0, bad)


def test_tuner_records_each_trial_against_its_prediction(fresh_net):
    t = AutoByteTuner(fresh_net, background=False, debias=True)
    cur = t.start(GRID, GRID[4])
    win = _window(cur, FAST, 0)
    t.observe(win)
    base = t.ledger.current.measured[cur][0]
    t._trial, t._left = (GRID[0], base * 1.1, cur), cur  # a trial predicted 10% faster
    trial = _window(GRID[0], FAST, 1)
    t.observe(Observation(20, GRID[0], base * 1.0, trial.features))  # ran as fast as where it came from
    assert list(t.scorer.trials) == [pytest.approx(math.log(1 / 1.1))]
    assert t.scorer.trial_bias() == pytest.approx(math.log(1 / 1.1) / 3)
    assert AutoByteTuner(fresh_net, background=False).debias is False


# ---------------------------------------------------------------- what trials paid against what was expected
def test_payoff_is_realised_over_expected_gain_shrunk_to_one():
    p = Payoff(prior=1.0)
    assert p.factor() == 1.0  # no trial yet: the predictor's word
    p.expect(B, 0.05, 100.0)
    assert p.outcome(B, 90.0) == 0.0  # ran slower than the best measured: realised nothing
    assert p.factor() == pytest.approx(1 / 2)  # one miss against one prior trial at 1
    p.expect(C, 0.10, 100.0)
    assert p.outcome(C, 80.0) == 0.0
    assert p.factor() == pytest.approx(1 / 3)
    p.expect(D, 0.03, 100.0)
    assert p.outcome(D, 106.0) == pytest.approx(math.log(1.06))  # a hit: realised 5.8% against 3% expected
    mean_expected = (0.05 + 0.10 + 0.03) / 3
    assert p.factor() == pytest.approx((1 + math.log(1.06) / mean_expected) / 4)
    lucky = Payoff()
    lucky.expect(B, 0.01, 100.0)
    lucky.outcome(B, 150.0)  # far more than expected: never above the predictor's word
    assert lucky.factor() == 1.0


def test_payoff_records_only_the_pending_trial():
    p = Payoff(memory=2)
    assert p.outcome(B, 90.0) is None  # nothing pending
    p.expect(B, 0.05, 100.0)
    assert p.outcome(C, 90.0) is None and p.pending is None and not p.record  # another config ran: not this trial
    p.expect(B, 0.05, 100.0)
    p.drop()  # conditions changed under it
    assert p.outcome(B, 90.0) is None and not p.record
    for cfg in (B, C, D):
        p.expect(cfg, 0.05, 100.0)
        p.outcome(cfg, 50.0)
    assert len(p.record) == 2  # the last `memory` trials
    p.expect(A, 0.02, 120.0)
    q = Payoff(memory=2)
    q.load_state_dict(json.loads(json.dumps(p.state_dict())))
    assert list(q.record) == list(p.record) and q.pending == (A, 0.02, 120.0) and q.factor() == p.factor()


@pytest.mark.parametrize("kw, message", [
    ({"prior": 0}, "prior must be a number in [1e-06, 100], but got prior=0"),
    ({"memory": 0}, "memory must be a number in [1, 1000], but got memory=0"),
])
def test_payoff_rejects_bad_arguments(kw, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        Payoff(**kw)


@pytest.mark.parametrize("expected, best", [(-0.1, 100.0), (float("nan"), 100.0), (0.1, 0.0), (0.1, float("inf"))])
def test_payoff_rejects_a_bad_expectation(expected, best):
    with pytest.raises(ValueError, match="a trial needs a finite expected gain >= 0 and best speed > 0, but got expected="):
        Payoff().expect(B, expected, best)


def test_explorer_scales_expected_gains_by_the_payoff():
    # B predicted 6% above the best measured, 5% error, 5 iterations left: a trial pays at the
    # predictor's word and at half of it; when this job's trials realised a fifth of what they were
    # expected to, the same trial does not
    args = ([100.0, 106.0, 60.0, 60.0], {A: 100.0})
    ex = Explorer()

    def pick(payoff):
        return ex.propose(SPACE, SPACE.to_array(), np.asarray(args[0]), args[1], A, 100.0, 0.05, 5.0, None, payoff=payoff)

    full = pick(1.0)
    assert full is not None and full[0] == B and "realised" not in full[1]
    # its expected gain before the payoff: the expected improvement at the error widened by 2 powers of two of distance
    mu, sd = math.log(1.06), 0.05 * (1 + 0.25 * 2)
    assert full[2] == pytest.approx(_expected_improvement(mu, sd))
    half = pick(0.5)
    assert half is not None and half[0] == B and "(x0.50: the share of expected gains this job's trials realised)" in half[1]
    assert pick(0.2) is None


@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan"), True])
def test_explorer_rejects_a_bad_payoff(bad):
    with pytest.raises(ValueError, match=r"payoff must be a number in \[0, 1\], but got payoff="):
        Explorer().propose(SPACE, SPACE.to_array(), np.asarray([100.0, 120.0, 60.0, 60.0]), {A: 100.0}, A, 100.0, 0.05,
                           20.0, None, payoff=bad)


def test_tuner_records_what_each_trial_paid(fresh_net):
    t = AutoByteTuner(fresh_net, background=False, payoff=True)
    cur = t.start(GRID, GRID[4])
    t.observe(_window(cur, FAST, 0))
    base = t.ledger.current.measured[cur][0]
    t._trial, t._left = (GRID[0], base * 1.1, cur), cur  # a trial predicted 10% faster ...
    t.trial_record.expect(GRID[0], 0.08, base)  # ... as the explorer records one
    t.observe(Observation(20, GRID[0], base * 0.9, _window(GRID[0], FAST, 1).features))  # ran 10% slower
    assert list(t.trial_record.record) == [(0.08, 0.0)] and t.trial_record.factor() == pytest.approx(0.5)
    r = AutoByteTuner(fresh_net, background=False, payoff=True)
    r.start(GRID, GRID[4])
    r.load_state_dict(json.loads(json.dumps(t.state_dict())))
    assert list(r.trial_record.record) == [(0.08, 0.0)]
    assert AutoByteTuner(fresh_net, background=False).payoff is False


# ---------------------------------------------------------------- gains and costs in iterations' worth of time
def test_below_is_the_expected_time_lost_under_a_line():
    rng = np.random.default_rng(0)
    for mu, s, line in ((0.05, 0.1, 0.0), (-0.2, 0.5, 0.0), (0.1, 0.6, -0.3), (0.0, 0.05, -0.1)):
        x = rng.normal(mu, s, 2_000_000)
        mc = float(np.mean(np.where(x < line, np.exp(-x) - 1.0, 0.0)))
        got = float(_below(np.array([mu]), np.array([s]), np.array([line]))[0])
        assert got == pytest.approx(mc, rel=0.02, abs=2e-4)


def test_explorer_in_time_units_prices_a_fat_downside():
    # D predicted 20% faster, 2 powers of two from anything measured (error 0.25 widened to 0.375), 5
    # iterations left: in log units its downside (a few times slower) weighs log(3) per iteration and the
    # trial pays; in time units, 2 iterations per iteration, and it does not; a near, sure candidate pays either way
    cands = SPACE.to_array()
    far = np.asarray([100.0, 60.0, 60.0, 120.0])

    def pick(time_units, predicted, sigma, horizon=5.0):
        return Explorer(time_units=time_units, max_distance=3.0).propose(SPACE, cands, predicted, {A: 100.0}, A, 100.0,
                                                                         sigma, horizon, None)

    assert pick(False, far, 0.3) is not None and pick(False, far, 0.3)[0] == D
    assert pick(True, far, 0.3) is None
    near = np.asarray([100.0, 110.0, 60.0, 60.0])
    got = pick(True, near, 0.03, 20.0)
    assert got is not None and got[0] == B
    # the expected gain it reports is in time: E[(1 - best / truth)+] at the widened error
    mu, sd = math.log(1.1), 0.03 * (1 + 0.25 * 2)
    z = np.random.default_rng(1).normal(mu, sd, 2_000_000)
    assert got[2] == pytest.approx(float(np.mean(np.maximum(0.0, 1.0 - np.exp(-z)))), rel=0.01)
    assert AutoByteTuner.__init__.__kwdefaults__["time_units"] is False


def test_payoff_counts_in_the_explorers_units(fresh_net):
    p = Payoff(time_units=True)
    p.expect(B, 0.05, 100.0)
    assert p.outcome(B, 125.0) == pytest.approx(0.2)  # a fifth of an iteration's time saved, not log 1.25
    assert AutoByteTuner(fresh_net, background=False, time_units=True).trial_record.time_units is True
    assert AutoByteTuner(fresh_net, background=False).trial_record.time_units is False


def test_autobyte_reads_the_link_rate_by_default_and_takes_settle_and_rate_rise(fresh_net):
    from autobyte.core.tuning import Controller

    t = AutoByteTuner(fresh_net, background=False)
    c = Controller(t, GRID, GRID[4], "ps", list(MODEL.layer_bytes))
    assert t.settle is False and c.detector is not None and c.detector.rate_rise == 0.5 and not c.wait_mixed
    assert c.detector.settle is False and c.detector.step_change == 0.5  # only a check that stepped inside is dropped
    n = AutoByteTuner(fresh_net, background=False, settle="notify", rate_rise=None)
    c = Controller(n, GRID, GRID[4], "ps", list(MODEL.layer_bytes))
    assert not c.wait_mixed and c.detector is not None and c.detector.settle and c.detector.rate_rise is None
    with pytest.raises(ValueError, match=r"settle must be False, True or 'notify', but got settle='late'"):
        AutoByteTuner(fresh_net, background=False, settle="late")
    with pytest.raises(ValueError, match=r"rate_rise must be None or a number in \(0, 100\), but got rate_rise=0"):
        AutoByteTuner(fresh_net, background=False, rate_rise=0)


def test_autobyte_hands_its_noise_z_to_the_controllers_detector(fresh_net):
    from autobyte.core.tuning import Controller

    t = AutoByteTuner(fresh_net, background=False)  # on by default since stop 37 (docs/benchmarks.md 7.20)
    c = Controller(t, GRID, GRID[4], "ps", list(MODEL.layer_bytes))
    assert t.noise_z == 3.0 and c.detector is not None and c.detector.noise_z == 3.0
    off = Controller(AutoByteTuner(fresh_net, background=False, noise_z=None), GRID, GRID[4], "ps", list(MODEL.layer_bytes))
    assert off.detector is not None and off.detector.noise_z is None
    with pytest.raises(ValueError, match=r"noise_z must be None or a number in \(0, 100\), but got noise_z=0"):
        AutoByteTuner(fresh_net, background=False, noise_z=0)


def test_autobyte_hands_its_mover_z_to_the_mover_and_the_ledgers_scatter_with_it(fresh_net):
    assert AutoByteTuner(fresh_net, background=False).mover.noise_z is None  # off as it ships
    t = AutoByteTuner(fresh_net, background=False, mover_z=2.0)
    assert t.mover.noise_z == 2.0
    _drive(t, GRID[4], [FAST], 16)  # unchanged conditions: configurations measured again give the ledger its gaps
    assert len(t.ledger.gaps) >= 6 and t.ledger.scatter() is not None
    assert max(t.ledger.counts().values()) == 3.0  # the mean's windows, at most memory
    with pytest.raises(ValueError, match=r"mover_z must be None or a number in \(0, 100\), but got mover_z=0"):
        AutoByteTuner(fresh_net, background=False, mover_z=0)


# ---------------------------------------------------------------- trials valued on the job's own landscape (shrink)
def test_payoff_spread_is_the_scale_of_what_trials_found():
    p = Payoff()
    assert p.spread(0.05) == pytest.approx(0.05)  # no trial yet: the prior
    for found in (100.0, 99.0, 101.0):  # three trials against a best of 100: nothing, nothing, 1%
        p.expect(B, 0.05, 100.0)
        p.outcome(B, found)
    flat = math.sqrt((0.05 ** 2 + math.log(1.01) ** 2) / 4)
    assert p.spread(0.05) == pytest.approx(flat) and flat < 0.03  # trials that find nothing wear it down
    p.expect(C, 0.05, 100.0)
    p.outcome(C, 112.0)  # one found 12%
    wide = math.sqrt((0.05 ** 2 + math.log(1.01) ** 2 + math.log(1.12) ** 2) / 5)
    assert p.spread(0.05) == pytest.approx(wide) and wide > 0.05
    assert p.spread(0.05, weight=3.0) == pytest.approx(math.sqrt((3 * 0.05 ** 2 + math.log(1.01) ** 2 + math.log(1.12) ** 2) / 7))
    r = Payoff()
    r.load_state_dict(json.loads(json.dumps(p.state_dict())))
    assert r.spread(0.05) == p.spread(0.05)  # carried in the saved state


@pytest.mark.parametrize("kw", [{"prior": 0.0}, {"prior": float("nan")}, {"weight": 0.0}, {"weight": 1e4}])
def test_payoff_spread_rejects_bad_arguments(kw):
    args = {"prior": 0.1, **kw}
    with pytest.raises(ValueError, match=rf"{next(iter(kw))} must be a number in"):
        Payoff().spread(**args)


def test_explorer_shrinks_predicted_gains_to_the_scale_trials_found():
    # B predicted 6% above the best measured, 5% error (7.5% at its distance), 5 iterations left: tried as predicted
    # (expected gain 0.34 iterations, cost 0.11); where trials found 2% at most, its gain is mostly noise, shrunk to
    # 0.4% with a 2% error, and no trial pays
    ex = Explorer()
    args = (SPACE, SPACE.to_array(), np.asarray([100.0, 106.0, 60.0, 60.0]), {A: 100.0}, A, 100.0, 0.05, 5.0, None, 0)
    plain = ex.propose(*args)
    assert plain is not None and plain[0] == B and "shrunk" not in plain[1]
    assert ex.propose(*args, spread=0.02) is None
    wide = ex.propose(*args, spread=0.5)  # trials found far more than the error: the prediction almost as it is
    assert wide is not None and wide[0] == B and "its gain shrunk to the 50.0% scale of what this job's trials found" in wide[1]
    s = 0.05 * (1 + 0.25 * 2)  # the error at B's distance (two powers of two from A)
    w = 0.25 / (0.25 + s * s)
    mu, sd = w * math.log(1.06), s * math.sqrt(w)
    assert wide[2] == pytest.approx(_expected_improvement(mu, sd))  # the expected improvement of the posterior
    assert "predicted 106.0 samples/s" in wide[1]  # the prediction itself, and the cost, as scored


def test_explorer_does_not_shrink_the_downside():
    # B predicted 6% above the best, 20% error (30% at its distance): its expected cost is the one its prediction and
    # error give whatever the gain is shrunk to (a landscape has a long tail below the best, a ceiling above it)
    args = (SPACE, SPACE.to_array(), np.asarray([100.0, 106.0, 60.0, 60.0]), {A: 100.0}, A, 100.0, 0.2, 400.0, None, 0)
    plain, shrunk = Explorer().propose(*args), Explorer().propose(*args, spread=0.05)
    assert plain is not None and shrunk is not None and plain[0] == shrunk[0] == B
    cost = re.compile(r"expected cost ([0-9.]+)")
    assert cost.search(plain[1]).group(1) == cost.search(shrunk[1]).group(1) != "0.00"
    assert shrunk[2] < plain[2] / 3  # the gain is what shrank


def test_explorer_counts_only_gains_beyond_the_floor():
    # B predicted 3% faster, 2% error (3% at its distance): with 1.3 iterations left it pays when every improvement
    # counts (3.2% of an iteration per iteration, cost 0.03), not when only what beats the mover's 2% threshold does
    floor = Explorer(gain_floor=math.log1p(0.02))

    def args(horizon):
        return SPACE, SPACE.to_array(), np.asarray([100.0, 103.0, 60.0, 60.0]), {A: 100.0}, A, 100.0, 0.02, horizon, None, 0

    assert Explorer().propose(*args(1.3))[0] == B
    assert floor.propose(*args(1.3)) is None
    got = floor.propose(*args(20.0))  # 20 left: it pays, its expected improvement the one beyond the floor
    s = 0.02 * 1.5
    mu = math.log(1.03) - math.log1p(0.02)
    assert got is not None and got[0] == B and got[2] == pytest.approx(_expected_improvement(mu, s))


@pytest.mark.parametrize("kw, message", [({"spread": 0.0}, "spread must be a number in [1e-06, 10]"),
                                         ({"spread": float("inf")}, "spread must be a number in [1e-06, 10]")])
def test_explorer_rejects_a_bad_spread(kw, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        Explorer().propose(SPACE, SPACE.to_array(), np.asarray([100.0, 106.0, 60.0, 60.0]), {A: 100.0}, A, 100.0, 0.05, 20.0,
                           None, 0, **kw)


def test_explorer_rejects_a_bad_gain_floor():
    with pytest.raises(ValueError, match=re.escape("gain_floor must be a number in [0, 1], but got gain_floor=-0.1")):
        Explorer(gain_floor=-0.1)


def _spy_on_spread(t: AutoByteTuner) -> list:
    """The ``spread`` the tuner passes its explorer at each proposal from now on (a list that fills as it runs)."""
    propose, seen = t.explorer.propose, []

    def spy(*a, **k):
        seen.append(a[15] if len(a) > 15 else k.get("spread"))
        return propose(*a, **k)

    t.explorer.propose = spy
    return seen


def test_tuner_shrink_values_trials_by_what_trials_found(fresh_net):
    # with shrink, after trials that found nothing the explorer is given the worn-down scale of what they found;
    # the option is checked and reaches the explorer
    with pytest.raises(ValueError, match=r"shrink must be a number in \[0.001, 10\], but got shrink=0"):
        AutoByteTuner(fresh_net, background=False, shrink=0.0)
    t = AutoByteTuner(fresh_net, background=False, shrink=0.05)
    assert t.explorer.gain_floor == pytest.approx(math.log1p(0.02)) and AutoByteTuner(fresh_net, shrink=None).explorer.gain_floor == 0.0
    cur = t.start(GRID, GRID[4])
    for c in (GRID[5], GRID[7]):  # two trials that found nothing
        t.trial_record.expect(c, 0.05, 100.0)
        t.trial_record.outcome(c, 99.0)
    assert t.trial_record.spread(t.shrink) == pytest.approx(0.05 / math.sqrt(3))
    seen = _spy_on_spread(t)
    t.observe(_window(cur, FAST, 0))
    assert seen and seen[0] == pytest.approx(0.05 / math.sqrt(3))
    assert AutoByteTuner(fresh_net).shrink == 0.05  # the default
    off = AutoByteTuner(fresh_net, background=False, shrink=None)
    off.start(GRID, GRID[4])
    seen = _spy_on_spread(off)
    off.observe(_window(GRID[4], FAST, 0))
    assert seen == [None]  # off: gains as predicted
