"""autobyte: ByteScheduler-style communication scheduling, tuned online (AutoByte)."""

from __future__ import annotations

from .core import Config, SearchSpace

__version__ = "0.1.0"
__all__ = ["Advice", "Config", "SearchSpace", "__version__", "advise", "advise_from_windows"]


def __getattr__(name: str) -> object:
    # `autobyte.advise(...)` without importing the simulator at `import autobyte`
    if name in ("advise", "Advice", "advise_from_windows"):
        from . import _advise

        return getattr(_advise, name)
    raise AttributeError(f"module 'autobyte' has no attribute {name!r}")
