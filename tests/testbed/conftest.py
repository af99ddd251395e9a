"""Shared helpers for the testbed tests: run ``autobyte launch`` and inspect the host."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent

#: ``autobyte launch`` as a module (``autobyte.cli`` is exercised by test_gloo_allreduce_through_autobyte_launch).
LAUNCH = [sys.executable, "-m", "autobyte.testbed._cli"]

HAVE_ROOT_AND_IP = os.geteuid() == 0 and shutil.which("ip") is not None and shutil.which("tc") is not None

needs_root = [
    pytest.mark.integration,
    pytest.mark.root,
    pytest.mark.skipif(not HAVE_ROOT_AND_IP, reason="needs root and iproute2 (ip, tc) for network namespaces"),
]


def launch(*args: str, state_dir: Path, timeout: float = 90, module: list[str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``autobyte launch --state-dir STATE_DIR ARGS`` and return its result (text output)."""
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run(
        [*(module or LAUNCH), "--state-dir", str(state_dir), *args],
        capture_output=True, text=True, timeout=timeout, cwd=REPO, env=env,
    )


def json_lines(text: str, label: str) -> list[dict]:
    """JSON objects printed by the process labelled ``label`` (e.g. ``w0``)."""
    out = []
    for line in text.splitlines():
        if line.startswith(f"[{label}] {{"):
            out.append(json.loads(line[len(label) + 3:]))
    return out


def host_snapshot() -> dict[str, set[str]]:
    """Namespaces, root-namespace links and root-namespace qdiscs now."""
    def lines(*cmd: str) -> set[str]:
        return {l.strip() for l in subprocess.run(cmd, capture_output=True, text=True).stdout.splitlines() if l.strip()}

    links = {l.split(":", 2)[1].strip().split("@")[0] for l in lines("ip", "-o", "link", "show")}
    return {
        "netns": {l.split()[0] for l in lines("ip", "netns", "list")},
        "links": links,
        "qdiscs": {" ".join(l.split()[:5]) for l in lines("tc", "qdisc", "show")},
    }


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    d = tmp_path / "state"
    d.mkdir()
    return d
