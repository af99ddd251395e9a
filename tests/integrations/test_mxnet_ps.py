"""Real parameter-server jobs on loopback: scheduler, servers and 2 workers as processes.

Each job trains the same Gluon MLP through the Estimator (rank-dependent data,
SGD with momentum and weight decay); the unscheduled ``dist_sync`` run is the
reference the scheduled runs must match.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("mxnet")

from autobyte.integrations.mxnet import launch_local_ps  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "integrations" / "mxnet_scripts" / "train_gluon.py"
ENV = {"PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}

pytestmark = pytest.mark.timeout(180)


def _run(out: Path, *args: str, n_servers: int = 1) -> list[dict]:
    out.mkdir(parents=True, exist_ok=True)
    results = launch_local_ps([sys.executable, str(SCRIPT), "--out", str(out), *args], n_workers=2, n_servers=n_servers, timeout_s=120, env=ENV)
    for r in results:
        assert r.returncode == 0, r.output[-4000:]
    ranks = []
    for rank in (0, 1):
        with np.load(out / f"rank{rank}.npz", allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        info = json.loads((out / f"rank{rank}.json").read_text())
        ranks.append({"arrays": arrays, "info": info})
    return ranks


def _assert_same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_allclose(a[k], b[k], rtol=1e-5, atol=1e-6, err_msg=k)


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    """Unscheduled dist_sync (the Trainer's own push/pull, optimizer on the server)."""
    return _run(tmp_path_factory.mktemp("plain"), "--mode", "plain")


def test_plain_reference_is_synchronised(plain: list[dict]) -> None:
    # Different data on each rank, same parameters after every step: the PS really syncs.
    _assert_same(plain[0]["arrays"] | {"losses": 0}, plain[1]["arrays"] | {"losses": 0})
    assert not np.allclose(plain[0]["arrays"]["losses"], plain[1]["arrays"]["losses"])


def test_scheduled_matches_unscheduled_dist_sync(plain: list[dict], tmp_path: Path) -> None:
    # 4 KiB partitions split the 5120/8192-byte weights and fuse the biases; credit 2 messages.
    sched = _run(tmp_path, "--mode", "scheduled", "--partition", "4096", "--credit", "8192")
    for rank in (0, 1):
        _assert_same(sched[rank]["arrays"], plain[rank]["arrays"])
        info = sched[rank]["info"]
        assert info["iterations"] == 20 and info["reconfigurations"] == []
        sizes = [m[1] for m in info["last_messages"]]
        # Every parameter's bytes travel through the scheduler, in split and fused messages.
        assert sum(sizes) == sum(info["tensor_bytes"])
        assert max(sizes) <= 4096 and len(sizes) > len(info["tensor_bytes"]) // 2
        assert any(b > 4096 for b in info["tensor_bytes"])  # something was split


def test_reconfiguration_mid_training_loses_no_update(plain: list[dict], tmp_path: Path) -> None:
    # Two servers, two CPU contexts per worker (each batch split across them);
    # rank 0's tuner switches 4 KiB/8 KiB -> 1 KiB/2 KiB after the first window.
    sched = _run(tmp_path, "--mode", "scheduled", "--partition", "4096", "--credit", "8192",
                 "--switch-partition", "1024", "--switch-credit", "2048", "--window", "5", "--contexts", "2", n_servers=2)
    for rank in (0, 1):
        info = sched[rank]["info"]
        # warm-up 2 + window 5 -> decided after batch 6, applied by every rank from batch 7.
        assert [r["iteration"] for r in info["reconfigurations"]] == [7]
        assert info["reconfigurations"][0]["new"] == {"partition_bytes": 1024, "credit_bytes": 2048}
        assert info["config"] == {"partition_bytes": 1024, "credit_bytes": 2048}
        assert set(info["layouts"]) == {"4096", "1024"}
        assert max(m[1] for m in info["last_messages"]) <= 1024
        assert sum(m[1] for m in info["last_messages"]) == sum(info["tensor_bytes"])
        _assert_same(sched[rank]["arrays"], plain[rank]["arrays"])
    assert len(sched[0]["info"]["history"]) >= 2  # rank 0 decided on every window


def _doc_snippet() -> str:
    text = (ROOT / "docs" / "mxnet.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    snippet = [b for b in blocks if "AutoByteHandler(" in b and "# the one line" in b]
    assert snippet, "docs/mxnet.md must hold the 'add one line' snippet"
    return snippet[0]


def test_docs_snippet_runs_on_a_parameter_server(tmp_path: Path) -> None:
    script = tmp_path / "snippet.py"
    script.write_text(_doc_snippet())
    results = launch_local_ps([sys.executable, str(script)], n_workers=2, n_servers=1, timeout_s=120, env=ENV, cwd=str(tmp_path))
    for r in results:
        assert r.returncode == 0, r.output[-4000:]
    assert sum("autobyte: finished" in r.output for r in results) == 1  # logged on rank 0 only


def test_example_gluon_ps_runs_as_written() -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "docs" / "examples" / "gluon_ps.py")], env={**os.environ, **ENV},
                          capture_output=True, text=True, timeout=150)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "workers agree" in proc.stdout
    assert proc.stdout.count("autobyte: reconfigure at batch") >= 12  # the grid tuner visited its 12 candidates
