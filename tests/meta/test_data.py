"""Meta-network training data (``autobyte dataset generate``): one ``.npz`` of windows drawn from the simulator."""

from __future__ import annotations

import numpy as np
import pytest

from autobyte.cli import main
from autobyte.meta._data import HELDOUT_MODELS, MetaDataset, generate
from autobyte.meta._train import context_inputs


@pytest.fixture(scope="module")
def data() -> MetaDataset:
    return generate(6, models=["alexnet", "vgg19"], n_candidates=3, seed=5, n_iters=2)


def test_every_window_holds_its_own_config_and_its_candidates(data: MetaDataset) -> None:
    assert len(data.observed) == 6 and len(data.speed) == 6 * 4  # 3 candidates + the current config
    for i in range(len(data.observed)):
        rows = data.row_ctx == i
        cur = data.current[i]
        own = rows & (data.cand[:, 0] == cur[0]) & (data.cand[:, 1] == cur[1])
        assert own.sum() >= 1 and data.speed[own][-1] == pytest.approx(data.observed[i])  # c0's label: its observed speed
        assert data.ctx_layer_bytes(i).sum() > 0
    assert np.all(data.speed > 0) and np.all(np.isfinite(data.job)) and np.all(np.isfinite(data.layers))


def test_saved_and_loaded_unchanged_and_a_function_of_the_seed(data: MetaDataset, tmp_path) -> None:
    data.save(tmp_path / "d.npz")
    back = MetaDataset.load(tmp_path / "d.npz")
    for k in MetaDataset.__dataclass_fields__:
        np.testing.assert_array_equal(getattr(back, k), getattr(data, k))
    again = generate(6, models=["alexnet", "vgg19"], n_candidates=3, seed=5, n_iters=2)
    np.testing.assert_array_equal(again.speed, data.speed)
    assert not np.array_equal(generate(6, models=["alexnet", "vgg19"], n_candidates=3, seed=6, n_iters=2).speed, data.speed)


def test_split_holds_out_models(data: MetaDataset) -> None:
    parts = data.split()
    names = [str(n) for n in data.model_names]
    assert "vgg19" in HELDOUT_MODELS
    assert all(names[m] != "vgg19" for m in parts["train"].model)
    assert all(names[m] == "vgg19" for m in parts["heldout_model"].model)


def test_context_inputs_pad_and_mask_mixed_row_counts(data: MetaDataset, small_data: MetaDataset) -> None:
    d = MetaDataset.concat([data, small_data])
    x, y, m = context_inputs(d)
    counts = np.bincount(d.row_ctx)
    assert len(set(counts)) > 1  # windows of 4 rows beside windows of 7
    assert x[2].shape[:2] == m.shape == y.shape[:2] == (len(d.observed), counts.max())
    np.testing.assert_array_equal(m.sum(axis=1), counts)


def test_the_command_writes_what_train_meta_reads(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    from autobyte.meta._cli import _load_data

    out = tmp_path / "d" / "seed3.npz"
    out.parent.mkdir()
    assert main(["dataset", "generate", "--out", str(out), "--contexts", "2", "--candidates", "2", "--seed", "3",
                 "--no-progress"]) == 0
    assert f"wrote 2 windows, 6 rows to {out}" in capsys.readouterr().out
    both = _load_data([str(out.parent), str(out)])  # a folder of them and a file, joined
    assert len(both.observed) == 4 and np.array_equal(both.speed[:6], MetaDataset.load(out).speed)
