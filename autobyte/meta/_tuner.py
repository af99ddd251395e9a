"""AutoByte's tuner: the policies of ``_policies.py`` composed, and the head's online adaptation (:class:`Adapter`)."""

from __future__ import annotations

import copy
import logging
import math
import os
import queue
import subprocess
import sys
import threading
import time
import warnings
from collections import deque
from typing import Any

import numpy as np

from autobyte.core._checks import check_fraction
from autobyte.core.space import Config, SearchSpace
from autobyte.core.tuning import SETTLE_MODES, Decision, Observation, Tuner

from . import _adapt_worker
from ._adapt_worker import fit_head
from ._history import JobHistory, new_job_id
from ._network import MetaNetwork, _Head
from ._simscore import SimPredictor
from ._policies import Aborter, Explorer, Learner, Ledger, Mover, Payoff, Regime, Scorer, Scores, Verifier, _arr, _check_range, _unarr

_log = logging.getLogger("autobyte.meta")
#: the smallest scale a trial's gain is shrunk to: ``shrink``'s lower bound, and the floor of one taken from a history
SPREAD_FLOOR = 1e-3

#: Where the tuner's predictions come from (``AutoByteTuner(predictor=...)``).
PREDICTORS = ("network", "simulator", "simulator-fit")
#: Indices of the job vector that describe the environment (compute and bandwidth), used to detect a change.
_ENV = [5, 6, 7, 8, 9, 10, 11]
#: Their names, for the log.
_ENV_NAMES = ["compute time", "forward time", "straggling", "min uplink bandwidth", "mean uplink bandwidth",
              "min downlink bandwidth", "mean downlink bandwidth"]


class Adapter:
    """Fine-tunes the meta-network's head on one job's observations, encoder frozen.

    With ``background=True`` the training step never waits: by default the fit
    runs in a separate process (``process=True``; :mod:`autobyte.meta._adapt_worker`,
    started at the first adaptation, numpy only, at a lower CPU priority), so
    its tight loop never holds the training interpreter's lock; ``process=False``
    runs it in a thread of this process, as before 2026-11-27. Either way the
    new head replaces the old one with one reference swap. If the worker cannot
    start or dies, the adapter warns once and goes on in a thread.

    Args:
        net: the meta-network (its head is updated in place).
        time_budget_s: wall-clock bound of one adaptation (1.0).
        learning_rate: Adam step size (3e-3).
        max_epochs: full-batch steps over the replay buffer (300), cut by the time budget.
        anchor: L2 pull towards the offline head weights (L2-SP), against forgetting (1e-2).
        n_layers: dense layers of the head fine-tuned, counted from the output (1..3).
            Few, small steps on the head only keep the offline knowledge.
        process: background adaptations run in a worker process (True) or a thread (False).

    Raises:
        ValueError: an argument out of range.
    """

    def __init__(
        self, net: MetaNetwork, *, time_budget_s: float = 1.0, learning_rate: float = 3e-3, max_epochs: int = 300,
        anchor: float = 1e-2, n_layers: int = 3, process: bool = True,
    ) -> None:
        for name, v in (("time_budget_s", time_budget_s), ("learning_rate", learning_rate)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                raise ValueError(f"{name} must be a positive finite number, but got {name}={v!r}.")
        if isinstance(max_epochs, bool) or not isinstance(max_epochs, int) or max_epochs < 1:
            raise ValueError(f"max_epochs must be a positive integer, but got max_epochs={max_epochs!r}.")
        self.net = net
        self.time_budget_s = float(time_budget_s)
        self.learning_rate = float(learning_rate)
        self.max_epochs = max_epochs
        if isinstance(anchor, bool) or not isinstance(anchor, (int, float)) or not math.isfinite(anchor) or anchor < 0:
            raise ValueError(f"anchor must be a non-negative finite number, but got anchor={anchor!r}.")
        self.anchor = float(anchor)
        if n_layers not in (1, 2, 3):
            raise ValueError(f"n_layers must be 1, 2 or 3 (dense layers of the head fine-tuned, from the top), but got n_layers={n_layers!r}.")
        self.n_layers = n_layers
        if not isinstance(process, bool):
            raise ValueError(f"process must be True (adapt in a worker process) or False (in a thread), but got process={process!r}.")
        self.process = process
        self._offline = [p.copy() for kb in net._np_head.d for p in kb]
        self._thread: threading.Thread | None = None
        self._worker: _Worker | None = None
        self._lock = threading.Lock()
        self._answered = threading.Event()
        self._answered.set()
        self._generation = 0  # a cancelled request's answer (older generation) is dropped
        self.n_runs = 0
        self.last_duration_s = 0.0
        self.total_s = 0.0
        #: CPU seconds the fits took, wherever they ran (the worker reports its own)
        self.cpu_s = 0.0
        self.last_steps = 0
        self.last_loss: tuple[float, float] | None = None
        #: the worker process's pid once it answered (``None``: no answer from a worker yet)
        self.worker_pid: int | None = None

    @property
    def running(self) -> bool:
        return (self._thread is not None and self._thread.is_alive()) or not self._answered.is_set()

    def _options(self) -> dict[str, Any]:
        return {"learning_rate": self.learning_rate, "max_epochs": self.max_epochs, "anchor": self.anchor,
                "n_layers": self.n_layers, "time_budget_s": self.time_budget_s}

    def start(self, emb: np.ndarray, cand: np.ndarray, y: np.ndarray, *, background: bool = True) -> bool:
        """Start one adaptation on rows ``(emb, cand) -> y``; ``False`` if one is still running."""
        if self.running:
            return False
        args = (emb.astype(np.float32), cand.astype(np.float32), y.astype(np.float32))
        if background and self.process and self._send(*args):
            return True
        if background:
            self._thread = threading.Thread(target=self._run, args=args, name="autobyte-adapt", daemon=True)
            self._thread.start()
        else:
            self._run(*args)
        return True

    def join(self, timeout: float | None = None) -> None:
        """Wait for the adaptation in progress (thread or worker) to end, at most ``timeout`` seconds."""
        if self._thread is not None:
            self._thread.join(timeout)
        self._answered.wait(timeout)

    def cancel(self) -> None:
        """Drop the result of the adaptation in progress (restoring a saved head: in-flight work is not kept)."""
        with self._lock:
            self._generation += 1
            self._answered.set()

    def close(self) -> None:
        """Stop the worker process, if one runs (it also stops by itself when this process exits)."""
        worker, self._worker = self._worker, None
        if worker is not None:
            worker.close()
        self.cancel()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    # -------------------------------------------------------------- the worker
    def _send(self, emb: np.ndarray, cand: np.ndarray, y: np.ndarray) -> bool:
        """Hand the fit to the worker process; ``False`` (thread from now on) when it cannot start or is gone."""
        head = self.net._np_head
        request = {"params": [p for kb in head.d for p in kb], "offline": self._offline, "cn": head.cn,
                   "emb": emb, "cand": cand, "y": y, "options": self._options()}
        with self._lock:
            try:
                if self._worker is None:
                    self._worker = _Worker(self._answer)
                self._answered.clear()
                self._worker.send(request, (self._generation, head.cn))
                return True
            except (OSError, ValueError) as exc:
                self._answered.set()
                self._fall_back(f"cannot reach the adaptation worker ({exc})")
                return False

    def _answer(self, worker: _Worker, answer: dict[str, Any] | None, tag: Any) -> None:
        """Called by ``worker``'s reader thread with each answer (``None``: the worker is gone)."""
        with self._lock:
            if answer is None:
                if self._worker is worker:  # not one closed on purpose
                    self._fall_back("the adaptation worker exited")
                self._answered.set()
                return
            generation, cn = tag if tag is not None else (-1, None)
            self.n_runs += 1
            self.last_duration_s = float(answer["wall_s"])
            self.total_s += self.last_duration_s
            self.cpu_s += float(answer["cpu_s"])
            self.worker_pid = int(answer["pid"])
            if "error" in answer:
                _log.warning("autobyte: online adaptation failed (%s); keeping the previous predictor.", answer["error"])
            elif generation == self._generation and cn is not None:
                p = answer["params"]
                self.net._np_head = _Head(cn, [(p[0], p[1]), (p[2], p[3]), (p[4], p[5])])  # one reference swap
                self.last_loss = tuple(answer["loss"])  # type: ignore[assignment]
                self.last_steps = int(answer["steps"])
            if generation == self._generation:  # a cancelled fit's answer does not end the one sent after it
                self._answered.set()

    def _fall_back(self, why: str) -> None:
        _log.warning("autobyte: %s; online adaptation goes on in a thread of this process.", why)
        self.process = False
        worker, self._worker = self._worker, None
        if worker is not None:
            worker.close()

    # ------------------------------------------------------------ in this process
    def _run(self, emb: np.ndarray, cand: np.ndarray, y: np.ndarray) -> None:
        t0, c0 = time.perf_counter(), time.thread_time()
        generation = self._generation
        head = self.net._np_head
        try:
            params, first, last, steps = fit_head(
                [p for kb in head.d for p in kb], self._offline, head.cn, emb, cand, y, t0=t0, **self._options())
            if generation == self._generation:
                self.net._np_head = _Head(head.cn, [(params[0], params[1]), (params[2], params[3]), (params[4], params[5])])
                self.last_loss = (first, last)
                self.last_steps = steps
        except Exception as exc:  # never let adaptation take training down
            _log.warning("autobyte: online adaptation failed (%s); keeping the previous predictor.", exc)
        finally:
            dt = time.perf_counter() - t0
            self.last_duration_s = dt
            self.total_s += dt
            self.cpu_s += time.thread_time() - c0
            self.n_runs += 1


class _Worker:
    """The adaptation worker process and the thread that reads its answers.

    ``on_answer(worker, answer, tag)`` is called from the reader thread for
    each answer with the tag its request was sent with, and once with
    ``answer=None`` when the worker's output ends (it exited or was closed).
    """

    def __init__(self, on_answer: Any) -> None:
        env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        self.proc = subprocess.Popen([sys.executable, "-u", _adapt_worker.__file__], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=env, close_fds=True)
        self._tags: deque[Any] = deque()
        self._on_answer = on_answer
        self._outbox: queue.SimpleQueue[dict[str, Any] | None] = queue.SimpleQueue()
        self._reader = threading.Thread(target=self._read, name="autobyte-adapt-reader", daemon=True)
        self._writer = threading.Thread(target=self._write, name="autobyte-adapt-writer", daemon=True)
        self._reader.start()
        self._writer.start()

    def send(self, request: dict[str, Any], tag: Any) -> None:
        """Queue one request; the writer thread sends it (a pipe write may wait for the worker to read)."""
        if self.proc.poll() is not None:
            raise OSError(f"the worker exited with code {self.proc.returncode}")
        self._tags.append(tag)
        self._outbox.put(request)

    def _write(self) -> None:
        assert self.proc.stdin is not None
        try:
            while (request := self._outbox.get()) is not None:
                _adapt_worker.write_message(self.proc.stdin, request)  # type: ignore[arg-type]
            self.proc.stdin.close()  # the worker ends at end of input
        except (OSError, ValueError) as exc:  # the worker is gone: the reader sees its output end
            _log.debug("autobyte: cannot write to the adaptation worker (%s)", exc)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        try:
            while True:
                answer = _adapt_worker.read_message(self.proc.stdout)  # type: ignore[arg-type]
                if answer is None:
                    break
                self._on_answer(self, answer, self._tags.popleft() if self._tags else None)
        except Exception as exc:  # a garbled stream: treat as the worker gone
            _log.debug("autobyte: adaptation worker output unreadable (%s)", exc)
        self._on_answer(self, None, None)

    def close(self) -> None:
        self._outbox.put(None)  # the writer closes the worker's input after what is queued
        try:
            self.proc.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            self.proc.kill()


class AutoByteTuner(Tuner):
    """AutoByte: measured speeds first, the meta-network to choose what to measure.

    A composition of small policies (``autobyte/meta/_policies.py``), asked in
    this order every window:

    1. :class:`~autobyte.meta._policies.Scorer` predicts every candidate's
       speed, anchored on the speed observed for the configuration in force.
    2. :class:`~autobyte.meta._policies.Ledger` files the window under its
       regime (set of conditions). When the controller's detector saw
       conditions change, a past regime whose measurement of the configuration
       in force matches is recalled with all it measured; otherwise a new one
       starts. Nothing measured is forgotten at a change.
    3. :class:`~autobyte.meta._policies.Learner` labels pairs of windows and
       adapts the network's head when a checked prediction was wrong.
    4. :class:`~autobyte.meta._policies.Mover` goes to the fastest
       configuration measured in this regime when it beats the one in force
       (after a trial that measured slower, that is the rollback).
    5. :class:`~autobyte.meta._policies.Verifier` re-measures the
       configuration a trial left when the trial ran far from its prediction,
       so a change of conditions at that moment is not taken for the trial's
       speed (the detector sees it on the configuration re-measured); when the
       change accounts for the trial's surprise, the trial's measurement is
       moved to the new conditions' regime (``refile``).
    6. :class:`~autobyte.meta._policies.Explorer` tries the unmeasured
       candidate whose expected gain over the time left in this regime
       (recurrences included) most exceeds the trial's expected cost, inside
       the controller's do-no-harm allowance; none when no trial pays.

    At a check of a window still in progress (:meth:`check`), during a trial
    it started, :class:`~autobyte.meta._policies.Aborter` ends the trial when
    it already runs more than ``abort_margin`` below the fastest
    configuration measured in this regime: the check is recorded as a
    measurement (half a window: scorer error, ledger, learner, as a window
    is) and the run goes back to that configuration, which re-measures it
    (so the detector sees a change of conditions there, as the verifier's
    re-measurement would). When the trial holds up but the conditions are
    expected to last less than ``short_horizon_iters``, the check is the
    trial's window: the policies above decide on it (half a window) at once.
    Outside a trial, or otherwise, a check changes nothing and the window goes on.

    Each decision is logged on ``autobyte.meta`` with what was measured, what
    was predicted and why; a window that keeps the configuration logs why at
    DEBUG level.

    Args:
        network: the meta-network; ``None`` loads the shipped pretrained weights.
        weights: path to weights saved by ``autobyte train-meta`` (instead of ``network``).
        min_gain: measured advantage needed to move to another measured configuration (0.02).
        max_error: relative error of a checked prediction that starts adaptation (0.10).
        adapt: adapt online at all (True).
        background: adapt in the background (True: the training step never waits); ``False`` runs it
            inline (deterministic, for simulation).
        adapt_process: background adaptations run in a worker process (True, default since 2026-11-27:
            the fit's loop no longer shares the training interpreter's lock; docs/benchmarks.md 7.17)
            or in a thread of this process (False); :class:`Adapter`'s ``process``.
        adapt_time_s: bound of one adaptation (1.0).
        replay_size: rows kept in the replay buffer (256).
        enabled: ``False`` never reconfigures (predictions are still made and logged).
        explore: try unmeasured candidates at all (True); ``False`` moves only between measured ones.
        remember: recall past regimes when their conditions return (True).
        trial_iters: iterations one trial costs (12: a window of 10 and 2 warm-up iterations).
        max_distance: powers of two a trial may reach from the nearest measured configuration (2.0; 3.0 before
            2026-11-26: trials 3 powers beyond a measured partition, at 16-32 KiB, ran 3-4x slower than predicted on real runs).
        verify: re-measure the configuration a trial left when the trial ran
            far from its prediction (True).
        abort_margin: a trial measured at a check more than this below the
            fastest configuration measured in this regime is ended there
            (0.10; in [0.001, 0.9]); ``None`` never ends a trial early. The
            explorer counts a trial that would be ended at 7 iterations (half
            a window and the warm-up), not ``trial_iters``.
        short_horizon_iters: while the regime is expected to last fewer
            iterations than this (:meth:`Ledger.horizon
            <autobyte.meta._policies.Ledger.horizon>`, known once a regime has
            ended), a trial that holds up at its first check is judged on that
            check alone, as a window of its own (100; ``None``: trials run
            their whole window unless aborted).
        equivalent: treat candidates that run the same schedule on this
            job's gradients as one (:class:`~autobyte.meta._policies.Equivalence`:
            one prediction, measured once any member is, tried once; True).
        calibrate: scale the network's predicted log ratios by their slope
            against what was measured on this job (:class:`~autobyte.meta._policies.Scorer`; True).
        near_best: a trial stays within ``max_distance`` of a configuration
            measured within this fraction of the best measured in the regime
            (:class:`~autobyte.meta._policies.Explorer`'s trust region; ``None``: of any measured one).
        min_predicted_gain: a trial's prediction must beat the best measured
            in the regime by this much (``None``: the expected improvement alone decides).
        refile: a measurement far from its prediction, followed by a change of
            conditions seen on another configuration that accounts for it (the
            measurement divided by the change is within the verifier's 50% of
            its prediction), is moved to the new conditions' regime (it ran in
            them: the change came before it); ``False`` leaves it where it was
            filed (True).
        tail: a trial must fit the guard's allowance even if it falls as far
            below its prediction as the worst miss measured on this job
            (:meth:`Scorer.downside <autobyte.meta._policies.Scorer.downside>`;
            True); ``False``: one demonstrated error below.
        debias: the explorer lowers every candidate's prediction by how far
            below their predictions this job's trials ran (the winner's curse
            of picking the best of many predictions;
            :meth:`Scorer.trial_bias <autobyte.meta._policies.Scorer.trial_bias>`);
            ``False`` (default; measured on real runs: fewer trials, the same
            throughput, docs/benchmarks.md 7.6): predictions as scored.
        payoff: the explorer scales every expected gain by the share of their
            expected gain this job's trials realised (:class:`~autobyte.meta._policies.Payoff`:
            after trials that found nothing faster it explores less, in every
            regime); ``False`` (default): expected gains as the error model gives them.
            The record is kept (and logged) either way.
        time_units: the explorer weighs a trial's gain and cost in
            iterations' worth of time (:class:`~autobyte.meta._policies.Explorer`):
            a candidate that may run 10x slower costs 9 iterations per
            iteration, not log 10 = 2.3; ``False`` (default): in log speed ratios.
        predictor: ``"network"`` (default): the meta-network predicts every
            candidate's speed ratio, and adapts online; ``"simulator"``: the
            simulator, built from the window's own statistics, predicts them
            (:class:`~autobyte.meta._simscore.SimPredictor`; simulated once per
            regime; the head is not adapted, nothing reads it);
            ``"simulator-fit"``: the same, with the simulated per-message cost
            fitted to the speeds measured in the current conditions (anew each
            time a configuration is measured there for the first time).
        within_phase: a trial starts only when it can end before the
            conditions are expected to change, and its gain counts from its
            end (:class:`~autobyte.meta._policies.Explorer`); ``False``
            (default): any time, gains over the whole horizon.
        answer_at_check: a window run to answer a question (the verifier's
            re-measurement of the configuration a surprising trial left, a
            recall probe) is judged at its first check when that check shows
            no change of conditions: the detector compared the configuration
            with its last measurement there, which is the answer; the rest of
            the window would only re-measure it (True). ``False``: such a
            window runs whole.
        settle: how the controller tells this tuner of a change of
            conditions (:class:`~autobyte.core.tuning.Controller`):
            ``False`` (default): at the check that shows it, its speed the
            new regime's first measurement; ``"notify"``: at that check,
            marked mixed, its speed kept by no one (faster on the real
            README scenario with ``rate_rise``, slower on the simulator,
            whose changes fall on check boundaries: docs/benchmarks.md
            7.12); ``True``: at the next check.
        rate_rise: the controller's detector also takes a rise of the
            achieved link rate by this much, past what configurations of
            partitions as large achieved in this regime, as a faster link,
            whatever configuration runs
            (:class:`~autobyte.core.regime.RegimeDetector`; 0.5, default
            since stop 29; ``None``: the speed rule alone).
        step_change: the controller's detector also takes a step of more
            than this in rank 0's iteration times inside one check as a change
            of conditions inside it (:func:`~autobyte.core.regime.within_step`),
            and drops that check as mixing both regimes, telling this tuner at
            once (``Observation.mixed``; :meth:`_mixed`): a trial or a probe
            across a change is not filed as a measurement of either (0.5,
            default since stop 34; docs/benchmarks.md 7.17); ``None``: not read.
        noise_z: the controller's detector takes a configuration's speed
            moved by more than this many scatters of the job's own pairs of
            measurements of one configuration as a change, where that is more
            than its 15% (:class:`~autobyte.core.regime.RegimeDetector`
            ``noise_z``; at most 50%): a host whose checks scatter widely
            does not start a regime, with its trials, at every odd check
            (3.0, default since stop 37: on the H100's runs no false alarm
            left of 19, on the CPU testbed's 12-62% fewer and 1 real change of
            339 missed, the simulator unchanged; docs/benchmarks.md 7.20;
            ``None``: the fixed threshold only).
        mover_z: the mover judges a configuration in force that has run 2
            windows or more here by its mean over the last windows, not by the
            window just measured, and leaves it only when another's mean beats
            it by this many standard deviations
            of the difference of the two means as well as by ``min_gain``
            (:class:`~autobyte.meta._policies.Mover` ``noise_z``; the scatter
            is the ledger's own, from windows of one configuration measured
            again in unchanged conditions). ``None`` (default): ``min_gain``
            against the window just measured, which on the CPU testbed and
            the H100 one window in 4-5 falls short of on noise alone
            (docs/benchmarks.md 7.22).
        shrink: the explorer values a trial by what trials won on this job:
            each predicted gain shrunk to the scale of the improvements this
            job's trials found (:meth:`Payoff.spread
            <autobyte.meta._policies.Payoff.spread>`, starting from
            ``shrink``, in log units, worth one trial), and only the
            improvement beyond ``min_gain`` (what the mover acts on) counted
            (:class:`~autobyte.meta._policies.Explorer`'s ``spread`` and
            ``gain_floor``); costs as predicted. 0.05 (default since stop 31:
            on the real full suite the same speed on the tuning scenarios and
            +1.6 points held out, fewer trials; docs/benchmarks.md 7.14).
            ``None``: every predicted improvement as it is.
        history_dir: a folder shared by the jobs of one cluster
            (:class:`~autobyte.meta.JobHistory`): the job starts at
            the configuration past jobs measured fastest against the one given
            (when it won by ``min_gain`` over 2+ regimes; the reason is
            :attr:`started_from`, logged) and keeps what it measures there, one
            file per job, rewritten at every window. ``None`` (default): no history.
        history_write: add this job's measurements to ``history_dir``
            (``False``: read only, e.g. a job judged on a history it must not add to).
        history_veto: with ``history_dir``, the explorer does not try a
            configuration past jobs measured slower than the start by more
            than ``min_gain`` (:meth:`JobHistory.plan
            <autobyte.meta.JobHistory.plan>`; logged at start): the
            cluster's real measurements overrule the network's prediction.
            What this job measures itself is still moved to (True).
        history_spread: with ``history_dir`` and ``shrink``, a trial's
            predicted gain starts shrunk to what past jobs' regimes measured
            beyond the start (:class:`HistoryPlan.headroom
            <autobyte.meta._history.HistoryPlan>`: the root mean square, over
            the past regimes that ran the start beside another configuration,
            of how far that regime's fastest ran beyond it; logged at start)
            instead of ``shrink``; this job's own trials then move it as they
            move ``shrink``. Where past jobs found nothing faster than the
            start, trials rarely pay; where they did, as before. Used only
            when 2+ past regimes measured the start beside another
            configuration (False).
        clean_check: a check of a configuration measured in this regime that
            shows no change, after a surprising measurement, judges the
            surprise as the predictor's (as a window would); without it a
            change seen after that check could be taken to account for the
            surprise and move the measurement to the new conditions (True).
        confirm: a change of conditions seen on one check's speed (the
            detector's speed or link-rate rule) is confirmed before it is
            explored: no trial starts at the check that showed it, and when
            the configuration whose speed showed it runs at its next
            measurement as it ran before the change, the change is withdrawn
            (:class:`Ledger`'s ``withdraw``: the regime left goes on, with its
            measurements and its count of trials that found nothing). On the
            H100, under unchanged conditions, single 5-iteration checks ran
            11-14% off their level and back 2-3 times per 150 iterations;
            each started a regime with one odd measurement as its reference,
            and trials there cost up to 3.4% of a 396-iteration run
            (docs/benchmarks.md 8.5). After a step inside a check (dropped as
            mixed) the next, clean window is the confirmation: a trial may
            start there, and the change is withdrawn when that window runs as
            before the change. Off by default
            (False): on the CPU testbed, where such checks are rarer, it was
            level with the tuner without it (full suite -0.7 / +0.6 points,
            tuning / held out; the README scenario -0.9%; the steady suite
            -0.4% / +3.8%, all within the spread of repeats), on the simulator
            0.2 points below; on the GPU it is not measured yet
            (docs/benchmarks.md 7.19).

    Raises:
        ValueError: bad thresholds, or an unusable weights file.
        FileNotFoundError: ``weights`` does not exist.

    Example:
        >>> tuner = make_tuner("autobyte")                          # doctest: +SKIP
        >>> controller = Controller(tuner, SearchSpace.default(), start, "ps", layer_bytes)  # doctest: +SKIP
    """

    name = "autobyte"

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
        remember: bool = True,
        trial_iters: int = 12,
        max_distance: float = 2.0,
        verify: bool = True,
        abort_margin: float | None = 0.10,
        short_horizon_iters: float | None = 100,
        equivalent: bool = True,
        calibrate: bool = True,
        near_best: float | None = None,
        min_predicted_gain: float | None = None,
        refile: bool = True,
        tail: bool = True,
        debias: bool = False,
        payoff: bool = False,
        time_units: bool = False,
        predictor: str = "network",
        within_phase: bool = False,
        answer_at_check: bool = True,
        clean_check: bool = True,
        settle: bool | str = False,
        rate_rise: float | None = 0.5,
        step_change: float | None = 0.5,
        noise_z: float | None = 3.0,
        mover_z: float | None = None,
        shrink: float | None = 0.05,
        history_dir: str | os.PathLike[str] | None = None,
        history_write: bool = True,
        history_veto: bool = True,
        history_spread: bool = False,
        confirm: bool = False,
    ) -> None:
        if settle not in SETTLE_MODES:
            raise ValueError(f"settle must be False, True or 'notify', but got settle={settle!r}.")
        #: read by the controller (the base class's defaults are False and None)
        self.settle = settle
        self.rate_rise = check_fraction("rate_rise", rate_rise, 100.0, optional=True)
        self.step_change = check_fraction("step_change", step_change, 100.0, optional=True)
        self.noise_z = check_fraction("noise_z", noise_z, 100.0, optional=True)
        if predictor not in PREDICTORS:
            raise ValueError(f"predictor must be one of {PREDICTORS}, but got predictor={predictor!r}.")
        self.predictor = predictor
        if network is not None and weights is not None:
            raise ValueError("pass either network or weights, not both.")
        if isinstance(replay_size, bool) or not isinstance(replay_size, int) or replay_size < 1:
            raise ValueError(f"replay_size must be a positive integer, but got replay_size={replay_size!r}.")
        if isinstance(trial_iters, bool) or not isinstance(trial_iters, int) or trial_iters < 1:
            raise ValueError(f"trial_iters must be a positive integer, but got trial_iters={trial_iters!r}.")
        if network is None:
            network = MetaNetwork.load(weights) if weights is not None else MetaNetwork.load_default()
        self.net = network
        if not isinstance(adapt_process, bool):
            raise ValueError("adapt_process must be True (adapt in a worker process) or False (in a thread), "
                             f"but got adapt_process={adapt_process!r}.")
        self.adapter = Adapter(network, time_budget_s=adapt_time_s, process=adapt_process)
        self.mover = Mover(min_gain, noise_z=check_fraction("mover_z", mover_z, 100.0, optional=True))
        # a trial that the aborter would end costs only its first check (half a window and the warm-up)
        self.explorer = Explorer(trial_iters, max_distance=max_distance, abort_margin=abort_margin,
                                 abort_iters=min(7, trial_iters), near_best=near_best,
                                 min_predicted_gain=min_predicted_gain, time_units=time_units,
                                 within_phase=within_phase,
                                 gain_floor=0.0 if shrink is None else math.log1p(min_gain))
        self.shrink = None if shrink is None else _check_range("shrink", shrink, SPREAD_FLOOR, 10.0)
        self.history = None if history_dir is None else JobHistory(history_dir, write=history_write, min_gain=min_gain)
        self.history_veto = bool(history_veto)
        self.history_spread = bool(history_spread)
        #: configurations the explorer does not try: past jobs measured them slower than the start
        self.slower: frozenset[Config] = frozenset()
        #: the scale a trial's predicted gain is shrunk to before this job's trials say more (``shrink``, or
        #: with ``history_spread`` what past jobs' regimes measured beyond the start); ``None`` without ``shrink``
        self.spread_prior: float | None = self.shrink
        self.job = new_job_id()  # this job's file in the history folder (kept by state_dict: a resumed job goes on in it)
        #: why the job started where it did (the history's reason; ``None`` without a history)
        self.started_from: str | None = None
        self.verifier = Verifier()
        self.verify = bool(verify)
        if short_horizon_iters is not None:
            _check_range("short_horizon_iters", short_horizon_iters, 0, 1e9)
        self.short_horizon_iters = short_horizon_iters
        self.aborter = None if abort_margin is None else Aborter(_check_range("abort_margin", abort_margin, 1e-3, 0.9))
        # the head is what adaptation fits; with the simulator predicting, nothing reads it
        self.learner = Learner(self.adapter, max_error=max_error, replay_size=replay_size, background=background,
                               enabled=adapt and predictor == "network")
        self.enabled = bool(enabled)
        self.explore = bool(explore)
        self.remember = bool(remember)
        self.equivalent = bool(equivalent)
        self.calibrate = bool(calibrate)
        self.refile = bool(refile)
        self.tail = bool(tail)
        self.debias = bool(debias)
        self.payoff = bool(payoff)
        self.answer_at_check = bool(answer_at_check)
        self.clean_check = bool(clean_check)
        self.confirm = bool(confirm)
        self._reset()

    def _reset(self) -> None:
        self.ledger = Ledger(recall=self.remember, withdraw=self.confirm)
        self._window = 0
        self._last_pred: tuple[Config, np.ndarray, np.ndarray, float] | None = None  # last window's config, predictions, raw log ratios, speed
        self._trial: tuple[Config, float, Config] | None = None  # the trial decided last window: config, prediction, left
        self.trial_record = Payoff(time_units=self.explorer.time_units)  # what trials paid against what was expected of them
        # a surprising measurement not yet judged: config, prediction, speed, raw log ratio, anchor, window share
        self._held: tuple[Config, float, float, float, float, float] | None = None
        self._left: Config | None = None  # the configuration the last decision left
        self._asked: Config | None = None  # the configuration the last decision runs to answer a question (verify, recall)
        self._last_job: np.ndarray | None = None
        self.errors: list[float] = []  # relative errors of checked predictions
        self.cpu_s = 0.0
        self.n_decisions = 0
        self.n_trials = 0
        self.n_aborts = 0

    def start(self, space: SearchSpace, initial: Config) -> Config:
        super().start(space, initial)
        if len(space) == 1:
            warnings.warn("autobyte: the search space has one candidate; AutoByte has nothing to tune.", stacklevel=2)
        sim = SimPredictor(space, fit=self.predictor == "simulator-fit") if self.predictor != "network" else None
        self.scorer = Scorer(self.net, space, equivalent=self.equivalent, calibrate=self.calibrate, predictor=sim)
        self._reset()
        self.started_from = None
        self.slower = frozenset()
        self.spread_prior = self.shrink
        if self.history is not None and self.enabled and len(space) > 1:
            plan = self.history.plan(space, initial, exclude=self.job)
            initial, self.started_from = plan.start, plan.reason
            _log.info("autobyte: %s", self.started_from)
            self.slower = plan.slower if self.history_veto else frozenset()
            if self.slower:
                _log.info("autobyte: history: not trying %d configurations past jobs measured slower than %s: %s",
                          len(self.slower), initial, ", ".join(map(str, sorted(self.slower))))
            if self.history_spread and self.shrink is not None and plan.headroom is not None:
                # the smallest shrink allowed: a scale of 0 would rule every trial out for good
                self.spread_prior = max(plan.headroom, SPREAD_FLOOR)
                _log.info("autobyte: history: the fastest configuration of %d past regimes ran %.1f%% (root mean square, "
                          "log units) beyond %s; trials' gains start shrunk to that scale instead of %.1f%%", plan.headroom_regimes,
                          100 * self.spread_prior, initial, 100 * self.shrink)
        return initial

    # ------------------------------------------------------------------ decision
    def observe(self, obs: Observation) -> Decision | None:
        t0 = time.process_time()
        try:
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
            self.scorer.trial(trial[1], obs.speed)
            self.trial_record.outcome(obs.config, obs.speed)
            others = [v for c, v in measured.items() if c != obs.config]
            regime.misses = 0 if others and obs.speed > max(others) * (1 + self.mover.trigger.min_gain) else regime.misses + 1
        else:
            self.trial_record.drop()  # no trial ran this window, or conditions changed under it
        move = self.mover.propose(self._window, measured, obs.config, obs.speed, self._left,
                                  self.ledger.counts(), self.ledger.scatter())
        if move is not None:
            return self._decide(obs, move[0], move[1], measured[move[0]])
        check = self.verifier.propose(trial, obs.config, obs.speed, obs.regime_changed) if self.verify else None
        if check is not None:
            return self._decide(obs, check[0], check[1], measured.get(check[0], obs.speed), asks=True)
        probe = self._probe(obs, sc) if obs.regime_changed else None
        if probe is not None:
            return probe
        if self.explore and not (self.confirm and obs.regime_changed):  # one check's change is confirmed before a trial
            horizon = self.ledger.horizon(obs.iteration)
            trial_cfg = self.explorer.propose(self.space, self.scorer.cands, sc.predicted, measured, obs.config, obs.speed,
                                              self.scorer.sigma(), horizon, obs.harm_allowance, regime.misses,
                                              self.scorer.equivalence, self.scorer.downside() if self.tail else 0.0,
                                              self.scorer.trial_bias() if self.debias else 0.0,
                                              self.trial_record.factor() if self.payoff else 1.0,
                                              self.ledger.left(obs.iteration),
                                              None if self.spread_prior is None else self.trial_record.spread(self.spread_prior),
                                              skip=self.slower)
            if trial_cfg is not None:
                predicted = float(sc.predicted[self.space.index(trial_cfg[0])])
                self._trial = (trial_cfg[0], predicted, obs.config)
                self.trial_record.expect(trial_cfg[0], trial_cfg[2], max(measured.values()))
                self.n_trials += 1
                return self._decide(obs, trial_cfg[0], trial_cfg[1], predicted)
        if _log.isEnabledFor(logging.DEBUG):
            best = max(measured, key=measured.__getitem__)
            _log.debug("autobyte: window %d keeps %s at %.1f samples/s: fastest measured here %s (%.1f), %d measured, "
                       "best predicted %s (%.1f), no trial pays", self._window, obs.config, obs.speed, best, measured[best],
                       len(measured), self.space[int(np.argmax(sc.predicted))], float(np.max(sc.predicted)))
        return None

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
            here = {} if obs.regime_changed else self.ledger.current.speeds(self.ledger.stale_windows)
            sc = self.scorer.score(obs.config, obs.speed, obs.features, changed=obs.regime_changed,
                                   measured={**here, obs.config: obs.speed})
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
                self.errors.append(self.scorer.checked(checked, obs.speed, raw, last[3]))
        before = self.ledger.current
        regime = self.ledger.observe(obs.iteration, obs.config, obs.speed, obs.regime_changed, obs.window_share)
        if held is not None and obs.regime_changed and self.refile and held[0] != obs.config:
            self._refile(held, obs, before, regime)
        if obs.regime_changed:
            self._log_change(obs, before, regime, sc.job.job)
        elif self.ledger.recalled is not None:
            _log.info("autobyte: %s ran %.1f samples/s as in regime %d: these conditions were seen before; reusing "
                      "%d measurements.", obs.config, obs.speed, regime.ident, len(regime.measured))
        self._last_job = sc.job.job
        if self.learner.observe(sc.job, sc.embedding, obs.regime_changed, checked):
            err = abs(obs.speed / checked - 1) if checked else float("nan")
            _log.info("autobyte: prediction error %.1f%% > %.0f%%: adapting on %d observations.", 100 * err,
                      100 * self.learner.trigger.max_error, len(self.learner.rows))
        self.n_decisions += 1
        return sc, regime

    def _refile(self, held: tuple[Config, float, float, float, float, float], obs: Observation, old: Regime, new: Regime) -> None:
        """A surprising measurement, then a change of conditions seen on another configuration: where it belongs.

        The change happened after ``obs.config``'s last measurement in ``old``,
        so possibly before the surprising window. When the change accounts for
        the surprise (the measurement, taken back by the change, is no longer a
        surprise: within the verifier's ``surprise`` of its prediction), that
        window ran in the new conditions: it is moved from ``old`` to ``new``.
        Otherwise it stays: the surprise was the predictor's, and the change
        came after it (a trial 3.8x slower than predicted, then the link 6x
        slower: 0.45 in log units remain, more than log 1.5).
        """
        cfg, predicted, speed, _, _, weight = held
        was = old.measured.get(obs.config)
        if was is None or cfg not in old.measured:
            return
        change, surprise = math.log(obs.speed / was[0]), math.log(speed / predicted)
        if abs(surprise - change) > math.log1p(self.verifier.surprise):
            return
        self.ledger.refile(cfg, speed, weight, old, new)
        _log.info("autobyte: %s's %.1f samples/s (predicted %.1f) ran in the new conditions (%s %+.0f%%): "
                  "moved to regime %d", cfg, speed, predicted, obs.config, 100 * math.expm1(change), new.ident)

    def check(self, obs: Observation) -> Decision | None:
        """A check of a window in progress: end a trial this tuner started when it already measures badly."""
        t0 = time.process_time()
        try:
            return self._check(obs)
        finally:
            self.cpu_s += time.process_time() - t0

    def _check(self, obs: Observation) -> Decision | None:
        if not hasattr(self, "scorer"):
            raise RuntimeError("AutoByteTuner.check called before start(space, initial).")
        if not self.enabled or obs.regime_changed or not (math.isfinite(obs.speed) and obs.speed > 0):
            return None
        if (self.clean_check and self._held is not None and self._held[0] != obs.config
                and obs.config in self.ledger.current.measured):
            # measured again here without a change: conditions did not change since the surprise, which was the predictor's
            held, self._held = self._held, None
            self.errors.append(self.scorer.checked(*held[1:5]))
        if self.answer_at_check and self._asked == obs.config:
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
            self.scorer.trial(trial[1], obs.speed)
            self.trial_record.outcome(obs.config, obs.speed)
            self._trial = None
            self.n_aborts += 1
            return self._decide(obs, abort[0], abort[1], measured[abort[0]])
        if self.short_horizon_iters is not None:
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
        def cfg(c: Config | None) -> list[int] | None:
            return None if c is None else [c.partition_bytes, c.credit_bytes]

        return {
            "window": self._window,
            "job": self.job,
            "slower": sorted([c.partition_bytes, c.credit_bytes] for c in self.slower),
            "spread_prior": self.spread_prior,
            "ledger": self.ledger.state_dict(),
            "scorer": self.scorer.state_dict() if hasattr(self, "scorer") else {},
            "learner": self.learner.state_dict(),
            "trial_record": self.trial_record.state_dict(),
            "mover": self.mover.trigger.state_dict(),
            "trial": None if self._trial is None else [cfg(self._trial[0]), self._trial[1], cfg(self._trial[2])],
            "held": None if self._held is None else [cfg(self._held[0]), *self._held[1:]],
            "last_pred": None if self._last_pred is None else [cfg(self._last_pred[0]), _arr(self._last_pred[1]),
                                                                _arr(self._last_pred[2]), self._last_pred[3]],
            "left": cfg(self._left),
            "asked": cfg(self._asked),
            "last_job": None if self._last_job is None else _arr(self._last_job),
            "errors": list(self.errors),
            "n_decisions": self.n_decisions,
            "n_trials": self.n_trials,
            "n_aborts": self.n_aborts,
            "head": [[_arr(k), _arr(b)] for k, b in self.net._np_head.d],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output (missing keys keep their current values).

        Raises:
            ValueError: the saved head's shapes do not match this tuner's network.
        """
        def cfg(v: Any) -> Config | None:
            return None if v is None else Config(int(v[0]), int(v[1]))

        if "head" in state:
            d = [(_unarr(k), _unarr(b)) for k, b in state["head"]]
            have = [(k.shape, b.shape) for k, b in self.net._np_head.d]
            if [(k.shape, b.shape) for k, b in d] != have:
                raise ValueError(f"state['head'] must have the network's head shapes {have}, "
                                 f"but got {[(k.shape, b.shape) for k, b in d]}.")
            self.adapter.cancel()  # an adaptation in flight fitted the head being replaced: its result is dropped
            head = copy.copy(self.net._np_head)
            head.d = d
            self.net._np_head = head  # one reference swap, as adaptation does
        self._window = int(state.get("window", self._window))
        self.job = str(state.get("job", self.job))
        if "slower" in state:  # as planned at the job's start, not from files other jobs wrote since
            self.slower = frozenset(Config(int(v[0]), int(v[1])) for v in state["slower"])
        if "spread_prior" in state:  # as planned at the job's start, too
            self.spread_prior = None if state["spread_prior"] is None else float(state["spread_prior"])
        self.ledger.load_state_dict(state.get("ledger", {}))
        if hasattr(self, "scorer"):
            self.scorer.load_state_dict(state.get("scorer", {}))
        self.learner.load_state_dict(state.get("learner", {}))
        self.trial_record.load_state_dict(state.get("trial_record", {}))
        self.mover.trigger.load_state_dict(state.get("mover", {}))
        if "trial" in state:
            t = state["trial"]
            self._trial = None if t is None else (cfg(t[0]), float(t[1]), cfg(t[2]))  # type: ignore[assignment]
        if "held" in state:
            h = state["held"]
            # a state saved before the configuration was kept (4 numbers) has nothing to re-file: dropped
            self._held = None if h is None or len(h) != 6 else (cfg(h[0]), *(float(x) for x in h[1:]))  # type: ignore[assignment]
        if "last_pred" in state:
            t = state["last_pred"]
            self._last_pred = None if t is None else (cfg(t[0]), _unarr(t[1]), _unarr(t[2]), float(t[3]))  # type: ignore[assignment]
        if "left" in state:
            self._left = cfg(state["left"])
        if "asked" in state:
            self._asked = cfg(state["asked"])
        if "last_job" in state:
            self._last_job = None if state["last_job"] is None else _unarr(state["last_job"])
        if "errors" in state:
            self.errors = [float(e) for e in state["errors"]]
        self.n_decisions = int(state.get("n_decisions", self.n_decisions))
        self.n_trials = int(state.get("n_trials", self.n_trials))
        self.n_aborts = int(state.get("n_aborts", self.n_aborts))
