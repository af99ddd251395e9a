from __future__ import annotations

import importlib.util
import json

import pytest

from autobyte.core.space import BYTESCHEDULER_DEFAULT
from autobyte.meta._evaluate import CHECK, WINDOW, run_all, run_tuner


@pytest.mark.skipif(importlib.util.find_spec("bayes_opt") is None or importlib.util.find_spec("matplotlib") is None,
                    reason="static BO and the plots need bayesian-optimization and matplotlib (pip install 'autobyte[tune,plots]'), absent here")
def test_fig7_runs_through_the_controller_and_beats_static_bo(tmp_path):
    # the shipped weights on the paper's Fig. 7 set-up (jobs joining), as `autobyte evaluate --only fig7`
    res = run_all(tmp_path, only={"fig7"})["fig7"]
    assert json.loads((tmp_path / "figures" / "eval_results.json").read_text())["fig7"]["mean"] == res["mean"]
    assert (tmp_path / "figures" / "eval_fig7.png").stat().st_size > 0
    assert res["autobyte_vs_oracle"] >= 0.95 and res["autobyte_vs_static_bo"] >= 1.10
    assert all(k is not None and k <= 20 for k in res["iters_to_5pct_after_change"])
    assert len(res["series"]["autobyte"]) == 6


def test_static_runs_keep_their_config_and_record_every_check():
    from autobyte import sim

    model, cl = sim.get_model("alexnet"), sim.Cluster.from_gbps(4, 10, "ps")
    run = run_tuner("static", None, BYTESCHEDULER_DEFAULT, model, lambda w: cl, 2)
    assert run.configs == [BYTESCHEDULER_DEFAULT] * 2 and run.changes == []
    assert len(run.check_speeds) == 2 * WINDOW // CHECK and len(run.speeds) == 2
