"""benchmarks/controller_cost.py: its arguments refused in one line (the run itself starts ranks: see its docstring)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def script(load_benchmark):
    return load_benchmark("controller_cost")


@pytest.mark.parametrize("argv", [["--rounds", "1"], ["--iters", "0"]])
def test_bad_arguments_are_refused_naming_them(script, capsys, argv):
    with pytest.raises(SystemExit):
        script.main(argv)
    assert "--rounds must be at least 2 and --iters positive, but got" in capsys.readouterr().err


def test_the_three_modes_are_the_engine_alone_a_static_tuner_and_wire_auto(script):
    assert script.MODES == ("none", "static", "wire-auto")
