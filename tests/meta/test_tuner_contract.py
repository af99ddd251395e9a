"""Contract every tuner passes, on the real simulator (optuna's pytest_samplers style)."""

from __future__ import annotations

import importlib.util
import json

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
def test_decisions_are_configs_and_state_is_plain(name, tuner_factory):
    t = tuner_factory(name)
    run(t, 5)
    json.dumps(t.state_dict())  # plain types only
    t.load_state_dict(json.loads(json.dumps(t.state_dict())))


@pytest.mark.parametrize("name", NAMES)
def test_settles_in_a_steady_environment(name, tuner_factory):
    # after its search, a tuner must stop moving: at most one change in 20 windows
    settle = {"static": 0, "grid": len(SPACE) + 2, "bo": 17, "autobyte": 12}[name]
    configs = run(tuner_factory(name), settle + 20)
    tail = configs[settle:]
    changes = sum(a != b for a, b in zip(tail, tail[1:]))
    assert changes <= 1


@pytest.mark.parametrize("name", ["grid", "autobyte"])
def test_stays_inside_the_search_space(name, tuner_factory):
    configs = run(tuner_factory(name), 12)
    assert all(c in SPACE for c in configs[1:])


@pytest.mark.parametrize("name", NAMES)
def test_a_bad_window_never_raises(name, tuner_factory):
    t = tuner_factory(name)
    cur = t.start(SPACE, Config(4 * MiB, 8 * MiB))
    obs = window(cur, 0)
    bad = Observation(obs.iteration, obs.config, float("nan"), obs.features)
    with pytest.warns(UserWarning) if name == "autobyte" else _nothing():
        d = t.observe(bad)
    assert d is None or isinstance(d, Decision)


@pytest.mark.parametrize("name", ["grid", "bo", "autobyte"])
def test_ends_no_slower_than_it_started(name, tuner_factory):
    start = Config(16 * MiB, 16 * MiB)
    t = tuner_factory(name)
    configs = run(t, 30, start=start)
    final = np.mean([window(configs[-1], 100 + k).speed for k in range(2)])
    initial = np.mean([window(start, 100 + k).speed for k in range(2)])
    assert final >= 0.97 * initial


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False
