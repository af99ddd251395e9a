"""A real 2-rank gloo job started from a job history: rank 0's pick runs on every rank from the first iteration."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")

from autobyte.core.space import Config, KiB, MiB  # noqa: E402
from autobyte.meta._history import JobHistory  # noqa: E402
from autobyte.meta._ledger import Regime  # noqa: E402
from autobyte.testing import run_ranks  # noqa: E402

pytestmark = pytest.mark.integration

SCRIPT = Path(__file__).parent / "scripts" / "history_job.py"


def test_two_ranks_start_where_the_history_says_and_rank0_keeps_the_job(tmp_path):
    given, fast = Config(16 * KiB, 64 * KiB), Config(MiB, 4 * MiB)
    history = tmp_path / "history"
    JobHistory(history).save("past", [Regime(i, {given: [lv, 3.0, 1.0], fast: [lv * 1.2, 3.0, 1.0]})
                                      for i, lv in enumerate([50.0, 90.0])])
    res = run_ranks([str(SCRIPT), str(tmp_path), str(history)], 2, timeout_s=240)
    for r in res:
        assert r.returncode == 0, f"rank {r.rank}:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    out = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert "starting there" in out[0]["started_from"]
    for o in out:
        assert Config(**o["configs"][0]) == fast
    assert out[0]["configs"] == out[1]["configs"]  # every decision after the start holds on both ranks too
    files = sorted(p.name for p in history.glob("job-*.json"))
    assert files == sorted(["job-past.json", f"job-{out[0]['job']}.json"])  # rank 1 had no history: wrote nothing
    mine = json.loads((history / f"job-{out[0]['job']}.json").read_text())
    assert [fast.partition_bytes, fast.credit_bytes] in [m[:2] for r in mine["regimes"] for m in r["measured"]]
