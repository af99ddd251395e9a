from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from autobyte.meta import MetaNetwork, NetworkShape
from autobyte.meta._data import MetaDataset, generate

TINY = NetworkShape(layer_embed=8, lstm_units=8, job_units=8, head_units=(16, 16))
#: trained once with Keras on small_data (tests/meta/data/make_tiny.py), so these tests need no Keras
TINY_WEIGHTS = Path(__file__).parent / "data" / "tiny.weights.npz"


@pytest.fixture()
def keras():
    """Keras with a backend, or skip: an install without the ``[keras]`` extra runs the numpy runtime only."""
    try:
        from autobyte.meta._keras import import_keras

        return import_keras()
    except ImportError:
        pytest.skip("needs Keras 3 and a backend (pip install 'autobyte[keras]'); the numpy runtime is tested without it")


@pytest.fixture(scope="session")
def small_data() -> MetaDataset:
    # the real simulator, two fast models, few windows
    return generate(10, models=["alexnet", "resnet50"], n_candidates=6, seed=3, n_iters=3)


@pytest.fixture(scope="session")
def tiny_net() -> MetaNetwork:
    return MetaNetwork.load(TINY_WEIGHTS)


@pytest.fixture()
def fresh_net(tiny_net: MetaNetwork, tmp_path) -> MetaNetwork:
    """A private copy of the tiny network (adaptation mutates it)."""
    p = tmp_path / "n.npz"
    tiny_net.save(p)
    return MetaNetwork.load(p)


def nprng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)
