"""benchmarks/bench_wire_auto.py: its summary from known runs (no processes), and its arguments refused in one line."""

from __future__ import annotations

import argparse

import pytest


@pytest.fixture(scope="module")
def bench(load_benchmark):
    return load_benchmark("bench_wire_auto")


ARGS = argparse.Namespace(phase=4, phases=2, skip=1, fp32_rounds=1, high_mbit=10000.0, low_mbit=200.0, rounds=2, timeout_s=60.0, out="x", rank=None)


def run(method, fast_s, slow_s, wires):
    """8 iterations: 4 compute-bound, then 4 link-bound; ``slow_s`` for link-bound iterations at fp32."""
    times = [fast_s if i < 4 else (slow_s if w == "fp32" else fast_s * 2) for i, w in enumerate(wires)]
    return {"method": method, "iter_s": times, "wires": wires, "decisions": [{"iteration": 5, "wire": "bf16", "reason": "r"}],
            "choices": [{"iteration": 6, "wire": "bf16", "gain": 1.5, "reason": "c"}]}


def test_the_summary_of_known_runs(bench):
    runs = {
        "auto": [run("auto", 0.1, 0.4, ["fp32"] * 5 + ["bf16"] * 3), run("auto", 0.1, 0.4, ["fp32"] * 5 + ["bf16"] * 3)],
        "bf16": [run("bf16", 0.1, 0.4, ["bf16"] * 8), run("bf16", 0.1, 0.4, ["bf16"] * 8)],
        "fp32": [run("fp32", 0.1, 0.4, ["fp32"] * 8)],
    }
    s = bench.summarize(runs, ARGS)
    # time after the first (untimed) iteration: auto 0.3 + 0.4 + 0.6 = 1.3 s, bf16 0.3 + 0.8 = 1.1 s, fp32 0.3 + 1.6 = 1.9 s
    assert s["seconds"]["auto"] == pytest.approx([1.3, 1.3]) and s["seconds"]["bf16"] == pytest.approx([1.1, 1.1])
    assert s["auto_vs_bf16"]["median"] == pytest.approx(1.1 / 1.3) and s["auto_vs_fp32"]["per_round"] == pytest.approx([1.9 / 1.3])
    assert s["fp32_share"]["auto"] == {"compute-bound": [1.0, 1.0], "link-bound": [0.25, 0.25]}
    assert s["fp32_share"]["bf16"]["link-bound"] == [0.0, 0.0] and s["fp32_share"]["fp32"]["compute-bound"] == [1.0]
    assert s["s_per_iteration"]["fp32"]["link-bound"] == [pytest.approx(0.4)]
    md = bench.markdown(s, "python benchmarks/bench_wire_auto.py --out x")
    assert "| auto vs static bf16 (speed) | 0.846x | 0.846-0.846x |" in md
    assert "| auto | 0.100 | " in md and "| 100%, 100% | 25%, 25% |" in md
    assert "- iteration 5: -> bf16: r" in md and "- iteration 6: chosen bf16: c" in md


@pytest.mark.parametrize("argv, message", [
    ([], "--out is required"),
    (["--out", "x", "--phase", "0"], "--phase must be a positive integer, but got 0."),
    (["--out", "x", "--phase", "10", "--skip", "10"], "--skip must be below --phase (10), but got 10."),
    (["--out", "x", "--rounds", "1", "--fp32-rounds", "2"], "--fp32-rounds must be between 0 and --rounds (1), but got 2."),
])
def test_bad_arguments_are_refused_naming_the_flag(bench, capsys, argv, message):
    with pytest.raises(SystemExit):
        bench.main(argv)
    assert message in capsys.readouterr().err
