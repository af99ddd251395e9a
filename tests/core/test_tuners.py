from __future__ import annotations

import importlib.util
import json
import math

import numpy as np
import pytest

from autobyte.core.metrics import RuntimeFeatures
from autobyte.core.space import Config, MiB, SearchSpace
from autobyte.core.tuners import BYTESCHEDULER_BO_RANGES, BOTuner, GridTuner, StaticTuner, make_tuner, register_tuner, tuner_names
from autobyte.core.tuning import Decision, Observation, Tuner

needs_bo = pytest.mark.skipif(importlib.util.find_spec("bayes_opt") is None,
                              reason="BOTuner needs bayesian-optimization (pip install 'autobyte[tune]'), absent here")


def features(n: int = 2, l: int = 4) -> RuntimeFeatures:
    return RuntimeFeatures(
        arch="ps", layer_bytes=np.full(l, 1e6), layer_time_s=np.full((l, n), 1e-3), forward_s=np.full(n, 0.01),
        bw_up_Bps=np.full(n, 1e9), bw_down_Bps=np.full(n, 1e9), speed=np.full(n, 50.0),
    )


def speed_of(c: Config) -> float:
    """A smooth synthetic landscape with its peak at <8 MiB, 3X>."""
    dp = math.log2(c.partition_bytes / (8 * MiB))
    dc = math.log2(c.credit_multiple / 3)
    return 100.0 * math.exp(-0.1 * dp * dp - 0.3 * dc * dc)


def drive(tuner: Tuner, space: SearchSpace, initial: Config, n_windows: int):
    cur = tuner.start(space, initial)
    configs = []
    for w in range(n_windows):
        configs.append(cur)  # the configuration in force during window w
        d = tuner.observe(Observation(w, cur, speed_of(cur), features()))
        if d is not None:
            assert isinstance(d, Decision)
            cur = d.config
    return configs


def test_grid_tries_every_candidate_then_keeps_the_best():
    space = SearchSpace.grid([2 * MiB, 4 * MiB, 8 * MiB, 16 * MiB], [1, 2, 3, 4])
    t = GridTuner(space)
    configs = drive(t, space, Config(1 * MiB, 1 * MiB), 40)
    assert set(configs[:16]) == set(space)
    best = max(space, key=speed_of)
    assert best == Config.from_multiple(8 * MiB, 3)
    assert t.best == best
    assert all(c == best for c in configs[17:])


def test_grid_default_is_the_paper_grid():
    t = GridTuner()
    first = t.start(SearchSpace.default(), Config(MiB, MiB))
    assert len(t.grid) == len(SearchSpace.paper_grid_search())
    assert first == t.grid[0]


def test_grid_n_windows_averages():
    space = SearchSpace.grid([2 * MiB, 8 * MiB], [1])
    t = GridTuner(space, n_windows=3)
    configs = drive(t, space, Config(MiB, MiB), 10)
    assert configs[:7] == [space[0]] * 3 + [space[1]] * 4


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_grid_rejects_bad_n_windows(bad):
    with pytest.raises(ValueError, match=r"n_windows must be a positive integer, but got n_windows="):
        GridTuner(n_windows=bad)


def test_grid_rejects_non_space():
    with pytest.raises(TypeError, match=r"space must be a SearchSpace or None"):
        GridTuner(space=[Config(MiB, MiB)])  # type: ignore[arg-type]


@needs_bo
def test_bo_follows_bytescheduler_schedule_and_freezes():
    t = BOTuner("ps", seed=1)
    configs = drive(t, SearchSpace.default(), Config(8 * MiB, 8 * MiB), 40)
    # 14 probes then the final move to the best; nothing after
    assert t.done
    changes = [i for i in range(1, 40) if configs[i] != configs[i - 1]]
    assert changes[-1] <= 16
    lo_p, hi_p = (x * 4e6 for x in BYTESCHEDULER_BO_RANGES["ps"]["partition"])
    lo_c, hi_c = (x * 4e6 for x in BYTESCHEDULER_BO_RANGES["ps"]["credit"])
    for c in configs[1:15]:
        assert lo_p - 4 <= c.partition_bytes <= hi_p and lo_c - 4 <= c.credit_bytes <= hi_c
    # the final configuration is the best one it measured
    measured = configs[1:15]  # window 0 (the initial config) is dropped, as in ByteScheduler
    assert speed_of(configs[-1]) == pytest.approx(max(speed_of(c) for c in measured))


@needs_bo
def test_bo_allreduce_credit_range():
    t = BOTuner("allreduce", seed=3)
    configs = drive(t, SearchSpace.default(), Config(8 * MiB, 8 * MiB), 12)
    assert all(16e6 - 4 <= c.credit_bytes <= 256e6 for c in configs[1:11])


@needs_bo
def test_bo_is_deterministic_given_a_seed():
    a = drive(BOTuner(seed=7), SearchSpace.default(), Config(MiB, MiB), 20)
    b = drive(BOTuner(seed=7), SearchSpace.default(), Config(MiB, MiB), 20)
    assert a == b


@needs_bo
def test_bo_state_dict_is_plain_and_restores():
    t = BOTuner(seed=2)
    cur = t.start(SearchSpace.default(), Config(MiB, MiB))
    for w in range(6):
        d = t.observe(Observation(w, cur, speed_of(cur), features()))
        cur = d.config if d else cur
    state = json.loads(json.dumps(t.state_dict()))
    t2 = BOTuner(seed=2)
    t2.start(SearchSpace.default(), Config(MiB, MiB))
    t2.load_state_dict(state)
    assert t2.state_dict() == t.state_dict()


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"arch": "ring"}, r"arch must be one of \('ps', 'allreduce'\), but got arch='ring'"),
        ({"n_random": -1}, r"n_random must be a non-negative integer, but got n_random=-1"),
        ({"n_steps": 0}, r"n_steps must be a positive integer, but got n_steps=0"),
        ({"n_random": 15}, r"n_random must be at most n_steps - 1 = 14, but got n_random=15"),
        ({"xi": -0.1}, r"xi must be a non-negative finite number, but got xi=-0.1"),
        ({"ranges": {"partition": (2.0, 1.0), "credit": (1.0, 2.0)}}, r"ranges\['partition'\] must be \(lo, hi\)"),
        ({"ranges": {"partition": (1.0, 2.0)}}, r"ranges must have keys 'partition' and 'credit'"),
    ],
)
def test_bo_rejects_bad_arguments(kw, match):
    with pytest.raises(ValueError, match=match):
        BOTuner(**kw)


def test_bo_observe_before_start():
    with pytest.raises(RuntimeError, match=r"before start"):
        BOTuner().observe(Observation(0, Config(MiB, MiB), 1.0, features()))


def test_registry():
    assert tuner_names() == ["autobyte", "bo", "grid", "static"]
    assert isinstance(make_tuner("static"), StaticTuner)
    assert isinstance(make_tuner("grid", n_windows=2), GridTuner)
    assert make_tuner("bo", arch="allreduce").arch == "allreduce"
    with pytest.raises(ValueError, match=r"name must be one of \['autobyte', 'bo', 'grid', 'static'\], but got name='foo'"):
        make_tuner("foo")


def test_register_tuner_custom_and_type_check(monkeypatch):
    from autobyte.core import tuners

    # a private copy of the registry: the names registered here must not leak into later tests
    monkeypatch.setattr(tuners, "_REGISTRY", dict(tuners._REGISTRY))
    register_tuner("_test_static", StaticTuner)
    assert isinstance(make_tuner("_test_static"), StaticTuner)
    register_tuner("_test_bad", lambda: object())
    with pytest.raises(TypeError, match=r"must return a Tuner"):
        make_tuner("_test_bad")
    with pytest.raises(ValueError, match=r"name must be a non-empty string"):
        register_tuner("", StaticTuner)


def test_import_tuners_from_a_module_or_a_file(tmp_path, monkeypatch):
    from autobyte.core import tuners
    from autobyte.core.tuners import import_tuners

    monkeypatch.setattr(tuners, "_REGISTRY", dict(tuners._REGISTRY))
    f = tmp_path / "extra_tuners_file.py"
    f.write_text("from autobyte.core import register_tuner\nfrom autobyte.core.tuners import StaticTuner\n"
                 "register_tuner('_from_file', StaticTuner)\n")
    assert import_tuners([str(f)]) == ["_from_file"]
    assert isinstance(make_tuner("_from_file"), StaticTuner)
    assert import_tuners([str(f)]) == []  # imported once: nothing new
    (tmp_path / "extra_tuners_mod.py").write_text("from autobyte.core import register_tuner\n"
                                                  "from autobyte.core.tuners import GridTuner\nregister_tuner('_from_mod', GridTuner)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert import_tuners(["extra_tuners_mod"]) == ["_from_mod"]


@pytest.mark.parametrize("sources, message", [
    (["/no/such/dir/t.py"], r"cannot import tuners from '/no/such/dir/t.py' \(FileNotFoundError: no such file"),
    (["no_such_module_zz"], r"cannot import tuners from 'no_such_module_zz' \(ModuleNotFoundError"),
    ([""], r"sources must be module names or .py paths, but got ''"),
    ([3], r"sources must be module names or .py paths, but got 3"),
])
def test_import_tuners_rejects_bad_sources(sources, message):
    from autobyte.core.tuners import import_tuners

    with pytest.raises(ValueError, match=message):
        import_tuners(sources)


def test_import_tuners_reports_a_failing_file_and_can_retry(tmp_path, monkeypatch):
    from autobyte.core import tuners
    from autobyte.core.tuners import import_tuners

    monkeypatch.setattr(tuners, "_REGISTRY", dict(tuners._REGISTRY))
    f = tmp_path / "broken_tuners.py"
    f.write_text("raise RuntimeError('boom')\n")
    with pytest.raises(ValueError, match=r"broken_tuners.py' \(RuntimeError: boom\)"):
        import_tuners([str(f)])
    f.write_text("from autobyte.core import register_tuner\nfrom autobyte.core.tuners import StaticTuner\n"
                 "register_tuner('_fixed', StaticTuner)\n")
    assert import_tuners([str(f)]) == ["_fixed"]  # a failed import left nothing behind
