"""docs/examples/torch_ddp.py as written: 2 processes under torchrun, the default meta-network tuner."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration

pytest.importorskip("torch")

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "examples", "torch_ddp.py")


def test_example_runs_as_written(tmp_path):
    # CPU and gloo: the example says so; GPUs are hidden so a GPU machine runs the same thing
    env = dict(os.environ, OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
    p = subprocess.run([sys.executable, os.path.abspath(EXAMPLE)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=400)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-4000:]
    assert "done: 2 processes, 60 steps" in out and "weights identical on every rank: True" in out, out[-4000:]
    windows = re.search(r"(\d+) windows, (\d+) reconfigurations", out)
    assert windows and int(windows.group(1)) >= 4, out[-4000:]  # the tuner saw the windows of 60 steps
