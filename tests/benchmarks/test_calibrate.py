"""``benchmarks/calibrate.py``: fit the simulator to real training on the testbed, and report its error.

The plan, the segment schedule, the profile normalisation and the fit run on simulator-made data; the
real ``--quick`` smoke (2 workers in network namespaces, one rate, three configs) is in the ``integration``
layer and needs root.
"""

from __future__ import annotations

import csv
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from _raw import PROFILE, write_raw

from autobyte.core import Config, KiB, MiB

ROOT = Path(__file__).resolve().parents[2]

pytest.importorskip("scipy")


@pytest.fixture(scope="module")
def cal(load_benchmark) -> ModuleType:
    return load_benchmark("calibrate")


@pytest.fixture(scope="module")
def col(load_benchmark) -> ModuleType:
    return load_benchmark("collect")


# --------------------------------------------------------------------------- plan and schedule
def test_plan_rejects_bad_arguments(cal: ModuleType, col: ModuleType) -> None:
    with pytest.raises(ValueError, match=r"rates_mbit must hold positive numbers of Mbit/s, but got rates_mbit=\[0\]"):
        cal.CalibrationPlan(rates_mbit=(0,))
    with pytest.raises(ValueError, match=r"rates_mbit must name at least one rate"):
        cal.CalibrationPlan(rates_mbit=())
    with pytest.raises(ValueError, match=r"reps must be a positive integer, but got reps=0"):
        cal.CalibrationPlan(reps=0)
    with pytest.raises(ValueError, match=r"free must be a non-empty subset of .*, but got free=\('speed',\)"):
        cal.CalibrationPlan(free=("speed",))
    with pytest.raises(ValueError, match=r"max_iters must be >= min_iters=5, but got max_iters=3"):
        cal.CalibrationPlan(max_iters=3)
    with pytest.raises(ValueError, match=r"passes must be <= reps=4, but got passes=5"):
        cal.CalibrationPlan(passes=5)
    with pytest.raises(ValueError, match=r"target_s must be a positive number of seconds, but got target_s=0"):
        cal.CalibrationPlan(target_s=0)
    with pytest.raises(ValueError, match=r"the hold-out covers every point of the grid"):
        cal.CalibrationPlan(rates_mbit=(300.0,))
    with pytest.raises(ValueError, match=r"configs must be a non-empty list of Config"):
        cal.CalibrationPlan(configs=())


def test_segment_rejects_bad_arguments(cal: ModuleType, col: ModuleType) -> None:
    with pytest.raises(ValueError, match=r"rate_mbit must be a positive number of Mbit/s, but got rate_mbit=-1"):
        col.Segment(-1, Config(MiB, MiB))
    with pytest.raises(ValueError, match=r"warmup must be an integer >= 1, but got warmup=0"):
        col.Segment(100, Config(MiB, MiB), warmup=0)
    with pytest.raises(ValueError, match=r"iters must be an integer >= 2, but got iters=1"):
        col.Segment(100, Config(MiB, MiB), iters=1)
    with pytest.raises(TypeError, match=r"config must be a Config"):
        col.Segment(100, (MiB, MiB))  # type: ignore[arg-type]


def test_schedule_runs_each_rate_once_with_repetitions_reordered(cal: ModuleType, col: ModuleType) -> None:
    plan = cal.CalibrationPlan()
    segs = plan.segments()
    assert len(segs) == len(plan.rates_mbit) * len(plan.configs) * plan.reps
    for p in range(plan.passes):  # each pass visits every rate once, with its share of the repetitions
        mine = [s for s in segs if s.rep % plan.passes == p]
        rates = [s.rate_mbit for s in mine]
        runs = [r for i, r in enumerate(rates) if i == 0 or rates[i - 1] != r]
        assert sorted(runs) == sorted(plan.rates_mbit)  # one launch per rate: the rate never changes under traffic
        assert mine == segs[p * len(mine):(p + 1) * len(mine)]
    for r in plan.rates_mbit:
        at_r = [s for s in segs if s.rate_mbit == r]
        orders = [[s.config for s in at_r if s.rep == rep] for rep in range(plan.reps)]
        assert all(sorted(o, key=str) == sorted(plan.configs, key=str) for o in orders)
        assert len({tuple(o) for o in orders}) > 1  # drift of the shared machine spreads over every config
    # slow rates get fewer, fast rates more iterations, within the bounds
    assert col.size_segment(100, 2.5) == 6 and col.size_segment(40000, 2.5, max_iters=20) == 10
    assert {s.iters for s in segs if s.rate_mbit == 100} == {5} and {s.iters for s in segs if s.rate_mbit == 40000} == {6}
    blocks = col.schedule_segments([100, 1000], [Config(MiB, MiB), Config(4 * MiB, 4 * MiB)], reps=2, order="rate-blocks")
    assert [s.rep for s in blocks] == [0, 0, 0, 0, 1, 1, 1, 1]
    with pytest.raises(ValueError, match=r"order must be 'rate-runs', 'rate-blocks' or 'shuffle', but got order='x'"):
        col.schedule_segments([100], [Config(MiB, MiB)], order="x")
    with pytest.raises(ValueError, match=r"reps must be a positive integer, but got reps=0"):
        col.schedule_segments([100], [Config(MiB, MiB)], reps=0)
    with pytest.raises(ValueError, match=r"passes must be an integer in \[1, reps=2\], but got passes=3"):
        col.schedule_segments([100], [Config(MiB, MiB)], reps=2, passes=3)


# --------------------------------------------------------------------------- simulator side
def test_profile_total_follows_the_plain_compute_step(cal: ModuleType, col: ModuleType) -> None:
    m = cal.model_profile(PROFILE)
    only = float(np.median(PROFILE["compute_only_s"][1:]))
    assert m.forward_s.sum() + m.backward_s.sum() == pytest.approx(only)
    # the profiled sum (0.077 s) is below the plain step (0.1 s): the difference goes to the forward passes
    assert np.allclose(m.backward_s, PROFILE["backward_s"])
    assert m.forward_s[0] / m.forward_s[2] == pytest.approx(4 / 6)
    slow = dict(PROFILE, compute_only_s=[0.05, 0.05])
    m2 = cal.model_profile(slow)
    assert m2.forward_s.sum() + m2.backward_s.sum() == pytest.approx(0.05)
    with pytest.raises(ValueError, match=r"profile must hold positive compute times"):
        cal.model_profile(dict(PROFILE, forward_s=[0.0] * 10, backward_s=[0.0] * 10))


def test_calibrated_link_rate_is_efficiency_in_series_with_the_cpu_cap(cal: ModuleType, col: ModuleType) -> None:
    p = cal.SimParams(efficiency=0.9, cap_Bps=1e9)
    assert p.link_Bps(100) == pytest.approx(1 / (1 / (0.9 * 12.5e6) + 1e-9))
    assert p.link_Bps(1e6) == pytest.approx(1e9, rel=0.01)  # a huge shaped rate: the CPU is the limit
    c = p.cluster(1000)
    assert c.n_workers == 2 and c.jitter == 0 and float(c.bw_up_Bps[0]) == pytest.approx(p.link_Bps(1000))


@pytest.mark.timeout(60)
def test_fit_recovers_iteration_times_made_by_known_parameters(cal: ModuleType, col: ModuleType) -> None:
    model = cal.model_profile(PROFILE)
    true = cal.SimParams(per_message_s=1.5e-3, latency_s=2e-4, compute_scale=2.5, update_Bps=1e9, contention=0.05,
                     efficiency=0.8, cap_Bps=3e8)
    cfgs = [Config(64 * KiB, 64 * KiB), Config(64 * KiB, 256 * KiB), Config(MiB, 4 * MiB), Config(25 * MiB, 25 * MiB)]
    pts = [(r, c, cal.simulate_iter_s(model, true, r, c)) for r in (100.0, 1000.0, 40000.0) for c in cfgs]
    start = cal.SimParams()
    before = np.mean([abs(cal.simulate_iter_s(model, start, r, c) - t) / t for r, c, t in pts])
    got, info = cal.fit(model, pts, free=("per_message_s", "compute_scale", "efficiency", "cap_Bps"), start=start, n_starts=1)
    after = np.mean([abs(cal.simulate_iter_s(model, got, r, c) - t) / t for r, c, t in pts])
    assert before > 0.2  # the defaults are far off ...
    assert after < 0.03, (after, got)  # ... the fit finds times within 3 %
    assert got.per_message_s == pytest.approx(1.5e-3, rel=0.3)  # 64 KiB at 1X pins the per-message cost
    assert got.compute_scale == pytest.approx(2.5, rel=0.15)  # unlimited rate pins compute
    assert info["n_points"] == 12 and info["free"] == ["per_message_s", "compute_scale", "efficiency", "cap_Bps"]
    with pytest.raises(ValueError, match=r"points must hold at least one"):
        cal.fit(model, [])
    with pytest.raises(ValueError, match=r"free must name parameters of .*, but got \['speed'\]"):
        cal.fit(model, pts, free=("speed",))


@pytest.mark.timeout(60)
def test_analyze_holds_out_points_and_writes_every_output(cal: ModuleType, col: ModuleType, tmp_path: Path) -> None:
    model = cal.model_profile(PROFILE)
    true = cal.SimParams(per_message_s=1e-3, compute_scale=2.0, efficiency=0.85, cap_Bps=4e8)
    plan = cal.CalibrationPlan(rates_mbit=(100.0, 1000.0), configs=(Config(64 * KiB, 64 * KiB), Config(MiB, 4 * MiB), Config(25 * MiB, 25 * MiB)),
                           reps=2, holdout_rates_mbit=(), holdout_configs=(Config(MiB, 4 * MiB),),
                           free=("per_message_s", "compute_scale", "efficiency", "cap_Bps"))
    segs = plan.segments()
    rng = np.random.default_rng(0)
    iters = [list(cal.simulate_iter_s(model, true, s.rate_mbit, s.config) * rng.lognormal(0, 0.03, 6)) for s in segs]
    meas = col.Measurement(segs, iters, [[] for _ in segs], PROFILE, [1] * 10, {"wall_s": 1.0})
    res = cal.analyze(meas, plan, n_starts=1)
    s = res["summary"]
    assert (s["n_points"], s["n_fit"], s["n_holdout"]) == (6, 4, 2)
    assert s["mape_all"] < 0.06 and s["mape_holdout"] < 0.08  # 3 % noise; the model is exact
    assert 0 < s["median_spread"] < 0.2
    cal.write_outputs(str(tmp_path), plan, meas, res)
    with open(tmp_path / "points.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["split"] for r in rows].count("holdout") == 2
    assert all(r["split"] == "holdout" for r in rows if int(r["partition_bytes"]) == MiB)
    with open(tmp_path / "measurements.csv") as f:
        assert len(list(csv.DictReader(f))) == len(segs)
    doc = json.loads((tmp_path / "params.json").read_text())
    assert doc["plan"] == plan.to_dict() and cal.CalibrationPlan.from_dict(doc["plan"]) == plan
    assert "MAPE of iteration time" in (tmp_path / "errors.md").read_text()
    assert (tmp_path / "calib_scatter.png").stat().st_size > 1000


# --------------------------------------------------------------------------- command line
@pytest.mark.parametrize("argv, message", [
    (["--reps", "0"], "--reps must be an integer in [1, 1000], but got --reps=0."),
    (["--rates-mbit", "fast"], "--rates-mbit must be comma-separated positive numbers of Mbit/s, but got --rates-mbit='fast'."),
    (["--rates-mbit", "100,0"], "--rates-mbit must be comma-separated positive numbers"),
    (["--starts", "0"], "--starts must be an integer in [1, 1000]"),
    (["--timeout-s", "-5"], "--timeout-s must be a positive number of seconds"),
    (["--from-raw", "{tmp}/missing"], "--from-raw must be an existing folder"),
    (["--from-raw", "{tmp}"], "out_dir must hold the ranks' rank0.json"),
])
def test_bad_arguments_are_one_line_with_exit_2(cal: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               argv: list[str], message: str) -> None:
    assert cal.main(["--out", str(tmp_path / "o"), *[a.format(tmp=tmp_path) for a in argv]]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("benchmarks/calibrate.py: error: ") and message in err, err
    assert cal.main([]) == 2 and "the following arguments are required: --out" in capsys.readouterr().err


def test_refit_from_raw_names_a_bad_plan_file(cal: ModuleType, col: ModuleType, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    raw = write_raw(tmp_path / "raw", col, rates=(1000.0,), reps=1, configs=cal.CalibrationPlan.quick().configs)
    (raw / "plan.json").write_bytes(b'{"rates_mbit": [100, \xff')
    t0 = time.monotonic()
    assert cal.main(["--out", str(tmp_path / "o"), "--from-raw", str(raw)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("benchmarks/calibrate.py: error: plan file ") and str(raw / "plan.json") in err, err
    assert len(err.splitlines()) == 1 and time.monotonic() - t0 < 10


@pytest.mark.timeout(120)
def test_refit_from_raw_writes_every_output(cal: ModuleType, col: ModuleType, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    plan = cal.CalibrationPlan.quick()
    raw = write_raw(tmp_path / "raw", col, rates=plan.rates_mbit, reps=1, configs=plan.configs)
    (raw / "plan.json").write_text(json.dumps(plan.to_dict()))
    out = tmp_path / "o"
    assert cal.main(["--out", str(out), "--from-raw", str(raw), "--quick", "--starts", "1"]) == 0
    assert "MAPE of iteration time" in capsys.readouterr().out
    doc = json.loads((out / "params.json").read_text())
    assert set(doc["params"]) == set(cal.PARAMS) and doc["summary"]["n_points"] == 3
    assert (out / "calib_grid.png").stat().st_size > 1000


# --------------------------------------------------------------------------- real smoke (root)
@pytest.mark.integration
@pytest.mark.root
@pytest.mark.skipif(not (os.geteuid() == 0 and shutil.which("ip") and shutil.which("tc")),
                    reason="needs root and iproute2 (ip, tc) for network namespaces")
@pytest.mark.timeout(180)
def test_quick_calibration_on_the_testbed(cal: ModuleType, tmp_path: Path) -> None:
    out = tmp_path / "calib"
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "calibrate.py"), "--out", str(out), "--quick", "--starts", "1"],
                       capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=170)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    for name in ("measurements.csv", "points.csv", "params.json", "errors.md", "calib_scatter.png", "calib_grid.png",
                 "raw/launch-00/rank0.json", "raw/launch-00/rank1.json", "raw/plan.json", "raw/launch-00/events.jsonl"):
        assert (out / name).is_file(), name
    with open(out / "points.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 3  # 1 rate x 3 configs
    for row in rows:
        assert float(row["rate_mbit"]) == 1000.0
        assert 0.01 < float(row["measured_median_s"]) < 30.0  # a real iteration of the CNN
        assert float(row["simulated_s"]) > 0
    doc = json.loads((out / "params.json").read_text())
    assert set(doc["params"]) == set(cal.PARAMS)
    assert all(math.isfinite(v) and v > 0 for v in doc["params"].values())
    # every iteration went through the testbed's control channel
    events = [json.loads(line) for line in (out / "raw" / "launch-00" / "events.jsonl").read_text().splitlines()]
    assert sum(e.get("event") == "iteration" for e in events) >= 18  # 3 segments x (2 warm-up + 4..6 measured)
    assert not (out / "raw" / "launch-01").exists()  # one rate: one launch, links shaped once
    raw = json.loads((out / "raw" / "launch-00" / "rank0.json").read_text())
    assert sum(raw["profile"]["layer_bytes"]) == sum(raw["tensor_bytes"]) == 13_616_680
    assert all(len(w) > 8 and w[0] >= 2 for w in raw["windows"])  # every segment's engine window was read
    assert "MAPE" in r.stdout
