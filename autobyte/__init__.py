"""autobyte: ByteScheduler-style communication scheduling, tuned online (AutoByte)."""

from __future__ import annotations

from .core import Config, SearchSpace

__version__ = "0.1.0"
__all__ = sorted(["Config", "SearchSpace", "__version__"])
