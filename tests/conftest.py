"""Fixtures shared by every test folder."""

from __future__ import annotations

import csv
import importlib.util
import multiprocessing.process
import platform
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Callable

import pytest

from autobyte.bench._suite import ITERATION_FIELDS

# Libraries ask ``uname -p`` once per process (Keras through platform.processor()); asked here, before any test,
# the answer is cached, and the fast layer's guard below sees only the processes a test itself starts.
platform.processor()


def _fast_layer(config: pytest.Config) -> bool:
    """Whether this run is the fast layer (``-m "not integration"``)."""
    return "not integration" in (config.getoption("markexpr", "") or "")


@pytest.fixture(autouse=True)
def _fast_layer_starts_no_process(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """In the fast layer a test that starts a process fails, naming the marker it lacks: the layer's promise
    (no subprocess, no rank, no namespace) is checked, not trusted."""
    if not _fast_layer(request.config):
        return

    def refuse(*args: object, **kwargs: object) -> None:
        raise RuntimeError(f"{request.node.nodeid} starts a process but is not marked integration: "
                           "add pytest.mark.integration (the fast layer, -m 'not integration', starts none)")

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse)
    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", refuse)


#: the repository's benchmark scripts (not a package: loaded by path)
BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="session")
def load_benchmark() -> Callable[[str], ModuleType]:
    """``load_benchmark("bench_gpu")``: the script ``benchmarks/bench_gpu.py`` as a module (registered in
    ``sys.modules`` under its name, so the dataclasses and pickles it defines resolve)."""
    def load(name: str) -> ModuleType:
        spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
        assert spec is not None and spec.loader is not None, f"no benchmark script {name}.py in {BENCHMARKS}"
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
        return mod

    return load


@pytest.fixture(scope="session")
def suite_iterations() -> Callable[..., Path]:
    """``suite_iterations(folder, times, conditions)``: writes ``folder/sc/iterations.csv`` as the suite writes it,
    one run (ByteScheduler's default, repeat 0) whose iteration ``i`` took ``times[i]`` in ``conditions[i]``."""
    def write(folder: Path, times: list[float], conditions: list[str]) -> Path:
        (folder / "sc").mkdir(parents=True)
        path = folder / "sc" / "iterations.csv"
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, ITERATION_FIELDS)
            w.writeheader()
            for i, (t, c) in enumerate(zip(times, conditions)):
                w.writerow({"method": "bytescheduler", "repeat": 0, "iteration": i, "condition": c, "seconds": t,
                            "samples_per_s": 16 / t, "partition_bytes": 4000000, "credit_bytes": 16000000})
        return path
    return write
