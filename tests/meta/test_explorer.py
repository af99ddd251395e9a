"""The tuner's trials: which unmeasured candidate pays for its trial (Explorer), what trials found (TrialRecord)."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest

from autobyte.core.space import Config, KiB, MiB, SearchSpace
from autobyte.meta._explorer import Explorer, TrialRecord
from autobyte.meta._scorer import Equivalence

A, B, C, D = Config(MiB, MiB), Config(4 * MiB, 4 * MiB), Config(16 * MiB, 16 * MiB), Config(256 * KiB, 256 * KiB)
SPACE = SearchSpace([A, B, C, D])
#: a 3-tensor model of 1.5 MiB: every partition from 2 MiB up fuses it into one message, which no credit holds back
SMALL = np.array([512 * KiB, 256 * KiB, 768 * KiB], dtype=np.float64)
E1, E2, E3 = Config(4 * MiB, 4 * MiB), Config(16 * MiB, 16 * MiB), Config(2 * MiB, 2 * MiB)  # one schedule
F1, F2 = Config(256 * KiB, 256 * KiB), Config(256 * KiB, 512 * KiB)  # split tensors: schedules of their own
ESPACE = SearchSpace([E1, E2, E3, F1, F2])


def _expected_improvement(mu: float, s: float) -> float:
    """``E[max(X, 0)]`` for ``X ~ N(mu, s^2)``, in closed form: what the explorer's gain must equal."""
    return s * math.exp(-0.5 * (mu / s) ** 2) / math.sqrt(2 * math.pi) + mu * 0.5 * (1 + math.erf(mu / s / math.sqrt(2)))


def _explore(predicted, measured, current=A, speed=100.0, sigma=0.05, horizon=200.0, allowance=None, misses=0, **kw):
    return Explorer(**kw).propose(SPACE, SPACE.to_array(), np.asarray(predicted, float), measured, current, speed, sigma,
                                  horizon, allowance, misses)


def _gain(why: str) -> float:
    """The expected gain (iterations) a trial's reason reports."""
    m = re.search(r"expected gain ([0-9.]+) iterations", why)
    assert m is not None, why
    return float(m.group(1))


def test_explorer_tries_the_candidate_worth_most():
    cfg, why = _explore([100.0, 120.0, 104.0, 90.0], {A: 100.0})
    assert cfg == B and why.startswith("explore")
    # the reason gives the expected improvement over the horizon: at the error widened by 2 powers of two of distance
    assert _gain(why) == pytest.approx(200.0 * _expected_improvement(math.log(1.2), 0.05 * (1 + 0.25 * 2)), abs=0.005)


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
    cfg, why = _explore([100.0, 100.0, 60.0, 60.0], {A: 100.0}, sigma=0.2, horizon=10.0, abort_margin=0.1)
    assert cfg == B and "expected cost 0.87" in why
    # and one sigma below its prediction it would be ended, so the guard's allowance covers 7 iterations of it
    assert _explore([100.0, 102.0, 60.0, 60.0], {A: 100.0}, sigma=0.2, allowance=2.5) is None
    assert _explore([100.0, 102.0, 60.0, 60.0], {A: 100.0}, sigma=0.2, allowance=2.5, abort_margin=0.1)[0] == B


def test_explorer_reaches_only_near_measured_configs():
    # D (256 KiB) is 2 powers of two from A; with max_distance=1 it is out of reach
    assert _explore([100.0, 90.0, 90.0, 150.0], {A: 100.0}, max_distance=1.0) is None
    assert _explore([100.0, 90.0, 90.0, 150.0], {A: 100.0}, max_distance=2.0)[0] == D


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


@pytest.mark.parametrize("kw", [{"trial_iters": 0}, {"widen": -1}, {"max_distance": float("nan")}, {"max_misses": 0},
                                {"abort_margin": 0.0}, {"abort_iters": 13}])
def test_explorer_rejects_bad_arguments(kw):
    with pytest.raises(ValueError, match=rf"{next(iter(kw))} must be a number in"):
        Explorer(**kw)


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
    assert _gain(wide[1]) == pytest.approx(5.0 * _expected_improvement(mu, sd), abs=0.005)  # the posterior's
    assert "predicted 106.0 samples/s" in wide[1]  # the prediction itself, and the cost, as scored


def test_explorer_does_not_shrink_the_downside():
    # B predicted 6% above the best, 20% error (30% at its distance): its expected cost is the one its prediction and
    # error give whatever the gain is shrunk to (a landscape has a long tail below the best, a ceiling above it)
    args = (SPACE, SPACE.to_array(), np.asarray([100.0, 106.0, 60.0, 60.0]), {A: 100.0}, A, 100.0, 0.2, 400.0, None, 0)
    plain, shrunk = Explorer().propose(*args), Explorer().propose(*args, spread=0.05)
    assert plain is not None and shrunk is not None and plain[0] == shrunk[0] == B
    cost = re.compile(r"expected cost ([0-9.]+)")
    assert cost.search(plain[1]).group(1) == cost.search(shrunk[1]).group(1) != "0.00"
    assert _gain(shrunk[1]) < _gain(plain[1]) / 3  # the gain is what shrank


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
    assert got is not None and got[0] == B and _gain(got[1]) == pytest.approx(20.0 * _expected_improvement(mu, s), abs=0.005)


@pytest.mark.parametrize("kw, message", [({"spread": 0.0}, "spread must be a number in [1e-06, 10]"),
                                         ({"spread": float("inf")}, "spread must be a number in [1e-06, 10]")])
def test_explorer_rejects_a_bad_spread(kw, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        Explorer().propose(SPACE, SPACE.to_array(), np.asarray([100.0, 106.0, 60.0, 60.0]), {A: 100.0}, A, 100.0, 0.05, 20.0,
                           None, 0, **kw)


def test_explorer_counts_a_gain_only_where_the_trials_window_ends_in_these_conditions():
    # B predicted 20% faster: tried while the conditions are expected to last, its gain taken times the chance that
    # its 12 iterations end inside them (1 - 12 / left); with 12 or fewer left, a trial finds nothing it can keep
    pred, measured = [100.0, 120.0, 104.0, 90.0], {A: 100.0}

    def explore(left):
        return Explorer().propose(SPACE, SPACE.to_array(), np.asarray(pred), measured, A, 100.0, 0.05, 200.0, None,
                                  left=left)

    full, part = explore(None), explore(30.0)
    assert full is not None and part is not None and full[0] == part[0] == B
    assert _gain(part[1]) == pytest.approx(0.6 * _gain(full[1]), abs=0.01)
    assert "its window ends in them with chance 0.60" in part[1] and "chance" not in full[1]
    assert explore(500.0) is not None
    assert explore(12.0) is None and explore(0.0) is None
    # a small gain that pays for its trial's cost when the window is sure to be kept, not with a chance of 0.25

    def small(left):
        return Explorer().propose(SPACE, SPACE.to_array(), np.asarray([100.0, 101.0, 90.0, 90.0]), measured, A, 100.0,
                                  0.01, 5.0, None, left=left)

    assert small(None) is not None and small(16.0) is None


@pytest.mark.parametrize("left", [-1.0, float("nan"), float("inf")])
def test_explorer_rejects_a_bad_left(left):
    with pytest.raises(ValueError, match=re.escape("left must be a number in [0, 1e+12]")):
        Explorer().propose(SPACE, SPACE.to_array(), np.asarray([100.0, 106.0, 60.0, 60.0]), {A: 100.0}, A, 100.0, 0.05,
                           20.0, None, left=left)


def test_explorer_rejects_a_bad_gain_floor():
    with pytest.raises(ValueError, match=re.escape("gain_floor must be a number in [0, 1], but got gain_floor=-0.1")):
        Explorer(gain_floor=-0.1)


# ---------------------------------------------------------------- what trials found
def test_trial_record_records_only_the_pending_trial():
    p = TrialRecord(memory=2)
    assert p.outcome(B, 90.0) is None  # nothing pending
    p.expect(B, 100.0)
    assert p.outcome(C, 90.0) is None and p.pending is None and not p.found  # another config ran: not this trial
    p.expect(B, 100.0)
    p.drop()  # conditions changed under it
    assert p.outcome(B, 90.0) is None and not p.found
    p.expect(B, 100.0)
    assert p.outcome(B, 90.0) == 0.0  # ran slower than the best measured: found nothing
    p.expect(C, 100.0)
    assert p.outcome(C, 106.0) == pytest.approx(math.log(1.06))
    p.expect(D, 100.0)
    p.outcome(D, 50.0)
    assert list(p.found) == [pytest.approx(math.log(1.06)), 0.0]  # the last `memory` trials
    p.expect(A, 120.0)
    q = TrialRecord(memory=2)
    q.load_state_dict(json.loads(json.dumps(p.state_dict())))
    assert list(q.found) == list(p.found) and q.pending == (A, 120.0)


def test_trial_record_spread_is_the_scale_of_what_trials_found():
    p = TrialRecord()
    assert p.spread(0.05) == pytest.approx(0.05)  # no trial yet: the prior
    for found in (100.0, 99.0, 101.0):  # three trials against a best of 100: nothing, nothing, 1%
        p.expect(B, 100.0)
        p.outcome(B, found)
    flat = math.sqrt((0.05 ** 2 + math.log(1.01) ** 2) / 4)
    assert p.spread(0.05) == pytest.approx(flat) and flat < 0.03  # trials that find nothing wear it down
    p.expect(C, 100.0)
    p.outcome(C, 112.0)  # one found 12%
    wide = math.sqrt((0.05 ** 2 + math.log(1.01) ** 2 + math.log(1.12) ** 2) / 5)
    assert p.spread(0.05) == pytest.approx(wide) and wide > 0.05
    assert p.spread(0.05, weight=3.0) == pytest.approx(math.sqrt((3 * 0.05 ** 2 + math.log(1.01) ** 2 + math.log(1.12) ** 2) / 7))
    r = TrialRecord()
    r.load_state_dict(json.loads(json.dumps(p.state_dict())))
    assert r.spread(0.05) == p.spread(0.05)  # carried in the saved state


def test_trial_record_loads_a_record_of_expected_and_realised_gains():
    # a state saved when the record kept each trial's expected gain beside what it found
    p = TrialRecord()
    p.load_state_dict({"record": [[0.1, 0.0], [0.05, 0.02]], "pending": [MiB, MiB, 0.07, 120.0]})
    assert list(p.found) == [0.0, 0.02] and p.pending == (A, 120.0)
    assert p.outcome(A, 132.0) == pytest.approx(math.log(1.1))


@pytest.mark.parametrize("kw", [{"prior": 0.0}, {"prior": float("nan")}, {"weight": 0.0}, {"weight": 1e4}])
def test_trial_record_spread_rejects_bad_arguments(kw):
    args = {"prior": 0.1, **kw}
    with pytest.raises(ValueError, match=rf"{next(iter(kw))} must be a number in"):
        TrialRecord().spread(**args)


def test_trial_record_rejects_bad_arguments():
    with pytest.raises(ValueError, match=re.escape("memory must be a number in [1, 1000], but got memory=0")):
        TrialRecord(memory=0)
    for best in (0.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="best_known must be a positive finite speed, but got best_known="):
            TrialRecord().expect(B, best)


def test_the_start_outside_the_grid_counts_as_its_grid_point_and_is_never_tried_beside_itself():
    # ByteScheduler's default (4,000,000 bytes, credit 4X) is 0.07 of a doubling below B's partition: a trial of the
    # grid's <4 MiB> beside it measures the noise (the explorer tried it in a link-then-compute run, 2.7% "slower")
    start = Config(4_000_000, 4_000_000)
    assert SPACE.grid_point(start) == B and SPACE.grid_point(B) == B
    assert SPACE.grid_point(Config(6 * MiB, 6 * MiB)) is None  # 0.58 of a doubling from the nearest: no grid point
    cfg, _ = _explore([112.0, 130.0, 99.0, 80.0], {start: 100.0}, current=start)
    assert cfg == A  # B is predicted fastest, and it is the start in all but name: A is tried
    got = _explore([100.0, 130.0, 99.0, 80.0], {start: 100.0, A: 100.0, C: 99.0, D: 80.0}, current=start)
    assert got is None  # everything else measured: nothing left to try
    # one measured outside the grid and more than half a step away is no grid point: its neighbour is still tried
    far = Config(6 * MiB, 6 * MiB)
    tried = _explore([100.0, 130.0, 99.0, 80.0], {far: 100.0, A: 100.0, C: 99.0, D: 80.0}, current=far)
    assert tried is not None and tried[0] == B
