"""autobyte.testbed: real workers in network namespaces joined by ``tc``-shaped links.

``autobyte launch`` (and :func:`launch` / :class:`Testbed`) creates one network
namespace per worker on this host, joins them through a bridge in a namespace
of its own with veth pairs shaped by ``tc`` (``tbf`` for rate, ``netem`` for
latency), runs a command per worker with the ``torch.distributed`` (and
optionally MXNet parameter-server) environment set, follows a bandwidth trace,
and removes everything it made when the run ends. Needs root. See
``docs/testbed.md``.
"""

from __future__ import annotations

from ._control import notify_iteration
from ._launch import Testbed, launch
from ._netns import SUBNET, Network
from ._state import TestbedError, cleanup_runs, default_state_dir
from ._trace import BandwidthTrace, CompetingFlow, RateChange, parse_flow

__all__ = [
    "BandwidthTrace", "CompetingFlow", "Network", "RateChange", "SUBNET", "Testbed", "TestbedError", "cleanup_runs",
    "default_state_dir", "launch", "notify_iteration", "parse_flow",
]
