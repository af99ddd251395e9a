from __future__ import annotations

import numpy as np
import pytest

from autobyte.meta import MetaNetwork, NetworkShape
from autobyte.meta._data import MetaDataset, generate
from autobyte.meta._train import train

TINY = NetworkShape(layer_embed=8, lstm_units=8, job_units=8, head_units=(16, 16))


@pytest.fixture(scope="session")
def small_data() -> MetaDataset:
    # the real simulator, two fast models, few windows
    return generate(10, models=["alexnet", "resnet50"], n_candidates=6, seed=3, n_iters=3)


@pytest.fixture(scope="session")
def tiny_net(small_data: MetaDataset) -> MetaNetwork:
    return train(small_data, epochs=3, batch_size=16, shape=TINY, seed=0)


@pytest.fixture()
def fresh_net(tiny_net: MetaNetwork, tmp_path) -> MetaNetwork:
    """A private copy of the tiny network (adaptation mutates it)."""
    p = tmp_path / "n.weights.h5"
    tiny_net.save(p)
    return MetaNetwork.load(p)


def nprng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)
