"""Contract: every registered tuner's ``state_dict`` round-trips through JSON to the same decisions.

A tuner runs on a deterministic sequence of simulated windows (ResNet50, 8
workers, parameter server; the bandwidth steps through 10, 0.5, 40 and 1
Gbit/s every 8 windows, where the best configuration differs, so regimes
change, AutoByte moves, adapts and explores); at a checkpoint
its state goes through ``json.dumps``/``json.loads`` into a fresh tuner, which
continues. Every later decision must equal the uninterrupted run's.
"""

from __future__ import annotations

import importlib.util
import json
from typing import Any, Callable

import pytest

from autobyte import sim
from autobyte.core.space import Config, KiB, MiB, SearchSpace
from autobyte.core.tuners import make_tuner, tuner_names
from autobyte.core.tuning import Observation, Tuner

SPACE = SearchSpace.grid([256 * KiB, MiB, 4 * MiB, 16 * MiB, 64 * MiB], [1, 2, 4])
START = Config(4 * MiB, 8 * MiB)
N_WINDOWS = 48
RATES_GBPS = (10.0, 0.5, 40.0, 1.0)
#: Checkpoints: inside BO's random and GP phases, inside grid search, across regime changes
#: and AutoByte's adaptations (windows 3, 4 and 33 in this sequence).
CHECKPOINTS = (2, 5, 12, 21, 30, 36)
_cache: dict[tuple[Config, int], Observation] = {}


def window(config: Config, w: int) -> Observation:
    """Window ``w`` under ``config``: deterministic; the link changes every 8 windows."""
    key = (config, w)
    if key not in _cache:
        gbps = RATES_GBPS[(w // 8) % len(RATES_GBPS)]
        res = sim.simulate(sim.get_model("resnet50"), sim.Cluster.from_gbps(8, gbps, "ps"), config, n_iters=2, seed=w)
        f = res.features()
        _cache[key] = Observation(w * 10, config, float(f.speed.sum()), f)
    return _cache[key]


def build(name: str) -> Tuner:
    if name == "autobyte":
        from autobyte.meta import MetaNetwork

        # a private network (adaptation changes its head); a 3% error bar so that it adapts
        # in this sequence; inline adaptation bounded by epochs, not by wall time: deterministic
        return make_tuner("autobyte", network=MetaNetwork.load_default(), background=False, adapt_time_s=1e6,
                          max_error=0.03)
    if name == "grid":
        return make_tuner("grid", space=SPACE)
    if name == "bo":
        return make_tuner("bo", arch="ps", seed=0)
    return make_tuner(name)


Step = tuple[Config, Any]


def run(tuner: Tuner, windows: range, cur: Config) -> tuple[list[Step], Config]:
    steps: list[Step] = []
    for w in windows:
        d = tuner.observe(window(cur, w))
        steps.append((cur, None if d is None else (d.config, d.reason, d.predicted_speed)))
        if d is not None:
            cur = d.config
    return steps, cur


def resumed(name: str, at: int, through: Callable[[dict[str, Any]], dict[str, Any]]) -> list[Step]:
    first = build(name)
    cur = first.start(SPACE, START)
    head, cur = run(first, range(at), cur)
    state = through(first.state_dict())
    second = build(name)
    second.start(SPACE, cur)
    second.load_state_dict(state)
    tail, _ = run(second, range(at, N_WINDOWS), cur)
    return head + tail


_HAS_BO = importlib.util.find_spec("bayes_opt") is not None
needs_bo = pytest.mark.skipif(not _HAS_BO, reason="bayesian-optimization is not installed (pip install 'autobyte[tune]')")


@pytest.mark.parametrize("name", [pytest.param(n, marks=needs_bo) if n == "bo" else n for n in tuner_names()])
def test_state_round_trips_through_json_to_the_same_decisions(name):
    t = build(name)
    whole, _ = run(t, range(N_WINDOWS), t.start(SPACE, START))
    # the sequence must make every searching tuner decide several times, or the test proves little
    assert sum(d is not None for _, d in whole) >= (0 if name == "static" else 4), whole
    for at in CHECKPOINTS:
        again = resumed(name, at, lambda s: json.loads(json.dumps(s)))
        for w, (a, b) in enumerate(zip(whole, again)):
            assert a == b, f"{name} resumed at window {at} diverges at window {w}: {b} instead of {a}"


@needs_bo
def test_bo_resumed_mid_search_suggests_what_the_uninterrupted_run_does():
    # the case found broken: ByteScheduler's BO resumed inside its GP phase
    t = build("bo")
    whole, _ = run(t, range(16), t.start(SPACE, START))
    again = resumed("bo", 12, lambda s: json.loads(json.dumps(s)))[:16]
    assert [d for _, d in whole] == [d for _, d in again]
    assert sum(d is not None and "expected improvement" in d[1] for _, d in whole[12:]) >= 2


def test_autobyte_state_carries_the_adapted_head():
    t = build("autobyte")
    before = [k.copy() for k, _ in t.net._np_head.d]
    run(t, range(N_WINDOWS), t.start(SPACE, START))
    assert t.adapter.n_runs > 0, "the sequence must make the tuner adapt, or the head is not exercised"
    state = json.loads(json.dumps(t.state_dict()))
    fresh = build("autobyte")
    fresh.start(SPACE, START)
    fresh.load_state_dict(state)
    for (k, b), (k2, b2), k0 in zip(fresh.net._np_head.d, t.net._np_head.d, before):
        assert (k == k2).all() and (b == b2).all()
    assert any((k != k0).any() for (k, _), k0 in zip(fresh.net._np_head.d, before))


def test_autobyte_refuses_a_head_of_another_shape():
    t = build("autobyte")
    t.start(SPACE, START)
    state = json.loads(json.dumps(t.state_dict()))
    state["head"] = state["head"][:2] + [[{"dtype": "<f4", "shape": [3, 1], "data": [0.0] * 3}, state["head"][2][1]]]
    with pytest.raises(ValueError, match="head shapes"):
        build("autobyte").load_state_dict(state)


@needs_bo
def test_bo_with_fresh_randomness_resumes_to_the_same_decisions():
    # seed=None draws a seed once; the state carries it, so a resumed run still agrees
    first = make_tuner("bo", arch="ps", seed=None)
    cur = first.start(SPACE, START)
    head, cur = run(first, range(12), cur)
    state = json.loads(json.dumps(first.state_dict()))
    second = make_tuner("bo", arch="ps", seed=None)
    second.start(SPACE, cur)
    second.load_state_dict(state)
    rest_a, _ = run(first, range(12, 16), cur)
    rest_b, _ = run(second, range(12, 16), cur)
    assert rest_a == rest_b
