"""autobyte: ByteScheduler-style communication scheduling, tuned online (AutoByte).

The core names (configuration, search space, the tuner interface) are imported
here; the framework parts are imported on first use, so ``import autobyte``
stays cheap and imports no framework::

    import autobyte
    handle = autobyte.schedule(model, optimizer)   # imports torch now

The framework callbacks keep their modules (they share one name):
``autobyte.integrations.lightning.AutoByteCallback``,
``autobyte.integrations.keras.AutoByteCallback``,
``autobyte.integrations.mxnet.AutoByteHandler``.
"""

from __future__ import annotations

import importlib
from typing import Any

from .core import (
    Config,
    Controller,
    Decision,
    Observation,
    SearchSpace,
    Tuner,
    make_tuner,
    register_tuner,
    tuner_names,
)

__version__ = "0.1.0"

#: name -> module that defines it, imported on first use (the simulator, the meta-network, torch).
_LAZY = {
    "Advice": "._advise", "advise": "._advise", "advise_from_windows": "._advise",
    "AutoByteTuner": ".meta",
    "PeerLostError": ".integrations._common", "ScheduledTraining": ".integrations.torch", "schedule": ".integrations.torch",
}

__all__ = [
    "Advice", "AutoByteTuner", "Config", "Controller", "Decision", "Observation", "PeerLostError", "ScheduledTraining",
    "SearchSpace", "Tuner", "__version__", "advise", "advise_from_windows", "make_tuner", "register_tuner", "schedule",
    "tuner_names",
]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'autobyte' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name], __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
