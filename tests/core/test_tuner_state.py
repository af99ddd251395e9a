"""Tuner state beyond the contract: BO resumed inside its GP phase, AutoByte's adapted head.

The contract itself (every registered tuner's ``state_dict`` round-trips through
JSON to the same decisions) is :func:`autobyte.testing.tuner_contract.check_state_round_trip`,
run over every tuner by ``tests/contract/test_tuner_contract.py``; this file reuses its
simulated windows.
"""

from __future__ import annotations

import importlib.util
import json
from typing import Any, Callable

import pytest

from autobyte.core.tuners import make_tuner
from autobyte.core.tuning import Tuner
from autobyte.testing.tuner_contract import N_WINDOWS, SPACE, START, Step, default_factory, drive


def build(name: str) -> Tuner:
    return default_factory(name)()


def run(tuner: Tuner, windows: range, cur) -> tuple[list[Step], Any]:
    return drive(tuner, windows, cur, inside_space=False)


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
