"""``benchmarks/bench_emulated.py``: its readers and the simulator it fits (compare-ps on a real run is the figure's command)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("scipy")


@pytest.fixture(scope="module")
def bench(load_benchmark):
    return load_benchmark("bench_emulated")


@pytest.fixture(scope="module")
def cal(load_benchmark):
    return load_benchmark("calibrate")


def test_settled_medians_drop_the_first_iterations_of_every_phase(bench):
    # phase 1 at 1000 Mbit/s: 9 s, 9 s transient then 1 s; phase 2 at 300: 9 s, 9 s then 3 s; repeat 1 slower
    recs = [("bs", 0, 1000.0, i, 9.0 if i < 2 else 1.0) for i in range(5)] + [("bs", 0, 300.0, i, 9.0 if i < 2 else 3.0) for i in range(4)]
    recs += [("bs", 1, 1000.0, i, 9.0 if i < 2 else 2.0) for i in range(3)]
    assert bench.SETTLE == 2
    assert bench._settled_medians(recs) == {"bs": {300.0: [3.0], 1000.0: [1.0, 2.0]}}


@pytest.mark.parametrize("summary", [None, {"arch": "allreduce", "grid": {}}])
def test_compare_ps_refuses_a_directory_that_is_not_a_ps_run(bench, tmp_path, summary):
    run = tmp_path / "run"
    run.mkdir()
    if summary is not None:  # an all-reduce bench's output
        (run / "summary.json").write_text(json.dumps(summary))
        (run / "iterations.csv").write_text("method,iteration,rate_mbit,seconds,samples_per_s,partition_bytes,credit_bytes\n")
    with pytest.raises(ValueError, match=r"run_dir must be an 'autobyte bench --arch ps' output .* but got run_dir='.*'\."):
        bench.main(["compare-ps", str(run), "--out", str(tmp_path)])


def test_calibrated_ps_cluster_updates_on_the_servers_and_fit_checks_arch(cal):
    from autobyte.core import Config

    SimParams, fit = cal.SimParams, cal.fit

    c = SimParams(update_Bps=3e8).cluster(1000, arch="ps")
    assert c.arch == "ps" and c.ps_aggregate_Bps == 3e8
    assert SimParams().cluster(1000).arch == "allreduce"
    with pytest.raises(ValueError, match=r"arch must be one of \('allreduce', 'ps'\), but got arch='ring'\."):
        fit(None, [(1000.0, Config(1 << 20, 1 << 20), 1.0)], arch="ring")


def test_compare_points_a_ps_run_to_compare_ps(bench, tmp_path):
    run = tmp_path / "ps_run"
    run.mkdir()
    (run / "summary.json").write_text(json.dumps({"arch": "ps", "grid": {}}))  # a parameter-server bench, not a suite
    with pytest.raises(ValueError, match=r"run_dir must be an 'autobyte bench --suite' output .*ps_run'.*use compare-ps"):
        bench.main(["compare", str(run), "--out", str(tmp_path)])


def test_condition_keys_give_the_rate_and_each_workers_slowdown(bench):
    assert bench._condition("1000mbit") == (1000.0, (1.0, 1.0))
    assert bench._condition("800mbit-slow2") == (800.0, (1.0, 2.0))  # rank 1 alone: the key of the full suite's straggler
    assert bench._condition("667mbit-slow3-r01") == (667.0, (3.0, 3.0))  # jobs joining every worker (Fig. 7)
    assert bench._slow((1000.0, (1.0, 1.0))) is None and bench._slow((667.0, (3.0, 3.0))) == [3.0, 3.0]
    for key in ("600mbit-flow", "2000mbit-up1_250"):
        with pytest.raises(ValueError, match=rf"the simulator has no competing flow or asymmetric link\), but got condition='{key}'\."):
            bench._condition(key)


def test_a_slowed_worker_slows_the_simulated_iteration_and_bad_slowdowns_are_refused(cal):
    from autobyte.bench.emulation import Emulation
    from autobyte.core import Config

    SimParams, fit, simulate_iter_s = cal.SimParams, cal.fit, cal.simulate_iter_s

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
