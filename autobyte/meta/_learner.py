"""When the tuner adapts the meta-network's head: pairs of windows labelled with their speed ratio (numpy only)."""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from typing import Any

import numpy as np

from autobyte.core.space import Config
from autobyte.core.trigger import AdaptTrigger

from ._features import JobInputs, candidate_features
from ._plain import _arr, _cfg, _check_range, _unarr

_log = logging.getLogger("autobyte.meta")


class Learner:
    """Pairs of windows of one regime, labelled with their speed ratio; adapts the head when predictions are wrong.

    Args:
        adapter: the online adaptation (head fine-tuning).
        max_error: relative error of a checked prediction that starts an adaptation (0.10).
        replay_size: labelled rows kept (256).
        background: adapt in the background (``True``) or inline (deterministic).
        enabled: start adaptations at all (``False``: pairs are still labelled).

    Raises:
        ValueError: ``max_error`` or ``replay_size`` out of range.
    """

    #: the tuner's CPU budget, which the fits keep: a fit starts only while the tuner's calls, the fits so far and one
    #: more fit (their mean) take at most this share of the wall time since the job's first window. Each fit is 0.1-0.6 s
    #: of CPU in the adaptation's worker; where a steady job's noisy windows kept predictions wrong, the fits took 3-8% of
    #: an 800-iteration run on the 2-core CPU testbed, and a budget of the fits' own 1% beside the calls' 0.4-0.8% left
    #: the two at up to 1.56% on held-out jobs (docs/benchmarks.md 2.8, 2.9). ``None``: no budget. Background fits only: an inline fit (``background=False``,
    #: for replays and simulations that must decide the same every time) is not held back by a wall clock.
    cpu_share: float | None = 0.01

    def __init__(self, adapter: Any, *, max_error: float = 0.10, replay_size: int = 256, background: bool = True,
                 enabled: bool = True) -> None:
        self.adapter = adapter
        self.trigger = AdaptTrigger(max_error)
        self.replay_size = int(_check_range("replay_size", replay_size, 1, 1e7))
        self.background = bool(background)
        self.enabled = bool(enabled)
        self.recent: deque[tuple[JobInputs, np.ndarray]] = deque(maxlen=8)
        self.rows: deque[tuple[np.ndarray, np.ndarray, float]] = deque(maxlen=self.replay_size)
        #: when this process saw the job's first window (the budget's clock: a resumed job's fits start at 0 too)
        self._t0: float | None = None
        #: fits the budget held back
        self.held_back = 0

    def observe(self, job: JobInputs, emb: np.ndarray, changed: bool, predicted: float | None,
                tuner_cpu_s: float = 0.0) -> bool:
        """Add this window's labels; ``True`` when an adaptation started.

        ``predicted`` is what was predicted for this window's configuration
        when it was chosen (``None``: no prediction to check);
        ``tuner_cpu_s`` is the CPU the tuner's own calls took so far (the
        budget counts it with the fits').
        """
        if changed:
            self.forget()
        cfg = np.array([[job.current.partition_bytes, job.current.credit_bytes]], dtype=np.float64)
        for past, pemb in self.recent:
            cf = candidate_features(past.layer_bytes, cfg, past.current)
            self.rows.append((pemb[0], cf[0], math.log(job.observed_speed / past.observed_speed)))
        self.recent.append((job, emb))
        now = time.perf_counter()
        self._t0 = now if self._t0 is None else self._t0
        wrong = predicted is not None and self.trigger.should_adapt(predicted, job.observed_speed)
        if not (self.enabled and wrong and len(self.rows) >= 2) or (self.background and not self._within_budget(now - self._t0, tuner_cpu_s)):
            return False
        e, c, y = (np.array(x) for x in zip(*self.rows))
        return bool(self.adapter.start(e, c, y, background=self.background))

    def _spent(self, tuner_cpu_s: float) -> float:
        """The CPU the budget counts if a fit starts now: the tuner's calls, the fits so far and one more (their mean)."""
        fits, runs = float(self.adapter.cpu_s), int(self.adapter.n_runs)
        return tuner_cpu_s + fits + (fits / runs if runs else 0.0)

    def _within_budget(self, elapsed_s: float, tuner_cpu_s: float = 0.0) -> bool:
        """Whether a fit now keeps the tuner within :attr:`cpu_share` of ``elapsed_s``; logged when the budget first holds."""
        spent = self._spent(tuner_cpu_s)
        if self.cpu_share is None or spent <= self.cpu_share * elapsed_s:
            return True
        if not self.held_back:
            _log.info("autobyte: prediction wrong, not adapting: the tuner's calls took %.2f s of CPU and its fits %.2f s; "
                      "with one more fit, %.1f%% of the job's %.0f s so far, over the budget of %g%% (the next fit waits "
                      "until they are under it)", tuner_cpu_s, float(self.adapter.cpu_s),
                      100 * spent / max(elapsed_s, 1e-9), elapsed_s, 100 * self.cpu_share)
        self.held_back += 1
        return False

    def forget(self) -> None:
        """Conditions changed: windows of other conditions are no pair for the next ones."""
        self.recent.clear()

    def state_dict(self) -> dict[str, Any]:
        return {"trigger": self.trigger.state_dict(), "recent": [{"layers": _arr(j.layers), "job": _arr(j.job), "layer_bytes": _arr(j.layer_bytes),
                            "current": _cfg(j.current), "observed_speed": j.observed_speed, "embedding": _arr(e)}
                           for j, e in self.recent],
                "rows": [[_arr(e), _arr(c), y] for e, c, y in self.rows]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.trigger.load_state_dict(state.get("trigger", {}))
        if "recent" in state:
            self.recent.clear()
            for r in state["recent"]:
                job = JobInputs(_unarr(r["layers"]), _unarr(r["job"]), _unarr(r["layer_bytes"]),
                                Config(int(r["current"][0]), int(r["current"][1])), float(r["observed_speed"]))
                self.recent.append((job, _unarr(r["embedding"])))
        if "rows" in state:
            self.rows.clear()
            self.rows.extend((_unarr(e), _unarr(c), float(y)) for e, c, y in state["rows"])

