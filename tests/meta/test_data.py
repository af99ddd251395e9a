from __future__ import annotations

import numpy as np
import pytest

from autobyte.meta._data import HELDOUT_MODELS, MetaDataset, from_sim_dataset
from autobyte.meta._train import context_inputs
from autobyte.sim import dataset as simdata


@pytest.fixture(scope="module")
def sim_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("simds")
    simdata.generate(out, 2 * 9 * 4, seed=5, progress=False, models=("alexnet", "vgg19"), configs_per_condition=3,
                     conditions_per_shard=4)
    return out


def test_reads_the_simulator_dataset_format(sim_dir):
    d = from_sim_dataset(sim_dir)
    raw = simdata.load_dataset(sim_dir)
    assert len(d.speed) == len(raw["speed"])
    np.testing.assert_allclose(d.speed, raw["speed"])
    # contexts group rows of one condition and one current config; c0's own row has ratio ~1
    for i in range(len(d.observed)):
        rows = d.row_ctx == i
        cur = d.current[i]
        own = rows & (d.cand[:, 0] == cur[0]) & (d.cand[:, 1] == cur[1])
        assert own.sum() == 1
        assert d.speed[own][0] == pytest.approx(d.observed[i])
    assert np.all(np.isfinite(d.job)) and np.all(np.isfinite(d.layers))


def test_split_holds_out_models(sim_dir):
    d = from_sim_dataset(sim_dir)
    parts = d.split()
    names = [str(n) for n in d.model_names]
    assert "vgg19" in HELDOUT_MODELS
    assert all(names[m] != "vgg19" for m in parts["train"].model)
    assert all(names[m] == "vgg19" for m in parts["heldout_model"].model)


def test_context_inputs_pad_and_mask_mixed_row_counts(sim_dir, small_data):
    d = MetaDataset.concat([from_sim_dataset(sim_dir), small_data])
    x, y, m = context_inputs(d)
    counts = np.bincount(d.row_ctx)
    assert x[2].shape[:2] == m.shape == y.shape[:2] == (len(d.observed), counts.max())
    np.testing.assert_array_equal(m.sum(axis=1), counts)


def test_missing_or_foreign_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"must be a simulator dataset directory holding meta.json"):
        from_sim_dataset(tmp_path)
    (tmp_path / "meta.json").write_text('{"format": "other"}')
    with pytest.raises(ValueError, match=r"is not an autobyte-sim-dataset"):
        from_sim_dataset(tmp_path)
