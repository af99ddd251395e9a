"""Lazy imports of optional frameworks with install hints and version checks."""

from __future__ import annotations

import importlib
from types import ModuleType

#: framework -> (import name, pip extra, supported version prefix tuple, (min, max-exclusive))
_SUPPORTED = {
    "torch": ("torch", "torch", ((2, 1), (3, 0))),
    "lightning": ("lightning", "lightning", ((2, 4), (3, 0))),
    "keras": ("keras", "keras", ((3, 0), (4, 0))),
    "mxnet": ("mxnet", "mxnet", ((1, 9), (1, 10))),
}


def _version_tuple(v: str) -> tuple[int, int]:
    parts = []
    for p in v.split("+")[0].split(".")[:2]:
        digits = "".join(ch for ch in p if ch.isdigit())
        parts.append(int(digits or 0))
    while len(parts) < 2:
        parts.append(0)
    return parts[0], parts[1]


def check_version(framework: str, version: str) -> None:
    """Raise ImportError if ``version`` of ``framework`` is outside the supported range."""
    _, extra, (lo, hi) = _SUPPORTED[framework]
    v = _version_tuple(version)
    if not (lo <= v < hi):
        raise ImportError(
            f"autobyte supports {framework} >={lo[0]}.{lo[1]},<{hi[0]}.{hi[1]}, but found {framework} {version}; "
            f'install a supported version, e.g. pip install "autobyte[{extra}]".'
        )


def require(framework: str) -> ModuleType:
    """Import ``framework`` or raise ImportError with the install command."""
    name, extra, _ = _SUPPORTED[framework]
    try:
        mod = importlib.import_module(name)
    except ImportError as exc:
        raise ImportError(
            f"this part of autobyte needs {framework}, which is not installed; install it with: "
            f'pip install "autobyte[{extra}]"'
        ) from exc
    check_version(framework, getattr(mod, "__version__", "0.0"))
    return mod


def require_torch() -> ModuleType:
    return require("torch")


#: optional package (import name) -> the extra that installs it
_OPTIONAL = {"matplotlib": "plots", "bayes_opt": "tune", "keras": "keras", "tensorboard": "all"}


def require_optional(module: str, what: str) -> ModuleType:
    """Import an optional helper package or raise ImportError naming the pip line.

    Example:
        >>> plt = require_optional("matplotlib.pyplot", "plotting the evaluation")  # doctest: +SKIP
    """
    extra = _OPTIONAL.get(module.split(".")[0], "all")
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"{what} needs {module.split('.')[0]}, which is not installed; install it with: pip install 'autobyte[{extra}]'"
        ) from exc


def pyplot(what: str) -> ModuleType:
    """matplotlib's pyplot on the non-interactive Agg backend (figures to files)."""
    mpl = require_optional("matplotlib", what)
    mpl.use("Agg")
    return require_optional("matplotlib.pyplot", what)
