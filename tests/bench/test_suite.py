"""``autobyte bench --suite``: scenario and plan validation, the hindsight/oracle/do-no-harm maths, the table, a real run."""

from __future__ import annotations

import json
import os
import shutil
import time

import pytest

from autobyte.bench._scenarios import SUITES, Condition, Phase, Scenario
from autobyte.bench.emulation import Emulation
from autobyte.core import KiB, MiB
from autobyte.bench._suite import (
    BASE_METHODS, SuitePlan, best_static_in_hindsight, check_method, oracle_phases, predicted_seconds, IterationRow,
    read_iterations, write_scenario,
)
from autobyte.bench._suite_report import (
    HARM_SPAN, summarize_scenario, summarize_suite, table_md, throughput, trial_cost, trial_spans, worst_span_ratio, write_suite,
)
from autobyte.cli import main
from autobyte.core import Config
from autobyte.testbed import BandwidthTrace, CompetingFlow

HAVE_ROOT_AND_IP = os.geteuid() == 0 and shutil.which("ip") is not None and shutil.which("tc") is not None

A, B, C = Config(256 * 1024, 1024 * 1024), Config(4 << 20, 16 << 20), Config(1 << 20, 2 << 20)
FAST, SLOW = Condition(2000), Condition(200)


# -- validation ---------------------------------------------------------------------------------

@pytest.mark.parametrize("kw, match", [
    ({"mbit": 0}, "mbit must be a positive number of Mbit/s, but got mbit=0"),
    ({"mbit": 100, "rank1_up_mbit": -1}, "rank1_up_mbit must be a positive number of Mbit/s, but got rank1_up_mbit=-1"),
    ({"mbit": 100, "flow": "yes"}, "flow must be True or False, but got flow='yes'"),
    ({"mbit": 100, "slowdown": 0.5}, r"slowdown must be a number in \[1, 10\], but got slowdown=0.5"),
    ({"mbit": 100, "slowdown": float("nan")}, r"slowdown must be a number in \[1, 10\]"),
    ({"mbit": 100, "slowdown": 2.0, "slow_ranks": (1, 0)}, r"slow_ranks must be \(1,\), \(0,\) or \(0, 1\), but got slow_ranks=\(1, 0\)\."),
    ({"mbit": 100, "slow_ranks": [0, 1]}, r"slow_ranks must be \(1,\), \(0,\) or \(0, 1\), but got slow_ranks=\[0, 1\]\."),
])
def test_condition_rejects_bad_values(kw, match):
    with pytest.raises((ValueError, TypeError), match=match):
        Condition(**kw)


@pytest.mark.parametrize("kw, match", [
    ({"name": "a b"}, "name must be a non-empty string of letters, digits, '-' and '_', but got name='a b'"),
    ({"model": "resnet"}, r"model must be one of \('cnn', 'transformer', 'mlp'\) or 'emu:NAME' of a zoo model, but got model='resnet'"),
    ({"model": "emu:resnet"}, r"model must be one of .* or 'emu:NAME' with NAME one of \('alexnet', .*'resnet50'.*\), but got model='emu:resnet'"),
    ({"model": "emu:resnet50", "compute_scale": 0.5}, "compute_scale must be a number >= 1, but got compute_scale=0.5"),
    ({"model": "cnn", "compute_scale": 10}, r"compute_scale is for emulated models \('emu:NAME'\) only, but got compute_scale=10"),
    ({"tag": "test"}, r"tag must be one of \('tune', 'heldout'\), but got tag='test'"),
    ({"batch_size": 0}, "batch_size must be a positive integer, but got batch_size=0"),
    ({"phases": ()}, r"phases must be a non-empty list of Phase, but got phases=\(\)"),
    ({"arch": "ring"}, r"arch must be one of \('allreduce', 'ps'\), but got arch='ring'\."),
    ({"model": "cnn", "arch": "ps", "phases": (Phase(5, Condition(800, slowdown=2.0)),)},
     r"a slowed worker on the parameter server needs an emulated model .* but got model='cnn' with a slowdown\."),
    ({"model": "transformer", "arch": "ps"},
     r"model must be 'cnn' or 'emu:NAME' with arch='ps' \(the parameter-server runner's models\), but got model='transformer'\."),
])
def test_scenario_rejects_bad_values(kw, match):
    args = {"name": "s", "model": "cnn", "phases": (Phase(5, FAST),), **kw}
    with pytest.raises(ValueError, match=match):
        Scenario(**args)


def test_emulated_scenario_spec_and_names():
    sc = Scenario("e", "emu:resnet50", (Phase(5, FAST),), batch_size=64)
    assert sc.emulated and sc.compute_scale == 10.0 and sc.model_key == "emu-resnet50-x10-bs64"
    assert sc.spec() == {"model": "emu:resnet50", "batch_size": 64, "compute_scale": 10.0}
    assert sc.emulation() == Emulation("emu:resnet50", 10.0, 64)
    plain = Scenario("c", "cnn", (Phase(5, FAST),))
    assert not plain.emulated and plain.spec() == {"model": "cnn", "batch_size": 16} and plain.model_key == "cnn-bs16"
    fig6 = SUITES["paper"].scenarios[0]
    assert [p.condition.mbit for p in fig6.phases] == [1000.0, 300.0] * 2 and {p.iters for p in fig6.phases} == {20}


def test_parameter_server_scenarios_slow_every_worker_and_keep_their_own_grids():
    (fig7,) = SUITES["paper-ps"].scenarios
    assert fig7.arch == "ps" and fig7.emulated and fig7.iters == 60
    assert [(p.iters, p.condition.mbit, p.condition.slowdown) for p in fig7.phases] == [(20, 2000, 1.0), (20, 1000, 2.0), (20, 667, 3.0)]
    # jobs joining the cluster slow both workers: one slowdown entry per rank and phase
    assert fig7.slowdown() == [[20, 40, 0, 2.0], [20, 40, 1, 2.0], [40, 60, 0, 3.0], [40, 60, 1, 3.0]]
    assert [c.key for c in fig7.conditions()] == ["2000mbit", "1000mbit-slow2-r01", "667mbit-slow3-r01"]
    assert Condition(800, slowdown=2.0).key == "800mbit-slow2"  # one slowed worker: the key of earlier runs
    # the grids of a PS scenario are not an all-reduce run's of the same model and condition
    allreduce = Scenario("a", "emu:resnet50", fig7.phases, batch_size=64, compute_scale=10.0)
    assert fig7.model_key == allreduce.model_key + "-ps" == "emu-resnet50-x10-bs64-ps"
    assert max(c.credit_multiple for c in SUITES["paper-ps"].grid()) >= 16  # the PS grids' best were 16-32X


def test_phase_rejects_bad_values():
    with pytest.raises(ValueError, match="iters must be a positive integer, but got iters=0"):
        Phase(0, FAST)
    with pytest.raises(ValueError, match="condition must be a Condition, but got condition=200"):
        Phase(5, 200)  # type: ignore[arg-type]


@pytest.mark.parametrize("kw, match", [
    ({"suite": "nightly"}, "suite must be one of full, realistic, realistic-heldout, realistic-long, quick, readme, long, steady, smoke, paper, paper-ps, ps-smoke, emu-smoke, but got suite='nightly'"),
    ({"repeats": 0}, "repeats must be a positive integer, but got repeats=0"),
    ({"methods": ["ddp", "magic"]}, "methods must each be one of ddp, bytescheduler, bo, hindsight, oracle, autobyte or "
                                    "tuner:NAME with NAME one of .*, but got 'magic'"),
    ({"methods": ["tuner:nosuch"]}, "but got 'tuner:nosuch'"),
    ({"methods": []}, r"methods must be a non-empty list of methods, but got methods=\[\]"),
    ({"scenarios": ["cnn-step"]}, r"scenarios must be names of suite 'quick' \(quick-cnn-step, quick-mlp-flow\), but got 'cnn-step'"),
    ({"timeout_s": 0}, "timeout_s must be a positive number, but got timeout_s=0"),
])
def test_suite_plan_rejects_bad_values(kw, match):
    with pytest.raises(ValueError, match=match):
        SuitePlan(**{"suite": "quick", **kw})


def test_every_registered_tuner_is_a_method():
    from autobyte.core.tuners import tuner_names

    for name in tuner_names():
        assert check_method(f"tuner:{name}") == f"tuner:{name}"
    plan = SuitePlan("quick", methods=["ddp", "tuner:grid", "ddp"])
    assert plan.methods == ["ddp", "tuner:grid"] and plan.repeats == SUITES["quick"].repeats


def test_rounds_rotate_the_method_order():
    plan = SuitePlan("quick", methods=["ddp", "bytescheduler", "oracle"])
    assert [plan.order(r) for r in range(4)] == [
        ["ddp", "bytescheduler", "oracle"], ["bytescheduler", "oracle", "ddp"], ["oracle", "ddp", "bytescheduler"],
        ["ddp", "bytescheduler", "oracle"]]


# -- the suites as the issue asks for them ------------------------------------------------------

def test_full_suite_covers_the_asked_scenario_kinds():
    full = SUITES["full"]
    scs = full.scenarios
    assert len(scs) >= 6 and len({s.name for s in scs}) == len(scs)
    assert {s.model for s in scs} >= {"cnn", "transformer", "mlp"}
    held = [s for s in scs if s.tag == "heldout"]
    assert len(held) >= 2 and len(scs) - len(held) >= 2
    conds = [c for s in scs for c in s.conditions()]
    assert any(c.flow for c in conds) and any(c.slowdown > 1 for c in conds) and any(c.rank1_up_mbit for c in conds)
    assert any(len({c.mbit for c in s.conditions()}) >= 3 for s in scs)  # three-rate / walk
    lengths = {p.iters for s in scs for p in s.phases}
    assert min(lengths) >= 15 and max(lengths) <= 50 and max(lengths) - min(lengths) >= 20  # long and short
    assert set(SUITES["quick"].grid()) <= set(full.grid())


def test_steady_suite_holds_its_conditions_and_is_held_out():
    steady = SUITES["steady"]
    assert len(steady.scenarios) == 2 and steady.repeats == 3 and steady.grid() == SUITES["full"].grid()
    for s in steady.scenarios:
        assert s.tag == "heldout" and len(s.conditions()) == 1 and s.iters >= 150  # one condition, long enough to tune
        assert s.condition_at(0) == s.condition_at(s.iters - 1)
    assert {s.model for s in steady.scenarios} == {"cnn", "transformer"}


def test_long_suite_extends_a_tuning_and_a_held_out_scenario_of_the_full_suite():
    full = {s.name: s for s in SUITES["full"].scenarios}
    long = {s.name: s for s in SUITES["long"].scenarios}
    assert SUITES["long"].grid() == SUITES["full"].grid() and SUITES["long"].repeats == 2
    # cnn-step twice over, tagged as cnn-step (tune); the walk's first 5 phases and 10 more of the same walk (held out)
    step, walk = long["long-cnn-step"], long["heldout-long-mlp-walk"]
    assert step.phases == full["cnn-step"].phases * 2 and step.tag == "tune" and step.iters == 400
    assert walk.phases[:5] == full["heldout-mlp-walk"].phases and walk.tag == "heldout" and walk.iters == 525
    # the walk's four levels; the short walk never drew 300 Mbit/s, the long one does (twice)
    assert set(walk.conditions()) - set(full["heldout-mlp-walk"].conditions()) == {Condition(300)}
    assert all(a.condition != b.condition for a, b in zip(walk.phases, walk.phases[1:]))  # every phase a change


def test_paper_suite_judges_on_a_held_out_model_and_grid_reaches_small_partitions():
    paper = SUITES["paper"]
    tune = [s for s in paper.scenarios if s.tag == "tune"]
    held = [s for s in paper.scenarios if s.tag == "heldout"]
    assert tune and held and all(s.emulated for s in paper.scenarios)
    assert not {s.model for s in held} & {s.model for s in tune}  # a model the tuned-on scenario does not train
    conds = [c for s in held for c in s.conditions()]
    assert any(c.flow for c in conds) and any(c.slowdown > 1 for c in conds)  # Fig. 7: the link, then the compute shared
    parts = {c.partition_bytes for c in paper.grid()}
    assert min(parts) <= 256 * KiB and max(parts) >= 32 * MiB and len(paper.grid()) >= 18


def test_scenario_trace_rates_flows_asymmetry_and_slowdown():
    sc = Scenario("t", "cnn", (Phase(15, Condition(1000)), Phase(20, Condition(1000, flow=True)),
                                Phase(10, Condition(1000, rank1_up_mbit=250, slowdown=2.0)), Phase(5, Condition(300, flow=True))))
    assert sc.iters == 50 and sc.starts() == [0, 15, 35, 45]
    t = sc.trace()
    assert [(c.at, c.up_mbit, c.down_mbit, c.ranks) for c in t.changes] == [
        (0, 1000.0, 1000.0, None), (35, 1000.0, 1000.0, None), (35, 250.0, 1000.0, (1,)), (45, 300.0, 300.0, None)]
    assert [(f.at, f.until, f.src, f.dst, f.unit) for f in t.flows] == [(15, 35, 1, 0, "it"), (45, None, 1, 0, "it")]
    assert t.iteration_boundaries() == [15, 35, 45]
    assert sc.slowdown() == [[35, 45, 1, 2.0]]
    assert sc.condition_at(34).flow and not sc.condition_at(35).flow and sc.condition_at(99).mbit == 300
    assert [c.key for c in sc.conditions()] == ["1000mbit", "1000mbit-flow", "1000mbit-up1_250-slow2", "300mbit-flow"]


def test_flow_until_must_follow_at_and_round_trips():
    with pytest.raises(ValueError, match="until must be after at, but got at=10, until=10"):
        CompetingFlow(10, 60, 1, 0, unit="it", until=10)
    with pytest.raises(ValueError, match="whole iteration number"):
        CompetingFlow(10, 60, 1, 0, unit="it", until=12.5)
    t = BandwidthTrace.from_dict({"changes": [{"at": 0, "up_mbit": 100}],
                                  "flows": [{"at": 4, "unit": "it", "duration_s": 60, "src": 1, "dst": 0, "until": 9}]})
    assert t.flows[0].until == 9 and t.iteration_boundaries() == [4, 9]
    assert BandwidthTrace.from_dict(t.to_dict()) == t


# -- the maths on synthetic grids and runs ------------------------------------------------------

def _two_phase(iters_fast: int, iters_slow: int) -> Scenario:
    return Scenario("s", "cnn", (Phase(iters_fast, FAST), Phase(iters_slow, SLOW)), batch_size=16)


# samples/s per config: A wins at FAST, B at SLOW, C is second at both
GRIDS = {FAST: {A: 100.0, B: 50.0, C: 90.0}, SLOW: {A: 10.0, B: 20.0, C: 18.0}}


def test_hindsight_minimises_the_predicted_trace_time():
    sc = _two_phase(20, 20)
    # 32 samples per iteration: A 20*32/100 + 20*32/10 = 70.4 s, B 12.8 + 32 = 44.8 s, C 7.11 + 35.56 = 42.67 s
    assert predicted_seconds(sc, GRIDS, A) == pytest.approx(70.4)
    assert predicted_seconds(sc, GRIDS, B) == pytest.approx(44.8)
    assert predicted_seconds(sc, GRIDS, C) == pytest.approx(20 * 32 / 90 + 20 * 32 / 18)
    assert best_static_in_hindsight(sc, GRIDS) == C
    # all fast but 1 slow iteration: A (200*.32 + 3.2 = 67.2 s) beats C (71.1 + 1.78 = 72.9 s)
    assert best_static_in_hindsight(_two_phase(200, 1), GRIDS) == A
    assert best_static_in_hindsight(_two_phase(1, 200), GRIDS) == B


def test_hindsight_needs_every_condition_and_a_common_config():
    sc = _two_phase(5, 5)
    with pytest.raises(ValueError, match="grids must cover every condition of scenario 's', but '200mbit' has none"):
        best_static_in_hindsight(sc, {FAST: GRIDS[FAST]})
    with pytest.raises(ValueError, match="must share at least one config"):
        best_static_in_hindsight(sc, {FAST: {A: 1.0}, SLOW: {B: 1.0}})


def test_oracle_switches_to_each_phases_best():
    sc = Scenario("s", "cnn", (Phase(15, FAST), Phase(25, SLOW), Phase(15, FAST)))
    assert oracle_phases(sc, GRIDS) == [[0, [A.partition_bytes, A.credit_bytes]], [15, [B.partition_bytes, B.credit_bytes]],
                                        [40, [A.partition_bytes, A.credit_bytes]]]


def test_bo_result_is_the_frozen_config_not_the_last_window():
    from autobyte.bench._real import bo_result
    from autobyte.core import BYTESCHEDULER_DEFAULT

    probe = {"iteration": 7, "config": [1 << 20, 1 << 20], "reason": "BO step 1/15: random probe"}
    froze = {"iteration": 105, "config": [4 << 20, 2 << 20], "reason": "BO step 15/15: best point measured, frozen"}
    after = {"iteration": 112, "config": [4 << 20, 2 << 20], "observed_speed": 130.0}
    assert bo_result([probe, froze, after]) == (Config(4 << 20, 2 << 20), True)
    assert bo_result([probe]) == (Config(1 << 20, 1 << 20), False)
    assert bo_result([]) == (BYTESCHEDULER_DEFAULT, False)


def test_worst_span_finds_the_slowest_aligned_span():
    base = [0.1] * 200
    tuned = [0.1] * 200
    for i in range(60, 70):  # 10 iterations twice as slow: a 50-span holding them is 60/50 = 1.2x slower
        tuned[i] = 0.2
    for i in range(150, 200):  # and a faster tail, which must not hide the slow span
        tuned[i] = 0.05
    ratio, at = worst_span_ratio(tuned, base)
    assert ratio == pytest.approx(1.2) and 20 <= at <= 60
    assert worst_span_ratio(base, base)[0] == pytest.approx(1.0)
    # shorter than the span: the whole common length
    assert worst_span_ratio([0.3, 0.3], [0.1, 0.2, 5.0], span=50) == (pytest.approx(2.0), 0)
    with pytest.raises(ValueError, match="runs must be non-empty and span a positive integer"):
        worst_span_ratio([], [0.1])
    with pytest.raises(ValueError, match="span=0"):
        worst_span_ratio([0.1], [0.1], span=0)


def _run(sec: float, n: int = 60, slow_from: int | None = None) -> list[dict]:
    return [{"iteration": i, "seconds": sec * (2 if slow_from is not None and i >= slow_from else 1), "samples_per_s": 1.0}
            for i in range(n)]


def test_scenario_summary_medians_ratios_and_harm():
    sc = Scenario("s", "cnn", (Phase(30, FAST), Phase(30, SLOW)), batch_size=16)
    runs = {
        "bytescheduler": [_run(0.1), _run(0.1), _run(0.2)],  # 320, 320, 160 samples/s -> median 320
        "hindsight": [_run(0.08), _run(0.08), _run(0.08)],  # 400
        "autobyte": [_run(0.1, slow_from=55), _run(0.05), _run(0.05)],
    }
    meta = {"autobyte": [{"tuner_cpu_s": 0.1, "wall_s": 10.0}, {"tuner_cpu_s": 0.3, "wall_s": 10.0}, {}]}
    s = summarize_scenario(sc, runs, meta)
    bs = s["methods"]["bytescheduler"]
    assert bs["median"] == pytest.approx(320) and bs["min"] == pytest.approx(160) and bs["max"] == pytest.approx(320)
    assert s["methods"]["hindsight"]["vs"]["bytescheduler"] == pytest.approx(1.25)
    assert s["methods"]["bytescheduler"]["vs"]["hindsight"] == pytest.approx(0.8)
    ab = s["methods"]["autobyte"]
    # repeat 0: iterations 10-59, 5 of them at 0.2 s: 5.5 s / 5 s = 1.1 against its own round's default run
    assert ab["worst_span"]["per_repeat"][0] == {"ratio": pytest.approx(1.1), "first_iteration": 10}
    assert ab["worst_span"]["per_repeat"][2]["ratio"] == pytest.approx(0.25)  # round 2's default was slow
    assert ab["worst_span"]["median"] == pytest.approx(0.5) and ab["worst_span"]["max"] == pytest.approx(1.1)
    assert ab["worst_span"]["span"] == HARM_SPAN
    assert ab["tuner_cpu_share"] == pytest.approx(0.02)
    assert "tuner_cpu_share" not in bs
    # the default's own repeats against each other: 0 vs 1 alike, 1 vs 2 twice as fast, 2 vs 0 twice as slow
    assert bs["worst_span"]["self"] is True and [w["ratio"] for w in bs["worst_span"]["per_repeat"]] == [
        pytest.approx(1.0), pytest.approx(0.5), pytest.approx(2.0)]
    assert bs["worst_span"]["median"] == pytest.approx(1.0) and bs["worst_span"]["max"] == pytest.approx(2.0)
    one = summarize_scenario(sc, {"bytescheduler": [_run(0.1)], "autobyte": [_run(0.1)]})
    assert "worst_span" not in one["methods"]["bytescheduler"]  # one repeat: nothing to compare it with
    assert throughput(_run(0.1), 16) == pytest.approx(320)


def _cfg_run(secs_cfgs: list[tuple[float, list[int]]]) -> list[dict]:
    return [{"iteration": i, "seconds": s, "samples_per_s": 1.0, "config": c} for i, (s, c) in enumerate(secs_cfgs)]


def test_trials_are_the_iterations_after_an_explore_decision_and_cost_time_against_the_start_run():
    A, B, C = [4, 16], [1, 4], [16, 16]
    # 10 iterations at A, a trial of B (2 iterations, 0.2 s against 0.1), A again, a move to C (not a trial),
    # a second trial of B decided at iteration 15 that never ran (the run ended at C)
    its = _cfg_run([(0.1, A)] * 5 + [(0.2, B)] * 2 + [(0.1, A)] * 3 + [(0.3, C)] * 10)
    rows = [{"iteration": 4, "config": B, "reason": "explore: <1 MiB, 4X> predicted ..."},
            {"iteration": 6, "config": A, "reason": "rollback: ..."},
            {"iteration": 9, "config": C, "reason": "measured best: ..."},
            {"iteration": 15, "config": B, "reason": "explore: ..."},
            {"iteration": 19, "config": None, "reason": "explore: a row without a config"}]
    assert trial_spans(its, rows) == [(5, 7)]
    # an explore decision held back (the next row comes before any iteration at its configuration): no trial
    assert trial_spans(its, [{"iteration": 0, "config": B, "reason": "explore: ..."}, {"iteration": 2, "config": A, "reason": "guard: ..."}]) == []
    # a window of another candidate of the search's race is a trial too; its winner's move is not
    def searched(reason: str) -> list[dict]:
        return [{**r, "reason": reason} if str(r["reason"]).startswith("explore") else r for r in rows]

    assert trial_spans(its, searched("search: measuring <...> (1 of 3 windows)")) == [(5, 7)]
    assert trial_spans(its, searched("search: <...> fastest at 10.0 samples/s")) == []
    start = _cfg_run([(0.1, A)] * 20)  # the default's run: 2 s in all
    t = trial_cost(its, rows, start)
    assert t["trials"] == 1 and t["iterations"] == 2 and t["share"] == pytest.approx(0.1)
    assert t["vs_start"] == pytest.approx(0.5) and t["cost"] == pytest.approx(0.2 / 2.0)  # 0.4 s against 0.2 s
    none = trial_cost(its, rows[1:3], start)
    assert none == {"trials": 0, "iterations": 0, "share": 0.0, "vs_start": None, "cost": 0.0}
    # a trial faster than the start: a negative cost
    fast = trial_cost(_cfg_run([(0.1, A)] * 5 + [(0.05, B)] * 5), rows[:1], start[:10])
    assert fast["vs_start"] == pytest.approx(2.0) and fast["cost"] == pytest.approx(-0.25)
    # in the scenario summary (per repeat, medians) and its table
    sc = Scenario("s", "cnn", (Phase(20, FAST),), batch_size=16)
    s = summarize_scenario(sc, {"bytescheduler": [start, start], "autobyte": [its, its]}, decisions={"autobyte": [rows, rows[1:3]]})
    tr = s["methods"]["autobyte"]["trials"]
    assert [p["trials"] for p in tr["per_repeat"]] == [1, 0] and tr["trials"] == pytest.approx(0.5)
    assert tr["vs_start"] == pytest.approx(0.5) and tr["cost"] == pytest.approx(0.05)
    assert "trials" not in s["methods"]["bytescheduler"]
    md = table_md(summarize_suite("x", 2, [s]))
    assert ("- s, autobyte: 0.5 trials, 5.0% of iterations, at 0.500x the default's speed over them, "
            "cost +5.0% of the run's time") in md
    assert "Trials" not in table_md(summarize_suite("x", 2, [summarize_scenario(sc, {"bytescheduler": [start], "autobyte": [its]})]))


def test_suite_trials_script_reads_a_finished_suite(tmp_path, load_benchmark, capsys):
    A, B = [4, 16], [1, 4]
    start = _cfg_run([(0.1, A)] * 20)
    tuned = _cfg_run([(0.1, A)] * 5 + [(0.2, B)] * 2 + [(0.1, A)] * 13)
    rows = [{"iteration": 4, "config": B, "reason": "explore: ..."}, {"iteration": 6, "config": A, "reason": "rollback: ..."}]
    for name, its, ds in (("r0_bytescheduler", start, []), ("r0_autobyte", tuned, rows), ("r0_hindsight", start, [])):
        d = tmp_path / "cnn-step" / name
        d.mkdir(parents=True)
        (d / "iterations.jsonl").write_text("".join(json.dumps(x) + "\n" for x in its))
        (d / "decisions.jsonl").write_text("".join(json.dumps(x) + "\n" for x in ds))
    (tmp_path / "grids").mkdir()
    script = load_benchmark("suite_trials")
    script.main([str(tmp_path)])
    out = capsys.readouterr().out
    assert "| cnn-step | autobyte | 1 | 10.0% | 0.500 (0.500-0.500) | +10.0% (+10.0 to +10.0) |" in out
    assert "hindsight" not in out and "autobyte: 1 trials in 1 runs" in out
    with pytest.raises(SystemExit, match="DIR must be a suite's --out folder"):
        script.main([str(tmp_path / "nowhere")])


def test_iterations_csv_reads_back_what_the_suite_wrote(tmp_path):
    sc = Scenario("s", "cnn", (Phase(2, FAST), Phase(2, SLOW)), batch_size=16)
    runs = {"ddp": [[{"iteration": i, "seconds": 0.1, "samples_per_s": 320.0} for i in range(4)]],
            "autobyte": [_cfg_run([(0.1, [4, 16]), (0.2, [1, 4]), (0.1, [4, 16]), (0.25, [4, 16])]),
                         _cfg_run([(0.1, [4, 16])] * 4)]}
    write_scenario(sc, runs, {}, {}, str(tmp_path / "s"))
    got = read_iterations(tmp_path / "s")  # the folder, as write_scenario leaves it, or the file itself
    assert got == read_iterations(tmp_path / "s" / "iterations.csv")
    assert sorted(got) == [("autobyte", 0), ("autobyte", 1), ("ddp", 0)]
    first = got[("autobyte", 0)]
    assert [r.iteration for r in first] == [0, 1, 2, 3] and [r.seconds for r in first] == [0.1, 0.2, 0.1, 0.25]
    assert first[1] == IterationRow("autobyte", 0, 1, FAST.key, 0.2, 1.0, Config(1, 4))
    assert [r.condition for r in first] == [FAST.key, FAST.key, SLOW.key, SLOW.key]  # from the scenario's trace
    assert all(r.config is None for r in got[("ddp", 0)])  # DDP has no scheduler configuration


def test_iterations_csv_that_is_not_a_suites_is_refused_with_the_file_and_line(tmp_path):
    bad = tmp_path / "iterations.csv"
    bad.write_text("method,iteration,seconds\nddp,0,0.1\n")  # the single bench's columns, not the suite's
    with pytest.raises(ValueError, match=r"iterations.csv: not a suite's iterations.csv: columns \['repeat', 'condition'"):
        read_iterations(bad)
    bad.write_text("method,repeat,iteration,condition,seconds,samples_per_s,partition_bytes,credit_bytes\n"
                   "ddp,0,0,2000mbit,0.1,320,,\nddp,0,1,2000mbit,fast,320,,\n")
    with pytest.raises(ValueError, match=r"iterations.csv, line 3: could not convert string to float: 'fast'"):
        read_iterations(bad)
    with pytest.raises(FileNotFoundError):
        read_iterations(tmp_path / "nowhere")


def test_suite_summary_geomeans_per_tag_and_table(tmp_path):
    def scen(name: str, tag: str, hs: float, ab: float) -> dict:
        sc = Scenario(name, "cnn", (Phase(50, FAST),), tag=tag, batch_size=16)
        return summarize_scenario(sc, {"hindsight": [_run(hs)] * 2, "autobyte": [_run(ab)] * 2, "bytescheduler": [_run(hs)] * 2})

    scen_rows = [scen("t1", "tune", 0.1, 0.05), scen("t2", "tune", 0.1, 0.2), scen("h1", "heldout", 0.1, 0.125)]
    s = summarize_suite("x", 2, scen_rows)
    assert s["geomean"]["tune"]["n_scenarios"] == 2
    assert s["geomean"]["tune"]["methods"]["autobyte"]["hindsight"] == pytest.approx(1.0)  # sqrt(2 * 0.5)
    assert s["geomean"]["heldout"]["methods"]["autobyte"]["hindsight"] == pytest.approx(0.8)
    assert s["geomean"]["heldout"]["methods"]["autobyte"]["oracle"] is None  # no oracle run: no ratio, not 0
    md = table_md(s)
    assert md.index("### Tuning scenarios") < md.index("| t2 | autobyte |") < md.index("### Held-out scenarios")
    assert "| h1 | autobyte | 256.0 | 256.0-256.0 | 0.800 |  | 0.800 |  |  | 1.250 (max 1.250) |  |" in md  # 25% slower than its start
    assert "| h1 | bytescheduler | 320.0 | 320.0-320.0 | 1.000 |  | 1.000 |  |  | 1.000 (max 1.000) |  |" in md  # against itself
    assert "the noise floor of that figure" in md
    only_default = [dict(scen_rows[0], configs={"bytescheduler": [4000000, 16000000]})]
    assert "Configs run" not in table_md(summarize_suite("x", 2, only_default))  # nothing else ran: no empty line
    write_suite(s, str(tmp_path))
    assert json.loads((tmp_path / "suite_summary.json").read_text())["geomean"]["heldout"]["n_scenarios"] == 1
    assert (tmp_path / "suite_summary.md").read_text() == md
    scen_rows[2]["configs"] = {"hindsight": [1 << 20, 2 << 20], "oracle_phases": [[0, [1 << 20, 4 << 20]], [15, [65536, 65536]]],
                               "bo": [3 << 19, 3 << 19]}
    scen_rows[2]["hindsight_predicted_samples_per_s"] = 300.0
    assert ("- h1: hindsight <1 MiB, 2X> (grids predicted 300.0 samples/s, measured 320.0); "
            "oracle it 0: <1 MiB, 4X>, it 15: <0.0625 MiB, 1X>; BO <1.5 MiB, 1X>") in table_md(summarize_suite("x", 2, scen_rows))


# -- the command line ---------------------------------------------------------------------------

@pytest.mark.parametrize("argv, message", [
    (["bench", "--suite", "nightly"], "--suite must be one of full, realistic, realistic-heldout, realistic-long, quick, readme, long, steady, smoke, paper, paper-ps, ps-smoke, emu-smoke, but got --suite='nightly'."),
    (["bench", "--suite", "quick", "--methods", "ddp,tuner:nosuch"], "or tuner:NAME with NAME one of autobyte, bo, grid, static, but got 'tuner:nosuch'"),
    (["bench", "--suite", "quick", "--methods", "ddp,magic"], "('magic' unknown). With --suite, also hindsight"),
    (["bench", "--suite", "quick", "--import", "no_such_module_x"],
     "--import='no_such_module_x': cannot import tuners from 'no_such_module_x' (ModuleNotFoundError"),
    (["bench", "--suite", "quick", "--import", "/no/such/tuners.py"], "cannot import tuners from '/no/such/tuners.py' (FileNotFoundError"),
    (["bench", "--import", "x.py"], "--import goes with --suite NAME, but got --import='x.py' without --suite."),
    (["bench", "--suite", "quick", "--scenarios", "cnn-step"], "--scenarios must be names of suite 'quick'"),
    (["bench", "--suite", "quick", "--scenarios", ","], "--scenarios must be a non-empty comma-separated list, but got --scenarios=','"),
    (["bench", "--suite", "quick", "--repeats", "0"], "--repeats must be an integer in [1, 100], but got --repeats=0."),
    (["bench", "--suite", "quick", "--iters", "5"], "--iters sets the single-trace bench, not a suite"),
    (["bench", "--repeats", "3"], "--repeats goes with --suite NAME, but got --repeats=3 without --suite."),
    (["bench", "--methods", "tuner:autobyte"], "--methods tuner:autobyte needs --suite NAME"),
])
def test_cli_rejects_bad_suite_arguments(argv, message, capsys):
    t0 = time.monotonic()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("autobyte bench: error: ") and message in err[0], err
    assert time.monotonic() - t0 < 10


def test_suite_methods_list_every_base_method():
    assert BASE_METHODS == ("ddp", "bytescheduler", "bo", "hindsight", "oracle", "autobyte")


# -- a real run through the testbed -------------------------------------------------------------

@pytest.mark.integration
@pytest.mark.root
@pytest.mark.skipif(not HAVE_ROOT_AND_IP, reason="needs root and iproute2 (ip, tc) for network namespaces")
def test_smoke_suite_runs_for_real(tmp_path, monkeypatch):
    from autobyte.bench._suite import run_suite
    from autobyte.core import tuners

    monkeypatch.setattr(tuners, "_REGISTRY", dict(tuners._REGISTRY))  # the plugin's name must not leak into later tests

    t0 = time.monotonic()
    # a tuner registered by a file of the user's (--import): the bench and both ranks import it
    plugin = tmp_path / "my_tuners.py"
    plugin.write_text("from autobyte.core import register_tuner\nfrom autobyte.core.tuners import GridTuner\n"
                      "register_tuner('smoke-grid', GridTuner)\n")
    plan = SuitePlan("smoke", methods=["bytescheduler", "oracle", "tuner:smoke-grid"], timeout_s=120, imports=[str(plugin)])
    s = run_suite(plan, str(tmp_path / "out"), log=lambda *_: None)
    tmp_path = tmp_path / "out"
    took = time.monotonic() - t0
    sc = s["scenarios"][0]
    assert sc["name"] == "smoke" and set(sc["methods"]) == {"bytescheduler", "oracle", "tuner:smoke-grid"}
    for m, row in sc["methods"].items():
        assert len(row["samples_per_s"]) == 1 and row["median"] > 0, m
    assert sc["methods"]["oracle"]["vs"]["bytescheduler"] > 0
    assert sc["methods"]["tuner:smoke-grid"]["worst_span"]["per_repeat"][0]["ratio"] > 0
    # two conditions: two grids of the suite's 2 configs; the oracle's phases and hindsight come from them
    assert sorted(sc["grids"]) == ["2000mbit", "300mbit"] and all(len(g) == 2 for g in sc["grids"].values())
    best = [max(sc["grids"][k], key=sc["grids"][k].get) for k in ("2000mbit", "300mbit")]
    assert sc["configs"]["oracle_phases"] == [[0, [int(x) for x in best[0].split(",")]], [4, [int(x) for x in best[1].split(",")]]]
    assert f"{sc['configs']['hindsight'][0]},{sc['configs']['hindsight'][1]}" in sc["grids"]["2000mbit"]
    # the oracle ran its phases' configs, switched at the phase boundary, and the rate changed there
    d = tmp_path / "smoke" / "r0_oracle"
    its = [json.loads(line) for line in (d / "iterations.jsonl").read_text().splitlines()]
    assert len(its) == 8 and [r["config"] for r in its][4:] == [sc["configs"]["oracle_phases"][1][1]] * 4
    events = [json.loads(line) for line in (d / "events.jsonl").read_text().splitlines()]
    assert [(e["iteration"], e["up_mbit"]) for e in events if e["event"] == "rate"] == [(4, 300.0)]
    # 300 Mbit/s follows 2000 in the trace: its grid warms each config up at 2000 and measures it at 300
    assert sc["grid_after"] == {"2000mbit": None, "300mbit": "2000mbit"}
    grid_events = [json.loads(line) for line in (tmp_path / "grids" / "cnn-bs8-300mbit-after-2000mbit" / "events.jsonl").read_text().splitlines()]
    assert [(e["iteration"], e["up_mbit"]) for e in grid_events if e["event"] == "rate"] == [(2, 300.0), (4, 2000.0), (5, 300.0)]
    assert len((tmp_path / "smoke" / "iterations.csv").read_text().splitlines()) == 1 + 3 * 8
    assert (tmp_path / "suite_summary.md").read_text().count("| smoke |") == 3
    assert (tmp_path / "smoke" / "throughput.png").stat().st_size > 1000
    print(f"smoke suite: {took:.0f} s")  # 5 testbed runs of ~18 s each on an idle machine


def test_compute_seconds_is_a_positive_local_measurement():
    from autobyte.bench.allreduce_ranks import compute_seconds

    assert 0 < compute_seconds("cnn", 2) < 30


@pytest.mark.integration
@pytest.mark.root
@pytest.mark.skipif(not HAVE_ROOT_AND_IP, reason="needs root and iproute2 (ip, tc) for network namespaces")
def test_slowed_rank_sleeps_its_factor_of_the_given_compute_time(tmp_path):
    from autobyte.bench._real import _run

    plan = SuitePlan("smoke", timeout_s=120)
    spec = {"method": "static", "config": [1 << 20, 4 << 20], "iters": 6, "model": "cnn", "batch_size": 4,
            "slowdown": [[2, 4, 1, 3.0]], "compute_s": 0.5}
    its = _run(spec, "const:2000", str(tmp_path), plan, lambda *_: None)
    secs = [r["seconds"] for r in its]
    # rank 1 sleeps (3 - 1) x 0.5 s in iterations 2 and 3; rank 0 waits for it in the all-reduce. Rank 0's
    # iteration boundaries may shift by part of an unslowed iteration against rank 1's, never the sleeps' sum
    assert sum(secs[2:5]) >= 1.95 and min(secs[2:4]) >= 0.8, secs
    assert sorted(secs[:2] + secs[4:])[1] < 0.9, secs
    assert json.loads((tmp_path / "rank1.json").read_text())["compute_s"] == 0.5


@pytest.mark.integration
@pytest.mark.root
@pytest.mark.skipif(not HAVE_ROOT_AND_IP, reason="needs root and iproute2 (ip, tc) for network namespaces")
def test_emulated_smoke_suite_runs_for_real(tmp_path):
    """An emulated zoo model (real tensor sizes, slept compute) through DDP and the scheduled engine on the testbed."""
    from autobyte.bench._suite import run_suite

    plan = SuitePlan("emu-smoke", methods=["ddp", "bytescheduler"], timeout_s=120)
    s = run_suite(plan, str(tmp_path), log=lambda *_: None)
    sc = s["scenarios"][0]
    assert sc["model"] == "emu:densenet121" and sc["compute_scale"] == 2.0 and sc["batch_size"] == 32
    emu = Emulation("emu:densenet121", 2.0, 32)
    for m in ("ddp", "bytescheduler"):
        d = tmp_path / "emu-smoke" / f"r0_{m}"
        metas = [json.loads((d / f"rank{r}.json").read_text()) for r in (0, 1)]
        assert all(mt["emulation"] == emu.to_dict() and mt["batch_size"] == 32 for mt in metas)
        its = [json.loads(line) for line in (d / "iterations.jsonl").read_text().splitlines()]
        assert len(its) == 6 and all(r["samples_per_s"] == pytest.approx(64 / r["seconds"]) for r in its)
        # every iteration takes at least the emulated compute; in the last phase rank 1 sleeps twice as long
        assert all(r["seconds"] >= 0.97 * emu.compute_s for r in its[1:3]), its
        assert all(r["seconds"] >= 0.97 * 2 * emu.compute_s for r in its[4:]), its
        assert sc["methods"][m]["median"] > 0


@pytest.mark.integration
@pytest.mark.root
@pytest.mark.skipif(not HAVE_ROOT_AND_IP, reason="needs root and iproute2 (ip, tc) for network namespaces")
def test_parameter_server_smoke_suite_runs_for_real(tmp_path):
    """A suite scenario on MXNet dist_sync: plain dist_sync as the baseline, the scheduled KVStore engine, both workers slowed."""
    pytest.importorskip("mxnet")
    from autobyte.bench._suite import run_suite

    plan = SuitePlan("ps-smoke", methods=["ddp", "bytescheduler"], timeout_s=180)
    s = run_suite(plan, str(tmp_path), log=lambda *_: None)
    sc = s["scenarios"][0]
    assert sc["arch"] == "ps" and sc["baseline"] == "dist_sync" and sc["model"] == "emu:densenet121"
    emu = Emulation("emu:densenet121", 2.0, 32)
    for m, method in (("ddp", "dist_sync"), ("bytescheduler", "static")):
        d = tmp_path / "ps-smoke" / f"r0_{m}"
        metas = [json.loads((d / f"rank{r}.json").read_text()) for r in (0, 1)]
        assert all(mt["method"] == method for mt in metas), metas  # the PS runner ran it: dist_sync, not DDP
        its = [json.loads(line) for line in (d / "iterations.jsonl").read_text().splitlines()]
        assert len(its) == 6, its
        # both workers compute 2x slower in the second phase: each iteration takes at least twice the emulated compute
        assert all(r["seconds"] >= 0.97 * 2 * emu.compute_s for r in its[3:5]), its
        assert sc["methods"][m]["median"] > 0
    md = table_md(s)
    assert "| ps-smoke | dist_sync |" in md and "| dist_sync | " in md.split("Geometric mean")[1]  # the geomean row too


def test_readme_suite_is_the_readme_benchs_scenario():
    # `autobyte bench --low-mbit 500` (the README's scenario) as a suite, so tuner variants run beside it
    from autobyte.bench._real import BenchPlan

    (sc,) = SUITES["readme"].scenarios
    plan = BenchPlan(low_mbit=500)
    assert sc.model == "cnn" and sc.batch_size == plan.batch_size and sc.iters == plan.iters
    assert [sc.condition_at(i).mbit for i in range(plan.iters)] == [plan.rate_at(i) for i in range(plan.iters)]
    assert SUITES["readme"].grid() == plan.grid_configs() and SUITES["readme"].window_iters == plan.window_iters
    assert SUITES["readme"].repeats == 3
