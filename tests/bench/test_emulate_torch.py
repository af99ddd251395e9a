"""Emulated compute in torch (:mod:`autobyte.bench.emulate_torch`): sizes, timing, order, and real 2-rank averaging."""

from __future__ import annotations

import json
import os
import time

import pytest

torch = pytest.importorskip("torch")

from autobyte.bench.emulate_torch import EmulatedModel, expected_average, grad_pattern, make_emulated  # noqa: E402
from autobyte.bench.emulation import Emulation  # noqa: E402
from autobyte.testing import run_ranks  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def test_parameters_have_the_profiles_sizes_one_per_layer():
    e = Emulation("emu:resnet50", 10)
    m = EmulatedModel(e)
    sizes = [p.numel() for p in m.parameters()]
    assert sizes == e.layer_elements and len(sizes) == e.profile().n_layers
    assert sum(sizes) * 4 == e.total_bytes and all(p.dtype == torch.float32 for p in m.parameters())
    # one submodule per layer: the engine's per-module "wait for my update" hooks see a layer each
    assert [len(list(mod.parameters(recurse=False))) for mod in m.layers] == [1] * len(sizes)


def test_backward_takes_the_profiles_time_layer_by_layer_output_to_input():
    m = make_emulated("resnet50", 2.0)  # 54 layers, 0.15-25 ms of backward each, 0.23 s in all
    bwd = m.emulation.backward_s
    ready: list[tuple[int, float]] = []
    for i, p in enumerate(m.parameters()):
        p.register_post_accumulate_grad_hook(lambda p, i=i: ready.append((i, time.perf_counter())))
    for _ in range(2):  # the first backward pays the first touch of the gradients' memory
        ready.clear()
        m.backward_order.clear()
        for p in m.parameters():
            p.grad = None
        out = m()
        t0 = time.perf_counter()
        out.backward()
        took = time.perf_counter() - t0
    assert [i for i, _ in ready] == list(range(len(bwd) - 1, -1, -1)) == m.backward_order
    # A sleep never ends early: each gradient is ready no sooner than the cumulative backward time of the layers after
    # it, and the backward lasts at least the profile's. How much later depends on the shared machine's load (2-3x the
    # profile at a load of 4-5 on 2 cores), so no upper bound is asserted here: the emulation's accuracy is a
    # benchmark's figure (`benchmarks/bench_emulated.py sleep`).
    due = bwd[::-1].cumsum()
    at = [t - t0 for _, t in ready]
    assert all(d * 0.97 - 1e-3 <= a for d, a in zip(due, at)), list(zip(due, at))
    assert took >= bwd.sum() * 0.97, (took, bwd.sum())
    # and the gradients are the deterministic pattern of rank 0
    assert all(torch.equal(p.grad, grad_pattern(p.numel(), i, 0)) for i, p in enumerate(m.parameters()))


def test_example_input_makes_the_engine_count_the_profiles_batch():
    from autobyte.integrations._torch_setup import _batch_size

    m = EmulatedModel(Emulation("emu:densenet169", 10))
    x = m.example_input()
    assert x.numel() == 0 and _batch_size((x,), {}) == 32 == m.emulation.profile().batch_size
    assert _batch_size((), {"x": None}) == 1  # without it the tuner saw 1 sample per rank and iteration
    assert m(x).shape == ()


def test_forward_takes_the_profiles_time_and_time_factor_scales_it():
    m = make_emulated("alexnet", 1.0)
    f = m.emulation.forward_s.sum()
    t0 = time.perf_counter()
    m()
    one = time.perf_counter() - t0
    m.time_factor = 2.0
    t0 = time.perf_counter()
    m()
    two = time.perf_counter() - t0
    # sleeps never end early, and time_factor 2 sleeps at least twice the profile (no upper bound: see the backward test)
    assert one >= f * 0.97 and two >= 2 * f * 0.97, (f, one, two)


def test_rank_patterns_average_to_the_expected_gradient():
    a, b = grad_pattern(1000, 3, 0), grad_pattern(1000, 3, 1)
    assert torch.allclose((a + b) / 2, expected_average(1000, 3, 2)) and not torch.equal(a, b)


@pytest.mark.parametrize("kw, match", [
    ({"emulation": "resnet50"}, "emulation must be an autobyte.bench.emulation.Emulation, but got emulation='resnet50'"),
    ({"emulation": Emulation("alexnet"), "rank": -1}, "rank must be a non-negative integer, but got rank=-1"),
])
def test_bad_arguments_are_named(kw, match):
    with pytest.raises(ValueError, match=match):
        EmulatedModel(**kw)


@pytest.mark.integration
@pytest.mark.parametrize("mode", ["schedule", "ddp"])
def test_two_real_ranks_average_the_emulated_gradients(tmp_path, mode):
    res = run_ranks([os.path.join(HERE, "emulated_rank.py"), str(tmp_path), mode], 2, timeout_s=240)
    assert all(r.returncode == 0 for r in res), [r.stderr[-2000:] for r in res]
    out = json.loads((tmp_path / "result.json").read_text())
    assert out["bad_total"] == 0, out["bad_layers"]
    # gradients became ready output to input (DDP's reducer and the engine's hooks saw them in that order)
    assert out["order"] == list(range(out["n_layers"] - 1, -1, -1))
