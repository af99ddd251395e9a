"""benchmarks/suite_ab_table.py: an A/B table of a suite's methods against a reference, on files written as the suite writes them."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

FIELDS = ["method", "repeat", "iteration", "condition", "seconds", "samples_per_s", "partition_bytes", "credit_bytes"]


def _suite(root: Path) -> None:
    (root / "sc").mkdir(parents=True)
    (root / "suite_summary.json").write_text(json.dumps({"scenarios": [{"name": "sc"}]}))
    times = {"bytescheduler": 0.1, "tuner:static-history": 0.08, "tuner:autobyte-history": 0.0825}
    methods = {m: {"median": 16 / t, "min": 16 / t, "max": 16 / t, "samples_per_s": [16 / t] * 2} for m, t in times.items()}
    methods["tuner:autobyte-history"].update(trials={"trials": 1.5}, tuner_cpu_share=0.002, adapt_cpu_share=0.001)
    (root / "sc" / "summary.json").write_text(json.dumps({"name": "sc", "tag": "heldout", "methods": methods}))
    with open(root / "sc" / "iterations.csv", "w", newline="") as f:
        w = csv.DictWriter(f, FIELDS)
        w.writeheader()
        for m, t in times.items():
            for rep in (0, 1):
                for i in range(60):
                    w.writerow({"method": m, "repeat": rep, "iteration": i, "condition": "a", "seconds": t,
                                "samples_per_s": 16 / t, "partition_bytes": 1, "credit_bytes": 1})
    rows = [{"method": "tuner:autobyte-history", "repeat": rep, "iteration": 12, "regime_changed": True, "regime_rule": rule}
            for rep, rule in ((0, "step"), (1, "speed"), (1, "step"))]
    rows += [{"method": m, "repeat": rep, "iteration": 12} for m in ("bytescheduler", "tuner:static-history") for rep in (0, 1)]
    (root / "sc" / "decisions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_ratios_spans_changes_and_geomeans(load_benchmark, tmp_path, capsys):
    bench = load_benchmark("suite_ab_table")
    _suite(tmp_path)
    lines = bench.table(str(tmp_path), "tuner:static-history")
    (row,) = [ln for ln in lines if ln.startswith("| sc (heldout) | tuner:autobyte-history")]
    cells = [c.strip() for c in row.split("|")[1:-1]]
    assert cells[3] == "0.970" and cells[4] == "1.212"  # 0.08/0.0825 against the reference, 0.1/0.0825 the default
    assert float(cells[5]) == pytest.approx(0.0825 / 0.08, abs=1e-3)  # worst 50 iterations against the reference's run
    assert cells[6] == "1.5" and cells[7] == "1.5 (1)" and cells[8] == "0.20% / 0.10%"
    assert any(ln.startswith("| geomean heldout (1) | tuner:autobyte-history | | 0.970 | 1.212") for ln in lines)
    assert bench.main([str(tmp_path)]) == 0 and "tuner:autobyte-history" in capsys.readouterr().out


def test_bad_arguments(load_benchmark, tmp_path, capsys):
    bench = load_benchmark("suite_ab_table")
    with pytest.raises(SystemExit):
        bench.main([str(tmp_path)])
    assert "must be a suite's --out folder" in capsys.readouterr().err
    _suite(tmp_path)
    with pytest.raises(SystemExit, match="no runs of --ref autobyte"):
        bench.table(str(tmp_path), "autobyte")
