"""Lazy, checked import of MXNet (an optional dependency)."""

from __future__ import annotations

import importlib
from types import ModuleType

#: The MXNet releases this integration is written and tested against.
SUPPORTED_MXNET = "1.9"

INSTALL_HINT = (
    "install it with `pip install 'autobyte[mxnet]'` (mxnet==1.9.1 needs numpy<1.24; "
    "give it its own virtual environment if other packages need a newer numpy)"
)


def check_mxnet_version(version: str) -> None:
    """Raise if ``version`` is not an MXNet 1.9.x release.

    Raises:
        RuntimeError: any other version (the integration uses Gluon Trainer
            internals and the Estimator API of 1.9).
    """
    parts = str(version).split(".")
    if parts[:2] != SUPPORTED_MXNET.split("."):
        raise RuntimeError(
            f"autobyte's MXNet integration supports mxnet {SUPPORTED_MXNET}.x, but mxnet=={version} is installed; "
            f"{INSTALL_HINT}."
        )


def import_mxnet() -> ModuleType:
    """``import mxnet`` with an install hint when missing and a version check.

    Raises:
        ImportError: MXNet is not installed (or cannot be imported).
        RuntimeError: MXNet is installed but not 1.9.x.
    """
    try:
        mx = importlib.import_module("mxnet")
    except ImportError as exc:
        raise ImportError(f"autobyte's MXNet integration needs MXNet, which could not be imported ({exc}); {INSTALL_HINT}.") from exc
    check_mxnet_version(getattr(mx, "__version__", "unknown"))
    return mx
