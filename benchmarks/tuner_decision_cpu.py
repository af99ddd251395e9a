"""The CPU of AutoByte's decisions in the simulator, the shipped tuner beside a variant (process clock, ``cpu_s``).

Runs the scenarios of ``tests/meta/test_shipped_decisions.py`` (its first six, tuning: adaptation off, so only the
decisions are timed) with ``make_tuner("autobyte")`` and again with the variant named, each ``--repeats`` times in
turn, and prints the tuners' total ``cpu_s`` per run. Without ``OMP_NUM_THREADS``/``OPENBLAS_NUM_THREADS`` set, numpy's
BLAS has a thread per core, as in a training process:

    python benchmarks/tuner_decision_cpu.py --variant autobyte-blas-threads-free --repeats 3
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests" / "meta")]


def run(name: str) -> float:
    """Total ``cpu_s`` of the tuners built as ``name`` over the pinned tuning scenarios."""
    import autobyte.core.tuners as tuners
    import test_shipped_decisions as pinned

    made: list[Any] = []
    build = tuners.make_tuner

    def make(which: str, **kw: Any) -> Any:
        t = build(name if which == "autobyte" else which, **kw)
        made.append(t)
        return t

    tuners.make_tuner = make  # type: ignore[assignment]
    pinned.SCENARIOS = [s for s in pinned.SCENARIOS if s[0] == "tune" and s[2] == 0.0]
    try:
        pinned.decisions()
    finally:
        tuners.make_tuner = build  # type: ignore[assignment]
    return sum(t.cpu_s for t in made)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variant", required=True, help="a registered tuner name (tuner_variants.py is imported)")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    importlib.import_module("tuner_variants")  # registers the variants

    got: dict[str, list[float]] = {"autobyte": [], args.variant: []}
    for _ in range(args.repeats):
        for name in got:
            got[name].append(run(name))
    for name, v in got.items():
        print(f"{name}: {statistics.median(v):.3f} s of decisions' CPU (runs {', '.join(f'{x:.3f}' for x in v)})")


if __name__ == "__main__":
    main()
