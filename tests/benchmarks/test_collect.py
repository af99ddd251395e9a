"""``benchmarks/collect.py``: real windows as meta-network training data, and the meta-network scored and fine-tuned on them.

Raw folders are made by the simulator (``_raw.py``); the measurement itself needs root and runs in the
``integration`` layer.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from _raw import write_raw

from autobyte.core import Config, KiB, MiB

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def collect(load_benchmark) -> ModuleType:
    return load_benchmark("collect")


@pytest.fixture(scope="module")
def raw(collect: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> str:
    """3 rates x 2 repetitions x the 8 configs of collect.COLLECT_CONFIGS: 6 conditions."""
    return str(write_raw(tmp_path_factory.mktemp("collect") / "raw", collect))


def test_windows_become_the_training_data_train_meta_reads(collect: ModuleType, raw: str, tmp_path: Path) -> None:
    from autobyte.meta._cli import _load_data

    m = collect.read_measurement(raw)
    assert collect.conditions(m)[:2] == [list(range(8)), list(range(8, 16))]
    res = collect.write_dataset([m], str(tmp_path / "data.npz"))
    assert (res["rows"], res["contexts"], res["conditions"]) == (6 * 8 * 8, 6 * 8, 6)
    d = _load_data(str(tmp_path))  # as `autobyte train-meta --data FOLDER` reads it
    assert len(d.observed) == 48 and len(d.speed) == 384 and [str(n) for n in d.model_names] == ["cnn-3.4M"]
    ctx = collect.meta_contexts(m)
    # window 9 (condition 1, its second config): its observed speed, its candidates' speeds, the shaped rate
    assert d.observed[9] == pytest.approx(ctx[9]["observed"]) and d.gbps[9] == pytest.approx(0.15)
    assert np.allclose(d.speed[d.row_ctx == 9], ctx[9]["speed"]) and np.allclose(d.current[9], [128 * KiB, 512 * KiB])
    assert d.ctx_layer_bytes(9).tolist() == m.tensor_bytes
    with pytest.raises(ValueError, match=r"measurements hold no condition with at least min_configs=9 configs"):
        collect.write_dataset([m], str(tmp_path / "d2.npz"), min_configs=9)


def test_online_evaluation_adapts_and_scores_the_configs_not_yet_seen(collect: ModuleType, raw: str) -> None:
    res = collect.evaluate_meta_online([raw], n_observed=5, orders=2, log=lambda s: None)
    # 6 conditions of 8 configs; before, every window predicts the 7 others: 6 * 8 * 7 rows
    assert res["conditions"] == 6 and res["before_all"]["rows"] == 6 * 8 * 7
    # after 5 windows, each of them predicts the 3 configs not yet seen: 6 conditions x 2 orders x 5 x 3
    assert res["before"]["rows"] == res["after"]["rows"] == 6 * 2 * 5 * 3
    assert 0 < res["after"]["mape"] < res["before"]["mape"]  # adapting on this job's own windows helps
    # the labels' noise floor: repetition 1's ratios predicting repetition 2's, 3 rates x 8 x 7 pairs
    assert res["repeat"]["rows"] == 3 * 8 * 7 and 0 < res["repeat"]["mape"] < 1
    with pytest.raises(ValueError, match=r"n_observed must be below the number of configs measured in a condition, but got n_observed=8"):
        collect.evaluate_meta_online([raw], n_observed=8, log=lambda s: None)
    with pytest.raises(ValueError, match=r"holdout must be 'rep' or 'rate', but got holdout='x'"):
        collect.evaluate_meta([raw], holdout="x")


def test_finetune_writes_weights_a_tuner_loads(collect: ModuleType, raw: str, tmp_path: Path) -> None:
    from autobyte.meta import AutoByteTuner, MetaNetwork

    out = str(tmp_path / "cluster.npz")
    res = collect.finetune_meta([raw], out, time_budget_s=2.0, log=lambda s: None)
    assert res["rows"] == 6 * 8 * 8 and res["fit_mape_after"] < res["fit_mape_before"]
    tuned, shipped = MetaNetwork.load(out), MetaNetwork.load_default()
    assert tuned.info["finetune_rows"] == res["rows"]
    assert any(not np.array_equal(a, b) for a, b in zip(tuned.weights().values(), shipped.weights().values()))
    assert AutoByteTuner(weights=out).net.weights().keys() == shipped.weights().keys()
    with pytest.raises(ValueError, match=r"out must be a path ending in '.npz', but got out='w.pt'"):
        collect.finetune_meta([raw], "w.pt")


@pytest.mark.parametrize("argv, message", [
    (["--out", "{tmp}/r", "--reps", "0"], "--reps must be an integer in [1, 1000]"),
    (["--out", "{tmp}/r", "--window-iters", "1"], "--window-iters must be an integer in [2, 10000]"),
    (["--out", "{tmp}/r", "--rates-mbit", "-5"], "--rates-mbit must be comma-separated positive numbers"),
    (["--out", "{tmp}/r", "--model", "resnet"], "argument --model: invalid choice: 'resnet'"),
    (["--evaluate", "{tmp}/missing"], "--evaluate must be an existing folder"),
    (["--evaluate", "{tmp}"], "out_dir must hold the ranks' rank0.json"),
    (["--evaluate", "{tmp}", "--holdout", "model"], "argument --holdout: invalid choice: 'model'"),
    (["--evaluate", "{tmp}", "--weights", "{tmp}/bad.npz"], "is not usable meta-network weights"),
    (["--out", "{tmp}/r", "--weights", "{tmp}/bad.npz"], "--weights and --report go with --evaluate RAW"),
    (["--finetune", "{tmp}"], "--finetune RAW needs --weights-out FILE.npz"),
    (["--finetune", "{tmp}", "--out", "{tmp}/r", "--weights-out", "{tmp}/w.npz"], "--finetune RAW goes alone"),
    ([], "give --out DIR"),
])
def test_bad_arguments_are_one_line_with_exit_2(collect: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               argv: list[str], message: str) -> None:
    (tmp_path / "bad.npz").write_bytes(b"PK\x03\x04 truncated")
    (tmp_path / "bad.npz.json").write_text("{}")
    assert collect.main([a.format(tmp=tmp_path) for a in argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("benchmarks/collect.py: error: ") and message in err, err


@pytest.mark.integration
@pytest.mark.root
@pytest.mark.skipif(not (os.geteuid() == 0 and shutil.which("ip") and shutil.which("tc")),
                    reason="needs root and iproute2 (ip, tc) for network namespaces")
@pytest.mark.timeout(300)
def test_collect_measures_on_the_testbed(tmp_path: Path) -> None:
    out = tmp_path / "real"
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "collect.py"), "--out", str(out), "--rates-mbit", "2000",
                        "--reps", "1", "--window-iters", "2"], capture_output=True, text=True, cwd=ROOT, timeout=280,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    from autobyte.meta._data import MetaDataset

    d = MetaDataset.load(out / "data.npz")
    assert len(d.observed) == 8 and len(d.speed) == 64 and np.all(d.speed > 0) and np.allclose(d.gbps, 2.0)
    assert Config(16 * MiB, 16 * MiB).partition_bytes in d.current[:, 0]
