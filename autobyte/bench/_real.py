"""``autobyte bench``: real training, side by side on one bandwidth trace.

Every method trains the same model with 2 workers in network namespaces
whose links follow the same trace (``autobyte.testbed``), one method after
the other within one command:

* ``ddp``: plain DistributedDataParallel (25 MiB buckets); with ``--arch ps``
  ``dist_sync`` instead: plain MXNet ``dist_sync`` (one server per worker,
  co-located in its namespace, as in the paper);
* ``bytescheduler``: the scheduled engine at ByteScheduler's default config;
* ``bo``: the config ByteScheduler's Bayesian optimisation finds (run for
  real at the trace's first rate, then frozen);
* ``hindsight``: the best single config over the whole trace, from the
  oracle's grids (optional);
* ``autobyte``: the engine tuned online by the shipped meta-network;
* ``oracle``: per-phase best config, from a grid measured at every rate of the
  trace, switched at each phase boundary.

Outputs (in ``--out``): ``iterations.csv`` (every iteration of every method),
``summary.csv`` and ``summary.md`` (throughput and ratios, per phase kind),
``throughput.png`` (throughput over iterations, reconfigurations marked, like
the paper's Fig. 6), and the raw per-run JSON lines.
"""

from __future__ import annotations

import csv
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, NamedTuple, Protocol, Sequence, TypeVar

from ..core import BYTESCHEDULER_DEFAULT, DDP_DEFAULT, KiB, MiB, Config
from ..core._checks import check_int, check_positive


def check_rates(low_mbit: Any, high_mbit: Any, *, constant_ok: bool = False) -> None:
    """A step trace's two rates: positive, high above low (or equal to it with ``constant_ok``: a constant trace)."""
    check_positive("low_mbit", low_mbit, "Mbit/s")
    check_positive("high_mbit", high_mbit, "Mbit/s")
    if high_mbit < low_mbit or (high_mbit == low_mbit and not constant_ok):
        rule = "above low_mbit or equal to it (a constant trace)" if constant_ok else "above low_mbit"
        raise ValueError(f"high_mbit must be {rule}, but got low_mbit={low_mbit}, high_mbit={high_mbit}.")

#: The oracle's candidate grid (also BO's search box corners): partitions x credit multiples.
GRID_PARTITIONS = (64 * KiB, 256 * KiB, 1 * MiB, 4 * MiB, 16 * MiB)
GRID_CREDITS = (1, 2, 4)
METHODS = ("ddp", "bytescheduler", "bo", "autobyte", "oracle")
#: Communication architectures: ring all-reduce (torch gloo, ``allreduce_ranks``) or an MXNet parameter server (``ps_ranks``).
ARCHS = ("allreduce", "ps")
#: The methods of ``--arch ps``: plain ``dist_sync`` is the unscheduled baseline (DDP has no place on a parameter server).
PS_METHODS = ("dist_sync", "bytescheduler", "bo", "hindsight", "autobyte", "oracle")
#: Every method ``run_bench`` knows, per architecture (``hindsight`` is optional on all-reduce).
ARCH_METHODS = {"allreduce": METHODS + ("hindsight",), "ps": PS_METHODS}
#: The unscheduled baseline of each architecture.
BASELINE = {"allreduce": "ddp", "ps": "dist_sync"}
#: The runner module of each architecture: one process per rank, same spec, same outputs.
RANKS_MODULE = {"allreduce": "autobyte.bench.allreduce_ranks", "ps": "autobyte.bench.ps_ranks"}


def check_arch_methods(arch: Any, methods: Sequence[str]) -> None:
    """``arch`` is one of :data:`ARCHS` and every method exists on it."""
    if arch not in ARCHS:
        raise ValueError(f"arch must be one of {ARCHS}, but got arch={arch!r}.")
    known = ARCH_METHODS[arch]
    bad = [m for m in methods if m not in known]
    if bad or not methods:
        hint = f" ({bad[0]!r} is the baseline of arch={[a for a in ARCHS if a != arch][0]!r})" if bad and bad[0] in BASELINE.values() else ""
        raise ValueError(f"methods must be a non-empty subset of {known} with arch={arch!r}, but got {list(methods)!r}{hint}.")


@dataclass
class BenchPlan:
    """What one ``autobyte bench`` run does (``low_mbit == high_mbit``: a constant trace, one grid)."""

    low_mbit: float = 200.0
    high_mbit: float = 2000.0
    every: int = 20
    iters: int = 200
    methods: Sequence[str] = METHODS
    window_iters: int = 10
    grid_iters: int = 6
    grid_warmup: int = 2
    bo_iters: int = 200
    batch_size: int = 16
    timeout_s: float = 1800.0
    #: ``"allreduce"`` or ``"ps"`` (:data:`ARCHS`)
    arch: str = "allreduce"
    #: spec fields for every run (e.g. ``{"model": "emu:resnet50", "compute_scale": 10}``)
    model_spec: dict[str, Any] | None = None
    #: iterations per window of the BO search (default ``window_iters``): short runs need shorter windows for BO to converge
    bo_window_iters: int | None = None
    #: the oracle's grid (default :func:`_grid`)
    grid: Sequence[Config] | None = None

    def __post_init__(self) -> None:
        check_rates(self.low_mbit, self.high_mbit, constant_ok=True)
        for name in ("every", "iters", "window_iters", "grid_iters", "bo_iters", "batch_size"):
            check_int(name, getattr(self, name))
        if self.arch == "ps" and self.methods is METHODS:  # the default methods: the parameter server's
            self.methods = PS_METHODS
        check_arch_methods(self.arch, self.methods)
        if self.grid is not None and not self.grid:
            raise ValueError(f"grid must be a non-empty list of configs or None, but got grid={self.grid!r}.")

    def grid_configs(self) -> list[Config]:
        return list(self.grid) if self.grid is not None else _grid()

    def rate_at(self, it: int) -> float:
        """The trace starts high (as the paper's Fig. 6) and alternates every ``every`` iterations."""
        return self.high_mbit if (it // self.every) % 2 == 0 else self.low_mbit

    def trace_spec(self) -> str:
        if self.low_mbit == self.high_mbit:
            return f"const:{self.high_mbit:g}"
        n = -(-self.iters // self.every)
        return f"step:{self.high_mbit:g},{self.low_mbit:g}@{self.every}it,n={n}"


def _grid() -> list[Config]:
    return [Config.from_multiple(p, m) for p in GRID_PARTITIONS for m in GRID_CREDITS]


def _run(spec: dict[str, Any], trace: Any, out_dir: str, plan: Any, log: Any, arch: str | None = None) -> list[dict[str, Any]]:
    """Run the rank module of ``arch`` with ``spec`` on 2 testbed workers following ``trace``; its iterations.

    ``trace`` is a ``--trace`` string or a :class:`~autobyte.testbed.BandwidthTrace`;
    ``plan`` gives ``batch_size`` and ``timeout_s`` (a :class:`BenchPlan` or a suite's plan) and the
    architecture when ``arch`` is ``None`` (a suite's scenario names its own).
    """
    from ..testbed import BandwidthTrace, Testbed

    os.makedirs(out_dir, exist_ok=True)
    spec = dict(getattr(plan, "model_spec", None) or {}, **spec)
    spec = dict(spec, batch_size=spec.get("batch_size", plan.batch_size))
    arch = arch or str(getattr(plan, "arch", "allreduce"))
    cmd = [sys.executable, "-m", RANKS_MODULE[arch], json.dumps(spec), out_dir]
    bw = trace if isinstance(trace, BandwidthTrace) else BandwidthTrace.parse(trace)
    t0 = time.monotonic()
    with open(os.path.join(out_dir, "launch.log"), "w") as f, Testbed(2, trace=bw) as tb:
        rc = tb.run(cmd, ps=arch == "ps", timeout_s=plan.timeout_s, events_log=os.path.join(out_dir, "events.jsonl"),
                    env={"PYTHONUNBUFFERED": "1"}, stdout=f)
    if rc != 0:
        raise RuntimeError(f"run {spec['method']} in {out_dir} failed with exit code {rc}; see {out_dir}/launch.log")
    log(f"  {os.path.basename(out_dir)}: {time.monotonic() - t0:.0f} s")
    with open(os.path.join(out_dir, "iterations.jsonl")) as f:
        return [json.loads(line) for line in f]


def _sweep_spec(configs: Sequence[Config], iters_per_config: int, warmup: int) -> dict[str, Any]:
    return {"method": "sweep", "configs": [[c.partition_bytes, c.credit_bytes] for c in configs],
            "iters_per_config": iters_per_config, "warmup": warmup}


def _read_sweep(d: str) -> dict[Config, float]:
    with open(os.path.join(d, "sweep.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    return {Config(*r["config"]): r["samples_per_s"] for r in rows}


def _sweep(rate: float, plan: BenchPlan, out: str, log: Any) -> dict[Config, float]:
    d = os.path.join(out, f"grid_{rate:g}mbit")
    _run(_sweep_spec(plan.grid_configs(), plan.grid_iters, plan.grid_warmup), f"const:{rate:g}", d, plan, log)
    return _read_sweep(d)


def bo_result(decided: Sequence[dict[str, Any]]) -> tuple[Config, bool]:
    """BO's config from its ``decisions.jsonl`` rows, and whether it froze (else its last probe, or the default)."""
    froze = [d for d in decided if "frozen" in str(d.get("reason"))]  # the windows after it carry no reason
    last = froze[-1] if froze else (decided[-1] if decided else None)
    return (Config(*last["config"]) if last is not None else BYTESCHEDULER_DEFAULT), bool(froze)


def _bo_search(extra: dict[str, Any], trace: Any, d: str, plan: Any, log: Any, *, iters: int, window_iters: int,
               arch: str | None = None) -> Config:
    """Run ByteScheduler's BO tuner for ``iters`` iterations from the default config; the config it froze at.

    BO freezes after its last step (``n_steps`` windows, plus the first,
    discarded one); with fewer iterations the last decision is still a probe:
    that is logged, and the probe is returned as it is.
    """
    start = [BYTESCHEDULER_DEFAULT.partition_bytes, BYTESCHEDULER_DEFAULT.credit_bytes]
    # an offline search, meant to try bad configurations: the do-no-harm guard is off for it
    _run(dict(extra, method="tuner", tuner="bo", config=start, iters=iters, window_iters=window_iters, guarded=False),
         trace, d, plan, log, arch)
    with open(os.path.join(d, "decisions.jsonl")) as f:
        decided = [json.loads(line) for line in f]
    bo_config, frozen = bo_result(decided)
    log(f"  BO {'froze' if frozen else 'did NOT finish its search; its last probe'} at {bo_config}")
    return bo_config


def run_bench(plan: BenchPlan, out: str, log: Any = print) -> dict[str, Any]:
    """Run every method of ``plan`` on the same trace; write and return the summary."""
    from ..testbed._netns import require_root

    require_root()
    os.makedirs(out, exist_ok=True)
    trace = plan.trace_spec()
    log(f"autobyte bench ({plan.arch}): 2 workers, trace {trace}, {plan.iters} iterations, methods {', '.join(plan.methods)}")
    runs: dict[str, list[dict[str, Any]]] = {}
    decisions: dict[str, list[dict[str, Any]]] = {}
    best: dict[float, Config] = {}
    grid: dict[float, dict[Config, float]] = {}
    if {"oracle", "hindsight"} & set(plan.methods):
        for rate in dict.fromkeys((plan.high_mbit, plan.low_mbit)):  # one grid on a constant trace
            log(f"oracle grid at {rate:g} Mbit/s ({len(plan.grid_configs())} configs)")
            grid[rate] = _sweep(rate, plan, out, log)
            best[rate] = max(grid[rate], key=grid[rate].__getitem__)
            log(f"  best {best[rate]} at {grid[rate][best[rate]]:.1f} samples/s")
    bo_config = None
    if "bo" in plan.methods:
        log(f"BO search at {plan.high_mbit:g} Mbit/s ({plan.bo_iters} iterations)")
        bo_config = _bo_search({}, f"const:{plan.high_mbit:g}", os.path.join(out, "bo_search"), plan, log,
                               iters=plan.bo_iters, window_iters=plan.bo_window_iters or plan.window_iters)
    specs: dict[str, dict[str, Any]] = {
        "ddp": {"method": "ddp"},
        "dist_sync": {"method": "dist_sync"},
        "bytescheduler": {"method": "static", "config": [BYTESCHEDULER_DEFAULT.partition_bytes, BYTESCHEDULER_DEFAULT.credit_bytes]},
        "autobyte": {"method": "tuner", "tuner": "autobyte", "window_iters": plan.window_iters,
                     "config": [BYTESCHEDULER_DEFAULT.partition_bytes, BYTESCHEDULER_DEFAULT.credit_bytes]},
    }
    if bo_config is not None:
        specs["bo"] = {"method": "static", "config": [bo_config.partition_bytes, bo_config.credit_bytes]}
    if best:
        phases = []
        for start in range(0, plan.iters, plan.every):
            c = best[plan.rate_at(start)]
            phases.append([start, [c.partition_bytes, c.credit_bytes]])
        specs["oracle"] = {"method": "phases", "phases": phases}
        h = hindsight_config(plan, grid)
        specs["hindsight"] = {"method": "static", "config": [h.partition_bytes, h.credit_bytes]}
    for m in plan.methods:
        log(f"trace run: {m}")
        d = os.path.join(out, f"run_{m}")
        runs[m] = _run(dict(specs[m], iters=plan.iters), trace, d, plan, log)
        with open(os.path.join(d, "decisions.jsonl")) as f:
            decisions[m] = [json.loads(line) for line in f]
    summary = summarize(plan, runs)
    summary["bo_config"] = None if bo_config is None else bo_config.to_dict()
    summary["oracle_configs"] = {f"{r:g}": c.to_dict() for r, c in best.items()}
    summary["hindsight_config"] = specs["hindsight"]["config"] if "hindsight" in specs else None
    summary["arch"] = plan.arch
    summary["grid"] = {f"{r:g}": [[c.partition_bytes, c.credit_bytes, v] for c, v in g.items()] for r, g in grid.items()}
    write_outputs(plan, runs, decisions, summary, out)
    return summary


def least_time_config(iters: Mapping[Any, int], grids: Mapping[Any, Mapping[Config, float]]) -> Config:
    """The one config every grid measured with the least predicted time, ``sum(iters[k] / grids[k][config])``.

    ``iters`` gives the iterations run under each condition ``k`` and
    ``grids[k]`` the samples/s measured there; ties go to the smaller
    ``(partition, credit)``. The best static config in hindsight of
    ``autobyte bench`` and of the suite.
    """
    common = set.intersection(*(set(grids[k]) for k in iters))
    return min(sorted(common, key=lambda c: (c.partition_bytes, c.credit_bytes)),
               key=lambda c: sum(n / grids[k][c] for k, n in iters.items()))


def hindsight_config(plan: BenchPlan, grid: dict[float, dict[Config, float]]) -> Config:
    """The one config with the shortest predicted time over the whole trace (iterations per rate / grid throughput)."""
    return least_time_config({r: sum(1 for it in range(plan.iters) if plan.rate_at(it) == r) for r in grid}, grid)


def summarize(plan: BenchPlan, runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Throughput per method (all iterations, and per phase kind) and ratios."""
    rows = {}
    for m, its in runs.items():
        def tput(sel: list[dict[str, Any]]) -> float:
            secs = sum(r["seconds"] for r in sel)
            return plan.batch_size * 2 * len(sel) / secs if secs > 0 else 0.0

        rows[m] = {
            "all": tput(its),
            "low": tput([r for r in its if plan.rate_at(r["iteration"]) == plan.low_mbit]),
            "high": tput([r for r in its if plan.rate_at(r["iteration"]) == plan.high_mbit]),
        }
    out: dict[str, Any] = {"throughput": rows, "trace": plan.trace_spec()}
    for ref in ("bo", "hindsight", "oracle", "ddp", "dist_sync"):
        if ref in rows:
            out[f"vs_{ref}"] = {m: {k: (v[k] / rows[ref][k] if rows[ref][k] else None) for k in v} for m, v in rows.items()}
    return out


#: The columns of a bench's ``iterations.csv`` (:func:`write_outputs`; :func:`read_iterations` reads them).
ITERATION_FIELDS = ("method", "iteration", "rate_mbit", "seconds", "samples_per_s", "partition_bytes", "credit_bytes")


class _Iteration(Protocol):
    @property
    def iteration(self) -> int: ...


_Row = TypeVar("_Row", bound=_Iteration)
_Key = TypeVar("_Key")


def read_runs(path: str | os.PathLike[str], fields: Sequence[str], what: str, row: Callable[[dict[str, str]], _Row],
              key: Callable[[_Row], _Key]) -> dict[_Key, list[_Row]]:
    """Every run in an ``iterations.csv`` the bench wrote, by ``key``, its rows (made by ``row``) in iteration order.

    ``path``: the file, or the folder holding it; ``fields``: the columns the
    file must have; ``what``: the file's name in an error ("a suite's
    iterations.csv").

    Raises:
        FileNotFoundError: no such file.
        ValueError: a column missing, or a value ``row`` refuses (file and line named).
    """
    f = Path(path)
    if f.is_dir():
        f = f / "iterations.csv"
    runs: dict[_Key, list[_Row]] = {}
    with open(f, newline="") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in fields if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{f}: not {what}: columns {missing} missing (has {reader.fieldnames}).")
        for r in reader:
            try:
                made = row(r)
            except (TypeError, ValueError) as exc:
                raise ValueError(f"{f}, line {reader.line_num}: {exc}") from None
            runs.setdefault(key(made), []).append(made)
    for rows in runs.values():
        rows.sort(key=lambda x: x.iteration)
    return runs


class IterationRow(NamedTuple):
    """One row of a bench's ``iterations.csv``: one iteration of one method's run."""

    method: str
    iteration: int
    #: the trace's link rate at this iteration
    rate_mbit: float
    seconds: float
    samples_per_s: float
    #: the scheduler's configuration in force; ``None`` for the unscheduled baseline (DDP, ``dist_sync``)
    config: Config | None


def _iteration_row(r: dict[str, str]) -> IterationRow:
    cfg = None if r["credit_bytes"] == "" else Config(int(r["partition_bytes"]), int(r["credit_bytes"]))
    return IterationRow(r["method"], int(r["iteration"]), float(r["rate_mbit"]), float(r["seconds"]),
                        float(r["samples_per_s"]), cfg)


def read_iterations(path: str | os.PathLike[str]) -> dict[str, list[IterationRow]]:
    """Every method's run in a bench's ``iterations.csv``, its rows in iteration order.

    ``path``: the file, or the ``--out`` folder holding it (as :func:`write_outputs` leaves it).

    Raises:
        FileNotFoundError: no such file.
        ValueError: a column missing, or a value that is not a number where one belongs (file and line named).
    """
    return read_runs(path, ITERATION_FIELDS, "a bench's iterations.csv", _iteration_row, lambda r: r.method)


def write_outputs(plan: BenchPlan, runs: dict[str, list[dict[str, Any]]], decisions: dict[str, list[dict[str, Any]]],
                  summary: dict[str, Any], out: str) -> None:
    with open(os.path.join(out, "iterations.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(ITERATION_FIELDS)
        for m, its in runs.items():
            for r in its:
                cfg = r.get("config") or [DDP_DEFAULT.partition_bytes, ""]
                w.writerow([m, r["iteration"], plan.rate_at(r["iteration"]), f"{r['seconds']:.6f}", f"{r['samples_per_s']:.3f}", cfg[0], cfg[1]])
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    base = BASELINE[plan.arch]
    lines = [f"Trace `{summary['trace']}` (Mbit/s), 2 workers, {plan.arch}, {plan.iters} iterations, batch {plan.batch_size} per worker.", "",
             f"| method | samples/s (all) | low-rate phases | high-rate phases | vs BO | vs hindsight | vs oracle | vs {base} |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for m, v in summary["throughput"].items():
        def ratio(ref: str) -> str:
            r = summary.get(f"vs_{ref}", {}).get(m, {}).get("all")
            return "" if r is None else f"{r:.3f}x"
        lines.append(f"| {m} | {v['all']:.1f} | {v['low']:.1f} | {v['high']:.1f} | {ratio('bo')} | {ratio('hindsight')} | {ratio('oracle')} "
                     f"| {ratio(base)} |")
    with open(os.path.join(out, "summary.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(out, "summary.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["method", "samples_per_s_all", "samples_per_s_low", "samples_per_s_high"])
        for m, v in summary["throughput"].items():
            w.writerow([m, f"{v['all']:.3f}", f"{v['low']:.3f}", f"{v['high']:.3f}"])
    try:
        plot(plan, runs, decisions, os.path.join(out, "throughput.png"))
    except ImportError:
        pass


def plot(plan: BenchPlan, runs: dict[str, list[dict[str, Any]]], decisions: dict[str, list[dict[str, Any]]], path: str, avg: int = 5) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4))
    for start in range(0, plan.iters, plan.every):
        if plan.rate_at(start) == plan.low_mbit < plan.high_mbit:
            ax.axvspan(start, min(plan.iters, start + plan.every), color="0.92", lw=0)
    for m, its in runs.items():
        xs, ys = [], []
        for i in range(0, len(its), avg):
            seg = its[i:i + avg]
            xs.append(seg[0]["iteration"] + len(seg) / 2)
            ys.append(plan.batch_size * 2 * len(seg) / sum(r["seconds"] for r in seg))
        ax.plot(xs, ys, label=m, lw=1.6)
    prev = None
    for d in decisions.get("autobyte", []):
        if d.get("reason") and d["config"] != prev:
            ax.axvline(d["iteration"], color="tab:red", ls=":", lw=0.8)
        prev = d["config"]
    ax.set_xlabel(f"iteration (grey: {plan.low_mbit:g} Mbit/s, white: {plan.high_mbit:g} Mbit/s)")
    ax.set_ylabel(f"samples/s ({avg}-iteration average)")
    ax.set_title("Real training on the testbed (dotted: AutoByte reconfigurations)")
    ax.legend(ncol=3, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
