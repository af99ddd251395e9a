"""The tuner contract (:mod:`autobyte.testing.tuner_contract`) for every registered tuner."""

from __future__ import annotations

from typing import Any

import pytest

from autobyte.core.space import Config
from autobyte.core.tuners import tuner_names
from autobyte.core.tuning import Decision, Observation, Tuner
from autobyte.testing import tuner_contract as contract

#: the uninterrupted run must decide at least this often, or the state round trip proves little
MIN_DECISIONS = {"static": 0}


#: tuners whose contract runs are whole simulated runs with online adaptation (tens of seconds): the full suite's
SLOW = {"autobyte"}


@pytest.fixture(params=[pytest.param(n, marks=pytest.mark.integration) if n in SLOW else n for n in tuner_names()])
def name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture()
def inside(name: str) -> bool:
    return contract.searches_the_space(name)


@pytest.fixture()
def factory(name: str) -> contract.TunerFactory:
    build = contract.default_factory(name)
    try:
        build().start(contract.SPACE, contract.START)
    except ImportError as exc:  # e.g. BO without bayesian-optimization
        pytest.skip(f"tuner {name!r} cannot be built here: {exc}")
    return build


def test_start_returns_a_config(factory):
    contract.check_start(factory)


def test_decisions_are_none_or_inside_the_space(factory, inside):
    contract.check_decisions(factory, inside_space=inside)


def test_same_factory_same_decisions(factory, inside):
    contract.check_deterministic(factory, inside_space=inside)


def test_state_round_trips_through_json_to_the_same_decisions(factory, name, inside):
    contract.check_state_round_trip(factory, min_decisions=MIN_DECISIONS.get(name, 4), inside_space=inside)


def test_bad_observations_never_raise(factory, inside):
    contract.check_bad_observations(factory, inside_space=inside)


# ------------------------------------------------- the contract catches what it says


class _Broken(Tuner):
    """Leaves the space, and keeps a set (not JSON) in its state."""

    def __init__(self, fault: str) -> None:
        self.fault, self.n = fault, 0

    def observe(self, obs: Observation) -> Decision | None:
        self.n += 1
        if self.fault == "outside":
            return Decision(Config(3, 3), "out of the space")
        if self.fault == "raises" and obs.speed != obs.speed:
            raise ValueError("nan")
        return None

    def state_dict(self) -> dict[str, Any]:
        return {"seen": {self.n}} if self.fault == "state" else {}


@pytest.mark.parametrize("fault, check, match", [
    ("outside", contract.check_decisions, "outside the search space"),
    ("state", contract.check_state_round_trip, "not plain JSON"),
    ("raises", contract.check_bad_observations, "raised ValueError"),
])
def test_contract_catches_a_broken_tuner(fault, check, match):
    with pytest.raises(AssertionError, match=match):
        check(lambda: _Broken(fault))
