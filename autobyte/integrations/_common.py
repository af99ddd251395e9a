"""What every framework callback validates the same way."""

from __future__ import annotations

from typing import Any

from ..core._checks import check_bool, check_int, check_positive
from ..core.space import Config, SearchSpace
from ..core.tuning import Tuner


def check_tuning_args(
    tuner: Any, partition_bytes: Any, credit_bytes: Any, window_iters: Any, warmup_iters: Any,
    space: Any, verbose: Any, timeout_s: Any,
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
    initial = Config(partition_bytes, credit_bytes)
    check_int("window_iters", window_iters)
    check_int("warmup_iters", warmup_iters, minimum=0)
    if space is not None and not isinstance(space, SearchSpace):
        raise TypeError(f"space must be an autobyte SearchSpace or None, but got space={space!r}.")
    check_bool("verbose", verbose)
    check_positive("timeout_s", timeout_s, "seconds")
    return initial
