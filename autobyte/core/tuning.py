"""The tuner interface and the controller that drives a tuner from an engine.

A tuner is a small policy with one decision method (:meth:`Tuner.observe`)
that returns a plain value: a :class:`Decision` to reconfigure, or ``None``
to keep the current configuration. A tuner may also look at each check of a
window still in progress (:meth:`Tuner.check`, by default ``None``: wait for
the window), to end early a trial that already measures badly. The
:class:`Controller` is what engines talk to: it cuts iterations into windows,
turns every rank's :class:`~autobyte.core.metrics.WindowStats` into features,
asks the tuner on rank 0, and says at which iteration every rank applies the
decision.
"""

from __future__ import annotations

import abc
import math
import warnings
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from ._checks import check_int
from .metrics import RuntimeFeatures, WindowStats
from .regime import REFERENCE_MEMORY, HarmGuard, RegimeDetector, within_step
from .space import Config, SearchSpace


@dataclass(frozen=True)
class Observation:
    """What a tuner sees at the end of a window.

    Attributes:
        iteration: the last iteration of the window.
        config: the configuration in force during the window.
        speed: observed cluster throughput, samples/s (sum over workers).
        features: runtime features (Table II) of the window.
        regime_changed: the controller saw conditions change under an
            unchanged configuration just before this window (the window then
            holds only the check that showed the change, or the check after
            one that mixed both regimes; it may be shorter than a full one);
            measurements taken before it describe another regime.
        harm_allowance: iterations' worth of slowdown against the starting
            configuration that the do-no-harm guard still allows over its
            span (:class:`~autobyte.core.regime.HarmGuard`); ``None`` when
            the run is not guarded. A tuner that explores can keep its
            expected cost below it.
        window_share: the share of a full window's iterations measured
            (1.0 for a window; ``check_iters / window_iters`` for a check of a
            window in progress, offered through :meth:`Tuner.check`, and for
            a window the do-no-harm guard cut short, given to
            :meth:`Tuner.observe`). A tuner that averages measurements can
            weigh them by it.
        mixed: the check that showed the change of conditions, when rank 0's
            iteration times stepped inside it (the tuner's ``step_change``):
            conditions changed somewhere inside it, so ``speed`` belongs to
            neither regime (not a measurement to keep); ``regime_changed`` is
            set, and the next check, wholly in the new conditions, comes
            without it.
        change_threshold: the relative change of one configuration's speed
            the controller reads as a change of conditions now (its
            detector's threshold: ``regime_change``, raised by the job's own
            noise where the tuner sets ``noise_z``); ``None``: the controller
            tells no conditions apart. Speeds closer than this are, to the
            controller, the same conditions.
        link_busy: the share of the measurement's wall time during which
            the busiest rank had a message in flight
            (:attr:`~autobyte.core.metrics.WindowStats.busy_share`); ``None``:
            not measured. Near 1 the link (or the engine's sending) is the
            bottleneck: every byte more is time more.
    """

    iteration: int
    config: Config
    speed: float
    features: RuntimeFeatures
    regime_changed: bool = False
    harm_allowance: float | None = None
    window_share: float = 1.0
    mixed: bool = False
    change_threshold: float | None = None
    link_busy: float | None = None


@dataclass(frozen=True)
class Decision:
    """A reconfiguration chosen by a tuner."""

    config: Config
    reason: str
    predicted_speed: float | None = None


class Tuner(abc.ABC):
    """Base class: one decision per window, on rank 0.

    Subclasses implement :meth:`observe`; :meth:`start` may choose the first
    configuration; :meth:`check` may end a window early. State must be plain
    types (``state_dict``).
    """

    name: str = "tuner"
    #: whether the controller's do-no-harm guard watches this tuner's decisions
    #: (``False`` only for offline searches that are meant to try bad configurations)
    guarded: bool = True
    #: relative rise of the achieved link rate that the controller's detector takes as a faster link, whatever
    #: the configuration (:class:`~autobyte.core.regime.RegimeDetector` ``rate_rise``); ``None`` (default): not read
    rate_rise: float | None = None
    #: relative step of iteration time inside one check that shows a change of conditions inside it, whatever
    #: the configuration (:class:`~autobyte.core.regime.RegimeDetector` ``step_change``): the check mixes both
    #: regimes, so it is dropped (no window, no reference of the detector, no cost of the guard) and the tuner
    #: told at once, with ``Observation.mixed`` set; 0.5 (default); ``None``: not read
    step_change: float | None = 0.5
    #: the detector's speed threshold at least this many scatters of the job's own pairs of measurements of one
    #: configuration (:class:`~autobyte.core.regime.RegimeDetector` ``noise_z``): a host whose checks scatter
    #: widely does not read its noise as changes of conditions; ``None`` (default): the fixed threshold only
    noise_z: float | None = None
    #: a speed change of one configuration within this many of the detector's thresholds (log units), or a step
    #: inside a check of a configuration measured before, counts only once the next check of that configuration
    #: confirms it (:class:`~autobyte.core.regime.RegimeDetector` ``confirm``): one odd check is not taken for new
    #: conditions; 2.0 (default); ``None``: every change at once
    confirm: float | None = 2.0
    #: iterations after a change of conditions seen at another configuration before the controller's do-no-harm
    #: guard runs the starting configuration for one window to measure its speed there, instead of carrying it
    #: across the change (:class:`~autobyte.core.regime.HarmGuard` ``measure_after``); 50 (default); ``None``:
    #: carried until the run comes back to the start
    guard_measure_after: int | None = 50
    #: the start's last iterations in these conditions whose windows the controller's do-no-harm guard averages
    #: for its reference (:class:`~autobyte.core.regime.HarmGuard` ``reference_iters``); ``None`` (default): its span
    guard_reference_iters: int | None = None
    #: the do-no-harm guard the controller runs this tuner under (:class:`~autobyte.core.regime.HarmGuard`, or a
    #: subclass that experiments with its rules)
    guard_type: type[HarmGuard] = HarmGuard
    #: whether the tuner chooses the wire's precision (:class:`~autobyte.core.wire.WireTuner`); ``False``
    #: (default): the job holds it and the tuner sees every configuration at ``"fp32"``
    #: (:class:`~autobyte.core.window.WindowCoordinator` ``wire``)
    chooses_wire: bool = False

    def start(self, space: SearchSpace, initial: Config) -> Config:
        """Called once before training; returns the configuration to begin with."""
        self.space = space
        return initial

    @abc.abstractmethod
    def observe(self, obs: Observation) -> Decision | None:
        """Return a :class:`Decision` to reconfigure, or ``None`` to keep ``obs.config``."""

    def check(self, obs: Observation) -> Decision | None:
        """A check of a window still in progress (``obs`` holds that check alone); ``None`` waits for the window.

        A :class:`Decision` ends the window at this check: the controller
        applies it as it would a window's, and the tuner is not asked about
        the rest of the window (there is none). A tuner that returns ``None``
        must not have changed its state: the same iterations reach
        :meth:`observe` again as part of the full window. The default never
        acts, so a tuner that only implements :meth:`observe` sees whole
        windows only (and windows the do-no-harm guard cut short, with
        ``Observation.window_share`` below 1).
        """
        del obs
        return None

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        del state


class StaticTuner(Tuner):
    """Never reconfigures: the configuration given at start stays (tuning off).

    Not guarded: the do-no-harm guard watches a tuner's own moves, and this
    one makes none; a configuration the user switches to stays.
    """

    name = "static"
    guarded = False

    def observe(self, obs: Observation) -> Decision | None:
        return None


@dataclass
class Controller:
    """Windows, features and decisions for one job, independent of the engine.

    Engines gather every rank's statistics when :meth:`check_due` says so
    (every ``check_iters`` counted iterations) and hand them to
    :meth:`decide` on rank 0. The controller
    joins consecutive checks under one configuration into a window of
    ``window_iters`` iterations and asks the tuner once per window
    (:meth:`Tuner.observe`); each check that does not complete a window is
    offered to :meth:`Tuner.check` on its own statistics
    (``Observation.window_share`` below 1), and a decision there ends the
    window at that check (its history entry has ``"check": True``). When a
    check's speed differs from the previous check's, under the same
    configuration, by more than ``regime_change``, conditions changed (a
    bandwidth drop, another job on the GPU): the iterations before the change
    are dropped and the tuner is asked at once, on the check alone, with
    ``Observation.regime_changed`` set. A change is thus acted on within about
    ``check_iters`` iterations, or two checks where the speed moved by less
    than twice the threshold or a configuration measured before stepped
    inside the check: the detector then waits for the next check
    of the configuration to confirm it (``RegimeDetector.suspect``), and the
    window goes on for that check (it is neither completed nor offered to
    :meth:`Tuner.check` on the suspect check).
    Changes are judged by one rule, :class:`~autobyte.core.regime.RegimeDetector`: a
    configuration measured again runs more than ``regime_change`` away from
    its last measurement in this regime; or, read inside one check whatever
    configuration runs, rank 0's iteration times step by more than the
    tuner's ``step_change`` (0.5 by default): that check is known to mix both
    regimes, and is dropped (no window, no reference of the detector, no cost
    of the guard); the tuner hears of the change at once, on that check with
    ``Observation.mixed`` set (its speed is no measurement of either regime),
    and not again at the next.

    Every tuner runs under the do-no-harm guard
    (:class:`~autobyte.core.regime.HarmGuard`): over any ``harm_span``
    iterations the tuned run stays within ``harm_budget`` of the speed it
    would have had at ``initial``; past that, the controller sends it back to
    ``initial`` (a decision of its own, reason ``guard: ...``) and keeps it
    there for ``harm_span`` iterations; not at a check whose change the
    detector waits to confirm (the slowdown may be the conditions', and the
    move would leave the suspicion unjudged): it judges one check later. The
    tuner is still told what the window measured up to the check where the
    guard trips (``observe``, with ``window_share`` below 1 for a window cut
    short, and ``regime_changed`` when that check also shows a change of
    conditions), so a trial's
    measurement is not lost and a change is filed under the new conditions;
    its decision there is not applied (history ``"held"``). Where the
    guard's estimate of ``initial``'s speed was carried across a change of
    conditions seen at another configuration, the first full window
    ``guard_measure_after`` iterations (the tuner's, 50) after that change
    runs ``initial`` to measure it (reason ``guard: ...``, no hold).

    Args:
        tuner: the policy (rank 0 only calls :meth:`decide`).
        space: candidate configurations.
        initial: the starting configuration.
        arch: ``"allreduce"`` or ``"ps"``.
        layer_bytes: gradient bytes per tensor, tensor 0 nearest the input.
        window_iters: iterations per decision window (paper: 10).
        warmup_iters: iterations ignored at the start and after every
            reconfiguration (plan rebuild, cold caches).
        link_factor: link bytes per payload byte (ring all-reduce: 2(n-1)/n).
        check_iters: iterations between two checks; must divide
            ``window_iters`` (default: half a window when ``window_iters`` is
            even, else a whole one).
        regime_change: relative speed change between two checks under one
            configuration that counts as changed conditions (0.15); ``None``
            turns the early reaction off (windows are then only ever full).
        world_size: processes of the job, when the engine knows it. With
            ``world_size=1`` nothing is communicated, so nothing is tuned:
            :meth:`decide` records each window's speed in :attr:`history` and
            never asks the tuner (no decision, no adaptation, no log line).
            ``None`` (default): tune whatever the number of windows.
        harm_budget: allowed slowdown against ``initial`` over a span (0.03);
            ``None`` (or a tuner with ``guarded = False``) turns the guard off.
        harm_span: iterations of the guard's sliding span (50).

    Raises:
        ValueError: ``window_iters``, ``warmup_iters``, ``check_iters``,
            ``regime_change``, ``world_size``, ``harm_budget`` or
            ``harm_span`` out of range, or the tuner's ``rate_rise``,
            ``step_change``, ``noise_z`` or ``confirm`` out of range.
    """

    tuner: Tuner
    space: SearchSpace
    initial: Config
    arch: str
    layer_bytes: Sequence[int]
    window_iters: int = 10
    warmup_iters: int = 2
    link_factor: float = 1.0
    check_iters: int | None = None
    regime_change: float | None = 0.15
    world_size: int | None = None
    harm_budget: float | None = 0.03
    harm_span: int = 50
    history: list[dict[str, Any]] = field(default_factory=list)
    _skip_until: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        check_int("window_iters", self.window_iters)
        check_int("warmup_iters", self.warmup_iters, minimum=0)
        if self.check_iters is None:
            self.check_iters = self.window_iters // 2 if self.window_iters % 2 == 0 else self.window_iters
        check_int("check_iters", self.check_iters)
        if self.window_iters % self.check_iters:
            raise ValueError(f"check_iters must divide window_iters={self.window_iters}, but got check_iters={self.check_iters}.")
        rc = self.regime_change
        if rc is not None and (isinstance(rc, bool) or not isinstance(rc, (int, float)) or not math.isfinite(rc) or not 0 < rc < 10):
            raise ValueError(f"regime_change must be a number in (0, 10) or None, but got regime_change={rc!r}.")
        if self.world_size is not None:
            check_int("world_size", self.world_size)
        self.current = self.tuner.start(self.space, self.initial)
        self._skip_until = self.warmup_iters
        #: windows handed to the tuner so far (a check that completes one increments it)
        self.n_windows = 0
        self._pending: list[Sequence[WindowStats]] = []  # checks of the window being filled
        self.detector = RegimeDetector(rc, rate_rise=getattr(self.tuner, "rate_rise", None),
                                       step_change=getattr(self.tuner, "step_change", None),
                                       noise_z=getattr(self.tuner, "noise_z", None),
                                       confirm=getattr(self.tuner, "confirm", 2.0),
                                       reference_memory=getattr(self.tuner, "reference_memory", REFERENCE_MEMORY)
                                       ) if rc is not None else None
        check_int("harm_span", self.harm_span)
        self.guard = None if self.harm_budget is None else getattr(self.tuner, "guard_type", HarmGuard)(
            self.current, self.harm_budget, self.harm_span, getattr(self.tuner, "guard_measure_after", 50),
            getattr(self.tuner, "guard_reference_iters", None))
        if not getattr(self.tuner, "guarded", True):
            self.guard = None

    @property
    def tuning(self) -> bool:
        """Whether windows reach the tuner (``False`` in a single process: nothing to tune)."""
        return self.world_size != 1

    def counts(self, iteration: int) -> bool:
        """Whether statistics of ``iteration`` belong in a window (not warm-up)."""
        return iteration >= self._skip_until

    def check_due(self, n_iters: int) -> bool:
        """Whether ``n_iters`` counted iterations since the last check make the next one.

        The same answer on every rank (it depends on the count only), so every
        rank joins the check's collective at the same iteration.
        """
        assert self.check_iters is not None
        return n_iters >= self.check_iters

    def decide(self, iteration: int, windows: Sequence[WindowStats], iter_times: Sequence[float] = ()) -> Decision | None:
        """Rank 0: a check at ``iteration`` with every rank's statistics since the last one.

        ``iter_times``: rank 0's iteration times in the check, in order (its
        own :attr:`WindowStats.iter_times`; gathered windows do not carry
        them), for the detector's ``step`` rule; ``()``: not read.

        Returns the decision (or ``None``: keep the configuration, or the
        window is not full yet); never raises on bad statistics: a check it
        cannot use keeps the current config and warns.
        """
        try:
            if any(w.n_iters == 0 for w in windows):
                raise ValueError("a window with zero iterations")
            features = RuntimeFeatures.from_windows(self.arch, self.layer_bytes, windows, self.link_factor)
            speed = float(np.sum(features.speed))
            if not np.isfinite(speed) or speed <= 0:
                raise ValueError(f"observed speed {speed}")
        except ValueError as exc:
            warnings.warn(f"autobyte: unusable statistics at iteration {iteration} ({exc}); keeping {self.current}.", stacklevel=2)
            return None
        rate = min(w.bandwidth_Bps for w in windows)  # the slowest rank's achieved link rate (0: no message)
        told = self.detector is not None and self.detector.settling  # at the mixed check before this one
        changed = self.detector.observe(self.current, speed, rate, within_step(iter_times)) if self.detector is not None else False
        guard = self.guard if self.tuning else None
        threshold = None if self.detector is None else math.expm1(self.detector.speed_threshold())
        if self.detector is not None and self.detector.settling and self.tuning:
            # conditions changed inside this check: it belongs to neither regime (the guard,
            # the window and the tuner's measurements start again from the next check, wholly in the new one)
            self._pending = []
            # the tuner hears of it now, to act on what it knows of the conditions, but keeps nothing of this speed
            obs = Observation(iteration, self.current, speed, features, regime_changed=True, mixed=True,
                              harm_allowance=None if guard is None else guard.allowance(),
                              window_share=windows[0].n_iters / self.window_iters, change_threshold=threshold,
                              link_busy=max(w.busy_share for w in windows))
            self.n_windows += 1
            return self._record(iteration, speed, self._ask(obs, "observe"), windows[0].n_iters,
                                {"regime_changed": True, "regime_rule": self.detector.rule, "mixed": True})
        # a change the tuner hears of with this check (not already at the mixed check before it)
        new_regime = changed and not told
        if changed:
            self._pending = []  # iterations of the previous regime
        why = None
        # a change (of speed, or a step) the detector waits to see confirmed: the window goes on for one more check
        suspect = self.detector is not None and self.detector.suspect is not None
        if guard is not None:
            # nor does the guard count it yet (a slowdown of the conditions is no cost of the configuration)
            guard.record(iteration, self.current, speed, windows[0].n_iters, changed, unjudged=suspect)
            why = guard.trip(iteration, self.current)
        self._pending.append(list(windows))
        if why is None and not new_regime and (suspect or sum(p[0].n_iters for p in self._pending) < self.window_iters):
            if not self.tuning or suspect:
                return None
            # a window in progress: the tuner may end it here (a trial that already measures badly)
            obs = Observation(iteration, self.current, speed, features,
                              harm_allowance=None if guard is None else guard.allowance(),
                              window_share=windows[0].n_iters / self.window_iters, change_threshold=threshold,
                              link_busy=max(w.busy_share for w in windows))
            decision = self._ask(obs, "check")
            if decision is None:
                return None
            self._pending = []
            self.n_windows += 1
            return self._record(iteration, speed, decision, windows[0].n_iters, {"check": True})
        if why is None and guard is not None:
            why = guard.measure(iteration, self.current)  # a window of the start, where its speed was carried
        checks, self._pending = self._pending, []
        # which rule of the detector saw the change (the speed of a configuration measured again, or the link rate)
        extra: dict[str, Any] = {"regime_changed": True, "regime_rule": self.detector.rule} if new_regime and self.detector is not None else {}
        try:
            if len({len(p) for p in checks}) != 1:
                raise ValueError("the number of ranks changed inside the window")
            merged = [WindowStats.merge(list(rank)) for rank in zip(*checks)]
            if len(checks) > 1:
                features = RuntimeFeatures.from_windows(self.arch, self.layer_bytes, merged, self.link_factor)
                speed = float(np.sum(features.speed))
        except ValueError as exc:
            warnings.warn(f"autobyte: unusable statistics at iteration {iteration} ({exc}); keeping {self.current}.", stacklevel=2)
            return None if why is None else self._record(iteration, speed, None, windows[0].n_iters, extra, why)
        n_iters = merged[0].n_iters
        obs = Observation(iteration, self.current, speed, features, regime_changed=new_regime,
                          harm_allowance=None if guard is None else guard.allowance(),
                          window_share=min(1.0, n_iters / self.window_iters), change_threshold=threshold,
                          link_busy=max(w.busy_share for w in merged))
        self.n_windows += 1
        # one process communicates nothing: statistics only, the tuner is never asked
        decision = self._ask(obs, "observe") if self.tuning else None
        return self._record(iteration, speed, decision, n_iters, extra, why)

    def _record(self, iteration: int, speed: float, decision: Decision | None, n_iters: int,
                extra: dict[str, Any], trip: str | None = None) -> Decision | None:
        """The history entry of a window the tuner was asked about (a full one, or one ended at a check).

        ``trip``: the guard's reason to send the run back to ``initial`` at
        this check; the tuner's own decision is then held, as during any hold.
        """
        entry: dict[str, Any] = {"iteration": iteration, "config": self.current.to_dict(), "speed": speed,
                                 "iterations": n_iters, **extra}
        guard = self.guard if self.tuning else None
        if guard is not None and decision is not None and decision.config != guard.initial and guard.holding(iteration):
            entry["held"] = f"guard holds {guard.initial}: {decision.config} not applied ({decision.reason})"
            decision = None
        if guard is not None and trip is not None:
            decision = Decision(guard.initial, trip, guard.reference)
        if decision is not None and decision.config != self.current:
            entry.update(new_config=decision.config.to_dict(), reason=decision.reason, predicted_speed=decision.predicted_speed)
        else:
            decision = None
        self.history.append(entry)
        return decision

    def _ask(self, obs: Observation, method: str) -> Decision | None:
        """The tuner's ``observe`` or ``check``; a tuner that raises keeps the configuration (warned), never stops training."""
        try:
            return getattr(self.tuner, method)(obs)
        except Exception as exc:  # a tuner's bug must not take a week-long job down
            where = " (check of a window in progress)" if method == "check" else ""
            warnings.warn(f"autobyte: tuner {getattr(self.tuner, 'name', type(self.tuner).__name__)!r} failed at "
                          f"iteration {obs.iteration}{where} ({type(exc).__name__}: {exc}); keeping {self.current}.", stacklevel=3)
            return None

    def applied(self, iteration: int, config: Config) -> None:
        """Every rank: ``config`` is in force from ``iteration`` on."""
        if config != self.current:
            self._skip_until = iteration + self.warmup_iters
            self._pending = []
        if self.guard is not None and not self.history:
            self.guard.initial = config  # the configuration agreed at start is the one to compare with
        self.current = config

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {"current": self.current.to_dict(), "history": list(self.history), "tuner": self.tuner.state_dict()}
        if self.detector is not None:
            state["detector"] = self.detector.state_dict()
        if self.guard is not None:
            state["guard"] = self.guard.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "current" in state:
            self.current = Config(**state["current"])
        self.history = list(state.get("history", []))
        self.tuner.load_state_dict(state.get("tuner", {}))
        if self.detector is not None:
            self.detector.load_state_dict(state.get("detector", {}))
        if self.guard is not None:
            self.guard.load_state_dict(state.get("guard", {}))
