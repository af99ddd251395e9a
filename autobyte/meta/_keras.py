"""Import Keras with a working backend.

Keras 3 picks its backend from ``KERAS_BACKEND`` (default TensorFlow). When the
user set nothing and TensorFlow is absent, use PyTorch, so ``import
autobyte.meta`` works on a torch-only machine. A user's choice always wins.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any


def import_keras() -> Any:
    if "KERAS_BACKEND" not in os.environ and importlib.util.find_spec("tensorflow") is None:
        if importlib.util.find_spec("torch") is not None:
            os.environ["KERAS_BACKEND"] = "torch"
        elif importlib.util.find_spec("jax") is not None:
            os.environ["KERAS_BACKEND"] = "jax"
    try:
        import keras
    except ImportError as exc:
        raise ImportError(
            "autobyte.meta needs Keras 3 and one backend (torch, jax or tensorflow); "
            "install them with `pip install 'autobyte[keras,torch]'`."
        ) from exc
    return keras
