"""benchmarks/controller_cost.py: its arguments refused in one line (the run itself starts ranks: see its docstring)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load():
    spec = importlib.util.spec_from_file_location("controller_cost", ROOT / "benchmarks" / "controller_cost.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("argv", [["--rounds", "1"], ["--iters", "0"]])
def test_bad_arguments_are_refused_naming_them(capsys, argv):
    with pytest.raises(SystemExit):
        _load().main(argv)
    assert "--rounds must be at least 2 and --iters positive, but got" in capsys.readouterr().err


def test_the_three_modes_are_the_engine_alone_a_static_tuner_and_wire_auto():
    assert _load().MODES == ("none", "static", "wire-auto")
