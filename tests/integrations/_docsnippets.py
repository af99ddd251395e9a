"""Reading the tested snippets out of docs/ (shared by the example tests)."""

from __future__ import annotations

import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def snippet(doc: str, name: str) -> list[str]:
    """The code lines of the ```python block after ``<!-- snippet: name -->`` in ``docs/<doc>``."""
    text = open(os.path.join(ROOT, "docs", doc)).read()
    m = re.search(rf"<!-- snippet: {name} -->\s*```python\n(.*?)```", text, re.S)
    assert m, f"docs/{doc} has no snippet {name!r}"
    return [line.strip() for line in m.group(1).splitlines() if line.strip()]


def in_order(needles: list[str], haystack: list[str]) -> bool:
    it = iter(haystack)
    return all(any(n == h for h in it) for n in needles)


def example_lines(path: str) -> list[str]:
    return [line.split("  # noqa")[0].strip() for line in open(path)]
