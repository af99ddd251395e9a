"""The AutoByte tuner's state in plain types (JSON-safe): what its ``state_dict`` saves and ``load_state_dict`` restores (numpy only)."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from autobyte.core.space import Config

from ._plain import _arr, _unarr

if TYPE_CHECKING:
    from ._tuner import AutoByteTuner


def tuner_state(self: AutoByteTuner) -> dict[str, Any]:
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
        "search": None if self.search is None else self.search.state_dict(),
        "begun": cfg(self.begun),
        "head": [[_arr(k), _arr(b)] for k, b in self.net._np_head.d],
    }

def load_tuner_state(self: AutoByteTuner, state: dict[str, Any]) -> None:
    """Restore :meth:`state_dict`'s output (missing keys keep their current values, unknown ones are ignored).

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
    if self.search is not None and state.get("search") is not None:
        self.search.load_state_dict(state["search"])
    if state.get("begun") is not None:
        self.begun = cfg(state["begun"])
