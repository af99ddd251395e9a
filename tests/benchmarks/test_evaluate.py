"""``benchmarks/evaluate.py``: the paper's experiments on the simulator, run through the controller as an engine runs."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

from autobyte.core.space import BYTESCHEDULER_DEFAULT


@pytest.fixture(scope="module")
def ev(load_benchmark) -> ModuleType:
    return load_benchmark("evaluate")


@pytest.mark.skipif(importlib.util.find_spec("bayes_opt") is None or importlib.util.find_spec("matplotlib") is None,
                    reason="static BO and the plots need bayesian-optimization and matplotlib (pip install 'autobyte[tune,plots]'), absent here")
def test_fig7_runs_through_the_controller_and_beats_static_bo(ev: ModuleType, tmp_path: Path) -> None:
    # the shipped weights on the paper's Fig. 7 set-up (jobs joining), as `python benchmarks/evaluate.py --only fig7`
    assert ev.main(["--out", str(tmp_path), "--only", "fig7"]) == 0
    res = json.loads((tmp_path / "figures" / "eval_results.json").read_text())["fig7"]
    assert (tmp_path / "figures" / "eval_fig7.png").stat().st_size > 0
    assert res["autobyte_vs_oracle"] >= 0.95 and res["autobyte_vs_static_bo"] >= 1.10
    assert all(k is not None and k <= 20 for k in res["iters_to_5pct_after_change"])
    assert len(res["series"]["autobyte"]) == 6


def test_static_runs_keep_their_config_and_record_every_check(ev: ModuleType) -> None:
    from autobyte import sim

    model, cl = sim.get_model("alexnet"), sim.Cluster.from_gbps(4, 10, "ps")
    run = ev.run_tuner("static", None, BYTESCHEDULER_DEFAULT, model, lambda w: cl, 2)
    assert run.configs == [BYTESCHEDULER_DEFAULT] * 2 and run.changes == []
    assert len(run.check_speeds) == 2 * ev.WINDOW // ev.CHECK and len(run.speeds) == 2


def test_says_what_to_install_before_simulating(ev: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # what Python does for a package that is not installed
    with pytest.raises(ImportError, match=r"benchmarks/evaluate.py\) needs matplotlib, .* pip install 'autobyte\[plots\]'"):
        ev.run_all(tmp_path, only={"fig7"})
    assert not (tmp_path / "figures" / "eval_results.json").exists()


@pytest.mark.parametrize("argv, message", [
    (["--only", "nosuch"], "--only must be a comma-separated subset of fig5,fig6,fig7,fig89,steady,shift, but got --only='nosuch'"),
    (["--only", "fig5,fig77"], "('fig77' unknown)"),
    (["--only", ","], "--only must be a comma-separated subset"),
    (["--weights", "{tmp}/missing"], "--weights must be an existing file"),
    (["--weights", "{tmp}/bad.npz", "--out", "{tmp}/ev"], "is not usable meta-network weights"),
    (["--out", "{tmp}/plain.txt"], "--out must be a folder"),
])
def test_bad_arguments_are_one_line_with_exit_2(ev: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               argv: list[str], message: str) -> None:
    (tmp_path / "plain.txt").write_text("not a folder\n")
    (tmp_path / "bad.npz").write_bytes(b"PK\x03\x04 truncated")
    (tmp_path / "bad.npz.json").write_text("{}")
    assert ev.main([a.format(tmp=tmp_path) for a in argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("benchmarks/evaluate.py: error: ") and message in err, err
