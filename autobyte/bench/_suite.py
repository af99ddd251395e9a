"""``autobyte bench --suite NAME``: named lists of real testbed scenarios, every method side by side.

A scenario (:mod:`autobyte.bench._scenarios`) is a model plus a trace of
phases; each phase has a condition (link rates, a competing TCP flow or not,
one worker's compute slowed down or not). The suite runner (:func:`run_suite`)
reuses ``autobyte bench``'s mechanism (:func:`autobyte.bench._real._run`):

1. a grid of configs is measured once per distinct (model, batch, condition,
   the condition the trace enters it from): each config's warm-up under the
   condition the trace leaves for this one, its measured iterations under this
   one, so every config is measured after the transition the trace makes
   (:func:`~autobyte.bench._scenarios.grid_phases`); a condition the trace
   only starts with is held for the whole grid;
2. from the grids: the per-phase **oracle** (each phase switches to its
   condition's best config) and the **best static config in hindsight** (the
   one grid config minimising the predicted time of the whole trace:
   ``sum(phase iters / grid speed at the phase's condition)``), which is then
   run for real like every other method; BO searches at the first phase's
   condition and is then run frozen;
3. every method runs the scenario's trace, in rounds, the order rotated per
   repeat, so the machine's noise hits all methods alike.

Outputs (``--out``): per scenario a folder with every run's raw
``iterations.jsonl``/``decisions.jsonl``, ``iterations.csv`` and
``throughput.png``; for the suite ``suite_summary.md`` / ``.json`` (median and
spread over repeats, ratios, geometric means for ``tune`` and ``heldout``
scenarios separately, the do-no-harm figure, tuner CPU). See
``docs/benchmarks.md`` (Benchmark suite). The summaries and tables are
:mod:`autobyte.bench._suite_report`'s.
"""

from __future__ import annotations

import csv
import json
import math
import os
from dataclasses import dataclass, field
from typing import Any, Mapping, NamedTuple, Sequence

from ..core import BYTESCHEDULER_DEFAULT, Config
from ..core._checks import check_int
from ..core.tuners import import_tuners
from ._headroom import STATIC, analyse_runs, finite
from ._real import BASELINE, read_runs
from ._scenarios import SUITES, Condition, Scenario, Suite, condition_trace, grid_phases, phases_slowdown, phases_trace
from ._suite_report import N_WORKERS, is_tuner, summarize_scenario, summarize_suite, throughput, write_suite

#: Methods every suite knows; any registered tuner also runs as ``tuner:NAME``.
BASE_METHODS = ("ddp", "bytescheduler", "bo", "hindsight", "oracle", "autobyte")


#: The columns of a scenario's ``iterations.csv`` (:func:`write_scenario`; :func:`read_iterations` reads them).
ITERATION_FIELDS = ("method", "repeat", "iteration", "condition", "seconds", "samples_per_s", "partition_bytes", "credit_bytes")


class IterationRow(NamedTuple):
    """One row of a scenario's ``iterations.csv``: one iteration of one method's run."""

    method: str
    repeat: int
    iteration: int
    #: the trace's condition at this iteration (:attr:`Condition.key`)
    condition: str
    seconds: float
    samples_per_s: float
    #: the configuration in force; ``None`` for a method without one (DDP)
    config: Config | None


def _iteration_row(r: dict[str, str]) -> IterationRow:
    cfg = None if r["partition_bytes"] == "" else Config(int(r["partition_bytes"]), int(r["credit_bytes"]))
    return IterationRow(r["method"], int(r["repeat"]), int(r["iteration"]), r["condition"],
                        float(r["seconds"]), float(r["samples_per_s"]), cfg)


def read_iterations(path: str | os.PathLike[str]) -> dict[tuple[str, int], list[IterationRow]]:
    """Every run in a scenario's ``iterations.csv``, by ``(method, repeat)``, its rows in iteration order.

    ``path``: the file, or the scenario's folder holding it (as :func:`write_scenario` leaves it).

    Raises:
        FileNotFoundError: no such file.
        ValueError: a column missing, or a value that is not a number where one belongs (file and line named).
    """
    return read_runs(path, ITERATION_FIELDS, "a suite's iterations.csv", _iteration_row, lambda r: (r.method, r.repeat))


def iteration_rows(sc: Scenario, runs: Mapping[str, Sequence[Sequence[Mapping[str, Any]]]]) -> dict[tuple[str, int], list[IterationRow]]:
    """The rows :func:`read_iterations` reads back from a scenario's ``iterations.csv``, made from the runs in memory
    (``runs[method][repeat]``: that run's iterations as the rank script wrote them)."""
    out: dict[tuple[str, int], list[IterationRow]] = {}
    for m, reps in runs.items():
        for r, its in enumerate(reps):
            rows = [IterationRow(m, r, int(x["iteration"]), sc.condition_at(int(x["iteration"])).key, float(x["seconds"]),
                                 float(x["samples_per_s"]), Config(*x["config"]) if x.get("config") else None) for x in its]
            out[(m, r)] = sorted(rows, key=lambda row: row.iteration)
    return out


def _positive_number(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive number, but got {name}={value!r}.")
    return float(value)


def check_method(name: str) -> str:
    """A suite method: one of :data:`BASE_METHODS` or ``tuner:NAME`` of a registered tuner."""
    from ..core.tuners import tuner_names

    if name in BASE_METHODS:
        return name
    kind, sep, tuner = name.partition(":") if isinstance(name, str) else ("", "", "")
    if kind == "tuner" and sep and tuner in tuner_names():
        return name
    raise ValueError(f"methods must each be one of {', '.join(BASE_METHODS)} or tuner:NAME with NAME one of "
                     f"{', '.join(tuner_names())}, but got {name!r}.")


@dataclass
class SuitePlan:
    """What one ``autobyte bench --suite`` run does.

    Args:
        suite: a name of :data:`SUITES`.
        repeats: rounds of every method (default: the suite's).
        methods: subset of :data:`BASE_METHODS` and ``tuner:NAME`` (default: all base methods).
        scenarios: subset of the suite's scenario names (default: all).
        imports: modules or ``.py`` files that register tuners
            (:func:`~autobyte.core.tuners.import_tuners`), imported here and in
            every rank process, so ``tuner:NAME`` can name what they register
            (a variant of a tuner, run beside it in one command).

    Raises:
        ValueError: an unknown suite, method or scenario; repeats not a positive
            integer; an import that fails.
    """

    suite: str = "quick"
    repeats: int | None = None
    methods: Sequence[str] = BASE_METHODS
    scenarios: Sequence[str] | None = None
    imports: Sequence[str] = ()
    timeout_s: float = 1800.0
    batch_size: int = 16  # only for _run's signature; each scenario sets its own
    chosen: Suite = field(init=False)

    def __post_init__(self) -> None:
        if self.suite not in SUITES:
            raise ValueError(f"suite must be one of {', '.join(SUITES)}, but got suite={self.suite!r}.")
        s = SUITES[self.suite]
        if self.repeats is None:
            self.repeats = s.repeats
        check_int("repeats", self.repeats)
        if isinstance(self.imports, str):
            raise ValueError(f"imports must be a list of module names or .py paths, but got imports={self.imports!r}.")
        # files by absolute path: the rank processes start elsewhere
        self.imports = [os.path.abspath(m) if isinstance(m, str) and m.endswith(".py") else m for m in self.imports]
        import_tuners(self.imports)
        if isinstance(self.methods, str) or not self.methods:
            raise ValueError(f"methods must be a non-empty list of methods, but got methods={self.methods!r}.")
        self.methods = list(dict.fromkeys(check_method(m) for m in self.methods))
        names = [sc.name for sc in s.scenarios]
        if self.scenarios is None:
            self.scenarios = names
        if isinstance(self.scenarios, str) or not self.scenarios:
            raise ValueError(f"scenarios must be a non-empty list of scenario names, but got scenarios={self.scenarios!r}.")
        unknown = [n for n in self.scenarios if n not in names]
        if unknown:
            raise ValueError(f"scenarios must be names of suite {self.suite!r} ({', '.join(names)}), but got {unknown[0]!r}.")
        self.scenarios = list(dict.fromkeys(self.scenarios))
        _positive_number("timeout_s", self.timeout_s)
        self.chosen = s

    def selected(self) -> list[Scenario]:
        assert self.scenarios is not None
        return [sc for sc in self.chosen.scenarios if sc.name in self.scenarios]

    def order(self, repeat: int) -> list[str]:
        """Methods of round ``repeat``: the list rotated by ``repeat`` so no method always runs first."""
        k = repeat % len(self.methods)
        return list(self.methods[k:]) + list(self.methods[:k])


# -- the maths (pure, tested on synthetic numbers) ---------------------------------------------------

def predicted_seconds(sc: Scenario, grids: Mapping[Condition, Mapping[Config, float]], config: Config) -> float:
    """Seconds the whole trace takes at static ``config``, from the grids' samples/s per condition."""
    per_iter = sc.batch_size * N_WORKERS
    return sum(p.iters * per_iter / grids[p.condition][config] for p in sc.phases)


def best_static_in_hindsight(sc: Scenario, grids: Mapping[Condition, Mapping[Config, float]]) -> Config:
    """The one grid config with the least predicted time over the whole trace.

    Raises:
        ValueError: a condition has no grid, or the grids do not share a config.
    """
    conds = sc.conditions()
    missing = [c.key for c in conds if c not in grids]
    if missing:
        raise ValueError(f"grids must cover every condition of scenario {sc.name!r}, but {missing[0]!r} has none.")
    common = set.intersection(*(set(grids[c]) for c in conds))
    if not common:
        raise ValueError(f"the grids of scenario {sc.name!r} must share at least one config, but they share none.")
    from ._real import least_time_config

    iters: dict[Condition, int] = {}
    for p in sc.phases:
        iters[p.condition] = iters.get(p.condition, 0) + p.iters
    return least_time_config(iters, grids)


def oracle_phases(sc: Scenario, grids: Mapping[Condition, Mapping[Config, float]]) -> list[list[Any]]:
    """The ``phases`` spec of the per-phase oracle: each phase at its condition's fastest grid config."""
    out = []
    for start, p in zip(sc.starts(), sc.phases):
        g = grids[p.condition]
        best = max(sorted(g, key=lambda c: (c.partition_bytes, c.credit_bytes)), key=g.__getitem__)
        out.append([start, [best.partition_bytes, best.credit_bytes]])
    return out


def _specs(sc: Scenario, suite: Suite, grids: Mapping[Condition, Mapping[Config, float]] | None,
           bo_config: Config | None) -> dict[str, dict[str, Any]]:
    start = [BYTESCHEDULER_DEFAULT.partition_bytes, BYTESCHEDULER_DEFAULT.credit_bytes]
    specs: dict[str, dict[str, Any]] = {
        "ddp": {"method": BASELINE[sc.arch]},  # the unscheduled baseline: DDP, or plain dist_sync on a parameter server
        "bytescheduler": {"method": "static", "config": start},
        "autobyte": {"method": "tuner", "tuner": "autobyte", "window_iters": suite.window_iters, "config": start},
    }
    if bo_config is not None:
        specs["bo"] = {"method": "static", "config": [bo_config.partition_bytes, bo_config.credit_bytes]}
    if grids is not None:
        h = best_static_in_hindsight(sc, grids)
        specs["hindsight"] = {"method": "static", "config": [h.partition_bytes, h.credit_bytes]}
        specs["oracle"] = {"method": "phases", "phases": oracle_phases(sc, grids)}
    return specs


def _spec_for(method: str, specs: Mapping[str, dict[str, Any]], suite: Suite) -> dict[str, Any]:
    if method.startswith("tuner:"):
        return {"method": "tuner", "tuner": method.split(":", 1)[1], "window_iters": suite.window_iters,
                "config": [BYTESCHEDULER_DEFAULT.partition_bytes, BYTESCHEDULER_DEFAULT.credit_bytes]}
    return specs[method]


def _dirname(method: str) -> str:
    return method.replace(":", "-")


def run_suite(plan: SuitePlan, out: str, log: Any = print) -> dict[str, Any]:
    """Run every selected scenario of ``plan``'s suite; write per-scenario outputs and the suite table."""
    from ..testbed._netns import require_root
    from ._real import _bo_search, _read_sweep, _run, _sweep_spec
    from ._scenarios import condition_slowdown

    require_root()
    os.makedirs(out, exist_ok=True)
    suite = plan.chosen
    assert plan.repeats is not None
    grid = suite.grid()
    log(f"autobyte bench --suite {suite.name}: {len(plan.selected())} scenario(s), {plan.repeats} repeat(s), "
        f"methods {', '.join(plan.methods)}")
    cache: dict[tuple[str, Condition | None, Condition], dict[Config, float]] = {}
    compute: dict[tuple[str, int], float] = {}
    summaries = []
    for sc in plan.selected():
        log(f"scenario {sc.name} [{sc.tag}]: {sc.about} ({sc.iters} iterations)")
        d_sc = os.path.join(out, sc.name)
        base: dict[str, Any] = sc.spec()
        # emulated: the rank scales its sleeps; a parameter-server rank measures its own (MXNet) compute
        if any(c.slowdown > 1.0 for c in sc.conditions()) and not sc.emulated and sc.arch == "allreduce":
            # measured once here, so every run of the scenario (grids included) sleeps alike whatever the load then
            key_c = (sc.model, sc.batch_size)
            if key_c not in compute:
                from .allreduce_ranks import compute_seconds

                compute[key_c] = compute_seconds(sc.model, sc.batch_size)
                log(f" {sc.model} batch {sc.batch_size}: {compute[key_c]:.3f} s of local compute per iteration (the slowdown's unit)")
            base["compute_s"] = compute[key_c]
        grids: dict[Condition, dict[Config, float]] | None = None
        grid_after: dict[str, str | None] = {}  # per condition: the condition its grid's warm-ups ran under
        if {"hindsight", "oracle"} & set(plan.methods):
            grids = {}
            for c in sc.conditions():
                before = sc.entered_from(c) if suite.grid_warmup > 0 else None
                key = (sc.model_key, before, c)
                if key not in cache:
                    log(f" grid at {c.key}{'' if before is None else f' after {before.key}'} ({len(grid)} configs)")
                    d = os.path.join(out, "grids", f"{sc.model_key}-{c.key}" + ("" if before is None else f"-after-{before.key}"))
                    ph = grid_phases(c, before, len(grid), suite.grid_iters, suite.grid_warmup)
                    _run(dict(_sweep_spec(grid, suite.grid_iters, suite.grid_warmup), slowdown=phases_slowdown(ph), **base),
                         phases_trace(ph), d, plan, log, sc.arch)
                    cache[key] = _read_sweep(d)
                grids[c] = cache[key]
                grid_after[c.key] = None if before is None else before.key
        bo_config = None
        if "bo" in plan.methods:
            c0 = sc.phases[0].condition
            log(f" BO search at {c0.key} ({suite.bo_iters} iterations)")
            bo_config = _bo_search(dict(base, slowdown=condition_slowdown(c0)), condition_trace(c0), os.path.join(d_sc, "bo_search"),
                                   plan, log, iters=suite.bo_iters, window_iters=suite.window_iters, arch=sc.arch)
        specs = _specs(sc, suite, grids, bo_config)
        if "hindsight" in specs:
            log(f" best static in hindsight: {specs['hindsight']['config']}; oracle phases: {specs['oracle']['phases']}")
        runs: dict[str, list[list[dict[str, Any]]]] = {m: [] for m in plan.methods}
        decisions: dict[str, list[list[dict[str, Any]]]] = {m: [] for m in plan.methods}
        meta: dict[str, list[dict[str, Any]]] = {m: [] for m in plan.methods}
        trace = sc.trace()
        for r in range(plan.repeats):
            for m in plan.order(r):
                d = os.path.join(d_sc, f"r{r}_{_dirname(m)}")
                spec = dict(_spec_for(m, specs, suite), iters=sc.iters, slowdown=sc.slowdown(), **base)
                if is_tuner(m) and plan.imports:
                    spec["imports"] = list(plan.imports)
                runs[m].append(_run(spec, trace, d, plan, log, sc.arch))
                with open(os.path.join(d, "decisions.jsonl")) as f:
                    decisions[m].append([json.loads(line) for line in f])
                try:
                    with open(os.path.join(d, "rank0.json")) as f:
                        meta[m].append(json.load(f))
                except OSError:
                    meta[m].append({})
        s = summarize_scenario(sc, runs, meta, decisions)
        if "compute_s" in base:
            s["compute_s"] = base["compute_s"]
        s["configs"] = {"bytescheduler": list(specs["bytescheduler"]["config"])}
        for k in ("hindsight", "bo"):
            if k in specs:
                s["configs"][k] = list(specs[k]["config"])
        if "oracle" in specs:
            s["configs"]["oracle_phases"] = specs["oracle"]["phases"]
        if grids is not None:
            s["grids"] = {c.key: {f"{k.partition_bytes},{k.credit_bytes}": v for k, v in g.items()} for c, g in grids.items()}
            s["grid_after"] = grid_after
            h = Config(*specs["hindsight"]["config"])
            s["hindsight_predicted_samples_per_s"] = sc.batch_size * N_WORKERS * sc.iters / predicted_seconds(sc, grids, h)
        if set(STATIC) <= set(plan.methods):  # what any tuner could win here, against the noise (benchmarks/headroom.py's)
            s["headroom"] = finite(analyse_runs(iteration_rows(sc, runs), s, window=suite.window_iters))
        write_scenario(sc, runs, decisions, s, d_sc)
        summaries.append(s)
        write_suite(summarize_suite(suite.name, plan.repeats, summaries), out)  # a partial table survives an interrupted suite
    summary = summarize_suite(suite.name, plan.repeats, summaries)
    write_suite(summary, out)
    return summary


def write_scenario(sc: Scenario, runs: Mapping[str, Sequence[Sequence[Mapping[str, Any]]]],
                   decisions: Mapping[str, Sequence[Sequence[Mapping[str, Any]]]], summary: Mapping[str, Any], out: str) -> None:
    """``iterations.csv``, ``decisions.jsonl``, ``summary.json`` and ``throughput.png`` of one scenario."""
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "iterations.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(ITERATION_FIELDS)
        for m, reps in runs.items():
            for r, its in enumerate(reps):
                for row in its:
                    cfg = row.get("config") or ["", ""]
                    w.writerow([m, r, row["iteration"], sc.condition_at(row["iteration"]).key, f"{row['seconds']:.6f}",
                                f"{row['samples_per_s']:.3f}", cfg[0], cfg[1]])
    with open(os.path.join(out, "decisions.jsonl"), "w") as f:
        for m, reps in decisions.items():
            for r, ds in enumerate(reps):
                for d in ds:
                    f.write(json.dumps({"method": m, "repeat": r, **d}) + "\n")
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    try:
        plot_scenario(sc, runs, decisions, os.path.join(out, "throughput.png"))
    except ImportError:
        pass


def plot_scenario(sc: Scenario, runs: Mapping[str, Sequence[Sequence[Mapping[str, Any]]]],
                  decisions: Mapping[str, Sequence[Sequence[Mapping[str, Any]]]], path: str, avg: int = 5) -> None:
    """Throughput over iterations of each method's first repeat; phases shaded by condition; tuners' changes dotted."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 4))
    conds = sc.conditions()
    shades = [str(0.97 - 0.1 * (i % 5)) for i in range(len(conds))]
    for start, p in zip(sc.starts(), sc.phases):
        ax.axvspan(start, start + p.iters, color=shades[conds.index(p.condition)], lw=0)
        ax.text(start + 0.5, 0.98, p.condition.key, transform=ax.get_xaxis_transform(), fontsize=6, va="top")
    for m, reps in runs.items():
        if not reps:
            continue
        its = reps[0]
        xs, ys = [], []
        for i in range(0, len(its), avg):
            seg = its[i:i + avg]
            xs.append(seg[0]["iteration"] + len(seg) / 2)
            ys.append(throughput(seg, sc.batch_size))
        line, = ax.plot(xs, ys, label=m, lw=1.4)
        if is_tuner(m) and decisions.get(m):
            prev = None
            for dec in decisions[m][0]:
                if dec.get("reason") and dec["config"] != prev:
                    ax.axvline(dec["iteration"], color=line.get_color(), ls=":", lw=0.8)
                prev = dec["config"]
    ax.set_xlabel("iteration (shade: phase condition)")
    ax.set_ylabel(f"samples/s ({avg}-iteration average)")
    ax.set_title(f"{sc.name} [{sc.tag}], repeat 0 (dotted: tuner reconfigurations)", fontsize=9)
    ax.legend(ncol=3, fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
