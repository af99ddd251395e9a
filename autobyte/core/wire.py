"""The wire's precision chosen by measurement: ``wire="auto"``.

A user who wants exact fp32 updates except where the network makes them
expensive states one preference, :class:`AutoWire` ``min_gain`` (5%): run
fp32 unless 16 bits are *measured* at least that much faster in the current
conditions. :class:`WireTuner` holds it around any tuner of partition and
credit (the inner tuner):

* in every set of conditions (from the start, and after every change of
  conditions the controller reports: ``Observation.regime_changed``) it
  measures the configuration in force at both precisions, the precision in
  force first: one window each where that leaves no doubt (16 bits no
  faster than fp32, or faster by twice ``min_gain``), else ``windows``
  windows each;
* it keeps 16 bits where they measured ``>= 1 + min_gain`` times fp32's
  speed, fp32 otherwise; the decision line names the objective that moved it
  (speed, or exactness);
* where 16 bits run and keep the link busy enough that fp32, with twice the
  bytes, could not come within ``2 * min_gain`` of them
  (``Observation.link_busy``, :data:`FP32_RATE`: ``WireTuner._link_bound``),
  they stay without an fp32 trial: on a slow link that trial is the
  costliest iterations of a comparison;
* conditions met before are not compared again: where the precision in
  force measures as it did in a past comparison (at the same partition and
  credit) that chose it without doubt, it stays (``WireTuner._met_before``:
  on a link that returns to a rate, the other precision's trial after every
  change cost 4-5% of the link-bound iterations, docs/benchmarks.md 1.5).
  "As it did" is the controller's own notion of the same conditions: within
  its detector's threshold (``Observation.change_threshold``, 15% by
  default: a speed change it would not read as a change of conditions) of
  the median of the comparison's reading and the last
  :data:`STEADY_READINGS` readings (checks and full windows) the choice then
  ran at its partition and credit (the comparison's reading is one check,
  often the one that showed the change), in speed and in the link rate
  achieved (16 bits can hide two links' difference in speed, not in rate);
* nor is a slower link where 16 bits paid without doubt: where 16 bits, in
  force, achieve a link rate below (by more than that threshold) the one they
  achieved where a comparison measured them at least ``1 + 2 * min_gain``
  times fp32, and keep the link at least as busy as there, they stay (fp32's
  twice the bytes cost more on the slower link, compute no larger against it);
* a comparison moves at a check (half a window) where that check leaves no
  doubt (except at the job's first measurement, taken over a whole window:
  the first iterations run cold), and measures again where 16 bits measured a gain outside
  :data:`PLAUSIBLE` (the two measurements straddled a change of conditions);
* between comparisons the inner tuner moves partition and credit as it
  always does: it sees every configuration at ``"fp32"`` (its space and
  records are those of the precision-less problem). Each precision can have
  a tuner of its own (``low_inner``; ``schedule(..., wire="auto")`` builds
  one per precision from the tuner's name): each then keeps its own records
  and its own estimate of how long conditions last, is told of every change
  of conditions that happened while the other precision ran, and nothing
  else (a change of precision is the tuner's own act, not the end of a set
  of conditions: counted as one, a comparison's few windows read as
  conditions that last a few windows, and no trial paid for the rest of the
  job: docs/benchmarks.md 4.4). One tuner for both sees a change of the
  precision as a change of conditions, which for partition and credit it is
  (half the bytes on the link).

The controller, the do-no-harm guard and the window protocol see the
configurations with their precision (a bf16 configuration is another
configuration), so nothing else changes. ``core`` imports no framework: the
engines cast (``autobyte.integrations.torch``).
"""

from __future__ import annotations

import logging
import math
import statistics
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

from .space import WIRES, Config, SearchSpace
from .tuning import Decision, Observation, StaticTuner, Tuner

_log = logging.getLogger("autobyte.wire")

#: 16 bits' speed over fp32 that half the bytes and two casts can explain; a comparison outside it straddled a change
#: of conditions (measured here: 0.90x on loopback, 0.92x on a GPU at one message; 2.07x at 200 Mbit/s)
PLAUSIBLE = (0.7, 2.5)

#: readings (checks and full windows) at the precision chosen, after the comparison, that it keeps (the last ones) to
#: recognise its conditions by: the comparison's own reading is one check, often the one that showed the change (in
#: the demo, bf16 read 129-136 samples/s there against ~120 steady; its phases of 20 iterations leave one check, and no
#: full window, between a choice and the next change)
STEADY_READINGS = 8

#: the margin for fp32's messages (twice the bytes) achieving more of a link than 16 bits' did: where 16 bits kept it
#: busy 82-92% of the time (the CNN at 200-500 Mbit/s) fp32 achieved 1.01-1.05x their rate; where 51-56% (10000-40000
#: Mbit/s, the engine's sending the limit, not the link) up to 1.75x, where the rule that reads it cannot fire
#: (``benchmarks/wire_readings.py``, docs/benchmarks.md 1.5)
FP32_RATE = 1.5


class Reading(NamedTuple):
    """One reading a comparison keeps: its speed, the link rate it achieved and the share of its time the link was
    busy (``None``: not measured); the choice keeps its precision's rates and busy shares to recognise a slower link
    and conditions met before by."""

    speed: float
    rate: float | None
    busy: float | None


#: the 16-bit precisions a preference may name
LOW_WIRES = tuple(w for w in WIRES if w != "fp32")


@dataclass(frozen=True)
class AutoWire:
    """The preference behind ``wire="auto"``: fp32 unless 16 bits are measured ``min_gain`` faster.

    Args:
        low: the 16-bit precision to try, ``"bf16"`` (default: fp32's range,
            no overflow) or ``"fp16"``.
        min_gain: the measured gain of 16 bits over fp32 in the current
            conditions that is worth giving up exact fp32 updates (0.05: 5%).
        windows: windows measured at each precision before choosing where
            the first window of each leaves a doubt (2); one each where 16
            bits measured no faster than fp32 or faster by ``2 * min_gain``.

    Raises:
        TypeError, ValueError: a bad argument, named with its rule and value.
    """

    low: str = "bf16"
    min_gain: float = 0.05
    windows: int = 2

    def __post_init__(self) -> None:
        if not isinstance(self.low, str) or self.low not in LOW_WIRES:
            raise ValueError(f"low must be one of {LOW_WIRES}, but got low={self.low!r}.")
        g = self.min_gain
        if isinstance(g, bool) or not isinstance(g, (int, float)) or not math.isfinite(g) or not 0 <= g < 1:
            raise ValueError(f"min_gain must be a number in [0, 1) (0.05: 16 bits must run 5% faster), but got min_gain={g!r}.")
        w = self.windows
        if isinstance(w, bool) or not isinstance(w, int) or w < 1:
            raise ValueError(f"windows must be a positive integer, but got windows={w!r}.")


def check_wire_choice(wire: object) -> str | AutoWire:
    """A user's ``wire`` argument: a precision of :data:`~autobyte.core.space.WIRES`, ``"auto"`` or an :class:`AutoWire`.

    Returns the precision, or the :class:`AutoWire` preference (``"auto"``: the defaults).

    Raises:
        TypeError, ValueError: anything else, named with the rule and the value.
    """
    if isinstance(wire, AutoWire):
        return wire
    if wire == "auto":
        return AutoWire()
    if not isinstance(wire, str):
        raise TypeError(f"wire must be one of 'fp32', 'bf16', 'fp16', 'auto' or an AutoWire, but got wire={wire!r}.")
    if wire not in WIRES:
        raise ValueError(f"wire must be one of 'fp32', 'bf16', 'fp16', 'auto' or an AutoWire, but got wire={wire!r}.")
    return wire


def tuner_for(tuner: Tuner | str | None, wire: str | AutoWire) -> Tuner | None:
    """The tuner a job runs: ``tuner`` built by name, inside a :class:`WireTuner` where ``wire`` is an :class:`AutoWire`.

    A tuner named gets one of its kind per precision (each precision's
    records and estimate of how long conditions last its own); a tuner
    object serves both; one that already chooses the wire is returned as is.
    """
    from .tuners import make_tuner

    built = make_tuner(tuner) if isinstance(tuner, str) else tuner
    if not isinstance(wire, AutoWire) or (built is not None and built.chooses_wire):
        return built
    return WireTuner(built, wire, low_inner=make_tuner(tuner) if isinstance(tuner, str) else None)


def _fp32(config: Config) -> Config:
    return config if config.wire == "fp32" else replace(config, wire="fp32")


class WireTuner(Tuner):
    """An inner tuner of partition and credit, and the wire's precision chosen by measurement (module docstring).

    Args:
        inner: the tuner of partition and credit (default: none, they stay).
        preference: the :class:`AutoWire` preference (default: ``AutoWire()``).
        low_inner: the tuner of partition and credit while 16 bits run
            (default: ``inner`` itself, one tuner for both precisions); a
            fresh tuner of the same kind keeps each precision's records apart.

    Example:
        >>> WireTuner(make_tuner("autobyte"), AutoWire(min_gain=0.10))  # doctest: +SKIP
    """

    name = "wire"
    chooses_wire = True

    def __init__(self, inner: Tuner | None = None, preference: AutoWire | None = None, low_inner: Tuner | None = None) -> None:
        if inner is not None and not isinstance(inner, Tuner):
            raise TypeError(f"inner must be an autobyte Tuner or None, but got inner={inner!r}.")
        if preference is not None and not isinstance(preference, AutoWire):
            raise TypeError(f"preference must be an AutoWire or None, but got preference={preference!r}.")
        if low_inner is not None and (not isinstance(low_inner, Tuner) or low_inner is inner):
            raise TypeError(f"low_inner must be an autobyte Tuner other than inner, or None, but got low_inner={low_inner!r}.")
        self.inner = inner if inner is not None else StaticTuner()
        self.preference = preference if preference is not None else AutoWire()
        #: the tuner of partition and credit at each precision (the same object for both unless ``low_inner``)
        self.inners = {"fp32": self.inner, self.preference.low: low_inner if low_inner is not None else self.inner}
        self.name = f"{self.inner.name}+wire"
        # the controller reads these from its tuner: the inner tuner's
        self.guarded = self.inner.guarded
        self.rate_rise = self.inner.rate_rise
        self.step_change = self.inner.step_change
        self.noise_z = self.inner.noise_z
        #: readings per precision measured at :attr:`_at` in the current conditions (empty: none yet)
        self._readings: dict[str, list[Reading]] = {}
        #: partition and credit of the comparison under way (``None``: the one in force when it starts)
        self._at: Config | None = None
        #: the precision chosen in the current conditions (``None``: the comparison is under way)
        self.chosen: str | None = None
        #: changes of conditions the controller reported so far
        self._changes = 0
        #: per inner tuner (by the precision it serves; "fp32" when one serves both): the changes reported and the
        #: precision in force at its last observation (a change since, of either, reaches it as changed conditions)
        self._saw: dict[str, tuple[int, str]] = {}
        #: every choice made: iteration, precision, 16 bits' measured gain over fp32, the reason
        self.choices: list[dict[str, Any]] = []

    def start(self, space: SearchSpace, initial: Config) -> Config:
        super().start(space, initial)
        first = self.inners[self._key(initial.wire)].start(space, _fp32(initial))
        for wire, t in self.inners.items():
            if self._key(wire) != self._key(initial.wire):
                t.start(space, _fp32(initial))
        self._readings, self._at, self.chosen, self._changes = {}, None, None, 0
        self._saw = {self._key(initial.wire): (0, initial.wire)}
        return replace(first, wire=initial.wire)

    def _key(self, wire: str) -> str:
        """The inner tuner serving ``wire``, named by its precision ("fp32" for a tuner serving both, and for a
        precision the preference does not name, which a user may have set: fp32's tuner serves it)."""
        return wire if wire in self.inners and self.inners[wire] is not self.inner else "fp32"

    # ------------------------------------------------------------ the comparison
    def _without_doubt(self, gain: float) -> bool:
        """Whether 16 bits' measured ``gain`` over fp32 leaves no doubt: no faster, or faster by twice ``min_gain``
        (a window's noise on these hosts is a few percent: docs/benchmarks.md section 6.4)."""
        return gain <= 1 or gain >= 1 + 2 * self.preference.min_gain

    @staticmethod
    def _reading(obs: Observation) -> bool:
        """Whether ``obs`` is a measurement of the conditions it ran in: not a check that mixed two, at least half a
        window, a finite positive speed (what a comparison and the readings after it keep)."""
        return not obs.mixed and obs.window_share >= 0.5 and math.isfinite(obs.speed) and obs.speed > 0

    @staticmethod
    def _link_rate(obs: Observation) -> float | None:
        """The link rate ``obs`` achieved (the slowest rank's wire bytes over the time its messages were in flight);
        ``None`` where no message was measured."""
        rate = float(min(obs.features.bw_up_Bps))
        return rate if math.isfinite(rate) and rate > 0 else None

    @staticmethod
    def _busy(obs: Observation) -> float | None:
        """The share of ``obs``'s time the link was busy (``Observation.link_busy``); ``None`` where not measured."""
        busy = obs.link_busy
        return float(busy) if busy is not None and math.isfinite(busy) else None

    def _median(self, wire: str) -> float:
        """The median speed of the comparison's readings at ``wire``."""
        return statistics.median(r.speed for r in self._readings[wire])

    def _needed(self) -> int:
        """Windows each precision needs: one where the first of each leaves no doubt (:meth:`_without_doubt`),
        else ``windows``."""
        pref = self.preference
        if not all(self._readings.get(w) for w in ("fp32", pref.low)):
            return 1
        return 1 if self._without_doubt(self._median(pref.low) / self._median("fp32")) else pref.windows

    def _compare(self, obs: Observation) -> Decision | None:
        """Measure both precisions at the configuration in force; the decision once both have their windows."""
        pref, here = self.preference, obs.config.wire
        at = _fp32(obs.config)
        if self._at != at:  # the comparison runs at one partition and credit
            self._at, self._readings = at, {}
        rate, busy = self._link_rate(obs), self._busy(obs)
        if self._reading(obs):
            self._readings.setdefault(here, []).append(Reading(float(obs.speed), rate, busy))
        other = pref.low if here == "fp32" else "fp32"
        goal = "exactness" if other == "fp32" else "speed"  # what a trial of the other precision is for
        need = self._needed()
        if len(self._readings.get(here, [])) < need:
            return None
        if len(self._readings.get(other, [])) < need:
            measured = self._median(here)
            if not self._readings.get(other) and (
                    self._link_bound(obs, at) or
                    self._met_before(here, measured, at, obs.iteration, obs.change_threshold, rate, busy)):
                return None  # 16 bits pay without a trial, or conditions met before: the precision in force stays
            return Decision(replace(at, wire=other), f"wire trial, for {goal}: {other} against {here} (measured {measured:.1f} "
                                                      "samples/s in these conditions)")
        fast, slow = self._median(pref.low), self._median("fp32")
        gain = fast / slow
        if not PLAUSIBLE[0] <= gain <= PLAUSIBLE[1]:
            # half the bytes cannot make that difference: conditions changed between the two measurements without
            # the controller seeing it; the measurement just taken is of the conditions now: compare again from it
            self._readings = {here: [self._readings[here][-1]]}
            return Decision(replace(at, wire=other), f"wire trial, for {goal}: {other} against {here} again ({pref.low} "
                                                      f"measured {gain:.2f}x fp32: conditions changed between the two)")
        counts = f"{len(self._readings[pref.low])} and {len(self._readings['fp32'])} windows"
        if gain >= 1 + pref.min_gain:
            self.chosen = pref.low
            why = (f"wire {pref.low}, for speed: measured {gain:.3f}x fp32 in these conditions ({fast:.1f} against "
                   f"{slow:.1f} samples/s, {counts}), at least 1 + min_gain = {1 + pref.min_gain:g}")
        else:
            self.chosen = "fp32"
            why = (f"wire fp32, for exactness: {pref.low} measured {gain:.3f}x fp32 in these conditions ({fast:.1f} against "
                   f"{slow:.1f} samples/s, {counts}), below 1 + min_gain = {1 + pref.min_gain:g}")
        # the rates and busy shares of the comparison's readings at the precision chosen, whichever reading decided
        mine = self._readings[self.chosen][-STEADY_READINGS - 1:]
        self.choices.append({"iteration": obs.iteration, "wire": self.chosen, "gain": gain, "reason": why,
                             "speeds": {pref.low: fast, "fp32": slow}, "at": at.to_dict(),
                             "rates": [r.rate for r in mine if r.rate is not None], "busy": [r.busy for r in mine if r.busy is not None],
                             "link_busy": {here: obs.link_busy}})  # as the link-bound rule's choices keep it: its calibration
        if self.chosen == here:
            return None  # nothing moves; observe() logs the choice
        return Decision(replace(at, wire=self.chosen), why, fast if self.chosen == pref.low else slow)

    def _link_bound(self, obs: Observation, at: Config) -> bool:
        """Whether 16 bits, in force, keep the link so busy that fp32 could not come within ``2 * min_gain`` of them;
        if so they are chosen, and logged.

        fp32 puts twice the bytes on the link. A reading at 16 bits whose link was busy a share ``u`` of its time
        (``Observation.link_busy``) bounds fp32's time per iteration from below by ``2 * u / FP32_RATE`` times 16
        bits' (:data:`FP32_RATE`: a margin for fp32's larger messages achieving more of the link). Where that
        bound is at least ``1 + 2 * min_gain`` the comparison could only choose 16 bits, without doubt, and its fp32
        trial would run the slow precision where it costs most (at 300-600 Mbit/s a comparison ran fp32 at 1.4-1.6x
        16 bits' time for ~7 iterations: docs/benchmarks.md 1.5). Only from a reading (:meth:`_reading`); never from
        fp32 (half the bytes bound 16 bits' gain from above, not below: their trial is the comparison).
        """
        pref, busy = self.preference, self._busy(obs)
        if obs.config.wire != pref.low or busy is None or not self._reading(obs):
            return False
        bound = 2.0 * busy / FP32_RATE
        if bound < 1 + 2 * pref.min_gain:
            return False
        self.chosen = pref.low
        why = (f"wire {pref.low}, for speed: the link busy {busy:.0%} of {pref.low}'s time: fp32's twice the bytes need at "
               f"least {bound:.2f}x it (at up to {FP32_RATE:g}x {pref.low}'s rate), at least 1 + 2 * min_gain = "
               f"{1 + 2 * pref.min_gain:g}; fp32 not measured")
        self.choices.append({"iteration": obs.iteration, "wire": pref.low, "bound": bound, "link_busy": {pref.low: busy}, "reason": why,
                             "speeds": {pref.low: float(obs.speed)}, "at": at.to_dict()})
        return True

    def _met_before(self, here: str, measured: float, at: Config, iteration: int, threshold: float | None,
                    rate: float | None = None, busy: float | None = None) -> bool:
        """Whether these conditions were met before, or 16 bits run on a slower link than where they were chosen: if
        so ``here`` is chosen again, and logged.

        Met before: ``here`` chosen, without doubt, by a comparison at ``at`` in which ``here`` measured within
        ``threshold`` of ``measured``. ``threshold`` is the controller's: the relative speed change it reads as a
        change of conditions (``Observation.change_threshold``); a smaller one is, to the controller, the same
        conditions. ``None`` (a controller that tells no conditions apart): nothing is met before. Not ``min_gain``:
        two checks of one configuration on the slow link of docs/benchmarks.md 1.5 differ by a few percent (its
        iterations by ~10%): at ``min_gain`` (5%) a return to that link read bf16 at 97.3 against 102.7 samples/s,
        5.4% apart, and fp32 was tried again at 1.8x bf16's time.

        Only a choice of the precision in force is taken (taking another would move the run, and the move is a
        trial: the comparison runs as usual). Only a choice without doubt (16 bits at least ``1 + 2 * min_gain``
        times fp32, or no faster) and only a measured comparison, never a recalled one, so recalls do not drift.
        The precision in force measuring as it did is the signal: for 16 bits kept at a gain without doubt to be
        against the preference now, fp32 must have come within ``min_gain`` of them while they run within
        ``threshold`` of before: compute about ``gain`` times slower and the link faster at once (1.8x on the 200
        Mbit/s trace).

        The link rate ``rate`` achieved now must also be within ``threshold`` of the median of the rates the
        choice ran at (its comparison's readings of the precision chosen, whichever reading decided it, and the
        readings after it),
        where both are known: 16 bits can hide a link's difference in speed, not in rate (on the held-out
        ``heldout-mlp`` bf16 read 3286-3382 samples/s at 12000 and 5000 Mbit/s, within 15% of its 2945-2992 at
        700 Mbit/s, and kept bf16 where fp32 was the preference; the CNN's bf16 achieved 22, 56, 96 and 195-213
        MB/s at 200, 500, 1000 and 3000-40000 Mbit/s: docs/benchmarks.md 1.5).

        A slower link: 16 bits, chosen without doubt (measured at least ``1 + 2 * min_gain`` times fp32), now
        achieve a link rate below the median of those they achieved there by more than ``threshold``, and keep the
        link at least as busy (``busy``, against the median of the busy shares there, :attr:`Observation.link_busy`).
        A slower link, compute no larger against it: fp32's twice the bytes cost more than where they already cost
        ``2 * min_gain`` (on ``heldout-transformer-15000`` bf16 measured 1.12-1.16x fp32 at 2500 Mbit/s, 1.10-1.45x
        at 800, 1.28-1.33x at 1200, 1.41-1.61x at 550 and 1.58-1.77x at 320; each new rate's fp32 trial cost ~7
        iterations at up to 1.6x bf16's time: docs/benchmarks.md 1.5). Not the other way (fp32 on a faster link):
        where compute is the limit, the rates achieved are the engine's, not the link's.
        """
        pref, where = self.preference, at.to_dict()
        if threshold is None:
            return False
        for past in reversed(self.choices):
            speeds = past.get("speeds")
            if past.get("wire") != here or set(speeds or ()) != {pref.low, "fp32"} or past.get("at") != where:
                continue
            gain = speeds[pref.low] / speeds["fp32"]
            if not self._without_doubt(gain):
                continue
            steady, rates, shares = past.get("steady", []), past.get("rates", []), past.get("busy", [])
            then = statistics.median([speeds[here], *steady])
            then_rate = statistics.median(rates) if rates else 0.0
            drift = math.log(rate / then_rate) if rate is not None and then_rate > 0 else None  # the link rate's, now over then
            bound = math.log1p(threshold)
            same = (drift is None or abs(drift) <= bound) and abs(math.log(measured / then)) <= bound
            then_busy = statistics.median(shares) if shares else None
            slower = (here == pref.low and drift is not None and -drift > bound and busy is not None and then_busy is not None
                      and busy >= then_busy)
            if not (same or slower):
                continue
            self.chosen = here
            after = f" and {len(steady)} reading{'s' if len(steady) > 1 else ''} after it" if steady else ""
            link = "" if drift is None or rate is None else f", the link at {rate / 1e6:.1f} MB/s, {then_rate / 1e6:.1f} then"
            if same:
                why = (f"wire {here}, for {'speed' if here == pref.low else 'exactness'}: conditions met before ({here} "
                       f"measured {measured:.1f} samples/s, {then:.1f} at iteration {past['iteration']}{after}{link}, within "
                       f"the controller's {threshold:.0%}, where {pref.low} measured {gain:.3f}x fp32); "
                       f"{'fp32' if here == pref.low else pref.low} not measured again")
            else:
                why = (f"wire {here}, for speed: a slower link than where {here} measured {gain:.3f}x fp32 (iteration "
                       f"{past['iteration']}{after}{link}, below by more than the controller's {threshold:.0%}; the link busy "
                       f"{busy:.0%} of {here}'s time, {then_busy:.0%} then): fp32's twice the bytes cost "
                       "more here; fp32 not measured")
            self.choices.append({"iteration": iteration, "wire": here, "gain": gain, "reason": why,
                                 "recalled": past["iteration"], **({} if same else {"slower_link": True})})
            return True
        return False

    def _steady(self, obs: Observation) -> None:
        """A reading (a check, or a full window) at the precision chosen by the last comparison, at its partition and
        credit, kept with it (its last :data:`STEADY_READINGS`), with the link rate it achieved and the share of its
        time the link was busy: with the comparison's readings, what :meth:`_met_before` recognises these conditions,
        and a slower link, by. A window holds its first check's iterations again: the median weighs both."""
        last = self.choices[-1] if self.choices else None
        if (last is None or "speeds" not in last or obs.config.wire != last["wire"] or _fp32(obs.config).to_dict() != last["at"]
                or not self._reading(obs)):
            return
        last["steady"] = [*last.get("steady", []), float(obs.speed)][-STEADY_READINGS:]
        for key, value in (("rates", self._link_rate(obs)), ("busy", self._busy(obs))):
            if value is not None and key in last:
                last[key] = [*last[key], value][-STEADY_READINGS - 1:]

    # ------------------------------------------------------------ the inner tuner
    def _inward(self, obs: Observation) -> tuple[Tuner, Observation]:
        """The inner tuner of ``obs``'s precision, and ``obs`` as it sees it: at fp32, changed conditions where
        conditions changed since its last observation, or the precision (one tuner serving both)."""
        key = self._key(obs.config.wire)
        seen = self._saw.get(key)
        changed = obs.regime_changed or (seen is not None and seen != (self._changes, obs.config.wire))
        self._saw[key] = (self._changes, obs.config.wire)
        return self.inners[key], replace(obs, config=_fp32(obs.config), regime_changed=changed)

    def _current(self, wire: str) -> bool:
        """Whether the inner tuner of ``wire`` observed since the last change of conditions, at ``wire``."""
        return self._saw.get(self._key(wire)) == (self._changes, wire)

    def _outward(self, d: Decision | None, wire: str) -> Decision | None:
        if d is None:
            return None
        return Decision(replace(d.config, wire=wire), f"partition and credit, for speed: {d.reason}", d.predicted_speed)

    def observe(self, obs: Observation) -> Decision | None:
        if obs.regime_changed:  # new conditions: what either precision measured belongs to the old ones
            self._readings, self._at, self.chosen = {}, None, None
            self._changes += 1
        if self.chosen is not None and obs.config.wire != self.chosen:
            # the configuration in force is not the one chosen (the do-no-harm guard sent the run back): measure again
            self._readings, self._at, self.chosen = {}, None, None
        tuner, inner = self._inward(obs)
        if self.chosen is None:
            # the inner tuner keeps its records; its decision waits for the comparison (as under a guard's hold)
            tuner.observe(inner)
            n = len(self.choices)
            d = self._compare(obs)
            if d is None and len(self.choices) > n:
                _log.info("autobyte: iteration %d: %s", obs.iteration, self.choices[-1]["reason"])
            return d
        self._steady(obs)
        return self._outward(tuner.observe(inner), self.chosen)

    def check(self, obs: Observation) -> Decision | None:
        if self.chosen is None:
            # a comparison moves at a check where the check leaves no doubt (a trial, or the other precision
            # chosen); otherwise nothing of the check is kept: the full window brings the same iterations again.
            # Not the job's first measurement: its first iterations run cold (on an H200 a check of iterations 3-7
            # measured fp32 12-20% below its speed a window later, and 16 bits were chosen on it: 4.4)
            if obs.regime_changed or obs.mixed or (self._changes == 0 and not self.choices and not self._readings):
                return None
            kept = ({k: list(v) for k, v in self._readings.items()}, self._at, len(self.choices))
            d = self._compare(obs)
            if d is None:
                self._readings, self._at, self.chosen = kept[0], kept[1], None
                del self.choices[kept[2]:]
            return d
        if obs.regime_changed or obs.config.wire != self.chosen or not self._current(obs.config.wire):
            return None  # an inner tuner that has not observed these conditions yet has nothing to check against
        self._steady(obs)
        d = self.inners[self._key(obs.config.wire)].check(replace(obs, config=_fp32(obs.config)))
        return self._outward(d, self.chosen)

    # ------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        low = self.preference.low
        return {"inner": self.inner.state_dict(), **({"low_inner": self.inners[low].state_dict()} if self._key(low) == low else {}),
                "speeds": {k: [r.speed for r in v] for k, v in self._readings.items()},
                "links": {k: [[r.rate, r.busy] for r in v] for k, v in self._readings.items()},
                "at": None if self._at is None else self._at.to_dict(), "chosen": self.chosen, "changes": self._changes,
                "saw": {k: list(v) for k, v in self._saw.items()}, "choices": [dict(c) for c in self.choices]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.inner.load_state_dict(state.get("inner", {}))
        low = self.preference.low
        if self._key(low) == low and "low_inner" in state:
            self.inners[low].load_state_dict(state["low_inner"])
        links = state.get("links", {})  # a state saved before readings kept their rates: none measured

        def measured(wire: str, i: int) -> tuple[float | None, float | None]:
            pair = links[wire][i] if i < len(links.get(wire, ())) else (None, None)
            return (None if pair[0] is None else float(pair[0]), None if pair[1] is None else float(pair[1]))

        self._readings = {str(k): [Reading(float(x), *measured(k, i)) for i, x in enumerate(v)]
                        for k, v in state.get("speeds", {}).items() if k in WIRES}
        at = state.get("at")
        self._at = None if at is None else Config.from_dict(at)
        chosen = state.get("chosen")
        self.chosen = chosen if chosen in WIRES else None
        self._changes = int(state.get("changes", 0))
        saw = state.get("saw")
        if isinstance(saw, dict):
            self._saw = {str(k): (int(v[0]), str(v[1])) for k, v in saw.items() if k in WIRES and v[1] in WIRES}
        elif state.get("inner_wire") in WIRES:  # a state saved with one inner tuner and the precision it last saw
            self._saw = {"fp32": (self._changes, str(state["inner_wire"]))}
        self.choices = [dict(c) for c in state.get("choices", [])]  # a comparison's readings go on: not into the caller's

