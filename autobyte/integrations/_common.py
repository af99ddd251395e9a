"""What every integration shares: argument validation, callback state, the errors of a lost or mismatched peer."""

from __future__ import annotations

from typing import Any

from ..core._checks import check_bool, check_int, check_positive
from ..core.space import Config, SearchSpace
from ..core.tuning import Tuner
from ..core.wire import AutoWire, check_wire_choice


class PeerLostError(RuntimeError):
    """A peer rank stopped answering (crashed, killed, or hung past the timeout)."""


class CollectiveMismatchError(RuntimeError):
    """Ranks reached different collective calls (e.g. ``reconfigure()`` called on one rank only)."""


def check_tuning_args(
    tuner: Any, partition_bytes: Any, credit_bytes: Any, window_iters: Any, warmup_iters: Any,
    space: Any, verbose: Any, timeout_s: Any, wire: Any = "fp32",
) -> Config:
    """Validate the arguments the callbacks share; return the initial configuration.

    Raises:
        TypeError, ValueError: the first invalid argument, named with its rule and value.
    """
    from ..core.tuners import tuner_names

    if isinstance(tuner, str):
        if tuner not in tuner_names():
            raise ValueError(f"tuner must be one of {tuner_names()}, a Tuner or None, but got tuner={tuner!r}.")
    elif tuner is not None and not isinstance(tuner, Tuner):
        raise TypeError(f"tuner must be a tuner name, an autobyte Tuner or None, but got tuner={tuner!r}.")
    choice = check_wire_choice(wire)
    # wire="auto": the run starts at the preference's 16 bits, the first precision of the first comparison (where
    # they keep the link busy, the only one: WireTuner._link_bound; where compute is the limit, fp32's trial follows
    # and the precision chosen runs from there, after as many iterations at 16 bits as an fp32 start gives them)
    initial = Config(partition_bytes, credit_bytes, choice.low if isinstance(choice, AutoWire) else choice)
    check_int("window_iters", window_iters)
    check_int("warmup_iters", warmup_iters, minimum=0)
    if space is not None and not isinstance(space, SearchSpace):
        raise TypeError(f"space must be an autobyte SearchSpace or None, but got space={space!r}.")
    check_bool("verbose", verbose)
    check_positive("timeout_s", timeout_s, "seconds")
    return initial


class CallbackState:
    """``state_dict``/``load_state_dict`` shared by the framework callbacks.

    The state is plain types (JSON-serialisable): the engine's configuration
    and tuner state, and the decision history. Loaded before fitting starts,
    it is kept and applied when the engine exists.
    """

    handle: Any
    initial: Config
    decisions: list[dict[str, Any]]
    _restored: dict[str, Any] | None
    _active: bool

    def state_dict(self) -> dict[str, Any]:
        """Plain-typed state (configuration, tuner, decisions), saved in checkpoints."""
        if self._restored is not None:
            return self._restored
        engine_state = self.handle.state_dict() if self.handle is not None else {"config": self.initial.to_dict()}
        return {"version": 1, "engine": engine_state, "decisions": [dict(d) for d in self.decisions]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` (tolerant of missing keys); applied when fitting starts."""
        state = {"version": state_dict.get("version", 1), "engine": dict(state_dict.get("engine", {})),
                 "decisions": list(state_dict.get("decisions", []))}
        if self._active:
            self.handle.load_state_dict(state["engine"])
            self.decisions = [dict(d) for d in state["decisions"]]
        else:
            self._restored = state
