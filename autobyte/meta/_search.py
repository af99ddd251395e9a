"""The tuner's search in conditions expected to last: a shortlist, decided by measurement (numpy only).

One window of a configuration does not tell a 3-5% gain from a window's
noise on a busy host (docs/benchmarks.md section 3: a median 3-4 windows of
each are needed), and the network's first choice is rarely the best one
(its top-3 recall on held-out real rows is 30%, section 6.5). So where the
conditions are expected to last, the tuner does not move on one window of a
trial: it measures a *shortlist* -- the configuration in force, the fastest
of the conditions seen before, the job's start, the network's first choices
and the start's partition neighbours -- for several windows each, drops a
candidate once it is slower than the leader by more than the noise can
explain, and goes to the fastest when every one left has its windows. What
it measured stays in the regime (:class:`~autobyte.meta._ledger.Regime`),
so conditions that return resume or reuse their search, and what was
measured out there is neither raced nor tried in the conditions that follow
(:meth:`Search.carried_out`).

A race that has ended is not run again in its conditions: its winner is
held there (:attr:`~autobyte.meta._ledger.Regime.winner`,
:meth:`Search.hold`: only a configuration measured ahead of it by more than
the noise takes its place, and only a trial predicted far ahead, a leap, is
tried), whatever the host's drift does to the running averages (on the
steady scenario of docs/benchmarks.md 2.15, ended races reopened and measured
other candidates 8 and 7 more times in its two runs). And once a race has
ended anywhere, the conditions that follow do not race afresh: a ranking
outlives its conditions (switching per condition is worth a median 0.0% over
the best static configuration in hindsight), so the winner is raced only
against the job's start there (``narrow`` :meth:`Search.shortlist`), to tell
whether the new conditions moved it (docs/benchmarks.md 2.16).
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any, Callable, Collection, Sequence

import numpy as np

from autobyte.core.regime import pair_scatter
from autobyte.core.space import Config, SearchSpace, doublings

from ._ledger import Regime
from ._plain import _check_range
from ._scorer import Equivalence

#: gaps between a configuration's window and its running average in the regime read before the job's own noise is used
GAPS_MIN = 6


class Search:
    """Measure a shortlist for several windows each; the fastest wins.

    Args:
        windows: windows each candidate left in the race is measured (3).
        top: the network's first choices in the shortlist, one per schedule (2).
        z: a candidate is dropped once its mean is below the leader's by
            more than ``z`` standard errors of the difference (2.0).
        noise: a window's scatter of log speed assumed before this job's
            own windows say otherwise (0.03).
        min_horizon: iterations the conditions must be expected to last
            (recurrences included) for a search to run (150); shorter ones
            are left to the one-window explorer.
        leap: a trial the tuner's explorer predicts faster than the best
            measured by more than this goes before the race (0.25): the
            race tells small gains from noise, not large ones the network
            sees (a landscape 3x wide on the simulator).
        max_distance: powers of two (partition or credit) from the
            configuration in force within which the network's choices are
            taken (3.0).

    Raises:
        ValueError: an argument out of its range.
    """

    def __init__(self, windows: int = 3, top: int = 2, z: float = 2.0, noise: float = 0.03,
                 min_horizon: float = 150.0, leap: float = 0.25,
                 max_distance: float = 3.0) -> None:
        self.windows = int(_check_range("windows", windows, 1, 100))
        self.top = int(_check_range("top", top, 0, 100))
        self.z = _check_range("z", z, 0.0, 10.0)
        self.noise = _check_range("noise", noise, 1e-3, 1.0)
        self.min_horizon = _check_range("min_horizon", min_horizon, 0.0, 1e9)
        self.max_distance = _check_range("max_distance", max_distance, 0.0, 64.0)
        self.leap = _check_range("leap", leap, 0.0, 100.0)
        #: ``log(window / running average)`` of configurations measured again, no change of conditions between
        self.gaps: deque[float] = deque(maxlen=32)

    def note(self, speed: float, average: float | None) -> None:
        """A window of a configuration whose running average in these conditions was ``average`` (``None``: first)."""
        if average is not None and speed > 0 and average > 0:
            self.gaps.append(math.log(speed / average))

    def sigma(self) -> float:
        """A window's scatter of log speed: this job's own once :data:`GAPS_MIN` gaps are in (``noise`` before)."""
        if len(self.gaps) < GAPS_MIN:
            return self.noise
        # a gap is a window against the average of up to 3 before it: about sqrt(1 + 1/2) windows' scatter
        return min(0.15, max(0.005, pair_scatter(list(self.gaps)) / math.sqrt(1.5)))

    def shortlist(self, space: SearchSpace, predicted: np.ndarray, current: Config, known: Sequence[Config],
                  equivalence: Equivalence | None = None, skip: Collection[Config] = (),
                  around: Sequence[Config] = (), narrow: bool = False) -> list[Config]:
        """The candidates of a new search, in the order they are measured.

        ``known``: configurations measured fastest elsewhere (the conditions
        seen before, the job's start), tried first after ``current``. Then
        the network's ``top`` first choices within ``max_distance`` of
        ``current``, and the partition neighbours (a quarter and four times,
        at its credit multiple: where the network ranks least reliably) of
        ``current`` and of each of ``around`` (the job's start: on the CPU
        testbed the best static configuration was its quarter, <1 MiB, 2-4X>,
        in every suite run), one per schedule class not yet listed. Neighbours outside
        ``space`` are snapped to its nearest candidate. ``skip``: never
        listed (past jobs measured them slower; the last regime measured them
        out, :meth:`carried_out`). ``narrow``: ``current`` and ``known`` alone
        (a race that ended in other conditions: whether its winner still leads
        its rivals here).
        """
        out: list[Config] = [current]
        classes = {self._class(current, space, equivalence)}

        def add(c: Config) -> None:
            k = self._class(c, space, equivalence)
            if c in space and c not in skip and k not in classes:
                out.append(c)
                classes.add(k)

        for c in known:
            add(c)
        if narrow:
            return out
        # the network's first choices near the configuration in force (further away it ranks no better than chance)
        cands = space.to_array()
        dist = np.maximum(np.abs(np.log2(cands[:, 0] / current.partition_bytes)),
                          np.abs(np.log2(cands[:, 1] / current.credit_bytes)))
        score = np.where(dist <= self.max_distance + 1e-9, np.asarray(predicted, dtype=np.float64), -np.inf)
        n = 0
        for k in np.argsort(-score, kind="stable"):
            if n >= self.top or not np.isfinite(score[k]):
                break
            before = len(out)
            add(space[int(k)])
            n += len(out) > before
        for c in (current, *around):
            for f in (0.25, 4.0):
                p = int(c.partition_bytes * f)
                if p > 0:
                    add(space.nearest(Config.from_multiple(p, c.credit_multiple)))
        return out

    def carried_out(self, regimes: Sequence[Regime]) -> set[Config]:
        """What the most recent of ``regimes`` (most recent first) that ranked two or more configurations measured out.

        A ranking outlives its conditions on this testbed: in every suite run
        switching per condition is worth a median 0.0% over the best static
        configuration in hindsight (docs/benchmarks.md section 3), and a
        host's drift of 13% reads as new conditions. So a configuration
        measured slower than that regime's leader by more than the noise
        (:meth:`standing`, over its race's candidates and everything else
        measured there) is neither raced nor tried again when conditions
        change: the race that follows is between the leaders, the start and
        what the network ranks first in the new conditions. Empty before
        any regime ranked two.
        """
        for r in regimes:
            if len(r.measured) >= 2:
                cands = self._entrants(r.shortlist or [], r.measured)
                alive, _ = self.standing(cands, r.measured)
                return {c for c in cands if c in r.measured and c not in alive}
        return set()

    def decided(self, regimes: Sequence[Regime]) -> list[Config]:
        """What the races of ``regimes`` (most recent first) found, most recent first, each once: a race's winner
        where it ended, and where its conditions ended before it did, its leader once two of its candidates were
        measured.

        A race of six to eight candidates needs 150-240 iterations, more than a
        phase of 200 leaves after the search waits for its first 50 (on a
        parameter server whose link stepped every 200 iterations the first race
        never ended, in two runs, and every later phase raced afresh: 0.952x
        hindsight, docs/benchmarks.md 2.17). Its standing when the conditions
        changed is what the job knows of the ranking, and a ranking outlives its
        conditions, so the race that follows is its leader against the start
        (``narrow`` :meth:`shortlist`), as after one that ended.
        """
        out: list[Config] = []
        for r in regimes:
            c = r.winner
            if c is None and r.shortlist is not None and len(r.measured) >= 2:  # every configuration measured there is an entrant
                c = self.leader(r.shortlist, r.measured)
            if c is not None and c not in out:
                out.append(c)
        return out

    @staticmethod
    def _class(c: Config, space: SearchSpace, equivalence: Equivalence | None) -> Any:
        """The candidate ``c`` counts as in a shortlist: its schedule class; a configuration outside ``space`` within
        half a grid step of a candidate (ByteScheduler's default, 4,000,000 bytes, beside 4 MiB) counts as that one
        (:meth:`~autobyte.core.space.SearchSpace.grid_point`; the explorer counts it so too).

        Two configurations less than a grid step apart run within the noise
        of each other: listed apart, a race spent windows telling them
        apart, and the guard tripped 4 times in one run on the grid's one
        against the start (docs/benchmarks.md 2.23).
        """
        point = space.grid_point(c)
        if point is None:
            return (c.partition_bytes, c.credit_bytes)
        return equivalence.of(point) if equivalence is not None else (point.partition_bytes, point.credit_bytes)

    def standing(self, shortlist: Sequence[Config], measured: dict[Config, list[float]]) -> tuple[list[Config], Config | None]:
        """The candidates still in the race (in shortlist order) and the leader (``None``: nothing measured yet).

        A candidate is out once its mean speed is below the leader's by more
        than ``z`` standard errors of the difference (each mean over the
        windows measured, capped at the ledger's running average of 3).
        """
        seen = [c for c in shortlist if c in measured]
        if not seen:
            return list(shortlist), None
        leader = max(seen, key=lambda c: measured[c][0])
        s = self.sigma()
        lv, ln = measured[leader][0], min(3.0, measured[leader][1])
        alive = []
        for c in shortlist:
            m = measured.get(c)
            if m is None or c == leader:
                alive.append(c)
                continue
            se = s * math.sqrt(1.0 / min(3.0, max(m[1], 0.25)) + 1.0 / max(ln, 0.25))
            if math.log(lv / m[0]) <= self.z * se:
                alive.append(c)
        return alive, leader

    def window_cost(self, cfg: Config, speed: float, measured: dict[Config, float], predicted: float, sigma: float,
                    downside: float, widen: float, iters: int) -> float:
        """What a window of ``cfg`` could cost, in iterations' worth against ``speed``, one error below its estimate.

        A measured candidate: its mean here, this job's window scatter. An
        unmeasured one: ``predicted``, with the predictor's error ``sigma``
        widened by ``widen`` per power of two from the nearest configuration
        measured here, or as far as ``downside`` (the worst over-prediction
        seen on this job), as the explorer takes a trial's.
        """
        if cfg in measured:
            est, err = measured[cfg], self.sigma()
        else:
            far = min((doublings(cfg, c) for c in measured), default=0.0)
            est, err = predicted, max(sigma * (1.0 + widen * far), downside)
        return iters * max(0.0, speed / (est * math.exp(-err)) - 1.0)

    @staticmethod
    def _entrants(shortlist: Sequence[Config], measured: dict[Config, list[float]]) -> list[Config]:
        """The race's candidates: the shortlist, then every other configuration measured in these conditions."""
        return list(shortlist) + [c for c in measured if c not in shortlist]

    def _short(self, alive: Sequence[Config], measured: dict[Config, list[float]]) -> list[Config]:
        """The candidates left in the race with fewer than ``windows`` windows, in ``alive``'s order."""
        return [c for c in alive if (measured[c][1] if c in measured else 0.0) < self.windows - 1e-9]

    @staticmethod
    def _over(alive: Sequence[Config], leader: Config | None, short: Sequence[Config]) -> bool:
        """The race is over: only the leader is left, or every candidate left has its windows."""
        return leader is not None and (list(alive) == [leader] or not short)

    def winner(self, shortlist: Sequence[Config], measured: dict[Config, list[float]]) -> Config | None:
        """The race's winner once it is over (:meth:`_over`), as :meth:`propose` decides; ``None`` while it goes on."""
        alive, leader = self.standing(self._entrants(shortlist, measured), measured)
        return leader if self._over(alive, leader, self._short(alive, measured)) else None

    def hold(self, regime: Regime, fresh: Collection[Config], current: Config) -> tuple[Config, str]:
        """A race that ended in ``regime``: its winner runs, unless a configuration measured there (a trial, the
        start under the guard) leads it by more than ``z`` standard errors: then that one wins.

        ``fresh``: the configurations whose measurements there are still
        fresh (a host's drift makes an old one look fast against a new one). Returns the
        configuration to run (``current``: keep it) and why, and records the
        winner in ``regime``. Nothing else moves in these conditions: a
        drift that brings a candidate within the noise, or a window of one a
        few percent ahead, does not reopen the race.
        """
        winner, measured = regime.winner, {c: v for c, v in regime.measured.items() if c in fresh}
        assert winner is not None
        alive, leader = self.standing(self._entrants(regime.shortlist or [winner], measured), measured)
        if leader is None:  # its measurements moved to other conditions (Ledger.refile): nothing to hold to
            return current, f"search: {current} runs on, nothing measured in these conditions"
        if winner not in measured:
            regime.winner = leader
            return leader, f"search: {leader}, the fastest measured here, wins (the race's winner {winner} was moved to other conditions)"
        if winner not in alive:
            regime.winner = leader
            return leader, (f"search: {leader} measured {measured[leader][0]:.1f} samples/s, ahead of the race's winner "
                            f"{winner} ({measured[winner][0]:.1f}) by more than {self.z:g} standard errors: it wins here")
        if winner == current:
            return winner, (f"search: the race's winner here holds ({measured[winner][0]:.1f} samples/s over "
                            f"{measured[winner][1]:g} windows; nothing measured here leads it by more than the noise)")
        return winner, (f"search: back to {winner}, the race's winner here ({measured[winner][0]:.1f} samples/s over "
                        f"{measured[winner][1]:g} windows)")

    def leader(self, shortlist: Sequence[Config], measured: dict[Config, list[float]]) -> Config | None:
        """The fastest configuration measured among the race's candidates (``None``: none measured yet)."""
        cands = self._entrants(shortlist, measured)
        return self.standing(cands, measured)[1]

    def propose(self, shortlist: Sequence[Config], measured: dict[Config, list[float]], current: Config,
                horizon: float, allowance: float | None = None,
                worst: Callable[[Config], float] | None = None) -> tuple[Config, str] | None:
        """The next configuration to measure, the winner when the race is over, or ``None``.

        The race is between the shortlist and every other configuration
        measured in these conditions (``measured``: the regime's ``[speed,
        windows, ...]`` per configuration), so a trial of the explorer that
        measured close to the leader is raced too, and one far ahead wins at
        once. Candidates are measured round by round: the one with the fewest
        windows next (ties to the configuration in force, then shortlist
        order), so one that is clearly slower is out after its first window.
        The race is over when only the leader is left or every candidate left
        has ``windows`` windows. The configuration in force may be the one to
        run again: it is returned, the caller keeps it and no other policy
        moves. ``None`` when the conditions are not expected to last
        ``min_horizon``, or the race is over and its winner is in force: the
        search has nothing to say.

        ``allowance``: iterations' worth of slowdown the do-no-harm guard
        still allows (``None``: not guarded); ``worst(c)``: what a window of
        ``c`` could cost (:meth:`window_cost`). A window of a candidate other
        than the one in force and the leader must fit the allowance; the next
        candidate that does is measured instead, and when none does the
        leader runs (banking its gain) until the allowance has room again. A
        candidate that never fits (an unmeasured one whose estimate carries the
        job's worst over-prediction, while the start leads and the guard
        allows 1.5 iterations: 5.6 asked in one run on the CPU testbed) does
        not hold up the others: they are measured, and the leader among them
        runs.
        """
        if not shortlist or horizon < self.min_horizon:
            return None
        cands = self._entrants(shortlist, measured)
        alive, leader = self.standing(cands, measured)

        def n(c: Config) -> float:
            return measured[c][1] if c in measured else 0.0

        # round by round: the fewest windows first (a bad candidate is out after one), ties to the one in force
        need = sorted(self._short(alive, measured), key=lambda c: (n(c), c != current, cands.index(c)))

        def fits(c: Config) -> bool:  # the one in force and the leader always fit (the allowance may be below 0 at the start)
            return allowance is None or worst is None or c == current or c == leader or worst(c) <= allowance

        nxt = next((c for c in need if fits(c)), None)
        if need and nxt is None:
            assert allowance is not None and worst is not None
            why = (f"a window of {need[0]} could cost {worst(need[0]):.1f} iterations, the do-no-harm allowance is "
                   f"{allowance:.1f}" + (f" ({len(need) - 1} more candidates left to measure do not fit either)" if len(need) > 1 else ""))
            if leader is None or leader == current:
                return current, f"search: {current} runs on: {why}"
            return leader, f"search: back to the leader {leader}: {why}"
        if nxt is not None and not self._over(alive, leader, need):
            if nxt == current:
                return current, f"search: {current} measured again ({n(current):g} of {self.windows} windows)"
            return nxt, (f"search: measuring {nxt} ({n(nxt):g} of {self.windows} windows; {len(alive)} of "
                         f"{len(cands)} candidates left, {len(cands) - len(alive)} out by more than {self.z:g} "
                         f"standard errors" + (f"; leader {leader} {measured[leader][0]:.1f} samples/s" if leader is not None else "") + ")")
        assert leader is not None
        if leader == current:
            return None
        out = len(cands) - len(alive)
        return leader, (f"search: {leader} fastest at {measured[leader][0]:.1f} samples/s over {n(leader):g} windows; "
                        f"{len(alive) - 1} left within the noise, {out} out (window scatter {100 * self.sigma():.1f}%)")

    def state_dict(self) -> dict[str, Any]:
        return {"gaps": list(self.gaps)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "gaps" in state:
            self.gaps.clear()
            self.gaps.extend(float(g) for g in state["gaps"])
