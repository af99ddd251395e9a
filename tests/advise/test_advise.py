"""``autobyte.advise`` and ``autobyte advise``: the numbers are the simulator's, bad inputs fail clearly."""

from __future__ import annotations

import json
import os
import sys
from importlib import resources

import numpy as np
import pytest

import autobyte
from autobyte import advise_from_windows
from autobyte._advise import profile_from_windows
from autobyte.core.space import Config
from autobyte.sim import GBPS, Cluster, get_model, simulate, simulate_ddp

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def advice():
    return autobyte.advise("resnet50", n_workers=4, bandwidth_gbps=5, sensitivity=[2.5, 5, 10])


def test_predictions_come_from_the_simulator(advice):
    c = advice.cluster
    assert c.n_workers == 4 and float(c.bw_up_Bps[0]) == 5 * GBPS and c.jitter == 0
    m = get_model("resnet50")
    step = advice.compute.iter_time_s - m.compute_s
    kw = dict(step_s=step, n_iters=3, warmup_iters=1)
    dflt = simulate_ddp(m, c, None, **kw)
    assert advice.ddp_default.samples_per_s == pytest.approx(dflt.samples_per_s, rel=1e-12)
    assert advice.ddp_default.iter_time_s == pytest.approx(float(dflt.iter_time_s.mean()), rel=1e-12)
    for p in advice.ddp:
        cap = None if p.label == "default" else float(p.label)
        assert p.samples_per_s == pytest.approx(simulate_ddp(m, c, cap, **kw).samples_per_s, rel=1e-12)
    # the advice is the simulator's best (or the default, when within 1% of it)
    best = max(p.samples_per_s for p in advice.ddp)
    assert advice.ddp_best.samples_per_s >= best * 0.99
    if advice.bucket_cap_mb is not None:
        assert advice.ddp_best.samples_per_s == pytest.approx(best)
    eng = simulate(m, c, advice.engine_config, n_iters=3, warmup_iters=1)
    assert advice.engine.samples_per_s == pytest.approx(eng.samples_per_s, rel=1e-12)
    assert advice.compute.samples_per_s == pytest.approx(4 * m.batch_size / (m.compute_s + step))
    assert "simulator" in advice.sources["every iteration time and samples/s above"]
    assert [r.bandwidth_gbps for r in advice.sensitivity] == [2.5, 5, 10]
    row = advice.sensitivity[1]  # the same bandwidth as the advice
    assert row.ddp_samples_per_s == pytest.approx(advice.ddp_best.samples_per_s)
    assert row.engine_config == advice.engine_config


def test_screen_and_json(advice):
    text = str(advice)
    assert "DistributedDataParallel(model, " in text and "sensitivity to bandwidth" in text
    assert "compute only" in text and "sources:" in text
    assert len(text.splitlines()) < 45  # one screen
    d = advice.to_dict()
    json.dumps(d)
    assert d["ddp_args"] == advice.ddp_args()
    assert d["engine_config"] == advice.engine_config.to_dict()


def test_slow_link_prefers_fewer_buckets_to_the_default_and_says_by_how_much():
    # densenet121 at 1 Gbit/s with a 2 ms per-bucket cost: the default's small first bucket and many
    # 25 MiB buckets are not what the simulator picks
    a = autobyte.advise("bert-base", n_workers=8, bandwidth_gbps=25, per_message_s=2e-3, sensitivity=False, engine=False)
    assert a.ddp_gain >= 1.0
    if a.bucket_cap_mb is not None:
        assert a.ddp_gain > 1.01 and f"{a.ddp_gain:.2f}x" in str(a)


def test_the_shipped_calibration_sets_the_link_model(tmp_path):
    a = autobyte.advise("alexnet", n_workers=2, bandwidth_gbps=1, calibration="testbed", sensitivity=False, engine=False)
    p = json.loads((resources.files("autobyte.sim") / "data" / "calibration.json").read_text())["params"]
    assert a.cluster.per_message_s == pytest.approx(p["per_message_s"])
    assert a.cluster.latency_s == pytest.approx(p["latency_s"])
    assert float(a.cluster.bw_up_Bps[0]) < 1 * GBPS * 1.0001
    assert "calibrated" in a.sources["link"]
    own = tmp_path / "calib_params.json"  # one fitted on the user's network: the same file format
    own.write_text(json.dumps({"params": {**p, "per_message_s": 2 * p["per_message_s"]}}))
    b = autobyte.advise("alexnet", n_workers=2, bandwidth_gbps=1, calibration=str(own), sensitivity=False, engine=False)
    assert b.cluster.per_message_s == pytest.approx(2 * p["per_message_s"])


def test_module_is_profiled_here():
    torch = pytest.importorskip("torch")
    from autobyte.bench.models import make_cnn

    model = make_cnn()
    before = [p.detach().clone() for p in model.parameters()]
    a = autobyte.advise(model, torch.randn(4, 3, 32, 32), n_workers=2, bandwidth_gbps=1, sensitivity=False,
                        engine=False, profile_runs=1)
    assert a.model.batch_size == 4 and a.model.total_bytes == 4 * sum(p.numel() for p in model.parameters())
    assert "measured on this machine" in a.sources["compute"] and "measured" in a.sources["optimizer step"]
    assert all(torch.equal(b, p) for b, p in zip(before, model.parameters()))  # profiling changed nothing
    assert all(p.grad is None for p in model.parameters())


def test_module_that_cannot_be_profiled_fails_clearly():
    torch = pytest.importorskip("torch")
    with pytest.raises(ValueError, match="cannot profile the model: module must have at least one trainable parameter"):
        autobyte.advise(torch.nn.ReLU(), torch.randn(2, 3), n_workers=2, bandwidth_gbps=1)
    with pytest.raises(ValueError, match="cannot profile the model: running it on example_input failed with RuntimeError"):
        autobyte.advise(torch.nn.Linear(3, 2), torch.randn(2, 5), n_workers=2, bandwidth_gbps=1)
    with pytest.raises(ValueError, match="example_input must be one batch"):
        autobyte.advise(torch.nn.Linear(3, 2), n_workers=2, bandwidth_gbps=1)


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"n_workers": 1}, "n_workers must be an integer >= 2, but got n_workers=1"),
        ({"n_workers": 2.0}, "n_workers must be an integer >= 2"),
        ({"bandwidth_gbps": 0}, "bandwidth_gbps must be a positive number of Gbit/s, but got bandwidth_gbps=0"),
        ({"bandwidth_gbps": float("inf")}, "bandwidth_gbps must be a positive number"),
        ({"latency_s": -1e-6}, "latency_s must be a finite non-negative number of seconds"),
        ({"arch": "ring"}, "arch must be one of"),
        ({"batch_size": 0}, "batch_size must be a positive integer, but got batch_size=0"),
        ({"compute_scale": 0}, "compute_scale must be a positive number"),
        ({"per_message_s": -1.0}, "per_message_s must be a finite non-negative number"),
        ({"step_s": float("nan")}, "step_s must be a finite non-negative number"),
        ({"bucket_caps_mb": []}, "bucket_caps_mb must be a non-empty list of positive MiB"),
        ({"bucket_caps_mb": [4, 0]}, "bucket_caps_mb must be a non-empty list of positive MiB"),
        ({"sensitivity": [1, -2]}, "sensitivity must be True, False or a list of positive Gbit/s"),
        ({"profile_runs": 0}, "profile_runs must be a positive integer"),
        ({"n_workers": 100_000_000}, r"n_workers must be an integer in \[2, 4096\], but got n_workers=100000000"),
        ({"first_bucket_mb": 0}, "first_bucket_mb must be a positive number of MiB, but got first_bucket_mb=0"),
        ({"cluster_kwargs": {"n_workers": 3}}, "cluster_kwargs must not set n_workers"),
        ({"cluster_kwargs": {"bogus": 1}}, "cluster_kwargs must hold Cluster arguments only"),
        ({"cluster_kwargs": {"contention": -1}}, "contention must be a finite non-negative number"),
        ({"calibration": "/nonexistent/calib.json"}, "calibration must be 'testbed' or a readable calib_params.json"),
        ({"calibration": {"latency_s": -1}}, r"calibration\['latency_s'\] must be a finite non-negative number"),
        ({"example_input": 3}, "example_input is only for a torch.nn.Module"),
        ({"device": "a100"}, r"device must be one of \['v100'\] \(or None to measure on this machine\), but got device='a100'"),
    ],
)
def test_bad_arguments(kw, match):
    args = {"n_workers": 2, "bandwidth_gbps": 1.0, "sensitivity": False, "engine": False}
    args.update(kw)
    with pytest.raises(ValueError, match=match):
        autobyte.advise("alexnet", **args)


def test_bad_model():
    with pytest.raises(ValueError, match="name must be one of"):
        autobyte.advise("resnet9000", n_workers=2, bandwidth_gbps=1)
    with pytest.raises(TypeError, match="model must be a zoo name"):
        autobyte.advise(42, n_workers=2, bandwidth_gbps=1)


def test_ps_advises_the_engine_only():
    a = autobyte.advise("vgg16", n_workers=4, bandwidth_gbps=10, arch="ps", sensitivity=[10])
    assert a.ddp_best is None and a.engine_config is not None
    assert "DDP all-reduces" in a.notes[0]
    str(a)


# ------------------------------------------------------------------ from a running job's windows
def _recorded_windows():
    """Window statistics as an engine records them (the simulator's, 2 workers, 1 Gbit/s)."""
    m = get_model("alexnet")
    r = simulate(m, Cluster.from_gbps(2, 1), Config(4 << 20, 16 << 20), n_iters=10)
    return m, r.window_stats()


def test_profile_from_windows():
    m, ws = _recorded_windows()
    p = profile_from_windows(ws, m.layer_bytes)
    assert p.batch_size == m.batch_size
    assert np.allclose(p.backward_s, np.mean([w.layer_backward_s for w in ws], axis=0))
    assert p.forward_s.sum() == pytest.approx(np.mean([w.forward_s for w in ws]))


def test_advise_from_windows_measures_the_link():
    m, ws = _recorded_windows()
    a = advise_from_windows(ws, m.layer_bytes, n_workers=2, sensitivity=False, engine=False)
    bw = float(a.cluster.bw_up_Bps[0]) / GBPS
    assert 0.5 < bw <= 1.0  # achieved goodput of a 1 Gbit/s link
    assert "measured in the window" in a.sources["bandwidth"] and "running job" in a.sources["compute"]
    b = advise_from_windows(ws, m.layer_bytes, n_workers=2, bandwidth_gbps=1.0, sensitivity=False, engine=False)
    assert float(b.cluster.bw_up_Bps[0]) == 1.0 * GBPS


def test_advise_from_windows_bad_inputs():
    m, ws = _recorded_windows()
    with pytest.raises(ValueError, match="windows must be a non-empty list of WindowStats"):
        advise_from_windows([], m.layer_bytes, n_workers=2)
    with pytest.raises(ValueError, match="one backward time per tensor"):
        advise_from_windows(ws, m.layer_bytes[:-1], n_workers=2)
    with pytest.raises(ValueError, match="n_workers must be an integer >= 2"):
        advise_from_windows(ws, m.layer_bytes, n_workers=1)


# ------------------------------------------------------------------ CLI
class _Run:
    def __init__(self, returncode: int, stdout: str, stderr: str) -> None:
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


@pytest.fixture()
def _cli(capsys):
    """``autobyte advise ARGS`` in this process (the entry point as a process: tests/test_cli_errors.py)."""
    from autobyte.cli import main

    def run(*args):
        rc = main(["advise", *args])
        out, err = capsys.readouterr()
        return _Run(rc, out, err)

    return run


def test_cli_smoke(_cli):
    r = _cli("--model", "alexnet", "--workers", "4", "--bandwidth-gbps", "2", "--sensitivity", "1,2,4")
    assert r.returncode == 0, r.stderr
    assert "DistributedDataParallel(model, " in r.stdout and "autobyte: partition_bytes=" in r.stdout
    r = _cli("--model", "alexnet", "--workers", "4", "--bandwidth-mbit", "2000", "--no-sensitivity", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["bandwidth_gbps"] == pytest.approx(2.0) and d["n_workers"] == 4 and d["sensitivity"] == []


def test_cli_profiles_a_module(_cli):
    pytest.importorskip("torch")
    r = _cli("--module", "autobyte.bench.models:make_cnn", "--input-shape", "4,3,32,32", "--workers", "2",
             "--bandwidth-mbit", "1000", "--calibration", "testbed", "--no-sensitivity", "--no-engine")
    assert r.returncode == 0, r.stderr
    assert "measured on this machine" in r.stdout


@pytest.mark.parametrize(
    "args, match",
    [
        (["--workers", "1"], "--workers must be an integer >= 2, but got --workers=1."),
        # refused before simulating: 10^8 workers once asked numpy for 161 GiB (a traceback), 5000 ran for minutes
        (["--workers", "100000000"], "--workers must be an integer in [2, 4096], but got --workers=100000000."),
        (["--workers", "5000"], "--workers must be an integer in [2, 4096], but got --workers=5000."),
        (["--profile-runs", "0"], "--profile-runs must be a positive integer, but got --profile-runs=0."),
        (["--compute-scale", "nan"], "--compute-scale must be a positive number, but got --compute-scale=nan."),
        (["--batch-size", "0"], "--batch-size must be a positive integer, but got --batch-size=0."),
        (["--input-int", "0"], "--input-shape and --input-int go with --module"),
        (["--bandwidth-gbps", "0"], "--bandwidth-gbps must be a positive number, but got --bandwidth-gbps=0.0."),
        (["--bandwidth-mbit", "-5"], "--bandwidth-mbit must be a positive number"),
        (["--latency-us", "-1"], "--latency-us must be a non-negative number"),
        (["--first-bucket-mb", "0"], "--first-bucket-mb must be a positive number"),
        (["--caps", "4,x"], "--caps must be a comma-separated list of positive numbers"),
        (["--sensitivity", "0"], "--sensitivity must be a comma-separated list of positive numbers"),
        (["--model", "nosuchnet"], "--model must be one of alexnet, bert-base, "),
        (["--module", "nosuchpkg:make"], "--module must name an importable factory"),
        (["--module", "autobyte.bench.models:make_cnn"], "--input-shape must be given with --module"),
        (["--module", "autobyte.bench.models:make_cnn", "--input-shape", "4,a"], "--input-shape must be comma-separated positive integers"),
        (["--module", "autobyte.bench.models:make_cnn", "--input-shape", "4,5"], "cannot profile the model"),
        (["--input-shape", "4,5"], "--input-shape and --input-int go with --module"),
        (["--device", "v100"], "--device goes with --module"),
        (["--module", "autobyte.bench.models:make_cnn", "--input-shape", "4,3,32,32", "--device", "tpu"], "device must be one of ['v100']"),
        (["--calibration", "/nonexistent.json"], "calibration must be 'testbed' or a readable calib_params.json"),
        (["--wire16", "fp32"], "--wire16 must be one of bf16, fp16, none, but got --wire16='fp32'."),
    ],
)
def test_cli_errors_are_one_line_with_exit_2(_cli, args, match):
    r = _cli(*args, "--no-sensitivity", "--no-engine")
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("autobyte advise: error: "), r.stderr
    assert match in lines[0]


def test_public_names():
    from autobyte import Advice, advise

    assert advise is autobyte.advise and isinstance(autobyte.advise("alexnet", n_workers=2, bandwidth_gbps=1, sensitivity=False,
                                                                    engine=False), Advice)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        autobyte.nope  # noqa: B018


def test_among_equal_predictions_the_fewest_buckets():
    from autobyte.sim import ModelProfile

    mib = 1 << 20
    # the first layer's 8 MiB bucket goes last whatever the size; the 1 MiB layers' buckets all hide
    # behind a long backward, so 1 MiB (7 buckets) and 2 MiB (4 buckets) are predicted equal
    lb = np.array([8 * mib] + [mib] * 6)
    m = ModelProfile("toy", lb, np.full(7, 0.01), np.full(7, 0.05), 16, device="test")
    a = autobyte.advise(m, n_workers=2, bandwidth_gbps=1, latency_s=0, per_message_s=0, bucket_caps_mb=[1, 2],
                        step_s=0.0, sensitivity=False, engine=False)
    by = {p.label: p.samples_per_s for p in a.ddp}
    assert by["1"] == pytest.approx(by["2"], rel=1e-9) and by["default"] < by["1"] * 0.99
    assert a.bucket_cap_mb == 2 and "(4 buckets)" in a.ddp_best.label


def test_first_bucket_fixed_for_older_pytorch():
    kw = dict(n_workers=8, bandwidth_gbps=10, sensitivity=False, engine=False)
    a = autobyte.advise("densenet121", first_bucket_mb=1, **kw)
    m, c = a.model, a.cluster
    step = a.compute.iter_time_s - m.compute_s
    for p in a.ddp[1:]:
        want = simulate_ddp(m, c, float(p.label), first_bucket_mb=1, step_s=step, n_iters=3, warmup_iters=1)
        assert p.samples_per_s == pytest.approx(want.samples_per_s, rel=1e-12)
    assert a.first_bucket is None and "first bucket fixed at 1 MiB" in " ".join(a.notes)


def test_module_on_a_named_device_matches_the_zoo():
    """A real ResNet-50 module on device='v100' (FLOPs counted, roofline) against the zoo's hand-written one."""
    torch = pytest.importorskip("torch")
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    try:
        from bench_advise import resnet50
    finally:
        sys.path.pop(0)
    model = resnet50()
    a = autobyte.advise(model, torch.randn(64, 3, 224, 224), n_workers=8, bandwidth_gbps=10, device="v100",
                        sensitivity=False, engine=False)
    z = get_model("resnet50")
    assert a.model.total_bytes == z.total_bytes and a.model.device == "V100"
    assert a.model.compute_s == pytest.approx(z.compute_s, rel=0.2)  # BN counted apart: more launches, more bytes
    assert "V100 roofline" in a.sources["compute"]
    # the zoo is V100 already: device="v100" changes nothing there
    zz = autobyte.advise("resnet50", n_workers=8, bandwidth_gbps=10, device="v100", sensitivity=False, engine=False)
    assert zz.model is z or zz.model.compute_s == z.compute_s
    with pytest.raises(ValueError, match="cannot profile the model: running it on example_input failed"):
        autobyte.advise(torch.nn.Linear(3, 2), torch.randn(2, 5), n_workers=2, bandwidth_gbps=1, device="v100")
