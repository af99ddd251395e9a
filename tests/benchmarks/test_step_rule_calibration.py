"""benchmarks/step_rule_calibration.py: the step rule's false alarms and catches on runs written the way the suite writes them."""

from __future__ import annotations

import pytest


def test_counts_clean_and_mixed_groups(load_benchmark, suite_iterations, tmp_path, capsys):
    bench = load_benchmark("step_rule_calibration")
    # groups of 5 from iteration 2: 2-6 and 7-11 clean (one hiccup of 1.3x in the first), 12-16 across a 2x change at 14
    times = [0.1] * 2 + [0.1, 0.1, 0.1, 0.1, 0.13] + [0.1] * 5 + [0.1, 0.1, 0.2, 0.2, 0.2] + [0.2] * 5
    conds = ["a"] * 14 + ["b"] * 8
    suite_iterations(tmp_path, times, conds)
    clean, mixed = bench.groups(tmp_path, 5)
    assert len(clean) == 3 and len(mixed) == 1
    assert mixed[0] == pytest.approx(0.693, abs=1e-3) and max(clean) < 0.2
    assert bench.main([str(tmp_path), "--thresholds", "0.5"]) == 0
    out = capsys.readouterr().out
    assert "| 0.5 | 0 of 3 (0.0%) | 1 of 1 (100%) |" in out
    # every alignment: groups of 5 starting at 2..6; the change at 14 falls at each place of a group in turn
    # (at a group's first iteration the group is clean): 2+3, 1+4, 4+1 and 3+2 iterations before and after it
    clean, mixed = bench.groups(tmp_path, 5, offsets=5)
    assert len(mixed) == 4 and sum(v > 0.406 for v in mixed) == 2  # two iterations or more on each side: caught
    clean1, mixed1 = bench.groups(tmp_path, 5, min_side=1, offsets=5)
    assert sum(v > 0.406 for v in mixed1) == 4 and max(clean1) < 0.3  # one on a side is enough


def test_bad_arguments(load_benchmark, tmp_path, capsys):
    bench = load_benchmark("step_rule_calibration")
    with pytest.raises(SystemExit, match="no \\*/iterations.csv"):
        bench.main([str(tmp_path)])
    with pytest.raises(SystemExit):
        bench.main([str(tmp_path), "--check", "3"])
    assert "--check must be at least twice --min-side" in capsys.readouterr().err
