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
    # the tuner saw the windows of 60 steps: each move is followed by 2 warm-up iterations, and a check the detector
    # suspects of a change extends its window by one check, so 60 steps hold 3-5 windows (3 in a CI run with 3 moves)
    assert windows and int(windows.group(1)) >= 3, out[-4000:]
