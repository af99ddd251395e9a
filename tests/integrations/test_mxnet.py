"""MXNet integration without a parameter server: arguments, missing MXNet, versions, one worker."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from autobyte.integrations._mxnet_imports import check_mxnet_version
from autobyte.integrations._mxnet_launch import launch_local_ps

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.integration
def test_missing_mxnet_gives_install_hint() -> None:
    code = (
        "import sys; sys.modules['mxnet'] = None\n"
        "from autobyte.integrations.mxnet import AutoByteHandler\n"
        "try:\n    AutoByteHandler('static')\nexcept ImportError as e:\n    print('ERR', e)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    assert "ERR AutoByteHandler needs MXNet" in proc.stdout
    assert "pip install 'autobyte[mxnet]'" in proc.stdout


@pytest.mark.parametrize("version", ["1.8.0", "2.0.0", "1.10.1", "unknown"])
def test_unsupported_mxnet_version_rejected(version: str) -> None:
    with pytest.raises(RuntimeError, match=rf"supports mxnet 1\.9\.x, but mxnet=={version} is installed"):
        check_mxnet_version(version)


@pytest.mark.parametrize("version", ["1.9.0", "1.9.1"])
def test_supported_mxnet_version_accepted(version: str) -> None:
    check_mxnet_version(version)


def test_launcher_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match=r"command must be a non-empty argv list, but got command=\[\]"):
        launch_local_ps([])
    with pytest.raises(ValueError, match=r"command must be a non-empty argv list, but got command='x.py'"):
        launch_local_ps("x.py")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"n_workers must be a positive integer, but got n_workers=0"):
        launch_local_ps(["x"], n_workers=0)
    with pytest.raises(ValueError, match=r"n_servers must be a positive integer, but got n_servers=True"):
        launch_local_ps(["x"], n_servers=True)
    with pytest.raises(ValueError, match=r"timeout_s must be a positive number of seconds, but got timeout_s=0"):
        launch_local_ps(["x"], timeout_s=0)


@pytest.mark.integration
def test_launcher_times_out_and_kills_workers() -> None:
    pytest.importorskip("mxnet")
    with pytest.raises(TimeoutError, match="did not finish within timeout_s=2"):
        launch_local_ps([sys.executable, "-c", "import time; time.sleep(60)"], timeout_s=2)


# --------------------------------------------------------------------------- with MXNet
mx = pytest.importorskip("mxnet")
from mxnet import gluon  # noqa: E402
from mxnet.gluon.contrib.estimator import Estimator  # noqa: E402

from autobyte.core.space import Config, SearchSpace  # noqa: E402
from autobyte.core.tuning import StaticTuner  # noqa: E402
from autobyte.integrations.mxnet import AutoByteHandler, schedule  # noqa: E402


def _trainer(kvstore: object = "device") -> tuple[object, object]:
    mx.random.seed(3)
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(16, activation="relu"), gluon.nn.Dense(3))
    net.initialize(mx.init.Xavier())
    return net, gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9}, kvstore=kvstore)


def _data() -> object:
    rs = np.random.RandomState(0)
    X = rs.randn(96, 8).astype("float32")
    y = (X[:, 0] > 0).astype("float32") + (X[:, 1] > 0)
    return gluon.data.DataLoader(gluon.data.ArrayDataset(X, y), batch_size=16)


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        # the arguments every engine shares are checked by the engine contract (tests/contract/test_engine_contract.py)
        ({"space": SearchSpace.grid([1024], [1]), "search_space": SearchSpace.grid([1024], [1])}, ValueError,
         "space and search_space are the same argument"),
        ({"engine": "nccl"}, ValueError, r"engine must be one of \('horovod', 'kvstore'\), but got engine='nccl'\."),
        ({"engine": "horovod", "kvstore": "dist_sync"}, ValueError, r"kvstore applies to engine='kvstore' only, but got kvstore='dist_sync' with engine='horovod'\."),
        ({"tuner_kwargs": [1]}, TypeError, r"tuner_kwargs must be a dict or None, but got tuner_kwargs=\[1\]\."),
        ({"wire": "bf16"}, ValueError, r"^wire must be 'fp32' with AutoByteHandler, but got wire='bf16': MXNet 1\.9 has no bfloat16 "
         r"arrays; .* in the PyTorch engine: autobyte\.integrations\.torch\.schedule\(wire=\.\.\.\)"),
        ({"wire": "fp16", "engine": "horovod"}, ValueError, r"^wire must be 'fp32' with AutoByteHandler, but got wire='fp16': "
         r"the KVStore and Horovod engines send gradients in their own precision"),
        ({"wire": "int8"}, ValueError, r"^wire must be one of 'fp32', 'bf16', 'fp16', 'auto' or an AutoWire, but got wire='int8'\.$"),
        ({"wire": "auto"}, ValueError, r"^wire must be 'fp32' with AutoByteHandler, but got wire='auto': "),
    ],
)
def test_handler_rejects_bad_arguments(kwargs: dict, exc: type, match: str) -> None:
    kwargs = {"tuner": "static", **kwargs}
    with pytest.raises(exc, match=match):
        AutoByteHandler(**kwargs)


def test_handler_accepts_good_arguments() -> None:
    space = SearchSpace.grid([1024, 4096], [1, 2])
    h = AutoByteHandler(StaticTuner(), partition_bytes=4096, credit_bytes=8192, window_iters=3, warmup_iters=0, space=space,
                        timeout_s=5)
    assert h.initial == Config(4096, 8192) and h.window_iters == 3 and h.space is space and h.timeout_s == 5.0
    with pytest.warns(DeprecationWarning, match="pass space="):
        assert AutoByteHandler(None, search_space=space).space is space


def test_handler_builds_a_registered_tuner_by_name() -> None:
    pytest.importorskip("autobyte.core.tuners")
    h = AutoByteHandler("grid", partition_bytes=4096, credit_bytes=4096, space=SearchSpace.grid([1024, 4096], [1, 2]))
    assert h.tuner.name == "grid"


def test_handler_rejects_unsupported_version(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mx, "__version__", "2.0.0")
    with pytest.raises(RuntimeError, match=r"supports mxnet 1\.9\.x, but mxnet==2\.0\.0 is installed"):
        AutoByteHandler("static")


def test_engine_rejects_bad_arguments() -> None:
    with pytest.raises(TypeError, match=r"trainer must be a mxnet\.gluon\.Trainer, but got trainer=3\."):
        schedule(3, partition_bytes=1024, credit_bytes=1024)
    _, trainer = _trainer()
    with pytest.raises(ValueError, match=r"partition_bytes must be a positive integer.*, but got partition_bytes=-1\."):
        schedule(trainer, partition_bytes=-1, credit_bytes=1024)
    with pytest.raises(TypeError, match=r"kvstore must be a KVStore type string, a KVStore or None, but got kvstore=5\."):
        schedule(trainer, partition_bytes=1024, credit_bytes=1024, kvstore=5)
    engine = schedule(trainer, partition_bytes=1024, credit_bytes=1024)
    with pytest.raises(ValueError, match=r"at_iteration must be an integer >= the next step 0, but got at_iteration=-2\."):
        engine.reconfigure(1024, 1024, at_iteration=-2)


def test_engine_rejects_a_trainer_that_already_communicated() -> None:
    net, trainer = _trainer(mx.kv.create("local"))
    x = mx.nd.ones((4, 8))
    with mx.autograd.record():
        loss = net(x).sum()
    loss.backward()
    trainer.step(4)
    with pytest.raises(RuntimeError, match=r"trainer has already created its KVStore .* before the first trainer\.step\(\)"):
        schedule(trainer, partition_bytes=1024, credit_bytes=1024)


def _weights(net: object) -> list[np.ndarray]:
    # Gluon names parameters by instance count (dense0, dense2...): compare in order.
    return [p.data().asnumpy() for p in net.collect_params().values()]


def _fit(with_handler: bool) -> tuple[list[np.ndarray], AutoByteHandler | None]:
    net, trainer = _trainer()
    est = Estimator(net, loss=gluon.loss.SoftmaxCrossEntropyLoss(), trainer=trainer)
    handler = AutoByteHandler("static", partition_bytes=1024, credit_bytes=2048, window_iters=2) if with_handler else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(_data(), epochs=2, event_handlers=[handler] if handler else None)
    return _weights(net), handler


def test_world_size_one_just_trains() -> None:
    ref, _ = _fit(False)
    net, trainer = _trainer()
    est = Estimator(net, loss=gluon.loss.SoftmaxCrossEntropyLoss(), trainer=trainer)
    handler = AutoByteHandler("static", partition_bytes=1024, credit_bytes=2048, window_iters=2)
    with pytest.warns(UserWarning, match=r"there is one worker .engine=.kvstore.., so there is no communication to schedule; training runs unchanged"):
        est.fit(_data(), epochs=2, event_handlers=[handler])
    got = _weights(net)
    assert handler.engine is not None and not handler.engine.distributed
    assert handler.engine.iteration == 12 and handler.engine.num_workers == 1
    assert len(got) == len(ref) == 4
    for a, b in zip(got, ref):
        np.testing.assert_array_equal(a, b)
    untrained, _ = _trainer()
    untrained(mx.nd.ones((1, 8)))  # finish deferred initialisation
    assert not np.allclose(_weights(untrained)[1], ref[1])  # it trained


def test_handler_state_dict_round_trip() -> None:
    _, handler = _fit(True)
    assert handler is not None
    state = handler.state_dict()
    fresh = AutoByteHandler("static", partition_bytes=4096, credit_bytes=4096)
    fresh.load_state_dict(state)
    assert fresh._restored is not None and fresh._restored["engine"]["iteration"] == 12
    assert state["engine"]["config"] == {"partition_bytes": 1024, "credit_bytes": 2048}


def test_handler_reconfigurations_are_decision_records_and_old_states_load() -> None:
    from autobyte.core import Config, DecisionRecord

    rec = DecisionRecord(7, Config(4096, 8192), Config(1024, 2048), "grid", 12.5, 10.0)
    h = AutoByteHandler("static", partition_bytes=4096, credit_bytes=8192)
    h.load_state_dict({"reconfigurations": [rec.to_dict()]})
    assert h.reconfigurations == [rec]
    assert h.state_dict()["reconfigurations"] == [rec.to_dict()]
    # autobyte 0.1 saved (iteration, old, new, reason) tuples
    h.load_state_dict({"reconfigurations": [(7, Config(4096, 8192).to_dict(), Config(1024, 2048).to_dict(), "grid")]})
    assert h.reconfigurations == [DecisionRecord(7, Config(4096, 8192), Config(1024, 2048), "grid")]


def test_horovod_engine_rejects_a_parameter_server_trainer_and_several_contexts() -> None:
    from autobyte.integrations.mxnet import HorovodEngine

    _, trainer = _trainer("dist_sync")  # the string only: no KVStore is created
    with pytest.raises(ValueError, match=r"kvstore must not be a parameter server, but got kvstore='dist_sync' \(use engine='kvstore'\)"):
        HorovodEngine(trainer, partition_bytes=1024, credit_bytes=1024)
    net = gluon.nn.Dense(2, in_units=3)
    net.initialize(ctx=[mx.cpu(0), mx.cpu(1)])
    two = gluon.Trainer(net.collect_params(), "sgd", kvstore=None)
    with pytest.raises(ValueError, match=r"the Horovod engine needs one context per process, but the trainer has 2"):
        HorovodEngine(two, partition_bytes=1024, credit_bytes=1024)


@pytest.mark.integration
def test_missing_horovod_gives_install_hint() -> None:
    code = (
        "import sys; sys.modules['horovod'] = None; sys.modules['horovod.mxnet'] = None\n"
        "import mxnet as mx\nfrom mxnet import gluon\n"
        "from autobyte.integrations.mxnet import HorovodEngine\n"
        "net = gluon.nn.Dense(2, in_units=3); net.initialize()\n"
        "t = gluon.Trainer(net.collect_params(), 'sgd', kvstore=None)\n"
        "try:\n    HorovodEngine(t, partition_bytes=1024, credit_bytes=1024)\nexcept ImportError as e:\n    print('ERR', e)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    assert "ERR the Horovod engine needs horovod.mxnet" in proc.stdout
    assert "HOROVOD_WITH_MXNET=1" in proc.stdout
