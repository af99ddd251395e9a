"""The Keras docs: the "add one line" snippet and the example as written (2 processes through torchrun)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from _docsnippets import ROOT, example_lines, in_order, snippet

pytestmark = pytest.mark.integration

pytest.importorskip("torch")

EXAMPLE = os.path.join(ROOT, "docs", "examples", "keras_ddp.py")


def test_docs_snippet_is_what_the_example_runs():
    lines = snippet("keras.md", "keras")
    assert "model.fit(x, y, batch_size=32, epochs=1, verbose=2 if cb.rank == 0 else 0, callbacks=[cb])" in lines
    example = example_lines(EXAMPLE)
    assert in_order(lines, example), f"docs/keras.md snippet is not in {EXAMPLE} as written"


def test_example_runs_as_written(tmp_path):
    env = dict(os.environ, KERAS_BACKEND="torch")
    p = subprocess.run([sys.executable, EXAMPLE], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=400)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-4000:]
    assert "over 2 processes" in out
    assert "done: 2 processes, weights identical on every rank: True" in out
