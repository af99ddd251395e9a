"""``benchmarks/bench_emulated.py compare-ps``: the simulator's iteration-time error on stored parameter-server runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("scipy")

ROOT = Path(__file__).resolve().parents[2]
RUN1 = ROOT / "docs" / "figures" / "bench" / "ps_emu80"
RUN2 = ROOT / "docs" / "figures" / "bench" / "ps_emu80_fixed"


@pytest.fixture(scope="module")
def bench(load_benchmark):
    return load_benchmark("bench_emulated")


def test_settled_medians_drop_the_first_iterations_of_every_phase(bench):
    # phase 1 at 1000 Mbit/s: 9 s, 9 s transient then 1 s; phase 2 at 300: 9 s, 9 s then 3 s; repeat 1 slower
    recs = [("bs", 0, 1000.0, i, 9.0 if i < 2 else 1.0) for i in range(5)] + [("bs", 0, 300.0, i, 9.0 if i < 2 else 3.0) for i in range(4)]
    recs += [("bs", 1, 1000.0, i, 9.0 if i < 2 else 2.0) for i in range(3)]
    assert bench.SETTLE == 2
    assert bench._settled_medians(recs) == {"bs": {300.0: [3.0], 1000.0: [1.0, 2.0]}}


def test_read_ps_run_takes_grid_points_and_static_runs_per_rate(bench):
    run = bench.read_ps_run(str(RUN1))
    assert (run["model"], run["batch_size"], run["samples"]) == ("emu:resnet50", 64, 128)
    assert len(run["grid"]) == 18 and {r for r, _, _ in run["grid"]} == {300.0, 1000.0}
    assert set(run["trace"]) == {"dist_sync", "bytescheduler", "bo", "hindsight", "oracle"}  # autobyte switches configs: left out
    assert [c for _, c, _ in run["trace"]["dist_sync"]] == [None, None]
    oracle = {r: c for r, c, _ in run["trace"]["oracle"]}
    assert oracle == {1000.0: bench.Config(4 << 20, 64 << 20), 300.0: bench.Config(1 << 20, 16 << 20)}  # summary.json's oracle_configs


def test_compare_ps_fits_on_run1_grids_and_judges_every_other_point(bench, tmp_path):
    bench.main(["compare-ps", str(RUN1), "--heldout-run", str(RUN2), "--out", str(tmp_path)])
    res = json.loads((tmp_path / "ps_sim_vs_real.json").read_text())
    pts = res["points"]
    fit_set = [p for p in pts if p["run_index"] == 0 and p["set"] == "grid"]
    assert res["fit"]["info"]["n_points"] == len(fit_set) == 18 and res["fit"]["info"]["arch"] == "ps"
    assert res["fit"]["info_high_rate_only"]["n_points"] == 9
    e = res["errors"]["fitted_on_grids"]
    assert e["fit"]["n"] == 18 and e["trace_run1"]["n"] == 8 and e["run2"]["n"] == 22 and e["dist_sync"]["n"] == 4
    assert e["heldout"]["n"] + e["fit"]["n"] + e["dist_sync"]["n"] == len(pts)  # held out = everything but the fit set and dist_sync
    assert e["off_grid"]["n"] == 6  # ByteScheduler's default in both runs, BO's in run 1
    for p in pts:
        assert p["measured_s"] > 0 and all(p[f"sim_{k}_s"] > 0 for k in ("calibration_cnn", "fitted_on_grids", "fitted_on_high_rate_grid"))
    # the fitted simulator is closer to the held-out points than the CNN calibration it started from
    assert e["heldout"]["mape"] < res["errors"]["calibration_cnn"]["heldout"]["mape"]
    md = (tmp_path / "ps_sim_vs_real.md").read_text()
    assert "| fitted on run 1's grids, both rates |" in md and "dist_sync (sim: <25 MiB, unlimited>)" in md


@pytest.mark.parametrize("make", [lambda p: p, lambda p: ROOT / "docs" / "figures" / "bench" / "paper_fig6_allreduce"])
def test_compare_ps_refuses_a_directory_that_is_not_a_ps_run(bench, tmp_path, make):
    run = make(tmp_path)
    with pytest.raises(ValueError, match=r"run_dir must be an 'autobyte bench --arch ps' output .* but got run_dir='.*'\."):
        bench.main(["compare-ps", str(run), "--out", str(tmp_path)])


def test_calibrated_ps_cluster_updates_on_the_servers_and_fit_checks_arch():
    from autobyte.bench.calibrate import SimParams, fit
    from autobyte.core import Config

    c = SimParams(update_Bps=3e8).cluster(1000, arch="ps")
    assert c.arch == "ps" and c.ps_aggregate_Bps == 3e8
    assert SimParams().cluster(1000).arch == "allreduce"
    with pytest.raises(ValueError, match=r"arch must be one of \('allreduce', 'ps'\), but got arch='ring'\."):
        fit(None, [(1000.0, Config(1 << 20, 1 << 20), 1.0)], arch="ring")


def test_compare_points_a_ps_run_to_compare_ps(bench, tmp_path):
    with pytest.raises(ValueError, match=r"run_dir must be an 'autobyte bench --suite' output .*ps_emu80'.*use compare-ps"):
        bench.main(["compare", str(RUN1), "--out", str(tmp_path)])


def test_condition_keys_give_the_rate_and_each_workers_slowdown(bench):
    assert bench._condition("1000mbit") == (1000.0, (1.0, 1.0))
    assert bench._condition("800mbit-slow2") == (800.0, (1.0, 2.0))  # rank 1 alone: the key of the full suite's straggler
    assert bench._condition("667mbit-slow3-r01") == (667.0, (3.0, 3.0))  # jobs joining every worker (Fig. 7)
    assert bench._slow((1000.0, (1.0, 1.0))) is None and bench._slow((667.0, (3.0, 3.0))) == [3.0, 3.0]
    for key in ("600mbit-flow", "2000mbit-up1_250"):
        with pytest.raises(ValueError, match=rf"the simulator has no competing flow or asymmetric link\), but got condition='{key}'\."):
            bench._condition(key)


def test_a_slowed_worker_slows_the_simulated_iteration_and_bad_slowdowns_are_refused():
    from autobyte.bench.calibrate import SimParams, fit, simulate_iter_s
    from autobyte.bench.emulation import Emulation
    from autobyte.core import Config

    p = SimParams(compute_scale=1.5)
    assert list(p.cluster(1000, slowdown=[1.0, 2.0]).compute_scale) == [1.5, 3.0]
    prof = Emulation("emu:resnet50", 10.0, 64).scaled_profile()
    cfg = Config(4 << 20, 16 << 20)
    alone, one, both = (simulate_iter_s(prof, p, 2000, cfg, arch="ps", slowdown=s) for s in (None, [1.0, 2.0], [2.0, 2.0]))
    assert alone < one <= both * 1.001 and both > 1.8 * alone, (alone, one, both)  # compute-bound: about twice as long
    with pytest.raises(ValueError, match=r"slowdown must be 2 factors >= 1 \(one per worker\), but got slowdown=\[2.0\]\."):
        p.cluster(1000, slowdown=[2.0])
    with pytest.raises(ValueError, match=r"slowdowns must hold one entry per point \(1\), but got 2\."):
        fit(prof, [(1000.0, cfg, 1.0)], slowdowns=[None, [2.0, 2.0]])
