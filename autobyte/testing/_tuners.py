"""Scripted tuners for tests: decisions known in advance, through the real window protocol."""

from __future__ import annotations

from typing import Any

from ..core.space import Config
from ..core.tuning import Decision, Observation, Tuner


class SwitchOnce(Tuner):
    """Reconfigures once, at the first window, to ``<partition_bytes, credit_bytes>``.

    A scripted decision that goes through the engine's real window protocol
    (gather on every rank, decide on rank 0, agree, apply at one iteration).
    """

    name = "switch-once"
    guarded = False  # a scripted protocol check: its decision must apply whatever it costs

    def __init__(self, partition_bytes: int, credit_bytes: int) -> None:
        self.target = Config(partition_bytes, credit_bytes)
        self.done = False

    def observe(self, obs: Observation) -> Decision | None:
        if self.done:
            return None
        self.done = True
        return Decision(self.target, "scripted switch")

    def state_dict(self) -> dict[str, Any]:
        return {"done": self.done}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.done = bool(state.get("done", self.done))


class AlwaysMove(Tuner):
    """Moves to another candidate of the space at every window it is asked about."""

    name = "always-move"
    guarded = False  # a scripted protocol check: every move must apply whatever it costs

    def __init__(self) -> None:
        #: windows observed
        self.seen = 0

    def observe(self, obs: Observation) -> Decision | None:
        self.seen += 1
        return Decision([c for c in self.space if c != obs.config][0], "move", predicted_speed=1e9)
