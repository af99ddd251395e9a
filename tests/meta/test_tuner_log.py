"""AutoByteTuner's log says what changed, and what it does with what it measured before."""

from __future__ import annotations

import dataclasses
import logging

from autobyte import sim
from autobyte.core.space import Config, MiB, SearchSpace
from autobyte.core.tuning import Observation
from autobyte.meta import AutoByteTuner

SPACE = SearchSpace.grid([MiB, 4 * MiB, 16 * MiB], [1, 2, 4])
CFG = Config(4 * MiB, 8 * MiB)


def obs(w: int, gbps: float = 5.0, **kw) -> Observation:
    res = sim.simulate(sim.get_model("resnet50"), sim.Cluster.from_gbps(4, gbps, "ps"), CFG, n_iters=2, seed=0)
    f = res.features()
    return Observation(w * 10, CFG, float(f.speed.sum()), f, **kw)


def messages(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "conditions changed" in r.getMessage()]


def test_a_steady_window_is_not_called_a_change(caplog, fresh_net):
    t = AutoByteTuner(fresh_net, enabled=False)
    t.start(SPACE, CFG)
    with caplog.at_level(logging.INFO, logger="autobyte.meta"):
        t.observe(obs(0))
        o = obs(1)
        t.observe(dataclasses.replace(o, speed=o.speed * 1.003))  # +0.3%: noise, not a change
    assert messages(caplog) == []


def test_the_controllers_signal_is_named_as_such(caplog, fresh_net):
    t = AutoByteTuner(fresh_net, enabled=False)
    t.start(SPACE, CFG)
    with caplog.at_level(logging.INFO, logger="autobyte.meta"):
        t.observe(obs(0))
        o = obs(1, regime_changed=True)
        t.observe(dataclasses.replace(o, speed=o.speed * 1.003))
    (msg,) = messages(caplog)
    assert "controller's detector" in msg and "bandwidth" not in msg  # nothing measured moved: the signal alone


def test_a_bandwidth_drop_is_named_with_its_size_and_the_tuner_alone_never_calls_a_change(caplog, fresh_net):
    t = AutoByteTuner(fresh_net, enabled=False)
    t.start(SPACE, CFG)
    with caplog.at_level(logging.INFO, logger="autobyte.meta"):
        t.observe(obs(0, gbps=5.0))
        t.observe(obs(1, gbps=1.0))  # one detector, in the controller: without its signal, no change
        assert messages(caplog) == []
        t.observe(obs(2, gbps=5.0))
        t.observe(obs(3, gbps=1.0, regime_changed=True))
    (msg,) = messages(caplog)
    assert "bandwidth x0.2" in msg and "speed" in msg and "new conditions" in msg, msg
