"""AutoByte's tuner: the small policies of this package composed, one decision per window."""

from __future__ import annotations

import logging
import math
import os
import time
import warnings
from typing import Any

import numpy as np

from autobyte.core._checks import check_fraction, check_int
from autobyte.core.space import Config, SearchSpace
from autobyte.core.tuning import Decision, Observation, Tuner

from ._adapter import Adapter
from ._explorer import Explorer, TrialRecord
from ._history import JobHistory, new_job_id
from ._learner import Learner
from ._ledger import Ledger, Regime
from ._moves import Aborter, Mover, Verifier
from ._network import MetaNetwork, one_blas_thread
from ._scorer import Scorer, Scores
from ._search import Search

_log = logging.getLogger("autobyte.meta")

#: Indices of the job vector that describe the environment (compute and bandwidth), used to detect a change.
_ENV = [5, 6, 7, 8, 9, 10, 11]
#: Their names, for the log.
_ENV_NAMES = ["compute time", "forward time", "straggling", "min uplink bandwidth", "mean uplink bandwidth",
              "min downlink bandwidth", "mean downlink bandwidth"]


class AutoByteTuner(Tuner):
    """AutoByte: measured speeds first, the meta-network to choose what to measure.

    A composition of small policies, asked in this order at the end of every
    window (:meth:`observe`):

    1. :class:`~autobyte.meta._scorer.Scorer` predicts every candidate's
       speed, anchored on the speed observed for the configuration in force,
       one prediction per schedule, the network's ratios scaled and corrected
       by a credit/partition trend fitted on what was measured on this job.
    2. :class:`~autobyte.meta._ledger.Ledger` files the window under its
       regime (set of conditions). When the controller's detector saw
       conditions change, a past regime whose measurement of the configuration
       in force matches is recalled with all it measured; otherwise a new one
       starts. Nothing measured is forgotten at a change.
    3. :class:`~autobyte.meta._learner.Learner` adapts the network's head on
       a bad prediction. Where conditions last, :class:`~autobyte.meta._search.Search`
       races a shortlist over several windows each and decides before 4, 6, 7
       (after the Verifier, 5, and inside the do-no-harm allowance); an ended
       race holds its winner there instead of 4 and 7 (leaps only), and later
       conditions race its winner against the start alone.
    4. :class:`~autobyte.meta._moves.Mover` goes to the fastest configuration
       measured in this regime when it beats the one in force by ``min_gain``
       (after a trial that measured slower, that is the rollback).
    5. :class:`~autobyte.meta._moves.Verifier` re-measures the configuration a
       trial left when the trial ran far from its prediction, so a change of
       conditions at that moment is not taken for the trial's speed (the
       detector sees it on the configuration re-measured); when the change
       accounts for the surprise, the trial's measurement is moved to the new
       conditions' regime.
    6. Right after a change of conditions, the fastest configuration of the
       conditions seen last runs to tell whether they are back (recall).
    7. :class:`~autobyte.meta._explorer.Explorer` tries the unmeasured
       candidate whose expected gain over the time left in this regime
       (recurrences included) most exceeds the trial's expected cost, inside
       the controller's do-no-harm allowance, even if the trial falls as far
       below its prediction as the worst miss measured on this job. Predicted
       gains are shrunk to the scale of what this job's trials found
       (:class:`~autobyte.meta._explorer.TrialRecord`), and only the
       improvement beyond ``min_gain`` counts. None when no trial pays.

    At a check of a window still in progress (:meth:`check`): a trial this
    tuner started that already runs more than ``abort_margin`` below the
    fastest configuration measured in this regime is ended there
    (:class:`~autobyte.meta._moves.Aborter`: the check is recorded as half a
    window and the run goes back to that configuration); a trial that holds
    up while the conditions are expected to last less than
    :attr:`short_horizon_iters` is judged on that check alone; a window run
    to answer a question (the verifier's re-measurement, a recall) is judged
    at its first check when that check shows no change. Otherwise a check
    changes nothing and the window goes on.

    The tuner sets the controller's change detector
    (:class:`~autobyte.core.regime.RegimeDetector`): a configuration's speed
    moved by more than 15%, or by ``noise_z`` scatters of the job's own
    repeated measurements where that is more (at most 50%); a rise of the
    achieved link rate by :attr:`rate_rise`; a step of the iteration times
    inside one check by :attr:`step_change` (that check mixes both regimes
    and is kept by no one).

    Each decision is logged on ``autobyte.meta`` with what was measured, what was predicted and why; a window that
    keeps the configuration logs why at DEBUG level. Its calls run numpy's BLAS on one thread (``_calls_context``).

    Args:
        network: the meta-network; ``None`` loads the shipped pretrained weights.
        weights: path to weights saved by ``autobyte train-meta`` (instead of ``network``).
        min_gain: measured advantage needed to move to another measured configuration (0.02).
        max_error: relative error of a checked prediction that starts adaptation (0.10).
        adapt: adapt the network's head online at all (True).
        background: adapt in the background (True: the training step never waits);
            ``False`` runs it inline (deterministic, for simulation).
        adapt_process: background adaptations run in a worker process (True)
            or in a thread of this process (False); :class:`~autobyte.meta.Adapter`'s ``process``.
        adapt_time_s: wall-clock bound of one adaptation (1.0).
        replay_size: rows kept in the adaptation's replay buffer (256).
        enabled: ``False`` never reconfigures (predictions are still made and logged).
        explore: try unmeasured candidates at all (True); ``False`` moves only between measured ones.
        trial_iters: iterations one trial costs (12: a window of 10 and 2 warm-up iterations).
        max_distance: powers of two a trial may reach from the nearest measured configuration (2.0).
        abort_margin: a trial measured at a check more than this below the
            fastest configuration measured in this regime is ended there
            (0.10; in [0.001, 0.9]); ``None`` never ends a trial early.
        noise_z: the detector's speed threshold is at least this many
            scatters of the job's own pairs of measurements of one
            configuration (3.0): a host whose checks scatter widely does not
            take its noise for changes of conditions; ``None``: 15% only.
        history_dir: a folder shared by the jobs of one cluster
            (:class:`~autobyte.meta.JobHistory`): the job starts at the
            configuration past jobs measured fastest against the one given
            (when it won by ``min_gain`` over 2+ regimes; the reason is
            :attr:`started_from`, logged) and keeps what it measures there,
            one file per job, rewritten at every window. ``None`` (default): no history.
        history_write: add this job's measurements to ``history_dir``
            (True; ``False``: read only).
        history_veto: with ``history_dir``, do not try a configuration past
            jobs measured slower than the start by more than ``min_gain``
            (True; logged at start). What this job measures itself is still moved to.

    Raises:
        ValueError: a threshold out of range, ``network`` and ``weights`` both
            given, or an unusable weights file.
        FileNotFoundError: ``weights`` does not exist.

    Example:
        >>> from autobyte.core import Controller, SearchSpace, make_tuner  # doctest: +SKIP
        >>> tuner = make_tuner("autobyte")                                  # doctest: +SKIP
        >>> controller = Controller(tuner, SearchSpace.default(), start, "ps", layer_bytes)  # doctest: +SKIP
    """

    name = "autobyte"
    #: the controller's detector takes a rise of the achieved link rate by this much as a faster link
    rate_rise: float | None = 0.5
    #: the controller's detector takes a step of iteration time inside one check by this much as a change inside it
    step_change: float | None = 0.5
    #: the scale (log units) a trial's predicted gain is shrunk to before this job's trials say more, worth one trial
    shrink: float = 0.05
    #: while the conditions are expected to last fewer iterations than this, a trial that holds up at its
    #: first check is judged on that check alone
    short_horizon_iters: float = 100.0
    #: conditions expected to last at least this many iterations (recurrences included) are searched
    #: (:class:`~autobyte.meta._search.Search`); shorter ones get one-window trials
    search_horizon: float = 150.0
    #: before any change of conditions was seen (the ledger's horizon is then its default), a search starts only
    #: once the conditions have lasted this many iterations: a job whose conditions change every 25 iterations
    #: keeps one-window trials from its start
    search_after_iters: int = 50
    #: what the tuner's calls run inside: numpy's BLAS on one thread (an experiment's subclass may leave its threads)
    _calls_context = staticmethod(one_blas_thread)

    def __init__(
        self,
        network: MetaNetwork | None = None,
        *,
        weights: str | None = None,
        min_gain: float = 0.02,
        max_error: float = 0.10,
        adapt: bool = True,
        background: bool = True,
        adapt_process: bool = True,
        adapt_time_s: float = 1.0,
        replay_size: int = 256,
        enabled: bool = True,
        explore: bool = True,
        trial_iters: int = 12,
        max_distance: float = 2.0,
        abort_margin: float | None = 0.10,
        noise_z: float | None = 3.0,
        history_dir: str | os.PathLike[str] | None = None,
        history_write: bool = True,
        history_veto: bool = True,
    ) -> None:
        #: read by the controller's detector
        self.noise_z = check_fraction("noise_z", noise_z, 100.0, optional=True)
        if network is not None and weights is not None:
            raise ValueError("pass either network or weights, not both.")
        check_int("replay_size", replay_size)
        check_int("trial_iters", trial_iters)
        if not isinstance(adapt_process, bool):
            raise ValueError("adapt_process must be True (adapt in a worker process) or False (in a thread), "
                             f"but got adapt_process={adapt_process!r}.")
        if network is None:
            network = MetaNetwork.load(weights) if weights is not None else MetaNetwork.load_default()
        self.net = network
        self.adapter = Adapter(network, time_budget_s=adapt_time_s, process=adapt_process)
        self.mover = Mover(min_gain)
        # a trial that the aborter would end costs only its first check (half a window and the warm-up);
        # an improvement the mover would not act on is worth nothing
        self.explorer = Explorer(trial_iters, max_distance=max_distance, abort_margin=abort_margin,
                                 abort_iters=min(7, trial_iters), gain_floor=math.log1p(min_gain))
        self.aborter = None if abort_margin is None else Aborter(abort_margin)
        self.verifier = Verifier()
        self.learner = Learner(self.adapter, max_error=max_error, replay_size=replay_size, background=background,
                               enabled=adapt)
        self.history = None if history_dir is None else JobHistory(history_dir, write=history_write, min_gain=min_gain)
        self.history_veto = bool(history_veto)
        #: configurations the explorer does not try: past jobs measured them slower than the start
        self.slower: frozenset[Config] = frozenset()
        self.job = new_job_id()  # this job's file in the history folder (kept by state_dict: a resumed job goes on in it)
        #: why the job started where it did (the history's reason; ``None`` without a history)
        self.started_from: str | None = None
        #: the configuration the job started at (the history's pick, or the one given)
        self.begun: Config | None = None
        self.enabled = bool(enabled)
        self.explore = bool(explore)
        self._reset()

    def _new_scorer(self, space: SearchSpace) -> Scorer:
        """The scorer of a job over ``space`` (a subclass may build it otherwise, e.g. for an ablation)."""
        return Scorer(self.net, space)

    def _new_ledger(self) -> Ledger:
        """The ledger of a job (a subclass may build it otherwise, e.g. for an ablation)."""
        return Ledger()

    def _new_search(self) -> Search | None:
        """The search of a job's lasting conditions (a subclass may build it otherwise, or return ``None``: none)."""
        return Search(min_horizon=self.search_horizon, max_distance=self.explorer.max_distance)

    def _reset(self) -> None:
        self.ledger = self._new_ledger()
        self._window = 0
        self._last_pred: tuple[Config, np.ndarray, np.ndarray, float] | None = None  # last window's config, predictions, raw log ratios, speed
        self._trial: tuple[Config, float, Config] | None = None  # the trial decided last window: config, prediction, left
        self.trial_record = TrialRecord()  # what this job's trials found beyond the best measured
        self.search: Search | None = self._new_search()
        # a surprising measurement not yet judged: config, prediction, speed, raw log ratio, anchor, window share
        self._held: tuple[Config, float, float, float, float, float] | None = None
        self._left: Config | None = None  # the configuration the last decision left
        self._asked: Config | None = None  # the configuration the last decision runs to answer a question (verify, recall)
        self._last_job: np.ndarray | None = None
        self.errors: list[float] = []  # relative errors of checked predictions
        self.cpu_s = 0.0
        self.n_decisions = self.n_trials = self.n_aborts = 0

    def start(self, space: SearchSpace, initial: Config) -> Config:
        super().start(space, initial)
        if len(space) == 1:
            warnings.warn("autobyte: the search space has one candidate; AutoByte has nothing to tune.", stacklevel=2)
        self.scorer = self._new_scorer(space)
        self._reset()
        self.started_from = None
        self.slower = frozenset()
        if self.history is not None and self.enabled and len(space) > 1:
            plan = self.history.plan(space, initial, exclude=self.job)
            initial, self.started_from = plan.start, plan.reason
            _log.info("autobyte: %s", self.started_from)
            self.slower = plan.slower if self.history_veto else frozenset()
            if self.slower:
                _log.info("autobyte: history: not trying %d configurations past jobs measured slower than %s: %s",
                          len(self.slower), initial, ", ".join(map(str, sorted(self.slower))))
        self.begun = initial
        return initial

    # ------------------------------------------------------------------ decision
    def observe(self, obs: Observation) -> Decision | None:
        t0 = time.process_time()
        try:
            with self._calls_context():
                return self._observe(obs)
        finally:
            if self.history is not None:
                self.history.save(self.job, self.ledger.regimes, self.ledger.memory)
            self.cpu_s += time.process_time() - t0

    def _observe(self, obs: Observation) -> Decision | None:
        if not hasattr(self, "scorer"):
            raise RuntimeError("AutoByteTuner.observe called before start(space, initial).")
        self._window += 1
        self._asked = None
        if obs.mixed:
            return self._mixed(obs)
        recorded = self._record(obs)
        if recorded is None:
            return None
        sc, regime = recorded
        if not self.enabled or len(self.space) == 1:
            return None
        measured = regime.speeds(self.ledger.stale_windows)
        trial, self._trial = self._trial, None
        if trial is not None and trial[0] == obs.config and not obs.regime_changed:
            self.trial_record.outcome(obs.config, obs.speed)
            others = [v for c, v in measured.items() if c != obs.config]
            regime.misses = 0 if others and obs.speed > max(others) * (1 + self.mover.trigger.min_gain) else regime.misses + 1
        else:
            self.trial_record.drop()  # no trial ran this window, or conditions changed under it
        horizon = self.ledger.horizon(obs.iteration)
        step = self._search(obs, sc, regime, measured, horizon) if self.explore else None
        if step is not None:
            check = self.verifier.propose(trial, obs.config, obs.speed, obs.regime_changed)
            if check is not None:  # a change of conditions at a surprise is told first, as below
                return self._decide(obs, check[0], check[1], measured.get(check[0], obs.speed), asks=True)
            return self._race(obs, sc, regime, measured, horizon, step)
        # against the configuration in force's average in these conditions, not this window alone
        move = self.mover.propose(self._window, measured, obs.config, measured.get(obs.config, obs.speed), self._left)
        if move is not None:
            return self._decide(obs, move[0], move[1], measured[move[0]])
        check = self.verifier.propose(trial, obs.config, obs.speed, obs.regime_changed)
        if check is not None:
            return self._decide(obs, check[0], check[1], measured.get(check[0], obs.speed), asks=True)
        probe = self._probe(obs, sc) if obs.regime_changed else None
        if probe is not None:
            return probe
        tried = self._explore(obs, sc, regime, measured, horizon) if self.explore else None
        if tried is not None:
            return tried
        if _log.isEnabledFor(logging.DEBUG):
            best = max(measured, key=measured.__getitem__)
            _log.debug("autobyte: window %d keeps %s at %.1f samples/s: fastest measured here %s (%.1f), %d measured, "
                       "best predicted %s (%.1f), no trial pays", self._window, obs.config, obs.speed, best, measured[best],
                       len(measured), self.space[int(np.argmax(sc.predicted))], float(np.max(sc.predicted)))
        return None

    def _race(self, obs: Observation, sc: Scores, regime: Regime, measured: dict[Config, float], horizon: float,
              step: tuple[Config, str]) -> Decision | None:
        """The search's ``step`` taken: the next candidate of the race, its winner, or ``None`` (measure again)."""
        assert self.search is not None
        # a race tells small gains from noise; a trial the network predicts far ahead of it goes first
        # (measured, it joins the race, and wins at once if it is)
        leap = self._explore(obs, sc, regime, measured, horizon, leap=self.search.leap)
        if leap is not None:
            return leap
        cfg, reason = step
        predicted = float(sc.predicted[self.space.index(cfg)]) if cfg in self.space else None
        if cfg == obs.config:
            _log.debug("autobyte: window %d keeps %s at %.1f samples/s: %s", self._window, obs.config, obs.speed, reason)
            return None
        if cfg in regime.measured:
            return self._decide(obs, cfg, reason, measured.get(cfg))
        # an unmeasured candidate: a trial, which the aborter may end at a check
        self._trial = (cfg, predicted if predicted is not None else obs.speed, obs.config)
        self.n_trials += 1
        return self._decide(obs, cfg, reason, predicted)

    def _explore(self, obs: Observation, sc: Scores, regime: Regime, measured: dict[Config, float], horizon: float,
                 leap: float | None = None) -> Decision | None:
        """The explorer's trial (:class:`~autobyte.meta._explorer.Explorer`), or ``None`` when none pays.

        ``leap``: only a trial predicted faster than the best measured by more than this (relative) is taken.
        """
        trial_cfg = self.explorer.propose(self.space, self.scorer.cands, sc.predicted, measured, obs.config, obs.speed,
                                          self.scorer.sigma(), horizon, obs.harm_allowance, regime.misses,
                                          self.scorer.equivalence, self.scorer.downside(),
                                          self.trial_record.spread(self.shrink), skip=self._carried(regime),
                                          left=self.ledger.left(obs.iteration))
        if trial_cfg is None:
            return None
        predicted = float(sc.predicted[self.space.index(trial_cfg[0])])
        if leap is not None and predicted <= max(measured.values()) * (1.0 + leap):
            return None
        self._trial = (trial_cfg[0], predicted, obs.config)
        self.trial_record.expect(trial_cfg[0], max(measured.values()))
        self.n_trials += 1
        return self._decide(obs, trial_cfg[0], trial_cfg[1], predicted)

    def _carried(self, regime: Regime) -> frozenset[Config]:
        """Not tried in ``regime``: what past jobs measured slower, and what the last regime measured out (Search.carried_out)."""
        return self.slower | (self.search.carried_out([r for r in reversed(self.ledger.regimes) if r is not regime]) if self.search else set())

    def _search(self, obs: Observation, sc: Scores, regime: Regime, measured: dict[Config, float],
                horizon: float) -> tuple[Config, str] | None:
        """The search's step in these conditions (:class:`~autobyte.meta._search.Search`), starting one when they are
        expected to last, and holding its winner once its race here has ended; ``None``: no search here, or not now."""
        if (search := self.search) is None or regime.winner is not None:  # a race ended here: its winner holds
            return None if search is None else search.hold(regime, measured, obs.config)
        if regime.shortlist is None:
            ended = any(r.durations for r in self.ledger.regimes)
            if horizon < search.min_horizon or (not ended and obs.iteration - regime.started < self.search_after_iters):
                return None
            start, others = self.begun or obs.config, [r for r in reversed(self.ledger.regimes) if r is not regime]
            won = search.decided(others)[:2]  # raced elsewhere: the winners or leaders raced against the start alone
            known = won or [b for r in others if (b := r.best()) is not None][:2]
            regime.shortlist = search.shortlist(self.space, sc.predicted, obs.config, known + [start], self.scorer.equivalence,
                                                self._carried(regime), around=[start], narrow=bool(won))
            why = "" if not won else f" (a race in other conditions found {won[0]}" + (
                ": raced against the start here, not afresh)" if len(regime.shortlist) > 1 else ", and no rival of it is left to race here: held alone)")
            _log.info("autobyte: search in regime %d (about %.0f iterations expected in these conditions): %s, %d windows each "
                      "unless measured out%s", regime.ident, horizon, ", ".join(map(str, regime.shortlist)), search.windows, why)

        def worst(c: Config) -> float:  # a window of c one error below its estimate, as a trial of the explorer
            guess = float(sc.predicted[self.space.index(c)]) if c in self.space else obs.speed
            return search.window_cost(c, obs.speed, measured, guess, self.scorer.sigma(), self.scorer.downside(),
                                      self.explorer.widen, self.explorer.trial_iters)
        step = search.propose(regime.shortlist, regime.measured, obs.config, horizon, obs.harm_allowance, worst)
        regime.winner = search.winner(regime.shortlist, regime.measured)
        return search.hold(regime, measured, obs.config) if step is None and regime.winner else step  # it ended here now

    def _probe(self, obs: Observation, sc: Scores | None) -> Decision | None:
        """Right after a change of conditions: run the configuration that tells whether past conditions are back.

        ``sc``: this window's scores, for the probe's predicted speed (``None``: none, as after a mixed check).
        """
        probe = self.ledger.probe(obs.config)
        if probe is None:
            return None
        predicted = float(sc.predicted[self.space.index(probe)]) if sc is not None and probe in self.space else None
        return self._decide(obs, probe, f"recall: new conditions; {probe}, the fastest in the conditions seen last, "
                                        f"tells whether they are back", predicted, asks=True)

    def _mixed(self, obs: Observation) -> Decision | None:
        """Conditions changed inside this check (``Observation.mixed``): a new regime starts with nothing measured.

        The check's speed mixes both regimes, so nothing is kept of it: not
        filed, not compared with a prediction, no pair for adaptation. A
        trial running across the change measured neither regime and is
        dropped. What can be done at once is the recall probe.
        """
        before = self.ledger.current
        regime = self.ledger.change(obs.iteration, obs.config, obs.speed, aside=obs.window_share)
        self._trial = None
        self._last_pred = None  # predictions made in the old conditions are not checked in the new ones
        self.learner.forget()
        self.trial_record.drop()
        _log.info("autobyte: conditions changed inside the check at iteration %d (%s ran %.1f samples/s, a mix of "
                  "both); new conditions (regime %d), regime %d kept for when they return.", obs.iteration,
                  obs.config, obs.speed, regime.ident, before.ident)
        if not self.enabled or len(self.space) == 1:
            return None
        return self._probe(obs, None)

    def _record(self, obs: Observation) -> tuple[Scores, Regime] | None:
        """A measurement of ``obs.config`` (a window, or a check that ends a trial): scored, checked, filed, learnt from.

        ``None`` (warned) when it cannot be used; nothing is recorded then.
        """
        if not (math.isfinite(obs.speed) and obs.speed > 0):
            warnings.warn(f"autobyte: window at iteration {obs.iteration} has speed {obs.speed!r}; keeping {obs.config}.", stacklevel=4)
            return None
        try:
            sc = self.scorer.score(obs.config, obs.speed, obs.features)
        except (ValueError, FloatingPointError) as exc:
            warnings.warn(f"autobyte: cannot score window at iteration {obs.iteration} ({exc}); keeping {obs.config}.", stacklevel=4)
            return None
        # the last window's prediction of this configuration, checked against what it measured
        # (after any change of configuration: a trial, a move, the guard, the user; never across
        # a change of conditions)
        last, self._last_pred = self._last_pred, (obs.config, sc.predicted, sc.raw, obs.speed)
        checked = None
        held, self._held = self._held, None
        if held is not None and not obs.regime_changed:
            self.errors.append(self.scorer.checked(*held[1:5]))  # the surprise was the predictor's, not a change
        if last is not None and last[0] != obs.config and obs.config in self.space and not obs.regime_changed:
            k = self.space.index(obs.config)
            checked, raw = float(last[1][k]), float(last[2][k])
            if abs(math.log(obs.speed / checked)) > math.log1p(self.verifier.surprise):
                # judged once the verifier has told a change from an error
                self._held = (obs.config, checked, obs.speed, raw, last[3], obs.window_share)
                checked = None  # nor does it start an adaptation before then
            else:
                self.errors.append(self.scorer.checked(checked, obs.speed, raw, last[3], self.scorer.move(last[0], obs.config)))
        before = self.ledger.current
        if self.search is not None and not obs.regime_changed and obs.window_share >= 1.0:
            had = before.measured.get(obs.config)
            self.search.note(obs.speed, None if had is None else had[0])
        regime = self.ledger.observe(obs.iteration, obs.config, obs.speed, obs.regime_changed, obs.window_share)
        if held is not None and obs.regime_changed and held[0] != obs.config:
            self._refile(held, obs, before, regime)
        if obs.regime_changed:
            self._log_change(obs, before, regime, sc.job.job)
        elif self.ledger.recalled is not None:
            _log.info("autobyte: %s ran %.1f samples/s as in regime %d: these conditions were seen before; reusing "
                      "%d measurements.", obs.config, obs.speed, regime.ident, len(regime.measured))
        self._last_job = sc.job.job
        if self.learner.observe(sc.job, sc.embedding, obs.regime_changed, checked, self.cpu_s):
            err = abs(obs.speed / checked - 1) if checked else float("nan")
            _log.info("autobyte: prediction error %.1f%% > %.0f%%: adapting on %d observations.", 100 * err,
                      100 * self.learner.trigger.max_error, len(self.learner.rows))
        self.n_decisions += 1
        return sc, regime

    def _refile(self, held: tuple[Config, float, float, float, float, float], obs: Observation, old: Regime, new: Regime) -> None:
        """A surprising measurement, then a change of conditions seen on another configuration: where it belongs.

        The change happened after ``obs.config``'s last measurement in ``old``,
        so possibly before the surprising window: the verifier decides
        (:meth:`Verifier.ran_after <autobyte.meta._moves.Verifier.ran_after>`);
        a window it places after the change is moved from ``old`` to ``new``.
        """
        cfg, predicted, speed, _, _, weight = held
        was = old.measured.get(obs.config)
        if was is None or cfg not in old.measured:
            return
        change = math.log(obs.speed / was[0])
        if not self.verifier.ran_after(math.log(speed / predicted), change):
            return
        self.ledger.refile(cfg, speed, weight, old, new)
        _log.info("autobyte: %s's %.1f samples/s (predicted %.1f) ran in the new conditions (%s %+.0f%%): "
                  "moved to regime %d", cfg, speed, predicted, obs.config, 100 * math.expm1(change), new.ident)

    def check(self, obs: Observation) -> Decision | None:
        """A check of a window in progress: end a trial this tuner started when it already measures badly."""
        t0 = time.process_time()
        try:
            with self._calls_context():
                return self._check(obs)
        finally:
            self.cpu_s += time.process_time() - t0

    def _check(self, obs: Observation) -> Decision | None:
        if not hasattr(self, "scorer"):
            raise RuntimeError("AutoByteTuner.check called before start(space, initial).")
        if not self.enabled or obs.regime_changed or not (math.isfinite(obs.speed) and obs.speed > 0):
            return None
        if self._held is not None and self._held[0] != obs.config and obs.config in self.ledger.current.measured:
            # measured again here without a change: conditions did not change since the surprise, which was the predictor's
            held, self._held = self._held, None
            self.errors.append(self.scorer.checked(*held[1:5]))
        if self._asked == obs.config:
            # a verification: the detector compared this configuration with its last measurement here and saw no
            # change; a recall probe: the ledger compares its speed with the past regimes' (on recording it)
            d = self._observe(obs)
            return d if d is not None else Decision(
                obs.config, f"answered: {obs.config} judged on one check ({obs.speed:.1f} samples/s)", obs.speed)
        trial = self._trial
        if trial is None or trial[0] != obs.config:
            return None  # only a trial this tuner started, and is running, is acted on
        measured = self.ledger.current.speeds(self.ledger.stale_windows)
        abort = self.aborter.propose(trial, obs.config, obs.speed, measured) if self.aborter is not None else None
        if abort is not None:
            self._window += 1
            recorded = self._record(obs)
            if recorded is None:
                return None
            _, regime = recorded
            regime.misses += 1  # a trial that found nothing faster
            self.trial_record.outcome(obs.config, obs.speed)
            self._trial = None
            self.n_aborts += 1
            return self._decide(obs, abort[0], abort[1], measured[abort[0]])
        horizon = self.ledger.horizon(obs.iteration)
        if horizon < self.short_horizon_iters:
            # conditions expected to last little: the check is the trial's window, judged as one
            d = self._observe(obs)
            if self._trial is trial:
                return None  # the check could not be used (warned): the window goes on
            return d if d is not None else Decision(
                obs.config, f"short: {obs.config} judged on one check ({obs.speed:.1f} samples/s), "
                            f"{horizon:.0f} iterations expected left in these conditions", obs.speed)
        return None  # the trial goes on; nothing recorded (the whole window will be)

    def _decide(self, obs: Observation, cfg: Config, reason: str, predicted: float | None, asks: bool = False) -> Decision:
        self._left = obs.config
        self._asked = cfg if asks else None
        _log.info("autobyte: window %d, %s -> %s: %s", self._window, obs.config, cfg, reason)
        return Decision(cfg, reason, predicted)

    def _log_change(self, obs: Observation, before: Regime, regime: Regime, job: np.ndarray) -> None:
        what = []
        old = before.measured.get(obs.config)
        if old is not None:
            what.append(f"speed {old[0]:.1f} -> {obs.speed:.1f} samples/s under {obs.config} ({100 * (obs.speed / old[0] - 1):+.1f}%)")
        if self._last_job is not None:
            env, e = job[_ENV], self._last_job[_ENV]
            what.extend(f"{_ENV_NAMES[k]} x{math.exp(env[k] - e[k]):.2f}" for k in range(len(_ENV)) if abs(env[k] - e[k]) > math.log(1.1))
        what.append("the controller's detector saw the speed of one configuration change by more than its threshold")
        if self.ledger.recalled is not None:
            known = ", ".join(f"{c} {v:.1f}" for c, v in sorted(regime.speeds(self.ledger.stale_windows).items(), key=lambda x: -x[1])[:3])
            tail = f"these conditions were seen before (regime {regime.ident}): reusing {len(regime.measured)} measurements ({known})"
        else:
            tail = f"new conditions (regime {regime.ident}); what was measured before is kept for when they return"
        _log.info("autobyte: conditions changed at iteration %d: %s; %s.", obs.iteration, "; ".join(what), tail)

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """Everything a decision depends on, in plain types (JSON-safe), the adapted head included.

        An adaptation still running in the background is not waited for: its
        result is dropped, as in-flight work is on restore.
        """
        from ._state import tuner_state

        return tuner_state(self)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output (missing keys keep their current values, unknown ones are ignored).

        Raises:
            ValueError: the saved head's shapes do not match this tuner's network.
        """
        from ._state import load_tuner_state

        load_tuner_state(self, state)
