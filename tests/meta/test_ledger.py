"""The tuner's ledger: measurements filed by regime, regimes recalled when their conditions return."""

from __future__ import annotations

import json

import pytest

from autobyte.core.space import Config, KiB, MiB
from autobyte.meta._ledger import Ledger

A, B, C, D = Config(MiB, MiB), Config(4 * MiB, 4 * MiB), Config(16 * MiB, 16 * MiB), Config(256 * KiB, 256 * KiB)


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


def test_ledger_expects_what_is_left_of_this_occurrence():
    led = Ledger(default_horizon=123)
    assert led.left(0) == 123
    led.observe(10, A, 100.0, False)
    led.observe(20, A, 50.0, True)  # the first regime lasted 20 iterations
    assert led.left(25) == pytest.approx(15.0) and led.left(45) == 0.0  # a new regime: the run's typical 20, 5 (25) spent
    led.observe(60, A, 100.0, True)  # back: regime 0 recalled, its one occurrence lasted 20
    assert led.current.ident == 0 and led.left(70) == pytest.approx(10.0)
    assert led.horizon(70) == pytest.approx(10.0 + 20.0)  # and one more occurrence expected


def test_ledger_weighs_a_half_window_by_its_share():
    led = Ledger(memory=3)
    led.observe(10, A, 100.0, False, weight=0.5)  # a trial ended at its first check
    assert led.current.measured[A][:2] == [100.0, 0.5]
    led.observe(20, A, 130.0, False)  # a full window counts twice as much
    assert led.current.measured[A][0] == pytest.approx((100.0 * 0.5 + 130.0) / 1.5)
    assert led.current.measured[A][1] == pytest.approx(1.5)


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


def _spike(led):
    """Regime 0: A 100 (two windows), B 90 (slower); then one check of A at 130 shows a change (regime 1)."""
    led.observe(10, A, 100.0, False)
    led.observe(20, B, 90.0, False)
    led.observe(30, A, 100.0, False)
    led.current.misses = 2
    r = led.observe(35, A, 130.0, True)
    assert r.ident == 1 and led.recalled is None and led.probe(A) is None  # regime 0 ruled out by A's own speed
    return led


def test_ledger_keeps_a_change_seen_on_a_configurations_own_speed():
    led = _spike(Ledger())
    r = led.observe(45, A, 102.0, False)  # A back at its old speed: the regime left stays ruled out
    assert led.recalled is None and r.ident == 1 and r.speeds(30) == {A: pytest.approx(116.0)}


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


def test_ledger_loads_a_state_with_keys_it_no_longer_keeps():
    led = _spike(Ledger())
    state = json.loads(json.dumps(led.state_dict()))
    old = dict(state, shown=[MiB, MiB, 130.0], gaps=[0.01, 0.02])  # saved when the ledger kept these
    back = Ledger()
    back.load_state_dict(old)
    assert back.state_dict() == state
