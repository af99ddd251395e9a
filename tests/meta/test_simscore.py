"""The simulator as the tuner's predictor (``AutoByteTuner(predictor="simulator")``), on the real simulator's windows."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from autobyte import sim
from autobyte.core.space import Config, KiB, MiB, SearchSpace
from autobyte.core.tuning import Observation
from autobyte.meta import AutoByteTuner
from autobyte.meta._policies import Equivalence, Scorer
from autobyte.meta._simscore import SimPredictor

#: six tensors, two of them large: partition and credit both matter on a slow link
MODEL = sim.ModelProfile("six", np.array([256 * KiB, 8 * MiB, 512 * KiB, 6 * MiB, 128 * KiB, 1 * MiB]),
                         np.full(6, 2e-3), np.array([3e-3, 9e-3, 3e-3, 8e-3, 2e-3, 4e-3]), 32)
SLOW_LINK = sim.Cluster(2, "allreduce", bw_up_Bps=50e6, bw_down_Bps=50e6, per_message_s=1e-3, jitter=0.0)
FAST_LINK = sim.Cluster(2, "allreduce", bw_up_Bps=1e9, bw_down_Bps=1e9, per_message_s=1e-3, jitter=0.0)
SPACE = SearchSpace.grid([64 * KiB, 256 * KiB, MiB, 4 * MiB, 16 * MiB], [1, 2, 4])


def _window(cfg: Config, cluster: sim.Cluster, seed: int = 0):
    return sim.simulate(MODEL, cluster, cfg, n_iters=4, seed=seed).features()


def _true_speed(cfg: Config, cluster: sim.Cluster) -> float:
    return 1.0 / float(np.mean(sim.simulate(MODEL, cluster, cfg, n_iters=4, seed=0).iter_time_s[1:]))


@pytest.mark.parametrize("kw, match", [
    ({"per_message_s": -1e-3}, r"per_message_s must be a number of seconds in \[0, 1\], but got per_message_s=-0.001"),
    ({"per_message_s": "1ms"}, r"per_message_s must be .* but got per_message_s='1ms'"),
    ({"n_iters": 0}, r"n_iters must be a positive integer, but got n_iters=0"),
    ({"memory": 0}, r"memory must be a positive integer, but got memory=0"),
    ({"match": 1.5}, r"match must be a number in \[0, 1\], but got match=1.5"),
    ({"fit": 1}, r"fit must be True or False, but got fit=1"),
    ({"fit_prior": -0.1}, r"fit_prior must be a non-negative number, but got fit_prior=-0.1"),
])
def test_sim_predictor_refuses_bad_arguments(kw, match):
    with pytest.raises(ValueError, match=match):
        SimPredictor(SPACE, **kw)


def test_the_tuner_refuses_an_unknown_predictor(fresh_net):
    with pytest.raises(ValueError, match=r"predictor must be one of \('network', 'simulator', 'simulator-fit'\), but got predictor='oracle'"):
        AutoByteTuner(fresh_net, predictor="oracle")


def test_sim_predictor_picks_what_the_system_runs_fastest():
    # built from one window of the default <4 MiB, 4X> on a slow link, it ranks the space as the system runs it
    start = Config(4 * MiB, 16 * MiB)
    eq = Equivalence(SPACE)
    eq.update(MODEL.layer_bytes)
    pred = SimPredictor(SPACE, per_message_s=1e-3).log_speeds(_window(start, SLOW_LINK), start, eq.ids, refresh=True)
    true = np.array([_true_speed(c, SLOW_LINK) for c in SPACE])
    assert true.max() / true.min() > 1.2  # the choice matters here
    assert true[int(np.argmax(pred))] >= 0.97 * true.max()
    # ratios, not absolute speeds, are what the scorer uses: within 15% on every candidate
    ratio_pred = np.exp(pred - pred[SPACE.index(start)])
    ratio_true = true / true[SPACE.index(start)]
    assert np.max(np.abs(ratio_pred / ratio_true - 1)) < 0.15, (ratio_pred, ratio_true)


def test_sim_predictor_simulates_once_per_regime_and_resumes_the_same():
    eq = Equivalence(SPACE)
    eq.update(MODEL.layer_bytes)
    p = SimPredictor(SPACE)
    first = p.log_speeds(_window(SPACE[0], SLOW_LINK), SPACE[0], eq.ids, refresh=False)
    again = p.log_speeds(_window(SPACE[5], SLOW_LINK, seed=1), SPACE[5], eq.ids, refresh=False)  # same regime: no simulation
    assert p.n_runs == 1 and np.array_equal(first, again)
    state = json.loads(json.dumps(p.state_dict()))
    fast = p.log_speeds(_window(SPACE[0], FAST_LINK), SPACE[0], eq.ids, refresh=True)  # new conditions: simulated anew
    assert p.n_runs == 2 and np.all(fast > first)
    back = p.log_speeds(_window(SPACE[0], SLOW_LINK, seed=2), SPACE[0], eq.ids, refresh=True)  # conditions seen before: reused
    assert p.n_runs == 2 and np.array_equal(back, first)
    assert SimPredictor(SPACE, memory=1).log_speeds(_window(SPACE[0], SLOW_LINK), SPACE[0], eq.ids, refresh=True) is not None
    q = SimPredictor(SPACE)
    q.load_state_dict(state)  # the restored predictor simulates the window it was built from, not the one it is given
    assert np.allclose(q.log_speeds(_window(SPACE[0], FAST_LINK), SPACE[0], eq.ids, refresh=False), first)
    assert SimPredictor(SPACE).state_dict() == {"conditions": []}


def test_the_fit_finds_the_per_message_cost_of_the_system_it_runs_on():
    # the system pays 10 ms per message (the predictor assumes 1 ms): two measured configurations that send
    # different numbers of messages tell it so, and the rest of the space is predicted closer
    costly = sim.Cluster(2, "allreduce", bw_up_Bps=50e6, bw_down_Bps=50e6, per_message_s=1e-2, jitter=0.0)
    start, other = Config(4 * MiB, 16 * MiB), Config(256 * KiB, MiB)
    eq = Equivalence(SPACE)
    eq.update(MODEL.layer_bytes)
    true = np.array([_true_speed(c, costly) for c in SPACE])
    measured = {start: true[SPACE.index(start)], other: true[SPACE.index(other)]}
    f = _window(start, costly)

    def error(p):
        ls = p.log_speeds(f, start, eq.ids, refresh=True, measured=measured)
        ratio = np.exp(ls - ls[SPACE.index(start)]) / (true / true[SPACE.index(start)])
        return float(np.mean(np.abs(ratio - 1)))

    plain, fitted = SimPredictor(SPACE), SimPredictor(SPACE, fit=True)
    assert error(fitted) < 0.5 * error(plain), (error(fitted), error(plain))
    assert 3e-3 <= fitted._kept[-1].per_message_s <= 3e-2
    runs = fitted.n_runs
    fitted.log_speeds(f, start, eq.ids, refresh=False, measured=dict(measured))  # nothing new measured: no refit
    assert fitted.n_runs == runs
    # one measured configuration, or two that send as many messages, keep the default
    one = SimPredictor(SPACE, fit=True)
    one.log_speeds(f, start, eq.ids, refresh=True, measured={start: measured[start]})
    assert one._kept[-1].per_message_s == 1e-3


def test_sim_predictor_refuses_a_window_without_traffic():
    f = _window(SPACE[0], SLOW_LINK)
    silent = type(f)(f.arch, f.layer_bytes, f.layer_time_s, f.forward_s, np.zeros(2), np.zeros(2), f.speed)
    with pytest.raises(ValueError, match="no link rate"):
        SimPredictor(SPACE).log_speeds(silent, SPACE[0], np.arange(len(SPACE)), refresh=True)


def test_scorer_anchors_the_simulators_ratios_on_the_observed_speed(fresh_net):
    start = Config(4 * MiB, 16 * MiB)
    f = _window(start, SLOW_LINK)
    sc = Scorer(fresh_net, SPACE, predictor=SimPredictor(SPACE)).score(start, 123.0, f, changed=True)
    k = SPACE.index(start)
    assert sc.predicted[k] == pytest.approx(123.0) and sc.raw[k] == 0.0
    eq = Equivalence(SPACE)
    eq.update(MODEL.layer_bytes)
    ls = SimPredictor(SPACE).log_speeds(f, start, eq.ids, refresh=True)
    assert np.allclose(sc.raw, ls - ls[k])  # the simulator's log ratios, not the network's
    assert not np.allclose(sc.raw, Scorer(fresh_net, SPACE).score(start, 123.0, f).raw)
    # a configuration outside the space anchors on its own simulation
    out = Config(3 * MiB, 5 * MiB)
    sc2 = Scorer(fresh_net, SPACE, predictor=SimPredictor(SPACE)).score(out, 100.0, _window(out, SLOW_LINK), changed=True)
    assert np.all(np.isfinite(sc2.predicted)) and math.isfinite(float(sc2.raw.sum()))


def _drive(t: AutoByteTuner, cond: list[sim.Cluster], start: Config, first: int, last: int, cur: Config | None = None):
    cur = cur or start
    out = []
    for w in range(first, last):
        cl = cond[w // 6]
        d = t.observe(Observation(10 * (w + 1), cur, float(_window(cur, cl, w).speed.sum()), _window(cur, cl, w),
                                  regime_changed=(w > 0 and w % 6 == 0)))
        if d is not None:
            out.append((w, d.config, d.reason.split(":")[0]))
            cur = d.config
    return out, cur


def test_the_tuner_with_the_simulator_moves_off_a_slow_start_and_resumes_as_if_not_stopped(fresh_net):
    conds = [SLOW_LINK, FAST_LINK, SLOW_LINK]
    start = Config(64 * KiB, 64 * KiB)  # many small messages at 1 ms each: far from the best on either link
    a = AutoByteTuner(fresh_net, background=False, predictor="simulator")
    a.start(SPACE, start)
    full, _ = _drive(a, conds, start, 0, 18)
    assert full and full[0][2] == "explore" and a.scorer.predictor.n_runs <= 3  # at most one simulation per regime, not per window
    assert _true_speed(full[0][1], SLOW_LINK) > 1.2 * _true_speed(start, SLOW_LINK)  # its first trial is far faster
    assert not a.learner.enabled  # nothing reads the head: no adaptation runs
    b = AutoByteTuner(fresh_net, background=False, predictor="simulator")
    b.start(SPACE, start)
    first, cur = _drive(b, conds, start, 0, 8)
    state = json.loads(json.dumps(b.state_dict()))
    c = AutoByteTuner(fresh_net, background=False, predictor="simulator")
    c.start(SPACE, start)
    c.load_state_dict(state)
    rest, _ = _drive(c, conds, start, 8, 18, cur)
    assert first + rest == full


REPO = Path(__file__).resolve().parents[2]


def test_on_real_rows_of_a_held_out_model_the_simulator_predicts_closer_than_the_network(load_benchmark, capsys):
    # the transformer's real windows (docs/figures/meta_real/transformer, never used to train or tune either predictor)
    rows = load_benchmark("sim_predictor_rows")
    raw = REPO / "docs" / "figures" / "meta_real" / "transformer" / "raw"
    r = rows.evaluate(str(raw))
    assert r["windows"] == 32 and r["configs_per_condition"] == 8
    for name in ("network", "simulator"):
        assert 0 < r[name]["mape_unmeasured"] < 1 and 0 < r[name]["worst_pick"] <= r[name]["pick_vs_best"] <= 1
    assert r["simulator"]["mape_unmeasured"] < 0.8 * r["network"]["mape_unmeasured"]  # docs/meta.md: 19% against 37%
    assert rows.main([str(raw)]) == 0 and "| simulator" not in capsys.readouterr().err
    with pytest.raises(SystemExit):
        rows.main([str(raw / "missing")])
