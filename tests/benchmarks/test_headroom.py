"""benchmarks/headroom.py: the gain to find, the headroom of switching and the noise, from a suite's real runs."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest

from autobyte.bench._suite import ITERATION_FIELDS

#: two phases of each condition, 12 iterations each: a fast link "a" and a slow one "b"
CONDS = ["a"] * 12 + ["b"] * 12 + ["a"] * 12 + ["b"] * 12


def _times(method: str, repeat: int) -> list[float]:
    """The default: 0.10 s at a (its second steady window of every a-phase 4% slower in log speed), 0.40 s at b;
    hindsight: 0.11 s at a, 0.32 s at b. Repeat 1 is 2% slower throughout."""
    out = []
    for i, c in enumerate(CONDS):
        k = i % 12  # position in the phase: 0-1 settle, 2-6 first window, 7-11 second window
        if method == "bytescheduler":
            t = 0.10 * (math.exp(0.04) if k >= 7 else 1.0) if c == "a" else 0.40
        else:
            t = 0.11 if c == "a" else 0.32
        out.append(t * (1.02 if repeat else 1.0))
    return out


def _suite(folder: Path) -> Path:
    (folder / "sc").mkdir(parents=True)
    with open(folder / "sc" / "iterations.csv", "w", newline="") as f:
        w = csv.DictWriter(f, ITERATION_FIELDS)
        w.writeheader()
        for method, cfg in (("bytescheduler", (4000000, 16000000)), ("hindsight", (1048576, 4194304))):
            for rep in (0, 1):
                for i, (t, c) in enumerate(zip(_times(method, rep), CONDS)):
                    w.writerow({"method": method, "repeat": rep, "iteration": i, "condition": c, "seconds": t,
                                "samples_per_s": 16 / t, "partition_bytes": cfg[0], "credit_bytes": cfg[1]})
    return folder


def test_gain_headroom_and_noise_from_known_runs(load_benchmark, tmp_path, capsys):
    bench = load_benchmark("headroom")
    r = bench.analyse(_suite(tmp_path) / "sc", window=5, settle=2)
    a, b = {c["condition"]: c for c in r["conditions"]}["a"], {c["condition"]: c for c in r["conditions"]}["b"]
    # steady speeds (iterations 2-11 of each phase): the default's a mixes 0.10 and 0.10 e^0.04 half and half
    def_a = [20 / (10 * 0.1 * (1 + math.exp(0.04)) * f) for f in (1.0, 1.02)]
    hin_a = [1 / (0.11 * f) for f in (1.0, 1.02)]
    assert a["gain"] == pytest.approx(sum(hin_a) / sum(def_a) - 1, rel=1e-9)  # -7.2%: the default is faster at a
    assert b["gain"] == pytest.approx((1 / 0.32) / (1 / 0.40) - 1, rel=1e-9)  # +25%: the repeats' 2% cancels
    # switching: a at the default, b at hindsight, against hindsight throughout (every iteration counted)
    t_def_a = 2 * (7 * 0.1 + 5 * 0.1 * math.exp(0.04)) * 1.01  # per phase: 7 iterations at 0.10, 5 at 0.10 e^0.04
    t_hin_a, t_hin_b = 24 * 0.11 * 1.01, 24 * 0.32 * 1.01
    assert r["switch_headroom"] == pytest.approx((t_hin_a + t_hin_b) / (t_def_a + t_hin_b), rel=1e-9)
    assert a["share_of_time"] == pytest.approx(t_hin_a / (t_hin_a + t_hin_b), rel=1e-9)
    # a repeat's scatter: both methods' repeats 2% apart
    assert r["sigma_run"] == pytest.approx(math.log(1.02) / math.sqrt(2), rel=1e-9)
    # a window's scatter at a: the default's 4 windows per run at +-0.02 about their mean (n/(n-1) = 4/3),
    # pooled with hindsight's 4 steady ones; none at b
    assert a["sigma_window"] == pytest.approx(0.02 * math.sqrt(4 / 3) * math.sqrt(8 / 16), rel=1e-9)
    assert b["sigma_window"] == 0.0 and b["windows_needed"] == 0.0
    assert a["windows_needed"] == pytest.approx(2 * bench.Z ** 2 * (a["sigma_window"] / a["gain"]) ** 2, rel=1e-9)
    assert a["windows_per_phase"] == b["windows_per_phase"] == 2.0 and a["phases"] == 2
    assert r["hindsight_vs_default"] == pytest.approx(
        (48 / sum(_times("hindsight", 0)) + 48 / sum(_times("hindsight", 1))) /
        (48 / sum(_times("bytescheduler", 0)) + 48 / sum(_times("bytescheduler", 1))), rel=1e-9)
    assert bench.main([str(tmp_path), "--window", "5"]) == 0
    out = capsys.readouterr().out
    assert r["grid_headroom"] is None  # no summary.json, no grids
    assert f"| +{100 * (r['switch_headroom'] - 1):.1f}% (-) |" in out and "| sc | b (2 x 12, " in out


def test_the_grids_and_the_tag_are_read_from_the_scenarios_summary(load_benchmark, tmp_path):
    # a summary.json as the suite writes it: the tag, the two static configurations, the trace's phases and
    # per condition the grid's speeds; the grid's best at b is a third configuration
    bench = load_benchmark("headroom")
    d, h, x = (4000000, 16000000), (1048576, 4194304), (262144, 1048576)
    grids = {"a": {f"{d[0]},{d[1]}": 10.0, f"{h[0]},{h[1]}": 9.0, f"{x[0]},{x[1]}": 8.0},
             "b": {f"{d[0]},{d[1]}": 2.5, f"{h[0]},{h[1]}": 3.0, f"{x[0]},{x[1]}": 4.0}}
    folder = _suite(tmp_path) / "sc"
    (folder / "summary.json").write_text(json.dumps({
        "tag": "heldout", "configs": {"bytescheduler": list(d), "hindsight": list(h)},
        "phases": [[12, "a"], [12, "b"], [12, "a"], [12, "b"]], "grids": grids}))
    r = bench.analyse(folder, window=5, settle=2)
    assert r["tag"] == "heldout"
    # the trace at hindsight's configuration over the trace at each condition's fastest, as the grids predict
    assert r["grid_headroom"] == pytest.approx((24 / 9.0 + 24 / 3.0) / (24 / 10.0 + 24 / 4.0), rel=1e-9)
    # the grids' ratio of hindsight's configuration to the default's, per condition
    by = {c["condition"]: c for c in r["conditions"]}
    assert by["a"]["grid_gain"] == pytest.approx(9.0 / 10.0 - 1, rel=1e-9)
    assert by["b"]["grid_gain"] == pytest.approx(3.0 / 2.5 - 1, rel=1e-9)
    out = tmp_path / "h.json"
    assert bench.main([str(tmp_path), "--window", "5", "--json", str(out)]) == 0
    [written] = json.loads(out.read_text())
    assert written["scenario"] == "sc" and written["grid_headroom"] == pytest.approx(r["grid_headroom"], rel=1e-12)


def test_the_grids_headroom_is_the_trace_at_each_conditions_fastest(load_benchmark):
    bench = load_benchmark("headroom")
    grids = {"a": {"1,1": 10.0, "2,2": 5.0}, "b": {"1,1": 1.0, "2,2": 2.0}}
    # 10 iterations at a, 10 at b: at <1, 1> 1 + 10 = 11 s; at each condition's fastest 1 + 5 = 6 s
    assert bench._grid_headroom([[10, "a"], [10, "b"]], grids, [1, 1]) == pytest.approx(11 / 6)
    assert bench._grid_headroom([[10, "a"], [10, "c"]], grids, [1, 1]) is None  # a condition without a grid
    assert bench._grid_headroom([[10, "a"]], grids, [4, 4]) is None  # a configuration the grid did not measure


def test_a_scenario_without_both_static_runs_is_listed_as_skipped(load_benchmark, suite_iterations, tmp_path, capsys):
    bench = load_benchmark("headroom")
    suite_iterations(tmp_path, [0.1] * 20, ["a"] * 20)  # the default alone
    assert bench.main([str(tmp_path)]) == 0
    assert "| sc | skipped: needs bytescheduler and hindsight runs |" in capsys.readouterr().out


@pytest.mark.parametrize("argv, needle", [
    (["--window", "1"], "--window must be an integer >= 2, but got --window=1."),
    (["--settle", "-1"], "--settle must be an integer >= 0, but got --settle=-1."),
])
def test_bad_arguments(load_benchmark, tmp_path, capsys, argv, needle):
    bench = load_benchmark("headroom")
    with pytest.raises(SystemExit):
        bench.main([str(_suite(tmp_path))] + argv)
    assert needle in capsys.readouterr().err


def test_a_folder_that_is_not_a_suites_is_refused(load_benchmark, tmp_path, capsys):
    bench = load_benchmark("headroom")
    with pytest.raises(SystemExit):
        bench.main([str(tmp_path)])
    assert "has none" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bench.main([str(tmp_path / "nope")])
    assert "is not a folder" in capsys.readouterr().err
