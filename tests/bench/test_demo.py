"""``autobyte demo`` as a new user runs it (shortened): real Lightning jobs, the shipped meta-network."""

from __future__ import annotations

import json
import subprocess
import sys


def test_demo_runs_end_to_end(tmp_path):
    out = tmp_path / "demo"
    r = subprocess.run(
        [sys.executable, "-m", "autobyte.cli", "demo", "--iters", "16", "--every", "8", "--out", str(out)],
        capture_output=True, text=True, timeout=600,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "| phase | plain DDP | AutoByte | speed-up |" in r.stdout
    assert "What AutoByte chose:" in r.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["phases"]["all"]["ddp"] > 0 and summary["phases"]["all"]["autobyte"] > 0
    for run in ("ddp", "autobyte"):
        rows = [json.loads(line) for line in (out / run / "iterations.jsonl").read_text().splitlines()]
        assert len(rows) == 16 and all(row["seconds"] > 0 for row in rows)
