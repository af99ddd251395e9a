"""benchmarks/bench_wire_auto.py: its summary from known runs (no processes), and its arguments refused in one line."""

from __future__ import annotations

import argparse

import pytest


@pytest.fixture(scope="module")
def bench(load_benchmark):
    return load_benchmark("bench_wire_auto")


ARGS = argparse.Namespace(phase=4, phases=2, skip=1, fp32_rounds=1, high_mbit=10000.0, low_mbit=200.0, rounds=2, timeout_s=60.0,
                          out="x", rank=None, scenario="tuning", model="cnn", batch=16, methods="fp32,bf16,auto",
                          plan=[(10000.0, 4), (200.0, 4)])


def run(method, fast_s, slow_s, wires):
    """8 iterations: 4 compute-bound, then 4 link-bound; ``slow_s`` for link-bound iterations at fp32."""
    times = [fast_s if i < 4 else (slow_s if w == "fp32" else fast_s * 2) for i, w in enumerate(wires)]
    return {"method": method, "iter_s": times, "wires": wires, "decisions": [{"iteration": 5, "wire": "bf16", "reason": "r"}],
            "choices": [{"iteration": 6, "wire": "bf16", "gain": 1.5, "reason": "c"}]}


def test_the_summary_of_known_runs(bench):
    runs = {
        "auto": [run("auto", 0.1, 0.4, ["fp32"] * 5 + ["bf16"] * 3), run("auto", 0.1, 0.4, ["fp32"] * 5 + ["bf16"] * 3)],
        "bf16": [run("bf16", 0.1, 0.4, ["bf16"] * 8), run("bf16", 0.1, 0.4, ["bf16"] * 8)],
        "fp32": [run("fp32", 0.1, 0.4, ["fp32"] * 8)],
    }
    s = bench.summarize(runs, ARGS)
    # time after the first (untimed) iteration: auto 0.3 + 0.4 + 0.6 = 1.3 s, bf16 0.3 + 0.8 = 1.1 s, fp32 0.3 + 1.6 = 1.9 s
    assert s["seconds"]["auto"] == pytest.approx([1.3, 1.3]) and s["seconds"]["bf16"] == pytest.approx([1.1, 1.1])
    assert s["auto_vs_bf16"]["median"] == pytest.approx(1.1 / 1.3) and s["auto_vs_fp32"]["per_round"] == pytest.approx([1.9 / 1.3])
    assert s["fp32_share"]["auto"] == {"compute-bound": [1.0, 1.0], "link-bound": [0.25, 0.25]}
    assert s["fp32_share"]["bf16"]["link-bound"] == [0.0, 0.0] and s["fp32_share"]["fp32"]["compute-bound"] == [1.0]
    assert s["s_per_iteration"]["fp32"]["link-bound"] == [pytest.approx(0.4)]
    md = bench.markdown(s, "python benchmarks/bench_wire_auto.py --out x")
    assert "| auto vs static bf16 (speed) | 0.846x | 0.846-0.846x |" in md
    assert "| auto | 0.100 | " in md and "| 100%, 100% | 25%, 25% |" in md
    assert "- iteration 5: -> bf16: r" in md and "- iteration 6: chosen bf16: c" in md
    # static bf16 ran the link-bound phase 2x faster than static fp32 (0.2 against 0.4 s): measured link-bound; auto, one
    # iteration of four at fp32 there, has a median of 0.2 s
    assert [p["kind"] for p in s["phases"]] == ["compute-bound", "link-bound"] and s["kinds_told"].startswith("measured")
    assert s["phases"][1]["fp32_share"]["auto"] == [0.25, 0.25] and s["phases"][0]["s_per_iteration"]["bf16"] == [0.1, 0.1]
    assert "| 2 | 200 | 4 | link-bound | 0.200 | 0.200 | 0.400 | 25%, 25% |" in md


def test_a_phase_is_link_bound_only_where_bf16_measured_min_gain_faster(bench):
    """Three phases at 3 rates; the middle one's bf16 is 4% faster (below 5%: compute-bound), the last one's 6%."""
    args = argparse.Namespace(**{**vars(ARGS), "plan": [(8000.0, 4), (3000.0, 4), (400.0, 4)], "skip": 0})
    fp32 = {"iter_s": [0.1] * 4 + [0.104] * 4 + [0.106] * 4, "wires": ["fp32"] * 12}
    bf16 = {"iter_s": [0.1] * 12, "wires": ["bf16"] * 12}
    kinds, how = bench.phase_kinds({"fp32": [fp32], "bf16": [bf16]}, args)
    assert kinds == ["compute-bound", "compute-bound", "link-bound"] and how.startswith("measured")
    # without fp32 runs: the trace's highest rate is compute-bound, every other rate link-bound
    kinds, how = bench.phase_kinds({"bf16": [bf16]}, args)
    assert kinds == ["compute-bound", "link-bound", "link-bound"] and "8000 Mbit/s" in how


@pytest.mark.parametrize("scenario, model", [("heldout-transformer", "transformer"), ("heldout-mlp", "mlp"),
                                             ("heldout-transformer-15000", "transformer"),
                                             ("heldout-transformer-18000", "transformer"),
                                             ("heldout-transformer-16000", "transformer"),
                                             ("heldout-transformer-b16", "transformer")])
def test_the_heldout_scenarios_are_fixed(bench, scenario, model):
    args = argparse.Namespace(scenario=scenario, high_mbit=None, low_mbit=None, phase=None, phases=None, model=None, batch=None)
    plan = bench.plan_of(args, lambda msg: pytest.fail(msg))
    assert plan == [(float(r), n) for r, n in bench.HELDOUT[scenario]["phases"]] and args.model == model
    # phases of 20-150 iterations, at rates of neither the tuning trace nor the demo
    assert all(20 <= n <= 150 for _, n in plan) and {r for r, _ in plan}.isdisjoint({10000.0, 200.0, 500.0, 250.0})
    assert len({r for r, _ in plan}) >= 6  # conditions met for the first time: what a comparison costs


@pytest.mark.parametrize("argv, message", [
    ([], "--out is required"),
    (["--out", "x", "--phase", "0"], "--phase must be a positive integer, but got 0."),
    (["--out", "x", "--phase", "10", "--skip", "10"], "--skip must be at least 0 and below the first phase's length (10), but got 10."),
    (["--out", "x", "--scenario", "heldout-mlp", "--phase", "20", "--model", "cnn"],
     "--scenario heldout-mlp fixes its model and trace, but got --phase, --model."),
    (["--out", "x", "--scenario", "heldout"], "invalid choice: 'heldout'"),
    (["--out", "x", "--methods", "bf16,bf16"], "--methods must be distinct names from fp32, bf16, auto"),
    (["--out", "x", "--low-mbit", "-1"], "--low-mbit must be a positive rate in Mbit/s, but got -1.0."),
    (["--out", "x", "--batch", "0"], "--batch must be a positive integer, but got 0."),
    (["--out", "x", "--rounds", "1", "--fp32-rounds", "2"], "--fp32-rounds must be between 0 and --rounds (1), but got 2."),
])
def test_bad_arguments_are_refused_naming_the_flag(bench, capsys, argv, message):
    with pytest.raises(SystemExit):
        bench.main(argv)
    assert message in capsys.readouterr().err


#: the held-out scenarios written after the first, each after the ones before it had been read
LATER = ("heldout-mlp", "heldout-transformer-15000", "heldout-transformer-18000", "heldout-transformer-16000",
         "heldout-transformer-b16")
#: the rates read before them: the tuning trace's, the demo's, wire_readings.py's staircase and the first scenario's
READ = {40000.0, 20000.0, 10000.0, 3000.0, 1000.0, 500.0, 300.0, 250.0, 200.0}


def rates_of(bench, name: str) -> set[float]:
    return {r for r, _ in bench.HELDOUT[name]["phases"]}


@pytest.mark.parametrize("scenario", LATER)
def test_a_later_heldout_scenario_meets_none_of_the_rates_read_before_it(bench, scenario):
    assert set(bench.HELDOUT) == {"heldout-transformer", *LATER}  # a new scenario is named here too
    for other in bench.HELDOUT:  # every other held-out scenario's: those before it were read, those after it met none
        assert other == scenario or rates_of(bench, scenario).isdisjoint(rates_of(bench, other)), other
    assert rates_of(bench, scenario).isdisjoint(READ)


@pytest.mark.parametrize("scenario", ["heldout-transformer-18000", "heldout-transformer-16000"])
def test_the_link_gets_slower_and_faster_in_turn(bench, scenario):
    # a slower link follows a faster one, and a faster one a slower one, at least 4 times each
    plan = [r for r, _ in bench.HELDOUT[scenario]["phases"]]
    steps = list(zip(plan, plan[1:]))
    assert sum(b < a for a, b in steps) >= 4 and sum(b > a for a, b in steps) >= 4


def test_the_readings_scenario_drops_from_compute_bound_to_link_bound_three_times(bench):
    # where a first comparison is taken
    plan = [r for r, _ in bench.HELDOUT["heldout-transformer-16000"]["phases"]]
    assert sum(a >= 4000 and b <= 600 for a, b in zip(plan, plan[1:])) == 3


def test_the_slow_start_scenario_starts_on_its_slowest_link_at_batch_16(bench):
    # where the job's first comparison is taken
    plan = [r for r, _ in bench.HELDOUT["heldout-transformer-b16"]["phases"]]
    assert plan[0] == min(plan) and bench.HELDOUT["heldout-transformer-b16"]["batch"] == 16
