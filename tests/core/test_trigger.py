from __future__ import annotations

import math

import pytest

from autobyte.core.space import Config, MiB
from autobyte.core.trigger import AdaptTrigger, GainTrigger

A = Config(1 * MiB, 2 * MiB)
B = Config(4 * MiB, 8 * MiB)
C = Config(8 * MiB, 8 * MiB)


def test_gain_threshold_is_strict_and_configurable():
    t = GainTrigger(min_gain=0.05, cooldown_windows=0)
    assert not t.should_reconfigure(0, A, 100.0, B, 104.9)
    assert not t.should_reconfigure(1, A, 100.0, B, 105.0)
    assert t.should_reconfigure(2, A, 100.0, B, 105.1)
    t2 = GainTrigger(min_gain=0.20, cooldown_windows=0)
    assert not t2.should_reconfigure(0, A, 100.0, B, 119.0)
    assert t2.should_reconfigure(1, A, 100.0, B, 121.0)


def test_same_config_never_reconfigures():
    assert not GainTrigger().should_reconfigure(0, A, 100.0, A, 1000.0)


def test_cooldown_blocks_change_right_after_a_change():
    t = GainTrigger(min_gain=0.05, cooldown_windows=2)
    assert t.should_reconfigure(10, A, 100.0, B, 120.0)
    assert not t.should_reconfigure(11, B, 100.0, C, 150.0)
    assert not t.should_reconfigure(12, B, 100.0, C, 150.0)
    assert t.should_reconfigure(13, B, 100.0, C, 150.0)


def test_going_back_needs_the_revisit_gain_then_forgets():
    t = GainTrigger(min_gain=0.05, cooldown_windows=0, revisit_gain=0.15, memory_windows=5)
    assert t.should_reconfigure(0, A, 100.0, B, 110.0)
    assert not t.should_reconfigure(1, B, 100.0, A, 110.0)  # back to A: 10% < 15%
    assert t.should_reconfigure(2, B, 100.0, C, 110.0)  # elsewhere: 10% > 5%
    # memory expires
    t = GainTrigger(min_gain=0.05, cooldown_windows=0, revisit_gain=0.15, memory_windows=5)
    assert t.should_reconfigure(0, A, 100.0, B, 110.0)
    assert t.should_reconfigure(6, B, 100.0, A, 110.0)


def test_reset_forgets_the_configuration_left():
    t = GainTrigger(min_gain=0.05, cooldown_windows=0, revisit_gain=0.5)
    assert t.should_reconfigure(0, A, 100.0, B, 110.0)
    t.reset()
    assert t.should_reconfigure(1, B, 100.0, A, 110.0)


def test_never_oscillates_between_two_predictions_that_disagree():
    # A predictor biased towards "the other one" by 8% would flip every window
    # with a bare 5% threshold; the trigger must settle after one move.
    t = GainTrigger()
    cur, changes = A, 0
    for w in range(100):
        other = B if cur == A else A
        if t.should_reconfigure(w, cur, 100.0, other, 108.0):
            cur, changes = other, changes + 1
    assert changes <= 5  # once per memory period at most
    t = GainTrigger(memory_windows=1000)
    cur, changes = A, 0
    for w in range(500):
        other = B if cur == A else A
        if t.should_reconfigure(w, cur, 100.0, other, 108.0):
            cur, changes = other, changes + 1
    assert changes == 1


def test_gain_trigger_state_roundtrip():
    t = GainTrigger(cooldown_windows=0)
    assert t.should_reconfigure(3, A, 100.0, B, 110.0)
    t2 = GainTrigger(cooldown_windows=0)
    t2.load_state_dict(t.state_dict())
    assert not t2.should_reconfigure(4, B, 100.0, A, 110.0)


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"min_gain": -0.1}, r"min_gain must be a finite number in \[0, 10\], but got min_gain=-0.1"),
        ({"min_gain": math.nan}, r"min_gain must be a finite number"),
        ({"cooldown_windows": -1}, r"cooldown_windows must be a non-negative integer, but got cooldown_windows=-1"),
        ({"memory_windows": 1.5}, r"memory_windows must be a non-negative integer"),
        ({"revisit_gain": 0.01}, r"revisit_gain must be >= min_gain"),
    ],
)
def test_gain_trigger_rejects_bad_arguments(kw, match):
    with pytest.raises(ValueError, match=match):
        GainTrigger(**kw)


def test_gain_trigger_accepts_zero_threshold():
    t = GainTrigger(min_gain=0.0, revisit_gain=0.0, cooldown_windows=0)
    assert t.should_reconfigure(0, A, 100.0, B, 100.5)


@pytest.mark.parametrize("bad", [math.nan, math.inf, 0.0, -1.0])
def test_gain_trigger_rejects_bad_speeds(bad):
    with pytest.raises(ValueError, match=r"current_speed must be a positive number of samples/s"):
        GainTrigger().should_reconfigure(0, A, bad, B, 100.0)
    with pytest.raises(ValueError, match=r"candidate_speed must be a positive number of samples/s"):
        GainTrigger().should_reconfigure(0, A, 100.0, B, bad)


def test_adapt_threshold_and_release_hysteresis():
    t = AdaptTrigger(max_error=0.10, release=0.5)
    assert not t.should_adapt(109.0, 100.0)
    assert t.should_adapt(111.0, 100.0)
    assert t.should_adapt(108.0, 100.0)  # still adapting: 8% > 5%
    assert t.should_adapt(94.0, 100.0)
    assert not t.should_adapt(104.0, 100.0)  # released at <= 5%
    assert not t.should_adapt(108.0, 100.0)  # needs > 10% again


def test_adapt_patience():
    t = AdaptTrigger(max_error=0.1, patience=2)
    assert not t.should_adapt(150.0, 100.0)
    assert not t.should_adapt(100.0, 100.0)
    assert not t.should_adapt(150.0, 100.0)
    assert t.should_adapt(50.0, 100.0)


def test_adapt_error_is_relative_to_observed():
    assert AdaptTrigger.error(90.0, 100.0) == pytest.approx(0.1)
    assert AdaptTrigger.error(110.0, 100.0) == pytest.approx(0.1)


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"max_error": -1}, r"max_error must be a finite number in \[0, 10\], but got max_error=-1"),
        ({"release": 1.5}, r"release must be a finite number in \[0, 1\], but got release=1.5"),
        ({"patience": 0}, r"patience must be a positive integer, but got patience=0"),
    ],
)
def test_adapt_trigger_rejects_bad_arguments(kw, match):
    with pytest.raises(ValueError, match=match):
        AdaptTrigger(**kw)


@pytest.mark.parametrize("bad", [math.nan, -math.inf, 0.0])
def test_adapt_trigger_rejects_bad_speeds(bad):
    with pytest.raises(ValueError, match=r"observed must be a positive number of samples/s"):
        AdaptTrigger().should_adapt(100.0, bad)
    with pytest.raises(ValueError, match=r"predicted must be a positive number of samples/s"):
        AdaptTrigger().should_adapt(bad, 100.0)


def test_adapt_trigger_state_roundtrip():
    t = AdaptTrigger()
    assert t.should_adapt(150.0, 100.0)
    t2 = AdaptTrigger()
    t2.load_state_dict(t.state_dict())
    assert t2.should_adapt(108.0, 100.0)
