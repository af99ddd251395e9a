from __future__ import annotations

import json

import numpy as np
import pytest

from autobyte.core.space import Config, MiB, SearchSpace
from autobyte.meta import MetaNetwork, candidate_features, featurize
from autobyte.meta._data import MetaDataset
from autobyte.meta._network import keras
from autobyte.meta._train import evaluate, row_inputs

from autobyte.meta import NetworkShape

TINY = NetworkShape(layer_embed=8, lstm_units=8, job_units=8, head_units=(16, 16))


def _job(ds: MetaDataset, i: int = 0):
    from autobyte.meta._features import JobInputs

    cur = Config(int(ds.current[i, 0]), int(ds.current[i, 1]))
    return JobInputs(ds.layers[i], ds.job[i], ds.ctx_layer_bytes(i), cur, float(ds.observed[i]))


def test_numpy_inference_matches_keras(tiny_net, small_data):
    job = _job(small_data)
    cands = SearchSpace.default().to_array()
    cf = candidate_features(job.layer_bytes, cands, job.current)
    emb_k = tiny_net.encode_keras(job.layers[None], job.job[None])
    np.testing.assert_allclose(tiny_net.encode(job), emb_k, atol=1e-4)
    out_k = keras.ops.convert_to_numpy(tiny_net.head([np.repeat(emb_k, len(cands), 0), cf.astype("float32")]))[:, 0]
    np.testing.assert_allclose(tiny_net.predict_log_ratio(job, cands), out_k, atol=1e-4)
    full = keras.ops.convert_to_numpy(tiny_net.model([job.layers[None].astype("float32"), job.job[None].astype("float32"), cf[None].astype("float32")]))
    np.testing.assert_allclose(full[0, :, 0], out_k, atol=1e-4)


def test_grid_scoring_is_one_call_of_right_shape(tiny_net, small_data):
    job = _job(small_data, 1)
    sp = tiny_net.predict_speeds(job, SearchSpace.paper_grid_search().to_array())
    assert sp.shape == (len(SearchSpace.paper_grid_search()),) and np.all(sp > 0)


def test_training_reduces_the_loss(small_data):
    from autobyte.meta._train import train

    net0 = train(small_data, epochs=1, batch_size=16, shape=TINY, seed=1)
    net1 = train(small_data, epochs=25, batch_size=16, shape=TINY, seed=1, learning_rate=1e-2)
    assert evaluate(net1, small_data)["mape"] < evaluate(net0, small_data)["mape"]


def test_save_load_roundtrip(tiny_net, small_data, tmp_path):
    p = tmp_path / "m.weights.h5"
    tiny_net.save(p, note="x")
    net = MetaNetwork.load(p)
    job = _job(small_data)
    c = SearchSpace.default().to_array()
    np.testing.assert_allclose(net.predict_log_ratio(job, c), tiny_net.predict_log_ratio(job, c), atol=1e-6)
    assert net.info["note"] == "x"


def test_save_rejects_other_suffix(tiny_net, tmp_path):
    with pytest.raises(ValueError, match=r"path must end with '.weights.h5', but got path="):
        tiny_net.save(tmp_path / "m.h5")


def test_load_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"path must be an existing meta-network weights file"):
        MetaNetwork.load(tmp_path / "nope.weights.h5")


def test_load_missing_sidecar(tiny_net, tmp_path):
    p = tmp_path / "m.weights.h5"
    tiny_net.save(p)
    (tmp_path / "m.weights.h5.json").unlink()
    with pytest.raises(FileNotFoundError, match=r"sidecar .* is missing"):
        MetaNetwork.load(p)


def test_load_corrupted_weights(tiny_net, tmp_path):
    p = tmp_path / "m.weights.h5"
    tiny_net.save(p)
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 3] + b"\x00garbage" * 100)
    with pytest.raises(ValueError, match=r"is corrupted or not an autobyte meta-network"):
        MetaNetwork.load(p)


def test_load_foreign_keras_weights(tiny_net, tmp_path):
    p = tmp_path / "m.weights.h5"
    tiny_net.save(p)
    other = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    other.save_weights(str(p))  # a valid Keras file of another model, our sidecar beside it
    with pytest.raises(ValueError, match=r"is corrupted or not an autobyte meta-network|loaded nothing"):
        MetaNetwork.load(p)


def test_load_foreign_sidecar_and_version(tiny_net, tmp_path):
    p = tmp_path / "m.weights.h5"
    tiny_net.save(p)
    side = tmp_path / "m.weights.h5.json"
    meta = json.loads(side.read_text())
    side.write_text(json.dumps({**meta, "feature_version": 999}))
    with pytest.raises(ValueError, match=r"trained for feature_version=999"):
        MetaNetwork.load(p)
    side.write_text(json.dumps({**meta, "format": "something-else"}))
    with pytest.raises(ValueError, match=r"is not an autobyte meta-network file"):
        MetaNetwork.load(p)
    side.write_text("{not json")
    with pytest.raises(ValueError, match=r"is not valid JSON"):
        MetaNetwork.load(p)


def test_dataset_load_rejects_junk(tmp_path):
    p = tmp_path / "d.npz"
    np.savez(p, a=np.zeros(3))
    with pytest.raises(ValueError, match=r"is not an autobyte meta-network dataset"):
        MetaDataset.load(p)
    p.write_bytes(b"junk")
    with pytest.raises(ValueError, match=r"is not an autobyte meta-network dataset"):
        MetaDataset.load(p)


def test_dataset_roundtrip_and_split_disjoint(small_data, tmp_path):
    p = tmp_path / "d.npz"
    small_data.save(p)
    d = MetaDataset.load(p)
    np.testing.assert_array_equal(d.speed, small_data.speed)
    parts = d.split()
    assert sum(len(v.observed) for v in parts.values()) <= len(d.observed)
    x, y = row_inputs(d)
    np.testing.assert_allclose(y, np.log(d.speed / d.observed[d.row_ctx]), rtol=1e-5)
    # the configuration in force is among each window's rows, with ratio 1
    assert np.sum(np.abs(y) < 1e-6) >= len(d.observed)


def test_shipped_weights_load_and_score():
    from autobyte.meta import default_weights_path

    assert default_weights_path().stat().st_size < 5 * 2**20  # a few MB at most
    net = MetaNetwork.load_default()
    assert net.info["heldout"]["heldout_model"]["mape"] < 0.10
    from autobyte import sim

    res = sim.simulate(sim.get_model("resnet50"), sim.Cluster.from_gbps(4, 10, "ps"), Config(4 * MiB, 8 * MiB), n_iters=2)
    f = res.features()
    job = featurize(f, Config(4 * MiB, 8 * MiB), float(f.speed.sum()))
    sp = net.predict_speeds(job, SearchSpace.default().to_array())
    assert np.all(np.isfinite(sp)) and np.all(sp > 0)
