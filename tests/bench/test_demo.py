"""``autobyte demo`` as a new user runs it (shortened): real Lightning jobs, the shipped meta-network."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration  # real Lightning jobs in processes

LABELS = {"ddp": "plain DDP", "bytescheduler": "ByteScheduler default <4 MB, 4X> (static)", "autobyte": "AutoByte",
          "ddp_hook": "DDP + fp16_compress_hook", "autobyte_wire": "AutoByte, wire='auto'"}


def test_demo_runs_end_to_end(tmp_path):
    out = tmp_path / "demo"
    r = subprocess.run(
        [sys.executable, "-m", "autobyte.cli", "demo", "--iters", "12", "--every", "6", "--rounds", "2", "--out", str(out)],
        capture_output=True, text=True, timeout=900,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "median (min-max) of 2 rounds" in r.stdout
    assert "What AutoByte chose:" in r.stdout
    # Every method has a row in each table, every cell a median with its spread: "123.4 (120.1-130.2)" / "1.05x (0.98x-1.10x)";
    # the wire='auto' row a third one, its speed-up over DDP + the hook.
    for key, label in LABELS.items():
        rows = [line for line in r.stdout.splitlines() if line.startswith(f"| {label} |")]
        assert len(rows) == (3 if key == "autobyte_wire" else 2), (label, r.stdout[-3000:])
        assert re.fullmatch(r"\| .+ \|( [\d.]+ \([\d.]+-[\d.]+\) \|)+", rows[0]), rows[0]
        for row in rows[1:]:
            assert re.fullmatch(r"\| .+ \|( [\d.]+x \([\d.]+x-[\d.]+x\) \|)+", row), row
    assert "Speed-up over DDP + fp16_compress_hook (what a link-bound user runs instead) in the same round" in r.stdout
    assert "What AutoByte, wire='auto' chose" in r.stdout and "share of iterations at 16 bits" in r.stdout
    assert "Host load averages" in r.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["rounds"] == 2
    methods = summary["methods"]
    assert list(methods) == list(LABELS)
    for key in LABELS:
        per_round = methods[key]["samples_per_s"]["all"]
        assert len(per_round) == 2 and all(x > 0 for x in per_round)
    assert methods["ddp"]["speedup_vs_ddp"]["all"] == [1.0, 1.0]
    # every ratio is of two runs of the same round
    wire = methods["autobyte_wire"]
    for k, tput in wire["samples_per_s"].items():
        assert wire["speedup_vs_ddp"][k] == pytest.approx([a / b for a, b in zip(tput, methods["ddp"]["samples_per_s"][k])])
        assert wire["speedup_vs_ddp_hook"][k] == pytest.approx([a / b for a, b in zip(tput, methods["ddp_hook"]["samples_per_s"][k])])
    for rnd in (1, 2):
        for run in LABELS:
            rows = [json.loads(line) for line in (out / f"round{rnd}" / run / "iterations.jsonl").read_text().splitlines()]
            assert len(rows) == 12 and all(row["seconds"] > 0 and row["threads"] == 1 for row in rows)
            # the precision each iteration ran at: fp32 but for the hook (fp16) and wire='auto' (its choice)
            expected = {"ddp_hook": {"fp16"}, "autobyte_wire": {"fp32", "bf16"}}.get(run, {"fp32"})
            assert {row["wire"] for row in rows} <= expected, (run, rows)
            if run == "autobyte_wire":
                measured = [row for row in rows if row["iteration"] >= 3]
                share = sum(row["wire"] == "bf16" for row in measured) / len(measured)
                assert wire["share_16bit"]["all"][rnd - 1] == pytest.approx(share)
                assert all(0 <= x <= 1 for v in wire["share_16bit"].values() for x in v)
        # the hook ran: Lightning leaves it unregistered on CPU, the demo's job registers it
        assert json.loads((out / f"round{rnd}" / "ddp_hook" / "job.json").read_text()) == {"comm_hooks": ["fp16_compress_hook"]}
        assert json.loads((out / f"round{rnd}" / "ddp" / "job.json").read_text()) == {"comm_hooks": []}
    assert len(summary["wire_decisions"]) == len(summary["wire_choices"]) == 2
