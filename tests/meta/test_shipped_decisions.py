"""The shipped tuner's decisions on simulator scenarios, pinned: a change that alters any of them fails here.

``make_tuner("autobyte", adapt=False)`` with its other defaults (the shipped weights) on scenarios of
``benchmarks/bench_tuner_sim.py``'s two seed sets, one of them on a host whose checks scatter. Every decision
(iteration, from, to, reason) and the configuration of every window are compared with
``data/shipped_decisions.json``: the kind, iteration and configurations exactly, the reason's words exactly and its
numbers within 2% (float sums differ in the last digits between CPU kinds). Online adaptation is off here: 300
epochs of it carry those last digits into different decisions on another CPU, so a pin of the adapting tuner holds
on one machine only (the tests of ``autobyte/meta`` cover the adaptation). A change meant to alter the tuner's
decisions regenerates the file on purpose, and says so:

    OMP_NUM_THREADS=1 python tests/meta/test_shipped_decisions.py --regenerate
"""

from __future__ import annotations

import importlib.util
import json
import math
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

DATA = Path(__file__).parent / "data" / "shipped_decisions.json"
BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
#: (set, index, host_noise): every kind of trace of the tuning set, two held-out scenarios, one noisy host
SCENARIOS = [("tune", i, 0.0) for i in range(6)] + [("heldout", 0, 0.0), ("heldout", 7, 0.0), ("tune", 1, 0.12)]


_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def same_decision(a: list[Any], b: list[Any]) -> bool:
    """Two decision rows agree: all but the reason exactly; the reason's words exactly, its numbers within 2%."""
    if a[:-1] != b[:-1] or _NUMBER.split(a[-1]) != _NUMBER.split(b[-1]):
        return False
    return all(math.isclose(float(x), float(y), rel_tol=0.02, abs_tol=0.02)
               for x, y in zip(_NUMBER.findall(a[-1]), _NUMBER.findall(b[-1])))


def _bench() -> ModuleType:
    if "bench_tuner_sim" not in sys.modules:
        spec = importlib.util.spec_from_file_location("bench_tuner_sim", BENCHMARKS / "bench_tuner_sim.py")
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules["bench_tuner_sim"] = mod
        spec.loader.exec_module(mod)
    return sys.modules["bench_tuner_sim"]


def decisions() -> dict[str, Any]:
    """Every decision of the shipped tuner on :data:`SCENARIOS`, and its configuration per window."""
    from autobyte.core.space import BYTESCHEDULER_DEFAULT, SearchSpace
    from autobyte.core.tuners import make_tuner
    from autobyte.meta import MetaNetwork

    bench = _bench()
    from evaluate import WINDOW, run_tuner  # benchmarks/evaluate.py, on the path bench_tuner_sim.py sets

    class Recorded(bench._Timed):  # type: ignore[name-defined,misc]
        def __init__(self, inner: Any) -> None:
            super().__init__(inner)
            self.log: list[list[Any]] = []

        def _keep(self, method: str, obs: Any, d: Any) -> Any:
            if d is not None:
                self.log.append([method, obs.iteration, str(obs.config), str(d.config), d.reason])
            return d

        def observe(self, obs: Any) -> Any:
            return self._keep("observe", obs, super().observe(obs))

        def check(self, obs: Any) -> Any:
            return self._keep("check", obs, super().check(obs))

    net, space, out = MetaNetwork.load_default(), SearchSpace.default(), {}
    for set_name, index, noise in SCENARIOS:
        sc = bench.make_scenario(set_name, index)
        net.reset_head()
        t = Recorded(make_tuner("autobyte", network=net, background=False, adapt=False))
        run = run_tuner("autobyte", t, BYTESCHEDULER_DEFAULT, sc.model, lambda w, sc=sc: sc.conditions[sc.segments[0][2]],
                        sc.n_iters // WINDOW, space, check_phase=sc.cluster_of_check, host_noise=noise)
        out[f"{set_name}/{index}/noise{noise:g}"] = {"decisions": t.log, "configs": [str(c) for c in run.configs]}
    return out


@pytest.fixture(scope="module")
def now() -> dict[str, Any]:
    return json.loads(json.dumps(decisions()))


@pytest.mark.parametrize("key", [f"{s}/{i}/noise{n:g}" for s, i, n in SCENARIOS])
def test_the_shipped_tuner_decides_as_pinned(now, key):
    pinned = json.loads(DATA.read_text())[key]
    got = now[key]
    for k, (a, b) in enumerate(zip(got["decisions"], pinned["decisions"])):
        assert same_decision(a, b), f"{key}: decision {k} differs (pinned: {b}); regenerate {DATA.name} only on purpose"
    assert len(got["decisions"]) == len(pinned["decisions"]) and got["configs"] == pinned["configs"], key
    assert len(pinned["decisions"]) >= 3  # a scenario where the tuner acts: the pin proves something


def test_the_comparison_tolerates_float_digits_and_nothing_else():
    row = ["observe", 130, "<a>", "<b>", "explore: predicted 14088.9 samples/s, error 38%, expected cost 1.24"]
    assert same_decision(row, row[:4] + ["explore: predicted 14045.6 samples/s, error 38%, expected cost 1.25"])
    assert not same_decision(row, row[:4] + ["explore: predicted 13088.9 samples/s, error 38%, expected cost 1.24"])
    assert not same_decision(row, row[:4] + ["exploit: predicted 14088.9 samples/s, error 38%, expected cost 1.24"])
    assert not same_decision(row, ["observe", 131] + row[2:])


if __name__ == "__main__":
    if sys.argv[1:] != ["--regenerate"]:
        sys.exit(f"usage: python {Path(__file__).name} --regenerate  (rewrites {DATA})")
    DATA.write_text(json.dumps(decisions(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {DATA}")
