"""The ``realistic`` suite's constraints, grids measured after the trace's own transitions, and the headroom figures
beside every suite run (``suite_summary.md``)."""

from __future__ import annotations

import json
import math

import pytest

from autobyte.bench._headroom import analyse_runs, finite
from autobyte.bench._rank_plan import iteration_plan
from autobyte.bench._real import _sweep_spec
from autobyte.bench._scenarios import SUITES, Condition, Phase, Scenario, Suite, entered_from, grid_phases, phases_slowdown, phases_trace
from autobyte.bench._suite import SuitePlan, iteration_rows, read_iterations, run_suite
from autobyte.bench._suite_report import summarize_scenario, summarize_suite, table_md
from autobyte.core import KiB, MiB, Config

FAST, SLOW = Condition(2000), Condition(200)


# -- the suite ------------------------------------------------------------------------------------

def _grid_iterations(suite: Suite) -> int:
    """The iterations a suite's grids run: one grid per distinct model and condition (entered from the one before)."""
    scs = suite.scenarios
    n_grids = len({(sc.model_key, sc.entered_from(c), c) for sc in scs for c in sc.conditions()})
    return n_grids * (len(suite.grid()) * (suite.grid_iters + suite.grid_warmup) + 1)


def _assert_new_and_named_once(held) -> None:
    """No held-out scenario repeats a tuning scenario's model, batch and condition sequence, or another's name."""
    tuned = {(sc.model_key, tuple(p.condition for p in sc.phases)) for s in SUITES.values() for sc in s.scenarios
             if sc.tag == "tune"}
    assert all((sc.model_key, tuple(p.condition for p in sc.phases)) not in tuned for sc in held)
    names = [sc.name for s in SUITES.values() for sc in s.scenarios]
    assert all(names.count(sc.name) == 1 for sc in held)


@pytest.mark.parametrize("name,tag", [("realistic", "tune"), ("realistic-heldout", "heldout")])
def test_realistic_suites_hold_the_issues_constraints(name, tag):
    suite = SUITES[name]
    scs = suite.scenarios
    assert len(scs) >= 4 and suite.repeats == 2 and suite.grid() == SUITES["full"].grid()
    # `realistic`'s scenarios were read to design the tuner (tune); `realistic-heldout` judges it: nobody tunes on it
    assert all(sc.tag == tag for sc in scs)
    assert all(sc.iters >= 800 for sc in scs) and all(p.iters >= 200 for sc in scs for p in sc.phases)
    assert all(sc.about for sc in scs)
    assert any(len(sc.conditions()) == 1 for sc in scs)  # steady
    assert any(sc.arch == "ps" and len(sc.conditions()) > 1 for sc in scs)  # a parameter server whose link changes
    assert any(c.slowdown > 1.0 and c.slow_ranks == (0, 1) for sc in scs for c in sc.conditions())  # the compute changes
    # sized to run bytescheduler, hindsight and autobyte twice in about an hour per four scenarios on 2 cores: the
    # grids' iterations (one grid per distinct model and condition) are a few percent of the runs'
    assert _grid_iterations(suite) < 0.1 * 3 * suite.repeats * sum(sc.iters for sc in scs)


def test_the_held_out_realistic_suite_trains_a_model_the_meta_network_never_trained_on_in_new_conditions():
    from autobyte.meta._data import HELDOUT_MODELS

    held = SUITES["realistic-heldout"].scenarios
    # a model the meta-network never trained on (a `tune` scenario trains it too, at another batch and other links:
    # the held-out models no tuning scenario trains run 0.9 s and more per iteration on this host)
    assert any(sc.model.startswith("emu:") and sc.model[4:] in HELDOUT_MODELS for sc in held)
    _assert_new_and_named_once(held)


def test_the_long_realistic_suite_holds_conditions_for_minutes_and_is_held_out():
    suite = SUITES["realistic-long"]
    scs = suite.scenarios
    assert len(scs) == 2 and suite.repeats == 2 and suite.grid() == SUITES["full"].grid()
    assert all(sc.tag == "heldout" for sc in scs)  # written for judging: nobody tunes on it
    # longer than every `realistic` job, conditions held three times as long
    assert all(sc.iters >= 1800 and all(p.iters >= 600 for p in sc.phases) for sc in scs)
    assert min(sc.iters for sc in scs) > max(sc.iters for sc in SUITES["realistic"].scenarios)
    assert any(sc.arch == "ps" and len(sc.conditions()) > 1 for sc in scs)
    assert any(sc.phases[0].condition == sc.phases[-1].condition for sc in scs)  # conditions seen first return
    assert any(c.slowdown > 1.0 and c.slow_ranks == (0, 1) for sc in scs for c in sc.conditions())
    _assert_new_and_named_once(scs)
    assert _grid_iterations(suite) < 0.1 * 3 * suite.repeats * sum(sc.iters for sc in scs)


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


# -- the suite run, its processes faked: grids after transitions, headroom in the summary ----------

def _fake_run(calls: list):
    """``_real._run`` without processes: a config's iteration takes 0.1 s at 2000 Mbit/s and 0.4 s at 200, hindsight's
    config <1 MiB, 2X> 5% less at 200 Mbit/s; a sweep writes its grid as the rank script would."""
    import os

    def run(spec, trace, out_dir, plan, log, arch=None):
        os.makedirs(out_dir, exist_ok=True)
        calls.append((os.path.basename(out_dir), spec, trace))
        rate = {}
        for c in trace.changes:
            rate[c.at] = c.up_mbit
        n, switch, sweep = iteration_plan(spec)

        def secs(k: int, cfg: list[int] | None) -> float:
            mbit = rate[max(a for a in rate if a <= k)]
            good = cfg == [1 * MiB, 2 * MiB]
            return 0.1 if mbit == 2000 else (0.38 if good else 0.4)

        cfg = spec.get("config")
        its = []
        for k in range(n):
            if k in switch:
                cfg = [switch[k].partition_bytes, switch[k].credit_bytes]
            s = secs(k, cfg)
            its.append({"iteration": k, "seconds": s, "samples_per_s": 16 / s, "config": cfg})
        with open(os.path.join(out_dir, "decisions.jsonl"), "w"):
            pass
        if sweep:
            warm, per = int(spec["warmup"]), int(spec["iters_per_config"])
            with open(os.path.join(out_dir, "sweep.jsonl"), "w") as f:
                for first, c in sweep:
                    seg = its[first + warm:first + warm + per]
                    f.write(json.dumps({"config": [c.partition_bytes, c.credit_bytes],
                                        "samples_per_s": 16 * len(seg) / sum(x["seconds"] for x in seg)}) + "\n")
        return its
    return run


def test_a_suite_run_measures_grids_after_transitions_and_prints_the_headroom(tmp_path, monkeypatch):
    from autobyte.bench import _real
    from autobyte.testbed import _netns

    calls: list = []
    monkeypatch.setattr(_real, "_run", _fake_run(calls))
    monkeypatch.setattr(_netns, "require_root", lambda: None)
    sc = Scenario("step", "cnn", tuple(Phase(20, c) for c in (FAST, SLOW) * 2), "heldout", 8, "a step")
    monkeypatch.setitem(SUITES, "t", Suite("t", (sc,), partitions=(1 * MiB, 4 * MiB), credits=(2, 4), grid_iters=3,
                                           grid_warmup=2, window_iters=5, repeats=2))
    s = run_suite(SuitePlan("t", methods=["bytescheduler", "hindsight"]), str(tmp_path), log=lambda *_: None)
    grids = {name: trace for name, spec, trace in calls if spec["method"] == "sweep"}
    # FAST first starts the trace, then follows SLOW twice: measured after SLOW; SLOW after FAST
    assert sorted(grids) == ["cnn-bs8-2000mbit-after-200mbit", "cnn-bs8-200mbit-after-2000mbit"]
    assert [(c.at, c.up_mbit) for c in grids["cnn-bs8-2000mbit-after-200mbit"].changes][:4] == [
        (0, 200.0), (3, 2000.0), (6, 200.0), (8, 2000.0)]
    summary = s["scenarios"][0]
    assert summary["grid_after"] == {"2000mbit": "200mbit", "200mbit": "2000mbit"}
    assert summary["configs"]["hindsight"] == [1 * MiB, 2 * MiB]
    room = summary["headroom"]
    assert room["hindsight_vs_default"] > 1 and room["switch_headroom"] == pytest.approx(1.0)
    by = {c["condition"]: c for c in room["conditions"]}
    assert by["200mbit"]["gain"] == pytest.approx(0.4 / 0.38 - 1) and by["2000mbit"]["gain"] == pytest.approx(0.0)
    assert by["2000mbit"]["windows_needed"] is None  # no gain: never told apart (inf, written as null)
    md = (tmp_path / "suite_summary.md").read_text()
    assert "### What any tuner could win here, against the noise" in md
    assert "| step (heldout) | " in md and "| step | 200mbit (2 x 20, " in md and "5-iteration windows" in md
    # the same figures as benchmarks/headroom.py reads from the folder the suite wrote
    again = finite(analyse_runs(read_iterations(tmp_path / "step"), summary, window=5))
    assert again["switch_headroom"] == pytest.approx(room["switch_headroom"])
    assert json.loads((tmp_path / "suite_summary.json").read_text())["scenarios"][0]["headroom"]["tag"] == "heldout"


def test_the_summary_has_no_headroom_section_without_both_static_runs():
    sc = Scenario("s", "cnn", (Phase(30, FAST), Phase(30, SLOW)), "tune", 16)
    run = [{"iteration": i, "seconds": 0.1, "samples_per_s": 320.0, "config": [1, 1]} for i in range(60)]
    s = summarize_scenario(sc, {"bytescheduler": [run, run]})
    assert "headroom" not in s and "What any tuner could win" not in table_md(summarize_suite("x", 2, [s]))
    room = analyse_runs(iteration_rows(sc, {"bytescheduler": [run, run]}), s, window=10)
    assert room == {"skipped": "needs bytescheduler and hindsight runs"}
    with pytest.raises(ValueError, match="window must be an integer >= 2, but got window=1."):
        analyse_runs({}, {}, window=1)
    with pytest.raises(ValueError, match="settle must be an integer >= 0, but got settle=-2."):
        analyse_runs({}, {}, window=10, settle=-2)


def test_headroom_of_one_repeat_renders_unknowns_as_dashes():
    sc = Scenario("one", "cnn", (Phase(12, FAST), Phase(12, SLOW)), "tune", 8)
    runs = {"bytescheduler": [[{"iteration": i, "seconds": 0.1 if i < 12 else 0.4, "samples_per_s": 1.0} for i in range(24)]],
            "hindsight": [[{"iteration": i, "seconds": 0.1 if i < 12 else 0.3, "samples_per_s": 1.0} for i in range(24)]]}
    s = summarize_scenario(sc, runs)
    s["headroom"] = finite(analyse_runs(iteration_rows(sc, runs), s, window=5))
    assert s["headroom"]["sigma_run"] is None  # one repeat: no scatter between repeats
    md = table_md(summarize_suite("x", 1, [s]))
    section = md[md.index("### What any tuner could win here"):]
    assert "| one (tune) | 1.250 | +0.0% (-) | - | - |  |" in section  # hindsight is the faster in both: nothing to switch to
    assert "| one | 200mbit (1 x 12, " in section and "| +33.3% (-) | 0.0% | 0.0 | 2.0 |" in section
    assert not any(isinstance(v, float) and not math.isfinite(v) for c in s["headroom"]["conditions"] for v in c.values())
