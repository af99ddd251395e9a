"""wire="auto": :class:`autobyte.core.wire.WireTuner` measures both precisions in every set of conditions and keeps
16 bits only where they measured ``min_gain`` faster; the inner tuner moves partition and credit at fp32."""

from __future__ import annotations

import json
import statistics
from dataclasses import replace

import numpy as np
import pytest

from autobyte.core import MiB
from autobyte.core.space import Config
from autobyte.core.tuners import GridTuner
from autobyte.core.tuning import Decision, Observation, StaticTuner, Tuner
from autobyte.core.wire import AutoWire, WireTuner, _fp32, check_wire_choice
from autobyte.testing import tuner_contract as tc

START = Config(4 * MiB, 16 * MiB)
FEATURES = tc.window(tc.START, 0).features


def obs(config: Config, speed: float, it: int, **kw) -> Observation:
    """A window as the controller reports it, with its default detector's threshold (``regime_change`` 0.15)."""
    return Observation(it, config, speed, FEATURES, **{"change_threshold": 0.15, **kw})


def speed(config: Config, link_bound: bool) -> float:
    """Where the link is the bottleneck fp32 runs 100 samples/s and 16 bits 1.6x that; where compute is, fp32 runs 200
    and 16 bits 0.98x that."""
    if config.wire == "fp32":
        return 100.0 if link_bound else 200.0
    return 160.0 if link_bound else 196.0


def run(tuner: Tuner, phases: list[tuple[bool, int]], start: Config = START) -> tuple[list[Config], list[Decision]]:
    """Windows of each phase (link_bound, n_windows) in turn, following every decision; the config of every window."""
    current = tuner.start(tc.SPACE, start)
    configs, decisions, it = [], [], 0
    for link_bound, n in phases:
        for k in range(n):
            it += 10
            configs.append(current)
            d = tuner.observe(obs(current, speed(current, link_bound), it, regime_changed=k == 0 and it > 10))
            if d is not None:
                decisions.append(d)
                current = d.config
    return configs, decisions


def test_link_bound_chooses_16_bits_and_compute_bound_goes_back_to_fp32():
    t = WireTuner()
    configs, decisions = run(t, [(True, 8), (False, 8), (True, 8)])
    wires = [c.wire for c in configs]
    # link-bound: one window at fp32, one at bf16 (1.6x: no doubt), then bf16 kept
    assert wires[:8] == ["fp32"] + ["bf16"] * 7
    # compute-bound: one more at bf16, one at fp32 (0.98x: 16 bits no faster), then fp32 kept
    assert wires[8:16] == ["bf16"] + ["fp32"] * 7
    assert wires[16:] == ["fp32"] + ["bf16"] * 7
    assert [c["wire"] for c in t.choices] == ["bf16", "fp32", "bf16"]
    assert t.choices[0]["gain"] == pytest.approx(1.6) and t.choices[1]["gain"] == pytest.approx(0.98)
    # every decision line names the objective that moved it
    assert decisions[0].reason.startswith("wire trial, for speed: bf16 against fp32 (measured 100.0 samples/s")
    assert decisions[1].reason.startswith("wire trial, for exactness: fp32 against bf16 (measured 196.0 samples/s")
    assert t.choices[0]["reason"].startswith("wire bf16, for speed: measured 1.600x fp32")
    assert "for exactness: bf16 measured 0.980x fp32" in t.choices[1]["reason"] and "1 + min_gain = 1.05" in t.choices[1]["reason"]
    assert all(c.partition_bytes == START.partition_bytes and c.credit_bytes == START.credit_bytes for c in configs)
    # a choice of the precision in force moves nothing: it is logged and kept in ``choices``
    assert len(decisions) == 3


@pytest.mark.parametrize("min_gain, chosen", [(0.05, "fp32"), (0.03, "bf16")])
def test_min_gain_is_the_users_preference(min_gain, chosen):
    t = WireTuner(preference=AutoWire(min_gain=min_gain))
    current = t.start(tc.SPACE, START)
    for it in range(1, 8):
        d = t.observe(obs(current, 104.0 if current.wire == "bf16" else 100.0, it * 10))
        current = d.config if d is not None else current
    assert t.chosen == chosen and current.wire == chosen


@pytest.mark.parametrize("fast, windows", [(107.0, 3), (115.0, 1), (100.0, 1), (96.0, 1), (102.0, 3)])
def test_a_doubtful_gain_gets_windows_per_precision(fast, windows):
    # 1.07x and 1.02x are within 2 * min_gain of the threshold: 3 windows each; 1.15x, 1.00x and 0.96x are not
    t = WireTuner(preference=AutoWire(low="fp16", windows=3))
    current = t.start(tc.SPACE, START)
    wires = []
    for it in range(1, 10):
        wires.append(current.wire)
        d = t.observe(obs(current, fast if current.wire == "fp16" else 100.0, it * 10))
        current = d.config if d is not None else current
    # one window each first; in doubt, the precision in force until it has 3, then the other until it has 3
    expected = ["fp32", "fp16"] if windows == 1 else ["fp32", "fp16", "fp16", "fp16", "fp32", "fp32"]
    assert wires[:len(expected)] == expected
    assert t.chosen == ("fp16" if fast >= 105 else "fp32") and current.wire == t.chosen
    assert f"{windows} and {windows} windows" in t.choices[0]["reason"]


def test_mixed_checks_and_short_windows_are_no_measurement():
    t = WireTuner()
    current = t.start(tc.SPACE, START)
    assert t.observe(obs(current, 100.0, 10, mixed=True, regime_changed=True)) is None
    assert t.observe(obs(current, 100.0, 20, window_share=0.2)) is None
    d = t.observe(obs(current, 100.0, 30))
    assert d is not None and d.config.wire == "bf16"


def test_a_guard_sending_the_run_back_to_fp32_starts_a_new_comparison():
    t = WireTuner()
    run(t, [(True, 6)])
    assert t.chosen == "bf16"
    # the do-no-harm guard (or a user) put fp32 back: what was chosen no longer holds; measure again
    d = t.observe(obs(START, 100.0, 100))
    assert t.chosen is None and d is not None and d.reason.startswith("wire trial, for speed")


class Recorder(Tuner):
    """Moves to <1 MiB, 2X> at its third window; records what it was shown."""

    name = "recorder"

    def __init__(self) -> None:
        self.seen: list[Observation] = []

    def observe(self, o: Observation) -> Decision | None:
        self.seen.append(o)
        return Decision(Config(MiB, 2 * MiB), "scripted move") if len(self.seen) == 7 else None


def test_the_inner_tuner_sees_fp32_and_a_change_of_precision_as_changed_conditions():
    inner = Recorder()
    t = WireTuner(inner)
    configs, decisions = run(t, [(True, 10)])
    assert all(o.config.wire == "fp32" for o in inner.seen)
    changed = [o.regime_changed for o in inner.seen]
    assert changed[:4] == [False, True, False, False]  # the second window is the first at bf16
    # its decision waits for the comparison, then applies at the chosen precision, said to be for speed
    move = decisions[-1]
    assert move.config == Config(MiB, 2 * MiB, "bf16") and move.reason == "partition and credit, for speed: scripted move"
    assert configs[-1] == Config(MiB, 2 * MiB, "bf16")


def test_a_tuner_per_precision_sees_its_own_windows_and_only_the_changes_it_missed():
    fp32, low = Recorder(), Recorder()
    t = WireTuner(fp32, low_inner=low)
    current = t.start(tc.SPACE, START)
    speeds = {"fp32": 100.0, "bf16": 160.0}
    it, changed_at = 0, {5}  # conditions change at the 5th window (while bf16 runs)
    for k in range(1, 10):
        it += 10
        d = t.observe(obs(current, speeds[current.wire] * (0.5 if k >= 5 else 1.0), it, regime_changed=k in changed_at))
        current = d.config if d is not None else current
    assert all(o.config.wire == "fp32" for o in fp32.seen + low.seen)
    # fp32's tuner saw the first window, then (the comparison after the change) one more, told of the change it missed
    assert [o.iteration for o in fp32.seen] == [10, 60]
    assert [o.regime_changed for o in fp32.seen] == [False, True]
    # the 16-bit tuner's first window is no change of conditions: its records start there; the real change reaches it
    assert [o.iteration for o in low.seen][:4] == [20, 30, 40, 50] and low.seen[0].regime_changed is False
    assert [o.regime_changed for o in low.seen] == [o.iteration == 50 for o in low.seen]  # it saw the change itself
    assert t.choices[0]["wire"] == "bf16" and t.choices[1]["wire"] == "bf16"
    # its state round-trips with both tuners' records apart
    state = json.loads(json.dumps(t.state_dict()))
    assert state["low_inner"] == low.state_dict() and state["saw"] == {"fp32": [1, "fp32"], "bf16": [1, "bf16"]}
    with pytest.raises(TypeError, match="low_inner must be an autobyte Tuner other than inner"):
        WireTuner(fp32, low_inner=fp32)


def test_a_named_tuner_gets_one_per_precision_and_its_horizon_survives_the_choice():
    from autobyte.core.tuners import make_tuner
    from autobyte.core.wire import tuner_for

    t = tuner_for("autobyte", AutoWire())
    assert isinstance(t, WireTuner) and t.inners["bf16"] is not t.inner and t.name == "autobyte+wire"
    assert tuner_for(t, AutoWire()) is t and tuner_for("static", "bf16").name == "static"
    assert tuner_for(None, AutoWire()).inner.name == "static"
    shared = WireTuner(make_tuner("autobyte"))
    for w in (t, shared):
        current = w.start(tc.SPACE, START)
        for k in range(1, 4):  # fp32, then bf16 (1.6x: chosen), then bf16 again
            d = w.observe(Observation(10 * k, current, speed(current, True), tc.window(_fp32(current), 10 * k).features))
            current = d.config if d is not None else current
        assert current.wire == "bf16" and w.chosen == "bf16"
    # the comparison's windows are no set of conditions: the 16-bit tuner still expects the default horizon ahead;
    # one tuner for both saw conditions end after 20 iterations (the precision changed), and expects nothing left 20 later
    assert t.inners["bf16"].ledger.horizon(40) == t.inners["bf16"].ledger.default_horizon
    assert shared.inner.ledger.horizon(40) == 0.0


def test_a_comparison_moves_at_a_check_only_without_doubt_and_the_inner_tuner_gets_checks_after():
    class Ends(Recorder):
        def check(self, o: Observation) -> Decision | None:
            return Decision(Config(MiB, MiB), "ended early")

    t = WireTuner(Ends(), AutoWire(windows=3))
    current = t.start(tc.SPACE, START)
    # the job's first measurement is a whole window: its first iterations run cold (a check there measured 80)
    assert t.check(obs(current, 80.0, 5, window_share=0.5)) is None and t._readings == {}
    d = t.observe(obs(current, 100.0, 10))  # the first fp32 measurement: try bf16 at once
    assert d is not None and d.reason.startswith("wire trial, for speed: bf16 against fp32")
    assert t.state_dict()["speeds"] == {"fp32": [100.0]}
    bf16 = replace(START, wire="bf16")
    assert t.observe(obs(bf16, 104.0, 20)) is None  # 1.04x: in doubt, 3 windows each
    before = json.dumps(t.state_dict())
    assert t.check(obs(bf16, 104.0, 25, window_share=0.5)) is None
    assert json.dumps(t.state_dict()) == before  # a check that moves nothing keeps nothing
    # once chosen, checks reach the inner tuner, at the chosen precision
    run(t, [(True, 6)])
    d = t.check(obs(bf16, 160.0, 175, window_share=0.5))
    assert d is not None and d.config == Config(MiB, MiB, "bf16") and d.reason.endswith("ended early")


def test_a_gain_half_the_bytes_cannot_explain_starts_the_comparison_again():
    # fp32 measured before the link slowed, bf16 after it: 0.245x is no comparison of precisions
    t = WireTuner()
    current = t.start(tc.SPACE, START)
    d = t.observe(obs(current, 400.0, 10))
    d = t.observe(obs(d.config, 98.0, 20))
    assert d is not None and d.config.wire == "fp32" and "again (bf16 measured 0.24x fp32" in d.reason and t.chosen is None
    assert t.state_dict()["speeds"] == {"bf16": [98.0]}
    t.observe(obs(d.config, 51.0, 30))
    assert t.chosen == "bf16" and t.choices[-1]["gain"] == pytest.approx(98.0 / 51.0)


def test_state_round_trip_mid_comparison():
    a, b = WireTuner(GridTuner(tc.SPACE)), WireTuner(GridTuner(tc.SPACE))
    ca = a.start(tc.SPACE, START)
    b.start(tc.SPACE, START)
    a.observe(obs(ca, 100.0, 10))
    b.load_state_dict(json.loads(json.dumps(a.state_dict())))
    for k in range(2, 8):
        da, db = a.observe(obs(ca, 120.0, k * 10)), b.observe(obs(ca, 120.0, k * 10))
        assert da == db
        ca = da.config if da is not None else ca


def test_the_contract_holds_around_static_and_grid():
    tc.check_tuner(lambda: WireTuner(StaticTuner()), inside_space=False)
    tc.check_tuner(lambda: WireTuner(GridTuner(tc.SPACE)), inside_space=False, min_decisions=2)


@pytest.mark.parametrize("kw, exc, match", [
    ({"low": "fp32"}, ValueError, r"low must be one of \('bf16', 'fp16'\), but got low='fp32'"),
    ({"min_gain": 1.5}, ValueError, r"min_gain must be a number in \[0, 1\).*min_gain=1.5"),
    ({"min_gain": True}, ValueError, "min_gain=True"),
    ({"windows": 0}, ValueError, "windows must be a positive integer, but got windows=0"),
])
def test_bad_preferences_are_refused_in_one_line(kw, exc, match):
    with pytest.raises(exc, match=match):
        AutoWire(**kw)


def test_the_wire_argument():
    assert check_wire_choice("auto") == AutoWire() and check_wire_choice("bf16") == "bf16"
    assert check_wire_choice(AutoWire(min_gain=0.1)).min_gain == 0.1
    with pytest.raises(ValueError, match=r"^wire must be one of 'fp32', 'bf16', 'fp16', 'auto' or an AutoWire, but got wire='int8'\.$"):
        check_wire_choice("int8")
    with pytest.raises(TypeError, match="but got wire=16"):
        check_wire_choice(16)
    with pytest.raises(TypeError, match="inner must be an autobyte Tuner or None"):
        WireTuner("autobyte")  # type: ignore[arg-type]


def test_it_chooses_the_wire_and_forwards_the_inner_tuners_detector_settings():
    inner = StaticTuner()
    inner.noise_z = 3.0
    t = WireTuner(inner)
    assert t.chooses_wire and not StaticTuner.chooses_wire and t.noise_z == 3.0 and t.guarded is False
    assert t.name == "static+wire"


def test_after_a_change_of_conditions_a_check_moves_the_comparison_at_once():
    t = WireTuner()
    run(t, [(True, 4)])
    assert t.chosen == "bf16"
    bf16 = replace(START, wire="bf16")
    assert t.observe(obs(bf16, 98.0, 100, regime_changed=True)) is not None  # new conditions: fp32 measured again
    t2 = WireTuner()
    run(t2, [(True, 4)])
    t2.observe(obs(bf16, 98.0, 100, window_share=0.5, regime_changed=True, mixed=True))  # the check that showed it
    d = t2.check(obs(bf16, 98.0, 105, window_share=0.5))  # wholly in the new conditions: no cold start to wait out
    assert d is not None and d.reason.startswith("wire trial, for exactness: fp32 against bf16")


def test_a_start_at_a_precision_the_preference_does_not_name_is_served_by_fp32s_tuner():
    fp32, low = Recorder(), Recorder()
    t = WireTuner(fp32, low_inner=low)  # the preference's 16 bits: bf16
    fp16 = replace(START, wire="fp16")
    assert t.start(tc.SPACE, fp16) == fp16
    d = t.observe(obs(fp16, 150.0, 10))
    assert [o.config for o in fp32.seen] == [START] and not low.seen
    assert d is not None and d.config.wire == "fp32"  # the comparison: fp32 against the precision in force


def feed(t: WireTuner, windows: list[tuple[dict[str, float], bool]], start: Config = START, **kw) -> list[str]:
    """Windows of given speeds per precision (``changed``: the controller saw a change just before), following every
    decision; the precision of every window. ``kw``: more fields of every observation."""
    current = t.start(tc.SPACE, start)
    wires = []
    for k, (speeds, changed) in enumerate(windows):
        wires.append(current.wire)
        d = t.observe(obs(current, speeds[current.wire], (k + 1) * 10, regime_changed=changed, **kw))
        current = d.config if d is not None else current
    return wires


FAST = {"fp32": 100.0, "bf16": 160.0}  # a link that makes 16 bits 1.6x fp32
SLOW = {"fp32": 50.0, "bf16": 80.0}  # half that link: still link-bound, 16 bits still 1.6x


@pytest.mark.parametrize("again, recalled", [(158.0, True), (140.0, True), (183.0, True), (139.0, False), (184.5, False)])
def test_conditions_met_before_keep_the_precision_chosen_there_without_another_trial(again, recalled):
    t = WireTuner()
    back = {"fp32": 100.0, "bf16": again}
    wires = feed(t, [(FAST, False)] * 3 + [(SLOW, True)] + [(SLOW, False)] * 2 + [(back, True)] + [(back, False)] * 2)
    # the fast link, then the slow one: each compared (bf16 in force at the change: fp32 measured once)
    assert wires[:6] == ["fp32", "bf16", "bf16", "bf16", "fp32", "bf16"]
    if recalled:  # bf16 runs within the controller's threshold (15%) of its speed on the fast link: no fp32 trial
        assert wires[6:] == ["bf16"] * 3
        assert t.chosen == "bf16" and t.choices[-1]["recalled"] == 20
        assert t.choices[-1]["reason"] == (f"wire bf16, for speed: conditions met before (bf16 measured {again:.1f} samples/s, "
                                           "160.0 at iteration 20 and 1 reading after it, the link at 599.7 MB/s, 599.7 then, "
                                           "within the controller's 15%, where bf16 "
                                           "measured 1.600x fp32); "
                                           "fp32 not measured again")
    else:  # further from it than the controller's threshold: not the same conditions, compared again
        assert wires[6:] == ["bf16", "fp32", "bf16"]
        assert "recalled" not in t.choices[-1] and "speeds" in t.choices[-1]


@pytest.mark.parametrize("threshold, recalled", [(0.25, True), (0.15, False), (None, False)])
def test_the_same_conditions_are_those_the_controller_does_not_tell_apart(threshold, recalled):
    # bf16 back at 130 samples/s against 160 (-19%): the same conditions to a controller whose threshold a noisy job
    # raised to 25%, not to its default 15%; a controller without a detector tells no conditions apart
    back = {"fp32": 100.0, "bf16": 130.0}
    t = WireTuner()
    wires = feed(t, [(FAST, False)] * 3 + [(SLOW, True)] + [(SLOW, False)] * 2 + [(back, True)] + [(back, False)] * 2,
                 change_threshold=threshold)
    assert wires[6:] == (["bf16"] * 3 if recalled else ["bf16", "fp32", "bf16"])
    assert ("recalled" in t.choices[-1]) == recalled
    if recalled:
        assert "within the controller's 25%" in t.choices[-1]["reason"]


def test_conditions_are_recognised_by_the_windows_after_the_comparison_not_only_its_own_reading():
    # the comparison's bf16 reading (136) was the check that showed the change; bf16 then ran at 120. Back on that
    # link after another one, bf16 reads 112: 19% off the comparison's reading (a comparison again at 15%), 7% off
    # the median of it and the windows after it: met before
    skewed, steady = {"fp32": 70.0, "bf16": 136.0}, {"fp32": 70.0, "bf16": 120.0}
    other = {"fp32": 30.0, "bf16": 55.0}
    back = {"fp32": 65.0, "bf16": 112.0}
    t = WireTuner()
    wires = feed(t, [(skewed, False)] * 2 + [(steady, False)] * 3 + [(other, True)] * 2 + [(back, True)] + [(back, False)] * 2)
    assert wires[:7] == ["fp32"] + ["bf16"] * 5 + ["fp32"]  # the other link compared (fp32 tried at its first window)
    assert t.choices[0]["steady"] == [120.0] * 3 and "steady" not in t.choices[1]  # the other link's: no window yet
    assert wires[7:] == ["bf16"] * 3 and t.choices[-1]["recalled"] == 20
    assert "bf16 measured 112.0 samples/s, 120.0 at iteration 20 and 3 readings after it" in t.choices[-1]["reason"]


def test_the_readings_kept_are_the_last_checks_and_windows_at_the_comparisons_precision_partition_and_credit():
    t = WireTuner()
    wires = feed(t, [(FAST, False)] * 2)  # fp32, then bf16: chosen at iteration 20
    assert wires == ["fp32", "bf16"] and t.chosen == "bf16" and "steady" not in t.choices[0]
    at = replace(START, wire="bf16")
    t.observe(obs(replace(at, partition_bytes=MiB), 150.0, 30))  # the inner tuner moved partition: not its conditions
    t.observe(obs(at, 150.0, 35, window_share=0.3))  # a window the guard cut short
    assert "steady" not in t.choices[0]
    assert t.check(obs(at, 140.0, 40, window_share=0.5)) is None  # a check: kept
    assert t.choices[0]["steady"] == [140.0]
    for k in range(10):
        t.observe(obs(at, 150.0 + k, 45 + 10 * k))
    assert t.choices[0]["steady"] == [150.0 + k for k in range(2, 10)]  # the last 8
    saved = t.state_dict()
    b = WireTuner()
    b.start(tc.SPACE, at)
    b.load_state_dict(json.loads(json.dumps(saved)))
    assert b.choices[0]["steady"] == t.choices[0]["steady"]
    t.observe(obs(at, 170.0, 200))  # readings go on after a save: the saved state stays as it was
    b.load_state_dict(saved)
    b.observe(obs(at, 171.0, 200))
    assert saved["choices"][0]["steady"][-1] == 159.0 and t.choices[0]["steady"][-1] == 170.0


def test_a_false_change_under_fp32_chosen_without_doubt_moves_nothing():
    compute = {"fp32": 200.0, "bf16": 190.0}  # 0.95x: fp32 without doubt
    t = WireTuner()
    wires = feed(t, [(compute, False)] * 3 + [(compute, True)] + [(compute, False)] * 2)
    assert wires == ["fp32", "bf16", "fp32", "fp32", "fp32", "fp32"]
    assert t.choices[-1]["wire"] == "fp32" and t.choices[-1]["recalled"] == 20 and "for exactness: conditions met" in t.choices[-1]["reason"]


@pytest.mark.parametrize("speeds", [{"fp32": 100.0, "bf16": 107.0}, {"fp32": 100.0, "bf16": 103.0}])
def test_a_choice_made_in_doubt_is_not_taken_again(speeds):
    # 1.07x (bf16) and 1.03x (fp32) are within 2 * min_gain of 1: conditions met again are compared again
    t = WireTuner(preference=AutoWire(windows=1))
    wires = feed(t, [(speeds, False)] * 3 + [(speeds, True)] + [(speeds, False)] * 2)
    assert len([c for c in t.choices if "speeds" in c]) == 2 and not any("recalled" in c for c in t.choices)
    assert wires[3] != wires[4]  # a trial of the other precision after the change


def test_recalls_are_of_measured_comparisons_only_and_at_the_same_partition_and_credit():
    t = WireTuner()
    near = {"fp32": 100.0, "bf16": 145.0}  # within 15% of the fast link's 160
    drift = {"fp32": 100.0, "bf16": 136.0}  # within 15% of 145 (a recall), not of 160 (the comparison measured)
    wires = feed(t, [(FAST, False)] * 3 + [(near, True)] * 1 + [(near, False)] + [(drift, True)] + [(drift, False)] * 2)
    assert t.choices[1]["recalled"] == 20  # near: met before
    assert wires[5:] == ["bf16", "fp32", "bf16"]  # drift: compared again, not recalled from the recall
    other = WireTuner()
    other.start(tc.SPACE, START)
    other.choices = [dict(t.choices[0], at=Config(MiB, MiB).to_dict())]
    assert not other._met_before("bf16", 160.0, START, 100, 0.15)


def test_a_state_round_trip_keeps_what_was_compared():
    a = WireTuner()
    feed(a, [(FAST, False)] * 3)
    b = WireTuner()
    b.start(tc.SPACE, replace(START, wire="bf16"))
    b.load_state_dict(json.loads(json.dumps(a.state_dict())))
    assert b.observe(obs(replace(START, wire="bf16"), 159.0, 100, regime_changed=True)) is None
    assert b.chosen == "bf16" and b.choices[-1]["recalled"] == 20


@pytest.mark.parametrize("busy, trial", [(0.9, False), (0.83, False), (0.8, True), (None, True)])
def test_16_bits_that_keep_the_link_busy_stay_without_an_fp32_trial(busy, trial):
    # fp32's twice the bytes need at least 2 * busy / FP32_RATE (1.5) times 16 bits' time: 1.2x at 90%, 1.107x at 83%,
    # 1.067x at 80% (below 1 + 2 * min_gain = 1.10: a comparison as before)
    t = WireTuner()
    wires = feed(t, [(FAST, False)] * 3 + [(SLOW, True)] + [(SLOW, False)] * 2, link_busy=busy)
    # the first comparison runs fp32 where it started and measures bf16 against it: the rule is not asked there
    assert wires[:4] == ["fp32", "bf16", "bf16", "bf16"] and "speeds" in t.choices[0] and "bound" not in t.choices[0]
    if trial:
        assert wires[4:] == ["fp32", "bf16"] and "bound" not in t.choices[-1]
    else:
        assert wires[4:] == ["bf16", "bf16"] and t.chosen == "bf16"
        c = t.choices[-1]
        assert c["iteration"] == 40 and c["bound"] == pytest.approx(2 * busy / 1.5) and c["link_busy"] == {"bf16": busy}
        assert c["reason"] == (f"wire bf16, for speed: the link busy {busy:.0%} of bf16's time: fp32's twice the bytes need "
                               f"at least {2 * busy / 1.5:.2f}x it (at up to 1.5x bf16's rate), at least 1 + 2 * min_gain "
                               "= 1.1; fp32 not measured")


def test_the_link_bound_rule_follows_the_preference_and_reads_only_16_bits_in_force():
    # min_gain 0.2: 16 bits must be bound to 1.4x; the link busy 90% bounds fp32 to 1.2x only: a comparison
    t = WireTuner(preference=AutoWire(min_gain=0.2))
    wires = feed(t, [(FAST, False)] * 3 + [(SLOW, True)] + [(SLOW, False)] * 2, link_busy=0.9)
    assert wires[4:] == ["fp32", "bf16"]
    # fp32 in force on a busy link: half the bytes bound 16 bits' gain from above only; their trial is the comparison
    t = WireTuner()
    current = t.start(tc.SPACE, START)
    d = t.observe(obs(current, 100.0, 10, link_busy=0.99))
    assert d is not None and d.config.wire == "bf16" and not t.choices


@pytest.mark.parametrize("kw", [{"mixed": True, "regime_changed": True}, {"window_share": 0.3}, {"link_busy": float("nan")}])
def test_the_link_bound_rule_reads_only_a_measurement_of_the_conditions(kw):
    t = WireTuner()
    feed(t, [(FAST, False)] * 3)
    at = replace(START, wire="bf16")
    o = obs(at, 80.0, 100, **{"regime_changed": True, "link_busy": 0.95, **kw})
    assert t.observe(o) is None or t.choices[-1].get("bound") is None
    assert not any("bound" in c for c in t.choices)


def at_rate(mb_s: float):
    """The features of a window whose link achieved ``mb_s`` MB/s on every rank (0: no message measured)."""
    return replace(FEATURES, bw_up_Bps=np.full(FEATURES.n_workers, mb_s * 1e6), bw_down_Bps=np.full(FEATURES.n_workers, mb_s * 1e6))


class Link:
    """A job fed window by window on links given by the rate 16 bits achieve and the share of time they keep it busy;
    fp32 achieves the same rate (the tests read 16 bits' only)."""

    def __init__(self, t: WireTuner | None = None, start: Config = START) -> None:
        self.t = t if t is not None else WireTuner()
        self.current = self.t.start(tc.SPACE, start)
        self.k = 0

    def step(self, speeds: dict[str, float], mb_s: float, busy: float | None, changed: bool = False) -> str:
        self.k += 1
        wire = self.current.wire
        d = self.t.observe(Observation(10 * self.k, self.current, speeds[wire], at_rate(mb_s), regime_changed=changed,
                                       change_threshold=0.15, link_busy=busy))
        self.current = d.config if d is not None else self.current
        return wire

    def phase(self, speeds: dict[str, float], mb_s: float, busy: float | None, n: int = 3) -> list[str]:
        return [self.step(speeds, mb_s, busy, changed=k == 0) for k in range(n)]


@pytest.mark.parametrize("back_rate, recalled", [(24.0, True), (19.5, True), (18.0, False), (60.0, False), (0.0, True)])
def test_conditions_met_before_are_recognised_by_the_link_rate_too(back_rate, recalled):
    # bf16 on a slow link (22 MB/s achieved) chosen at 1.6x fp32; later bf16 runs as fast again on a link it achieves
    # back_rate on: within the controller's 15% of 22 (or unknown: no message) the same conditions, 60 MB/s another link
    job = Link()
    t = job.t

    def step(speeds, mb_s, changed=False):
        return job.step(speeds, mb_s, None, changed)

    wires = [step(FAST, 22.0), step(FAST, 22.0), step(FAST, 22.0), step(FAST, 22.0)]
    assert wires == ["fp32", "bf16", "bf16", "bf16"] and t.choices[0]["rates"] == [22e6] * 3
    assert t.choices[0]["link_busy"] == {"bf16": None}  # the reading that decided it: none measured here
    wires = [step(SLOW, 50.0, True), step(SLOW, 50.0), step(SLOW, 50.0)]  # another link, compared
    assert wires == ["bf16", "fp32", "bf16"]
    wires = [step(FAST, back_rate, True), step(FAST, back_rate)]
    assert wires == (["bf16", "bf16"] if recalled else ["bf16", "fp32"])
    if recalled:
        assert t.choices[-1]["recalled"] == 20
        assert ("the link at" in t.choices[-1]["reason"]) == (back_rate > 0)
    if back_rate == 19.5:
        assert "the link at 19.5 MB/s, 22.0 then, within the controller's 15%" in t.choices[-1]["reason"]


def test_a_state_saved_before_rates_were_kept_recalls_by_speed_alone():
    t = WireTuner()
    feed(t, [(FAST, False)] * 3)
    state = json.loads(json.dumps(t.state_dict()))
    for c in state["choices"]:
        c.pop("rates", None)
    b = WireTuner()
    b.start(tc.SPACE, replace(START, wire="bf16"))
    b.load_state_dict(state)
    o = Observation(100, replace(START, wire="bf16"), 159.0, at_rate(500.0), regime_changed=True, change_threshold=0.15)
    assert b.observe(o) is None and b.choices[-1]["recalled"] == 20


MID = {"fp32": 100.0, "bf16": 120.0}  # a link where 16 bits measured 1.2x fp32: without doubt (at least 1.1x)
SLOWER = {"fp32": 40.0, "bf16": 70.0}


@pytest.mark.parametrize("mb_s, busy, kept", [
    (40.0, 0.75, True),  # a slower link (40 against 60 MB/s), busier: fp32 not tried
    (40.0, 0.70, True),  # as busy as there (the median of 0.66, 0.70, 0.72)
    (40.0, 0.60, False),  # slower but less busy: compute grew against the link; a comparison
    (53.0, 0.75, False),  # 12% slower: within the controller's 15%, and bf16's speed is not what it was: a comparison
    (40.0, None, False),  # the busy share not measured: a comparison
])
def test_16_bits_stay_without_a_trial_on_a_slower_link_at_least_as_busy(mb_s, busy, kept):
    job = Link()
    # bf16 measured 1.2x fp32 at a link rate of 60 MB/s, its link busy 66-72% of its time (its reading, the windows after)
    assert [job.step(MID, 60.0, b) for b in (0.5, 0.66, 0.70, 0.72)] == ["fp32", "bf16", "bf16", "bf16"]
    assert job.t.choices[0]["busy"] == [0.66, 0.70, 0.72]
    wires = job.phase(SLOWER, mb_s, busy)
    assert wires == (["bf16"] * 3 if kept else ["bf16", "fp32", "bf16"])
    c = job.t.choices[-1]
    assert c.get("slower_link", False) == kept
    if kept:
        assert c["recalled"] == 20 and c["wire"] == "bf16" and c["gain"] == pytest.approx(1.2)
        assert c["reason"] == ("wire bf16, for speed: a slower link than where bf16 measured 1.200x fp32 (iteration 20 and 2 "
                               "readings after it, the link at 40.0 MB/s, 60.0 then, below by more than the controller's 15%; "
                               f"the link busy {busy:.0%} of bf16's time, {statistics.median(job.t.choices[0]['busy']):.0%} "
                               "then): fp32's twice the bytes cost more here; fp32 not measured")


def test_busy_shares_are_kept_as_rates_are_the_deciding_readings_where_it_ran_the_choice_and_the_readings_after():
    job = Link()
    job.step(MID, 60.0, 0.5)  # fp32's reading: not bf16's busy share
    job.step(MID, 60.0, 0.66)  # bf16's, which decides (bf16 in force)
    assert job.t.choices[0]["busy"] == [0.66] and job.t.choices[0]["link_busy"] == {"bf16": 0.66}
    for k in range(12):
        job.step(MID, 60.0, 0.70 + k / 100)
    assert job.t.choices[0]["busy"] == pytest.approx([0.70 + k / 100 for k in range(3, 12)])  # the last 9, as rates
    assert len(job.t.choices[0]["rates"]) == 9


def test_a_slower_link_is_recognised_only_from_16_bits_chosen_without_doubt_and_never_for_fp32():
    # 16 bits at 1.08x fp32: chosen (at least 1.05x), in doubt (below 1.1x): a slower link is compared again
    job = Link()
    job.phase({"fp32": 100.0, "bf16": 108.0}, 60.0, 0.70, n=6)
    assert job.t.chosen == "bf16" and "slower_link" not in job.t.choices[-1]
    assert job.phase(SLOWER, 40.0, 0.8) == ["bf16", "fp32", "bf16"] and "slower_link" not in job.t.choices[-1]
    # fp32 chosen without doubt (16 bits no faster), then fp32 in force on a slower link: bf16 is tried
    job = Link()
    assert job.phase({"fp32": 100.0, "bf16": 95.0}, 60.0, 0.5, n=4) == ["fp32", "bf16", "fp32", "fp32"]
    assert job.phase({"fp32": 60.0, "bf16": 95.0}, 40.0, 0.9)[:2] == ["fp32", "bf16"]


def test_a_state_saved_before_busy_shares_were_kept_recognises_no_slower_link():
    job = Link()
    job.phase(MID, 60.0, 0.70, n=4)
    state = json.loads(json.dumps(job.t.state_dict()))
    for c in state["choices"]:
        c.pop("busy", None)
    b = Link(WireTuner(), replace(START, wire="bf16"))
    b.t.load_state_dict(state)
    assert b.phase(SLOWER, 40.0, 0.8) == ["bf16", "fp32", "bf16"]  # (at 0.8 the link-bound rule does not fire)
    job.t.load_state_dict(json.loads(json.dumps(job.t.state_dict())))  # and one saved with them does
    assert job.phase(SLOWER, 40.0, 0.8) == ["bf16"] * 3 and job.t.choices[-1]["slower_link"]


def test_a_choice_decided_at_the_other_precisions_reading_keeps_the_rates_and_busy_shares_of_its_own():
    # bf16 in force at the start: its reading (60 MB/s, busy 66%), then fp32's trial decides bf16 (1.2x). The choice
    # keeps bf16's reading as its reference: a slower, busier link right after is kept without an fp32 trial (before,
    # the choice kept no rate and fp32 was tried again), and conditions met again are recognised by the rate too
    job = Link(start=replace(START, wire="bf16"))
    assert [job.step(MID, 60.0, b) for b in (0.66, 0.5)] == ["bf16", "fp32"]
    assert job.t.chosen == "bf16" and job.t.choices[0]["rates"] == [60e6] and job.t.choices[0]["busy"] == [0.66]
    assert job.t.choices[0]["link_busy"] == {"fp32": 0.5}  # the deciding reading's, for calibration, as before
    assert job.phase(SLOWER, 40.0, 0.75) == ["bf16"] * 3 and job.t.choices[-1]["slower_link"]
    assert "iteration 20, the link at 40.0 MB/s, 60.0 then, below by" in job.t.choices[-1]["reason"]
    assert job.phase(MID, 58.0, 0.68) == ["bf16"] * 3 and job.t.choices[-1]["recalled"] == 20
    assert "120.0 at iteration 20, the link at 58.0 MB/s, 60.0 then, within" in job.t.choices[-1]["reason"]


def test_a_comparisons_readings_keep_their_rates_across_a_save_and_a_state_saved_without_them_keeps_none():
    job = Link(start=replace(START, wire="bf16"))
    job.step(MID, 60.0, 0.66)  # bf16's reading; fp32's trial next
    state = json.loads(json.dumps(job.t.state_dict()))
    assert state["links"] == {"bf16": [[60e6, 0.66]]}
    for links, rates, busy in ((state["links"], [60e6], [0.66]), (None, [], [])):
        saved = dict(state, links=links) if links is not None else {k: v for k, v in state.items() if k != "links"}
        b = Link(WireTuner(), job.current)
        b.t.load_state_dict(saved)
        b.step(MID, 60.0, 0.5)  # fp32's reading decides bf16
        assert b.t.choices[0]["wire"] == "bf16" and b.t.choices[0]["rates"] == rates and b.t.choices[0]["busy"] == busy
