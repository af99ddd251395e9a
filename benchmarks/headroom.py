"""What any tuner could win on a suite's scenarios, against what a window and a repeat can measure.

Reads the real runs of ``autobyte bench --suite`` (each scenario's ``iterations.csv`` and ``summary.json``) and gives,
per scenario and per condition of its trace, measured on the two static configurations the suite runs continuously
(ByteScheduler's default and the best static configuration in hindsight): **the gain to find**, **the headroom of
switching** (measured, and as the grids predict it) and **the noise** (a window's, a repeat's; the windows a
comparison needs against the windows a phase holds). What each figure is: :mod:`autobyte.bench._headroom`, whose
computation this is; every suite run that ran both static methods carries the same figures in its
``suite_summary.md``. This script reads finished suite folders, several at once.

Usage (repository root)::

    python benchmarks/headroom.py SUITE_OUT [more suite folders] [--window 10] [--settle 2] [--json FILE]

where each SUITE_OUT is the ``--out`` folder of an ``autobyte bench --suite`` run (one folder per scenario).

Writes the table to stdout (markdown). Scenarios without both static methods are listed as skipped.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from autobyte.bench._headroom import Z, analyse, grid_headroom as _grid_headroom, render

__all__ = ["Z", "analyse", "_grid_headroom", "render", "main"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("suites", nargs="+", help="suite output folders (each holds one folder per scenario)")
    ap.add_argument("--window", type=int, default=10, help="iterations per window (default 10)")
    ap.add_argument("--settle", type=int, default=2, help="iterations left out after every change (default 2)")
    ap.add_argument("--json", help="also write the figures to this JSON file")
    a = ap.parse_args(argv)
    if a.window < 2:
        ap.error(f"--window must be an integer >= 2, but got --window={a.window}.")
    if a.settle < 0:
        ap.error(f"--settle must be an integer >= 0, but got --settle={a.settle}.")
    results = []
    for suite in a.suites:
        p = Path(suite)
        if not p.is_dir():
            ap.error(f"suites must be folders written by autobyte bench --suite, but {suite!r} is not a folder.")
        scen = sorted(d for d in p.iterdir() if (d / "iterations.csv").exists())
        if not scen:
            ap.error(f"suites must hold scenario folders with an iterations.csv, but {suite!r} has none.")
        results += [analyse(d, a.window, a.settle) for d in scen]
    print(render(results))
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
