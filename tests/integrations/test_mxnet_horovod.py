"""Horovod engine for MXNet: a real 2-process ``horovodrun --gloo`` job on this machine.

Skipped where ``horovod.mxnet`` cannot be imported (Horovod 0.28.1 must be
built from source with MXNet; see docs/mxnet.md).
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("mxnet")
try:
    importlib.import_module("horovod.mxnet")
except ImportError as exc:  # pragma: no cover - depends on the environment
    pytest.skip(f"horovod.mxnet is not importable ({exc}); build Horovod 0.28.1 with HOROVOD_WITH_MXNET=1 to run these tests",
                allow_module_level=True)
if shutil.which("horovodrun") is None:  # pragma: no cover
    pytest.skip("horovodrun is not on PATH", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "integrations" / "mxnet_scripts" / "train_gluon.py"

pytestmark = pytest.mark.timeout(240)


def _horovodrun(out: Path, *args: str) -> list[dict]:
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "OMP_NUM_THREADS": "1", "MXNET_CPU_WORKER_NTHREADS": "1"}
    cmd = ["horovodrun", "-np", "2", "-H", "localhost:2", "--gloo", "--network-interface", "lo", sys.executable, str(SCRIPT),
           "--engine", "horovod", "--out", str(out), *args]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=200, start_new_session=True)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    ranks = []
    for rank in (0, 1):
        with np.load(out / f"rank{rank}.npz", allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        ranks.append({"arrays": arrays, "info": json.loads((out / f"rank{rank}.json").read_text())})
    return ranks


def test_horovod_scheduled_matches_distributed_trainer(tmp_path: Path) -> None:
    plain = _horovodrun(tmp_path / "plain", "--mode", "plain")
    sched = _horovodrun(tmp_path / "sched", "--mode", "scheduled", "--partition", "4096", "--credit", "8192",
                        "--switch-partition", "1024", "--switch-credit", "2048")
    for rank in (0, 1):
        info = sched[rank]["info"]
        assert info["arch"] == "allreduce" and info["num_workers"] == 2
        assert [r["iteration"] for r in info["reconfigurations"]] == [7]  # decided on rank 0, applied by both at batch 7
        assert info["config"] == {"partition_bytes": 1024, "credit_bytes": 2048}
        sizes = [m[1] for m in info["last_messages"]]
        assert sum(sizes) == sum(info["tensor_bytes"]) and max(sizes) <= 1024
        for k, ref in plain[rank]["arrays"].items():
            np.testing.assert_allclose(sched[rank]["arrays"][k], ref, rtol=1e-5, atol=1e-6, err_msg=k)
    for k in plain[0]["arrays"]:
        if k != "losses":
            np.testing.assert_array_equal(sched[0]["arrays"][k], sched[1]["arrays"][k])
