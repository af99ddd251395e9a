"""``autobyte demo``'s tables from given iteration times: no processes (the real jobs are in ``test_demo.py``)."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from autobyte.bench import demo
from autobyte.bench.demo import DemoPlan, run_demo

#: seconds per iteration of each method in each round (rounds drift apart, as on a shared machine)
SECONDS = {
    "ddp": [0.40, 0.20, 0.80],
    "bytescheduler": [0.32, 0.25, 0.40],
    "autobyte": [0.50, 0.20, 0.40],
    "ddp_hook": [0.25, 0.10, 0.50],
    "autobyte_wire": [0.20, 0.125, 0.50],
}
WIRE_MOVE = {"iteration": 12, "old": {"partition_bytes": 4_000_000, "credit_bytes": 16_000_000},
             "new": {"partition_bytes": 4_000_000, "credit_bytes": 16_000_000, "wire": "bf16"},
             "reason": "wire trial, for speed: bf16 against fp32 (measured 80.0 samples/s in these conditions)"}
WIRE_KEPT = {"iteration": 30, "wire": "bf16", "gain": 1.3,
             "reason": "wire bf16, for speed: measured 1.300x fp32 in these conditions"}
#: a choice that moved: its reconfiguration's reason is cut to the window protocol's 96 bytes
WIRE_CHOSEN = {"iteration": 24, "wire": "fp32", "gain": 1.01,
               "reason": "wire fp32, for exactness: bf16 measured 1.010x fp32 in these conditions (80.8 against 80.0 samples/s, "
                         "1 and 1 windows), below 1 + min_gain = 1.05"}
WIRE_BACK = {"iteration": 24, "old": WIRE_MOVE["new"], "new": WIRE_MOVE["old"], "reason": WIRE_CHOSEN["reason"][:96]}


def _fake_job(spec: dict[str, Any], out: str, plan: DemoPlan, shaped: bool) -> list[dict[str, Any]]:
    """What ``lightning_job`` leaves in ``out`` and returns, for the method and round ``out`` names."""
    rnd, key = int(os.path.basename(os.path.dirname(out))[len("round"):]) - 1, os.path.basename(out)
    os.makedirs(out)
    wire = "fp16" if spec.get("comm_hook") else "fp32"
    rows = []
    for i in range(plan.iters):
        if spec.get("wire") == "auto":
            wire = "bf16" if i >= 12 else "fp32"  # 16 bits from iteration 12 on
        rows.append({"iteration": i, "seconds": SECONDS[key][rnd], "wire": wire, "threads": 1})
    with open(os.path.join(out, "job.json"), "w") as f:
        json.dump({"comm_hooks": [spec["comm_hook"]] if spec.get("comm_hook") else []}, f)
    with open(os.path.join(out, "decisions.jsonl"), "w") as f:
        f.write(json.dumps({"iteration": 9, "config": [1 << 20, 4 << 20], "reason": "predicted faster"}) + "\n")
    with open(os.path.join(out, "reconfigurations.jsonl"), "w") as f:
        if spec.get("wire") == "auto":
            f.write(json.dumps(WIRE_MOVE) + "\n" + json.dumps(WIRE_BACK) + "\n")
    with open(os.path.join(out, "wire_choices.jsonl"), "w") as f:
        if spec.get("wire") == "auto":
            f.write(json.dumps(WIRE_CHOSEN) + "\n" + json.dumps(WIRE_KEPT) + "\n")
    return rows


@pytest.fixture
def fake_jobs(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    specs: list[dict[str, Any]] = []

    def job(spec: dict[str, Any], out: str, plan: DemoPlan, shaped: bool) -> list[dict[str, Any]]:
        specs.append(spec)
        return _fake_job(spec, out, plan, shaped)

    monkeypatch.setattr(demo, "can_shape", lambda: (True, ""))
    monkeypatch.setattr(demo, "_run_job", job)
    return specs


def test_every_ratio_is_taken_within_a_round(tmp_path, fake_jobs):
    lines: list[str] = []
    s = run_demo(DemoPlan(iters=40, every=20, rounds=3), str(tmp_path), log=lines.append)
    m = s["methods"]
    assert list(m) == ["ddp", "bytescheduler", "autobyte", "ddp_hook", "autobyte_wire"]
    assert m["ddp"]["speedup_vs_ddp"]["all"] == [1.0, 1.0, 1.0]
    # round by round: DDP's seconds over the method's (equal iterations, equal batch)
    assert m["ddp_hook"]["speedup_vs_ddp"]["all"] == pytest.approx([1.6, 2.0, 1.6])
    assert m["autobyte_wire"]["speedup_vs_ddp"]["all"] == pytest.approx([2.0, 1.6, 1.6])
    assert m["autobyte_wire"]["speedup_vs_ddp_hook"]["all"] == pytest.approx([1.25, 0.8, 1.0])
    # the median of the rounds' ratios; a ratio of medians (0.25 s against 0.20 s) would say 1.25x
    assert m["autobyte_wire"]["median_speedup_vs_ddp_hook"]["all"] == pytest.approx(1.0)
    assert m["autobyte"]["speedup_vs_ddp"]["all"] == pytest.approx([0.8, 1.0, 2.0])
    # the share at 16 bits counts the measured iterations (3 start-up ones left out): 12..39 of 3..39
    share = m["autobyte_wire"]["share_16bit"]
    assert share["all"] == pytest.approx([28 / 37] * 3)
    assert share["fast"] == pytest.approx([8 / 17] * 3) and share["slow"] == [1.0] * 3
    assert all(0 <= x <= 1 for v in share.values() for x in v)
    # the wire's decisions: the move, and a choice that kept the precision in force
    assert s["wire_decisions"] == [[WIRE_MOVE, WIRE_BACK]] * 3 and s["wire_choices"] == [[WIRE_CHOSEN, WIRE_KEPT]] * 3
    text = "\n".join(lines)
    assert "| DDP + fp16_compress_hook | " in text and "| AutoByte, wire='auto' | " in text
    assert "Speed-up over DDP + fp16_compress_hook (what a link-bound user runs instead) in the same round" in text
    assert "| AutoByte, wire='auto' | 1.00x (0.80x-1.25x) | 1.00x (0.80x-1.25x) | 1.00x (0.80x-1.25x) |" in text
    assert "share of iterations at 16 bits, median (min-max) of 3 rounds: fast (500 Mbit/s) 47% (47%-47%)" in text
    assert ("iteration  12 (fast): -> <partition 3.8147 MiB, credit 4X, bf16>  because wire trial, for speed" in text)
    assert "iteration  30 (slow): kept bf16  because wire bf16, for speed: measured 1.300x fp32" in text
    # the move back to fp32 is said once, with its whole reason
    assert f"iteration  24 (slow): -> <partition 3.8147 MiB, credit 4X>  because {WIRE_CHOSEN['reason']}" in text
    assert "kept fp32" not in text
    assert json.loads((tmp_path / "summary.json").read_text())["methods"]["autobyte_wire"]["speedup_vs_ddp_hook"]
    # what each job was asked to run
    assert {json.dumps(x, sort_keys=True) for x in fake_jobs} >= {
        json.dumps({"method": "ddp", "iters": 40, "comm_hook": "fp16_compress_hook"}, sort_keys=True)}
    wire_spec = next(x for x in fake_jobs if x.get("wire"))
    assert wire_spec["wire"] == "auto" and wire_spec["method"] == "tuner" and wire_spec["tuner"] == "autobyte"


def test_rounds_rotate_every_method_and_a_subset_keeps_the_table_order(tmp_path, fake_jobs):
    lines: list[str] = []
    s = run_demo(DemoPlan(iters=8, every=4, rounds=3, methods=("autobyte_wire", "ddp")), str(tmp_path), log=lines.append)
    assert [x.get("wire", "-") for x in fake_jobs] == ["-", "auto", "auto", "-", "-", "auto"]  # ddp first, then the other
    assert list(s["methods"]) == ["ddp", "autobyte_wire"]
    assert "speedup_vs_ddp_hook" not in s["methods"]["autobyte_wire"]  # no hook run: no ratio to it
    text = "\n".join(lines)
    assert "What AutoByte chose:" not in text and "over DDP + fp16_compress_hook" not in text
    assert s["decisions"] == []


def test_a_hook_that_was_not_registered_fails_the_demo(tmp_path, monkeypatch):
    def job(spec: dict[str, Any], out: str, plan: DemoPlan, shaped: bool) -> list[dict[str, Any]]:
        rows = _fake_job(spec, out, plan, shaped)
        with open(os.path.join(out, "job.json"), "w") as f:
            json.dump({"comm_hooks": []}, f)  # as Lightning leaves it on CPU
        return rows

    monkeypatch.setattr(demo, "can_shape", lambda: (True, ""))
    monkeypatch.setattr(demo, "_run_job", job)
    with pytest.raises(RuntimeError, match=r"the DDP \+ hook job ran with comm hooks \[\], not fp16_compress_hook"):
        run_demo(DemoPlan(iters=4, every=2, rounds=1, methods=("ddp", "ddp_hook")), str(tmp_path), log=lambda _: None)
