"""``benchmarks/bench_fig89_emu.py``: its arguments, its points and the Fig. 8/9 table built from run_bench outputs (no run)."""

from __future__ import annotations

import csv
import json
import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MiB = 1 << 20


@pytest.fixture(scope="module")
def fig(load_benchmark):
    return load_benchmark("bench_fig89_emu")


@pytest.fixture()
def sim_params(fig, load_benchmark, tmp_path, monkeypatch):
    """The fitted simulator parameters the summary reads, as bench_emulated.py writes them (here: the calibration's)."""
    params = load_benchmark("bench_emulated").base_params().to_dict()
    paths = {}
    for arch, name in (("allreduce", "sim_vs_real.json"), ("ps", "ps_sim_vs_real.json")):
        paths[arch] = tmp_path / "emulated" / name
        paths[arch].parent.mkdir(exist_ok=True)
        paths[arch].write_text(json.dumps({"fit": {"params": params}}))
        monkeypatch.setitem(fig.SIM_PARAMS, arch, str(paths[arch]))
    return paths


@pytest.mark.parametrize(
    "argv, match",
    [
        (["--points", "gpu:resnet50:500"], r"argument --points: a point's ARCH must be one of \('allreduce', 'ps'\), but got 'gpu'"),
        (["--points", "ps:resnet51:500"], r"argument --points: a point's MODEL must be one of .*, but got 'resnet51'"),
        (["--points", "ps:vgg16:0"], r"argument --points: a point's MBIT must be a rate in \(0, 1e6\] Mbit/s, but got '0'"),
        (["--points", "ps:vgg16:fast"], r"MBIT must be a rate .* but got 'fast'"),
        (["--points", "ps:vgg16"], r"argument --points: each point must be ARCH:MODEL:MBIT .*, but got 'ps:vgg16'"),
        (["--points", "ps:vgg16:2500,ps:vgg16:2500"], r"each point may appear once, but got 'ps:vgg16:2500' twice"),
        (["--iters", "1"], r"argument --iters: iters must be an integer >= 2 .*, but got '1'"),
        (["--iters", "ten"], r"argument --iters: iters must be an integer >= 2"),
        (["--methods", "ddp,autobyte"], r"argument --methods: methods must be among .*, but got 'ddp'"),
        (["--methods", "oracle,oracle"], r"each method may appear once"),
        (["--grid-ps", "0.5:8"], r"argument --grid-ps: each config must be PARTITION_MIBxCREDIT_MULTIPLE .*, but got '0.5:8'"),
        (["--grid-allreduce", "0x2"], r"argument --grid-allreduce: a config's partition and credit multiple must be positive, but got '0x2'"),
    ],
)
def test_bad_arguments_name_the_argument_rule_and_value(fig, tmp_path, capsys, argv, match):
    with pytest.raises(SystemExit) as e:
        fig.main([str(tmp_path / "out"), *argv])
    assert e.value.code == 2
    assert re.search(match, capsys.readouterr().err)


def test_summarize_only_needs_an_existing_out_with_points(fig, tmp_path, capsys):
    with pytest.raises(SystemExit):
        fig.main([str(tmp_path / "missing"), "--summarize-only"])
    assert "OUT must be an existing directory with --summarize-only, but got" in capsys.readouterr().err
    (tmp_path / "ps-resnet50-500").mkdir()  # no summary.json: not a point
    with pytest.raises(SystemExit):
        fig.main([str(tmp_path), "--summarize-only"])
    assert "found no ARCH-MODEL-MBIT directory with a summary.json" in capsys.readouterr().err


def test_points_grid_and_plans(fig, sim_params):
    pts = fig.parse_points("ps:resnet50:500, allreduce:vgg16:2500")
    assert pts == [fig.Point("ps", "resnet50", 500.0), fig.Point("allreduce", "vgg16", 2500.0)]
    assert [p.name for p in pts] == ["ps-resnet50-500", "allreduce-vgg16-2500"]
    assert fig.parse_grid("0.5x8,2x16") == [fig.Config(MiB // 2, 4 * MiB), fig.Config(2 * MiB, 32 * MiB)]
    plan = fig.plan_for(pts[1], iters=30, methods=["baseline", "oracle", "autobyte"], grid=fig.parse_grid("2x2"))
    assert plan.methods == ["ddp", "oracle", "autobyte"] and plan.arch == "allreduce"
    assert plan.trace_spec() == "const:2500" and plan.batch_size == 32 and plan.window_iters == 5
    assert plan.model_spec == {"model": "emu:vgg16", "compute_scale": 10.0}
    ps = fig.plan_for(pts[0], iters=30, methods=["baseline"], grid=fig.parse_grid("2x2"))
    assert ps.methods == ["dist_sync"] and ps.batch_size == 64
    # every default point parses and the default run fits the ~35 minutes it is sized for
    default = fig.parse_points(fig.DEFAULT_POINTS)
    assert {p.arch for p in default} == {"ps", "allreduce"} and {p.model for p in default} == {"resnet50", "vgg16", "alexnet"}
    total = sum(fig.estimate_s(p, fig.plan_for(p, iters=30, methods=fig.parse_methods(fig.DEFAULT_METHODS),
                                                grid=fig.parse_grid(fig.DEFAULT_GRIDS[p.arch]))) for p in default)
    assert 20 * 60 < total < 37 * 60
    short = fig.plan_for(pts[0], iters=10, methods=["baseline", "oracle"], grid=fig.parse_grid("2x2"))
    assert fig.estimate_s(pts[0], short) < fig.estimate_s(pts[0], fig.plan_for(pts[0], iters=30, methods=["baseline", "oracle"],
                                                                                 grid=fig.parse_grid("2x2")))


def _write_point(d: Path, arch: str, rate: float, base: str, speeds: dict[str, tuple[float, float]], iters: int = 6,
                 oracle=(MiB // 2, 4 * MiB), grid=((MiB // 2, 4 * MiB, 60.0), (2 * MiB, 32 * MiB, 55.0))) -> None:
    """A run_bench output as ``autobyte.bench._real.write_outputs`` lays it out (summary.json, iterations.csv).

    ``speeds[method] = (first-half s/it, second-half s/it)``, 128 samples per iteration.
    """
    d.mkdir(parents=True)
    rows, thr = [], {}
    for m, (s1, s2) in speeds.items():
        secs = [s1 if i < iters // 2 else s2 for i in range(iters)]
        rows += [[m, i, rate, f"{s:.6f}", f"{128 / s:.3f}", 26214400, ""] for i, s in enumerate(secs)]
        a = 128 * iters / sum(secs)
        thr[m] = {"all": a, "low": a, "high": a}
    with open(d / "iterations.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["method", "iteration", "rate_mbit", "seconds", "samples_per_s", "partition_bytes", "credit_bytes"])
        w.writerows(rows)
    summary = {"throughput": thr, "trace": f"const:{rate:g}",
               f"vs_{base}": {m: {k: v[k] / thr[base][k] for k in v} for m, v in thr.items()},
               "bo_config": None, "oracle_configs": {f"{rate:g}": {"partition_bytes": oracle[0], "credit_bytes": oracle[1]}},
               "hindsight_config": list(oracle), "arch": arch, "grid": {f"{rate:g}": [list(g) for g in grid]}}
    (d / "summary.json").write_text(json.dumps(summary, indent=1))


def test_summarize_takes_second_halves_ratios_simulator_and_paper(fig, sim_params, tmp_path, capsys):
    _write_point(tmp_path / "ps-resnet50-500", "ps", 500, "dist_sync",
                 {"dist_sync": (4.0, 2.0), "bytescheduler": (3.0, 1.6), "oracle": (3.0, 1.0), "autobyte": (9.0, 1.6)})
    _write_point(tmp_path / "allreduce-alexnet-2500", "allreduce", 2500, "ddp", {"ddp": (2.0, 2.0), "autobyte": (1.0, 1.0)})
    (tmp_path / "notes").mkdir()  # not a point directory: ignored
    rows = fig.main([str(tmp_path), "--summarize-only"])
    assert [r["point"] for r in rows] == ["allreduce-alexnet-2500", "ps-resnet50-500"]
    ps = rows[1]
    m = ps["measured"]
    assert set(m) == {"baseline", "bytescheduler", "oracle", "autobyte"} and ps["baseline_method"] == "dist_sync"
    # the figure is the second half (iterations 3-5): AutoByte's slow start does not count, unlike the run's "all"
    assert m["autobyte"]["second_half"] == pytest.approx(80.0, rel=1e-4)
    assert m["autobyte"]["all"] == pytest.approx(128 * 6 / (3 * 9.0 + 3 * 1.6))
    assert m["baseline"]["second_half"] == pytest.approx(64.0, rel=1e-4)
    q = ps["ratios"]
    assert q["autobyte_vs_baseline"] == pytest.approx(1.25, rel=1e-4)
    assert q["oracle_vs_baseline"] == pytest.approx(2.0, rel=1e-4)
    assert q["autobyte_vs_bytescheduler"] == pytest.approx(1.0, rel=1e-4)
    assert q["autobyte_vs_oracle"] == pytest.approx(1.0 / 1.6, rel=1e-4)
    assert q["grid_best_vs_baseline"] == pytest.approx(60.0 / 64.0, rel=1e-4)
    assert q["autobyte_vs_bo"] is None  # BO did not run
    assert ps["oracle_config"] == [MiB // 2, 4 * MiB] and ps["paper_gbps"] == 5.0
    assert ps["paper"]["over_baseline_pct"] == [16.7, 60.1] and ps["paper"]["over_bo_pct"] == [3.1, 17.5]
    s = ps["sim"]
    assert s["params"] == os.path.relpath(sim_params["ps"], ROOT)
    assert all(s[k] > 0 for k in ("baseline", "bytescheduler", "oracle_config", "grid_best"))
    assert s["oracle_config_vs_baseline"] == pytest.approx(s["oracle_config"] / s["baseline"])
    assert s["grid_best_config"] in ([MiB // 2, 4 * MiB], [2 * MiB, 32 * MiB])
    ar = rows[0]
    assert ar["sim"]["params"] == os.path.relpath(sim_params["allreduce"], ROOT) and ar["sim"]["baseline_stand_in"].startswith("simulate_ddp")
    assert ar["ratios"]["autobyte_vs_baseline"] == pytest.approx(2.0, rel=1e-4) and ar["ratios"]["oracle_vs_baseline"] is None
    assert ar["paper"]["over_baseline_pct"] == [15.1, 144.4]
    # the simulator's prediction depends on the point's rate: ResNet-50 is slower at 500 Mbit/s than at 2500
    fast = fig.simulated(fig.Point("ps", "resnet50", 2500.0), {})
    assert fast["baseline"] > s["baseline"]
    saved = json.loads((tmp_path / "fig89.json").read_text())
    assert [p["point"] for p in saved["points"]] == ["allreduce-alexnet-2500", "ps-resnet50-500"]
    md = (tmp_path / "fig89.md").read_text()
    assert "| ps | resnet50 | 500 (5) | 64.0 | 80.0 | 128.0 | <0.5 MiB, 8X> | 80.0 | 2.000x | 1.250x | 1.000x | 0.625x |" in md
    assert "+16.7..60.1% | +3.1..17.5% |" in md
    assert md in capsys.readouterr().out


def test_summarize_rejects_a_point_of_another_run(fig, sim_params, tmp_path):
    _write_point(tmp_path / "ps-resnet50-500", "ps", 1000, "dist_sync", {"dist_sync": (2.0, 2.0)})
    with pytest.raises(ValueError, match=r"point ps-resnet50-500: .* trace='const:1000', not arch='ps', trace='const:500'"):
        fig.main([str(tmp_path), "--summarize-only"])
    with pytest.raises(FileNotFoundError, match="point ps-vgg16-2500: no run_bench summary in"):
        fig.main([str(tmp_path), "--summarize-only", "--points", "ps:vgg16:2500"])
