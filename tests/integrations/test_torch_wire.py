"""16-bit gradients on the wire (``schedule(wire=...)``): 2 real CPU ranks on gloo.

The engine at ``wire="bf16"``/``"fp16"`` must train to the weights of DDP with the
same-precision compression hook (the same numerics), a wire change mid-run must
apply at its agreed iteration with no update lost or doubled, and fp16's
overflow must behave as docs/torch.md says.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from autobyte.core import KiB  # noqa: E402
from autobyte.integrations.torch import schedule  # noqa: E402
from autobyte.testing import run_ranks  # noqa: E402

SCRIPT = str(Path(__file__).parent / "scripts" / "torch_wire.py")


def run(tmp_path, scenario: str, device: str = "cpu") -> tuple[list[dict[str, np.ndarray]], list[dict]]:
    res = run_ranks([SCRIPT, str(tmp_path), scenario, *(["cuda"] if device == "cuda" else [])], 2, timeout_s=300)
    for r in res:
        assert r.returncode == 0, r.stderr[-3000:]
    arrays = []
    for r in range(2):
        with np.load(tmp_path / f"rank{r}.npz") as z:
            arrays.append({k: z[k] for k in z.files})
    return arrays, [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]


def params(arrays: dict[str, np.ndarray], name: str) -> list[np.ndarray]:
    return [arrays[k] for k in sorted((k for k in arrays if k.startswith(name + "_p")), key=lambda k: int(k.rsplit("p", 1)[1]))]


def gap(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    assert len(a) == len(b) > 0
    return max(float(np.max(np.abs(x - y))) for x, y in zip(a, b))


@pytest.mark.integration
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA GPU; none lent to this run")])])
def test_16_bits_train_to_the_weights_of_ddp_with_the_same_precision_hook(tmp_path, device):
    # on cuda: 2 ranks share GPU 0, gloo with CUDA tensors (the casts and divisions on the GPU, the sums in gloo)
    arrays, _ = run(tmp_path, "hooks", device)
    for a in arrays:
        for wire in ("bf16", "fp16"):
            hook = params(a, f"ddp_{wire}")
            # 16 bits on the wire do change the result: the comparison below can fail
            assert gap(hook, params(a, "ddp_fp32")) > 1e-5, wire
            for run_name in ("split", "fused", "sync"):
                mine = params(a, f"{run_name}_{wire}")
                # the same numerics elementwise (cast, divided, summed in 16 bits, cast back): with two
                # ranks every element's sum is one rounding, so 12 SGD steps end bit for bit on the hook's
                assert gap(mine, hook) == 0.0, (wire, run_name, gap(mine, hook))
                assert gap(mine, params(a, "ddp_fp32")) > 1e-5, (wire, run_name)
    for name in arrays[0]:
        if not name.startswith("ddp"):
            np.testing.assert_array_equal(arrays[0][name], arrays[1][name])  # every rank holds the same weights


@pytest.mark.integration
def test_a_wire_change_mid_run_applies_at_its_iteration_and_loses_no_update(tmp_path):
    arrays, info = run(tmp_path, "switch")
    for a, i in zip(arrays, info):
        ref = params(a, "reference")
        # the reference that switches one iteration late, and the one that never switches, are told apart
        assert gap(ref, params(a, "reference_late")) > 1e-5
        assert gap(ref, params(a, "all_fp32")) > 1e-5
        for overlap in (True, False):
            mine = params(a, f"switch_{overlap}")
            assert gap(mine, ref) == 0.0, (overlap, gap(mine, ref))
            # the scheduler switched precisely at the agreed iterations
            assert [h[:2] for h in i[f"switch_{overlap}"]["history"]] == [[0, "fp32"], [4, "bf16"], [8, "fp32"]]
            assert i[f"switch_{overlap}"]["config"] == {"partition_bytes": 4 * KiB, "credit_bytes": 8 * KiB}
        # a tuner that knows nothing of the wire moves partition and credit; the job's precision stays
        tuned = i["tuned"]
        assert tuned["config"] == {"partition_bytes": 64 * KiB, "credit_bytes": 128 * KiB, "wire": "bf16"}
        moves = [r for r in tuned["reconfigurations"] if r["reason"] == "scripted switch"]
        assert len(moves) == 1 and moves[0]["new"]["wire"] == "bf16" and moves[0]["old"]["wire"] == "bf16"
        assert all("wire" not in c for c in tuned["tuner_configs"])  # the tuner saw fp32 configurations
        assert gap(params(a, "tuned"), params(a, "tuned_reference")) == 0.0
        # wire="auto": the run started at bf16, the tuner measured it, then tried fp32 from an agreed iteration (at a
        # check or a window's end), or kept bf16 without a trial where they kept the link busy; what it chooses
        # depends on this host's timing (tests/core/test_auto_wire.py checks the choice); every step at its precision
        auto = i["auto"]
        assert auto["wires"][0] == "bf16" and "" not in auto["wires"], auto
        if "fp32" in auto["wires"]:
            assert auto["reasons"][0].startswith("wire trial, for exactness: fp32 against bf16"), auto
        elif i is info[0]:  # the tuner decides on rank 0: bf16 kept without a trial is in its log
            assert auto["choices"] and "fp32 not measured" in auto["choices"][0], auto
        assert gap(params(a, "auto"), params(a, "auto_reference")) == 0.0
    assert info[0]["auto"]["wires"] == info[1]["auto"]["wires"]  # one schedule of precisions on every rank
    np.testing.assert_array_equal(arrays[0]["auto_p0"], arrays[1]["auto_p0"])


@pytest.mark.integration
def test_fp16_overflows_where_the_average_does_and_the_update_carries_it(tmp_path):
    arrays, _ = run(tmp_path, "overflow")
    for a in arrays:
        # both ranks' gradients are 1e5: the average is above fp16's 65504
        assert np.isinf(params(a, "average_fp16")[0]).all()
        assert not np.isfinite(params(a, "average_ddp")[0]).any()  # the hook's as well
        for wire in ("bf16", "fp32"):
            np.testing.assert_allclose(params(a, f"average_{wire}")[0], 1 - 1e-6 * 1e5, rtol=1e-2)
        # one rank's gradient is 1e5, the other's -0.9e5: the average (5e3) fits. The engine divides
        # by the world size before the cast and stays finite; the hook casts first and overflows
        np.testing.assert_allclose(params(a, "one_rank_fp16")[0], 1 - 1e-6 * 5e3, rtol=1e-3)
        assert not np.isfinite(params(a, "one_rank_ddp")[0]).any()


# --------------------------------------------------------------- single process


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))


@pytest.mark.parametrize("wire, exc", [("int8", ValueError), ("FP16", ValueError), ("", ValueError), (16, TypeError),
                                       (None, TypeError)])
def test_bad_wire_is_refused_in_one_line(wire, exc):
    m = _model()
    with pytest.raises(exc, match=r"^wire must be one of 'fp32', 'bf16', 'fp16', 'auto' or an AutoWire, but got wire=") as info:
        schedule(m, torch.optim.SGD(m.parameters(), lr=0.1), wire=wire)
    assert "\n" not in str(info.value) and repr(wire) in str(info.value)


def test_world_size_one_plans_the_wire_bytes():
    m = _model()
    n = sum(p.numel() for p in m.parameters())
    for wire, size in (("fp32", 4), ("bf16", 2), ("fp16", 2)):
        h = schedule(m, torch.optim.SGD(m.parameters(), lr=0.1), wire=wire, verbose=False)
        assert h.config.wire == wire and h.bytes_per_iteration == size * n
        assert {msg.dtype for msg in h.scheduler.messages} == {"float32" if wire == "fp32" else {"bf16": "bfloat16", "fp16": "float16"}[wire]}
        h.close()
