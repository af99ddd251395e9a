"""Trace files: errors name the file; times out of order are refused, never sorted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autobyte.testbed import BandwidthTrace, RateChange


def test_changes_out_of_order_are_refused() -> None:
    with pytest.raises(ValueError, match=r"rate changes must be in time order, but change 2 \(at=10 it\) comes after change 1 \(at=20 it\)"):
        BandwidthTrace((RateChange(0, 100), RateChange(20, 50), RateChange(10, 200)))


def test_equal_times_and_separate_clocks_are_accepted() -> None:
    t = BandwidthTrace((RateChange(0, 100), RateChange(10, 50, ranks=(0,)), RateChange(10, 60, ranks=(1,)),
                        RateChange(2, 70, unit="s")))
    assert [c.at for c in t.changes] == [0, 10, 10, 2]


def test_file_errors_name_the_file(tmp_path: Path) -> None:
    latin = tmp_path / "t.json"
    latin.write_bytes('{"changes": [{"at": 0, "up_mbit": 100}], "x": "\xe9"}'.encode("latin-1"))
    with pytest.raises(ValueError, match=r"trace file '.*t\.json' is not UTF-8 text"):
        BandwidthTrace.load(latin)
    back = tmp_path / "back.json"
    back.write_text(json.dumps({"changes": [{"at": 0, "up_mbit": 100}, {"at": 5, "up_mbit": 9, "unit": "s"},
                                            {"at": 3, "up_mbit": 8, "unit": "s"}]}))
    with pytest.raises(ValueError, match=r"trace file '.*back\.json': rate changes must be in time order"):
        BandwidthTrace.load(back)
