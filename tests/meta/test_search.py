"""The tuner's search in lasting conditions: a shortlist raced over several windows each (numpy only)."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from autobyte import sim
from autobyte.core.space import Config, KiB, MiB, SearchSpace
from autobyte.core.tuning import Observation
from autobyte.meta import AutoByteTuner
from autobyte.meta._ledger import Regime
from autobyte.meta._search import GAPS_MIN, Search

SPACE = SearchSpace.grid([256 * KiB, MiB, 4 * MiB, 16 * MiB, 64 * MiB], [1, 2, 4])
START = Config.from_multiple(4 * MiB, 4)


def cfg(p: int, m: float) -> Config:
    return Config.from_multiple(p, m)


def test_the_shortlist_is_the_start_what_was_measured_elsewhere_the_networks_choices_then_the_neighbours():
    predicted = np.zeros(len(SPACE))
    predicted[SPACE.index(cfg(16 * MiB, 1))] = 9.0  # the network's first choice
    predicted[SPACE.index(cfg(256 * KiB, 4))] = 10.0  # ranked higher, but 4 powers of two away: not taken
    predicted[SPACE.index(cfg(MiB, 2))] = 5.0
    predicted[SPACE.index(cfg(4 * MiB, 1))] = 3.0  # the second choice not listed already
    out = Search(top=2).shortlist(SPACE, predicted, START, [cfg(MiB, 2), START])
    assert out == [START, cfg(MiB, 2), cfg(16 * MiB, 1), cfg(4 * MiB, 1), cfg(MiB, 4), cfg(16 * MiB, 4)]


def test_the_shortlist_lists_the_neighbours_of_the_jobs_start_too():
    out = Search(top=0).shortlist(SPACE, np.zeros(len(SPACE)), cfg(16 * MiB, 2), [], around=[START])
    assert out == [cfg(16 * MiB, 2), cfg(4 * MiB, 2), cfg(64 * MiB, 2), cfg(MiB, 4), cfg(16 * MiB, 4)]


def test_the_shortlist_snaps_neighbours_into_the_space_and_skips_what_past_jobs_measured_slower():
    start = Config(3_999_999, 15_999_996)  # ByteScheduler's default is not a power of two
    out = Search(top=0).shortlist(SPACE, np.zeros(len(SPACE)), start, [], skip={cfg(16 * MiB, 4)})
    assert out == [start, cfg(MiB, 4)]


def test_a_configuration_within_half_a_grid_step_of_a_listed_one_is_the_same_candidate():
    start = Config(4_000_000, 16_000_000)  # ByteScheduler's default: 0.07 of a doubling below <4 MiB, 4X>
    predicted = np.zeros(len(SPACE))
    predicted[SPACE.index(cfg(4 * MiB, 4))] = 9.0  # the network's first choice: the start in all but name
    predicted[SPACE.index(cfg(4 * MiB, 2))] = 5.0
    out = Search(top=1).shortlist(SPACE, predicted, start, [])
    assert out == [start, cfg(4 * MiB, 2), cfg(MiB, 4), cfg(16 * MiB, 4)]
    # from another configuration, the grid's one is listed (the start, outside the grid, never is: it is measured anyway)
    assert Search(top=1).shortlist(SPACE, predicted, cfg(MiB, 4), [start])[:2] == [cfg(MiB, 4), cfg(4 * MiB, 4)]
    far = Config(5_500_000, 22_000_000)  # 0.39 of a doubling above 4 MiB: still the same candidate; 6 MiB is not
    assert cfg(4 * MiB, 4) not in Search(top=1).shortlist(SPACE, predicted, far, [])
    assert cfg(4 * MiB, 4) in Search(top=1).shortlist(SPACE, predicted, Config(6 * MiB, 24 * MiB), [])


def test_a_candidate_slower_than_the_noise_explains_is_out_and_a_close_one_stays():
    s = Search(z=2.0, noise=0.03)
    a, b, c = cfg(MiB, 4), cfg(4 * MiB, 4), cfg(16 * MiB, 4)
    measured = {a: [100.0, 1.0, 1.0], b: [97.0, 1.0, 2.0], c: [90.0, 1.0, 3.0]}
    alive, leader = s.standing([a, b, c], measured)
    # one window each: the difference's standard error is 0.03 * sqrt(2) = 4.2%; 2 of them are 8.5%
    assert leader == a and alive == [a, b]
    measured[b] = [97.0, 3.0, 6.0]
    measured[a] = [100.0, 3.0, 7.0]
    assert s.standing([a, b, c], measured)[0] == [a, b]  # 3% with 3 windows each: 2 errors are 4.9%
    measured[b] = [94.0, 3.0, 6.0]
    assert s.standing([a, b, c], measured)[0] == [a]


def test_the_race_goes_round_by_round_and_ends_at_the_fastest():
    s = Search(windows=2, noise=0.03)
    a, b = cfg(4 * MiB, 4), cfg(MiB, 4)
    sl = [a, b]
    assert s.propose(sl, {a: [100.0, 1.0, 1.0]}, a, 500)[0] == b  # b has no window: measured next
    assert s.propose(sl, {a: [100.0, 1.0, 1.0], b: [101.0, 1.0, 2.0]}, b, 500)[0] == b  # a tie: the one in force
    step = s.propose(sl, {a: [100.0, 2.0, 3.0], b: [101.0, 1.0, 2.0]}, a, 500)
    assert step is not None and step[0] == b and step[1].startswith("search: measuring")
    step = s.propose(sl, {a: [100.0, 2.0, 3.0], b: [103.0, 2.0, 4.0]}, a, 500)
    assert step is not None and step[0] == b and "fastest at 103.0 samples/s over 2 windows" in step[1]
    assert s.propose(sl, {a: [100.0, 2.0, 3.0], b: [103.0, 2.0, 4.0]}, b, 500) is None  # the winner in force
    assert s.propose(sl, {a: [100.0, 1.0, 1.0]}, a, 100) is None  # conditions not expected to last: no search


def test_a_candidate_whose_window_does_not_fit_the_allowance_waits_and_the_next_that_fits_is_measured():
    s = Search(windows=2, noise=0.03)
    a, b, c = cfg(4 * MiB, 4), cfg(MiB, 4), cfg(16 * MiB, 4)
    sl = [a, b, c]
    measured = {a: [100.0, 2.0, 2.0]}
    worst = {b: 5.6, c: 0.4}.__getitem__
    assert s.propose(sl, measured, a, 500)[0] == b  # not guarded: the shortlist's order
    assert s.propose(sl, measured, a, 500, allowance=1.2, worst=worst)[0] == c  # b could cost more than is allowed
    measured[c] = [99.0, 2.0, 4.0]
    step = s.propose(sl, measured, a, 500, allowance=1.2, worst=worst)  # only b is left to measure, and it does not fit
    assert step is not None and step[0] == a and "could cost 5.6 iterations, the do-no-harm allowance is 1.2" in step[1]
    step = s.propose(sl, measured, c, 500, allowance=1.2, worst=worst)
    assert step is not None and step[0] == a and step[1].startswith(f"search: back to the leader {a}")
    assert s.propose(sl, measured, a, 500, allowance=6.0, worst=worst)[0] == b  # room again: b is measured
    # over budget while the start runs (the allowance below 0): the one in force and the leader still fit
    assert s.propose([a, c], {a: [100.0, 1.0, 1.0]}, a, 500, allowance=-0.5, worst=worst)[0] == a
    assert s.propose([a, c], {c: [99.0, 1.0, 1.0]}, a, 500, allowance=-0.5, worst=worst)[0] == a


def test_the_noise_is_the_jobs_own_once_enough_windows_were_repeated():
    s = Search(noise=0.03)
    for _ in range(GAPS_MIN - 1):
        s.note(101.0, 100.0)
    assert s.sigma() == 0.03
    s.note(101.0, 100.0)
    s.note(5.0, None)  # a first window: no gap
    assert math.isclose(s.sigma(), 1.4826 * math.log(1.01) / math.sqrt(1.5))
    s2 = Search()
    s2.load_state_dict(s.state_dict())
    assert s2.sigma() == s.sigma()


@pytest.mark.parametrize("kw, value", [("windows", 0), ("top", -1), ("z", -1.0), ("noise", 0.0), ("min_horizon", -5),
                                       ("max_distance", float("nan")), ("windows", True)])
def test_bad_arguments_are_refused_with_their_name_and_value(kw, value):
    with pytest.raises(ValueError, match=rf"{kw} must be a number in .* but got {kw}={value!r}"):
        Search(**{kw: value})


def test_a_regimes_shortlist_and_winner_survive_its_state():
    r = Regime(3, {START: [10.0, 2.0, 2.0]}, windows=2, shortlist=[START, cfg(MiB, 4)], winner=cfg(MiB, 4))
    back = Regime.from_dict(r.to_dict())
    assert back.shortlist == [START, cfg(MiB, 4)] and back.winner == cfg(MiB, 4)
    assert Regime.from_dict({**r.to_dict(), "shortlist": None}).shortlist is None
    saved = r.to_dict()
    del saved["winner"]  # a state saved before races had winners: the race goes on
    assert Regime.from_dict(saved).winner is None


def test_a_race_has_a_winner_once_only_the_leader_is_left_or_every_one_left_has_its_windows():
    s = Search(windows=3, noise=0.03)
    a, b, c = START, cfg(MiB, 4), cfg(16 * MiB, 4)
    assert s.winner([a, b, c], {}) is None  # nothing measured
    assert s.winner([a, b, c], {a: [100.0, 3.0, 3.0], b: [101.0, 2.0, 5.0]}) is None  # c unmeasured, b short of windows
    assert s.winner([a, b], {a: [100.0, 3.0, 3.0], b: [101.0, 2.0, 5.0]}) is None
    assert s.winner([a, b], {a: [100.0, 3.0, 3.0], b: [101.0, 3.0, 6.0]}) == b  # both their windows: the faster
    assert s.winner([a, b, c], {a: [100.0, 1.0, 1.0], b: [70.0, 1.0, 2.0], c: [60.0, 1.0, 3.0]}) == a  # the others out
    # as propose decides: over with its winner in force -> nothing to say
    assert s.propose([a, b], {a: [100.0, 3.0, 3.0], b: [99.0, 3.0, 6.0]}, a, 500) is None


def test_an_ended_race_holds_its_winner_until_one_measured_there_leads_it_by_more_than_the_noise():
    s = Search(windows=3, noise=0.03)
    a, b, c = START, cfg(MiB, 4), cfg(16 * MiB, 4)
    r = Regime(1, {a: [100.0, 3.0, 9.0], b: [103.0, 1.0, 10.0]}, windows=10, shortlist=[a], winner=a)
    assert s.hold(r, r.measured, a)[0] == a and r.winner == a  # b one window 3% ahead: within the noise, a holds
    step = s.hold(r, r.measured, b)  # after a trial of b: back to the winner
    assert step[0] == a and "back to" in step[1] and r.winner == a
    r.measured[c] = [115.0, 2.0, 11.0]  # c measured 15% ahead over two windows: beyond the noise, c wins
    step = s.hold(r, r.measured, a)
    assert step[0] == c and r.winner == c and "it wins here" in step[1]
    fresh = {a}  # c's measurement gone stale: a holds again
    r.winner = a
    assert s.hold(r, fresh, a)[0] == a
    gone = Regime(2, {b: [90.0, 1.0, 3.0]}, windows=3, shortlist=[a, b], winner=a)  # a's measurements moved elsewhere
    assert s.hold(gone, gone.measured, a)[0] == b and gone.winner == b


def test_a_narrow_shortlist_is_the_configuration_in_force_and_the_known_ones_alone():
    predicted = np.arange(len(SPACE), dtype=float)  # the network ranks others first: not listed
    a, b = cfg(MiB, 4), START
    assert Search(top=2).shortlist(SPACE, predicted, a, [a, b], around=[b], narrow=True) == [a, b]
    assert Search(top=2).shortlist(SPACE, predicted, a, [a, b], skip={b}, narrow=True) == [a]


def _sim_window(config: Config, w: int) -> Observation:
    res = sim.simulate(sim.get_model("resnet50"), sim.Cluster.from_gbps(4, 5.0, "ps"), config, n_iters=2, seed=w)
    f = res.features()
    return Observation(w * 10, config, float(f.speed.sum()), f)


def test_in_lasting_conditions_the_tuner_measures_its_shortlist_and_settles_on_the_fastest_measured(fresh_net):
    t = AutoByteTuner(fresh_net, background=False, adapt=False)
    cur = t.start(SPACE, START)
    seen = []
    for w in range(30):
        seen.append(cur)
        d = t.observe(_sim_window(cur, w))
        if d is not None:
            cur = d.config
    sl = t.ledger.current.shortlist
    assert sl is not None and sl[0] == START and len(sl) >= 3
    measured = t.ledger.current.measured
    alive, leader = t.search.standing(sl, measured)
    # every candidate still in the race was measured its windows, and the run ends at the fastest of them
    assert all(measured[c][1] >= t.search.windows for c in alive)
    assert seen[-1] == leader and seen[-5:] == [leader] * 5
    assert "search" in t.state_dict() and t.state_dict()["ledger"]["regimes"][-1]["shortlist"]


def test_the_race_waits_for_the_do_no_harm_allowance(fresh_net):
    t = AutoByteTuner(fresh_net, background=False, adapt=False)
    cur = t.start(SPACE, START)
    for w in range(12):  # no allowance left: no window of another candidate may risk a cost
        obs = _sim_window(cur, w)
        d = t.observe(Observation(obs.iteration, cur, obs.speed, obs.features, harm_allowance=0.0))
        assert d is None or d.config == cur, d
    assert t.ledger.current.shortlist is not None and list(t.ledger.current.measured) == [START]


def test_a_windows_risk_widens_with_distance_from_what_was_measured():
    s = Search(noise=0.03)
    a, near, far = START, cfg(2 * MiB, 4), cfg(256 * KiB, 4)
    measured = {a: 100.0}
    # measured: its own mean one window scatter below; unmeasured: the predictor's error, widened per power of two
    assert s.window_cost(a, 100.0, measured, 0.0, 0.1, 0.0, 0.25, 12) == pytest.approx(12 * (math.exp(0.03) - 1))
    assert s.window_cost(near, 100.0, measured, 100.0, 0.1, 0.0, 0.25, 12) == pytest.approx(12 * (math.exp(0.1 * 1.25) - 1))
    assert s.window_cost(far, 100.0, measured, 100.0, 0.1, 0.0, 0.25, 12) == pytest.approx(12 * (math.exp(0.1 * 2.0) - 1))
    assert s.window_cost(near, 100.0, measured, 100.0, 0.1, 0.5, 0.25, 12) == pytest.approx(12 * (math.exp(0.5) - 1))
    assert s.window_cost(near, 100.0, measured, 200.0, 0.1, 0.0, 0.25, 12) == 0.0  # far faster even one error below


def test_what_a_race_measured_out_is_not_raced_again_when_conditions_change():
    s = Search(noise=0.03)
    a, b, c = cfg(MiB, 4), START, cfg(16 * MiB, 4)
    raced = Regime(1, {a: [100.0, 3.0, 9.0], b: [99.0, 3.0, 8.0], c: [80.0, 1.0, 3.0]}, windows=9, shortlist=[b, a, c])
    assert s.carried_out([Regime(2), raced]) == {c}  # the most recent ranking: c out, b within the noise of a
    assert s.carried_out([Regime(2, {a: [1.0, 1.0, 1.0]})]) == set()  # one configuration measured: nothing ranked
    predicted = np.zeros(len(SPACE))
    assert c not in s.shortlist(SPACE, predicted, a, [b], skip=s.carried_out([raced]))


def test_after_a_change_the_tuner_neither_races_nor_tries_what_the_last_regime_measured_out(fresh_net):
    t = AutoByteTuner(fresh_net, background=False, adapt=False)
    ran, _ = _run(t, t.start(SPACE, START), [(sim.Cluster.from_gbps(4, 5.0, "ps"), 40, 1.0),
                                              (sim.Cluster.from_gbps(4, 2.0, "ps"), 12, 1.0)])
    first, second = t.ledger.regimes[0], t.ledger.current
    out = t.search.carried_out([first])
    assert first.shortlist and out  # the first race measured some candidates out ...
    assert second is not first and second.shortlist is not None
    assert not out & set(second.shortlist)  # ... and the second race does not list them
    assert not out & set(ran[1])  # nor does any trial run them
    assert t._carried(second) >= out


def test_what_a_regime_without_a_race_measured_out_is_carried_too():
    s = Search(noise=0.03)
    a, c = cfg(MiB, 4), cfg(16 * MiB, 4)
    assert s.carried_out([Regime(1, {a: [100.0, 2.0, 5.0], c: [70.0, 1.0, 3.0]}, windows=5)]) == {c}
    assert s.carried_out([Regime(1, {a: [100.0, 2.0, 5.0]}, windows=5)]) == set()  # one configuration ranks nothing


def _run(t: AutoByteTuner, cur: Config, phases, w: int = 0, changed: bool = True):
    """Run ``t`` over the simulator's ``phases`` ((cluster, windows, speed factor) each), a change of conditions
    signalled at each phase's start after the first when ``changed``; the configurations run per phase."""
    ran = []
    for cluster, n, factor in phases:
        ran.append([])
        for k in range(n):
            res = sim.simulate(sim.get_model("resnet50"), cluster, cur, n_iters=2, seed=w)
            f = factor(w) if callable(factor) else factor
            d = t.observe(Observation(w * 10, cur, f * float(res.features().speed.sum()), res.features(),
                                      regime_changed=(changed and w > 0 and k == 0)))
            ran[-1].append(cur)
            cur = d.config if d is not None else cur
            w += 1
    return ran, cur


def test_a_race_that_ended_holds_its_winner_whatever_the_drift_brings_back_within_the_noise(fresh_net):
    t = AutoByteTuner(fresh_net, background=False, adapt=False, explore=True)
    cur = t.start(SPACE, START)
    fast = sim.Cluster.from_gbps(4, 5.0, "ps")
    ran, cur = _run(t, cur, [(fast, 40, 1.0)])
    regime = t.ledger.current
    assert regime.winner is not None and cur == regime.winner  # the race ended and its winner runs
    measured_out = {c for c in regime.measured if c not in t.search.standing(regime.shortlist, regime.measured)[0]}
    assert measured_out
    # the host slows by 0.5% a window (no change of conditions seen): the winner's running average falls towards
    # what the others measured before, which a race that reopened would measure again
    ran, cur = _run(t, cur, [(fast, 20, lambda w: 0.995 ** (w - 39))], w=40, changed=False)
    assert t.ledger.current is regime and regime.winner is not None
    assert not measured_out & set(ran[0])  # none of what the race measured out runs again


def test_after_a_race_ended_new_conditions_race_its_winner_against_the_start_alone(fresh_net, caplog):
    t = AutoByteTuner(fresh_net, background=False, adapt=False)
    cur = t.start(SPACE, START)
    with caplog.at_level("INFO", logger="autobyte.meta"):
        ran, cur = _run(t, cur, [(sim.Cluster.from_gbps(4, 5.0, "ps"), 40, 1.0), (sim.Cluster.from_gbps(4, 2.0, "ps"), 30, 1.0)])
    first, second = t.ledger.regimes[0], t.ledger.current
    assert first.winner is not None and second is not first
    assert second.shortlist is not None and set(second.shortlist) <= {first.winner, START, ran[1][0]}
    assert f"a race in other conditions found {first.winner}" in caplog.text
    assert second.winner in second.shortlist or second.winner in second.measured  # that race ended too


def test_what_races_found_is_each_winner_or_an_unfinished_races_leader_once_two_were_measured():
    s = Search(noise=0.03)
    a, b, c = cfg(MiB, 4), cfg(4 * MiB, 4), cfg(16 * MiB, 4)
    ended = Regime(1, {a: [100.0, 3.0, 5.0], b: [90.0, 1.0, 3.0]}, windows=4, shortlist=[b, a], winner=a)
    unfinished = Regime(2, {b: [100.0, 1.0, 5.0], c: [95.0, 1.0, 3.0]}, windows=2, shortlist=[b, c, a])
    one = Regime(3, {c: [100.0, 1.0, 5.0]}, windows=1, shortlist=[c, a])  # its race measured one candidate: no standing
    no_race = Regime(4, {c: [120.0, 2.0, 5.0], a: [90.0, 1.0, 3.0]}, windows=3)  # conditions too short to race in
    assert s.decided([no_race, one, unfinished, ended]) == [b, a]
    assert s.decided([ended, Regime(5, {a: [99.0, 1.0, 1.0], b: [80.0, 1.0, 2.0]}, windows=2, shortlist=[a, b])]) == [a]
    assert s.decided([no_race, one]) == []


def test_a_race_that_conditions_ended_first_is_carried_its_leader_raced_against_the_start_alone(fresh_net, caplog):
    t = AutoByteTuner(fresh_net, background=False, adapt=False)
    cur = t.start(SPACE, START)
    # a flat landscape: every configuration within 2% of the others, so the race keeps its candidates for 3 windows
    # each and the link's change at window 16 comes first
    flat = {c: 1.0 + 0.02 * ((c.partition_bytes // KiB + c.credit_bytes // KiB) % 7) / 6 for c in SPACE}
    ran = []
    with caplog.at_level("INFO", logger="autobyte.meta"):
        for w, gbps in enumerate([5.0] * 16 + [2.0] * 20):
            res = sim.simulate(sim.get_model("resnet50"), sim.Cluster.from_gbps(4, gbps, "ps"), START, n_iters=2, seed=w)
            d = t.observe(Observation(w * 10, cur, 100.0 * gbps * flat.get(cur, 1.0), res.features(), regime_changed=w == 16))
            ran.append(cur)
            cur = d.config if d is not None else cur
    first, second = t.ledger.regimes[0], t.ledger.current
    assert second is not first and first.shortlist is not None and first.winner is None  # the change came first
    assert len(first.shortlist) >= 4
    leader = t.search.leader(first.shortlist, first.measured)
    assert leader is not None
    # the configuration in force when the race began here, then the unfinished race's leader and the start alone
    assert second.shortlist is not None and second.shortlist[0] == ran[second.started // 10]
    assert set(second.shortlist[1:]) <= {leader, START}
    assert f"a race in other conditions found {leader}" in caplog.text


def test_from_the_window_a_race_ends_only_its_hold_and_leaps_decide(fresh_net):
    t = AutoByteTuner(fresh_net, background=False, adapt=False)
    cur = t.start(SPACE, START)
    fast, after = sim.Cluster.from_gbps(4, 5.0, "ps"), []
    for w in range(60):
        ended = t.ledger.current.winner is not None
        res = sim.simulate(sim.get_model("resnet50"), fast, cur, n_iters=2, seed=w)
        d = t.observe(Observation(w * 10, cur, float(res.features().speed.sum()), res.features()))
        if t.ledger.current.winner is not None and d is not None:
            after.append((ended, d.reason))
        cur = d.config if d is not None else cur
    assert t.ledger.current.winner is not None
    # the window the race ends in and every one after: the search's hold, or a trial the network sees far ahead
    def leap(r: str) -> bool:
        m = re.search(r"predicted ([0-9.]+) samples/s \(best measured ([0-9.]+)", r)
        return m is not None and float(m.group(1)) > (1 + t.search.leap) * float(m.group(2))

    assert after and all(r.startswith("search:") or (r.startswith("explore:") and leap(r)) for _, r in after), after
    assert not any(r.startswith(("measured best", "rollback")) for _, r in after)


def test_the_window_a_race_ends_in_with_its_winner_in_force_is_the_holds(fresh_net):
    t = AutoByteTuner(fresh_net, background=False, adapt=False)
    t.start(SPACE, START)
    obs = _sim_window(START, 0)
    sc = t.scorer.score(START, obs.speed, obs.features)
    r = t.ledger.current
    r.shortlist, r.windows = [START, cfg(MiB, 4)], 6
    r.measured = {START: [obs.speed, 3.0, 6.0], cfg(MiB, 4): [0.98 * obs.speed, 3.0, 5.0]}  # both their windows
    step = t._search(obs, sc, r, {c: v[0] for c, v in r.measured.items()}, 500.0)
    # not None (which would hand the window to the mover and the explorer): the hold keeps the winner
    assert r.winner == START and step is not None and step[0] == START and "holds" in step[1]


def test_a_narrow_race_with_no_rival_left_says_its_winner_is_held_alone(fresh_net, caplog):
    t = AutoByteTuner(fresh_net, background=False, adapt=False)
    t.start(SPACE, START)
    won = cfg(MiB, 4)
    first = t.ledger.current
    # a race that ended at <1 MiB, 4X> and measured the start out
    first.shortlist, first.windows, first.winner = [START, won], 6, won
    first.measured = {START: [80.0, 3.0, 5.0], won: [100.0, 3.0, 6.0]}
    second = t.ledger.change(60, won, 60.0)
    obs = _sim_window(won, 7)
    sc = t.scorer.score(won, obs.speed, obs.features)
    with caplog.at_level("INFO", logger="autobyte.meta"):
        t._search(obs, sc, second, {}, 500.0)
    assert second.shortlist == [won]  # the start, measured out where the race ended, is not raced again
    assert f"a race in other conditions found {won}, and no rival of it is left to race here: held alone" in caplog.text
    assert "raced against the start here" not in caplog.text
