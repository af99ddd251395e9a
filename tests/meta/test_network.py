from __future__ import annotations

import json
import tracemalloc

import numpy as np
import pytest

from autobyte.core.space import Config, MiB, SearchSpace
from autobyte.meta import MetaNetwork, NetworkShape, candidate_features, default_weights_path, featurize
from autobyte.meta._data import MetaDataset
from autobyte.meta._train import evaluate, row_inputs

TINY = NetworkShape(layer_embed=8, lstm_units=8, job_units=8, head_units=(16, 16))


def _job(ds: MetaDataset, i: int = 0):
    from autobyte.meta._features import JobInputs

    cur = Config(int(ds.current[i, 0]), int(ds.current[i, 1]))
    return JobInputs(ds.layers[i], ds.job[i], ds.ctx_layer_bytes(i), cur, float(ds.observed[i]))


def _sim_jobs():
    """Windows of the real simulator: several models, rates and both architectures."""
    from autobyte import sim

    cfg = Config(4 * MiB, 8 * MiB)
    for model in ("resnet50", "vgg16", "bert-base", "alexnet"):
        for gbps in (1, 10, 25):
            for arch in ("ps", "allreduce"):
                f = sim.simulate(sim.get_model(model), sim.Cluster.from_gbps(4, gbps, arch), cfg, n_iters=2).features()
                yield featurize(f, cfg, float(f.speed.sum()))


# ------------------------------------------------------------------ numpy == Keras
def test_numpy_inference_matches_keras(tiny_net, small_data, keras):
    from autobyte.meta._keras import KerasMetaModel

    km = KerasMetaModel.from_network(tiny_net)
    job = _job(small_data)
    cands = SearchSpace.default().to_array()
    cf = candidate_features(job.layer_bytes, cands, job.current)
    emb_k = keras.ops.convert_to_numpy(km.encoder([job.layers[None].astype("float32"), job.job[None].astype("float32")]))
    np.testing.assert_allclose(tiny_net.encode(job), emb_k, atol=1e-5)
    out_k = keras.ops.convert_to_numpy(km.head([np.repeat(emb_k, len(cands), 0), cf.astype("float32")]))[:, 0]
    np.testing.assert_allclose(tiny_net.predict_log_ratio(job, cands), out_k, atol=1e-5)
    np.testing.assert_allclose(km.predict_log_ratio(job.layers, job.job, cf), out_k, atol=1e-5)


def test_shipped_network_in_numpy_predicts_what_keras_predicts(keras):
    """The numpy runtime against the Keras model holding the shipped weights: speeds within 1e-5 relative."""
    from autobyte.meta._keras import KerasMetaModel

    net = MetaNetwork.load_default()
    km = KerasMetaModel.from_network(net)
    cands = SearchSpace.paper_grid_search().to_array()
    worst = 0.0
    for job in _sim_jobs():
        cf = candidate_features(job.layer_bytes, cands, job.current)
        ours = net.predict_speeds(job, cands)
        theirs = job.observed_speed * np.exp(km.predict_log_ratio(job.layers, job.job, cf))
        worst = max(worst, float(np.max(np.abs(ours - theirs) / np.abs(theirs))))
    assert worst < 1e-5, worst


def test_keras_round_trip_keeps_every_weight(tiny_net, keras):
    from autobyte.meta._keras import KerasMetaModel

    back = KerasMetaModel.from_network(tiny_net).to_network()
    for k, v in tiny_net.weights().items():
        np.testing.assert_array_equal(back.weights()[k], v, err_msg=k)


def test_training_reduces_the_loss(small_data, keras):
    from autobyte.meta._train import train

    net0 = train(small_data, epochs=1, batch_size=16, shape=TINY, seed=1)
    net1 = train(small_data, epochs=25, batch_size=16, shape=TINY, seed=1, learning_rate=1e-2)
    assert isinstance(net1, MetaNetwork)
    assert evaluate(net1, small_data)["mape"] < evaluate(net0, small_data)["mape"]


# ------------------------------------------------------------------ runtime
def test_grid_scoring_is_one_call_of_right_shape(tiny_net, small_data):
    job = _job(small_data, 1)
    sp = tiny_net.predict_speeds(job, SearchSpace.paper_grid_search().to_array())
    assert sp.shape == (len(SearchSpace.paper_grid_search()),) and np.all(sp > 0)


def test_reset_head_undoes_adaptation(fresh_net, small_data):
    from autobyte.meta import Adapter

    job = _job(small_data)
    c = SearchSpace.default().to_array()
    before = fresh_net.predict_log_ratio(job, c)
    cf = candidate_features(job.layer_bytes, c, job.current)
    Adapter(fresh_net, time_budget_s=0.5).start(np.repeat(fresh_net.encode(job), len(c), 0), cf, np.full(len(c), 0.5), background=False)
    assert not np.allclose(fresh_net.predict_log_ratio(job, c), before)
    fresh_net.reset_head()
    np.testing.assert_array_equal(fresh_net.predict_log_ratio(job, c), before)


@pytest.mark.parametrize("kw, match", [
    ({"lstm_units": 0}, r"lstm_units must be an integer in 1\.\.4096, but got lstm_units=0"),
    ({"layer_embed": 200000}, r"layer_embed must be an integer in 1\.\.4096, but got layer_embed=200000"),
    ({"job_units": True}, r"job_units must be an integer"),
    ({"head_units": (16,)}, r"head_units must be a tuple of two integers"),
    ({"head_units": (16, 0)}, r"head_units must be an integer in 1\.\.4096, but got head_units=\(16, 0\)"),
])
def test_shape_rejects_bad_sizes(kw, match):
    with pytest.raises(ValueError, match=match):
        NetworkShape(**kw)


def test_constructor_rejects_bad_weights(tiny_net):
    w = tiny_net.weights()
    with pytest.raises(ValueError, match=r"missing=\['head_1/bias'\]"):
        MetaNetwork(TINY, {k: v for k, v in w.items() if k != "head_1/bias"})
    with pytest.raises(ValueError, match=r"weights\['head_1/bias'\] must have shape \(16,\), but got shape \(3,\)"):
        MetaNetwork(TINY, {**w, "head_1/bias": np.zeros(3)})
    with pytest.raises(ValueError, match=r"weights\['head_1/bias'\] holds NaN or inf"):
        MetaNetwork(TINY, {**w, "head_1/bias": np.full(16, np.nan)})


# ------------------------------------------------------------------ files
def test_save_load_roundtrip(tiny_net, small_data, tmp_path):
    p = tmp_path / "m.npz"
    tiny_net.save(p, note="x")
    net = MetaNetwork.load(p)
    job = _job(small_data)
    c = SearchSpace.default().to_array()
    np.testing.assert_allclose(net.predict_log_ratio(job, c), tiny_net.predict_log_ratio(job, c), atol=1e-6)
    assert net.info["note"] == "x"
    assert json.loads((tmp_path / "m.npz.json").read_text())["sha256"] == __import__("hashlib").sha256(p.read_bytes()).hexdigest()


def test_save_rejects_other_suffix(tiny_net, tmp_path):
    with pytest.raises(ValueError, match=r"path must end with '.npz', but got path="):
        tiny_net.save(tmp_path / "m.weights.h5")


def test_load_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"path must be an existing meta-network weights file"):
        MetaNetwork.load(tmp_path / "nope.npz")


def test_load_missing_sidecar(tiny_net, tmp_path):
    p = tmp_path / "m.npz"
    tiny_net.save(p)
    (tmp_path / "m.npz.json").unlink()
    with pytest.raises(FileNotFoundError, match=r"sidecar .* is missing"):
        MetaNetwork.load(p)


@pytest.mark.parametrize("where", [0.1, 0.5, 0.9])
def test_one_flipped_byte_is_refused(tiny_net, tmp_path, where):
    p = tmp_path / "m.npz"
    tiny_net.save(p)
    data = bytearray(p.read_bytes())
    data[int(where * len(data))] ^= 0x40  # one exponent bit of a float, or a byte of the archive
    p.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"does not match the sha256 in its sidecar .*corrupted or was changed"):
        MetaNetwork.load(p)


def test_shipped_weights_with_one_flipped_byte_are_refused(tmp_path):
    src = default_weights_path()
    p = tmp_path / "meta.weights.npz"
    data = bytearray(src.read_bytes())
    data[len(data) // 2] ^= 0x01
    p.write_bytes(bytes(data))
    (tmp_path / "meta.weights.npz.json").write_text(src.with_name(src.name + ".json").read_text())
    with pytest.raises(ValueError, match=r"does not match the sha256"):
        MetaNetwork.load(p)


def _sidecar(tiny_net, tmp_path):
    p = tmp_path / "m.npz"
    tiny_net.save(p)
    side = tmp_path / "m.npz.json"
    return p, side, json.loads(side.read_text())


@pytest.mark.parametrize("change, match", [
    (lambda m: m["shape"].update(lstm_units=200000), r"lstm_units must be an integer in 1\.\.4096, but got lstm_units=200000"),
    (lambda m: m["shape"].update(lstm_units=0), r"lstm_units must be an integer in 1\.\.4096, but got lstm_units=0"),
    (lambda m: m["shape"].update(layer_embed=-8), r"layer_embed must be an integer in 1\.\.4096"),
    (lambda m: m["shape"].update(job_units="8"), r"job_units must be an integer in 1\.\.4096, but got job_units='8'"),
    (lambda m: m["shape"].update(job_units=8.5), r"job_units must be an integer"),
    (lambda m: m["shape"].update(job_units=True), r"job_units must be an integer"),
    (lambda m: m["shape"].update(head_units=[16, 10**9]), r"head_units must be an integer in 1\.\.4096"),
    (lambda m: m["shape"].update(head_units=[16]), r"head_units must be a list of two integers"),
    (lambda m: m["shape"].update(head_units=16), r"head_units must be a list of two integers"),
    (lambda m: m["shape"].update(extra=1), r"shape must be an object with exactly the keys"),
    (lambda m: m["shape"].pop("job_units"), r"shape must be an object with exactly the keys"),
    (lambda m: m.update(shape=[8, 8]), r"shape must be an object"),
    (lambda m: m.update(sha256="0" * 63), r"sha256 must be 64 lowercase hex digits"),
    (lambda m: m.update(sha256=None), r"sha256 must be 64 lowercase hex digits, but got sha256=None"),
    (lambda m: m.pop("sha256"), r"sha256 must be 64 lowercase hex digits"),
    (lambda m: m.update(info=[1, 2]), r"info must be an object, but got info=\[1, 2\]"),
    (lambda m: m.update(feature_version=999), r"trained for feature_version=999"),
    (lambda m: m.update(feature_version="2"), r"trained for feature_version='2'"),
    (lambda m: m.update(format="something-else"), r"is not an autobyte meta-network file: format must be"),
    (lambda m: m.update(format="autobyte-meta-network"), r"an older \.weights\.h5 file\? convert it"),
    (lambda m: m.update(note="x"), r"may hold only .* but got unexpected keys \['note'\]"),
])
def test_sidecar_fields_are_range_checked(tiny_net, tmp_path, change, match):
    p, side, meta = _sidecar(tiny_net, tmp_path)
    change(meta)
    side.write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=match):
        MetaNetwork.load(p)


def test_huge_sizes_in_the_sidecar_are_refused_before_allocating(tiny_net, tmp_path):
    p, side, meta = _sidecar(tiny_net, tmp_path)
    meta["shape"]["lstm_units"] = 4096  # in range, but the file is far smaller than such a network
    side.write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=r"must hold the arrays|shape"):
        MetaNetwork.load(p)
    meta["shape"]["lstm_units"] = 200000
    side.write_text(json.dumps(meta))
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match=r"lstm_units must be an integer in 1\.\.4096"):
            MetaNetwork.load(p)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * 2**20, peak


def test_sidecar_not_json_or_too_big(tiny_net, tmp_path):
    p, side, _ = _sidecar(tiny_net, tmp_path)
    side.write_text("{not json")
    with pytest.raises(ValueError, match=r"is not valid JSON"):
        MetaNetwork.load(p)
    side.write_text(" " * (2**20 + 1))
    with pytest.raises(ValueError, match=r"more than 1048576; it is not an autobyte sidecar"):
        MetaNetwork.load(p)


def _with_matching_sha(p, side, meta, data: bytes):
    import hashlib

    p.write_bytes(data)
    side.write_text(json.dumps({**meta, "sha256": hashlib.sha256(data).hexdigest()}))


def test_wrong_format_files_are_refused(tiny_net, tmp_path):
    import io

    p, side, meta = _sidecar(tiny_net, tmp_path)
    # not a zip at all (an old HDF5 file), with a sidecar whose checksum matches it
    _with_matching_sha(p, side, meta, b"\x89HDF\r\n\x1a\n" + b"0" * 100)
    with pytest.raises(ValueError, match=r"is not an \.npz archive"):
        MetaNetwork.load(p)
    # a valid .npz of other arrays
    buf = io.BytesIO()
    np.savez(buf, a=np.zeros(3))
    _with_matching_sha(p, side, meta, buf.getvalue())
    with pytest.raises(ValueError, match=r"must hold the arrays of .* unexpected=\['a.npy'\]"):
        MetaNetwork.load(p)
    # the right names, one of them a pickled object array
    w = {k: v for k, v in tiny_net.weights().items()}
    w["head_1/bias"] = np.array([{"x": 1}] * 16, dtype=object)
    buf = io.BytesIO()
    np.savez(buf, **w)
    _with_matching_sha(p, side, meta, buf.getvalue())
    with pytest.raises(ValueError, match=r"is corrupted \(ValueError: Object arrays cannot be loaded"):
        MetaNetwork.load(p)
    # the right names, one of the wrong shape
    w = {**tiny_net.weights(), "head_1/bias": np.zeros(15, np.float32)}
    buf = io.BytesIO()
    np.savez(buf, **w)
    _with_matching_sha(p, side, meta, buf.getvalue())
    with pytest.raises(ValueError, match=r"array 'head_1/bias' must be float32 of shape \(16,\), but got float32 \(15,\)"):
        MetaNetwork.load(p)
    # NaN inside
    w = {**tiny_net.weights(), "head_1/bias": np.full(16, np.inf, np.float32)}
    buf = io.BytesIO()
    np.savez(buf, **w)
    _with_matching_sha(p, side, meta, buf.getvalue())
    with pytest.raises(ValueError, match=r"holds NaN or inf"):
        MetaNetwork.load(p)


def test_a_file_bigger_than_its_shape_is_refused_before_hashing(tiny_net, tmp_path):
    p, side, meta = _sidecar(tiny_net, tmp_path)
    p.write_bytes(p.read_bytes() + b"\0" * 2**20)
    with pytest.raises(ValueError, match=r"more than a network of .* needs"):
        MetaNetwork.load(p)


def test_keras_converter_turns_old_h5_weights_into_the_same_network(tiny_net, small_data, tmp_path, keras):
    from autobyte.meta import FEATURE_VERSION
    from autobyte.meta._keras import KerasMetaModel, main

    old = tmp_path / "old.weights.h5"
    KerasMetaModel.from_network(tiny_net).model.save_weights(str(old))  # what autobyte 0.1 shipped
    shape = {"layer_embed": 8, "lstm_units": 8, "job_units": 8, "head_units": [16, 16]}
    (tmp_path / "old.weights.h5.json").write_text(json.dumps({"format": "autobyte-meta-network", "feature_version": FEATURE_VERSION,
                                                              "shape": shape, "info": {"note": "old"}}))
    assert main(["convert", str(old), str(tmp_path / "new.npz")]) == 0
    net = MetaNetwork.load(tmp_path / "new.npz")
    assert net.info == {"note": "old"}
    job = _job(small_data)
    c = SearchSpace.default().to_array()
    np.testing.assert_array_equal(net.predict_log_ratio(job, c), tiny_net.predict_log_ratio(job, c))


def test_keras_converter_refuses_a_non_h5_sidecar(tiny_net, tmp_path, keras):
    from autobyte.meta._keras import convert_h5

    p, _, _ = _sidecar(tiny_net, tmp_path)
    with pytest.raises(ValueError, match=r"src must be autobyte 0.1 weights"):
        convert_h5(p, tmp_path / "out.npz")


# ------------------------------------------------------------------ datasets
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
    assert default_weights_path().name == "meta.weights.npz"
    assert default_weights_path().stat().st_size < 5 * 2**20  # a few MB at most
    net = MetaNetwork.load_default()
    assert net.info["heldout"]["heldout_model"]["mape"] < 0.10
    job = next(iter(_sim_jobs()))
    sp = net.predict_speeds(job, SearchSpace.default().to_array())
    assert np.all(np.isfinite(sp)) and np.all(sp > 0)
