"""The default tuner needs no framework: a user with only ``[torch]``, ``[lightning]`` or ``[mxnet]`` runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration

FRAMEWORKS = ("keras", "torch", "mxnet", "tensorflow", "jax", "h5py")

SCRIPT = r"""
import json, sys
import autobyte.meta
from autobyte import sim
from autobyte.core.space import Config, MiB, SearchSpace
from autobyte.core.tuners import make_tuner
from autobyte.core.tuning import Observation

tuner = make_tuner("autobyte", background=False)
direct = autobyte.meta.AutoByteTuner(background=False)
start = Config(4 * MiB, 16 * MiB)
tuner.start(SearchSpace.default(), start)
f = sim.simulate(sim.get_model("resnet50"), sim.Cluster.from_gbps(4, 1, "ps"), start, n_iters=2).features()
tuner.observe(Observation(10, start, float(f.speed.sum()), f))
tuner.observe(Observation(20, start, float(f.speed.sum()), f))
print(json.dumps({"loaded": sorted(m for m in sys.modules if m.split(".")[0] in %r), "scored": tuner.cpu_s > 0}))
"""


def test_tuner_creation_and_decisions_import_no_framework(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "KERAS_BACKEND"}
    out = subprocess.run([sys.executable, "-c", SCRIPT % (FRAMEWORKS,)], capture_output=True, text=True, timeout=300,
                         cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["scored"]  # the tuner scored the windows (time spent in observe)
    assert res["loaded"] == [], f"importing autobyte.meta and deciding loaded {res['loaded']}"
