"""benchmarks/switch_cost.py: switched over static speed per span, on runs written the way the suite writes them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

DEFAULT, TARGET = [4_000_000, 16_000_000], [1 << 20, 4 << 20]


def _run(path: Path, seconds: list[float], configs: list[list[int]]) -> None:
    path.mkdir(parents=True)
    rows = [{"iteration": i, "seconds": s, "config": c, "samples_per_s": 16 / s} for i, (s, c) in enumerate(zip(seconds, configs))]
    (path / "iterations.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_ratios_per_span_after_the_switch(load_benchmark, tmp_path):
    bench = load_benchmark("switch_cost")
    n = 100
    _run(tmp_path / "r0_tuner-static-1m-4x", [0.1] * n, [TARGET] * n)
    # switched at 12; 20% slower (time x1.25) for its first 8 iterations there, then as fast
    _run(tmp_path / "r0_tuner-switch-1m-4x", [0.2] * 12 + [0.125] * 8 + [0.1] * (n - 20), [DEFAULT] * 12 + [TARGET] * (n - 12))
    (row,) = bench.ratios(tmp_path)
    assert row["switch"] == 12
    assert row["12-19"] == pytest.approx(0.8) and row["20-39"] == pytest.approx(1.0) and row["80-99"] == pytest.approx(1.0)
    assert bench.main([str(tmp_path)]) == 0


def test_missing_runs_are_named(load_benchmark, tmp_path, capsys):
    bench = load_benchmark("switch_cost")
    with pytest.raises(SystemExit):
        bench.main([str(tmp_path)])
    assert "holds no r*_tuner-static-1m-4x run" in capsys.readouterr().err
    _run(tmp_path / "r0_tuner-static-1m-4x", [0.1] * 4, [TARGET] * 4)
    with pytest.raises(ValueError, match="r0_tuner-switch-1m-4x is missing"):
        bench.ratios(tmp_path)
    _run(tmp_path / "r0_tuner-switch-1m-4x", [0.1] * 4, [DEFAULT] * 4)
    with pytest.raises(ValueError, match="never ran <1 MiB, 4X>"):
        bench.ratios(tmp_path)
