from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest
import threadpoolctl

from autobyte import sim
from autobyte.core.metrics import WindowStats
from autobyte.core.space import Config, MiB, SearchSpace
from autobyte.core.tuning import Controller, Observation
from autobyte.meta import Adapter, AutoByteTuner, MetaNetwork

SPACE = SearchSpace.grid([MiB, 4 * MiB, 16 * MiB], [1, 2, 4])


def obs(config: Config, w: int = 0, gbps: float = 5.0, per_message_s: float | None = None) -> Observation:
    cl = sim.Cluster.from_gbps(4, gbps, "ps")
    if per_message_s is not None:
        cl = cl.replace(per_message_s=per_message_s)
    res = sim.simulate(sim.get_model("resnet50"), cl, config, n_iters=2, seed=w)
    f = res.features()
    return Observation(w, config, float(f.speed.sum()), f)


def test_one_candidate_space_warns_and_never_moves(fresh_net):
    t = AutoByteTuner(fresh_net, background=False)
    only = SearchSpace([Config(4 * MiB, 8 * MiB)])
    with pytest.warns(UserWarning, match=r"search space has one candidate"):
        cur = t.start(only, only[0])
    for w in range(3):
        assert t.observe(obs(cur, w)) is None


@pytest.mark.parametrize("speed", [math.nan, math.inf, 0.0, -5.0])
def test_unusable_speed_keeps_config_and_warns(fresh_net, speed):
    t = AutoByteTuner(fresh_net, background=False)
    cur = t.start(SPACE, SPACE[0])
    o = obs(cur)
    with pytest.warns(UserWarning, match=r"keeping"):
        assert t.observe(Observation(o.iteration, cur, speed, o.features)) is None


def test_zero_sample_and_missing_statistics_windows_fall_back_via_controller(fresh_net):
    t = AutoByteTuner(fresh_net, background=False)
    ctl = Controller(t, SPACE, SPACE[4], "ps", layer_bytes=[4e6, 4e6])
    empty = WindowStats(0, 0.0, 0.0, 0.0, (0.0, 0.0), 0, 0, 0.0, 0.0)
    with pytest.warns(UserWarning, match=r"unusable statistics"):
        assert ctl.decide(10, [empty, empty]) is None
    missing = WindowStats(10, 0.1, 100.0, 0.01, (), 1, 1, 0.1, 1e9)  # no per-layer times
    with pytest.warns(UserWarning, match=r"unusable statistics"):
        assert ctl.decide(20, [missing, missing]) is None
    nan = WindowStats(10, 0.1, 100.0, 0.01, (math.nan, 0.01), 1, 1, 0.1, 1e9)
    with pytest.warns(UserWarning, match=r"unusable statistics"):
        assert ctl.decide(30, [nan, nan]) is None
    assert ctl.current == SPACE[4]


def test_corrupted_weights_file_is_a_clear_error(fresh_net, tmp_path):
    p = tmp_path / "x.npz"
    fresh_net.save(p)
    data = bytearray(p.read_bytes())
    data[len(data) // 2] ^= 0x08
    p.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"does not match the sha256 in its sidecar"):
        AutoByteTuner(weights=str(p))


@pytest.mark.parametrize("kw, match", [
    ({"min_gain": -1}, r"min_gain must be a finite number"),
    ({"max_error": math.nan}, r"max_error must be a finite number"),
    ({"replay_size": 0}, r"replay_size must be a positive integer, but got replay_size=0"),
    ({"adapt_time_s": 0}, r"time_budget_s must be a positive finite number, but got time_budget_s=0"),
])
def test_rejects_bad_arguments(fresh_net, kw, match):
    with pytest.raises(ValueError, match=match):
        AutoByteTuner(fresh_net, **kw)


def test_disabled_never_reconfigures(fresh_net):
    t = AutoByteTuner(fresh_net, background=False, enabled=False)
    cur = t.start(SPACE, SPACE[0])
    assert all(t.observe(obs(cur, w)) is None for w in range(4))
    assert t.n_decisions == 4


def _adapting(net, cpu_share=0.01, background=True):
    """A tuner far from the network's training data (per-message cost x20), every configuration visited twice (every
    window labels the earlier ones); a background fit (in the adaptation's worker) waited for before the next window."""
    t = AutoByteTuner(net, background=background, adapt_time_s=0.5)
    t.learner.cpu_share = cpu_share
    t.start(SPACE, SPACE[0])
    for w, c in enumerate(list(SPACE) * 2):
        t.observe(obs(c, w, per_message_s=2e-3))
        t.adapter.join(30)
    t.adapter.close()
    return t


def _blas_threads() -> list[int]:
    return [i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"]


def test_the_tuners_calls_run_numpy_blas_on_one_thread_and_give_its_threads_back(fresh_net):
    # the network's products are small: on more threads they take more CPU (docs/meta.md); numpy's BLAS is set to
    # two threads here, so that this fails without the limit on a one-core host too
    if not _blas_threads():
        pytest.skip("threadpoolctl sees no BLAS under this numpy")
    seen: list[list[int]] = []

    class Seeing(AutoByteTuner):
        def _observe(self, o):
            seen.append(_blas_threads())
            return super()._observe(o)

        def _check(self, o):
            seen.append(_blas_threads())
            return super()._check(o)

    t = Seeing(fresh_net, background=False)
    with threadpoolctl.threadpool_limits(2, user_api="blas"):
        cur = t.start(SPACE, SPACE[0])
        for w in range(4):
            t.check(obs(cur, w))
            d = t.observe(obs(cur, w))
            cur = d.config if d is not None else cur
            assert set(_blas_threads()) == {2}  # given back after each call
    assert len(seen) >= 8 and {n for s in seen for n in s} == {1}


def test_large_error_triggers_adaptation_that_reduces_error(fresh_net):
    t = _adapting(fresh_net, background=False)
    first, last = t.adapter.last_loss
    assert last < first
    # inline (background=False) decides the same every time: no wall clock holds a fit back there
    assert t.learner.cpu_share == 0.01 and t.adapter.n_runs >= 3 and t.learner.held_back == 0


@pytest.mark.integration
def test_the_fits_keep_the_tuner_within_its_cpu_budget(tiny_net, tmp_path, caplog):
    # unbounded, predictions this wrong start a fit at most windows; within 0.01% of the few seconds the windows
    # take here (a budget no fit fits, however fast the host), none runs: the tuner's calls alone pass it (logged
    # once, with what the tuner's calls and its fits took)
    tiny_net.save(tmp_path / "n.npz")
    free = _adapting(MetaNetwork.load(tmp_path / "n.npz"), None)
    assert free.adapter.n_runs >= 3 and free.learner.held_back == 0
    with caplog.at_level("INFO", logger="autobyte.meta"):
        t = _adapting(MetaNetwork.load(tmp_path / "n.npz"), 1e-4)
    # the tuner's calls alone are past 0.01% by the time two windows are labelled: no fit starts at all
    assert t.adapter.n_runs == 0 and t.learner.held_back >= 2
    held = [r.getMessage() for r in caplog.records if "not adapting" in r.getMessage()]
    assert len(held) == 1 and "over the budget of 0.01%" in held[0] and "the tuner's calls took" in held[0], held
    # the budget follows the job's time: once the tuner's calls, the fits so far and one more (their mean) are under
    # its share of it, the next may start
    free.learner.cpu_share = 1e-4
    fits, runs = free.adapter.cpu_s, free.adapter.n_runs
    spent = free.learner._spent(free.cpu_s)
    assert fits > 0 and spent == pytest.approx(free.cpu_s + fits + fits / runs)
    assert free.learner._within_budget(spent / 1e-4 * 1.01, free.cpu_s)
    assert not free.learner._within_budget(spent / 1e-4 * 0.99, free.cpu_s)


def test_the_budget_counts_the_tuners_calls_beside_the_fits(fresh_net):
    # no fit ran yet: a fit may start within a budget the tuner's calls leave room for, and not where they alone pass it
    t = AutoByteTuner(fresh_net, background=True)
    t.learner.cpu_share = 0.01
    assert t.learner._spent(0.5) == 0.5
    assert t.learner._within_budget(100.0, 0.5) and not t.learner._within_budget(100.0, 1.5)
    t.adapter.close()


@pytest.mark.integration
def test_adaptation_runs_in_background_and_does_not_block(fresh_net):
    net = fresh_net
    ad = Adapter(net, time_budget_s=1.5, max_epochs=10**6)
    rng = np.random.default_rng(0)
    e = rng.random((32, net.shape.lstm_units + net.shape.job_units))
    c = rng.random((32, 12))
    y = rng.random(32)
    before = net._np_head
    assert ad.start(e, c, y, background=True)
    assert ad.running
    assert not ad.start(e, c, y, background=True)  # one at a time
    # scoring still works while adapting (reads the old head)
    assert np.all(np.isfinite(net.head_predict(e[:1], c)))
    ad.join()
    assert not ad.running and ad.n_runs == 1
    assert net._np_head is not before
    assert ad.last_duration_s < 3.0  # bounded by its budget (with slack for a loaded machine)


def test_adaptation_never_raises_into_training(fresh_net):
    ad = Adapter(fresh_net, time_budget_s=0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ad.start(np.zeros((2, 3)), np.zeros((2, 12)), np.zeros(2), background=False)  # wrong width
    assert ad.n_runs == 1  # failed, logged, predictor unchanged


# ---------------------------------------------------------------- history of past jobs


def _past_job(folder, job: str, fast: Config, gain: float = 0.10) -> None:
    """A past job's file: ``fast`` ran ``gain`` faster than SPACE[0] in two regimes."""
    from autobyte.meta._history import JobHistory
    from autobyte.meta._ledger import Regime

    JobHistory(folder).save(job, [Regime(i, {SPACE[0]: [lv, 3.0, 1.0], fast: [lv * (1 + gain), 3.0, 1.0]})
                                  for i, lv in enumerate([80.0, 200.0])])


def test_history_starts_where_past_jobs_ran_fastest_and_keeps_this_jobs_windows(fresh_net, tmp_path):
    tmp_path = tmp_path / "history"  # fresh_net keeps its weights in tmp_path
    _past_job(tmp_path, "past", SPACE[5])
    t = AutoByteTuner(fresh_net, background=False, history_dir=tmp_path)
    cur = t.start(SPACE, SPACE[0])
    assert cur == SPACE[5]
    assert t.started_from is not None and "over the 2 regimes" in t.started_from
    for w in range(3):
        d = t.observe(obs(cur, w))
        cur = d.config if d is not None else cur
    mine = json.loads((tmp_path / f"job-{t.job}.json").read_text())
    measured = {(m[0], m[1]) for r in mine["regimes"] for m in r["measured"]}
    assert (SPACE[5].partition_bytes, SPACE[5].credit_bytes) in measured
    # a resumed job goes on in its own file, and its own file never picks its start
    t2 = AutoByteTuner(fresh_net, background=False, history_dir=tmp_path)
    t2.load_state_dict(t.state_dict())
    assert t2.job == t.job
    assert t2.history is not None and len(t2.history.load(exclude=t2.job)) == 2


def test_history_read_only_or_tuning_off(fresh_net, tmp_path):
    tmp_path = tmp_path / "history"  # fresh_net keeps its weights in tmp_path
    _past_job(tmp_path, "past", SPACE[5])
    ro = AutoByteTuner(fresh_net, background=False, history_dir=tmp_path, history_write=False)
    cur = ro.start(SPACE, SPACE[0])
    assert cur == SPACE[5]
    ro.observe(obs(cur, 0))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job-past.json"]
    off = AutoByteTuner(fresh_net, background=False, history_dir=tmp_path, enabled=False)
    assert off.start(SPACE, SPACE[0]) == SPACE[0] and off.started_from is None


def test_history_veto_keeps_trials_off_what_past_jobs_measured_slower(fresh_net, tmp_path):
    from autobyte.meta._history import JobHistory
    from autobyte.meta._ledger import Regime

    tmp_path = tmp_path / "history"  # fresh_net keeps its weights in tmp_path
    # every configuration compared in two regimes: SPACE[5] 10% faster than all the others
    JobHistory(tmp_path).save("past", [Regime(i, {c: [lv * (1.1 if c == SPACE[5] else 1.0), 3.0, 1.0] for c in SPACE})
                                       for i, lv in enumerate([80.0, 200.0])])

    def trials(t: AutoByteTuner) -> list[Config]:
        cur, tried = t.start(SPACE, SPACE[0]), []
        for w in range(12):
            d = t.observe(obs(cur, w, gbps=1.0))
            if d is not None:
                tried += [d.config] if d.reason.startswith("explore") else []
                cur = d.config
        return tried

    vetoed = AutoByteTuner(fresh_net, background=False, history_dir=tmp_path, history_write=False)
    assert trials(vetoed) == [] and vetoed.slower == frozenset(c for c in SPACE if c != SPACE[5])
    free = AutoByteTuner(fresh_net, background=False, history_dir=tmp_path, history_write=False, history_veto=False)
    assert trials(free) and free.slower == frozenset()  # the same job explores without the veto
    # a resumed job keeps the set planned at its start, whatever other jobs wrote since
    state = json.loads(json.dumps(vetoed.state_dict()))
    (tmp_path / "job-past.json").unlink()
    again = AutoByteTuner(fresh_net, background=False, history_dir=tmp_path, history_write=False)
    again.start(SPACE, SPACE[0])
    assert again.slower == frozenset()
    again.load_state_dict(state)
    assert again.slower == vetoed.slower


def test_without_history_the_start_is_the_given_one(fresh_net, tmp_path):
    t = AutoByteTuner(fresh_net, background=False)
    assert t.start(SPACE, SPACE[3]) == SPACE[3] and t.history is None and t.started_from is None


def test_history_start_is_the_guards_reference(fresh_net, tmp_path):
    tmp_path = tmp_path / "history"  # fresh_net keeps its weights in tmp_path
    _past_job(tmp_path, "past", SPACE[5])
    ctl = Controller(AutoByteTuner(fresh_net, background=False, history_dir=tmp_path), SPACE, SPACE[0], "ps",
                     layer_bytes=[4e6, 4e6])
    assert ctl.current == SPACE[5]
    assert ctl.guard is not None and ctl.guard.initial == SPACE[5]


def test_bad_history_dir_is_a_clear_error(fresh_net, tmp_path):
    with pytest.raises(TypeError, match=r"history_dir must be a folder path .* got 3"):
        AutoByteTuner(fresh_net, history_dir=3)  # type: ignore[arg-type]
