"""benchmarks/bench_gpu.py: the CPU fallback runs for real (2 gloo ranks) and writes its files; bad arguments are refused."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

_ROOT = Path(__file__).resolve().parents[2]
_PATH = _ROOT / "benchmarks" / "bench_gpu.py"

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def bench(load_benchmark):
    return load_benchmark("bench_gpu")


def test_resnet50_has_the_real_structure(bench):
    full = bench.resnet50()
    assert sum(p.numel() for p in full.parameters()) == 25_557_032  # torchvision's resnet50: 25,557,032
    small = bench.resnet50(width=8, num_classes=10)
    assert len(list(small.parameters())) == len(list(full.parameters())) == 161
    assert small(torch.randn(2, 3, 32, 32)).shape == (2, 10)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU fallback; this machine has CUDA")
def test_cpu_fallback_runs_and_writes_json_and_markdown(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    cmd = [sys.executable, str(_PATH), "--out", str(tmp_path), "--rounds", "2", "--iters", "2", "--profile-iters", "1",
           "--grid", "2M:4,512K:2", "--tune-iters", "24", "--wire", "bf16", "--tuners", "static:6,autobyte"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-4000:]
    s = json.loads((tmp_path / "bench_gpu.json").read_text())
    assert s["device"] == "cpu" and s["fallback"] is True and "no CUDA" in s["fallback_reason"]
    assert s["backend"] == "gloo" and s["n_param_tensors"] == 161 and s["width"] == 8
    names = [m["name"] for m in s["modes"]]
    assert names[:4] == ["no communication (bound)", "DDP (bucket_cap_mb=25)", bench_names()[0], bench_names()[1]]
    assert names[4:6] == ["engine <2 MiB, 4X>", "engine <512 KiB, 2X>"] and s["best_grid"] in names[4:6]
    # --wire bf16: DDP with the one-line hook, and the engine at 16 bits, each 16-bit mode against the hook
    assert names[6:] == ["DDP + bf16_compress_hook", f"{bench_names()[0]}, bf16 wire", f"{bench_names()[1]}, bf16 wire"]
    hook = s["modes"][6]
    for m in s["modes"][7:]:
        assert m["ratio_vs_hook"]["median"] == pytest.approx(
            statistics.median(a / b for a, b in zip(m["samples_per_s"], hook["samples_per_s"])))
    assert all("ratio_vs_hook" not in m for m in s["modes"][:7])
    for m in s["modes"]:
        assert len(m["samples_per_s"]) == 2 and all(v > 0 for v in m["samples_per_s"]), m
        r = m["ratio_vs_ddp"]
        assert r["min"] <= r["median"] <= r["max"] and r["median"] > 0, m
    ddp_point = s["modes"][2]
    assert ddp_point["n_messages"] == 1 and ddp_point["optimizer_steps_per_iter"] == 1.0  # one grouped update, not 161
    o = s["overhead"]
    assert set(o["engine_host_ms_per_iter_in_training_loop_hooks"]) == {"iteration_start", "grad_hooks", "forward_waits"}
    assert set(o["engine_host_ms_per_iter_in_its_threads"]) == {"issue", "complete", "update"}
    assert o["engine_host_ms_per_iter_in_training_loop_hooks"]["grad_hooks"] > 0
    assert set(s["profiles"]) == {"DDP (bucket_cap_mb=25)", *bench_names()}
    for p in s["profiles"].values():
        assert p["iterations"] == 1 and p["per_iteration"]["aten_copy_"] > 0 and p["top_host"], p
        assert "top_device" not in p  # no device on the fallback
    if s["profile_all_threads"]:  # the engine's update runs on its completer thread
        assert s["profiles"][bench_names()[0]]["per_iteration"]["optimizer_steps"] == 1.0
    # by default the default configuration itself runs continuously (``static``), then the tuner, from the same start
    static, t = s["tuned"]
    assert static["tuner"] == "static" and not static["reconfigurations"] and static["final"] == static["start"]
    assert static["iterations"] == 6  # static:6: its own length
    assert t["tuner"] == "autobyte" and t["iterations"] == 24 and len(t["seconds"]) == 12 and t["chunk_iters"] == 2
    assert t["start"] == {"partition_bytes": 4_000_000, "credit_bytes": 16_000_000} and t["ddp_after_samples_per_s"] > 0
    # every iteration's host time, start to start: they add up to the chunks' (the last chunk also waits for the device)
    assert len(t["iter_seconds"]) == 24 and all(v > 0 for v in t["iter_seconds"])
    assert sum(t["iter_seconds"]) == pytest.approx(sum(t["seconds"]), rel=0.05)
    cont = "static <4 MB, 4X> continuous"
    assert set(t["ratio_vs"]) == {"DDP", "ByteScheduler's default", "DDP's point", "best of grid", cont}
    assert all(v["whole_run"] > 0 and v["second_half"] > 0 for v in t["ratio_vs"].values())
    assert static["ratio_vs"][cont]["whole_run"] == pytest.approx(1.0)  # measured the same way as the tuner: against itself
    assert t["ratio_vs"][cont]["whole_run"] == pytest.approx(t["whole_run_samples_per_s"] / static["whole_run_samples_per_s"])
    assert t["windows"] and all(w["observed_speed"] is None or w["observed_speed"] > 0 for w in t["windows"]), t["windows"]
    md = (tmp_path / "bench_gpu.md").read_text()
    assert "## Tuners" in md and "| autobyte | 24 |" in md and "| static | 6 |" in md and f"vs {cont}" in md
    assert "**CPU fallback**" in md and "not GPU figures" in md and "| DDP (bucket_cap_mb=25) | " in md
    assert "bf16 wire against DDP + the same precision's hook: " in md
    assert "load average" in md and proc.stdout.startswith("# bench_gpu")
    # summarized again from its JSON (nothing runs): the same figures
    again = tmp_path / "again"
    proc = subprocess.run([sys.executable, str(_PATH), "--resummarize", str(tmp_path / "bench_gpu.json"), "--out", str(again)],
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert json.loads((again / "bench_gpu.json").read_text())["tuned"][1]["ratio_vs"] == t["ratio_vs"]
    assert (again / "bench_gpu.md").read_text() == md


def test_a_static_configuration_run_twice_counts_at_its_median(bench):
    def run(name, sps, final):
        return {"tuner": name, "samples_per_s": [sps], "seconds": [1.0], "final": final, "ddp_after_samples_per_s": 100.0}

    modes = [{"name": n, "kind": k, "samples_per_s": [100.0], "seconds": [1.0], **({"grid": True} if g else {})}
             for n, k, g in (("no communication (bound)", "none", False), ("DDP (bucket_cap_mb=25)", "ddp", False),
                             (bench_names()[0], "engine", False), (bench_names()[1], "engine", False),
                             ("engine <16 MiB, 2X>", "engine", True))]
    default = {"partition_bytes": 4_000_000, "credit_bytes": 16_000_000}
    big = {"partition_bytes": 16 << 20, "credit_bytes": 32 << 20}
    raw = {"modes": modes, "tuned": [run("static", 100.0, default), run("static-16m-2x", 110.0, big), run("autobyte", 105.0, default),
                                     run("static", 90.0, default), run("static", 120.0, default)]}
    s = bench.summarize(raw, {"iters": 1})
    t = s["tuned"][2]
    assert t["ratio_vs"]["static <4 MB, 4X> continuous"]["whole_run"] == pytest.approx(105 / 100)  # median of 100, 90, 120
    assert t["ratio_vs"]["static-16m-2x <16 MiB, 2X> continuous"]["whole_run"] == pytest.approx(105 / 110)
    assert t["ratio_vs"]["best continuous static"]["whole_run"] == pytest.approx(105 / 110)


def test_a_static_run_at_16_bits_is_a_baseline_and_the_auto_wire_is_a_tuner(bench):
    def run(name, sps, final):
        return {"tuner": name, "samples_per_s": [sps], "seconds": [1.0], "final": final, "ddp_after_samples_per_s": 100.0}

    modes = [{"name": n, "kind": k, "samples_per_s": [100.0], "seconds": [1.0]}
             for n, k in (("no communication (bound)", "none"), ("DDP (bucket_cap_mb=25)", "ddp"),
                          (bench_names()[0], "engine"), (bench_names()[1], "engine"))]
    default = {"partition_bytes": 4_000_000, "credit_bytes": 16_000_000}
    raw = {"modes": modes, "tuned": [run("static", 100.0, default), run("static@bf16", 110.0, {**default, "wire": "bf16"}),
                                     run("autobyte@auto", 108.0, {**default, "wire": "bf16"})]}
    s = bench.summarize(raw, {"iters": 1})
    t = s["tuned"][2]
    assert set(t["ratio_vs"]) >= {"static <4 MB, 4X> continuous", "static@bf16 <4 MB, 4X, bf16> continuous", "best continuous static"}
    assert t["ratio_vs"]["static@bf16 <4 MB, 4X, bf16> continuous"]["whole_run"] == pytest.approx(108 / 110)
    assert t["ratio_vs"]["best continuous static"]["whole_run"] == pytest.approx(108 / 110)
    assert not any(k.startswith("autobyte@auto") for k in t["ratio_vs"])  # a tuner, never a baseline


def bench_names() -> tuple[str, str]:
    return ("engine <25 MiB, unlimited> (DDP's point)", "engine <4 MB, 4X> (ByteScheduler's default)")


@pytest.mark.parametrize("argv, message", [
    (["--grid", "4M"], "--grid must be a comma-separated list of PARTITION:CREDIT_MULTIPLE"),
    (["--grid", "4M:0"], "--grid sizes and credit multiples must be positive, but got '4M:0'"),
    (["--batch-size", "0"], "--batch-size must be a positive integer, but got 0."),
    ([], "--out is required"),
    (["--tuners", "autobytes"], "--tuners: each name must be one of autobyte, bo, grid, static (or 'none'), but got 'autobytes'."),
    (["--tune-iters", "0"], "--tune-iters must be a positive integer, but got 0."),
    (["--tuners", "static:0"], "--tuners: ITERS in NAME:ITERS must be a positive integer, but got 'static:0'."),
    (["--tuners", "static:x"], "--tuners: ITERS in NAME:ITERS must be a positive integer, but got 'static:x'."),
    (["--tuners", "autobyte@fp8:100"], "--tuners: WIRE in NAME@WIRE must be one of fp32, bf16, fp16, auto, but got 'autobyte@fp8:100'."),
    (["--resummarize", "/nonexistent/bench_gpu.json"], "--resummarize must name a bench_gpu.json, but '/nonexistent/bench_gpu.json' could not be read"),
])
def test_bad_arguments_are_refused_naming_the_flag(bench, tmp_path, capsys, argv, message):
    full = argv + (["--out", str(tmp_path)] if argv else [])
    with pytest.raises(SystemExit) as exc:
        bench.main(full)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_asking_for_cuda_without_it_is_refused(bench, tmp_path, capsys):
    with pytest.raises(SystemExit):
        bench.main(["--out", str(tmp_path), "--device", "cuda"])
    assert "torch.cuda.is_available() is False" in capsys.readouterr().err
