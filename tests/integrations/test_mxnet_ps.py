"""Real parameter-server jobs on loopback: scheduler, servers and 2 workers as processes.

The engine contract (equivalence with the unscheduled ``dist_sync`` path, agreed
reconfiguration, rank skew, a lost worker, bad input) runs in
``tests/contract/test_engine_contract.py``; here: two servers and two contexts, the
documentation's snippet and example.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mxnet")

from autobyte.integrations.mxnet import launch_local_ps  # noqa: E402
from autobyte.testing import engine_contract as ec  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
ENV = {"PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def test_two_servers_and_two_contexts_reconfigure_without_losing_an_update(tmp_path: Path) -> None:
    # The contract (tests/contract/test_engine_contract.py) runs one server and one context per worker;
    # here keys spread over two servers and every batch is split across two CPU contexts (fused buffers per context).
    harness = ec.KVStoreHarness()
    harness.n_servers, harness.contexts = 2, 2
    ec.check_reconfigures_at_an_agreed_iteration(harness, tmp_path)


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
