"""The Keras docs: the "add one line" snippet and the example as written (2 processes through torchrun)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

pytest.importorskip("torch")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(ROOT, "docs", "examples", "keras_ddp.py")
WEIGHTS = os.path.join(ROOT, "autobyte", "meta", "weights", "meta.weights.h5")


def snippet(doc: str, name: str) -> list[str]:
    """The code lines of the ```python block after ``<!-- snippet: name -->`` in ``docs/<doc>``."""
    text = open(os.path.join(ROOT, "docs", doc)).read()
    m = re.search(rf"<!-- snippet: {name} -->\s*```python\n(.*?)```", text, re.S)
    assert m, f"docs/{doc} has no snippet {name!r}"
    return [line.strip() for line in m.group(1).splitlines() if line.strip()]


def in_order(needles: list[str], haystack: list[str]) -> bool:
    it = iter(haystack)
    return all(any(n == h for h in it) for n in needles)


def test_docs_snippet_is_what_the_example_runs():
    lines = snippet("keras.md", "keras")
    assert "model.fit(x, y, batch_size=32, epochs=1, verbose=2 if cb.rank == 0 else 0, callbacks=[cb])" in lines
    example = [line.split("  # noqa")[0].strip() for line in open(EXAMPLE)]
    assert in_order(lines, example), f"docs/keras.md snippet is not in {EXAMPLE} as written"


@pytest.mark.skipif(not os.path.exists(WEIGHTS), reason="the meta-network weights (default tuner) are not shipped yet")
def test_example_runs_as_written(tmp_path):
    env = dict(os.environ, KERAS_BACKEND="torch")
    p = subprocess.run([sys.executable, EXAMPLE], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=400)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-4000:]
    assert "over 2 processes" in out
    assert "done: 2 processes, weights identical on every rank: True" in out
