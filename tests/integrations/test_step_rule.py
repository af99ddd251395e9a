"""A real 2-rank gloo job whose iterations slow down inside a check: the check that mixes both is known and dropped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")

from autobyte.testing import run_ranks  # noqa: E402

pytestmark = pytest.mark.integration

SCRIPT = Path(__file__).parent / "scripts" / "step_job.py"


@pytest.mark.parametrize("mode", ["on", "off"])
def test_a_change_inside_a_check_is_read_from_rank0s_iteration_times(tmp_path, mode):
    res = run_ranks([str(SCRIPT), str(tmp_path), mode], 2, timeout_s=240)
    for r in res:
        assert r.returncode == 0, f"rank {r.rank}:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    out = json.loads((tmp_path / f"{mode}.json").read_text())
    changes = [h for h in out["history"] if h.get("regime_changed")]
    told = [s for s in out["seen"] if s["changed"]]
    assert changes and changes[0]["iteration"] == 21, out["history"]  # the check at 21: iterations 16-20 (the change at 19)
    if mode == "on":
        # read as a change inside it from rank 0's iteration times, dropped, the tuner told at once; one change
        assert changes[0]["regime_rule"] == "step" and changes[0]["mixed"] is True
        assert len(changes) == 1 and len(told) == 1 and told[0]["mixed"] and told[0]["iteration"] == 21
    else:
        # without the step rule that check is the new regime's first measurement and the detector's reference,
        # a mix of both: the next clean check, 15% away from it, reads as a second change
        assert changes[0]["regime_rule"] == "speed" and "mixed" not in changes[0] and not told[0]["mixed"]
        assert len(changes) == 2 and changes[1]["iteration"] == 26
