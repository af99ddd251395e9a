"""Fixtures shared by every test folder."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Callable

import pytest

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
