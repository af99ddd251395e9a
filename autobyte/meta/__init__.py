"""The meta-network (Keras 3), its features, offline training and the AutoByte tuner.

Importing this package imports Keras; when ``KERAS_BACKEND`` is unset and
TensorFlow is absent, the PyTorch backend is chosen.
"""

from __future__ import annotations

from ._features import FEATURE_VERSION, JobInputs, candidate_features, featurize
from ._network import MetaNetwork, NetworkShape, default_weights_path
from ._tuner import Adapter, AutoByteTuner

__all__ = sorted([
    "Adapter", "AutoByteTuner", "FEATURE_VERSION", "JobInputs", "MetaNetwork", "NetworkShape", "candidate_features",
    "default_weights_path", "featurize",
])
