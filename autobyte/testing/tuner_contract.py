"""The contract every :class:`~autobyte.core.tuning.Tuner` passes.

A tuner is driven exactly as the window protocol drives it on rank 0:
``start(space, initial)`` once, then, for every window, ``check(Observation)``
on its first half (a decision there ends the window) and ``observe(Observation)``
at its end. The observations here come from the real simulator
(:mod:`autobyte.sim`: ResNet50 on 8 parameter-server workers, the bandwidth
stepping through 10, 0.5, 40 and 1 Gbit/s every 8 windows, so that the best
configuration changes and searching tuners move), and are deterministic.

Each ``check_*`` function takes a *factory*, a callable with no arguments that
builds a fresh tuner, and raises :class:`AssertionError` naming what broke::

    from autobyte.testing import tuner_contract

    def test_my_tuner_keeps_the_contract():
        tuner_contract.check_tuner(lambda: MyTuner(seed=0))

:func:`check_tuner` runs them all; ``tests/contract/test_tuner_contract.py`` runs
them over every registered tuner (:func:`autobyte.core.tuners.tuner_names`).
"""

from __future__ import annotations

import json
import math
import warnings
from typing import Any, Callable, Sequence

from ..core.space import Config, KiB, MiB, SearchSpace
from ..core.tuning import Decision, Observation, Tuner

TunerFactory = Callable[[], Tuner]

#: The search space the contract runs in (15 candidates).
SPACE = SearchSpace.grid([256 * KiB, MiB, 4 * MiB, 16 * MiB, 64 * MiB], [1, 2, 4])
#: The configuration given to ``start``.
START = Config(4 * MiB, 8 * MiB)
#: Windows of one run: every bandwidth regime of :data:`RATES_GBPS` at least once.
N_WINDOWS = 48
#: Link bandwidth of the simulated cluster, one value per 8 windows, cycled.
RATES_GBPS = (10.0, 0.5, 40.0, 1.0)
#: Windows after which the state goes through JSON into a fresh tuner
#: (BO's random and GP phases, inside a grid search, across regime changes and adaptations, with an
#: AutoByte trial in flight that its next check ends: 2, 6).
CHECKPOINTS = (2, 5, 6, 12, 21, 30, 36)

_cache: dict[tuple[Config, int, int], Observation] = {}


def _simulated(config: Config, w: int, n_iters: int) -> Observation:
    """``n_iters`` simulated iterations of window ``w`` under ``config`` (2: a whole window, 1: its first half)."""
    key = (config, w, n_iters)
    if key not in _cache:
        from .. import sim

        gbps = RATES_GBPS[(w // 8) % len(RATES_GBPS)]
        res = sim.simulate(sim.get_model("resnet50"), sim.Cluster.from_gbps(8, gbps, "ps"), config, n_iters=n_iters, seed=w)
        f = res.features()
        share = n_iters / 2
        _cache[key] = Observation(max(0, w * 10 - (5 if share < 1 else 0)), config, float(f.speed.sum()), f, window_share=share)
    return _cache[key]


def window(config: Config, w: int) -> Observation:
    """Window ``w`` run under ``config``: simulated, deterministic, cached."""
    return _simulated(config, w, 2)


def half(config: Config, w: int) -> Observation:
    """The first half of window ``w`` under ``config`` (what ``Tuner.check`` sees): simulated, deterministic, cached."""
    return _simulated(config, w, 1)


def default_factory(name: str) -> TunerFactory:
    """How the contract builds the registered tuner ``name``.

    The shipped tuners get the arguments that make a run deterministic and
    searching (grid over :data:`SPACE`, BO seeded, AutoByte adapting inline
    on a private copy of the shipped network with a 3% error bar); any other
    registered name is built as ``make_tuner(name)``.
    """
    from ..core.tuners import make_tuner

    if name == "grid":
        return lambda: make_tuner("grid", space=SPACE)
    if name == "bo":
        return lambda: make_tuner("bo", arch="ps", seed=0)
    if name == "autobyte":
        def build() -> Tuner:
            from ..meta import MetaNetwork

            return make_tuner("autobyte", network=MetaNetwork.load_default(), background=False, adapt_time_s=1e6,
                              max_error=0.03)
        return build
    return lambda: make_tuner(name)


def searches_the_space(name: str) -> bool:
    """Whether the registered tuner ``name`` picks among the space's candidates.

    ByteScheduler's BO searches continuous ranges of its own
    (:data:`~autobyte.core.tuners.BYTESCHEDULER_BO_RANGES`), as ByteScheduler
    does; its decisions are valid configurations, not candidates of the space.
    """
    return name != "bo"


Step = tuple[Config, Any]


def drive(tuner: Tuner, windows: Sequence[int], current: Config, *, inside_space: bool = True) -> tuple[list[Step], Config]:
    """Check, then observe, ``windows`` in turn, following every decision; the steps and the config reached.

    Each window's first half is offered to ``check`` (:func:`half`); a
    decision there ends the window (its step), else the whole window goes to
    ``observe``. With ``inside_space`` every decision must be a candidate of
    :data:`SPACE`; without, any valid :class:`Config` (a tuner with search
    ranges of its own, such as ByteScheduler's BO).
    """
    steps: list[Step] = []
    for w in windows:
        d = tuner.check(half(current, w))
        _check_decision(d, tuner, w, inside_space, "check")
        if d is None:
            d = tuner.observe(window(current, w))
            _check_decision(d, tuner, w, inside_space)
        steps.append((current, None if d is None else (d.config, d.reason, d.predicted_speed)))
        if d is not None:
            current = d.config
    return steps, current


def _check_decision(d: object, tuner: Tuner, w: int, inside_space: bool, method: str = "observe") -> None:
    who = f"{type(tuner).__name__}.{method} at window {w}"
    _expect(d is None or isinstance(d, Decision), f"{who} returned {d!r}; it must return None or a Decision")
    if isinstance(d, Decision):
        _expect(isinstance(d.config, Config), f"{who}: Decision.config must be a Config, got {d.config!r}")
        _expect(not inside_space or d.config in SPACE, f"{who}: {d.config} is outside the search space given to start()")
        _expect(isinstance(d.reason, str) and bool(d.reason), f"{who}: Decision.reason must be a non-empty string")
        p = d.predicted_speed
        _expect(p is None or (isinstance(p, (int, float)) and math.isfinite(p)),
                f"{who}: Decision.predicted_speed must be None or a finite number, got {p!r}")


def _expect(ok: bool, message: str) -> None:
    if not ok:
        raise AssertionError(message)


# ------------------------------------------------------------------ the checks


def check_start(factory: TunerFactory) -> None:
    """``start`` returns a :class:`Config`: the initial one or one of the space."""
    t = factory()
    first = t.start(SPACE, START)
    _expect(isinstance(first, Config), f"start() returned {first!r}; it must return a Config")
    _expect(first == START or first in SPACE, f"start() returned {first}, neither the initial config nor in the space")


def check_decisions(factory: TunerFactory, n_windows: int = N_WINDOWS, *, inside_space: bool = True) -> list[Step]:
    """Every ``observe`` returns ``None`` or a :class:`Decision` (inside the space), with a reason."""
    t = factory()
    steps, _ = drive(t, range(n_windows), t.start(SPACE, START), inside_space=inside_space)
    return steps


def check_deterministic(factory: TunerFactory, n_windows: int = 16, *, inside_space: bool = True) -> None:
    """Two tuners from the factory make the same decisions on the same windows (seeded randomness)."""
    a, b = factory(), factory()
    run_a, _ = drive(a, range(n_windows), a.start(SPACE, START), inside_space=inside_space)
    run_b, _ = drive(b, range(n_windows), b.start(SPACE, START), inside_space=inside_space)
    for w, (x, y) in enumerate(zip(run_a, run_b)):
        _expect(x == y, f"two tuners from the same factory differ at window {w}: {x} vs {y}")


def check_state_round_trip(factory: TunerFactory, checkpoints: Sequence[int] = CHECKPOINTS,
                           n_windows: int = N_WINDOWS, min_decisions: int = 0, inside_space: bool = True) -> None:
    """``state_dict`` is plain JSON, and a fresh tuner loaded from it continues with the same decisions.

    Args:
        min_decisions: the uninterrupted run must decide at least this often
            (a tuner that never moves proves little about its state).
    """
    t = factory()
    whole, _ = drive(t, range(n_windows), t.start(SPACE, START), inside_space=inside_space)
    n = sum(d is not None for _, d in whole)
    _expect(n >= min_decisions, f"the tuner decided {n} times in {n_windows} windows, expected at least {min_decisions}")
    for at in checkpoints:
        first = factory()
        head, cur = drive(first, range(at), first.start(SPACE, START), inside_space=inside_space)
        state = first.state_dict()
        try:
            text = json.dumps(state)
        except (TypeError, ValueError) as exc:
            raise AssertionError(f"state_dict() after window {at} is not plain JSON ({exc}): {state!r}") from None
        second = factory()
        second.start(SPACE, cur)
        second.load_state_dict(json.loads(text))
        tail, _ = drive(second, range(at, n_windows), cur, inside_space=inside_space)
        for w, (a, b) in enumerate(zip(whole, head + tail)):
            _expect(a == b, f"resumed from its state after window {at}, the tuner diverges at window {w}: {b} instead of {a}")


def check_bad_observations(factory: TunerFactory, *, inside_space: bool = True) -> None:
    """A window with a NaN, zero or infinite speed neither raises nor moves the tuner outside the space.

    Warnings are allowed (a tuner may say it ignored the window).
    """
    for speed in (float("nan"), 0.0, float("inf")):
        t = factory()
        cur = t.start(SPACE, START)
        good = window(cur, 0)
        bad = Observation(good.iteration, good.config, speed, good.features)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                d = t.observe(bad)
            except Exception as exc:
                raise AssertionError(f"observe() raised {type(exc).__name__}: {exc} on a window with speed={speed}") from None
        _check_decision(d, t, 0, inside_space)
        if d is not None:
            cur = d.config
        drive(t, range(1, 3), cur, inside_space=inside_space)  # and it goes on


def check_tuner(factory: TunerFactory, *, min_decisions: int = 0, inside_space: bool = True) -> None:
    """Every check of the contract, in turn."""
    check_start(factory)
    check_decisions(factory, inside_space=inside_space)
    check_deterministic(factory, inside_space=inside_space)
    check_state_round_trip(factory, min_decisions=min_decisions, inside_space=inside_space)
    check_bad_observations(factory, inside_space=inside_space)


__all__ = [
    "CHECKPOINTS", "N_WINDOWS", "RATES_GBPS", "SPACE", "START", "TunerFactory", "check_bad_observations",
    "check_decisions", "check_deterministic", "check_start", "check_state_round_trip", "check_tuner",
    "default_factory", "drive", "half", "searches_the_space", "window",
]
