"""benchmarks/bench_wire.py and wire_convergence.py: a few unshaped iterations end in their summaries."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def test_a_short_unshaped_run_writes_the_summary(tmp_path):
    methods = "ddp,ddp+fp16,ddp+bf16,autobyte:bf16:1m,autobyte:fp16:bs"
    res = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_wire.py"), "--models", "cnn", "--rates", "unshaped",
                          "--rounds", "1", "--iters", "2", "--warmup", "1", "--methods", methods, "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert res.returncode == 0, res.stderr[-3000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    (cell,) = summary["cells"]
    assert cell["model"] == "cnn" and cell["rate"] == "unshaped" and "load average" in cell["load_before"]
    rows = {r["method"]: r for r in cell["rows"]}
    assert list(rows) == methods.split(",")
    for r in rows.values():
        assert r["median_s"] > 0 and len(r["s_per_iter_rounds"]) == 1
    # each 16-bit method is compared with DDP's hook of its precision
    bf16 = rows["autobyte:bf16:1m"]
    assert bf16["vs_same_precision_ddp"] == pytest.approx(rows["ddp+bf16"]["median_s"] / bf16["median_s"], rel=0.01)
    assert rows["autobyte:fp16:bs"]["label"] == "autobyte fp16 <4 MB, 4X>"
    assert "| autobyte bf16 <1 MiB, 4X> |" in (tmp_path / "summary.md").read_text()


def test_unknown_methods_are_refused():
    res = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_wire.py"), "--methods", "ddp,int8"],
                         capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert res.returncode != 0 and "--methods must be among" in res.stderr and "'int8'" in res.stderr


def test_a_short_convergence_run_finds_the_hooks_curve(tmp_path):
    res = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "wire_convergence.py"), "--steps", "4",
                          "--methods", "ddp,ddp+bf16,autobyte:bf16", "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert res.returncode == 0, res.stderr[-3000:]
    summary = json.loads((tmp_path / "convergence.json").read_text())
    assert summary["checks"]["bf16"]["curves_identical"] is True and summary["checks"]["bf16"]["autobyte_no_further"]
    assert set(summary["curves_20_step_means"]) == {"ddp", "ddp+bf16", "autobyte:bf16"}
    assert (tmp_path / "convergence.png").stat().st_size > 1000
