"""How tuners behave on the real simulator: they settle, and end no slower than they started.

The interface contract (decisions, state, bad input) is :mod:`autobyte.testing.tuner_contract`,
run over every registered tuner by ``tests/contract/test_tuner_contract.py``.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from autobyte import sim
from autobyte.core.space import Config, MiB, SearchSpace
from autobyte.core.tuners import make_tuner
from autobyte.core.tuning import Decision, Observation, Tuner

SPACE = SearchSpace.grid([MiB, 4 * MiB, 16 * MiB], [1, 2, 4])
MODEL = "resnet50"


def window(config: Config, w: int, gbps: float = 5.0) -> Observation:
    res = sim.simulate(sim.get_model(MODEL), sim.Cluster.from_gbps(4, gbps, "ps"), config, n_iters=2, seed=w)
    f = res.features()
    return Observation(w * 10, config, float(f.speed.sum()), f)


def build(name: str, net=None) -> Tuner:
    if name == "autobyte":
        return make_tuner("autobyte", network=net, background=False)
    if name == "grid":
        return make_tuner("grid", space=SPACE)
    if name == "bo":
        if importlib.util.find_spec("bayes_opt") is None:
            pytest.skip("the BO tuner needs bayesian-optimization (pip install 'autobyte[tune]'), absent here")
        return make_tuner("bo", arch="ps", seed=0)
    return make_tuner(name)


def run(tuner: Tuner, n_windows: int, start: Config = Config(4 * MiB, 8 * MiB)) -> list[Config]:
    cur = tuner.start(SPACE, start)
    assert isinstance(cur, Config)
    seen = []
    for w in range(n_windows):
        seen.append(cur)
        d = tuner.observe(window(cur, w))
        assert d is None or isinstance(d, Decision)
        if d is not None:
            assert isinstance(d.config, Config) and isinstance(d.reason, str) and d.reason
            cur = d.config
    return seen


NAMES = ["static", "grid", "bo", "autobyte"]


@pytest.fixture()
def tuner_factory(fresh_net):
    return lambda name: build(name, fresh_net)


@pytest.mark.parametrize("name", NAMES)
def test_settles_in_a_steady_environment(name, tuner_factory):
    # after its search, a tuner must stop moving: at most one change in 20 windows
    settle = {"static": 0, "grid": len(SPACE) + 2, "bo": 17, "autobyte": 12}[name]
    configs = run(tuner_factory(name), settle + 20)
    tail = configs[settle:]
    changes = sum(a != b for a, b in zip(tail, tail[1:]))
    assert changes <= 1


def test_autobyte_says_it_ignored_a_bad_window(tuner_factory):
    t = tuner_factory("autobyte")
    cur = t.start(SPACE, Config(4 * MiB, 8 * MiB))
    obs = window(cur, 0)
    with pytest.warns(UserWarning):
        d = t.observe(Observation(obs.iteration, obs.config, float("nan"), obs.features))
    assert d is None


@pytest.mark.parametrize("name", ["grid", "bo", "autobyte"])
def test_ends_no_slower_than_it_started(name, tuner_factory):
    start = Config(16 * MiB, 16 * MiB)
    t = tuner_factory(name)
    configs = run(t, 30, start=start)
    final = np.mean([window(configs[-1], 100 + k).speed for k in range(2)])
    initial = np.mean([window(start, 100 + k).speed for k in range(2)])
    assert final >= 0.97 * initial


def test_autobyte_ends_a_losing_trial_at_its_first_check_through_the_controller(fresh_net):
    from autobyte.core.tuning import Controller

    def drive(t: Tuner) -> Controller:
        model = sim.get_model(MODEL)
        start = Config(4 * MiB, 8 * MiB)
        ctl = Controller(t, SPACE, start, "ps", model.layer_bytes, window_iters=10, warmup_iters=0, check_iters=5)
        cur = ctl.current
        for c in range(60):  # the link drops from 5 to 1 Gbit/s halfway
            res = sim.simulate(model, sim.Cluster.from_gbps(4, 5.0 if c < 30 else 1.0, "ps"), cur, n_iters=5, seed=c)
            d = ctl.decide(5 * c + 4, res.window_stats())
            if d is not None:
                ctl.applied(5 * c + 5, d.config)
                cur = d.config
        return ctl

    ctl = drive(make_tuner("autobyte", network=fresh_net, background=False))
    aborts = [e for e in ctl.history if str(e.get("reason", "")).startswith("abort:")]
    assert aborts, ctl.history
    for e in aborts:  # a check of its own, five iterations of the trial, back to a measured configuration
        assert e["check"] is True and e["iterations"] == 5 and e["new_config"] != e["config"]
    fresh_net.reset_head()
    off = drive(make_tuner("autobyte", network=fresh_net, background=False, abort_margin=None))
    assert not any(str(e.get("reason", "")).startswith("abort:") for e in off.history)  # (a short trial may still end at a check)


def test_autobyte_guard_trip_goes_back_to_the_start(fresh_net):
    """The guard's trip takes the run back to the starting configuration, held there, even where the tuner
    measured a configuration faster than the start in these conditions."""
    from autobyte.core.tuning import Controller

    model = sim.get_model(MODEL)
    start = Config(MiB, 4 * MiB)  # a start from which its trials and its search trip the guard on this model
    t = make_tuner("autobyte", network=fresh_net, background=False)
    ctl = Controller(t, SPACE, start, "ps", model.layer_bytes, window_iters=10, warmup_iters=0, check_iters=5)
    cur = ctl.current
    for c in range(30):
        res = sim.simulate(model, sim.Cluster.from_gbps(4, 5.0, "ps"), cur, n_iters=5, seed=c)
        d = ctl.decide(5 * c + 4, res.window_stats())
        if d is not None:
            ctl.applied(5 * c + 5, d.config)
            cur = d.config
    trips = [e for e in ctl.history if str(e.get("reason", "")).startswith("guard:")]
    assert trips and trips[0]["new_config"] == start.to_dict(), ctl.history
    assert "back to the starting configuration for 50 iterations" in trips[0]["reason"]
    assert any(e.get("speed", 0) > 1.03 * trips[0]["predicted_speed"] for e in ctl.history), ctl.history  # one ran faster
