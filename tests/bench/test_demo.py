"""``autobyte demo`` as a new user runs it (shortened): real Lightning jobs, the shipped meta-network."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration  # real Lightning jobs in processes


def test_demo_runs_end_to_end(tmp_path):
    out = tmp_path / "demo"
    r = subprocess.run(
        [sys.executable, "-m", "autobyte.cli", "demo", "--iters", "12", "--every", "6", "--rounds", "2", "--out", str(out)],
        capture_output=True, text=True, timeout=900,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "median (min-max) of 2 rounds" in r.stdout
    assert "What AutoByte chose:" in r.stdout
    # Three rows in each table, every cell a median with its spread: "123.4 (120.1-130.2)" / "1.05x (0.98x-1.10x)".
    for label in ("plain DDP", "ByteScheduler default <4 MB, 4X> (static)", "AutoByte"):
        rows = [line for line in r.stdout.splitlines() if line.startswith(f"| {label} |")]
        assert len(rows) == 2, (label, r.stdout[-3000:])
        assert re.fullmatch(r"\| .+ \|( [\d.]+ \([\d.]+-[\d.]+\) \|)+", rows[0]), rows[0]
        assert re.fullmatch(r"\| .+ \|( [\d.]+x \([\d.]+x-[\d.]+x\) \|)+", rows[1]), rows[1]
    assert "Host load averages" in r.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["rounds"] == 2
    for key in ("ddp", "bytescheduler", "autobyte"):
        per_round = summary["methods"][key]["samples_per_s"]["all"]
        assert len(per_round) == 2 and all(x > 0 for x in per_round)
    assert summary["methods"]["ddp"]["speedup_vs_ddp"]["all"] == [1.0, 1.0]
    for rnd in (1, 2):
        for run in ("ddp", "bytescheduler", "autobyte"):
            rows = [json.loads(line) for line in (out / f"round{rnd}" / run / "iterations.jsonl").read_text().splitlines()]
            assert len(rows) == 12 and all(row["seconds"] > 0 and row["threads"] == 1 for row in rows)
