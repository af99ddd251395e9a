"""benchmarks/detector_replay.py: both rules of the detector on runs written the way the suite writes them."""

from __future__ import annotations

import pytest


def test_a_lone_step_is_a_false_change_without_confirm_and_none_with_it(load_benchmark, suite_iterations, tmp_path, capsys):
    bench = load_benchmark("detector_replay")
    # checks of 5 from iteration 2: 2-6, 7-11 steady; 12-16 steps 1.6x inside (a hiccup of 2 iterations: the check
    # 24% slower, within twice the speed rule's threshold); 17-26 back at the level; then at 27 the link halves speed
    # for good (check 27-31 wholly in the new condition)
    times = [0.1] * 12 + [0.1, 0.1, 0.1, 0.16, 0.16] + [0.1] * 10 + [0.2] * 15
    conds = ["a"] * 27 + ["b"] * 15
    suite_iterations(tmp_path, times, conds)
    from autobyte.bench._suite import read_iterations

    rows = read_iterations(tmp_path / "sc")[("bytescheduler", 0)]
    off = bench.replay(rows, None)
    on = bench.replay(rows, 2.0)
    assert off["clean"] == on["clean"] == 7 and off["across"] == on["across"] == 1
    assert off["false"] == 1 and on["false"] == 0  # the step at 12-16, not confirmed by 17-21
    assert off["seen"] == 1 and on["seen"] == 1  # the halving: at once (beyond twice the threshold)
    assert bench.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "(1 runs) | off | 1 / 7 | 1 / 1 |" in out and "| 2.0 | 0 / 7 | 1 / 1 |" in out


def test_no_runs(load_benchmark, tmp_path):
    bench = load_benchmark("detector_replay")
    with pytest.raises(SystemExit, match="no \\*/iterations.csv"):
        bench.main([str(tmp_path)])
