"""``autobyte bench --arch ps``: every method on a real MXNet dist_sync job (servers co-located) on the testbed, and its errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autobyte.bench import _real
from autobyte.bench._real import BenchPlan, check_arch_methods
from autobyte.core import KiB, MiB, Config

ROOT = Path(__file__).resolve().parents[2]


def test_plan_errors_name_the_argument_and_the_other_architecture():
    with pytest.raises(ValueError, match=r"arch must be one of \('allreduce', 'ps'\), but got arch='ring'"):
        BenchPlan(arch="ring")
    with pytest.raises(ValueError, match=r"methods must be a non-empty subset of .*'dist_sync'.* with arch='ps', "
                                         r"but got \['ddp'\] \('ddp' is the baseline of arch='allreduce'\)"):
        BenchPlan(arch="ps", methods=["ddp"])
    with pytest.raises(ValueError, match=r"'dist_sync' is the baseline of arch='ps'"):
        check_arch_methods("allreduce", ["dist_sync"])
    with pytest.raises(ValueError, match=r"grid must be a non-empty list of configs or None, but got grid=\[\]"):
        BenchPlan(arch="ps", grid=[])
    assert BenchPlan(arch="ps").methods == _real.PS_METHODS  # the default methods follow the architecture
    assert BenchPlan().methods == _real.METHODS


@pytest.mark.integration
@pytest.mark.root
@pytest.mark.slow
def test_ps_bench_runs_every_method_through_the_cli(tmp_path, monkeypatch):
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")
    pytest.importorskip("mxnet")
    from autobyte.cli import main

    # two grid configs instead of fifteen: the oracle, hindsight and their grids still run for real
    grid = [Config.from_multiple(256 * KiB, 1), Config.from_multiple(4 * MiB, 4)]
    monkeypatch.setattr(_real, "_grid", lambda: grid)
    out = tmp_path / "b"
    rc = main(["bench", "--arch", "ps", "--low-mbit", "200", "--high-mbit", "1000", "--every", "3", "--iters", "6",
               "--bo-iters", "4", "--grid-iters", "1", "--out", str(out)])
    assert rc == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["arch"] == "ps"
    assert set(summary["throughput"]) == set(_real.PS_METHODS)
    for m, t in summary["throughput"].items():
        assert t["all"] > 0 and t["low"] > 0 and t["high"] > 0, (m, t)
    assert summary["vs_dist_sync"]["dist_sync"]["all"] == 1.0
    assert summary["hindsight_config"] in [[c.partition_bytes, c.credit_bytes] for c in grid]
    assert {k for k in summary["oracle_configs"]} == {"1000", "200"}
    for m in _real.PS_METHODS:
        d = out / f"run_{m}"
        rows = [json.loads(line) for line in (d / "iterations.jsonl").read_text().splitlines()]
        assert [r["iteration"] for r in rows] == list(range(6)), m
        assert all(r["seconds"] > 0 for r in rows)
        ranks = [json.loads((d / f"rank{r}.json").read_text()) for r in (0, 1)]
        assert {r["rank"] for r in ranks} == {0, 1} and all(r["method"] for r in ranks)
        # plain dist_sync has no scheduler config; every scheduled method reports the one in force
        assert all((r["config"] is None) == (m == "dist_sync") for r in rows), m
    oracle = [json.loads(line) for line in (out / "run_oracle" / "iterations.jsonl").read_text().splitlines()]
    best = summary["oracle_configs"]
    assert Config(*oracle[0]["config"]).to_dict() == best["1000"] and Config(*oracle[4]["config"]).to_dict() == best["200"]
    sweep = [json.loads(line) for line in (out / "grid_200mbit" / "sweep.jsonl").read_text().splitlines()]
    assert [s["config"] for s in sweep] == [[c.partition_bytes, c.credit_bytes] for c in grid]
    # the trace switched at its iteration boundaries (the events of the run follow rank 0's notices)
    events = [json.loads(line) for line in (out / "run_dist_sync" / "events.jsonl").read_text().splitlines()]
    assert any(e.get("iteration") == 3 for e in events)
    assert (out / "summary.md").read_text().count("| dist_sync |") == 1


def test_hindsight_is_the_config_with_the_shortest_predicted_trace():
    a, b, c = Config.from_multiple(MiB, 1), Config.from_multiple(4 * MiB, 1), Config.from_multiple(16 * MiB, 2)
    plan = BenchPlan(arch="ps", low_mbit=100, high_mbit=1000, every=2, iters=6)  # 4 fast iterations, 2 slow
    # a: best when fast, worst when slow; c: best when slow; b: second everywhere
    grid = {1000.0: {a: 100.0, b: 90.0, c: 50.0}, 100.0: {a: 10.0, b: 30.0, c: 40.0}}
    # predicted seconds: a 4/100+2/10 = 0.24, b 4/90+2/30 = 0.111, c 4/50+2/40 = 0.13
    assert _real.hindsight_config(plan, grid) == b
    grid[100.0][c] = 100.0  # c now 0.08 + 0.02 = 0.10
    assert _real.hindsight_config(plan, grid) == c


@pytest.mark.integration
def test_the_emulated_ps_model_gives_one_loss_per_sample_as_the_handler_counts_them():
    # AutoByteHandler.batch_end counts a batch's samples from the losses' first dimension (Gluon's convention);
    # a scalar loss made the tuner see one sample per iteration (speeds 64x low) before 2026-11-24.
    # In a child process: MXNet's engine threads and fork handlers must not live in the test process, whose
    # later tests fork network-namespace workers (a fork there then hangs).
    pytest.importorskip("mxnet")
    code = (
        "import mxnet as mx\nfrom mxnet import autograd, gluon\nfrom autobyte.bench import ps_ranks\n"
        "spec = {'model': 'emu:alexnet', 'compute_scale': 1}\nbs = ps_ranks.batch_size(spec)\n"
        "net, batches, loss_fn = ps_ranks._model(mx, gluon, spec, 'emu:alexnet', bs, 0)\nx, y = batches[0]\n"
        "with autograd.record():\n    loss = loss_fn(net(x), y)\nloss.backward()\n"
        "import json, os\nprint(json.dumps([bs, list(loss.shape), sum(int(l.shape[0]) for l in [loss])]), flush=True)\n"
        "os._exit(0)\n"  # MXNet's custom-operator threads can hang an interpreter's normal exit
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert res.returncode == 0, res.stderr[-3000:]
    bs, shape, counted = json.loads(res.stdout.strip().splitlines()[-1])
    assert bs > 1 and shape == [bs] and counted == bs, res.stdout


@pytest.mark.integration
def test_a_slowed_emulated_worker_sleeps_every_layer_longer_backward_included():
    """The slowdown scales each emulated layer's sleeps (a host sleep before the iteration would overlap MXNet's
    asynchronous backward of the previous one and slow the worker by less than asked)."""
    import time

    mx = pytest.importorskip("mxnet")
    from mxnet import autograd, gluon

    from autobyte.bench import ps_ranks
    from autobyte.bench.emulation import Emulation

    spec = {"model": "emu:densenet121", "compute_scale": 2.0, "batch_size": 32}
    net, batches, loss_fn = ps_ranks._model(mx, gluon, spec, "emu:densenet121", 32, 0)
    emu = Emulation("emu:densenet121", 2.0, 32)

    def step() -> float:  # forward and backward until every gradient is written
        x, y = batches[0]
        t0 = time.perf_counter()
        with autograd.record():
            loss = loss_fn(net(x), y)
        loss.backward()
        for prm in net.collect_params().values():
            prm.grad().wait_to_read()
        return time.perf_counter() - t0

    step()
    base, slow = [], []
    for _ in range(3):  # interleaved, so a slow spell of the machine falls on both factors
        net.time_factor = 1.0
        base.append(step())
        net.time_factor = 3.0
        slow.append(step())
    # the custom operators' own cost (121 layers, a Python callback each; 0.35 s on a slow CI machine, with its own
    # jitter) comes on top of the sleeps, alike at both factors: the slowed step is longer by about two more emulated
    # computes (a slowdown that did not reach the layers' sleeps would add none)
    assert min(base) >= 0.95 * emu.compute_s, (emu.compute_s, base)
    assert min(slow) - min(base) >= 1.5 * emu.compute_s, (emu.compute_s, base, slow)


def test_a_sweep_measures_no_config_on_the_jobs_first_iterations():
    # the first iteration after the start is short (the start's set-up is timed in iteration 0): a sweep
    # starts every config's warm-up after a start iteration, so the first config is not measured on it
    from autobyte.bench._rank_plan import START_ITERS, iteration_plan

    spec = {"method": "sweep", "configs": [[1 << 20, 1 << 20], [4 << 20, 16 << 20]], "iters_per_config": 3, "warmup": 1}
    n, switch, sweep = iteration_plan(spec)
    assert START_ITERS == 1 and n == 1 + 2 * 4
    assert [first for first, _ in sweep] == [1, 5] and switch == dict(sweep)
    # measured: iterations first + warmup .. first + per - 1, i.e. 2-4 and 6-8: never iteration 1
    assert [list(range(f + 1, f + 4)) for f, _ in sweep] == [[2, 3, 4], [6, 7, 8]]
