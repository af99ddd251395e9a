"""Tuners behind one interface: static, grid search, Bayesian optimisation, AutoByte.

Every tuner is a :class:`~autobyte.core.tuning.Tuner`: ``start(space, initial)``
once, then ``observe(Observation) -> Decision | None`` at the end of every
window on rank 0. This module stays framework-free: the Bayesian optimiser
(``bayesian-optimization``) is imported lazily with an install hint, and the
meta-network tuner lives in :mod:`autobyte.meta` and is only imported when
``make_tuner("autobyte")`` asks for it.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import math
import os
import random
import sys
from typing import Any, Callable, Sequence

from ._checks import check_int
from .space import MAX_BYTES, Config, SearchSpace
from .tuning import Decision, Observation, StaticTuner, Tuner

_log = logging.getLogger("autobyte.tuners")

#: Bytes per parameter ByteScheduler assumes when it speaks of "M parameters" (float32).
_PARAM_BYTES = 4

#: ByteScheduler's BO search ranges, in millions of parameters
#: (``bytescheduler/common/tuner.py``: partition 2..32, credit 1..16 for PS, 4..64 for all-reduce).
BYTESCHEDULER_BO_RANGES: dict[str, dict[str, tuple[float, float]]] = {
    "ps": {"partition": (2.0, 32.0), "credit": (1.0, 16.0)},
    "allreduce": {"partition": (2.0, 32.0), "credit": (4.0, 64.0)},
}


class GridTuner(Tuner):
    """Grid search, the paper's ground truth: try every candidate for one window, keep the best.

    Args:
        space: candidates to try; default the paper's grid (partition step 2 MB,
            credit step 1X, :meth:`SearchSpace.paper_grid_search`). ``None`` means
            that default; pass the controller's space explicitly to search it instead.
        n_windows: windows measured per candidate (their speeds are averaged).

    Raises:
        ValueError: ``n_windows`` is not a positive integer.

    Example:
        >>> tuner = GridTuner()                       # doctest: +SKIP
        >>> Controller(tuner, space, initial, "ps", layer_bytes)  # doctest: +SKIP
    """

    name = "grid"

    def __init__(self, space: SearchSpace | None = None, *, n_windows: int = 1) -> None:
        check_int("n_windows", n_windows)
        if space is not None and not isinstance(space, SearchSpace):
            raise TypeError(f"space must be a SearchSpace or None, but got space={space!r}.")
        self._grid = space
        self.n_windows = n_windows
        self._next = 0
        self._speeds: dict[Config, list[float]] = {}
        self.best: Config | None = None

    def start(self, space: SearchSpace, initial: Config) -> Config:
        super().start(space, initial)
        self.grid = self._grid if self._grid is not None else SearchSpace.paper_grid_search()
        self._next = 0
        self._speeds = {}
        self.best = None
        # Begin on the first grid point: the window run under ``initial`` tells nothing
        # the grid will not measure itself.
        return self.grid[0]

    @property
    def done(self) -> bool:
        return self.best is not None

    def observe(self, obs: Observation) -> Decision | None:
        if self.done:
            return None
        if obs.config in self.grid and math.isfinite(obs.speed) and obs.speed > 0:
            self._speeds.setdefault(obs.config, []).append(obs.speed)
        while self._next < len(self.grid) and len(self._speeds.get(self.grid[self._next], [])) >= self.n_windows:
            self._next += 1
        if self._next < len(self.grid):
            cand = self.grid[self._next]
            if cand == obs.config:
                return None  # keep measuring the same candidate
            return Decision(cand, f"grid search: probe {self._next + 1}/{len(self.grid)}")
        means = {c: sum(v) / len(v) for c, v in self._speeds.items()}
        self.best = max(means, key=means.__getitem__)
        _log.info("grid search done after %d candidates: best %s at %.1f samples/s", len(means), self.best, means[self.best])
        return Decision(self.best, "grid search: best measured candidate", means[self.best])

    def state_dict(self) -> dict[str, Any]:
        return {
            "next": self._next,
            "speeds": [[c.partition_bytes, c.credit_bytes, v] for c, v in self._speeds.items()],
            "best": None if self.best is None else self.best.to_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._next = int(state.get("next", 0))
        self._speeds = {Config(int(p), int(c)): [float(x) for x in v] for p, c, v in state.get("speeds", [])}
        best = state.get("best")
        self.best = Config(**best) if best else None


def _import_bayes_opt() -> Any:
    try:
        return importlib.import_module("bayes_opt")
    except ImportError as exc:
        raise ImportError(
            "BOTuner needs the 'bayesian-optimization' package; install it with "
            "`pip install 'autobyte[tune]'` (or `pip install bayesian-optimization`)."
        ) from exc


class BOTuner(Tuner):
    """ByteScheduler's tuner: Bayesian optimisation with expected improvement, then frozen.

    Reproduces ``bytescheduler/common/search.py`` behaviour (not its code): the
    first window is discarded (not accurate), then ``n_random`` uniformly random
    probes, then expected-improvement suggestions (``xi``), ``n_steps`` steps in
    all, the last one moving to the best point measured; after that the
    configuration never changes. The objective is the iteration time
    (``-1/speed``), as in ByteScheduler. Ranges are ByteScheduler's, in millions
    of float32 parameters (:data:`BYTESCHEDULER_BO_RANGES`), converted to bytes.

    Args:
        arch: ``"ps"`` or ``"allreduce"``; picks the credit range.
        n_random: random probes before the Gaussian process drives (10).
        n_steps: tuning steps in all, the final "move to best" included (15).
        xi: exploration of expected improvement (0.1).
        seed: random seed (probes and the optimiser); ``None`` for fresh randomness.
        ranges: override of the search ranges ``{"partition": (lo, hi), "credit": (lo, hi)}``
            in millions of parameters.

    Raises:
        ValueError: bad ``arch``, counts or ranges.
        ImportError: ``bayesian-optimization`` is not installed (at :meth:`start`).
    """

    name = "bo"

    def __init__(
        self,
        arch: str = "ps",
        *,
        n_random: int = 10,
        n_steps: int = 15,
        xi: float = 0.1,
        seed: int | None = 0,
        ranges: dict[str, tuple[float, float]] | None = None,
    ) -> None:
        if arch not in BYTESCHEDULER_BO_RANGES:
            raise ValueError(f"arch must be one of {tuple(BYTESCHEDULER_BO_RANGES)}, but got arch={arch!r}.")
        check_int("n_random", n_random, minimum=0)
        check_int("n_steps", n_steps)
        if n_random > n_steps - 1:
            raise ValueError(f"n_random must be at most n_steps - 1 = {n_steps - 1}, but got n_random={n_random}.")
        if not isinstance(xi, (int, float)) or not math.isfinite(xi) or xi < 0:
            raise ValueError(f"xi must be a non-negative finite number, but got xi={xi!r}.")
        rng_ = dict(BYTESCHEDULER_BO_RANGES[arch] if ranges is None else ranges)
        if set(rng_) != {"partition", "credit"}:
            raise ValueError(f"ranges must have keys 'partition' and 'credit', but got ranges={ranges!r}.")
        for k, (lo_, hi_) in rng_.items():
            if not (0 < lo_ < hi_ and hi_ * 1e6 * _PARAM_BYTES <= MAX_BYTES):
                raise ValueError(f"ranges[{k!r}] must be (lo, hi) with 0 < lo < hi, in millions of parameters, but got {(lo_, hi_)!r}.")
        self.arch = arch
        self.n_random = n_random
        self.n_steps = n_steps
        self.xi = float(xi)
        self.seed = seed
        self.ranges = rng_
        self._bo: Any = None
        self._reset()

    def _reset(self) -> None:
        self._step = 0
        self._first = True
        self._pending: Config | None = None
        self._history: list[tuple[float, float, float]] = []  # (partition M, credit M, target)
        self.best: Config | None = None
        # The optimiser's randomness (GP restarts, acquisition sampling) is drawn
        # afresh for every suggestion from (seed, step), so a suggestion depends only
        # on state_dict(): a restored tuner suggests exactly what the original would.
        self._seed = self.seed if self.seed is not None else random.SystemRandom().randrange(2**31)
        self._random = random.Random(self._seed)
        self._probes = [
            {k: round(self._random.uniform(lo, hi), 6) for k, (lo, hi) in sorted(self.ranges.items())}
            for _ in range(self.n_random)
        ]

    @staticmethod
    def _to_config(point: dict[str, float]) -> Config:
        return Config(
            max(1, int(point["partition"] * 1e6) * _PARAM_BYTES),
            max(1, int(point["credit"] * 1e6) * _PARAM_BYTES),
        )

    @staticmethod
    def _to_point(c: Config) -> dict[str, float]:
        return {"partition": c.partition_bytes / _PARAM_BYTES / 1e6, "credit": c.credit_bytes / _PARAM_BYTES / 1e6}

    def start(self, space: SearchSpace, initial: Config) -> Config:
        super().start(space, initial)
        self._bo = _import_bayes_opt()
        self._reset()
        return initial

    def _suggest(self) -> dict[str, float]:
        """Expected-improvement suggestion from the history, seeded by (seed, step)."""
        import warnings

        import numpy as np

        bo = self._bo
        opt = bo.BayesianOptimization(
            f=None, pbounds=self.ranges, random_state=np.random.RandomState((self._seed * 1_000_003 + self._step) % 2**32),
            verbose=0, allow_duplicate_points=True,
        )
        for p, c, t in self._history:
            opt.register(params={"partition": p, "credit": c}, target=t)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return dict(opt.suggest(bo.UtilityFunction(kind="ei", kappa=0.0, xi=self.xi)))

    @property
    def done(self) -> bool:
        return self.best is not None

    def observe(self, obs: Observation) -> Decision | None:
        if self._bo is None:
            raise RuntimeError("BOTuner.observe called before start(space, initial).")
        if self.done:
            return None
        if not (math.isfinite(obs.speed) and obs.speed > 0):
            return None
        if self._first:
            self._first = False  # ByteScheduler drops its first measurement
        elif self._pending is None or obs.config == self._pending:
            point = self._to_point(obs.config)
            target = -1.0 / obs.speed
            self._history.append((point["partition"], point["credit"], target))
        self._step += 1
        if self._step < self.n_steps:
            if self._probes:
                point = self._probes.pop(0)
                how = "random probe"
            else:
                point = self._suggest()
                how = f"expected improvement (xi={self.xi:g})"
            self._pending = self._to_config(point)
            return Decision(self._pending, f"BO step {self._step}/{self.n_steps}: {how}")
        if not self._history:
            self.best = obs.config
            return None
        p, c, t = max(self._history, key=lambda h: h[2])
        self.best = self._to_config({"partition": p, "credit": c})
        _log.info("BO done after %d steps: best %s (iteration time %.4g)", self._step, self.best, -t)
        return Decision(self.best, f"BO step {self._step}/{self.n_steps}: best point measured, frozen", -1.0 / t)

    def state_dict(self) -> dict[str, Any]:
        return {
            "step": self._step,
            "first": self._first,
            "pending": None if self._pending is None else self._pending.to_dict(),
            "history": [list(h) for h in self._history],
            "probes": [dict(p) for p in self._probes],
            "best": None if self.best is None else self.best.to_dict(),
            "seed": self._seed,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "seed" in state:
            self._seed = int(state["seed"])
        self._step = int(state.get("step", 0))
        self._first = bool(state.get("first", True))
        pend = state.get("pending")
        self._pending = Config(**pend) if pend else None
        self._history = [(float(a), float(b), float(t)) for a, b, t in state.get("history", [])]
        if "probes" in state:
            self._probes = [dict(p) for p in state["probes"]]
        best = state.get("best")
        self.best = Config(**best) if best else None


#: name -> factory, or ``"module:attribute"`` imported on first use (keeps frameworks out of core).
_REGISTRY: dict[str, Callable[..., Tuner] | str] = {
    "static": StaticTuner,
    "grid": GridTuner,
    "bo": BOTuner,
    "autobyte": "autobyte.meta:AutoByteTuner",
}


def tuner_names() -> list[str]:
    """Names :func:`make_tuner` accepts, sorted."""
    return sorted(_REGISTRY)


def register_tuner(name: str, factory: Callable[..., Tuner] | str) -> None:
    """Make ``make_tuner(name)`` build ``factory(**kw)`` (or import ``"module:attr"`` lazily)."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"name must be a non-empty string, but got name={name!r}.")
    _REGISTRY[name] = factory


def make_tuner(name: str, **kwargs: Any) -> Tuner:
    """Build a tuner by name: ``"static"``, ``"grid"``, ``"bo"`` or ``"autobyte"``.

    Raises:
        ValueError: unknown ``name``.
    """
    if name not in _REGISTRY:
        raise ValueError(f"name must be one of {tuner_names()}, but got name={name!r}.")
    factory = _REGISTRY[name]
    if isinstance(factory, str):
        mod, _, attr = factory.partition(":")
        factory = getattr(importlib.import_module(mod), attr)
    tuner = factory(**kwargs)  # type: ignore[operator]
    if not isinstance(tuner, Tuner):
        raise TypeError(f"tuner factory for {name!r} must return a Tuner, but returned {tuner!r}.")
    return tuner


def import_tuners(sources: Sequence[str]) -> list[str]:
    """Import modules that register tuners (:func:`register_tuner`); returns the names they added.

    Each source is a module name (``my_pkg.tuners``) or the path of a Python
    file (``benchmarks/tuner_variants.py``, loaded under its file name). A
    benchmark imports the same sources in every process it starts, so a
    tuner registered this way runs wherever ``make_tuner`` builds one.

    Raises:
        ValueError: a source that is not a string, a file that does not
            exist, or a module that fails to import (the error is in the message).
    """
    before = set(_REGISTRY)
    for src in sources:
        if not isinstance(src, str) or not src.strip():
            raise ValueError(f"sources must be module names or .py paths, but got {src!r}.")
        try:
            if src.endswith(".py"):
                path = os.path.abspath(src)
                if not os.path.isfile(path):
                    raise FileNotFoundError(f"no such file: {path}")
                name = "autobyte_tuners_" + os.path.splitext(os.path.basename(path))[0]
                if name not in sys.modules:
                    spec = importlib.util.spec_from_file_location(name, path)
                    assert spec is not None and spec.loader is not None
                    module = importlib.util.module_from_spec(spec)
                    sys.modules[name] = module
                    try:
                        spec.loader.exec_module(module)
                    except BaseException:
                        del sys.modules[name]
                        raise
            else:
                importlib.import_module(src)
        except Exception as exc:  # any failure to import is the caller's argument
            raise ValueError(f"cannot import tuners from {src!r} ({type(exc).__name__}: {exc})".replace("\n", " ")) from None
    return sorted(set(_REGISTRY) - before)


__all__ = [
    "BOTuner", "BYTESCHEDULER_BO_RANGES", "GridTuner", "StaticTuner", "import_tuners", "make_tuner", "register_tuner",
    "tuner_names",
]
