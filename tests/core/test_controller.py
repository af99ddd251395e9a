from __future__ import annotations

import pytest

from autobyte.core import Config, SearchSpace, WindowStats
from autobyte.core.tuning import Controller, Decision, Observation, StaticTuner, Tuner


class Flip(Tuner):
    """Reconfigures to the other candidate whenever speed drops below 100."""

    name = "flip"

    def observe(self, obs: Observation) -> Decision | None:
        if obs.speed < 100:
            other = [c for c in self.space if c != obs.config][0]
            return Decision(other, "slow", predicted_speed=150.0)
        return None


def _w(speed: float, n_iters: int = 10) -> WindowStats:
    return WindowStats(n_iters, 0.1, speed, 0.01, (0.001, 0.002), 1000, 2, 0.05, 2e4)


SPACE = SearchSpace([Config(1000, 1000), Config(2000, 4000)])


def test_controller_decides_and_logs():
    c = Controller(Flip(), SPACE, SPACE[0], "allreduce", [400, 600], window_iters=10)
    assert c.decide(9, [_w(80), _w(60)]) is None  # 140 samples/s in all: keep
    d = c.decide(19, [_w(40), _w(50)])
    assert d is not None and d.config == SPACE[1] and d.reason == "slow"
    assert c.history[-1]["new_config"] == SPACE[1].to_dict()
    c.applied(20, d.config)
    assert not c.counts(20) and not c.counts(21) and c.counts(22)
    state = c.state_dict()
    c2 = Controller(Flip(), SPACE, SPACE[0], "allreduce", [400, 600])
    c2.load_state_dict(state)
    assert c2.current == SPACE[1] and c2.history == c.history


def test_unusable_window_keeps_config_and_warns():
    c = Controller(StaticTuner(), SPACE, SPACE[0], "allreduce", [400, 600])
    with pytest.warns(UserWarning, match="unusable statistics"):
        assert c.decide(9, [_w(0.0), _w(0.0)]) is None
    with pytest.warns(UserWarning, match="zero iterations"):
        assert c.decide(9, [_w(10, n_iters=0)]) is None
    with pytest.warns(UserWarning, match="must be finite"):
        assert c.decide(9, [_w(float("nan"))]) is None


@pytest.mark.parametrize("kw, match", [({"window_iters": 0}, "window_iters must be a positive integer"), ({"warmup_iters": -1}, "warmup_iters must be a non-negative integer")])
def test_controller_bad_arguments(kw, match):
    with pytest.raises(ValueError, match=match):
        Controller(StaticTuner(), SPACE, SPACE[0], "allreduce", [1], **kw)
