"""Calibration of the simulator against the testbed (``autobyte calibrate``) and its building blocks.

The root test runs the real ``--quick`` smoke (2 workers in namespaces, one
rate, three configs); the others check the plan, the segment schedule and
trace, the profile normalisation and the fit on simulator-made data, without
root.
"""

from __future__ import annotations

import csv
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from autobyte.bench.collect import Measurement, Segment, schedule_segments, size_segment
from autobyte.core import Config, KiB, MiB
from autobyte.bench import _measure_cli as _cli
from autobyte.bench.calibrate import (
    PARAMS,
    CalibrationPlan,
    SimParams,
    analyze,
    fit,
    model_profile,
    simulate_iter_s,
    write_outputs,
)

REPO = Path(__file__).resolve().parents[2]
needs_root = [  # as tests/testbed/conftest.py: the smoke measures on the real testbed
    pytest.mark.root,
    pytest.mark.skipif(not (os.geteuid() == 0 and shutil.which("ip") and shutil.which("tc")),
                       reason="needs root and iproute2 (ip, tc) for network namespaces"),
]


_PROFILE = {  # a CNN-like profile: small conv layers first, one big fully connected layer
    "layer_bytes": [3584, 256, 73856, 512, 295424, 1024, 590336, 1024, 12584448, 61480],
    "forward_s": [0.004, 0.001, 0.006, 0.001, 0.005, 0.001, 0.006, 0.001, 0.002, 0.0002],
    "backward_s": [0.006, 0.001, 0.012, 0.001, 0.010, 0.001, 0.012, 0.001, 0.004, 0.0004],
    "layer_names": [str(i) for i in range(10)],
    "batch_size": 16,
    "compute_only_s": [0.2, 0.1, 0.1, 0.11, 0.09],
}


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}


# --------------------------------------------------------------------------- real smoke (root)
@pytest.mark.timeout(120)
@needs_root[0]
@needs_root[1]
def test_quick_calibration_on_the_testbed(tmp_path: Path) -> None:
    out = tmp_path / "calib"
    # (``autobyte calibrate`` is this command; the testbed module spares the other subsystems' imports)
    r = subprocess.run([sys.executable, "-m", "autobyte.bench._measure_cli", "calibrate", "--out", str(out), "--quick", "--starts", "1"],
                       capture_output=True, text=True, cwd=REPO, env=_env(), timeout=110)
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
    assert set(doc["params"]) == set(PARAMS)
    assert all(math.isfinite(v) and v > 0 for v in doc["params"].values())
    assert math.isfinite(doc["summary"]["mape_all"])
    # every iteration went through the testbed's control channel
    events = [json.loads(line) for line in (out / "raw" / "launch-00" / "events.jsonl").read_text().splitlines()]
    assert sum(e.get("event") == "iteration" for e in events) >= 18  # 3 segments x (2 warm-up + 4..6 measured)
    assert not (out / "raw" / "launch-01").exists()  # one rate: one launch, links shaped once
    raw = json.loads((out / "raw" / "launch-00" / "rank0.json").read_text())
    assert sum(raw["profile"]["layer_bytes"]) == sum(raw["tensor_bytes"]) == 13_616_680
    assert all(len(w) > 8 and w[0] >= 2 for w in raw["windows"])  # every segment's engine window was read
    assert "MAPE" in r.stdout


# --------------------------------------------------------------------------- plan and schedule
def test_plan_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match=r"rates_mbit must hold positive numbers of Mbit/s, but got rates_mbit=\[0\]"):
        CalibrationPlan(rates_mbit=(0,))
    with pytest.raises(ValueError, match=r"rates_mbit must name at least one rate"):
        CalibrationPlan(rates_mbit=())
    with pytest.raises(ValueError, match=r"reps must be a positive integer, but got reps=0"):
        CalibrationPlan(reps=0)
    with pytest.raises(ValueError, match=r"free must be a non-empty subset of .*, but got free=\('speed',\)"):
        CalibrationPlan(free=("speed",))
    with pytest.raises(ValueError, match=r"max_iters must be >= min_iters=5, but got max_iters=3"):
        CalibrationPlan(max_iters=3)
    with pytest.raises(ValueError, match=r"passes must be <= reps=4, but got passes=5"):
        CalibrationPlan(passes=5)
    with pytest.raises(ValueError, match=r"target_s must be a positive number of seconds, but got target_s=0"):
        CalibrationPlan(target_s=0)
    with pytest.raises(ValueError, match=r"the hold-out covers every point of the grid"):
        CalibrationPlan(rates_mbit=(300.0,))
    with pytest.raises(ValueError, match=r"configs must be a non-empty list of Config"):
        CalibrationPlan(configs=())


def test_segment_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match=r"rate_mbit must be a positive number of Mbit/s, but got rate_mbit=-1"):
        Segment(-1, Config(MiB, MiB))
    with pytest.raises(ValueError, match=r"warmup must be an integer >= 1, but got warmup=0"):
        Segment(100, Config(MiB, MiB), warmup=0)
    with pytest.raises(ValueError, match=r"iters must be an integer >= 2, but got iters=1"):
        Segment(100, Config(MiB, MiB), iters=1)
    with pytest.raises(TypeError, match=r"config must be a Config"):
        Segment(100, (MiB, MiB))  # type: ignore[arg-type]


def test_schedule_runs_each_rate_once_with_repetitions_reordered() -> None:
    plan = CalibrationPlan()
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
    assert size_segment(100, 2.5) == 6 and size_segment(40000, 2.5, max_iters=20) == 10
    assert {s.iters for s in segs if s.rate_mbit == 100} == {5} and {s.iters for s in segs if s.rate_mbit == 40000} == {6}
    blocks = schedule_segments([100, 1000], [Config(MiB, MiB), Config(4 * MiB, 4 * MiB)], reps=2, order="rate-blocks")
    assert [s.rep for s in blocks] == [0, 0, 0, 0, 1, 1, 1, 1]
    with pytest.raises(ValueError, match=r"order must be 'rate-runs', 'rate-blocks' or 'shuffle', but got order='x'"):
        schedule_segments([100], [Config(MiB, MiB)], order="x")
    with pytest.raises(ValueError, match=r"reps must be a positive integer, but got reps=0"):
        schedule_segments([100], [Config(MiB, MiB)], reps=0)
    with pytest.raises(ValueError, match=r"passes must be an integer in \[1, reps=2\], but got passes=3"):
        schedule_segments([100], [Config(MiB, MiB)], reps=2, passes=3)


# --------------------------------------------------------------------------- simulator side
def test_profile_total_follows_the_plain_compute_step() -> None:
    m = model_profile(_PROFILE)
    only = float(np.median(_PROFILE["compute_only_s"][1:]))
    assert m.forward_s.sum() + m.backward_s.sum() == pytest.approx(only)
    # the profiled sum (0.077 s) is below the plain step (0.1 s): the difference goes to the forward passes
    assert np.allclose(m.backward_s, _PROFILE["backward_s"])
    assert m.forward_s[0] / m.forward_s[2] == pytest.approx(4 / 6)
    slow = dict(_PROFILE, compute_only_s=[0.05, 0.05])
    m2 = model_profile(slow)
    assert m2.forward_s.sum() + m2.backward_s.sum() == pytest.approx(0.05)
    with pytest.raises(ValueError, match=r"profile must hold positive compute times"):
        model_profile(dict(_PROFILE, forward_s=[0.0] * 10, backward_s=[0.0] * 10))


def test_calibrated_link_rate_is_efficiency_in_series_with_the_cpu_cap() -> None:
    p = SimParams(efficiency=0.9, cap_Bps=1e9)
    assert p.link_Bps(100) == pytest.approx(1 / (1 / (0.9 * 12.5e6) + 1e-9))
    assert p.link_Bps(1e6) == pytest.approx(1e9, rel=0.01)  # a huge shaped rate: the CPU is the limit
    c = p.cluster(1000)
    assert c.n_workers == 2 and c.jitter == 0 and float(c.bw_up_Bps[0]) == pytest.approx(p.link_Bps(1000))


@pytest.mark.timeout(60)
def test_fit_recovers_iteration_times_made_by_known_parameters() -> None:
    model = model_profile(_PROFILE)
    true = SimParams(per_message_s=1.5e-3, latency_s=2e-4, compute_scale=2.5, update_Bps=1e9, contention=0.05,
                     efficiency=0.8, cap_Bps=3e8)
    cfgs = [Config(64 * KiB, 64 * KiB), Config(64 * KiB, 256 * KiB), Config(MiB, 4 * MiB), Config(25 * MiB, 25 * MiB)]
    pts = [(r, c, simulate_iter_s(model, true, r, c)) for r in (100.0, 1000.0, 40000.0) for c in cfgs]
    start = SimParams()
    before = np.mean([abs(simulate_iter_s(model, start, r, c) - t) / t for r, c, t in pts])
    got, info = fit(model, pts, free=("per_message_s", "compute_scale", "efficiency", "cap_Bps"), start=start, n_starts=1)
    after = np.mean([abs(simulate_iter_s(model, got, r, c) - t) / t for r, c, t in pts])
    assert before > 0.2  # the defaults are far off ...
    assert after < 0.03, (after, got)  # ... the fit finds times within 3 %
    assert got.per_message_s == pytest.approx(1.5e-3, rel=0.3)  # 64 KiB at 1X pins the per-message cost
    assert got.compute_scale == pytest.approx(2.5, rel=0.15)  # unlimited rate pins compute
    assert info["n_points"] == 12 and info["free"] == ["per_message_s", "compute_scale", "efficiency", "cap_Bps"]
    with pytest.raises(ValueError, match=r"points must hold at least one"):
        fit(model, [])
    with pytest.raises(ValueError, match=r"free must name parameters of .*, but got \['speed'\]"):
        fit(model, pts, free=("speed",))


@pytest.mark.timeout(60)
def test_analyze_holds_out_points_and_writes_every_output(tmp_path: Path) -> None:
    model = model_profile(_PROFILE)
    true = SimParams(per_message_s=1e-3, compute_scale=2.0, efficiency=0.85, cap_Bps=4e8)
    plan = CalibrationPlan(rates_mbit=(100.0, 1000.0), configs=(Config(64 * KiB, 64 * KiB), Config(MiB, 4 * MiB), Config(25 * MiB, 25 * MiB)),
                           reps=2, holdout_rates_mbit=(), holdout_configs=(Config(MiB, 4 * MiB),),
                           free=("per_message_s", "compute_scale", "efficiency", "cap_Bps"))
    segs = plan.segments()
    rng = np.random.default_rng(0)
    iters = [list(simulate_iter_s(model, true, s.rate_mbit, s.config) * rng.lognormal(0, 0.03, 6)) for s in segs]
    meas = Measurement(segs, iters, [[] for _ in segs], _PROFILE, [1] * 10, {"wall_s": 1.0})
    res = analyze(meas, plan, n_starts=1)
    s = res["summary"]
    assert (s["n_points"], s["n_fit"], s["n_holdout"]) == (6, 4, 2)
    assert s["mape_all"] < 0.06 and s["mape_holdout"] < 0.08  # 3 % noise; the model is exact
    assert 0 < s["median_spread"] < 0.2
    write_outputs(str(tmp_path), plan, meas, res)
    with open(tmp_path / "points.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["split"] for r in rows].count("holdout") == 2
    assert all(r["split"] == "holdout" for r in rows if int(r["partition_bytes"]) == MiB)
    with open(tmp_path / "measurements.csv") as f:
        assert len(list(csv.DictReader(f))) == len(segs)
    doc = json.loads((tmp_path / "params.json").read_text())
    assert doc["plan"] == plan.to_dict() and CalibrationPlan.from_dict(doc["plan"]) == plan
    assert "MAPE of iteration time" in (tmp_path / "errors.md").read_text()
    assert (tmp_path / "calib_scatter.png").stat().st_size > 1000


# --------------------------------------------------------------------------- CLI errors
def test_cli_reports_bad_arguments(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def run(*args: str) -> tuple[int, str]:
        rc = _cli.main(["calibrate", "--out", str(tmp_path / "o"), *args])
        return rc, capsys.readouterr().err

    rc, err = run("--from-raw", str(tmp_path / "missing"))
    assert rc == 2 and "autobyte calibrate: error: --from-raw must be an existing folder" in err
    rc, err = run("--from-raw", str(tmp_path))
    assert rc == 2 and "autobyte calibrate: error: out_dir must hold the ranks' rank0.json" in err
    rc, err = run("--rates-mbit", "fast", "--from-raw", str(tmp_path))
    assert rc == 2 and "--rates-mbit must be comma-separated positive numbers of Mbit/s, but got --rates-mbit='fast'" in err
    rc, err = run("--starts", "0", "--from-raw", str(tmp_path))
    assert rc == 2 and "--starts must be an integer in [1, 1000], but got --starts=0" in err
    rc, err = run("--reps", "0", "--from-raw", str(tmp_path))
    assert rc == 2 and "--reps must be an integer in [1, 1000], but got --reps=0" in err


# --------------------------------------------------------------------------- real rows for the meta-network
def _fake_measurement() -> Measurement:
    """Two conditions (rates) x 3 configs, 2 ranks, windows as the engine reports them."""
    from autobyte.core.metrics import WindowStats

    cfgs = [Config(64 * KiB, 64 * KiB), Config(MiB, 4 * MiB), Config(16 * MiB, 16 * MiB)]
    segs = [Segment(r, c, 2, 4, rep=0) for r in (150.0, 2000.0) for c in cfgs]
    tb = [1000, 40, 500_000, 20]
    windows, by_rank = [], []
    for k, s in enumerate(segs):
        t = 0.1 + 0.01 * k
        windows.append([WindowStats(4, t, 16 / t, 0.03 + r * 0.01, (0.001, 0.0001, 0.004 + r * 0.001, 0.0002), 13_616_680 * 4,
                                    8, 0.05, 1e8 + 1e7 * r) for r in range(2)])
        by_rank.append([[t] * 4, [t + 0.02] * 4])
    return Measurement(segs, [x[0] for x in by_rank], windows, dict(_PROFILE), tb, {}, by_rank)


def test_real_windows_become_a_dataset_the_simulators_loader_reads(tmp_path: Path) -> None:
    from autobyte.bench.collect import conditions, write_dataset
    from autobyte.sim.dataset import ROW_COLUMNS, load_dataset, row_layers

    m = _fake_measurement()
    assert conditions(m) == [[0, 1, 2], [3, 4, 5]]
    res = write_dataset([m], str(tmp_path / "data"))
    assert (res["rows"], res["conditions"]) == (18, 2)
    d = load_dataset(tmp_path / "data")
    assert set(ROW_COLUMNS) <= set(d)
    assert d["meta"]["spec"]["source"] == "autobyte-testbed" and d["model_names"] == ["cnn-3.4M"]
    assert list(d["model_layer_bytes"][0]) == [1000, 40, 500_000, 20]
    # row (c0 = config 1, c = config 2) of condition 0: label = real cluster speed under config 2
    i = int(np.flatnonzero((d["condition"] == 0) & (d["partition_cur"] == MiB) & (d["partition"] == 16 * MiB))[0])
    assert d["speed"][i] == pytest.approx(16 / 0.12 + 16 / 0.14)  # both ranks' samples/s from their wall times
    assert d["speed_cur"][i] == pytest.approx(16 / 0.11 + 16 / 0.13)
    assert d["worker_speed_min"][i] == pytest.approx(16 / 0.13)
    assert d["forward_s"][i] == pytest.approx(0.035)
    assert d["bw_up_min"][i] == pytest.approx(1e8) and d["bw_up_mean"][i] == pytest.approx(1.05e8)  # 2(n-1)/n = 1
    assert d["link_gbps_mean"][i] == pytest.approx(0.15)
    assert np.allclose(row_layers(d, i), [0.001, 0.0001, 0.0045, 0.0002])
    assert np.allclose(row_layers(d, i, "layer_backward_max"), [0.001, 0.0001, 0.005, 0.0002])
    with pytest.raises(ValueError, match=r"measurements hold no condition with at least min_configs=4 configs"):
        write_dataset([m], str(tmp_path / "d2"), min_configs=4)


def test_meta_evaluation_rejects_a_split_it_cannot_make(tmp_path: Path) -> None:
    from autobyte.bench.collect import evaluate_meta, meta_contexts

    ctx = meta_contexts(_fake_measurement())
    assert len(ctx) == 6 and ctx[0]["features"].n_workers == 2 and ctx[0]["candidates"].shape == (3, 2)
    assert ctx[4]["observed"] == pytest.approx(ctx[4]["speed"][1])
    with pytest.raises(ValueError, match=r"holdout must be 'rep' or 'rate', but got holdout='x'"):
        evaluate_meta([str(tmp_path)], holdout="x")


_REAL_RAW = Path(__file__).resolve().parents[2] / "docs" / "figures" / "calib_real" / "raw"


def test_online_meta_evaluation_on_real_windows_adapts_and_scores_unseen_configs() -> None:
    from autobyte.bench.collect import evaluate_meta_online

    res = evaluate_meta_online([str(_REAL_RAW)], n_observed=5, orders=2, log=lambda s: None)
    # 6 conditions of 8 configs; before, every window predicts the 7 others: 6 * 8 * 7 rows
    assert res["conditions"] == 6 and res["before_all"]["rows"] == 6 * 8 * 7
    # after 5 windows, each of them predicts the 3 configs not yet seen: 6 conditions x 2 orders x 5 x 3
    assert res["before"]["rows"] == res["after"]["rows"] == 6 * 2 * 5 * 3
    assert 0 < res["after"]["mape"] < res["before"]["mape"]  # adapting on this job's own windows helps
    # the labels' noise floor: repetition 1's ratios predicting repetition 2's, 3 rates x 8 x 7 pairs
    assert res["repeat"]["rows"] == 3 * 8 * 7 and 0 < res["repeat"]["mape"] < 1


def test_online_meta_evaluation_and_collect_reject_bad_arguments(tmp_path: Path) -> None:
    from autobyte.bench.collect import collect, evaluate_meta_online

    with pytest.raises(ValueError, match=r"n_observed must be below the number of configs measured in a condition, but got n_observed=8"):
        evaluate_meta_online([str(_REAL_RAW)], n_observed=8, log=lambda s: None)
    with pytest.raises(ValueError, match=r"n_observed must be a positive integer, but got n_observed=0"):
        evaluate_meta_online([str(_REAL_RAW)], n_observed=0)
    with pytest.raises(ValueError, match=r"model must be one of cnn, transformer, mlp, but got model='resnet'"):
        collect(str(tmp_path), model="resnet")
    with pytest.raises(ValueError, match=r"batch_size must be a positive integer, but got batch_size=0"):
        collect(str(tmp_path), model="mlp", batch_size=0)


def test_finetune_on_real_windows_writes_weights_a_tuner_loads(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from autobyte.bench.collect import evaluate_meta_online, finetune_meta
    from autobyte.meta import AutoByteTuner, MetaNetwork

    out = str(tmp_path / "cluster.npz")
    res = finetune_meta([str(_REAL_RAW)], out, time_budget_s=2.0, log=lambda s: None)
    assert res["rows"] == 6 * 8 * 8 and res["fit_mape_after"] < res["fit_mape_before"]
    tuned, shipped = MetaNetwork.load(out), MetaNetwork.load_default()
    assert tuned.info["finetune_rows"] == res["rows"]
    assert any(not np.array_equal(a, b) for a, b in zip(tuned.weights().values(), shipped.weights().values()))
    assert AutoByteTuner(weights=out).net.weights().keys() == shipped.weights().keys()
    after = evaluate_meta_online([str(_REAL_RAW)], weights=out, orders=1, log=lambda s: None)
    assert after["before_all"]["mape"] < evaluate_meta_online([str(_REAL_RAW)], orders=1, log=lambda s: None)["before_all"]["mape"]
    with pytest.raises(ValueError, match=r"out must be a path ending in '.npz', but got out='w.pt'"):
        finetune_meta([str(_REAL_RAW)], "w.pt")
    assert _cli.main(["collect", "--finetune", str(_REAL_RAW)]) == 2
    assert "--finetune RAW needs --weights-out FILE.npz" in capsys.readouterr().err
    assert _cli.main(["collect", "--finetune", str(_REAL_RAW), "--out", str(tmp_path), "--weights-out", out]) == 2
    assert "--finetune RAW goes alone" in capsys.readouterr().err
