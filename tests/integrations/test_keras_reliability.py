"""Keras callback on 2 real CPU ranks (gloo): a stopped peer ends in PeerLostError within timeout_s.

The Keras callback runs the PyTorch engine, whose window, agreement and
gradient collectives run in its own groups under ``timeout_s``; this checks
that the promise holds through ``model.fit`` too (with BatchNormalization,
the tuner on), as tests/integrations/test_reliability.py checks it for
plain PyTorch and Lightning.
"""

from __future__ import annotations

import json
import os
import textwrap

import pytest

os.environ.setdefault("KERAS_BACKEND", "torch")
torch = pytest.importorskip("torch")
keras = pytest.importorskip("keras")

from autobyte.testing import run_ranks  # noqa: E402

pytestmark = pytest.mark.integration

TIMEOUT_S = 5

#: One rank: rank 1 stops itself (SIGSTOP) at the end of batch 5; rank 0 reports what ended its fit.
WORKER = textwrap.dedent('''
    import json, os, signal, sys, time
    os.environ.setdefault("KERAS_BACKEND", "torch")
    import keras
    import numpy as np
    from autobyte.integrations.keras import AutoByteCallback
    from autobyte.integrations.torch import PeerLostError

    out, timeout_s = sys.argv[1], float(sys.argv[2])
    cb = AutoByteCallback(tuner="static", timeout_s=timeout_s, partition_bytes=1024, credit_bytes=2048,
                          window_iters=2, warmup_iters=0, verbose=False)

    class StopAt5(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch == 5 and cb.rank == 1:
                with open(os.path.join(out, "pid1"), "w") as f:
                    f.write(str(os.getpid()))
                with open(os.path.join(out, "stopped_at.tmp"), "w") as f:
                    f.write(repr(time.time()))
                os.replace(os.path.join(out, "stopped_at.tmp"), os.path.join(out, "stopped_at"))
                os.kill(os.getpid(), signal.SIGSTOP)

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32), keras.layers.BatchNormalization(),
                              keras.layers.Dense(4)])
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x = np.random.default_rng(cb.rank).normal(size=(8000, 16)).astype("float32")
    y = (x[:, 0] > 0).astype("int64")
    result = {}
    try:
        model.fit(x, y, batch_size=8, epochs=1, verbose=0, callbacks=[cb, StopAt5()])
    except PeerLostError as exc:
        result = {"error": "PeerLostError", "message": str(exc)}
    except Exception as exc:  # reported to the test
        result = {"error": type(exc).__name__, "message": str(exc)}
    if result:
        result["waited"] = time.time() - float(open(os.path.join(out, "stopped_at")).read())
        pid = int(open(os.path.join(out, "pid1")).read())
        os.kill(pid, signal.SIGKILL)  # leave nothing behind
        os.kill(pid, signal.SIGCONT)
    with open(os.path.join(out, f"rank{cb.rank}.json"), "w") as f:
        json.dump(result, f)
    os._exit(3 if result else 0)
''')


def test_stopped_peer_under_keras_fit_gives_peer_lost_error_within_timeout(tmp_path):
    script = tmp_path / "keras_stopped.py"
    script.write_text(WORKER)
    res = run_ranks([str(script), str(tmp_path), str(TIMEOUT_S)], 2, timeout_s=150,
                 env={"KERAS_BACKEND": "torch", "CUDA_VISIBLE_DEVICES": ""})
    survivor, stopped = res
    assert survivor.returncode == 3, survivor.stdout[-2000:] + survivor.stderr[-3000:]
    assert stopped.returncode == -9  # killed by the survivor after the error
    d = json.loads((tmp_path / "rank0.json").read_text())
    print(f"survivor: {d}")
    assert d["error"] == "PeerLostError", d
    assert "rank 1" in d["message"] and f"timeout_s={TIMEOUT_S}" in d["message"], d
    assert d["waited"] < TIMEOUT_S + 10, d
