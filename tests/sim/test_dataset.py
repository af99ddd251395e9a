from __future__ import annotations

import json
import os

import numpy as np
import pytest

from autobyte.core import SearchSpace
from autobyte.sim.dataset import FLAT_COLUMNS, ROW_COLUMNS, generate, load_dataset, row_layers

SMALL = dict(configs_per_condition=3, conditions_per_shard=2, models=("alexnet", "resnet50", "densenet121"))


@pytest.fixture(scope="module")
def ds(tmp_path_factory: pytest.TempPathFactory) -> str:
    out = tmp_path_factory.mktemp("ds") / "a"
    generate(out, 40, seed=7, progress=False, **SMALL)  # 5 conditions x 9 rows, cut to 40
    return str(out)


def test_columns_and_contract(ds: str) -> None:
    d = load_dataset(ds)
    assert len(d["speed"]) == 40
    for k in ROW_COLUMNS:
        assert d[k].shape == (40,), k
    assert d["arch"].dtype == np.int8 and set(d["arch"]) <= {0, 1}
    assert np.all((d["n_workers"] >= 2) & (d["n_workers"] <= 16))
    assert np.all(d["speed"] > 0) and np.all(d["speed_cur"] > 0)
    space = SearchSpace.default()
    pairs = set(map(tuple, space.to_array().astype(int).tolist()))
    assert all((p, c) in pairs for p, c in zip(d["partition"], d["credit"]))
    # rows of one condition: the label of (c0, c) equals the observed speed of c when c is current
    for cond in np.unique(d["condition"]):
        r = np.flatnonzero(d["condition"] == cond)
        obs = {(p, c): s for p, c, s in zip(d["partition_cur"][r], d["credit_cur"][r], d["speed_cur"][r])}
        for i in r:
            key = (d["partition"][i], d["credit"][i])
            if key in obs:
                assert d["speed"][i] == obs[key]
    # ragged per-layer arrays line up with the model table
    for i in (0, 17, 39):
        L = len(d["model_layer_bytes"][d["model"][i]])
        assert d["n_layers"][i] == L
        assert row_layers(d, i).shape == (L,) and np.all(row_layers(d, i) > 0)
        assert np.all(row_layers(d, i, "layer_backward_max") >= row_layers(d, i) * (1 - 1e-6))
    for k in FLAT_COLUMNS:
        assert d[k].dtype == np.float32


def test_meta_is_json_with_schema_and_models(ds: str) -> None:
    with open(os.path.join(ds, "meta.json")) as fh:
        meta = json.load(fh)
    assert meta["format"] == "autobyte-sim-dataset" and meta["n_shards"] == 3
    assert [m["name"] for m in meta["models"]] == ["alexnet", "resnet50", "densenet121"]
    assert set(meta["row_columns"]) == set(ROW_COLUMNS)
    for f in os.listdir(ds):
        if f.endswith(".npz"):
            with np.load(os.path.join(ds, f), allow_pickle=False) as z:
                assert all(z[k].dtype != object for k in z.files)


def test_deterministic_resumable_and_parallel(ds: str, tmp_path: "os.PathLike[str]") -> None:
    ref = load_dataset(ds)
    other = os.path.join(tmp_path, "b")
    generate(other, 40, seed=7, progress=False, n_jobs=2, **SMALL)
    os.remove(os.path.join(other, "shard-00001.npz"))
    generate(other, 40, seed=7, progress=False, **SMALL)  # resumes: rebuilds only the missing shard
    got = load_dataset(other)
    for k in list(ROW_COLUMNS) + list(FLAT_COLUMNS):
        assert np.array_equal(ref[k], got[k]), k
    third = os.path.join(tmp_path, "c")
    generate(third, 40, seed=8, progress=False, **SMALL)
    assert not np.array_equal(load_dataset(third)["speed"], ref["speed"])


def test_bad_arguments(tmp_path: "os.PathLike[str]") -> None:
    with pytest.raises(ValueError, match="n_samples must be an integer >= 1, but got n_samples=0"):
        generate(tmp_path, 0, progress=False)
    with pytest.raises(ValueError, match="name must be one of"):
        generate(tmp_path, 10, models=("resnet51",), progress=False)
    with pytest.raises(ValueError, match="bandwidth range must satisfy"):
        generate(tmp_path, 10, min_gbps=0.0, progress=False)
    with pytest.raises(ValueError, match="n_jobs must be a positive integer"):
        generate(tmp_path, 10, n_jobs=0, progress=False)


def test_refuses_to_mix_datasets(ds: str) -> None:
    with pytest.raises(ValueError, match="already holds a dataset generated with other arguments"):
        generate(ds, 40, seed=8, progress=False, **SMALL)


def test_load_errors(tmp_path: "os.PathLike[str]") -> None:
    with pytest.raises(FileNotFoundError, match="meta.json"):
        load_dataset(tmp_path)
    out = os.path.join(tmp_path, "d")
    generate(out, 9, seed=1, progress=False, **SMALL)
    os.remove(os.path.join(out, "shard-00000.npz"))
    with pytest.raises(ValueError, match="is missing; the dataset is incomplete"):
        load_dataset(out)
