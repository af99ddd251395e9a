"""When conditions changed, and what the tuned run cost: the two rules every tuner runs under.

* :class:`RegimeDetector` is the one rule for "conditions changed" (a link
  slowed down, another job took the GPU): a configuration measured again, in
  the same regime, runs at a speed more than ``threshold`` away from its last
  measurement. It compares a configuration with itself only, so a move to a
  slower configuration is never taken for a change of conditions, and a
  change that happens while the configuration changes is still seen the next
  time a configuration already measured runs again.
* :class:`HarmGuard` is do-no-harm: over any ``span`` iterations, the tuned
  run must not be more than ``budget`` slower than it would have been at its
  starting configuration. The :class:`~autobyte.core.tuning.Controller` runs
  it over every tuner's decisions and tells tuners how much slowdown is still
  allowed (:attr:`~autobyte.core.tuning.Observation.harm_allowance`), so a
  tuner can plan its exploration inside it.

Both keep plain-typed state (``state_dict``).
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any, Sequence

from ._checks import check_fraction, check_int
from .space import Config


def _cfg(c: Config) -> list[Any]:
    """A configuration in a state row: ``[partition, credit]``, then its wire precision where it is not fp32."""
    return [c.partition_bytes, c.credit_bytes] + ([] if c.wire == "fp32" else [c.wire])


def _row(row: Sequence[Any]) -> tuple[Config, list[float]]:
    """Inverse of ``_cfg(config) + values``: the configuration and the values after it."""
    wired = len(row) > 2 and isinstance(row[2], str)
    return Config(int(row[0]), int(row[1]), row[2] if wired else "fp32"), [float(v) for v in row[3 if wired else 2:]]


def _one(row: Sequence[Any]) -> tuple[Config, float]:
    """A state row of one configuration and one value."""
    config, values = _row(row)
    return config, values[0]


def within_step(times: Sequence[float], min_side: int = 2) -> float:
    """The largest step of iteration time inside one window of one rank, in log units.

    Over every split of ``times`` (iteration times in order) with at least
    ``min_side`` iterations on each side, ``log(mean after / mean before)``
    where it is largest in magnitude: positive when iterations became slower.
    ``0.0`` with fewer than ``2 * min_side`` iterations or a non-positive
    time. A window whose conditions changed inside shows the change here
    whatever configuration ran; one iteration's hiccup is averaged with at
    least one more on its side.
    """
    t = [float(x) for x in times]
    if len(t) < 2 * min_side or not all(math.isfinite(x) and x > 0 for x in t):
        return 0.0
    total, best, head = sum(t), 0.0, 0.0
    for k in range(1, len(t)):
        head += t[k - 1]
        if k < min_side or len(t) - k < min_side:
            continue
        step = math.log(((total - head) / (len(t) - k)) / (head / k))
        if abs(step) > abs(best):
            best = step
    return best


#: pairs a job's scatter is read from before :class:`RegimeDetector`'s ``noise_z`` raises its threshold
PAIR_MIN = 6
#: the most recent pairs the scatter is read from (older ones forgotten: a host's noise can change)
PAIR_MEMORY = 32
#: the highest threshold ``noise_z`` raises the speed rule's to (relative speed change): a change of conditions
#: that moves speed by more is seen on any host
NOISE_CAP = 0.5
#: the measurements of one configuration in one regime whose mean (in log units) its next is compared with
#: (:class:`RegimeDetector`'s ``reference_memory``)
REFERENCE_MEMORY = 2


def pair_scatter(gaps: Sequence[float]) -> float:
    """The scatter of a log speed ratio between two measurements of one configuration, from past ones' ``gaps``.

    ``gaps`` are ``|log(speed / speed before)|``; the result is their median
    times 1.4826, the standard deviation of a normal spread with that median
    absolute value. The median reads a change of conditions among the pairs
    as the outlier it is. ``0.0`` for no gaps.
    """
    g = sorted(abs(float(x)) for x in gaps)
    if not g:
        return 0.0
    mid = len(g) // 2
    return 1.4826 * (g[mid] if len(g) % 2 else 0.5 * (g[mid - 1] + g[mid]))


class RegimeDetector:
    """Conditions changed when a configuration's speed moved by more than ``threshold`` from its last measurements.

    A configuration's measurement is compared with the mean (in log units) of
    its last ``reference_memory`` measurements in the regime, not with the
    last alone: a change inside a check moves that check part of the way, and
    the next the rest, so against the last alone each step can stay under the
    threshold and the change go unseen (a tuned run on the CPU testbed whose
    link halved: 5-iteration checks of one configuration at 432, 347, 251
    and 217 samples/s, each step under its threshold of 0.41 in log units,
    ``noise_z`` on that run's scatter; the change went unseen until another
    configuration ran). Replayed on the `realistic` suites' static runs
    (``benchmarks/detector_replay.py``, 60 runs, 156 checks across a change,
    9,384 clean), the mean of the last 2 read 77 changes at checks across
    one against 72 with the last alone, and 79 false changes against 61; the
    mean of 4, 74 and 95.

    Only a configuration measured again is compared, with itself: a
    configuration new to the regime says nothing about the conditions (a
    predictor can be off by 3x on an unseen model). A change that coincides
    with a move is seen the next time a configuration already measured runs
    again (a rollback, or a tuner's deliberate re-measurement).

    The measurement that shows a change is, most of the time, a mix of both
    regimes: conditions changed somewhere inside the iterations it averages.
    It is the new regime's first measurement, and the reference for the next
    comparison too (a mixed one then reads as a second change when the next
    clean one differs from it by the threshold), unless the step rule below
    knows it mixed both.

    With ``rate_rise``, a second signal that does not need the configuration
    measured before: the link rate a window achieved (payload bytes over the
    time messages were in flight) is at most what the link gives, so a
    window that achieves more than ``1 + rate_rise`` times every rate
    achieved in this regime by configurations of partitions at least as
    large (small partitions achieve less of the link) shows a faster link,
    whatever configuration runs. A slower link cannot be told this way (a
    configuration of small partitions achieves less of any link).

    With ``step_change``, a third signal read inside one measurement: the
    iteration times of the check (:func:`within_step`) step by more than
    ``step_change`` between its first and its last iterations (each side two
    or more). Conditions changed inside that measurement, whatever
    configuration ran (a trial new to the regime too), and the measurement
    is known to mix both regimes: the detector keeps nothing from it
    (:attr:`settling` is ``True`` until the next measurement), and the next
    measurement, wholly in the new conditions, is the new regime's first
    (:meth:`observe` returns ``True`` there). On the real full suite's runs
    cut into 5-iteration groups at every alignment, 0.4% of the groups that
    ran in one condition stepped by more than 50% and 64-68% of those across
    a change did (``benchmarks/step_rule_calibration.py``).

    With ``noise_z``, the speed rule's threshold follows the job's own
    noise: every pair of measurements of one configuration that showed no
    change (in any regime) leaves its gap ``|log(speed / before)|``; once
    :data:`PAIR_MIN` pairs are in, the threshold is ``noise_z`` times their
    scatter (:func:`pair_scatter` over the last :data:`PAIR_MEMORY`) where
    that exceeds ``threshold``, and :data:`NOISE_CAP` at most. The pairs
    that showed a change are left out (a real change is no noise), so the
    threshold grows only from gaps that stayed under it. A host
    whose checks of one configuration scatter by a few percent keeps
    ``threshold``; one whose checks scatter widely (2 ranks sharing one
    H100: 13 of 77 pairs of the default's checks more than 15% apart,
    nothing changed) stops reading its noise as changes
    (``benchmarks/speed_rule_calibration.py``).

    With ``confirm``, a speed change not ``confirm`` times beyond the
    threshold (in log units) is only a suspicion: :meth:`observe` returns
    ``False`` and sets :attr:`suspect`, and the next measurement of the same
    configuration decides. It confirms the change when it also lies beyond
    the threshold, on the same side, from the measurement before the
    suspicion (:meth:`observe` returns ``True`` there: that measurement is
    the new regime's first); otherwise both gaps were noise and join the
    pairs ``noise_z`` reads (a gap that stayed under the threshold alone
    would never raise it). A step inside a measurement of a configuration
    measured before in the regime is a suspicion too, on the step's side,
    unless the measurement's speed moved by more than ``confirm``
    thresholds: on the `realistic-heldout` suite's runs 1.5% of the
    5-iteration groups in one condition stepped by more than 50%, three for
    every group across a change (``benchmarks/step_rule_calibration.py``),
    and a job at 3000 Mbit/s with nothing changing read 5-6 steps as
    changes per 800 iterations. A step in a configuration new to the regime
    (a trial), with nothing to confirm it against, still counts at once. A
    measurement of another configuration drops the suspicion unjudged.
    Replayed on the 16 static runs of the ``realistic`` suite's second four
    (checks of 5 iterations, ``noise_z`` 3), the speed rule alone read 59
    false alarms in 2,456 pairs of checks in one condition and 36 of 36
    changes; with ``confirm`` 2, 8 false alarms and 33 of 36 changes, one
    check later (``benchmarks/speed_rule_calibration.py``); both rules, 71
    false changes and 21 of 36 without, 14 and 21 of 36 with
    (``benchmarks/detector_replay.py``).

    Args:
        threshold: relative speed change of one configuration that counts as a
            change of conditions (0.15: above what a window's noise does on a
            shared host, below what a link change does).
        rate_rise: relative rise of the achieved link rate that shows a
            faster link (see above); ``None`` (default): not read.
        step_change: relative step of iteration time inside one measurement
            that shows a change inside it (see above; 0.5); ``None``: not read.
        noise_z: the speed rule's threshold at least this many scatters of
            the job's pairs (see above); ``None`` (default): ``threshold`` only.
        confirm: a speed change within this many thresholds (log units), or a
            step in a configuration measured before, waits for the next
            measurement to confirm it (see above; 2.0); ``None``: every change
            counts at once.
        reference_memory: a configuration's last measurements in the regime
            whose mean its next is compared with (see above; 2; 1: the last
            alone).

    Raises:
        ValueError: ``threshold`` not in (0, 10),
            ``rate_rise`` not ``None`` nor in (0, 100), or ``step_change``
            not ``None`` nor in (0, 100), or ``noise_z`` not ``None`` nor in (0, 100),
            or ``confirm`` not ``None`` nor in [1, 100), or ``reference_memory``
            not a positive integer.
    """

    def __init__(self, threshold: float = 0.15, *, rate_rise: float | None = None,
                 step_change: float | None = 0.5, noise_z: float | None = None,
                 confirm: float | None = 2.0, reference_memory: int = REFERENCE_MEMORY) -> None:
        self.threshold = check_fraction("threshold", threshold, 10.0)
        self.rate_rise = check_fraction("rate_rise", rate_rise, 100.0, optional=True)
        self.step_change = check_fraction("step_change", step_change, 100.0, optional=True)
        self.noise_z = check_fraction("noise_z", noise_z, 100.0, optional=True)
        self.confirm = check_fraction("confirm", confirm, 100.0, optional=True, lowest=1.0)
        self.reference_memory = check_int("reference_memory", reference_memory)
        #: a change waiting for the next measurement of its configuration: ``(configuration, side, step)``, ``side``
        #: the speed change's ``log(speed / before)`` or minus a step's (with ``confirm``), ``step`` whether the step
        #: rule raised it; ``None``: none
        self.suspect: tuple[Config, float, bool] | None = None
        #: the last :data:`PAIR_MEMORY` gaps between two measurements of one configuration (with ``noise_z``)
        self.gaps: deque[float] = deque(maxlen=PAIR_MEMORY)
        #: each configuration's last ``reference_memory`` measured speeds in the current regime
        self.seen: dict[Config, list[float]] = {}
        #: highest link rate each configuration achieved in the current regime (with ``rate_rise``)
        self.rates: dict[Config, float] = {}
        #: a change was seen inside a measurement, which is dropped: the next one starts the new regime
        self.settling = False
        #: what showed the last change: ``"speed"`` (a configuration measured again ran ``threshold`` away),
        #: ``"rate"`` (the achieved link rate rose by ``rate_rise``), ``"step"`` (iteration times stepped by
        #: ``step_change`` inside the measurement); ``None`` before any
        self.rule: str | None = None

    def _rate_rose(self, config: Config, rate: float | None) -> bool:
        if self.rate_rise is None or rate is None:
            return False
        seen = [r for c, r in self.rates.items() if c.partition_bytes >= config.partition_bytes]
        return bool(seen) and rate > max(seen) * (1.0 + self.rate_rise)

    def observe(self, config: Config, speed: float, rate: float | None = None, step: float = 0.0) -> bool:
        """Record ``config`` at ``speed`` (achieving link ``rate``, bytes/s; its iteration times stepping by
        ``step``, :func:`within_step`); ``True`` when a new regime starts with this measurement.

        That is the measurement that shows a change, unless it stepped
        inside: then it returns ``False`` and leaves :attr:`settling` set (the
        caller drops it: it mixes both regimes); the next one returns ``True``.
        """
        if self.rate_rise is None or rate is None or not rate > 0:
            rate = None  # not read, or no message sent: no rate
        if self.settling:
            self.settling = False
            self.suspect = None
            self.seen = {config: [speed]}
            self.rates = {} if rate is None else {config: rate}
            return True
        suspect, self.suspect = self.suspect, None
        if suspect is not None and suspect[0] != config:
            suspect = None  # another configuration: the suspicion cannot be judged
        before = self.reference(config)
        signed = math.log(speed / before) if before is not None else None
        gap = None if signed is None else abs(signed)
        thr = self.speed_threshold()
        by_speed = gap is not None and gap > thr
        by_step = self.step_change is not None and abs(step) > math.log1p(self.step_change)
        if suspect is not None and not by_step:
            if by_speed and signed is not None and signed * suspect[1] > 0:
                pass  # confirmed: the change counts here, this measurement is the new regime's first
            else:
                by_speed = False
                if self.noise_z is not None and not suspect[2]:
                    self.gaps.append(abs(suspect[1]))  # the suspicion was noise: its gap is the noise's
        elif self.confirm is not None and gap is not None and signed is not None and suspect is None \
                and (by_step or by_speed) and gap <= self.confirm * thr and not self._rate_rose(config, rate):
            # the next measurement of this configuration decides; a step's side is the step's (this measurement's
            # speed mixes both sides of it), a speed change's its own
            self.suspect = (config, -step if by_step else signed, by_step)
            return False  # the reference stays the measurement before
        by_rate = not by_speed and self._rate_rose(config, rate)
        changed = by_speed or by_rate or by_step
        if gap is not None and not changed and self.noise_z is not None:
            self.gaps.append(gap)  # a pair that showed a change says nothing about the noise
        if changed:
            # a step says the measurement is mixed; a step confirmed by the measurement after it is the step's too
            self.rule = "step" if by_step or (by_speed and suspect is not None and suspect[2]) else "speed" if by_speed else "rate"
            self.seen = {}
            self.rates = {}
            if by_step:
                self.settling = True
                return False
        kept = self.seen.setdefault(config, [])
        kept.append(speed)
        del kept[:-self.reference_memory]
        if rate is not None:
            self.rates[config] = max(rate, self.rates.get(config, 0.0))
        return changed

    def reference(self, config: Config) -> float | None:
        """What ``config``'s next measurement is compared with: the geometric mean of its last
        ``reference_memory`` in the current regime (``None``: not measured in it)."""
        kept = self.seen.get(config)
        if not kept:
            return None
        return math.exp(sum(math.log(v) for v in kept) / len(kept))

    def speed_threshold(self) -> float:
        """The speed rule's threshold now, in log units: ``log(1 + threshold)``, or ``noise_z`` scatters of the
        job's pairs where that is larger (see the class)."""
        thr = math.log1p(self.threshold)
        if self.noise_z is not None and len(self.gaps) >= PAIR_MIN:
            thr = max(thr, min(math.log1p(NOISE_CAP), self.noise_z * pair_scatter(self.gaps)))
        return thr

    def state_dict(self) -> dict[str, Any]:
        return {"threshold": self.threshold, "step_change": self.step_change,
                "noise_z": self.noise_z, "gaps": list(self.gaps), "settling": self.settling, "rule": self.rule,
                "suspect": None if self.suspect is None else _cfg(self.suspect[0]) + [self.suspect[1], float(self.suspect[2])],
                "seen": [_cfg(c) + list(v) for c, v in self.seen.items()],
                "rates": [_cfg(c) + [v] for c, v in self.rates.items()]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "seen" in state:
            self.seen = {c: v[-self.reference_memory:] for c, v in map(_row, state["seen"]) if v}
        elif "last" in state:  # saved before the reference was a mean: the last measurement alone
            self.seen = {c: [v] for c, v in map(_one, state["last"])}
        if "rates" in state:
            self.rates = dict(map(_one, state["rates"]))
        if "gaps" in state:
            self.gaps = deque((float(x) for x in state["gaps"]), maxlen=PAIR_MEMORY)
        self.settling = bool(state.get("settling", False))
        suspect = state.get("suspect")
        if suspect is None:
            self.suspect = None
        else:
            cfg, values = _row(suspect)
            self.suspect = (cfg, values[0], bool(values[1]) if len(values) > 1 else False)
        rule = state.get("rule", self.rule)
        self.rule = None if rule is None else str(rule)


class HarmGuard:
    """Do no harm: the tuned run stays within ``budget`` of its starting configuration over every ``span`` iterations.

    The guard keeps an estimate of the starting configuration's speed in the
    current conditions (``reference``): measured whenever the run is at that
    configuration, as the mean of its windows in these conditions (their last
    ``span`` iterations: one window scatters 3-5% on the CPU testbed, as much
    as the gain of a tuned configuration, and a reference from the start's
    last window alone tripped the guard 7 times in one 800-iteration run, 4
    on the configuration the tuner's race measured fastest over 19 windows);
    carried across a change of conditions seen at another configuration in
    proportion to that configuration's own speed change since its last
    measurement in the old conditions (the assumption: a change of link or
    compute slows both alike; the detector judges a change the same way, so a
    change seen when the run comes back to a configuration after a trial is
    carried too). Each window at
    another configuration costs ``n * (reference / speed - 1)`` iterations'
    worth of time (negative when faster: gains are banked). When the cost
    over the last ``span`` iterations exceeds ``budget * span``, the guard
    sends the run back to the starting configuration and keeps it there for
    ``span`` iterations. A change of conditions seen by the detector clears
    the span's costs and ends the hold; so does the starting configuration,
    measured again after the return, running no faster than the configuration
    left (the loss was the conditions', measured against a reference from
    before they changed).

    A carried reference is an assumption, and configurations do not change
    alike: from 2000 to 5000 Mbit/s an emulated DenseNet-169 ran 1.68x faster
    at <2 MiB, 12X> and 1.81x at the start, so a reference carried twice put
    the start 7-9% slower than it was and the guard let a run 6-11% slower than
    the start go on for 200 iterations. So once ``measure_after`` iterations
    have passed since a change with the reference still carried, the guard
    sends the run to the starting configuration for one window (:meth:`measure`;
    no hold): the reference is measured again in each set of conditions, at
    the cost of one window of the start there.

    Args:
        initial: the starting configuration.
        budget: allowed slowdown over a span (0.03).
        span: iterations of the sliding span (50).
        measure_after: iterations after a change seen at another configuration
            before the start runs a window to measure the reference (50: a
            regime shorter than the guard's span ends before the span does);
            ``None``: carried until the run comes back to the start.
        reference_iters: the start's last iterations in these conditions
            whose windows the reference averages (``None``: ``span``; 1: its
            last window alone).

    Raises:
        ValueError: ``budget`` not in (0, 1), ``span`` not a positive integer,
            ``measure_after`` not a non-negative integer or ``None``, or
            ``reference_iters`` not a positive integer or ``None``.
    """

    def __init__(self, initial: Config, budget: float = 0.03, span: int = 50, measure_after: int | None = 50,
                 reference_iters: int | None = None) -> None:
        self.initial = initial
        self.budget = check_fraction("budget", budget, 1.0)
        self.span = check_int("span", span)
        self.measure_after = None if measure_after is None else check_int("measure_after", measure_after, minimum=0)
        self.reference_iters = self.span if reference_iters is None else check_int("reference_iters", reference_iters)
        #: the iteration of the change across which the reference was carried (``None``: measured in these conditions)
        self.carried_since: int | None = None
        self.measures = 0
        #: the starting configuration's speed in the current conditions (measured, or carried across a change)
        self.reference: float | None = None
        self._windows: deque[tuple[int, int, float]] = deque()  # (last iteration, iterations, cost)
        self._hold_until = -1  # iteration until which the run stays at the starting configuration
        self._last: tuple[Config, float] | None = None  # config and speed of the last window
        self._speeds: dict[Config, float] = {}  # last speed of each configuration in the current conditions
        self._starts: deque[tuple[int, float]] = deque()  # (iterations, speed) of the start's windows in these conditions
        self._tripped: tuple[Config, float] | None = None  # the config and speed the last trip left
        self._unjudged: tuple[int, Config, float, int] | None = None  # a check the detector has yet to judge
        self.trips = 0

    def record(self, iteration: int, config: Config, speed: float, n_iters: int, changed: bool,
               unjudged: bool = False) -> None:
        """A window of ``n_iters`` iterations ending at ``iteration`` ran ``config`` at ``speed``.

        ``unjudged``: the detector waits for the next check to judge whether
        this one shows a change of conditions. The guard waits with it: the
        check is kept aside, and :meth:`trip` does not fire, until the next
        record; a confirmed change drops it (its slowdown was the
        conditions', and the reference is carried from the speed before it),
        noise counts it as any other window.
        """
        if unjudged:
            self._unjudged = (iteration, config, speed, n_iters)
            return
        held, self._unjudged = self._unjudged, None
        if held is not None and not changed and held[1] == config:
            self.record(*held, False)
        if changed:
            # costs so far were counted against the old conditions' reference, and a
            # hold may have come from a change taken for a bad move: start afresh
            self._windows.clear()
            self._hold_until = -1
            before = self._speeds.get(config)
            if config != self.initial and self.reference is not None:
                if before is not None:
                    self.reference *= speed / before
                self.carried_since = iteration  # from before the change, as carried or as it was
            self._speeds = {}
            self._starts.clear()
        if config == self.initial:
            if self._tripped is not None and self._tripped[1] >= speed * (1 - self.budget):
                # measured again, the configuration gone back to is no faster than what was left:
                # the loss was the conditions', not the tuner's (a change the detector could not
                # see, the reference being from before it). No hold, and the start's windows from
                # before the change are not averaged in.
                self._hold_until = -1
                self._starts.clear()
            self._tripped = None
            self._starts.append((n_iters, speed))
            total = sum(n for n, _ in self._starts)
            while total - self._starts[0][0] >= self.reference_iters:
                total -= self._starts.popleft()[0]
            self.reference = sum(n * v for n, v in self._starts) / max(1, total)
            self.carried_since = None
        cost = 0.0 if self.reference is None or config == self.initial else n_iters * (self.reference / speed - 1.0)
        self._windows.append((iteration, n_iters, cost))
        while self._windows and self._windows[0][0] <= iteration - self.span:
            self._windows.popleft()
        self._last = (config, speed)
        self._speeds[config] = speed

    def cost(self) -> float:
        """Iterations' worth of time lost to the tuner over the last ``span`` iterations (negative: gained)."""
        return sum(c for _, _, c in self._windows)

    def allowance(self) -> float:
        """Iterations' worth of slowdown still allowed over the current span."""
        return self.budget * self.span - self.cost()

    def holding(self, iteration: int) -> bool:
        """Whether the guard keeps the run at the starting configuration at ``iteration``."""
        return iteration < self._hold_until

    def trip(self, iteration: int, current: Config) -> str | None:
        """The reason to go back to the starting configuration now, or ``None``."""
        if current == self.initial or self._unjudged is not None or self.allowance() >= 0:
            return None
        lost = self.cost()
        self.trips += 1
        self._hold_until = iteration + self.span
        self._tripped = (current, self._last[1] if self._last is not None else 0.0)
        self._windows.clear()
        return (f"guard: {current} cost {lost:.1f} iterations' time over the last {self.span} against {self.initial} "
                f"(allowed {100 * self.budget:.0f}%): back to the starting configuration for {self.span} iterations")

    def measure(self, iteration: int, current: Config) -> str | None:
        """The reason to run the starting configuration for one window now to measure the reference, or ``None``."""
        since = self.carried_since
        if since is None or self.measure_after is None or current == self.initial or iteration - since < self.measure_after:
            return None
        self.measures += 1
        self.carried_since = None  # asked once per change: a window cut short, or a change inside it, does not ask again
        return (f"guard: {self.initial}'s speed in these conditions was carried across the change at iteration {since} "
                f"in proportion to {current}'s own; one window of {self.initial} measures it")

    def state_dict(self) -> dict[str, Any]:
        return {"reference": self.reference, "windows": [list(w) for w in self._windows], "hold_until": self._hold_until,
                "carried_since": self.carried_since, "measures": self.measures,
                "last": None if self._last is None else _cfg(self._last[0]) + [self._last[1]], "trips": self.trips,
                "speeds": [_cfg(c) + [v] for c, v in self._speeds.items()], "starts": [list(w) for w in self._starts],
                "tripped": None if self._tripped is None else _cfg(self._tripped[0]) + [self._tripped[1]],
                "unjudged": None if self._unjudged is None else _cfg(self._unjudged[1]) + [self._unjudged[2], self._unjudged[3],
                                                                                           self._unjudged[0]]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "reference" in state:
            self.reference = None if state["reference"] is None else float(state["reference"])
        if "windows" in state:
            self._windows = deque((int(i), int(n), float(c)) for i, n, c in state["windows"])
        self._hold_until = int(state.get("hold_until", self._hold_until))
        if "last" in state:
            last = state["last"]
            self._last = None if last is None else _one(last)
        self.trips = int(state.get("trips", self.trips))
        self.measures = int(state.get("measures", self.measures))
        if "carried_since" in state:
            self.carried_since = None if state["carried_since"] is None else int(state["carried_since"])
        if "speeds" in state:
            self._speeds = dict(map(_one, state["speeds"]))
        if "starts" in state:
            self._starts = deque((int(n), float(v)) for n, v in state["starts"])
        if "tripped" in state:
            t = state["tripped"]
            self._tripped = None if t is None else _one(t)
        if "unjudged" in state:
            u = state["unjudged"]
            if u is None:
                self._unjudged = None
            else:
                cfg, (speed, n, it) = _row(u)
                self._unjudged = (int(it), cfg, speed, int(n))
