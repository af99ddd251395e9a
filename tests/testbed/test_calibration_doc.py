"""docs/calibration.md's example of using the calibrated parameters runs as written (on the shipped copy)."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_calib_params_snippet_runs(capsys) -> None:
    text = (ROOT / "docs" / "calibration.md").read_text()
    m = re.search(r"<!-- snippet: calib-params -->\s*```python\n(.*?)```", text, re.S)
    assert m, "docs/calibration.md lost its calib-params snippet"
    assert "docs/figures" not in m.group(1)  # it reads the calibration the package ships
    cwd, path, modules = os.getcwd(), list(sys.path), set(sys.modules)
    os.chdir(ROOT)  # the snippet runs from the repository root (it imports benchmarks/calibrate.py)
    try:
        exec(m.group(1), {})
    finally:
        os.chdir(cwd)
        sys.path[:] = path
        for name in set(sys.modules) - modules:
            if name in ("calibrate", "collect"):
                del sys.modules[name]
    iter_s = float(capsys.readouterr().out.strip())
    assert 0.01 < iter_s < 10  # a 2-worker CNN iteration at 1000 Mbit/s: tens to hundreds of ms
