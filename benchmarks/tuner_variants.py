"""AutoByte with one of its policies switched off, for A/B runs of ``bench_tuner_sim.py``.

``OMP_NUM_THREADS=1 python benchmarks/bench_tuner_sim.py --set tune --import tuner_variants
--tuners autobyte,autobyte-no-equivalence,autobyte-no-calibration,autobyte-neither --adapt-time-s 60``
(the script's folder is on ``sys.path``, so ``--import tuner_variants`` finds this file).
"""

from __future__ import annotations

from typing import Any, Callable

from autobyte.core.tuners import register_tuner
from autobyte.core.tuning import Tuner


def _variant(**fixed: Any) -> Callable[..., Tuner]:
    def factory(network: Any = None, background: bool = True, adapt_time_s: float = 1.0) -> Tuner:
        from autobyte.meta import AutoByteTuner

        return AutoByteTuner(network, background=background, adapt_time_s=adapt_time_s, **fixed)

    return factory


register_tuner("autobyte-no-equivalence", _variant(equivalent=False))
register_tuner("autobyte-no-calibration", _variant(calibrate=False))
register_tuner("autobyte-neither", _variant(equivalent=False, calibrate=False))
register_tuner("autobyte-near", _variant(near_best=0.10))
register_tuner("autobyte-gain", _variant(min_predicted_gain=0.0))
register_tuner("autobyte-near-gain", _variant(near_best=0.10, min_predicted_gain=0.0))
register_tuner("autobyte-near-gain-d2", _variant(near_best=0.10, min_predicted_gain=0.0, max_distance=2.0))
register_tuner("autobyte-no-refile", _variant(refile=False))
register_tuner("autobyte-near-d2", _variant(near_best=0.10, max_distance=2.0))
register_tuner("autobyte-near-d1", _variant(near_best=0.10, max_distance=1.0))
register_tuner("autobyte-d2", _variant(max_distance=2.0))
register_tuner("autobyte-no-tail", _variant(tail=False))
register_tuner("autobyte-stop22", _variant(refile=False, tail=False, max_distance=3.0))
