"""docs/calibration.md's example of using the calibrated parameters runs as written."""

from __future__ import annotations

import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_calib_params_snippet_runs(capsys) -> None:
    text = (ROOT / "docs" / "calibration.md").read_text()
    m = re.search(r"<!-- snippet: calib-params -->\s*```python\n(.*?)```", text, re.S)
    assert m, "docs/calibration.md lost its calib-params snippet"
    cwd = os.getcwd()
    os.chdir(ROOT)  # the snippet reads docs/figures/calib_params.json from the repository root
    try:
        exec(m.group(1), {})
    finally:
        os.chdir(cwd)
    iter_s = float(capsys.readouterr().out.strip())
    assert 0.01 < iter_s < 10  # a 2-worker CNN iteration at 1000 Mbit/s: tens to hundreds of ms
