"""The tuner's moves between measured configurations: the mover, the verifier, the aborter."""

from __future__ import annotations

import pytest

from autobyte.core.space import Config, KiB, MiB
from autobyte.meta._moves import Aborter, Mover, Verifier

A, B, C, D = Config(MiB, MiB), Config(4 * MiB, 4 * MiB), Config(16 * MiB, 16 * MiB), Config(256 * KiB, 256 * KiB)


def test_mover_goes_to_the_fastest_measured_beyond_its_threshold():
    m = Mover(min_gain=0.02)
    assert m.propose(1, {A: 100.0}, A, 100.0, None) is None  # nothing else measured
    assert m.propose(2, {A: 100.0, B: 101.0}, A, 100.0, None) is None  # within noise
    cfg, why = m.propose(3, {A: 100.0, B: 110.0, C: 105.0}, A, 100.0, None)
    assert cfg == B and why.startswith("measured best")
    cfg, why = Mover().propose(1, {A: 100.0, B: 80.0}, B, 80.0, A)
    assert cfg == A and why.startswith("rollback")


def test_verifier_re_measures_the_config_a_surprising_trial_left():
    v = Verifier(surprise=0.5)
    assert v.propose((B, 100.0, A), B, 120.0, False) is None  # within 50% of its prediction
    cfg, why = v.propose((B, 100.0, A), B, 260.0, False)
    assert cfg == A and why.startswith("verify")
    assert v.propose((B, 100.0, A), B, 260.0, True) is None  # the detector already saw the change
    assert v.propose((B, 100.0, A), C, 260.0, False) is None  # not the trial's window


def test_verifier_places_a_trial_after_a_change_only_when_it_ran_faster_and_the_change_accounts_for_it():
    import math

    v = Verifier(surprise=0.5)
    assert v.ran_after(math.log(3.0), math.log(3.2))  # 3x faster than predicted, the conditions then 3.2x faster
    assert not v.ran_after(math.log(3.0), math.log(1.5))  # the change accounts for half of it: the trial's own speed
    # 3x slower than predicted, the conditions then 3.2x slower: the change would account for it, but a slow
    # configuration ran so in the old conditions too, and moved it would read faster than it runs in the new ones
    assert not v.ran_after(-math.log(3.0), -math.log(3.2))
    assert not v.ran_after(0.0, 0.0)  # no surprise: nothing to place


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


@pytest.mark.parametrize("bad", [-0.1, float("nan"), True])
def test_mover_rejects_a_bad_min_gain(bad):
    with pytest.raises(ValueError, match="min_gain"):
        Mover(min_gain=bad)
