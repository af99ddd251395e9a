"""The tuner's predictions: one per schedule (Equivalence), anchored and calibrated on this job (Scorer)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from autobyte import sim
from autobyte.core.space import Config, KiB, MiB, SearchSpace
from autobyte.meta._scorer import Equivalence, Scorer

#: a 3-tensor model of 1.5 MiB: every partition from 2 MiB up fuses it into one message, which no credit holds back
SMALL = np.array([512 * KiB, 256 * KiB, 768 * KiB], dtype=np.float64)
E1, E2, E3 = Config(4 * MiB, 4 * MiB), Config(16 * MiB, 16 * MiB), Config(2 * MiB, 2 * MiB)  # one schedule
F1, F2 = Config(256 * KiB, 256 * KiB), Config(256 * KiB, 512 * KiB)  # split tensors: schedules of their own
ESPACE = SearchSpace([E1, E2, E3, F1, F2])
FAST = sim.Cluster.from_gbps(4, 10, "ps")


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


def test_scorer_downside_is_the_worst_over_prediction(fresh_net):
    s = Scorer(fresh_net, ESPACE)
    assert s.downside() == 0.0
    s.checked(110.0, 110.0, raw=math.log(1.1), anchor=100.0)  # came true
    assert s.downside() == pytest.approx(0.0, abs=1e-12)
    s.checked(120.0, 30.0, raw=math.log(1.2), anchor=100.0)  # predicted +20%, ran 3.3x slower
    b = s.slope()
    assert s.downside() == pytest.approx(b * math.log(1.2) - math.log(0.3))
    assert s.downside() > s.sigma()


def test_scorer_loads_a_state_with_keys_it_no_longer_keeps(fresh_net):
    s = Scorer(fresh_net, ESPACE)
    s.checked(120.0, 30.0, raw=math.log(1.2), anchor=100.0)
    state = json.loads(json.dumps(s.state_dict()))
    back = Scorer(fresh_net, ESPACE)
    back.load_state_dict(dict(state, trials=[-0.1, 0.05]))  # saved when the scorer kept its trials' errors
    assert back.state_dict() == state and back.slope() == s.slope()


def test_scorer_fits_this_jobs_trend_along_credit_and_partition(fresh_net):
    s = Scorer(fresh_net, ESPACE)
    assert list(s.trend()) == [0.0, 0.0]
    # the network saw no gain (raw 0); doubling the credit measured +10% twice, halving the partition -5%
    for _ in range(2):
        s.checked(100.0, 110.0, raw=0.0, anchor=100.0, move=s.move(F1, F2))
    s.checked(100.0, 95.0, raw=0.0, anchor=100.0, move=s.move(Config(512 * KiB, 512 * KiB), F1))
    d = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, -1.0]])
    y = np.log([1.1, 1.1, 0.95])
    assert s.trend() == pytest.approx(np.linalg.solve(d.T @ d + 0.5 * np.eye(2), d.T @ y))
    assert s.trend()[0] > 0 and s.trend()[1] > 0
    sc = s.score(F1, 100.0, _features(F1))
    # F2 is F1 with twice the credit: the trend adds what credit measured here to the network's ratio
    assert sc.predicted[4] == pytest.approx(100.0 * math.exp(s.slope() * sc.raw[4] + s.trend()[0]))
    assert sc.predicted[0] == sc.predicted[1] == sc.predicted[2]  # still one prediction per schedule
    # what the pairs measured beyond slope and trend is the error; a pair without its move fits the slope only
    assert s.sigma() < abs(math.log(1.1))
    back = Scorer(fresh_net, ESPACE)
    back.load_state_dict(json.loads(json.dumps(s.state_dict())))
    assert list(back.trend()) == list(s.trend())
    old = Scorer(fresh_net, ESPACE)
    old.load_state_dict({"pairs": s.state_dict()["pairs"]})  # saved before moves were kept
    assert list(old.trend()) == [0.0, 0.0]
    assert list(Scorer(fresh_net, ESPACE, calibrate=False).trend()) == [0.0, 0.0]


def test_scorer_rejects_a_bad_ridge(fresh_net):
    with pytest.raises(ValueError, match=r"ridge must be a number in \[1e-06, 1e\+06\], but got ridge=0"):
        Scorer(fresh_net, ESPACE, ridge=0)
