"""AutoByte's tuner: meta-network predictions + optimization trigger + online adaptation."""

from __future__ import annotations

import copy
import logging
import math
import threading
import time
import warnings
from collections import deque
from typing import Any

import numpy as np

from autobyte.core.space import Config, SearchSpace
from autobyte.core.trigger import AdaptTrigger, GainTrigger
from autobyte.core.tuning import Decision, Observation, Tuner

from ._features import JobInputs, candidate_features, featurize
from ._network import MetaNetwork, _Head

_log = logging.getLogger("autobyte.meta")

#: Indices of the job vector that describe the environment (compute and bandwidth), used to detect a change.
_ENV = [5, 6, 7, 8, 9, 10, 11]
#: Their names, for the log.
_ENV_NAMES = ["compute time", "forward time", "straggling", "min uplink bandwidth", "mean uplink bandwidth",
              "min downlink bandwidth", "mean downlink bandwidth"]


class Adapter:
    """Fine-tunes the meta-network's head on one job's observations, encoder frozen.

    Runs in a background thread (``background=True``) so the training step
    never waits; the new head replaces the old one with one reference swap.

    Args:
        net: the meta-network (its head is updated in place).
        time_budget_s: wall-clock bound of one adaptation (1.0).
        learning_rate: Adam step size (3e-3).
        max_epochs: full-batch steps over the replay buffer (300), cut by the time budget.
        anchor: L2 pull towards the offline head weights (L2-SP), against forgetting (1e-2).
        n_layers: dense layers of the head fine-tuned, counted from the output (1..3).
            Few, small steps on the head only keep the offline knowledge.

    Raises:
        ValueError: an argument out of range.
    """

    def __init__(
        self, net: MetaNetwork, *, time_budget_s: float = 1.0, learning_rate: float = 3e-3, max_epochs: int = 300,
        anchor: float = 1e-2, n_layers: int = 3,
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
        self._offline = [p.copy() for kb in net._np_head.d for p in kb]
        self._thread: threading.Thread | None = None
        self.n_runs = 0
        self.last_duration_s = 0.0
        self.total_s = 0.0
        self.last_loss: tuple[float, float] | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self, emb: np.ndarray, cand: np.ndarray, y: np.ndarray, *, background: bool = True) -> bool:
        """Start one adaptation on rows ``(emb, cand) -> y``; ``False`` if one is still running."""
        if self.running:
            return False
        args = (emb.astype(np.float32), cand.astype(np.float32), y.astype(np.float32))
        if background:
            self._thread = threading.Thread(target=self._run, args=args, name="autobyte-adapt", daemon=True)
            self._thread.start()
        else:
            self._run(*args)
        return True

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self, emb: np.ndarray, cand: np.ndarray, y: np.ndarray) -> None:
        t0 = time.perf_counter()
        try:
            self._fit(emb, cand, y, t0)
        except Exception as exc:  # never let adaptation take training down
            _log.warning("autobyte: online adaptation failed (%s); keeping the previous predictor.", exc)
        finally:
            dt = time.perf_counter() - t0
            self.last_duration_s = dt
            self.total_s += dt
            self.n_runs += 1

    def _fit(self, emb: np.ndarray, cand: np.ndarray, y: np.ndarray, t0: float) -> None:
        # Plain numpy Adam on the head's three dense layers: microseconds per
        # step, no framework, and never touches the encoder.
        head = self.net._np_head
        params = [p.copy() for kb in head.d for p in kb]
        emb = emb.astype(np.float64)
        xc = (cand.astype(np.float64) - head.cn[0]) / head.cn[1]
        x0 = np.concatenate([emb, xc], axis=1)
        y = y.astype(np.float64)
        m = [np.zeros_like(p) for p in params]
        v = [np.zeros_like(p) for p in params]
        b1, b2, lr = 0.9, 0.999, self.learning_rate
        n = len(y)
        first = last = float("nan")
        t_step = 0.0
        for step in range(1, self.max_epochs + 1):
            now = time.perf_counter()
            if now - t0 + 2 * t_step > self.time_budget_s:  # stop before the budget, not after
                break
            k1, c1, k2, c2, k3, c3 = params
            a1 = x0 @ k1 + c1
            h1 = np.maximum(a1, 0.0)
            a2 = h1 @ k2 + c2
            h2 = np.maximum(a2, 0.0)
            out = (h2 @ k3 + c3)[:, 0]
            err = out - y
            loss = float(np.mean(err * err))
            first = loss if step == 1 else first
            last = loss
            g_out = (2.0 / n) * err[:, None]
            g_k3, g_c3 = h2.T @ g_out, g_out.sum(0)
            g_a2 = (g_out @ k3.T) * (a2 > 0)
            g_k2, g_c2 = h1.T @ g_a2, g_a2.sum(0)
            g_a1 = (g_a2 @ k2.T) * (a1 > 0)
            g_k1, g_c1 = x0.T @ g_a1, g_a1.sum(0)
            for i, g in enumerate((g_k1, g_c1, g_k2, g_c2, g_k3, g_c3)):
                if i < 6 - 2 * self.n_layers:
                    continue  # frozen lower layer of the head
                if self.anchor:
                    g = g + 2.0 * self.anchor * (params[i] - self._offline[i])
                m[i] = b1 * m[i] + (1 - b1) * g
                v[i] = b2 * v[i] + (1 - b2) * g * g
                params[i] -= lr * (m[i] / (1 - b1**step)) / (np.sqrt(v[i] / (1 - b2**step)) + 1e-8)
            t_step = max(t_step, time.perf_counter() - now)
        if not all(np.all(np.isfinite(p)) for p in params):
            raise FloatingPointError("adaptation diverged")
        new = _Head(head.cn, [(params[0], params[1]), (params[2], params[3]), (params[4], params[5])])
        self.net._np_head = new  # one reference swap: scoring never sees a half-updated head
        self.last_loss = (first, last)


#: A trust region this wide spans every partition size (2**64 bytes).
_MAX_REACH = 64.0


class AutoByteTuner(Tuner):
    """AutoByte: reconfigure to the meta-network's best predicted candidate when it pays.

    Every window: featurise every worker's statistics, score the whole search
    space in one batched call, ask :class:`~autobyte.core.trigger.GainTrigger`
    whether the best beats the configuration in force (measured speeds of this
    regime override predictions), and adapt the network online when
    :class:`~autobyte.core.trigger.AdaptTrigger` says it is wrong. After a move
    that made training slower, it moves back (rollback). Decisions are logged
    on ``autobyte.meta`` with their reason.

    Args:
        network: the meta-network; ``None`` loads the shipped pretrained weights.
        weights: path to weights saved by ``autobyte train-meta`` (instead of ``network``).
        min_gain: predicted gain needed to reconfigure (0.05).
        max_error: prediction error that starts adaptation (0.10).
        adapt: adapt online at all (True).
        background: adapt in a background thread (True); ``False`` runs it inline (deterministic, for simulation).
        adapt_time_s: bound of one adaptation (1.0).
        replay_size: rows kept in the replay buffer (256).
        enabled: ``False`` never reconfigures (predictions are still logged).
        explore_gain: once per regime (start, or after conditions changed), try
            the best configuration not yet measured when its predicted gain is
            above this value (-0.03: within the predictor's typical error of
            the current speed, so a current config wrongly predicted best still
            gets challenged); ``None`` never explores. A measured loss of more
            than 1% is rolled back the next window.
        reach: trust region of moves to configurations not measured in this
            regime, in powers of two of the partition size around the
            current one (4.0: at most 16x smaller or larger). It doubles after
            each move predicted within ``max_error`` and halves (down to 1)
            after a worse one or a rollback, and it outlives changes of
            conditions: a predictor that proved wrong on this cluster takes
            small steps. ``None``: no limit.

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
        min_gain: float = 0.05,
        max_error: float = 0.10,
        adapt: bool = True,
        background: bool = True,
        adapt_time_s: float = 1.0,
        replay_size: int = 256,
        enabled: bool = True,
        explore_gain: float | None = -0.03,
        reach: float | None = 4.0,
    ) -> None:
        if network is not None and weights is not None:
            raise ValueError("pass either network or weights, not both.")
        if explore_gain is not None and (isinstance(explore_gain, bool) or not isinstance(explore_gain, (int, float)) or not math.isfinite(explore_gain) or not -0.5 <= explore_gain <= 10):
            raise ValueError(f"explore_gain must be a finite number in [-0.5, 10] or None, but got explore_gain={explore_gain!r}.")
        self.explore_gain = explore_gain
        if reach is not None and (isinstance(reach, bool) or not isinstance(reach, (int, float)) or not math.isfinite(reach) or reach < 1):
            raise ValueError(f"reach must be a finite number >= 1 or None, but got reach={reach!r}.")
        self.reach = _MAX_REACH if reach is None else float(reach)
        if isinstance(replay_size, bool) or not isinstance(replay_size, int) or replay_size < 1:
            raise ValueError(f"replay_size must be a positive integer, but got replay_size={replay_size!r}.")
        if network is None:
            network = MetaNetwork.load(weights) if weights is not None else MetaNetwork.load_default()
        self.net = network
        self.gain = GainTrigger(min_gain)
        self.error = AdaptTrigger(max_error)
        self.adapter = Adapter(network, time_budget_s=adapt_time_s)
        self.adapt = bool(adapt)
        self.background = bool(background)
        self.enabled = bool(enabled)
        self.replay_size = replay_size
        self._reset()

    def _reset(self) -> None:
        self._window = 0
        self._pred_next: float | None = None  # prediction for the config in force next window
        self._recent: deque[tuple[JobInputs, np.ndarray]] = deque(maxlen=8)  # (inputs, embedding) of this regime
        self._rows: deque[tuple[np.ndarray, np.ndarray, float]] = deque(maxlen=self.replay_size)
        self._measured: dict[Config, float] = {}
        self._explored = False
        self._exploring = False  # the last decision was an exploration
        self._moved = False  # the last decision moved to a configuration predicted, not measured
        self._move_error = 0.0  # how wrong that prediction was
        self._bar = 1.0  # doubles after each rollback; halves when conditions change
        self._reach = self.reach  # trust region: log2 partition distance a move to an unmeasured config may span
        self._prev: tuple[Config, float] | None = None  # config and speed before the last move
        self._judged = True  # the last move was measured against the config it left, in one regime
        self._unjudged: Config | None = None  # a config left by a move that conditions changed before judging
        self._last_env: tuple[Config, np.ndarray, float] | None = None
        self.errors: list[float] = []
        self.cpu_s = 0.0
        self.n_decisions = 0

    def start(self, space: SearchSpace, initial: Config) -> Config:
        super().start(space, initial)
        if len(space) == 1:
            warnings.warn("autobyte: the search space has one candidate; AutoByte has nothing to tune.", stacklevel=2)
        self._cands = space.to_array()
        self._reset()
        return initial

    # ------------------------------------------------------------------ decision
    def observe(self, obs: Observation) -> Decision | None:
        t0 = time.process_time()
        try:
            return self._observe(obs)
        finally:
            self.cpu_s += time.process_time() - t0

    def _observe(self, obs: Observation) -> Decision | None:
        if not hasattr(self, "_cands"):
            raise RuntimeError("AutoByteTuner.observe called before start(space, initial).")
        self._window += 1
        w = self._window
        if not (math.isfinite(obs.speed) and obs.speed > 0):
            warnings.warn(f"autobyte: window at iteration {obs.iteration} has speed {obs.speed!r}; keeping {obs.config}.", stacklevel=3)
            return None
        try:
            job = featurize(obs.features, obs.config, obs.speed)
            emb = self.net.encode(job)
            cand = candidate_features(job.layer_bytes, self._cands, obs.config)
            logr = self.net.head_predict(emb, cand)
            if not np.all(np.isfinite(logr)) or not np.all(np.isfinite(emb)):
                raise ValueError("the meta-network produced NaN or inf")
        except (ValueError, FloatingPointError) as exc:
            warnings.warn(f"autobyte: cannot score window at iteration {obs.iteration} ({exc}); keeping {obs.config}.", stacklevel=3)
            return None
        changed = self._track_regime(job, obs)
        self._learn(job, emb, obs, changed)
        # calibrate on the configuration in force: its prediction must equal what was observed
        cur_idx = self.space.index(obs.config) if obs.config in self.space else None
        base = logr[cur_idx] if cur_idx is not None else float(self.net.head_predict(emb, candidate_features(job.layer_bytes, np.array([[obs.config.partition_bytes, obs.config.credit_bytes]], float), obs.config))[0])
        pred = obs.speed * np.exp(logr - base)
        for c, v in self._measured.items():  # measurements of this regime beat predictions
            if c in self.space and c != obs.config:
                pred[self.space.index(c)] = v
        if cur_idx is not None:
            pred[cur_idx] = obs.speed
        # trust region: unmeasured configurations only within reach of the current partition
        dist = np.abs(np.log2(self._cands[:, 0] / obs.config.partition_bytes))
        allowed = (dist <= self._reach + 1e-9) | np.array([c in self._measured for c in self.space])
        best = int(np.argmax(np.where(allowed, pred, -np.inf)))
        best_cfg, best_speed = self.space[best], float(pred[best])
        self._pred_next = obs.speed
        self.n_decisions += 1
        if not self.enabled or len(self.space) == 1:
            return None
        # rollback: the last move made things slower, as measured
        tolerance = 0.01 if self._exploring else self.gain.min_gain
        self._exploring = False
        if self._prev is not None and self._prev[0] != obs.config and self._prev[1] > obs.speed * (1 + tolerance):
            back, v = self._prev
            self._prev = None
            self._bar *= 2.0
            self._reach = max(1.0, self._reach / 2)
            self.gain.reset()
            self.gain.should_reconfigure(w, obs.config, obs.speed, back, v)
            self._pred_next = v
            _log.info("autobyte: %s measured %.1f samples/s, slower than %s at %.1f: rolling back.", obs.config, obs.speed, back, v)
            return Decision(back, f"rollback: {obs.config} measured {obs.speed:.1f} < {v:.1f} samples/s of {back}", v)
        if self._prev is not None and self._prev[0] != obs.config:
            self._judged = True
        # a move that conditions changed before it could be judged: measure the
        # config it left in the new conditions too (one window; the 1% rollback
        # rule then keeps the faster), so a wrong move cannot stick unnoticed
        if self._unjudged is not None:
            back, self._unjudged = self._unjudged, None
            if back != obs.config and back not in self._measured and self.gain.should_reconfigure(
                w, obs.config, obs.speed, back, obs.speed * (1 + self.gain.revisit_gain) + 1e-9
            ):
                self._prev, self._exploring, self._judged = (obs.config, obs.speed), True, False
                self._pred_next = None
                reason = f"re-measure: the move away from {back} was not judged before conditions changed"
                _log.info("autobyte: window %d, %s -> %s: %s", w, obs.config, back, reason)
                return Decision(back, reason, None)
        # a move to a configuration never measured here must beat the predictor's
        # own demonstrated error (its last move), and the bar doubles after every rollback
        bar = self._bar * max(self.gain.min_gain, self._move_error)
        trusted = best_cfg in self._measured or best_speed > obs.speed * (1 + bar)
        if trusted and self.gain.should_reconfigure(w, obs.config, obs.speed, best_cfg, best_speed):
            self._moved = best_cfg not in self._measured
            self._prev, self._judged = (obs.config, obs.speed), False
            self._pred_next = best_speed
            gain = best_speed / obs.speed - 1
            reason = f"predicted {best_speed:.1f} samples/s vs {obs.speed:.1f} observed (+{100 * gain:.1f}%)"
            _log.info("autobyte: window %d, %s -> %s: %s", w, obs.config, best_cfg, reason)
            return Decision(best_cfg, reason, best_speed)
        # deliberate exploration, once per regime: the best configuration never
        # measured here, when its prediction is within the predictor's error band
        # of the current speed (or above); one window tells, and a measured loss
        # of more than 1% is rolled back the next window
        if self.explore_gain is not None and not self._explored:
            unmeasured = allowed & np.array([c not in self._measured and c != obs.config for c in self.space])
            if unmeasured.any():
                k = int(np.argmax(np.where(unmeasured, pred, -np.inf)))
                cfg, sp = self.space[k], float(pred[k])
                if sp > obs.speed * (1 + self.explore_gain) and self.gain.should_reconfigure(
                    w, obs.config, obs.speed, cfg, obs.speed * (1 + self.gain.revisit_gain) + 1e-9
                ):
                    self._explored = True
                    self._moved = True
                    self._exploring = True
                    self._prev, self._judged = (obs.config, obs.speed), False
                    self._pred_next = sp
                    reason = f"explore: predicted {sp:.1f} samples/s vs {obs.speed:.1f} observed ({100 * (sp / obs.speed - 1):+.1f}%), unmeasured"
                    _log.info("autobyte: window %d, %s -> %s: %s", w, obs.config, cfg, reason)
                    return Decision(cfg, reason, sp)
        return None

    def _track_regime(self, job: JobInputs, obs: Observation) -> bool:
        """Record ``obs``; True when conditions changed since the last window."""
        env = job.job[_ENV]
        changed = False
        if self._last_env is not None:
            c, e, v = self._last_env
            same = c == obs.config
            env_moved = same and bool(np.max(np.abs(env - e)) > math.log(1.1))
            speed_moved = same and abs(math.log(obs.speed / v)) > math.log(1.1)
            changed = bool(env_moved or speed_moved or obs.regime_changed)
            if changed:
                # say what was seen: a speed change, a change of the measured compute or
                # bandwidth features, or the controller's signal (a change between two
                # checks inside the window, which the window's mean may hide)
                what = []
                if speed_moved:
                    what.append(f"speed {v:.1f} -> {obs.speed:.1f} samples/s under {obs.config} ({100 * (obs.speed / v - 1):+.1f}%)")
                if env_moved:
                    what.extend(f"{_ENV_NAMES[k]} x{math.exp(env[k] - e[k]):.2f}"
                                for k in range(len(_ENV)) if abs(env[k] - e[k]) > math.log(1.1))
                if obs.regime_changed:
                    what.append("the controller saw the speed change by more than its regime_change threshold between two checks")
                _log.info("autobyte: conditions changed at iteration %d: %s; forgetting measurements.", obs.iteration, "; ".join(what))
                self._measured.clear()
                self._recent.clear()
                if self._prev is not None and not self._judged:
                    self._unjudged = self._prev[0]
                self._prev, self._judged = None, True
                # explore again in the new regime, unless the predictor's moves
                # proved wrong on this cluster (its trust region shrank)
                self._explored = self._reach < self.reach
                # what the predictor's moves showed about its accuracy on this
                # cluster (error, bar, reach) outlives the regime; the bar decays
                self._moved, self._bar = False, max(1.0, self._bar / 2)
                self.gain.reset()
        self._last_env = (obs.config, env, obs.speed)
        self._measured[obs.config] = obs.speed
        return changed

    def _learn(self, job: JobInputs, emb: np.ndarray, obs: Observation, changed: bool = False) -> None:
        if changed:  # the last prediction was for other conditions: it says nothing about the predictor
            self._moved, adapting = False, False
        elif self._pred_next is not None:
            err = abs(self._pred_next - obs.speed) / obs.speed
            self.errors.append(err)
            adapting = self.error.should_adapt(self._pred_next, obs.speed)
            if self._moved:
                self._move_error = err
                self._moved = False
                # a move predicted within max_error widens the trust region, a worse one narrows it
                self._reach = min(_MAX_REACH, 2 * self._reach) if err <= self.error.max_error else max(1.0, self._reach / 2)
        else:
            adapting = False
        cfg = np.array([[obs.config.partition_bytes, obs.config.credit_bytes]], dtype=np.float64)
        for past, pemb in self._recent:  # this window's speed labels every earlier window of the regime
            cf = candidate_features(past.layer_bytes, cfg, past.current)
            self._rows.append((pemb[0], cf[0], math.log(obs.speed / past.observed_speed)))
        self._recent.append((job, emb))
        if adapting and self.adapt and len(self._rows) >= 2:
            e, c, y = (np.array(x) for x in zip(*self._rows))
            if self.adapter.start(e, c, y, background=self.background):
                _log.info("autobyte: prediction error %.1f%% > %.0f%%: adapting on %d observations.", 100 * self.errors[-1], 100 * self.error.max_error, len(y))

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
            "gain": self.gain.state_dict(),
            "error": self.error.state_dict(),
            "measured": [[c.partition_bytes, c.credit_bytes, v] for c, v in self._measured.items()],
            "pred_next": self._pred_next,
            "recent": [{"layers": _arr(j.layers), "job": _arr(j.job), "layer_bytes": _arr(j.layer_bytes),
                        "current": cfg(j.current), "observed_speed": j.observed_speed, "embedding": _arr(e)}
                       for j, e in self._recent],
            "rows": [[_arr(e), _arr(c), y] for e, c, y in self._rows],
            "explored": self._explored,
            "exploring": self._exploring,
            "moved": self._moved,
            "move_error": self._move_error,
            "bar": self._bar,
            "reach": self._reach,
            "prev": None if self._prev is None else [cfg(self._prev[0]), self._prev[1]],
            "judged": self._judged,
            "unjudged": cfg(self._unjudged),
            "last_env": None if self._last_env is None else [cfg(self._last_env[0]), _arr(self._last_env[1]), self._last_env[2]],
            "errors": list(self.errors),
            "n_decisions": self.n_decisions,
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
            head = copy.copy(self.net._np_head)
            head.d = d
            self.net._np_head = head  # one reference swap, as adaptation does
        self._window = int(state.get("window", self._window))
        self.gain.load_state_dict(state.get("gain", {}))
        self.error.load_state_dict(state.get("error", {}))
        if "measured" in state:
            self._measured = {Config(int(p), int(c)): float(v) for p, c, v in state["measured"]}
        if "pred_next" in state:
            self._pred_next = None if state["pred_next"] is None else float(state["pred_next"])
        if "recent" in state:
            self._recent.clear()
            for r in state["recent"]:
                job = JobInputs(_unarr(r["layers"]), _unarr(r["job"]), _unarr(r["layer_bytes"]),
                                cfg(r["current"]), float(r["observed_speed"]))  # type: ignore[arg-type]
                self._recent.append((job, _unarr(r["embedding"])))
        if "rows" in state:
            self._rows.clear()
            self._rows.extend((_unarr(e), _unarr(c), float(y)) for e, c, y in state["rows"])
        for key in ("explored", "exploring", "moved", "judged"):
            if key in state:
                setattr(self, "_" + key, bool(state[key]))
        for key in ("move_error", "bar", "reach"):
            if key in state:
                setattr(self, "_" + key, float(state[key]))
        if "prev" in state:
            self._prev = None if state["prev"] is None else (cfg(state["prev"][0]), float(state["prev"][1]))  # type: ignore[assignment]
        if "unjudged" in state:
            self._unjudged = cfg(state["unjudged"])
        if "last_env" in state:
            le = state["last_env"]
            self._last_env = None if le is None else (cfg(le[0]), _unarr(le[1]), float(le[2]))  # type: ignore[assignment]
        if "errors" in state:
            self.errors = [float(e) for e in state["errors"]]
        self.n_decisions = int(state.get("n_decisions", self.n_decisions))


def _arr(a: np.ndarray) -> dict[str, Any]:
    """A numpy array as plain types; float values survive JSON exactly (shortest repr round-trips)."""
    a = np.asarray(a)
    return {"dtype": a.dtype.str, "shape": list(a.shape), "data": a.ravel().tolist()}


def _unarr(d: dict[str, Any]) -> np.ndarray:
    return np.asarray(d["data"], dtype=np.dtype(d["dtype"])).reshape(d["shape"])
