from __future__ import annotations

import json

import pytest

from autobyte.cli import main


def test_simulate_one_config_table(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["simulate", "--model", "resnet50", "--workers", "8", "--arch", "allreduce", "--bandwidth-gbps", "10",
               "--partition-bytes", "1048576", "--credit-bytes", "4194304", "--iters", "3"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "resnet50, 8 workers, allreduce, 10 Gbit/s" in out and "1,048,576" in out


def test_simulate_grid_json(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["simulate", "--model", "alexnet", "--workers", "4", "--arch", "ps", "--bandwidth-gbps", "5",
               "--grid", "--json", "--iters", "2"])
    res = json.loads(capsys.readouterr().out)
    assert rc == 0 and len(res["results"]) == 50
    assert res["best"]["samples_per_s"] == max(r["samples_per_s"] for r in res["results"])


def test_simulate_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--model", "nope"]) == 2
    assert "--model must be one of" in capsys.readouterr().err
    assert main(["simulate", "--bandwidth-gbps", "-1"]) == 2
    assert "--bandwidth-gbps must be a positive number of Gbit/s, but got --bandwidth-gbps=-1.0" in capsys.readouterr().err
    assert main(["simulate", "--partition-bytes", "0"]) == 2
    assert "--partition-bytes must be a positive integer" in capsys.readouterr().err
