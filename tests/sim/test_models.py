from __future__ import annotations

import numpy as np
import pytest

from autobyte.sim import MODELS, ModelProfile, get_model, profile_module


@pytest.mark.parametrize(
    "name, n_params",
    [("resnet50", 25.6e6), ("vgg16", 138e6), ("alexnet", 61e6), ("densenet121", 8.0e6), ("bert-base", 110e6)],
)
def test_zoo_parameter_counts_match_the_published_figures(name: str, n_params: float) -> None:
    prof = get_model(name)
    assert abs(prof.n_params - n_params) / n_params < 0.02
    assert prof.n_layers == prof.forward_s.size == prof.backward_s.size == len(prof.layer_names)


def test_exact_torchvision_counts() -> None:
    assert get_model("resnet50").n_params == 25_557_032
    assert get_model("vgg16").n_params == 138_357_544
    assert get_model("alexnet").n_params == 61_100_840
    assert get_model("densenet121").n_params == 7_978_856


def test_resnet50_compute_matches_the_published_v100_throughput() -> None:
    prof = get_model("resnet50")
    # NVIDIA DeepLearningExamples: 367 img/s FP32 on one V100 16GB.
    assert 330 < prof.batch_size / prof.compute_s < 400


def test_layer_order_is_input_first() -> None:
    assert get_model("vgg16").layer_names[0].startswith("features")
    assert get_model("bert-base").layer_names[0] == "embeddings"
    assert get_model("resnet50").layer_names[-1] == "fc"


def test_every_listed_model_builds() -> None:
    for name in MODELS:
        p = get_model(name)
        assert p.total_bytes > 0 and p.compute_s > 0


def test_unknown_model_name() -> None:
    with pytest.raises(ValueError, match=r"name must be one of .*resnet50.*but got name='resnet51'"):
        get_model("resnet51")


def test_empty_model_rejected() -> None:
    with pytest.raises(ValueError, match="layer_bytes must be a non-empty 1-D sequence"):
        ModelProfile("empty", np.array([], dtype=np.int64), np.array([]), np.array([]), 32)


def test_bad_profiles_rejected() -> None:
    with pytest.raises(ValueError, match="layer_bytes must hold positive integers"):
        ModelProfile("m", np.array([4, 0]), np.zeros(2), np.zeros(2), 8)
    with pytest.raises(ValueError, match=r"forward_s must have shape \(2,\)"):
        ModelProfile("m", np.array([4, 8]), np.zeros(3), np.zeros(2), 8)
    with pytest.raises(ValueError, match="backward_s must hold finite non-negative seconds"):
        ModelProfile("m", np.array([4, 8]), np.zeros(2), np.array([0.1, np.nan]), 8)
    with pytest.raises(ValueError, match="batch_size must be a positive integer, but got batch_size=0"):
        ModelProfile("m", np.array([4, 8]), np.zeros(2), np.zeros(2), 0)


def test_with_batch_size_scales_compute() -> None:
    p = get_model("resnet50")
    q = p.with_batch_size(p.batch_size * 2)
    assert np.allclose(q.forward_s, 2 * p.forward_s)
    assert np.array_equal(q.layer_bytes, p.layer_bytes)


def test_dict_round_trip() -> None:
    p = get_model("alexnet")
    q = ModelProfile.from_dict(p.to_dict())
    assert np.array_equal(p.layer_bytes, q.layer_bytes) and np.allclose(p.forward_s, q.forward_s)


def test_profile_module_on_a_real_torch_model() -> None:
    torch = pytest.importorskip("torch")
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(8 * 14 * 14, 10)
    )
    prof = profile_module(net, torch.randn(4, 3, 16, 16), n_runs=2)
    assert prof.layer_names == ("0", "1", "4")
    assert prof.layer_bytes.tolist() == [(3 * 8 * 9 + 8) * 4, 16 * 4, (8 * 14 * 14 * 10 + 10) * 4]
    assert prof.batch_size == 4
    assert np.all(prof.forward_s > 0) and np.all(prof.backward_s >= 0) and prof.backward_s.sum() > 0


def test_profile_module_rejects_models_without_parameters() -> None:
    torch = pytest.importorskip("torch")
    with pytest.raises(ValueError, match="at least one trainable parameter"):
        profile_module(torch.nn.ReLU(), torch.randn(2, 3))
    with pytest.raises(TypeError, match="module must be a torch.nn.Module"):
        profile_module(object(), None)
