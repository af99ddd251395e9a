"""One process communicates nothing: the Controller collects statistics and never asks the tuner."""

from __future__ import annotations

import pytest

from autobyte.core import Config, SearchSpace, WindowStats
from autobyte.core.tuning import Controller
from autobyte.testing import AlwaysMove

SPACE = SearchSpace([Config(1000, 1000), Config(2000, 4000)])




def _w(speed: float, n_iters: int = 10) -> WindowStats:
    return WindowStats(n_iters, 0.1, speed, 0.01, (0.001, 0.002), 1000, 2, 0.05, 2e4)


def test_world_size_one_never_asks_the_tuner_but_keeps_statistics():
    t = AlwaysMove()
    c = Controller(t, SPACE, SPACE[0], "allreduce", [400, 600], window_iters=10, world_size=1)
    assert not c.tuning
    for i, speed in enumerate([100, 100, 30, 300]):  # a slowdown would be a regime change with two ranks
        assert c.decide(10 * i + 9, [_w(speed)]) is None
    assert t.seen == 0
    assert [h["speed"] for h in c.history] == [100, 100, 30, 300]
    assert all("new_config" not in h for h in c.history)
    assert c.current == SPACE[0]


@pytest.mark.parametrize("world_size", [2, None])
def test_more_than_one_process_or_unknown_tunes(world_size):
    t = AlwaysMove()
    c = Controller(t, SPACE, SPACE[0], "allreduce", [400, 600], window_iters=10, world_size=world_size)
    d = c.decide(9, [_w(100)] * (world_size or 1))
    assert t.seen == 1 and d is not None and d.config == SPACE[1]


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_world_size_is_checked(bad):
    with pytest.raises(ValueError, match=rf"world_size must be a positive integer, but got world_size={bad!r}"):
        Controller(AlwaysMove(), SPACE, SPACE[0], "allreduce", [400, 600], world_size=bad)
