"""benchmarks/tuner_variants.py: every variant registers by a name that says what it is, builds, and passes the tuner contract."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from autobyte.core.tuners import _REGISTRY, import_tuners, make_tuner
from autobyte.meta import AutoByteTuner, MetaNetwork
from autobyte.testing import tuner_contract as contract

VARIANTS = Path(__file__).resolve().parents[2] / "benchmarks" / "tuner_variants.py"


@pytest.fixture(scope="module")
def names():
    added = import_tuners([str(VARIANTS)])
    yield added
    for n in added:
        _REGISTRY.pop(n, None)


def test_variants_are_named_by_what_they_are(names):
    assert {"autobyte-no-equivalence", "autobyte-no-calibration", "autobyte-no-noise-z", "autobyte-history",
            "static-history", "autobyte-screen", "static-16m-2x", "static-1m-4x", "switch-1m-4x"} <= set(names)
    assert not [n for n in names if re.search(r"stop|\d{4}-\d\d", n)]


def _build(name: str):
    if "network" in inspect.signature(_REGISTRY[name]).parameters:  # AutoByte: inline, as the contract runs it
        return make_tuner(name, network=MetaNetwork.load_default(), background=False, adapt_time_s=1e6)
    return make_tuner(name)


def test_the_ablations_are_the_shipped_tuner_with_one_policy_changed(names):
    net = MetaNetwork.load_default()
    space, start = contract.SPACE, contract.START
    built = {n: make_tuner(n, network=net, background=False) for n in ("autobyte-no-equivalence", "autobyte-no-calibration",
                                                                     "autobyte-no-noise-z")}
    for t in built.values():
        assert isinstance(t, AutoByteTuner)
        t.start(space, start)
    assert not built["autobyte-no-equivalence"].scorer.equivalence.enabled and built["autobyte-no-equivalence"].scorer.calibrate
    assert not built["autobyte-no-calibration"].scorer.calibrate and built["autobyte-no-calibration"].scorer.equivalence.enabled
    assert built["autobyte-no-noise-z"].noise_z is None and AutoByteTuner(net).noise_z == 3.0


@pytest.mark.parametrize("name", ["static-1m-4x", "switch-1m-4x"])
def test_a_static_variant_passes_the_tuner_contract(names, name):
    contract.check_tuner(lambda: _build(name), inside_space=False)


def test_the_screen_keeps_its_pattern_across_a_checkpoint(names):
    # its pattern is the job's start's, kept in its state: a resumed job goes on as the uninterrupted one
    # (the whole contract runs for the shipped tuner; a shorter run here)
    contract.check_start(lambda: _build("autobyte-screen"))
    contract.check_state_round_trip(lambda: _build("autobyte-screen"), checkpoints=(3,), n_windows=10, min_decisions=3)


def test_the_guard_that_trips_on_a_suspicion_is_the_shipped_guard_without_the_wait(names):
    from autobyte.core import Config, Controller, MiB, SearchSpace, WindowStats

    a, fast = Config(MiB, MiB), Config(2 * MiB, 2 * MiB)
    ctl = Controller(_REGISTRY["autobyte-guard-trips-on-suspicion"](MetaNetwork.load_default(), background=False),
                     SearchSpace([a, fast]), a, "allreduce", [1000, 1000], window_iters=10, check_iters=5, warmup_iters=0)
    assert type(ctl.guard).__name__ == "_GuardTripsOnSuspicion" and AutoByteTuner.guard_type.__name__ == "HarmGuard"
    ctl.current = fast
    for it, speed in [(5, 100.0), (10, 100.0)]:  # the guard's reference: the start at 100 (hand-fed, as applied)
        ctl.guard.record(it, a, speed, 5, False)
    trips = []
    for it, speed in [(15, 97.0), (20, 97.0), (25, 78.0)]:  # 78 after 97: the detector's suspicion
        ctl.decide(it, [WindowStats(5, 0.1, speed, 0.01, (0.001, 0.002), 1000, 2, 0.05, 2e4)])
        trips.append(ctl.guard.trips)
    assert ctl.detector.suspect is not None and trips == [0, 0, 1]  # it trips on the suspected check itself


def test_the_explorer_of_exact_points_is_the_shipped_explorer_without_grid_points(names, monkeypatch):
    from autobyte.core import Config, MiB, SearchSpace
    from autobyte.meta._explorer import Explorer

    t = _build("autobyte-explorer-exact-points")
    assert type(t.explorer).__name__ == "ExplorerOfExactPoints" and type(AutoByteTuner(MetaNetwork.load_default()).explorer).__name__ == "Explorer"
    space = SearchSpace([Config(4 * MiB, 16 * MiB), Config(MiB, 4 * MiB)])
    start = Config(4_000_000, 16_000_000)  # ByteScheduler's default, half a grid step from <4 MiB, 4X>
    seen = []
    monkeypatch.setattr(Explorer, "propose", lambda self, sp, *args, **kwargs: seen.append(sp))
    t.explorer.propose(space)
    t.explorer.propose(space)
    assert space.grid_point(start) == Config(4 * MiB, 16 * MiB)
    assert seen[0] is seen[1] and list(seen[0]) == list(space) and seen[0].grid_point(start) is None
    assert seen[0].grid_point(Config(MiB, 4 * MiB)) == Config(MiB, 4 * MiB)


def test_the_tuner_before_the_mean_and_the_grid_points_has_both_undone(names):
    from autobyte.core import Config, Controller, MiB, SearchSpace

    t = _build("autobyte-last-check-exact-points")
    assert type(t.explorer).__name__ == "ExplorerOfExactPoints"
    a = Config(MiB, MiB)
    ctl = Controller(t, SearchSpace([a, Config(2 * MiB, 2 * MiB)]), a, "allreduce", [1000, 1000],
                     window_iters=10, check_iters=5, warmup_iters=0)
    assert ctl.detector is not None and ctl.detector.reference_memory == 1
    shipped = Controller(AutoByteTuner(MetaNetwork.load_default(), background=False), SearchSpace([a]), a, "allreduce",
                         [1000, 1000], window_iters=10, check_iters=5, warmup_iters=0)
    assert shipped.detector is not None and shipped.detector.reference_memory == 2


def test_the_verifier_that_refiles_slower_trials_differs_from_the_shipped_one_on_that_side_alone(names):
    import math

    t = make_tuner("autobyte-slower-trials-refiled", network=MetaNetwork.load_default(), background=False)
    shipped = AutoByteTuner(MetaNetwork.load_default(), background=False).verifier
    for surprise, change in ((math.log(3.0), math.log(3.2)), (math.log(3.0), math.log(1.5)), (0.3, -0.3)):
        assert t.verifier.ran_after(surprise, change) == shipped.ran_after(surprise, change)
    assert t.verifier.ran_after(-math.log(3.0), -math.log(3.2)) and not shipped.ran_after(-math.log(3.0), -math.log(3.2))
    assert t.verifier.surprise == shipped.surprise


def test_the_search_without_leaps_is_the_shipped_one_with_its_leap_at_the_ceiling(names):
    t = make_tuner("autobyte-no-leaps", network=MetaNetwork.load_default(), background=False)
    shipped = AutoByteTuner(MetaNetwork.load_default(), background=False).search
    assert t.search is not None and shipped is not None
    assert shipped.leap == 0.25 and t.search.leap == 100.0
    assert {k: v for k, v in vars(t.search).items() if k not in ("leap", "gaps")} == \
        {k: v for k, v in vars(shipped).items() if k not in ("leap", "gaps")}
