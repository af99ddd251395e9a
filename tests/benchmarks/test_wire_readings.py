"""benchmarks/wire_readings.py: its summary from known readings (no processes), and its arguments refused in one line."""

from __future__ import annotations

import argparse

import pytest


@pytest.fixture(scope="module")
def bench(load_benchmark):
    return load_benchmark("wire_readings")


def reading(it, speed, rate, busy, **kw):
    return {"iteration": it, "kind": "window", "speed": speed, "share": 1.0, "mixed": False, "changed": False, "rate": rate,
            "busy": busy, "compute": 0.1, **kw}


def test_the_summary_of_known_readings(bench):
    args = argparse.Namespace(model="cnn", batch=16, phase=20, rounds=1, rates=[10000.0, 200.0])
    runs = {
        # the first window after each change (iterations 1-10, 21-30) and a mixed check are left out
        "fp32": [[reading(10, 999.0, 9e9, 0.9), reading(20, 100.0, 3e8, 0.5), reading(30, 1.0, 1.0, 0.1),
                  reading(35, 50.0, 2e7, 0.9, mixed=True), reading(40, 40.0, 2.2e7, 0.95)]],
        "bf16": [[reading(20, 110.0, 2e8, 0.5), reading(40, 80.0, 2.1e7, 0.9)]],
    }
    md = bench.summarize(runs, args)
    assert "| 10000 | fp32 | 1 | 100.0 | 300.0 (300.0-300.0) | 0.50 (0.50-0.50) | 100.0 (100.0-100.0) |" in md
    assert "| 200 | fp32 | 1 | 40.0 | 22.0 (22.0-22.0) | 0.95 (0.95-0.95) |" in md
    assert "10000 Mbit/s: 1.100x, 200 Mbit/s: 2.000x" in md


@pytest.mark.parametrize("argv, message", [
    (["--rates", "300,x"], "--rates must be comma-separated numbers (Mbit/s), but got --rates='300,x'"),
    (["--rates", "300,-1"], "--rates must be positive, --phase at least 20 and --rounds at least 1, but got --rates=[300.0, -1.0]"),
    (["--phase", "10"], "--phase=10"),
    (["--rounds", "0"], "--rounds=0"),
])
def test_bad_arguments_are_refused_naming_the_flag(bench, capsys, argv, message):
    with pytest.raises(SystemExit):
        bench.main(argv)
    assert message in capsys.readouterr().err
