"""The package's layout rules (issue 11), checked on the source so that they stay true.

* no module of ``autobyte/integrations/`` over 450 lines (split by concern);
* the testbed imports nothing of the experiments (``autobyte.bench``): bench uses the testbed, not the reverse;
* ``autobyte/core/`` imports no framework.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "autobyte"
FRAMEWORKS = {"torch", "lightning", "keras", "tensorflow", "mxnet", "horovod", "jax"}


def _imports(path: Path) -> set[str]:
    """Absolute module names a file imports (relative imports resolved against the package)."""
    parts = path.relative_to(PKG.parent).with_suffix("").parts
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = parts[: len(parts) - node.level]
                out.add(".".join([*base, *(node.module.split(".") if node.module else [])]))
            elif node.module:
                out.add(node.module)
    return out


@pytest.mark.parametrize("path", sorted(PKG.glob("integrations/*.py")), ids=lambda p: p.name)
def test_no_integration_module_over_450_lines(path: Path) -> None:
    n = len(path.read_text().splitlines())
    assert n <= 450, f"{path.name} has {n} lines; split it by concern"


def test_the_testbed_imports_nothing_of_bench() -> None:
    bad = {f"{p.name}: {m}" for p in PKG.glob("testbed/*.py") for m in _imports(p) if m.startswith("autobyte.bench")}
    assert not bad, bad


def test_core_imports_no_framework() -> None:
    bad = {f"{p.name}: {m}" for p in PKG.glob("core/*.py") for m in _imports(p) if m.split(".")[0] in FRAMEWORKS}
    assert not bad, bad


def test_the_checks_see_imports() -> None:
    # the rules above would pass vacuously if the import reader found nothing
    assert "autobyte.bench.collect" in _imports(PKG / "bench" / "_measure_cli.py")
    assert "autobyte.core._checks" in _imports(PKG / "core" / "trigger.py")


def test_the_local_rank_launcher_is_run_ranks_and_launch_a_deprecated_alias() -> None:
    import autobyte.testing as testing

    assert "run_ranks" in testing.__all__ and "launch" not in testing.__all__
    with pytest.warns(DeprecationWarning, match="renamed autobyte.testing.run_ranks") as caught:
        assert testing.launch(["-c", "pass"], 0) == testing.run_ranks(["-c", "pass"], 0) == []  # 0 ranks: starts nothing
    assert [w.filename for w in caught] == [__file__]  # stacklevel=2: the warning points at the caller's line
