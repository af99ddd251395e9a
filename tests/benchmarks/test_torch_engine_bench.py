"""``benchmarks/bench_torch_engine.py``: plain DDP and the engine side by side, 2 real gloo ranks on loopback."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

pytestmark = pytest.mark.integration  # two real ranks

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("flag, order", [([], "priority, estimated (tuner=static)"), (["--ready-order"], "ready order (no tuner)")])
def test_the_engine_bench_runs_ddp_and_the_engine_and_says_which_order(flag, order):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    res = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_torch_engine.py"), "--quick", "--iters", "12", *flag],
                         capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert res.returncode == 0, res.stderr[-3000:]
    assert f"engine order: {order}" in res.stdout
    rows = re.findall(r"^\| (plain DDP \(25 MiB buckets\)|scheduled <25 MiB, unlimited>) \| ([\d.]+) \| ([\d.]+)x \|$", res.stdout, re.M)
    assert [r[0] for r in rows] == ["plain DDP (25 MiB buckets)", "scheduled <25 MiB, unlimited>"], res.stdout
    assert float(rows[0][2]) == 1.0 and all(float(r[1]) > 0 for r in rows)
