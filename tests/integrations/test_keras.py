"""AutoByteCallback for Keras 3 ``model.fit`` on the torch backend: 2 real processes, and single-process checks."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

os.environ.setdefault("KERAS_BACKEND", "torch")
torch = pytest.importorskip("torch")
keras = pytest.importorskip("keras")
if keras.backend.backend() != "torch":
    pytest.skip("Keras was imported on another backend in this session", allow_module_level=True)

from autobyte.testing import run_ranks  # noqa: E402
from autobyte.core import KiB  # noqa: E402
from autobyte.integrations.keras import AutoByteCallback  # noqa: E402

SCRIPT = os.path.join(os.path.dirname(__file__), "scripts", "keras_train.py")


#: The 2-rank tests mean CPU and gloo: GPUs hidden, so they pass alike on machines with none, one or several GPUs.
CPU = {"KERAS_BACKEND": "torch", "CUDA_VISIBLE_DEVICES": ""}


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    out = tmp_path_factory.mktemp("keras")
    res = run_ranks([SCRIPT, str(out)], 2, timeout_s=300, env=CPU)
    for r in res:
        assert r.returncode == 0, f"rank {r.rank}:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    load = lambda name: np.load(out / f"{name}.npz", allow_pickle=False)  # noqa: E731
    return out, res, load("rank0"), load("rank1"), load("reference"), load("alone")


def _weights(npz):
    return [npz[f"arr_{i}"] for i in range(len([k for k in npz.files if k.startswith("arr_")]))]


def test_ranks_end_identical_and_equal_to_one_process_on_the_union(two_ranks):
    _, _, r0, r1, ref, alone = two_ranks
    assert int(r0["world"]) == int(r1["world"]) == 2
    w0, w1, wref, walone = _weights(r0), _weights(r1), _weights(ref), _weights(alone)
    assert len(w0) == len(wref) == 6
    for a, b in zip(w0, w1):
        np.testing.assert_array_equal(a, b)  # started from different weights: rank 0's were broadcast
    for a, b in zip(w0, wref):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    # and the check has teeth: rank 0's batches alone lead elsewhere
    assert max(float(np.abs(a - b).max()) for a, b in zip(w0, walone)) > 1e-2


@pytest.mark.integration
def test_bf16_on_the_wire_averages_in_16_bits_on_two_ranks(tmp_path):
    res = run_ranks([SCRIPT, str(tmp_path), "--wire", "bf16"], 2, timeout_s=300, env=CPU)
    for r in res:
        assert r.returncode == 0, f"rank {r.rank}:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    load = lambda name: np.load(tmp_path / f"{name}.npz", allow_pickle=False)  # noqa: E731
    r0, r1 = load("rank0"), load("rank1")
    assert str(r0["wire"]) == "bf16" and int(r0["bytes_per_iteration"]) == 19664 // 2
    w0, w1, wref, walone = _weights(r0), _weights(r1), _weights(load("reference")), _weights(load("alone"))
    for a, b in zip(w0, w1):
        np.testing.assert_array_equal(a, b)  # one model on every rank
    # averaged: near the one process on the union (bf16's rounding, grown over 24 momentum steps: measured
    # 0.015), far from rank 0 alone (measured 0.33); and in 16 bits: not fp32's result (1e-4 in the fp32 test)
    gap = max(float(np.abs(a - b).max()) for a, b in zip(w0, wref))
    alone = max(float(np.abs(a - b).max()) for a, b in zip(w0, walone))
    assert 1e-3 < gap < 0.2 * alone, (gap, alone)


def test_scheduler_carries_every_weight_and_reconfigures(two_ranks):
    out, res, r0, r1, _, _ = two_ranks
    assert int(r0["bytes_per_iteration"]) == int(r0["param_bytes"]) == 19664
    decisions = json.loads((out / "decisions.json").read_text())
    assert int(r0["n_decisions"]) == len(decisions) >= 2 and int(r1["n_decisions"]) == 0
    assert all("grid search" in d["reason"] for d in decisions)
    assert decisions[0]["previous"] == {"partition_bytes": 4 * KiB, "credit_bytes": 8 * KiB}
    # the configuration in force is in the epoch logs (History) on every rank
    np.testing.assert_array_equal(r0["partition_logged"], r1["partition_logged"])
    assert "AutoByte reconfigured at step" in res[0].stdout and "AutoByte" not in res[1].stdout
    # the start-up line says where the processes compute and over which backend
    assert "over 2 processes, starting at" in res[0].stdout and "(on CPU, gloo)." in res[0].stdout


def test_batch_norm_statistics_end_equal_on_every_rank(two_ranks):
    out = two_ranks[0]
    b0, b1 = (np.load(out / f"bn{r}.npz", allow_pickle=False) for r in range(2))
    for a, b in zip(_weights(b0), _weights(b1)):
        np.testing.assert_array_equal(a, b)
    n = b0["moving"].size // 2
    assert np.abs(b0["moving"][:n]).max() > 1e-3  # the moving mean did move away from its initial zeros


# ------------------------------------------------------------------- one process


def _model(seed: int = 0, jit_compile: bool = False):
    keras.utils.set_random_seed(seed)
    m = keras.Sequential([keras.Input((5,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(3)])
    m.compile(optimizer=keras.optimizers.SGD(0.1), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
              jit_compile=jit_compile)
    return m


def _data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 5)).astype("float32")
    return x, (x[:, 0] > 0).astype("int64")


def test_world_size_one_just_trains():
    assert not torch.distributed.is_initialized() and "WORLD_SIZE" not in os.environ
    x, y = _data()
    ref, got = _model(), _model()
    ref.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
    cb = AutoByteCallback(tuner="static", window_iters=2, warmup_iters=1, verbose=False)
    hist = got.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0, callbacks=[cb])
    for a, b in zip(ref.get_weights(), got.get_weights()):
        np.testing.assert_array_equal(a, b)
    assert cb.rank == 0 and cb.world_size == 1 and cb.handle.world_size == 1
    assert len(cb.handle.controller.history) >= 2  # statistics were collected
    assert hist.history["autobyte_partition_bytes"] == [float(cb.initial.partition_bytes)] * 2
    assert "train_step" not in got.__dict__  # handed back unwrapped


@pytest.mark.parametrize("tuner", ["always-move", "autobyte"])
def test_world_size_one_makes_no_decision_and_prints_one_line(tuner, capsys, caplog):
    # One process communicates nothing: the start-up line, then no decision and no output (issue 14).
    from autobyte.core.tuning import Decision, Tuner

    class AlwaysMove(Tuner):
        name = "always-move"
        seen = 0

        def observe(self, obs):
            AlwaysMove.seen += 1
            return Decision([c for c in self.space if c != obs.config][0], "move", predicted_speed=1e9)

    assert not torch.distributed.is_initialized() and "WORLD_SIZE" not in os.environ
    x, y = _data()
    x, y = np.concatenate([x] * 4), np.concatenate([y] * 4)  # 20 steps per epoch: several windows
    cb = AutoByteCallback(tuner=AlwaysMove() if tuner == "always-move" else "autobyte", window_iters=2, warmup_iters=1)
    with caplog.at_level("INFO"):
        _model().fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0, callbacks=[cb])
    out = capsys.readouterr()
    lines = [ln for ln in (out.out + out.err + caplog.text).splitlines() if "autobyte" in ln.lower()]
    assert len(lines) == 1 and "collecting statistics only (one process)" in lines[0], lines
    assert cb.decisions == [] and cb.handle.config == cb.initial
    assert len(cb.handle.controller.history) >= 5  # statistics were still collected
    assert AlwaysMove.seen == 0


def test_jit_compiled_model_is_refused():
    x, y = _data()
    with pytest.raises(ValueError, match=r"compiled with jit_compile=True; pass jit_compile=False to model.compile\(\)"):
        _model(jit_compile=True).fit(x, y, epochs=1, verbose=0, callbacks=[AutoByteCallback(tuner=None)])


@pytest.mark.parametrize(
    "kw, exc, match",
    [
        ({"partition_bytes": 0}, ValueError, r"partition_bytes must be a positive integer, but got partition_bytes=0\."),
        ({"credit_bytes": 1.5}, TypeError, r"credit_bytes must be a positive integer, but got credit_bytes=1\.5"),
        ({"tuner": "fastest"}, ValueError, r"tuner must be one of \[.*\], a Tuner or None, but got tuner='fastest'"),
        ({"tuner": object}, TypeError, r"tuner must be a tuner name, an autobyte Tuner or None"),
        ({"window_iters": 2.0}, ValueError, r"window_iters must be a positive integer, but got window_iters=2\.0"),
        ({"warmup_iters": -3}, ValueError, r"warmup_iters must be a non-negative integer, but got warmup_iters=-3"),
        ({"space": "grid"}, TypeError, r"space must be an autobyte SearchSpace or None, but got space='grid'"),
        ({"verbose": "no"}, TypeError, r"verbose must be True or False, but got verbose='no'"),
        ({"timeout_s": float("nan")}, ValueError, r"timeout_s must be a positive number of seconds, but got timeout_s=nan"),
        ({"wire": "float16"}, ValueError, r"^wire must be one of 'fp32', 'bf16', 'fp16', 'auto' or an AutoWire, but got wire='float16'\.$"),
    ],
)
def test_bad_arguments(kw, exc, match):
    with pytest.raises(exc, match=match):
        AutoByteCallback(**kw)


@pytest.mark.integration
@pytest.mark.parametrize("backend", ["jax", None])
def test_backend_that_cannot_load_names_the_supported_one(backend):
    # Here jax and tensorflow (Keras's default backend) are not installed: importing Keras on them fails for real.
    import importlib.util

    if importlib.util.find_spec(backend or "tensorflow") is not None:
        pytest.skip(f"{backend or 'tensorflow'} is installed here")
    env = {k: v for k, v in os.environ.items() if k != "KERAS_BACKEND"}
    if backend:
        env["KERAS_BACKEND"] = backend
    code = "from autobyte.integrations.keras import AutoByteCallback"
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode != 0
    assert "keras is installed but cannot load its backend" in p.stderr, p.stderr[-2000:]
    assert "supports only the torch backend: set the environment variable KERAS_BACKEND=torch" in p.stderr


def test_other_loaded_backend_is_refused(monkeypatch):
    # No second Keras backend can run on this machine, so the backend Keras reports is replaced here.
    monkeypatch.setattr(keras.backend, "backend", lambda: "jax")
    with pytest.raises(RuntimeError, match=r"supports only the torch backend, but Keras runs on backend 'jax'; set the environment variable KERAS_BACKEND=torch"):
        AutoByteCallback()


def test_missing_keras_gives_install_hint(monkeypatch):
    monkeypatch.setitem(sys.modules, "keras", None)  # what Python does for a package that is not installed
    monkeypatch.delitem(sys.modules, "autobyte.integrations.keras")
    with pytest.raises(ImportError, match=r'needs keras, which is not installed; install it with: pip install "autobyte\[keras\]"'):
        import autobyte.integrations.keras  # noqa: F401


def test_unsupported_keras_version(monkeypatch):
    monkeypatch.setattr(keras, "__version__", "2.15.0")
    monkeypatch.delitem(sys.modules, "autobyte.integrations.keras")
    with pytest.raises(ImportError, match=r"autobyte supports keras >=3\.0,<4\.0, but found keras 2\.15\.0"):
        import autobyte.integrations.keras  # noqa: F401


# ------------------------------------------------------------------- processes and devices
def test_rank_and_world_size_never_start_a_process_group(monkeypatch):
    # a launcher's environment for rank 1 of 2, with no peer listening: joining a group would hang or fail
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("LOCAL_RANK", "0")  # rank 1 on a second machine: GPU 0 where there is one
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "9")
    cb = AutoByteCallback(tuner=None)
    assert (cb.rank, cb.world_size) == (1, 2)
    assert not torch.distributed.is_initialized()
    from keras.src.backend.torch.core import get_device

    from autobyte.integrations.keras import gpu_placement

    on_cuda = str(get_device()).startswith("cuda")
    want = gpu_placement(on_cuda=on_cuda, n_gpus=torch.cuda.device_count() if on_cuda else 0, local_rank=0, local_world_size=1)
    assert cb.placement == want  # on CPU: gloo; with a GPU: cuda:0, nccl


@pytest.mark.parametrize("var, value", [("WORLD_SIZE", "two"), ("WORLD_SIZE", "0"), ("RANK", "-1")])
def test_bad_launcher_environment_is_named(monkeypatch, var, value):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv(var, value)
    with pytest.raises(RuntimeError, match=rf"the environment variable {var} must be an integer >= \d, but got {var}='{value}'"):
        AutoByteCallback(tuner=None).rank


@pytest.mark.parametrize("on_cuda, n_gpus, local_rank, local_world, backend, index, says", [
    (False, 0, 1, 2, "gloo", None, "on CPU, gloo"),
    (False, 4, 1, 2, "gloo", None, "on CPU, gloo"),  # GPUs present, Keras on CPU (KERAS_TORCH_DEVICE=cpu)
    (True, 0, 0, 2, "gloo", None, "on CPU, gloo"),
    (True, 2, 1, 2, "nccl", 1, "this one cuda:1, nccl"),
    (True, 8, 3, 4, "nccl", 3, "this one cuda:3, nccl"),
    (True, 1, 0, 1, "nccl", 0, "cuda:0, nccl"),
    (True, 1, 1, 2, "gloo", 0, "2 processes share 1 GPU(s), this one on cuda:0: averaging over gloo, because NCCL needs one GPU per process; "
                               "for NCCL start at most 1 process(es) per machine (torchrun --nproc_per_node=1)"),
    (True, 2, 2, 3, "gloo", 0, "3 processes share 2 GPU(s)"),
])
def test_gpu_placement(on_cuda, n_gpus, local_rank, local_world, backend, index, says):
    from autobyte.integrations.keras import gpu_placement

    p = gpu_placement(on_cuda=on_cuda, n_gpus=n_gpus, local_rank=local_rank, local_world_size=local_world)
    assert (p.backend, p.cuda_index) == (backend, index)
    assert says in p.note


def test_gpu_placement_rejects_a_local_rank_outside_the_machine():
    from autobyte.integrations.keras import gpu_placement

    with pytest.raises(ValueError, match=r"LOCAL_RANK must be in 0\.\.1 \(LOCAL_WORLD_SIZE=2\), but got LOCAL_RANK=2"):
        gpu_placement(on_cuda=True, n_gpus=2, local_rank=2, local_world_size=2)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_two_ranks_on_the_gpus_of_this_machine(tmp_path):
    """2 processes on CUDA: NCCL with one GPU each where there are 2+, the gloo fallback on one GPU."""
    n = torch.cuda.device_count()
    res = run_ranks([SCRIPT, str(tmp_path)], 2, timeout_s=300, env={"KERAS_BACKEND": "torch"})
    for r in res:
        assert r.returncode == 0, f"rank {r.rank}:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    want = "this one cuda:0, nccl" if n >= 2 else "2 processes share 1 GPU(s), this one on cuda:0: averaging over gloo"
    assert want in res[0].stdout, res[0].stdout[-2000:]
    w0, w1 = (np.load(tmp_path / f"rank{r}.npz", allow_pickle=False) for r in range(2))
    for a, b in zip(_weights(w0), _weights(w1)):
        np.testing.assert_array_equal(a, b)
