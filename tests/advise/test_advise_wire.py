"""``autobyte advise`` reports 16 bits on the wire: DDP + its compress hook and autobyte at ``wire=``, from the simulator."""

from __future__ import annotations

import json

import pytest

import autobyte
from autobyte.core.space import Config
from autobyte.sim import simulate, simulate_ddp

OLD_KEYS = {
    "model", "n_workers", "arch", "bandwidth_gbps", "latency_s", "per_message_s", "batch_size", "gradient_bytes", "n_layers",
    "bucket_cap_mb", "first_bucket_mb", "ddp_args", "ddp_gain_over_default", "ddp", "ddp_best", "ddp_default", "first_bucket",
    "engine_config", "engine", "compute", "sensitivity", "sources", "notes",
}


@pytest.fixture(scope="module")
def link_bound():
    return autobyte.advise("resnet50", n_workers=8, bandwidth_gbps=1, sensitivity=False)


def test_the_16_bit_predictions_are_the_simulators(link_bound):
    a = link_bound
    m, c = a.model, a.cluster
    step = a.compute.iter_time_s - m.compute_s
    hook = simulate_ddp(m, c, a.bucket_cap_mb, step_s=step, n_iters=3, warmup_iters=1, hook="bf16")
    assert a.ddp_hook is not None and a.ddp_hook.samples_per_s == pytest.approx(hook.samples_per_s, rel=1e-12)
    assert a.engine16_config is not None and a.engine16_config.wire == "bf16"
    eng = simulate(m, c, a.engine16_config, n_iters=3, warmup_iters=1)
    assert a.engine16 is not None and a.engine16.samples_per_s == pytest.approx(eng.samples_per_s, rel=1e-12)
    # on a 1 Gbit/s link half the bytes nearly double the speed, for both
    assert a.wire16_gain()["ddp"] > 1.7 and a.wire16_gain()["engine"] > 1.7


def test_text_carries_the_code_lines_the_verdict_and_the_numerics(link_bound):
    a = link_bound
    text = str(a)
    assert "16 bits:  DDP + hook: ddp_model.register_comm_hook(None, bf16_compress_hook)" in text
    c = a.engine16_config
    assert f'schedule(model, optimizer, partition_bytes={c.partition_bytes}, credit_bytes={c.credit_bytes}, wire="bf16")' in text
    assert "16 bits pay here" in text and "buy little" not in text
    assert "fp32's exponent range" in text and "8 bits of mantissa" in text
    assert "not bit-identical to fp32's" in text
    assert a.ddp_hook.label in text and a.engine16.label in text  # rows of the table
    assert "casts (16 bits)" in a.sources and "simulator default" in a.sources["casts (16 bits)"]


def test_json_keeps_the_old_keys_and_adds_the_16_bit_ones(link_bound):
    d = json.loads(json.dumps(link_bound.to_dict()))
    assert OLD_KEYS <= set(d)
    assert d["wire16"] == "bf16" and d["ddp_hook"]["samples_per_s"] == pytest.approx(link_bound.ddp_hook.samples_per_s)
    assert d["ddp_hook_code"].startswith("ddp_model.register_comm_hook(None, bf16_compress_hook)")
    assert d["engine16_config"]["wire"] == "bf16" and 'wire="bf16"' in d["engine16_code"]
    assert set(d["wire16_gain"]) == {"ddp", "engine"} and d["wire16_verdict"].startswith("16 bits pay here")
    assert "8 bits of mantissa" in d["wire16_safety"]


def test_compute_bound_says_16_bits_buy_little():
    a = autobyte.advise("resnet50", n_workers=8, bandwidth_gbps=400, sensitivity=False)
    v = a.wire16_verdict()
    assert v is not None and v.startswith("16 bits buy little here") and "compute-bound" in v and "keep fp32" in v
    assert all(g < 1.05 for g in a.wire16_gain().values())
    assert v in str(a)


def test_fp16_names_its_hook_and_its_overflow():
    a = autobyte.advise("alexnet", n_workers=4, bandwidth_gbps=5, sensitivity=False, engine=False, wire16="fp16")
    text = str(a)
    assert "fp16_compress_hook" in text and "65504" in text and "divided by the world size" in text
    assert a.engine16 is None and "autobyte:   schedule" not in text  # engine=False: DDP's line only
    assert a.to_dict()["engine16_code"] is None


def test_no_16_bit_lines_when_asked_for_none():
    a = autobyte.advise("alexnet", n_workers=4, bandwidth_gbps=5, sensitivity=False, wire16=None)
    assert "16 bits" not in str(a) and "casts (16 bits)" not in a.sources
    d = a.to_dict()
    assert d["wire16"] is None and d["ddp_hook"] is None and d["engine16"] is None and d["wire16_gain"] == {}


def test_ps_reports_the_engine_at_16_bits_only():
    a = autobyte.advise("vgg16", n_workers=4, bandwidth_gbps=5, arch="ps", sensitivity=False)
    assert a.ddp_hook is None and a.engine16 is not None and a.engine16_config == Config(
        a.engine16_config.partition_bytes, a.engine16_config.credit_bytes, "bf16")
    assert "compress_hook" not in str(a) and 'wire="bf16"' in str(a)


def test_the_testbed_calibration_sets_the_cast_rate():
    a = autobyte.advise("alexnet", n_workers=2, bandwidth_gbps=0.5, calibration="testbed", sensitivity=False, engine=False)
    assert 1e9 < a.cluster.cast_Bps < 100e9 and "calibrated" in a.sources["casts (16 bits)"]


@pytest.mark.parametrize("bad", ["fp32", "int8", "BF16", 16])
def test_bad_wire16_is_refused_in_one_line(bad):
    with pytest.raises(ValueError, match=rf"^wire16 must be 'bf16', 'fp16' or None \(no 16-bit prediction\), but got wire16={bad!r}\.$"):
        autobyte.advise("alexnet", n_workers=2, bandwidth_gbps=1, sensitivity=False, wire16=bad)
