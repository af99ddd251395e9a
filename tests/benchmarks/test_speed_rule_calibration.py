"""benchmarks/speed_rule_calibration.py: the speed rule's false alarms and changes seen, fixed and with noise_z."""

from __future__ import annotations

import pytest


def test_a_noisy_steady_run_and_a_real_change(load_benchmark, suite_iterations, tmp_path, capsys):
    bench = load_benchmark("speed_rule_calibration")
    # one run of one configuration: checks of 5 iterations from iteration 2 whose speeds alternate 12% apart (a noisy
    # host, under the fixed 15%), one check 20% off its neighbours, then the link halves for good
    levels = [1.0, 1.12] * 5 + [1.12 * 1.2, 1.12] + [2.0, 2.0]
    times = [0.1, 0.1] + [0.1 * x for x in levels for _ in range(5)]
    conds = ["a"] * (2 + 12 * 5) + ["b"] * 10
    suite_iterations(tmp_path, times, conds)
    (checks,) = bench.runs_of(tmp_path, 5).values()
    assert len(checks) == 14 and checks[-1][1] == "b"
    fa, clean, caught, across, _ = bench.replay(checks, 0.15, None)
    assert (fa, caught, across) == (2, 1, 1)  # the 20% check and the one after it; the halving
    fa, clean, caught, across, used = bench.replay(checks, 0.15, 3.0)
    assert (fa, caught, across) == (0, 1, 1) and max(used) > 0.2  # the threshold rose past 20%; the halving still seen
    assert bench.main([str(tmp_path), "--z", "3"]) == 0
    out = capsys.readouterr().out
    assert "| fixed 15% | 2 / " in out and "| noise_z 3 | 0 / " in out


def test_bad_arguments(load_benchmark, tmp_path):
    bench = load_benchmark("speed_rule_calibration")
    with pytest.raises(SystemExit, match="no \\*/iterations.csv"):
        bench.main([str(tmp_path)])


def test_the_movers_table_counts_checks_below_their_configurations_running_mean(load_benchmark, tmp_path, capsys):
    bench = load_benchmark("speed_rule_calibration")
    a, b = (1, 4), (2, 4)
    # a: 100, 100, 100, then 97 (3% below its mean) and 99; b: 100, then 90 in another condition (no mean there)
    checks = [(a, "x", 100.0), (a, "x", 100.0), (b, "x", 100.0), (a, "x", 100.0), (a, "x", 97.0), (b, "y", 90.0),
              (a, "x", 99.0)]
    below, compared = bench.below_running_mean(checks, [0.02, 0.05])
    assert compared == 4 and below == [1, 0]  # 97 < 98 (2% below 100); 99 is above 0.98 * mean(100, 100, 97)
    # only the last 3 count: after 50, 100, 100, 100 the mean is 100, not 87.5
    below, compared = bench.below_running_mean([(a, "x", s) for s in (50.0, 100.0, 100.0, 100.0, 97.0)], [0.02])
    assert (below, compared) == ([1], 4)


def test_main_prints_the_movers_table_unless_asked_not_to(load_benchmark, suite_iterations, tmp_path, capsys):
    bench = load_benchmark("speed_rule_calibration")
    # checks of 10 iterations from iteration 2: 1.0 s, 1.0 s, then one 4% slower (speed 4% below the mean)
    times = [0.1, 0.1] + [0.1] * 20 + [0.104] * 10
    suite_iterations(tmp_path, times, ["a"] * len(times))
    assert bench.main([str(tmp_path), "--check", "10", "--z", "3"]) == 0
    out = capsys.readouterr().out
    assert "| 2% | 1 / 2 (50.0%) |" in out and "| 5% | 0 / 2 (0.0%) |" in out
    assert bench.main([str(tmp_path), "--check", "10", "--z", "3", "--mover", ""]) == 0
    assert "mover's gain" not in capsys.readouterr().out
