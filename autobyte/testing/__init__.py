"""Test helpers that ship with autobyte: real multi-rank launches and the contract suites.

* :func:`run_ranks` runs ``python argv`` as N ranks on this host with the
  ``torch.distributed`` ``env://`` variables set (as ``torchrun`` does).
  (``launch`` is its former name, kept one release with a
  :class:`DeprecationWarning`; ``autobyte launch`` is the command that runs
  workers in shaped network namespaces.)
* :class:`SwitchOnce` and :class:`AlwaysMove`: scripted tuners whose
  decisions are known in advance.
* :mod:`autobyte.testing.tuner_contract`: the checks every
  :class:`~autobyte.core.tuning.Tuner` passes (run them on your own tuner).
* :mod:`autobyte.testing.engine_contract`: the checks every communication
  engine passes, on real ranks (torch on gloo, MXNet KVStore ``dist_sync`` on
  loopback, Horovod where installed).

Both suites are plain functions that raise :class:`AssertionError` with a
message; ``tests/contract/`` runs them over every registered implementation.
"""

from __future__ import annotations

from typing import Any

from ._launch import RankResult, exit_rank, free_port, run_ranks
from ._tuners import AlwaysMove, SwitchOnce

__all__ = ["AlwaysMove", "RankResult", "SwitchOnce", "exit_rank", "free_port", "run_ranks"]


def __getattr__(name: str) -> Any:
    if name == "launch":  # the former name of run_ranks: warns when called
        from ._launch import launch

        return launch
    raise AttributeError(f"module 'autobyte.testing' has no attribute {name!r}")
