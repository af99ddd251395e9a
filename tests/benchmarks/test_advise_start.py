"""benchmarks/advise_start.py: advise's pick against the default, read off a suite run's grids."""

from __future__ import annotations

import json
import math

import pytest

from autobyte.bench._scenarios import SUITES
from autobyte.core.space import Config, MiB


def _suite_run(tmp_path, grids):
    """A suite run's folder as the bench writes it, for the one-scenario suite ``emu-smoke``, with these grids."""
    sc = SUITES["emu-smoke"].scenarios[0]
    (tmp_path / "suite_summary.json").write_text(json.dumps({"suite": "emu-smoke"}))
    (tmp_path / sc.name).mkdir(exist_ok=True)
    (tmp_path / sc.name / "summary.json").write_text(json.dumps({"grids": grids}))
    return sc


def test_the_start_and_the_trace_are_read_off_the_grids_at_advises_real_pick(tmp_path, load_benchmark):
    mod = load_benchmark("advise_start")
    sc = SUITES["emu-smoke"].scenarios[0]
    c0, c1 = (p.condition.key for p in sc.phases)
    small, big = Config(MiB, 2 * MiB), Config(8 * MiB, 16 * MiB)
    grids = {c0: {"1048576,2097152": 120.0, "8388608,16777216": 100.0},
             c1: {"1048576,2097152": 50.0, "8388608,16777216": 60.0}}
    _suite_run(tmp_path, grids)
    pick = mod.advised(sc, "testbed")  # the simulator's answer for the zoo model (no profiling)
    [row] = mod.compare(str(tmp_path))
    at = mod.nearest({small: 1.0, big: 1.0}, pick)
    speed = {small: (120.0, 50.0), big: (100.0, 60.0)}
    assert row["default_in_grid"] == str(big)  # <4 MB, 4X> is nearest <8 MiB, 2X> in log space here
    assert row["advised"] == str(pick) and row["advised_in_grid"] == str(at)
    assert row["start"] == pytest.approx(speed[at][0] / 100.0)
    n0, n1 = (p.iters for p in sc.phases)
    t = {c: n0 / v[0] + n1 / v[1] for c, v in speed.items()}
    assert row["trace"] == pytest.approx(t[big] / t[at])
    assert math.isfinite(row["trace"])


def test_a_folder_that_is_not_a_suite_run_is_refused_in_one_line(tmp_path, load_benchmark, capsys):
    mod = load_benchmark("advise_start")
    assert mod.main([str(tmp_path)]) == 2
    assert f"out must be a suite run's folder (with suite_summary.json), but got out={str(tmp_path)!r}" in capsys.readouterr().err
