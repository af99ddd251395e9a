"""A competing flow with ``until`` joins and leaves at iteration boundaries (real namespaces, real TCP)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from autobyte.testbed import BandwidthTrace, CompetingFlow, Testbed

from .conftest import REPO, json_lines, needs_root

pytestmark = needs_root

# rank 0 reports 8 iterations, 1 s each (the flow's sender must start and connect within its 3); rank 1 waits as long
WORKER = ("import os, time\n"
          "from autobyte.testbed import notify_iteration\n"
          "for k in range(8):\n"
          "    if os.environ['RANK'] == '0':\n"
          "        notify_iteration(k)\n"
          "    time.sleep(1.0)\n")


def test_flow_leaves_at_its_until_iteration(tmp_path: Path) -> None:
    trace = BandwidthTrace.constant(50).with_flows([CompetingFlow(2, 60, 1, 0, unit="it", until=5)])
    events, out = tmp_path / "events.jsonl", tmp_path / "out.txt"
    with open(out, "w") as f, Testbed(2, trace=trace) as tb:
        rc = tb.run([sys.executable, "-c", WORKER], timeout_s=60, events_log=str(events), stdout=f,
                    env={"PYTHONPATH": str(REPO)})
    assert rc == 0, out.read_text()
    log = [json.loads(line) for line in events.read_text().splitlines()]
    assert [(e["event"], e["iteration"]) for e in log if e["event"].startswith("flow")] == [("flow", 2), ("flow_end", 5)]
    (rx,) = json_lines(out.read_text(), "flow0-rx")
    # it ran about 3 iterations (3 s), not its 60 s, and carried traffic while it ran
    assert 0.5 < rx["flow0"]["seconds"] < 8, rx
    assert rx["flow0"]["mbit"] > 5, rx
