"""Tuners for experiments beside the shipped ones: AutoByte without one of its policies, static runs, probes of cost.

Imported by ``--import``, each registers its tuners by name (:func:`autobyte.core.register_tuner`):

    OMP_NUM_THREADS=1 python benchmarks/bench_tuner_sim.py --set tune --import tuner_variants \\
        --tuners autobyte,autobyte-no-equivalence,autobyte-no-calibration
    sudo autobyte bench --suite full --import benchmarks/tuner_variants.py \\
        --methods bytescheduler,hindsight,autobyte,tuner:autobyte-no-noise-z

(``bench_tuner_sim.py`` puts its own folder on ``sys.path``, so ``--import tuner_variants`` finds this file.)
A variant that changes how AutoByte works is a subclass or a policy object here, never an option of the
shipped :class:`~autobyte.meta.AutoByteTuner`:

* ``autobyte-no-equivalence``: every candidate a schedule of its own (no :class:`Equivalence
  <autobyte.meta._scorer.Equivalence>`: candidates that run the same schedule are predicted, measured and
  tried one by one).
* ``autobyte-no-calibration``: the network's predicted ratios as they are, not scaled by how they compared
  with what was measured on this job.
* ``autobyte-no-noise-z``: the controller's detector at its fixed 15% threshold (``noise_z=None``).
* ``autobyte-history``, ``autobyte-history-no-veto``: a start from the history of past jobs
  (``history_dir``: ``$AUTOBYTE_HISTORY_DIR``, absolute, default ``runs/history``;
  ``$AUTOBYTE_HISTORY_WRITE=0`` reads it only), with and without ``history_veto``; ``static-history``
  runs static at the configuration the same history picks.
* ``autobyte-no-adapt``: AutoByte without the online adaptation of the network's head (``adapt=False``): what the
  adaptation's fits, in their worker process, win or cost.
* ``autobyte-fits-unbounded``: AutoByte whose adaptation has no CPU budget (a fit at every wrong prediction, as
  before the budget).
* ``autobyte-fits-own-budget``: AutoByte whose fits keep a 1% budget of their own beside the CPU of the tuner's calls
  (as before the budget counted the tuner's calls and the next fit): what the whole tuner's budget costs in speed.
* ``autobyte-slower-trials-refiled``: AutoByte whose verifier moves a trial slower than predicted into the conditions
  a change then showed when the change accounts for it, as a faster one is (:meth:`Verifier.ran_after
  <autobyte.meta._moves.Verifier.ran_after>` without its side, as before it).
* ``autobyte-blas-threads-free``: AutoByte whose calls leave numpy's BLAS on all its threads (as before
  :func:`~autobyte.meta._network.one_blas_thread`): what the one thread saves in CPU and speed.
* ``autobyte-clocks``: the shipped AutoByte whose calls are also timed on the calling thread's clock (printed on
  stderr beside ``cpu_s``, the process clock): how much of ``cpu_s`` is the engine's threads working meanwhile.
* ``autobyte-shadow``, ``autobyte-history-shadow``, ``autobyte-history-shadow-no-adapt``: AutoByte doing
  all its work but never acting, for its cost at a fixed configuration.
* ``autobyte-screen``: before the explorer, a fixed pattern around the start measured in every set of
  conditions.
* ``autobyte-one-window``: AutoByte without its search (:class:`~autobyte.meta._search.Search`): in
  conditions expected to last too, one-window trials of the network's choices and moves on one window.
* ``autobyte-fresh-races``: AutoByte that starts afresh in new conditions: what the last regime measured out is raced
  and tried again (the tuner's skip without :meth:`~autobyte.meta._search.Search.carried_out`).
* ``autobyte-race-every-regime``: AutoByte whose ended races reopen on drift and whose new conditions race afresh.
* ``autobyte-race-afresh-after-unfinished``: AutoByte that carries only ended races across a change: a race the
  conditions ended first is not carried, and the next conditions race a full shortlist
  (:meth:`~autobyte.meta._search.Search.decided` without unfinished races' leaders).
* ``autobyte-no-leaps``: AutoByte whose races take no leap (an explorer's trial predicted more than ``Search.leap``,
  25%, ahead of the best measured, tried before the race's next candidate).
* ``autobyte-start-apart-from-its-grid-point``: AutoByte whose search lists a configuration outside the grid (the job's
  start, ByteScheduler's default) and the grid's nearest one, less than half a grid step away, as two candidates
  (:meth:`~autobyte.meta._search.Search._class` as it was).
* ``autobyte-trials-straddle``: AutoByte whose explorer values a trial as if its window always ended in the conditions
  it starts in (:class:`~autobyte.meta._explorer.Explorer` without ``left``).
* ``autobyte-instant-changes``: the controller's detector without ``confirm``: a speed change within twice its
  threshold, or a step inside a check, counts at once, not after the next check confirms it.
* ``autobyte-last-check-reference``: the controller's detector compares a configuration's measurement with its last
  one alone (``reference_memory=1``), not with the mean of its last two in these conditions.
* ``autobyte-explorer-exact-points``: AutoByte whose explorer counts what was measured and the configuration in force
  as themselves, not as their grid points (:class:`~autobyte.meta._explorer.Explorer` as it was before ``57a7882``).
* ``autobyte-last-check-exact-points``: both at once, the tuner as it was at ``a508e09``, before ``bc0a35ab`` and
  ``57a7882``, for an A/B of the two together in one run.
* ``autobyte-carried-reference``: the controller's do-no-harm guard carries the start's speed across every change of
  conditions seen at another configuration and never runs the start to measure it (``guard_measure_after=None``).
* ``autobyte-last-window-reference``: the controller's do-no-harm guard takes the start's last window alone for its
  reference (``guard_reference_iters=1``), not the mean of its windows over the guard's span.
* ``autobyte-guard-trips-on-suspicion``: the controller's do-no-harm guard counts a check's cost, and may send the run
  back to the start, at a check whose change of conditions the detector waits to confirm (the move leaves the
  suspicion unjudged), not one check later once it is judged.
* ``static-<P>m-<K>x``: static at partition ``P`` MiB, credit ``K`` partitions, in one continuous run;
  ``switch-<P>m-<K>x``: starts at the default and switches there once, at the first window (what a
  reconfiguration costs later on).
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import sys
import time
from typing import Any, Callable

from autobyte.core.regime import HarmGuard
from autobyte.core.space import Config, SearchSpace
from autobyte.core.tuners import register_tuner
from autobyte.core.tuning import Decision, Observation, StaticTuner, Tuner
from autobyte.meta import AutoByteTuner, JobHistory
from autobyte.meta._explorer import Explorer
from autobyte.meta._learner import Learner
from autobyte.meta._moves import Verifier
from autobyte.meta._scorer import Scorer
from autobyte.meta._search import Search


# ------------------------------------------------------------------ AutoByte without one of its policies
class NoEquivalence(AutoByteTuner):
    """AutoByte with every candidate a schedule of its own."""

    def _new_scorer(self, space: SearchSpace) -> Scorer:
        return Scorer(self.net, space, equivalent=False)


class NoCalibration(AutoByteTuner):
    """AutoByte believing the network's predicted ratios as they are."""

    def _new_scorer(self, space: SearchSpace) -> Scorer:
        return Scorer(self.net, space, calibrate=False)


register_tuner("autobyte-no-equivalence", NoEquivalence)
register_tuner("autobyte-no-calibration", NoCalibration)
register_tuner("autobyte-no-noise-z", functools.partial(AutoByteTuner, noise_z=None))


class OneWindow(AutoByteTuner):
    """AutoByte without its search: one-window trials everywhere."""

    def _new_search(self) -> Any:
        return None


register_tuner("autobyte-one-window", OneWindow)


class FreshRaces(AutoByteTuner):
    """AutoByte that races and tries afresh when conditions change: nothing skipped but what past jobs measured slower."""

    def _carried(self, regime: Any) -> frozenset[Config]:
        return self.slower


register_tuner("autobyte-fresh-races", FreshRaces)


class RaceEveryRegime(AutoByteTuner):
    """AutoByte whose races never end for good: one reopens when the drift of the running averages brings a candidate
    measured out back within the noise, and every new set of conditions races a full shortlist afresh."""

    def _search(self, obs: Observation, sc: Any, regime: Any, measured: dict[Config, float], horizon: float) -> Any:
        step = super()._search(obs, sc, regime, measured, horizon)
        regime.winner = None
        return step


register_tuner("autobyte-race-every-regime", RaceEveryRegime)


class WinnersOnly(Search):
    """A search that carries only ended races across a change of conditions."""

    def decided(self, regimes: Any) -> list[Config]:
        return [r.winner for r in regimes if r.winner is not None]


class RaceAfreshAfterUnfinished(AutoByteTuner):
    """AutoByte whose race, when conditions change before it ended, is not carried: the new conditions race a full
    shortlist afresh until a race has ended somewhere."""

    def _new_search(self) -> Any:
        return WinnersOnly(min_horizon=self.search_horizon, max_distance=self.explorer.max_distance)


register_tuner("autobyte-race-afresh-after-unfinished", RaceAfreshAfterUnfinished)


class NoLeaps(AutoByteTuner):
    """AutoByte whose races take no leap: no trial of the explorer goes before a race, however far ahead the network
    predicts it (``Search.leap`` at its ceiling, a factor of 101)."""

    def _new_search(self) -> Any:
        search = super()._new_search()
        if search is not None:
            search.leap = 100.0
        return search


register_tuner("autobyte-no-leaps", NoLeaps)


class GridNeighbourApart(Search):
    """A search that lists a configuration outside the grid and the grid's nearest one as two candidates."""

    @staticmethod
    def _class(c: Config, space: SearchSpace, equivalence: Any) -> Any:
        return equivalence.of(c) if equivalence is not None and c in space else (c.partition_bytes, c.credit_bytes)


class StartApartFromItsGridPoint(AutoByteTuner):
    """AutoByte whose race lists the job's start (ByteScheduler's default, 4,000,000 bytes) and the grid's <4 MiB, 4X>
    apart, as two candidates."""

    def _new_search(self) -> Any:
        return GridNeighbourApart(min_horizon=self.search_horizon, max_distance=self.explorer.max_distance)


register_tuner("autobyte-start-apart-from-its-grid-point", StartApartFromItsGridPoint)


class StraddlingExplorer(Explorer):
    """An explorer that values a trial as if its window always ended inside the conditions it starts in."""

    def propose(self, *args: Any, left: float | None = None, **kwargs: Any) -> Any:
        return super().propose(*args, **kwargs)


class TrialsStraddle(AutoByteTuner):
    """AutoByte whose explorer ignores how long the conditions are expected to last this time (``left``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.explorer = StraddlingExplorer(**vars(self.explorer))


register_tuner("autobyte-trials-straddle", TrialsStraddle)


class InstantChanges(AutoByteTuner):
    """AutoByte whose controller's detector takes every change (speed or step) at once (no ``confirm``)."""

    confirm = None


register_tuner("autobyte-instant-changes", InstantChanges)


class LastCheckReference(AutoByteTuner):
    """AutoByte whose controller's detector compares a measurement with the configuration's last one alone."""

    reference_memory = 1


register_tuner("autobyte-last-check-reference", LastCheckReference)


class _ExactPoints(SearchSpace):
    """A search space whose candidates count as themselves alone: no configuration outside it has a grid point."""

    def grid_point(self, c: Config) -> Config | None:
        return c if c in self else None


class ExplorerOfExactPoints(Explorer):
    """The explorer as it was before it counted what was measured, and the configuration in force, by their grid
    points: the job's start (4,000,000 bytes) apart from <4 MiB, 4X>, and only the start's own class done with it."""

    def propose(self, space: SearchSpace, *args: Any, **kwargs: Any) -> Any:
        kept = getattr(self, "_exact", None)  # the job's space and its copy without grid points, built once
        if kept is None or kept[0] is not space:
            kept = self._exact = (space, _ExactPoints(space.candidates))
        return super().propose(kept[1], *args, **kwargs)


class ExactPointsExplorer(AutoByteTuner):
    """AutoByte whose explorer does not count configurations by their grid points (:class:`ExplorerOfExactPoints`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.explorer.__class__ = ExplorerOfExactPoints


register_tuner("autobyte-explorer-exact-points", ExactPointsExplorer)


class LastCheckExactPoints(LastCheckReference, ExactPointsExplorer):
    """AutoByte with both of the last two changes undone: the detector's reference is the last check alone
    (:class:`LastCheckReference`), and the explorer counts configurations as themselves, not as their grid points
    (:class:`ExactPointsExplorer`); the tuner of ``a508e09``."""


register_tuner("autobyte-last-check-exact-points", LastCheckExactPoints)


class CarriedReference(AutoByteTuner):
    """AutoByte whose controller's guard carries the start's speed across changes without measuring it again."""

    guard_measure_after = None


register_tuner("autobyte-carried-reference", CarriedReference)


class _GuardTripsOnSuspicion(HarmGuard):
    """The do-no-harm guard that does not wait for the detector: a suspected check counts, and trips, at once."""

    def record(self, iteration: int, config: Config, speed: float, n_iters: int, changed: bool,
               unjudged: bool = False) -> None:
        super().record(iteration, config, speed, n_iters, changed)


class GuardTripsOnSuspicion(AutoByteTuner):
    """AutoByte whose controller's guard may trip at a check the detector holds as a suspected change."""

    guard_type = _GuardTripsOnSuspicion


register_tuner("autobyte-guard-trips-on-suspicion", GuardTripsOnSuspicion)


class LastWindowReference(AutoByteTuner):
    """AutoByte whose controller's guard takes the start's last window alone for its reference."""

    guard_reference_iters = 1


register_tuner("autobyte-last-window-reference", LastWindowReference)

# AutoByte whose meta-network's head is never adapted online: checked predictions still calibrate the scorer and fit
# its trend on this job (the Learner labels its pairs but starts no fit), so only the paper's adaptation is gone
register_tuner("autobyte-no-adapt", functools.partial(AutoByteTuner, adapt=False))


class FitsUnbounded(AutoByteTuner):
    """AutoByte whose adaptation starts a fit at every wrong prediction, whatever the fits already took (no
    :attr:`Learner.cpu_share <autobyte.meta._learner.Learner.cpu_share>` budget)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.learner.cpu_share = None


register_tuner("autobyte-fits-unbounded", FitsUnbounded)


class _FitsOwnBudgetLearner(Learner):
    """The budget of the fits alone: the fits so far, not the tuner's calls nor the next fit."""

    def _spent(self, tuner_cpu_s: float) -> float:
        return float(self.adapter.cpu_s)


class FitsOwnBudget(AutoByteTuner):
    """AutoByte whose fits keep a :attr:`Learner.cpu_share <autobyte.meta._learner.Learner.cpu_share>` budget of their
    own (a fit starts while the fits so far took at most 1% of the wall time), beside the CPU of the tuner's calls."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        was = self.learner
        self.learner = _FitsOwnBudgetLearner(self.adapter, max_error=was.trigger.max_error, replay_size=was.replay_size,
                                             background=was.background, enabled=was.enabled)


register_tuner("autobyte-fits-own-budget", FitsOwnBudget)


class _EitherSideVerifier(Verifier):
    """A trial placed after the change whenever the change accounts for its surprise, on either side."""

    def ran_after(self, surprise: float, change: float) -> bool:
        return abs(surprise - change) <= math.log1p(self.surprise)


class SlowerTrialsRefiled(AutoByteTuner):
    """AutoByte whose verifier moves a trial that ran slower than predicted into the new conditions when the change
    seen next accounts for it, as one that ran faster (as before :meth:`Verifier.ran_after
    <autobyte.meta._moves.Verifier.ran_after>` kept the slower ones where they were measured)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.verifier = _EitherSideVerifier(self.verifier.surprise)


register_tuner("autobyte-slower-trials-refiled", SlowerTrialsRefiled)


class BlasThreadsFree(AutoByteTuner):
    """AutoByte whose calls leave numpy's BLAS on the threads it has (the tuner's calls without
    :func:`~autobyte.meta._network.one_blas_thread`), timed as the shipped ones are."""

    _calls_context = staticmethod(contextlib.nullcontext)


register_tuner("autobyte-blas-threads-free", BlasThreadsFree)


class Clocks(AutoByteTuner):
    """The shipped AutoByte, its calls also timed on the calling thread's clock: every 20 windows, and the last,
    ``cpu_s`` (process CPU: the engine's threads' work during a call included) and the thread's own CPU, on stderr
    (a bench run's ``launch.log``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.thread_cpu_s, self.calls = 0.0, 0

    def _clocked(self, call: Callable[[Observation], Decision | None], obs: Observation) -> Decision | None:
        t0 = time.thread_time()
        try:
            return call(obs)
        finally:
            self.thread_cpu_s += time.thread_time() - t0
            self.calls += 1
            if self.calls % 20 == 0 or obs.iteration >= 790:
                print(f"autobyte-clocks: iteration {obs.iteration}, {self.calls} calls: process {self.cpu_s:.4f} s, "
                      f"thread {self.thread_cpu_s:.4f} s", file=sys.stderr, flush=True)

    def observe(self, obs: Observation) -> Decision | None:
        return self._clocked(super().observe, obs)

    def check(self, obs: Observation) -> Decision | None:
        return self._clocked(super().check, obs)


register_tuner("autobyte-clocks", Clocks)

# ------------------------------------------------------------------ a start from the history of past jobs
_HISTORY = os.environ.get("AUTOBYTE_HISTORY_DIR", os.path.abspath("runs/history"))
_HISTORY_WRITE = os.environ.get("AUTOBYTE_HISTORY_WRITE", "1") != "0"
register_tuner("autobyte-history", functools.partial(AutoByteTuner, history_dir=_HISTORY, history_write=_HISTORY_WRITE))
register_tuner("autobyte-history-no-veto", functools.partial(AutoByteTuner, history_dir=_HISTORY, history_write=_HISTORY_WRITE,
                                                             history_veto=False))


class StaticFrom(StaticTuner):
    """A static configuration run as a tuner: starts at ``choose(space, initial)`` and never moves."""

    def __init__(self, name: str, choose: Callable[[SearchSpace, Config], Config]) -> None:
        self.name, self.choose = name, choose

    def start(self, space: SearchSpace, initial: Config) -> Config:
        super().start(space, initial)
        return self.choose(space, initial)


def _history_pick(space: SearchSpace, initial: Config) -> Config:
    return JobHistory(_HISTORY, write=False).pick(space, initial)[0]


# the fair static baseline of autobyte-history: static at the configuration the same history picks
register_tuner("static-history", lambda: StaticFrom("static-history", _history_pick))


# ------------------------------------------------------------------ the tuner's own cost
class Shadow(AutoByteTuner):
    """AutoByte doing all its work (scoring, adapting, history) but never acting: its cost at a fixed configuration.

    For measuring that cost only: its state goes on as if its decisions had been applied (it breaks
    :meth:`Tuner.check`'s rule that a check answered ``None`` leaves the state unchanged).
    """

    def observe(self, obs: Observation) -> Decision | None:
        super().observe(obs)
        return None

    def check(self, obs: Observation) -> Decision | None:
        super().check(obs)
        return None


register_tuner("autobyte-shadow", Shadow)
register_tuner("autobyte-history-shadow", functools.partial(Shadow, history_dir=_HISTORY, history_write=_HISTORY_WRITE))
register_tuner("autobyte-history-shadow-no-adapt", functools.partial(Shadow, history_dir=_HISTORY, history_write=_HISTORY_WRITE,
                                                                     adapt=False))


# ------------------------------------------------------------------ a fixed pattern around the start
class Screen:
    """The tuner's explorer, asked only once every point of ``pattern`` is measured in these conditions."""

    def __init__(self, inner: Any, pattern: list[Config]) -> None:
        self.inner, self.pattern = inner, pattern

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def propose(self, space: SearchSpace, cands: Any, predicted: Any, measured: dict[Config, float], current: Config,
                speed: float, sigma: float, horizon: float, allowance: float | None, misses: int = 0,
                equivalence: Any = None, *rest: Any, skip: Any = (), left: float | None = None) -> tuple[Config, str] | None:
        same = set() if equivalence is None else {equivalence.of(c) for c in [*measured, current]}
        pending = [] if horizon <= self.inner.trial_iters else self.pattern  # no room for a trial here
        for cfg in pending:
            if cfg == current or cfg in measured or cfg in skip or (equivalence is not None and equivalence.of(cfg) in same):
                continue
            return cfg, (f"screen: {cfg}, a step of the fixed pattern around the start, measured once in these "
                         f"conditions whatever the prediction ({predicted[space.index(cfg)]:.1f} samples/s; "
                         f"best measured {max(measured.values()):.1f})")
        return self.inner.propose(space, cands, predicted, measured, current, speed, sigma, horizon, allowance,
                                  misses, equivalence, *rest, skip=skip, left=left)


class Screened(AutoByteTuner):
    """AutoByte that, in every set of conditions, first measures a fixed pattern around its start whatever the
    predictor says: the start and its partition times each of :attr:`factors` at the start's credit multiple
    (the nearest configurations of the space), each once, then explores as it ships. The steps are 4x, large
    enough for one window to see (neighbouring configurations differ by less than a window's noise)."""

    factors: tuple[float, ...] = (0.25, 4.0)

    def start(self, space: SearchSpace, initial: Config) -> Config:
        first = super().start(space, initial)
        inner = self.explorer.inner if isinstance(self.explorer, Screen) else self.explorer
        pattern: list[Config] = [first]
        for f in self.factors:
            cfg = space.nearest(Config.from_multiple(max(1, int(first.partition_bytes * f)), first.credit_multiple))
            if cfg not in pattern:
                pattern.append(cfg)
        self.explorer = Screen(inner, pattern)  # type: ignore[assignment]
        return first

    # the pattern is the job's start's: a resumed job (started at the configuration in force) keeps it
    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "screen_pattern": [[c.partition_bytes, c.credit_bytes] for c in self.explorer.pattern]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        state = dict(state)
        pattern = [Config(int(p), int(c)) for p, c in state.pop("screen_pattern")]
        super().load_state_dict(state)
        self.explorer.pattern = pattern


register_tuner("autobyte-screen", Screened)


# ------------------------------------------------------------------ static configurations and one switch
def _static_at(partition: int, credit: int) -> Callable[..., Tuner]:
    name = f"static-{partition >> 20}m-{credit // partition}x"
    return lambda: StaticFrom(name, lambda space, initial: Config(partition, credit))


class SwitchTo(StaticTuner):
    """Starts at the configuration given and moves once, at its first window, to ``target``."""

    def __init__(self, target: Config) -> None:
        self.target, self.moved = target, False
        self.name = f"switch-{target.partition_bytes >> 20}m-{target.credit_bytes // target.partition_bytes}x"

    def observe(self, obs: Observation) -> Decision | None:
        if self.moved:
            return None
        self.moved = True
        return Decision(self.target, "switch once, at the first window")

    def state_dict(self) -> dict[str, Any]:
        return {"moved": self.moved}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.moved = bool(state.get("moved", self.moved))


def _switch_to(partition: int, credit: int) -> Callable[..., Tuner]:
    return lambda: SwitchTo(Config(partition, credit))


for _p, _k in ((16, 2), (8, 2), (1, 4), (8, 1), (16, 1)):
    register_tuner(f"static-{_p}m-{_k}x", _static_at(_p << 20, (_p * _k) << 20))
for _p, _k in ((1, 4), (16, 2), (8, 1), (16, 1)):
    register_tuner(f"switch-{_p}m-{_k}x", _switch_to(_p << 20, (_p * _k) << 20))
