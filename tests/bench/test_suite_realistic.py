"""The ``realistic`` suite's constraints and grids measured after the trace's own transitions."""

from __future__ import annotations

import pytest

from autobyte.bench._rank_plan import iteration_plan
from autobyte.bench._real import _sweep_spec
from autobyte.bench._scenarios import SUITES, Condition, Phase, Scenario, entered_from, grid_phases, phases_slowdown, phases_trace
from autobyte.core import KiB, MiB, Config

FAST, SLOW = Condition(2000), Condition(200)


# -- the suite ------------------------------------------------------------------------------------

def test_realistic_suite_holds_the_issues_constraints():
    suite = SUITES["realistic"]
    scs = suite.scenarios
    assert len(scs) >= 4 and suite.repeats == 2 and suite.grid() == SUITES["full"].grid()
    assert all(sc.tag == "heldout" for sc in scs)  # for judging only: nobody tunes on them
    assert all(sc.iters >= 800 for sc in scs) and all(p.iters >= 200 for sc in scs for p in sc.phases)
    assert all(sc.about for sc in scs)
    assert any(len(sc.conditions()) == 1 for sc in scs)  # steady
    assert any(sc.arch == "ps" and len(sc.conditions()) > 1 for sc in scs)  # a parameter server whose link changes
    assert any(c.slowdown > 1.0 and c.slow_ranks == (0, 1) for sc in scs for c in sc.conditions())  # the compute changes
    # a model no scenario of another measuring suite trains (the smoke suites are the test suite's plumbing runs)
    others = {sc.model for name, s in SUITES.items() if name != "realistic" and not name.endswith("smoke") for sc in s.scenarios}
    assert any(sc.model not in others for sc in scs)
    # sized to run bytescheduler, hindsight and autobyte twice in about an hour on 2 cores: the grids' iterations
    # (one grid per distinct model and condition) are a few percent of the runs'
    n_grids = len({(sc.model_key, sc.entered_from(c), c) for sc in scs for c in sc.conditions()})
    grid_iters = n_grids * (len(suite.grid()) * (suite.grid_iters + suite.grid_warmup) + 1)
    assert grid_iters < 0.1 * 3 * suite.repeats * sum(sc.iters for sc in scs)


# -- grids after the trace's transitions ----------------------------------------------------------

def test_a_condition_is_entered_from_the_condition_before_most_of_its_iterations():
    step = (Phase(25, FAST), Phase(25, SLOW), Phase(25, FAST), Phase(25, SLOW))
    assert entered_from(step, SLOW) == FAST
    assert entered_from(step, FAST) == SLOW  # its first phase starts the trace; its second follows SLOW
    assert entered_from((Phase(100, FAST),), FAST) is None  # nothing before it: held for the whole grid
    mid, flow = Condition(1000), Condition(1000, flow=True)
    walk = (Phase(10, mid), Phase(20, FAST), Phase(10, SLOW), Phase(30, FAST), Phase(5, mid), Phase(5, SLOW))
    assert entered_from(walk, FAST) == SLOW  # 30 iterations after SLOW, 20 after mid
    assert entered_from(walk, SLOW) == FAST  # 10 after FAST, 5 after mid
    assert entered_from((Phase(10, FAST), Phase(10, flow), Phase(10, SLOW), Phase(10, flow)), flow) == FAST  # ties: the first
    # a phase continuing the same condition is no transition: its iterations count for the one its run came from
    assert entered_from((Phase(10, FAST), Phase(5, SLOW), Phase(5, SLOW), Phase(10, mid), Phase(8, SLOW)), SLOW) == FAST
    assert Scenario("s", "cnn", step).entered_from(FAST) == SLOW


def test_a_grid_warms_each_config_up_under_the_condition_before_and_measures_it_under_its_own():
    configs = [Config.from_multiple(p, 2) for p in (256 * KiB, 1 * MiB, 4 * MiB)]
    n, sweep = iteration_plan(_sweep_spec(configs, 4, 2))[0::2]
    slowed = Condition(1000, flow=True, slowdown=2.0, slow_ranks=(0, 1))
    ph = grid_phases(FAST, slowed, len(configs), iters=4, warmup=2)
    assert [(p.iters, p.condition) for p in ph] == [(3, slowed), (4, FAST), (2, slowed), (4, FAST), (2, slowed), (4, FAST)]
    assert sum(p.iters for p in ph) == n  # the sweep's iterations, its job start included
    sc = Scenario("g", "cnn", ph)
    for first, _ in sweep:  # every config: its warm-up under the condition before, its measured iterations under FAST
        assert all(sc.condition_at(k) == slowed for k in range(first, first + 2))
        assert all(sc.condition_at(k) == FAST for k in range(first + 2, first + 6))
    t = phases_trace(ph)
    assert [(c.at, c.up_mbit) for c in t.changes] == [(0, 1000.0), (3, 2000.0), (7, 1000.0), (9, 2000.0), (13, 1000.0), (15, 2000.0)]
    assert [(f.at, f.until) for f in t.flows] == [(0, 3), (7, 9), (13, 15)]
    assert phases_slowdown(ph) == [[a, b, r, 2.0] for a, b in ((0, 3), (7, 9), (13, 15)) for r in (0, 1)]
    # nothing before it, no warm-up, or itself before: the condition held for the whole grid, as before
    assert grid_phases(FAST, None, 3, 4, 2) == grid_phases(FAST, FAST, 3, 4, 2) == (Phase(n, FAST),)
    assert grid_phases(FAST, SLOW, 3, 4, 0) == (Phase(1 + 3 * 4, FAST),)
    assert phases_trace(grid_phases(SLOW, None, 3, 4, 2)) == phases_trace((Phase(1, SLOW),))


@pytest.mark.parametrize("args, message", [
    ((FAST, SLOW, 0, 4, 2), "n_configs must be a positive integer"),
    ((FAST, SLOW, 3, 0, 2), "iters must be a positive integer"),
    ((FAST, SLOW, 3, 4, -1), "warmup must be an integer >= 0, but got warmup=-1."),
    ((FAST, SLOW, 3, 4, 1.5), "warmup must be an integer >= 0, but got warmup=1.5."),
    ((2000, SLOW, 3, 4, 2), "c must be a Condition, but got c=2000."),
    ((FAST, "200mbit", 3, 4, 2), "before must be a Condition or None, but got before='200mbit'."),
])
def test_grid_phases_rejects_bad_values(args, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        grid_phases(*args)
