"""The package's layout rules, checked on the source so that they stay true.

* no module of the package over 600 lines, and none of ``autobyte/integrations/`` over 450 (split by concern);
* the experiments live in ``benchmarks/`` and import the package, never the reverse: no module of
  ``autobyte/`` imports ``benchmarks``;
* the testbed imports nothing of ``autobyte.bench``: bench uses the testbed, not the reverse;
* ``autobyte/core/`` imports no framework.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "autobyte"
FRAMEWORKS = {"torch", "lightning", "keras", "tensorflow", "mxnet", "horovod", "jax"}


def _imports(path: Path, source: str | None = None) -> set[str]:
    """Absolute module names a file imports (relative imports resolved against the package); ``source``: its text."""
    parts = path.relative_to(PKG.parent).with_suffix("").parts
    out = set()
    for node in ast.walk(ast.parse(path.read_text() if source is None else source)):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = parts[: len(parts) - node.level]
                out.add(".".join([*base, *(node.module.split(".") if node.module else [])]))
            elif node.module:
                out.add(node.module)
    return out


@pytest.mark.parametrize("path", sorted(PKG.rglob("*.py")), ids=lambda p: str(p.relative_to(PKG)))
def test_no_module_over_600_lines(path: Path) -> None:
    n = len(path.read_text().splitlines())
    assert n <= 600, f"{path.relative_to(PKG)} has {n} lines; split it by concern"


@pytest.mark.parametrize("path", sorted(PKG.glob("integrations/*.py")), ids=lambda p: p.name)
def test_no_integration_module_over_450_lines(path: Path) -> None:
    n = len(path.read_text().splitlines())
    assert n <= 450, f"{path.name} has {n} lines; split it by concern"


def test_the_package_imports_nothing_of_the_experiments() -> None:
    bad = {f"{p.relative_to(PKG)}: {m}" for p in PKG.rglob("*.py") for m in _imports(p) if m.split(".")[0] == "benchmarks"}
    assert not bad, bad


def test_the_testbed_imports_nothing_of_bench() -> None:
    bad = {f"{p.name}: {m}" for p in PKG.glob("testbed/*.py") for m in _imports(p) if m.startswith("autobyte.bench")}
    assert not bad, bad


def test_core_imports_no_framework() -> None:
    bad = {f"{p.name}: {m}" for p in PKG.glob("core/*.py") for m in _imports(p) if m.split(".")[0] in FRAMEWORKS}
    assert not bad, bad


def test_the_checks_see_imports() -> None:
    # the rules above would pass vacuously if the import reader found nothing
    assert "autobyte.bench._suite_report" in _imports(PKG / "bench" / "_suite.py")
    assert "autobyte.core._checks" in _imports(PKG / "core" / "trigger.py")
    source = "import benchmarks\nfrom benchmarks.evaluate import run_all\nfrom .. import sim\n"
    assert _imports(PKG / "bench" / "x.py", source) == {"benchmarks", "benchmarks.evaluate", "autobyte"}


def test_the_local_rank_launcher_is_run_ranks_and_launch_a_deprecated_alias() -> None:
    import autobyte.testing as testing

    assert "run_ranks" in testing.__all__ and "launch" not in testing.__all__
    with pytest.warns(DeprecationWarning, match="renamed autobyte.testing.run_ranks") as caught:
        assert testing.launch(["-c", "pass"], 0) == testing.run_ranks(["-c", "pass"], 0) == []  # 0 ranks: starts nothing
    assert [w.filename for w in caught] == [__file__]  # stacklevel=2: the warning points at the caller's line
