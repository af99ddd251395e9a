"""The meta-network, its features, offline training and the AutoByte tuner.

The network runs in numpy (:class:`MetaNetwork`): importing this package,
loading the shipped weights, scoring candidates and adapting online import no
framework. Only offline training (``autobyte train-meta``) needs Keras 3.
Names are imported on first use, so ``autobyte --help`` stays fast.
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "FEATURE_VERSION": "._features", "JobInputs": "._features", "candidate_features": "._features", "featurize": "._features",
    "MetaNetwork": "._network", "NetworkShape": "._network", "default_weights_path": "._network",
    "Adapter": "._adapter", "AutoByteTuner": "._tuner", "JobHistory": "._history",
    "HistoryPlan": "._history",
}

__all__ = [
    "Adapter", "AutoByteTuner", "FEATURE_VERSION", "HistoryPlan", "JobHistory", "JobInputs", "MetaNetwork", "NetworkShape", "candidate_features",
    "default_weights_path", "featurize",
]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'autobyte.meta' has no attribute {name!r}")
    value = getattr(importlib.import_module(_WHERE[name], __name__), name)
    globals()[name] = value
    return value
