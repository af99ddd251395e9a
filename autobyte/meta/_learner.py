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

    #: the adaptation's CPU budget: a fit starts only while the fits so far took at most this share of the wall time
    #: since the job's first window (the first fit always may). Each fit is 0.1-0.6 s of CPU in the adaptation's
    #: worker; where a steady job's noisy windows kept predictions wrong, the fits took 3-8% of an 800-iteration run on
    #: the 2-core CPU testbed, 0-1.2% within this budget, and the tuner ran level with its unbounded self (0.997x over 8
    #: rounds; docs/benchmarks.md 2.9). ``None``: no budget. Background fits only: an inline fit
    #: (``background=False``, for replays and simulations that must decide the same every time) is not held back by a
    #: wall clock.
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

    def observe(self, job: JobInputs, emb: np.ndarray, changed: bool, predicted: float | None) -> bool:
        """Add this window's labels; ``True`` when an adaptation started.

        ``predicted`` is what was predicted for this window's configuration
        when it was chosen (``None``: no prediction to check).
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
        if not (self.enabled and wrong and len(self.rows) >= 2) or (self.background and not self._within_budget(now - self._t0)):
            return False
        e, c, y = (np.array(x) for x in zip(*self.rows))
        return bool(self.adapter.start(e, c, y, background=self.background))

    def _within_budget(self, elapsed_s: float) -> bool:
        """Whether the fits so far took at most :attr:`cpu_share` of ``elapsed_s``; logged when the budget first holds."""
        spent = float(self.adapter.cpu_s)
        if self.cpu_share is None or spent <= self.cpu_share * elapsed_s:
            return True
        if not self.held_back:
            _log.info("autobyte: prediction wrong, not adapting: the fits took %.2f s of CPU, %.1f%% of the job's %.0f s "
                      "so far, over the budget of %g%% (the next fit waits until they are under it)", spent,
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

