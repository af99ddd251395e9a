"""The tuner its policies make, window by window (numpy only, the real simulator)."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import numpy as np
import pytest

from autobyte import sim
from autobyte.core.space import Config, KiB, MiB, SearchSpace
from autobyte.core.tuning import Controller, Observation
from autobyte.meta import AutoByteTuner, MetaNetwork
from autobyte.meta._ledger import Ledger

MODEL = sim.get_model("resnet50")
FAST, SLOW = sim.Cluster.from_gbps(4, 10, "ps"), sim.Cluster.from_gbps(4, 1, "ps")
GRID = SearchSpace.grid([256 * KiB, MiB, 4 * MiB, 16 * MiB], [1, 2, 4])
OLD_STATE = Path(__file__).parent / "data" / "tuner_state_old_keys.json"


class Forgetful(AutoByteTuner):
    """The tuner without memory of past regimes: every change starts a new one."""

    def _new_ledger(self) -> Ledger:
        return Ledger(recall=False)


class OneWindow(AutoByteTuner):
    """The tuner without its search: moves on one window (as in conditions not expected to last)."""

    def _new_search(self):
        return None


def _window(cfg: Config, cl, w: int, changed: bool = False) -> Observation:
    res = sim.simulate(MODEL, cl, cfg, n_iters=4, seed=w)
    f = res.features()
    return Observation(10 * (w + 1), cfg, float(f.speed.sum()), f, regime_changed=changed)


def _drive(t: AutoByteTuner, start: Config, conds: list, per_phase: int) -> list[tuple[int, Config, str]]:
    """Alternate conditions every ``per_phase`` windows; the controller's signal set at each switch."""
    cur, out, w = t.start(GRID, start), [], 0
    for p, cl in enumerate(conds):
        for k in range(per_phase):
            d = t.observe(_window(cur, cl, w, changed=(p > 0 and k == 0)))
            if d is not None:
                out.append((w, d.config, d.reason.split(":")[0]))
                cur = d.config
            w += 1
    return out


def test_a_regime_seen_before_is_reused_at_once(fresh_net, tiny_net, tmp_path, caplog):
    t = AutoByteTuner(fresh_net, background=False)
    with caplog.at_level(logging.INFO, logger="autobyte.meta"):
        decisions = _drive(t, GRID[4], [FAST, SLOW, FAST, SLOW], per_phase=6)
    # both returns are recognised (the second at once, from the configuration in force), and the
    # first one's first decisions go to what was measured there, not to new trials
    assert caplog.text.count("seen before") >= 2, caplog.text
    first = [d for d in decisions if 12 <= d[0] < 14]
    assert first and all(r in ("measured best", "recall", "rollback") for _, _, r in first[:1]), decisions
    tiny_net.save(tmp_path / "other.npz")  # the same network as the first tuner's before it adapted
    forgetful = Forgetful(MetaNetwork.load(tmp_path / "other.npz"), background=False)
    forgot = _drive(forgetful, GRID[4], [FAST, SLOW, FAST, SLOW], per_phase=6)
    # at the first return (window 12), memory spares trials: the forgetful tuner explores the conditions anew (later
    # on, the job's record of what its trials found, worn down by those trials, curbs its exploring too)
    # (trials: the explorer's, or the search's in conditions expected to last)
    later = [r for w, _, r in decisions if 12 <= w < 15 and r in ("explore", "search")]
    forgot_later = [r for w, _, r in forgot if 12 <= w < 15 and r in ("explore", "search")]
    assert len(later) < len(forgot_later), (decisions, forgot)


def test_a_trial_that_measured_slower_is_rolled_back(fresh_net):
    t = OneWindow(fresh_net, background=False)
    cur = t.start(GRID, GRID[4])
    t.observe(_window(cur, FAST, 0))
    t._trial, t._left = (GRID[0], 1e9, cur), cur  # pretend it just tried GRID[0]
    slow = _window(GRID[0], FAST, 1)
    d = t.observe(Observation(slow.iteration, GRID[0], t.ledger.current.measured[cur][0] * 0.7, slow.features))
    assert d is not None and d.config == cur and d.reason.startswith("rollback")


def test_every_decision_says_what_was_measured_and_predicted(fresh_net, caplog):
    t = AutoByteTuner(fresh_net, background=False)
    with caplog.at_level(logging.DEBUG, logger="autobyte.meta"):
        _drive(t, GRID[0], [FAST], per_phase=25)  # trials here found 2-3x: the explorer goes on for 15 windows
    lines = [r.getMessage() for r in caplog.records]
    assert lines and all("samples/s" in m for m in lines if " -> " in m or " keeps " in m)
    # a window that stays says why: no trial pays, or an ended race's winner holds
    assert any(" keeps " in m and ("fastest measured" in m or "the race's winner here holds" in m) for m in lines)


def test_state_round_trip_continues_as_if_not_stopped(fresh_net):
    conds = [FAST, SLOW, FAST]
    a = AutoByteTuner(fresh_net, background=False)
    full = _drive(a, GRID[4], conds, per_phase=4)
    fresh_net.reset_head()
    b = AutoByteTuner(fresh_net, background=False)
    cur, first, w = b.start(GRID, GRID[4]), [], 0
    for k in range(6):  # the first 6 windows, then a checkpoint
        d = b.observe(_window(cur, conds[k // 4], w, changed=(k == 4)))
        if d is not None:
            first.append((w, d.config, d.reason.split(":")[0]))
            cur = d.config
        w += 1
    state = json.loads(json.dumps(b.state_dict()))
    fresh_net.reset_head()
    c = AutoByteTuner(fresh_net, background=False)
    c.start(GRID, GRID[4])
    c.load_state_dict(state)
    rest = []
    for k in range(6, 12):
        d = c.observe(_window(cur, conds[k // 4], w, changed=(k == 8)))
        if d is not None:
            rest.append((w, d.config, d.reason.split(":")[0]))
            cur = d.config
        w += 1
    assert first + rest == full


def test_a_trial_far_slower_than_the_best_is_ended_at_its_first_check(fresh_net):
    t = AutoByteTuner(fresh_net, background=False)
    cur = t.start(GRID, GRID[4])
    win = _window(cur, FAST, 0)
    assert t.check(Observation(5, cur, win.speed * 0.5, win.features, window_share=0.5)) is None  # no trial: nothing to end
    t.observe(win)
    best = t.ledger.current.measured[cur][0]
    t._trial, t._left = (GRID[0], best * 1.2, cur), cur  # pretend it just tried GRID[0]
    state = json.loads(json.dumps(t.state_dict()))
    half = _window(GRID[0], FAST, 1)
    windows = t.ledger.current.windows
    # within the margin: the trial goes on, and nothing is recorded (the whole window will be)
    assert t.check(Observation(15, GRID[0], best * 0.95, half.features, window_share=0.5)) is None
    assert t._trial is not None and t.ledger.current.windows == windows and GRID[0] not in t.ledger.current.measured
    d = t.check(Observation(15, GRID[0], best * 0.8, half.features, window_share=0.5))
    assert d is not None and d.config == cur and d.reason.startswith("abort:") and d.predicted_speed == pytest.approx(best)
    assert t._trial is None and t.n_aborts == 1 and t.ledger.current.misses == 1
    assert t.ledger.current.measured[GRID[0]][:2] == [pytest.approx(best * 0.8), 0.5]  # half a window, recorded
    # the check's prediction of the configuration gone back to is checked by the next window, as after any move
    assert t._last_pred is not None and t._last_pred[0] == GRID[0]
    # the same check, after a restore, ends the trial the same way
    fresh_net.reset_head()
    r = AutoByteTuner(fresh_net, background=False)
    r.start(GRID, GRID[4])
    r.load_state_dict(state)
    again = r.check(Observation(15, GRID[0], best * 0.8, half.features, window_share=0.5))
    assert again == d and r.state_dict()["n_aborts"] == 1


def test_abort_can_be_switched_off_and_its_margin_is_validated(fresh_net):
    t = AutoByteTuner(fresh_net, background=False, abort_margin=None)
    cur = t.start(GRID, GRID[4])
    win = _window(cur, FAST, 0)
    t.observe(win)
    t._trial = (GRID[0], 1e9, cur)
    assert t.check(Observation(15, GRID[0], 1.0, win.features, window_share=0.5)) is None
    with pytest.raises(ValueError, match=r"abort_margin must be a number in \[0.001, 0.9\], but got abort_margin=1.5"):
        AutoByteTuner(fresh_net, abort_margin=1.5)


def test_a_trial_holding_up_in_short_conditions_is_judged_on_its_first_check(fresh_net):
    t = AutoByteTuner(fresh_net, background=False)
    cur = t.start(GRID, GRID[4])
    win = _window(cur, FAST, 0)
    t.observe(win)
    t.ledger.current.durations.append(30)  # these conditions lasted 30 iterations last time: 30 + 20 left
    assert t.ledger.horizon(15) < 100
    best = t.ledger.current.measured[cur][0]
    t._trial, t._left = (GRID[0], best, cur), cur
    half = _window(GRID[0], FAST, 1)
    d = t.check(Observation(15, GRID[0], best * 0.97, half.features, window_share=0.5))  # within the abort margin
    assert d is not None and t._trial is None and t.n_aborts == 0
    assert d.reason.startswith(("short:", "rollback:")), d.reason
    assert t.ledger.current.measured[GRID[0]][:2] == [pytest.approx(best * 0.97), 0.5]
    # where the conditions are expected to last, the same check lets the trial run its window
    long = AutoByteTuner(fresh_net, background=False)
    long.start(GRID, GRID[4])
    long.observe(win)
    long._trial, long._left = (GRID[0], best, cur), cur
    assert long.ledger.horizon(15) >= long.short_horizon_iters
    assert long.check(Observation(15, GRID[0], best * 0.97, half.features, window_share=0.5)) is None


def _tried(t: AutoByteTuner, trial_speed: float):
    """The tuner measured ``cur`` and tried GRID[0] (predicted ~1.2x ``cur``) at ``trial_speed`` x ``cur``'s speed;
    returns ``cur``, its window, its speed and the tuner's decision after the trial."""
    cur = t.start(GRID, GRID[4])
    win = _window(cur, FAST, 0)
    t.observe(win)
    base = t.ledger.current.measured[cur][0]
    t._last_pred = (cur, np.full(len(GRID), base * 1.2), np.zeros(len(GRID)), base)
    t._trial, t._left = (GRID[0], base * 1.2, cur), cur
    d = t.observe(Observation(20, GRID[0], base * trial_speed, _window(GRID[0], FAST, 1).features))
    return cur, win, base, d


def _held_then_change(t: AutoByteTuner, trial_speed: float, after: float):
    """As :func:`_tried`; the run went back, and ``cur`` measured ``after`` x its speed (a change of
    conditions, the detector says)."""
    cur, win, base, d = _tried(t, trial_speed)
    assert d is not None and d.config == cur and d.reason.startswith(("verify", "rollback")), d  # back to cur either way
    old = t.ledger.current
    assert GRID[0] in old.measured
    t.observe(Observation(30, cur, base * after, win.features, regime_changed=True))
    return old, t.ledger.current, base


def test_a_trial_that_ran_in_the_new_conditions_is_moved_to_them(fresh_net, caplog):
    t = AutoByteTuner(fresh_net, background=False)
    with caplog.at_level(logging.INFO, logger="autobyte.meta"):
        old, new, base = _held_then_change(t, trial_speed=3.0, after=3.2)  # both 3x faster: the trial ran after the change
    assert old is not new and GRID[0] not in old.measured
    assert new.measured[GRID[0]][0] == pytest.approx(3.0 * base)
    assert "ran in the new conditions" in caplog.text


def test_a_slower_trial_stays_where_it_was_measured_though_the_change_accounts_for_it(fresh_net):
    t = AutoByteTuner(fresh_net, background=False)
    # the trial 3x slower than predicted, the conditions then 3.2x slower: moved, it would be the fastest measured there
    old, new, base = _held_then_change(t, trial_speed=0.4, after=1 / 3.2)
    assert old.measured[GRID[0]][0] == pytest.approx(0.4 * base) and GRID[0] not in new.measured
    assert set(new.measured) == {GRID[4]}  # the new conditions hold only what ran in them


@pytest.mark.parametrize("trial_speed, after", [
    (3.0, 0.3),  # the trial fast, the conditions then slower
    (0.7, 0.15),  # the trial 42% slower than predicted, the conditions then 6.7x slower: the change came after it
    (1.2 / 3.8, 1 / 6.0),  # the trial 3.8x slower than predicted, the link then 6x slower: 0.45 log units remain
])
def test_a_surprise_the_change_does_not_explain_stays_where_it_was_measured(fresh_net, trial_speed, after):
    t = AutoByteTuner(fresh_net, background=False)
    old, new, base = _held_then_change(t, trial_speed=trial_speed, after=after)
    assert old.measured[GRID[0]][0] == pytest.approx(trial_speed * base) and GRID[0] not in new.measured


def _verifying(t: AutoByteTuner):
    """Up to the verifier's decision: a trial 3x its predicted 1.2x of ``cur`` sends the run back to ``cur`` to check."""
    cur, win, base, d = _tried(t, 3.0)
    assert d is not None and d.config == cur and d.reason.startswith("verify"), d
    return cur, win, base


def test_a_verification_is_answered_at_its_first_check(fresh_net):
    t = OneWindow(fresh_net, background=False)
    cur, win, base = _verifying(t)
    assert t._asked == cur
    # the first check of the re-measured configuration runs as it did: conditions unchanged, back to the trial
    d = t.check(Observation(25, cur, base * 1.01, win.features, window_share=0.5))
    assert d is not None and d.config == GRID[0] and d.reason.startswith("rollback"), d
    assert t.ledger.current.measured[cur][1] == pytest.approx(1.5)  # the check counted as half a window
    assert t._asked is None and t.check(Observation(30, GRID[0], base * 3.0, win.features, window_share=0.5)) is None


def test_a_recall_probe_is_answered_at_its_first_check(fresh_net):
    t = AutoByteTuner(fresh_net, background=False)
    t.start(GRID, GRID[4])
    lo, hi = _window(GRID[4], SLOW, 0), _window(GRID[4], FAST, 1)
    t.observe(lo)
    t.observe(Observation(20, GRID[8], lo.speed * 1.3, lo.features))  # a faster configuration measured in the slow regime
    t.observe(Observation(30, GRID[4], hi.speed, hi.features, regime_changed=True))
    d = t.observe(Observation(40, GRID[4], lo.speed * 0.6, lo.features, regime_changed=True))  # a third set of conditions
    assert d is not None and d.config == GRID[8] and d.reason.startswith("recall"), d
    # the probe runs as it did in the first regime: that one is back, and what was measured there counts at once
    d = t.check(Observation(45, GRID[8], lo.speed * 1.3, lo.features, window_share=0.5))
    assert d is not None and t.ledger.recalled is not None and t.ledger.current.ident == 0, d


def test_a_mixed_check_starts_a_regime_with_nothing_filed_and_probes_at_once(fresh_net):
    t = AutoByteTuner(fresh_net, background=False)
    t.start(GRID, GRID[4])
    lo, hi = _window(GRID[4], SLOW, 0), _window(GRID[4], FAST, 1)
    t.observe(lo)
    t.observe(Observation(20, GRID[8], lo.speed * 1.3, lo.features))  # a faster configuration of the slow regime
    t.observe(Observation(30, GRID[4], hi.speed, hi.features, regime_changed=True))  # fast conditions: regime 1
    t._trial = (GRID[0], hi.speed, GRID[4])  # a trial under way when the conditions change again
    n, rows = len(t.ledger.regimes), len(t.learner.rows)
    mixed = Observation(40, GRID[4], (lo.speed + hi.speed) / 2, lo.features, regime_changed=True, mixed=True)
    d = t.observe(mixed)
    # a new regime, nothing of the mixed speed kept: not filed, no pair for adaptation, the trial dropped
    assert len(t.ledger.regimes) == n + 1 and t.ledger.current.measured == {} and len(t.learner.rows) == rows
    assert t._trial is None and not t.learner.recent
    assert d is not None and d.config == GRID[8] and d.reason.startswith("recall") and t._asked == GRID[8]
    # the probe's first check, wholly in the new conditions, finds the slow regime back
    t.check(Observation(45, GRID[8], lo.speed * 1.3, lo.features, window_share=0.5))
    assert t.ledger.recalled is not None and t.ledger.current.ident == 0


def test_a_clean_check_judges_a_held_surprise_before_a_later_change(fresh_net):
    # the verification's first check, clean, shows the surprise was the predictor's; a change seen later,
    # however well it would account for the surprise, came after it: the trial's measurement stays where it ran
    t = OneWindow(fresh_net, background=False)
    cur, win, base = _verifying(t)
    n = len(t.errors)
    assert t._held is not None and t._held[0] == GRID[0]  # the trial's surprise, held until judged
    d = t.check(Observation(25, cur, base, win.features, window_share=0.5))
    assert d is not None and d.config == GRID[0]  # answered: the trial ran faster, back to it
    assert len(t.errors) == n + 1 and (t._held is None or t._held[0] == cur)  # judged; only the answer's own may be held
    old = t.ledger.current
    t.observe(Observation(30, cur, base * 3.2, win.features, regime_changed=True))
    assert old.measured[GRID[0]][0] == pytest.approx(3.0 * base) and GRID[0] not in t.ledger.current.measured


def test_asked_round_trips_in_the_state(fresh_net):
    t = AutoByteTuner(fresh_net, background=False)
    cur, _, _ = _verifying(t)
    r = AutoByteTuner(fresh_net, background=False)
    r.start(GRID, GRID[4])
    r.load_state_dict(json.loads(json.dumps(t.state_dict())))
    assert r._asked == cur


def test_held_state_round_trips_and_an_old_state_drops_it(fresh_net):
    t = AutoByteTuner(fresh_net, background=False)
    t.start(GRID, GRID[4])
    t._held = (GRID[0], 120.0, 300.0, 0.1, 100.0, 0.5)
    state = json.loads(json.dumps(t.state_dict()))
    r = AutoByteTuner(fresh_net, background=False)
    r.start(GRID, GRID[4])
    r.load_state_dict(state)
    assert r._held == t._held
    r.load_state_dict({"held": [120.0, 300.0, 0.1, 100.0]})  # saved before the configuration was kept
    assert r._held is None


def test_autobyte_hands_its_noise_z_to_the_controllers_detector(fresh_net):
    from autobyte.core.tuning import Controller

    t = AutoByteTuner(fresh_net, background=False)
    c = Controller(t, GRID, GRID[4], "ps", list(MODEL.layer_bytes))
    assert t.noise_z == 3.0 and c.detector is not None and c.detector.noise_z == 3.0
    off = Controller(AutoByteTuner(fresh_net, background=False, noise_z=None), GRID, GRID[4], "ps", list(MODEL.layer_bytes))
    assert off.detector is not None and off.detector.noise_z is None
    with pytest.raises(ValueError, match=r"noise_z must be None or a number in \(0, 100\), but got noise_z=0"):
        AutoByteTuner(fresh_net, background=False, noise_z=0)


def _spy_on_spread(t: AutoByteTuner) -> list:
    """The ``spread`` the tuner passes its explorer at each proposal from now on (a list that fills as it runs)."""
    propose, seen = t.explorer.propose, []

    def spy(*a, **k):
        seen.append(a[12] if len(a) > 12 else k.get("spread"))
        return propose(*a, **k)

    t.explorer.propose = spy
    return seen


def test_the_explorer_values_trials_by_what_this_jobs_trials_found(fresh_net):
    # predicted gains are shrunk to the scale of what this job's trials found, starting from `shrink`, and only the
    # improvement beyond min_gain counts
    t = AutoByteTuner(fresh_net, background=False)
    assert t.shrink == 0.05 and t.explorer.gain_floor == pytest.approx(math.log1p(0.02))
    assert AutoByteTuner(fresh_net, background=False, min_gain=0.05).explorer.gain_floor == pytest.approx(math.log1p(0.05))
    cur = t.start(GRID, GRID[4])
    for c in (GRID[5], GRID[7]):  # two trials that found nothing
        t.trial_record.expect(c, 100.0)
        t.trial_record.outcome(c, 99.0)
    assert t.trial_record.spread(t.shrink) == pytest.approx(0.05 / math.sqrt(3))
    seen = _spy_on_spread(t)
    t.observe(_window(cur, FAST, 0))
    assert seen and seen[0] == pytest.approx(0.05 / math.sqrt(3))


def test_tuner_records_what_each_trial_found(fresh_net):
    t = AutoByteTuner(fresh_net, background=False)
    cur = t.start(GRID, GRID[4])
    t.observe(_window(cur, FAST, 0))
    base = t.ledger.current.measured[cur][0]
    t._trial, t._left = (GRID[0], base * 1.1, cur), cur  # a trial predicted 10% faster ...
    t.trial_record.expect(GRID[0], base)  # ... as the tuner records one
    t.observe(Observation(20, GRID[0], base * 0.9, _window(GRID[0], FAST, 1).features))  # ran 10% slower
    assert list(t.trial_record.found) == [0.0] and t.ledger.regimes[0].misses == 1
    r = AutoByteTuner(fresh_net, background=False)
    r.start(GRID, GRID[4])
    r.load_state_dict(json.loads(json.dumps(t.state_dict())))
    assert list(r.trial_record.found) == [0.0]


def test_autobyte_sets_the_controllers_detector(fresh_net):
    t = AutoByteTuner(fresh_net, background=False)
    c = Controller(t, GRID, GRID[4], "ps", list(MODEL.layer_bytes))
    assert c.detector is not None and (c.detector.rate_rise, c.detector.step_change, c.detector.noise_z) == (0.5, 0.5, 3.0)


@pytest.mark.parametrize("name", ["remember", "verify", "short_horizon_iters", "equivalent", "calibrate", "near_best",
                                  "min_predicted_gain", "refile", "tail", "debias", "payoff", "time_units", "predictor",
                                  "within_phase", "answer_at_check", "clean_check", "settle", "rate_rise", "step_change",
                                  "mover_z", "shrink", "history_spread", "confirm"])
def test_an_option_the_tuner_does_not_take_is_a_type_error(fresh_net, name):
    with pytest.raises(TypeError, match=rf"unexpected keyword argument '{name}'"):
        AutoByteTuner(fresh_net, background=False, **{name: None})


def test_a_state_saved_with_keys_since_removed_loads_and_goes_on_deciding_as_it_did(fresh_net):
    saved = json.loads(OLD_STATE.read_text())
    t = AutoByteTuner(fresh_net, background=False)
    t.start(GRID, GRID[4])
    t.load_state_dict(saved["state"])
    assert list(t.trial_record.found) == [r for _, r in saved["state"]["trial_record"]["record"]]
    assert t.trial_record.pending is not None and t.trial_record.pending[1] == saved["state"]["trial_record"]["pending"][3]
    cur, after = Config(*saved["config_at_state"]), []
    for w in range(14, 24):
        d = t.observe(_window(cur, [FAST, SLOW, FAST, SLOW][w // 6], w, changed=(w % 6 == 0)))
        if d is not None:
            after.append([w, str(d.config), d.reason])
            cur = d.config
    assert after == saved["decisions_after"]
    back = AutoByteTuner(fresh_net, background=False)
    back.start(GRID, GRID[4])
    state = json.loads(json.dumps(t.state_dict()))
    back.load_state_dict(state)
    assert json.loads(json.dumps(back.state_dict())) == state
