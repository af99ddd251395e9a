"""The Lightning docs: the "add one line" snippet, the example as written, and Lightning's own launchers."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from _docsnippets import ROOT, example_lines, in_order, snippet

pytestmark = pytest.mark.integration

pytest.importorskip("lightning.pytorch")

EXAMPLE = os.path.join(ROOT, "docs", "examples", "lightning_ddp.py")
SPAWN = os.path.join(os.path.dirname(__file__), "scripts", "lightning_spawn.py")


def test_docs_snippet_is_what_the_example_runs():
    lines = snippet("lightning.md", "lightning")
    assert "callbacks=[AutoByteCallback()],  # the one added line" in lines
    example = example_lines(EXAMPLE)
    assert in_order(lines, example), f"docs/lightning.md snippet is not in {EXAMPLE} as written"


def test_example_runs_as_written(tmp_path):
    # Lightning's own launcher starts the second process (strategy="ddp").
    env = dict(os.environ, OMP_NUM_THREADS="1")
    p = subprocess.run([sys.executable, EXAMPLE], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=400)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-4000:]
    assert "AutoByte: scheduling" in out and "over 2 ranks" in out
    assert "done: 60 steps" in out


def test_gloo_default_group_is_destroyed_at_exit(tmp_path):
    # Lightning leaves a gloo group to the interpreter's finalization, where a collective's
    # last release can abort the process; the callback destroys it from atexit instead.
    env = dict(os.environ, OMP_NUM_THREADS="1")
    p = subprocess.run([sys.executable, os.path.join(os.path.dirname(__file__), "scripts", "lightning_exit.py")],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=400)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-4000:]
    assert "backend gloo, after fit: ok" in out, out[-4000:]
    assert "EXIT rank 0: default group alive=False" in out, out[-4000:]


@pytest.mark.parametrize("strategy", ["ddp", "ddp_notebook"])
def test_lightning_starts_the_processes(tmp_path, strategy):
    # "ddp": Lightning re-runs the script for rank 1 (what `python train.py` does for users).
    # "ddp_notebook": Lightning's multiprocessing launcher (fork here; ddp_spawn is the same launcher with
    # the callback pickled, see test_callback_survives_pickling); the parent gets the logged metrics back.
    env = dict(os.environ, OMP_NUM_THREADS="1")
    p = subprocess.run([sys.executable, SPAWN, strategy], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=400)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-4000:]
    assert "over 2 ranks" in out and "AutoByte reconfigured at step" in out
    results = re.findall(r"RESULT (\{[^}]*\})", out)
    assert len(results) == 1, out[-4000:]  # printed by rank 0 only
    metrics = json.loads(results[0])
    assert metrics["autobyte/partition_bytes"] == 1024.0 and metrics["autobyte/credit_bytes"] in (1024.0, 4096.0)


def test_callback_survives_pickling():
    # ddp_spawn pickles the Trainer, and so the callback, into each child process.
    import pickle

    from autobyte.core import KiB
    from autobyte.core.tuners import GridTuner
    from autobyte.integrations.lightning import AutoByteCallback

    for tuner in ("autobyte", GridTuner(), None):
        cb = AutoByteCallback(tuner, partition_bytes=8 * KiB, credit_bytes=32 * KiB, window_iters=4)
        back = pickle.loads(pickle.dumps(cb))
        assert back.initial == cb.initial and back.window_iters == 4 and back.state_key == cb.state_key
