"""The paper's experiments (Fig. 5-9) on the simulator: ``python benchmarks/evaluate.py [--only fig6,fig7]``.

Every run goes as an engine runs: the simulator runs 5 iterations at a time
(a controller check) under the configuration in force and the conditions of
that window, a :class:`~autobyte.core.tuning.Controller` joins checks into
10-iteration windows for the tuner (or asks it at once when conditions
changed) and the decision applies from the next check. The per-phase oracle
is the best configuration of the search space in each phase (a grid search
on the simulator). Writes ``OUT/figures/eval_results.json`` and
``OUT/figures/eval_*.png`` (``--out``, default ``docs``). Run with the
package importable (the editable install, or ``PYTHONPATH=$PWD``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from autobyte.core.space import BYTESCHEDULER_DEFAULT, DDP_DEFAULT, Config, MiB, SearchSpace
from autobyte.core.tuners import BOTuner
from autobyte.core.tuning import Controller, Observation, Tuner
from autobyte.core.window import LocalCollective, WindowCoordinator

if TYPE_CHECKING:
    from autobyte.meta import AutoByteTuner

#: What ``--only`` accepts (the experiments of :func:`run_all`).
EXPERIMENTS = ("fig5", "fig6", "fig7", "fig89", "steady", "shift")
WINDOW = 10
#: Iterations simulated between two controller checks (half a window, the engines' default).
CHECK = 5
#: Search space scored by AutoByte and searched by the oracle in the evaluation.
EVAL_SPACE = SearchSpace.grid([MiB // 2, MiB, 2 * MiB, 4 * MiB, 8 * MiB, 16 * MiB, 32 * MiB, 64 * MiB], [1, 2, 3, 4, 6, 8])


@dataclass
class Run:
    """Per-window results of one scheme: ``speeds[w]`` samples/s of window ``w``,
    ``configs[w]`` the configuration in force at its end, ``changes`` the
    iterations at which the configuration changed, ``check_speeds`` samples/s
    of every ``CHECK`` iterations."""

    name: str
    speeds: list[float] = field(default_factory=list)
    configs: list[Config] = field(default_factory=list)
    changes: list[int] = field(default_factory=list)
    check_speeds: list[float] = field(default_factory=list)
    sim_s: float = 0.0
    tuner_cpu_s: float = 0.0

    @property
    def mean(self) -> float:
        return float(np.mean(self.speeds))


def _sim(model: Any, cluster: Any, cfg: Config, seed: int, n_iters: int = WINDOW, slow: np.ndarray | None = None) -> Any:
    from autobyte import sim

    traces: list[sim.BandwidthTrace | sim.ComputeTrace] | None = None
    if slow is not None:  # iteration i of the check runs slow[i] times slower: every link and every worker's compute
        starts = list(range(len(slow)))
        f = np.asarray(slow, dtype=float)[:, None]
        n = cluster.n_workers
        up = np.broadcast_to(np.asarray(cluster.bw_up_Bps, dtype=float), (n,))[None, :] / f
        down = np.broadcast_to(np.asarray(cluster.bw_down_Bps, dtype=float), (n,))[None, :] / f
        traces = [sim.BandwidthTrace(starts, up, down), sim.ComputeTrace(starts, f[:, 0])]
    return sim.simulate(model, cluster, cfg, n_iters=n_iters, seed=seed, traces=traces)


def host_slowdowns(check: int, n_iters: int, sigma: float) -> np.ndarray | None:
    """The host's slowdown of each iteration of check ``check`` (``None`` for ``sigma`` 0).

    Log-normal with mean 1 and log-sigma ``sigma``, drawn from the check's
    index alone: every method run over a scenario meets the same host, so a
    difference between them is theirs, not the noise's.
    """
    if sigma <= 0:
        return None
    rng = np.random.default_rng([9173, check])
    return rng.lognormal(-sigma * sigma / 2, sigma, size=n_iters)


def run_tuner(name: str, tuner: Tuner | None, start: Config | Callable[[int], Config], model: Any, phase: Callable[[int], Any],
              n_windows: int, space: SearchSpace = EVAL_SPACE, *, check_phase: Callable[[int], Any] | None = None,
              check_config: Callable[[int], Config] | None = None, host_noise: float = 0.0) -> Run:
    """Simulate ``n_windows`` windows, ``CHECK`` iterations at a time, as an engine runs.

    ``phase(w)`` gives the Cluster of window ``w``. With a tuner, the
    :class:`~autobyte.core.window.WindowCoordinator` (as in every engine, over
    a :class:`~autobyte.core.window.LocalCollective` holding every simulated
    worker's statistics) gets each chunk's statistics and may reconfigure from the next chunk
    (no warm-up: the simulator has no plan-rebuild cost). Without one,
    ``start`` is the configuration, or a function of the window giving it.
    ``check_phase(c)``, if given, is the Cluster of check ``c`` (iterations
    ``c * CHECK`` to ``(c + 1) * CHECK``) instead of ``phase`` of its window,
    for conditions that change at any multiple of ``CHECK`` iterations;
    without a tuner, ``check_config(c)``, if given, is the configuration of
    check ``c`` (a schedule switching at any check, e.g. a per-segment oracle).
    ``host_noise`` (log-sigma, 0: none) slows each iteration down by a factor
    of its own (:func:`host_slowdowns`), links and compute alike: a host whose
    checks of one configuration scatter as a shared GPU's do (0.12: 5-iteration
    checks scatter by 6% of log speed and 17% of consecutive ones lie more
    than 15% apart, as the H100's in docs/benchmarks.md 8.5: 5.5%, 13 of 77).
    """
    run = Run(name)
    coord = None
    coll = LocalCollective()  # the simulator holds every worker's statistics
    if tuner is not None:
        assert isinstance(start, Config)
        cl0 = phase(0) if check_phase is None else check_phase(0)
        ctl = Controller(tuner, space, start, cl0.arch, model.layer_bytes, window_iters=WINDOW, warmup_iters=0,
                         link_factor=cl0.link_factor, check_iters=CHECK)
        coord = WindowCoordinator(ctl, coll)
    fixed: Callable[[int], Config] = start if callable(start) else (lambda w: start)  # type: ignore[assignment,return-value]
    if check_config is not None:
        fixed = lambda w: check_config(w * WINDOW // CHECK)  # noqa: E731
    cur = coord.config if coord is not None else fixed(0)
    samples = time_s = 0.0
    n_checks = n_windows * WINDOW // CHECK
    for c in range(n_checks):
        w = c * CHECK // WINDOW
        res = _sim(model, phase(w) if check_phase is None else check_phase(c), cur, seed=1000 + c, n_iters=CHECK,
                   slow=host_slowdowns(c, CHECK, host_noise))
        run.check_speeds.append(res.samples_per_s)
        samples += res.samples_per_s * float(np.sum(res.iter_time_s))
        time_s += float(np.sum(res.iter_time_s))
        run.sim_s += float(np.sum(res.iter_time_s))
        it = (c + 1) * CHECK
        if coord is not None:
            t0 = time.process_time()
            windows = res.window_stats()
            coll.hold(windows)
            coord.check(it, windows[0], apply_at=it)  # a decision applies from the next chunk
            run.tuner_cpu_s += time.process_time() - t0
        if it % WINDOW == 0:
            run.speeds.append(samples / time_s)
            run.configs.append(cur)
            samples = time_s = 0.0
        if coord is not None:
            nxt = coord.config
        elif check_config is not None:
            nxt = check_config(c + 1) if c + 1 < n_checks else cur
        else:
            nxt = fixed(it // WINDOW)
        if nxt != cur:
            run.changes.append(it)
        cur = nxt
    return run


def oracle(model: Any, cluster: Any, space: SearchSpace = EVAL_SPACE) -> tuple[Config, float]:
    speeds = [_sim(model, cluster, c, seed=7).samples_per_s for c in space]
    i = int(np.argmax(speeds))
    return space[i], float(speeds[i])


def bo_config(model: Any, cluster: Any, arch: str, seed: int = 0) -> Config:
    """ByteScheduler's BO run before training, in the initial conditions; its final pick."""
    t = BOTuner(arch, seed=seed)
    t.guarded = False  # an offline search: it is meant to try bad configurations
    run = run_tuner("bo", t, BYTESCHEDULER_DEFAULT, model, lambda w: cluster, 17)
    return t.best if t.best is not None else run.configs[-1]


def _autobyte(net: Any) -> "AutoByteTuner":
    from autobyte.meta import AutoByteTuner

    return AutoByteTuner(net, background=False)


def _fresh(net: Any) -> Any:
    # every run starts from the offline weights
    net.reset_head()
    return net


def dynamic(net: Any, model_name: str, phases: list[Any], phase_len: int, arch: str, n_windows: int) -> dict[str, Any]:
    from autobyte import sim

    model = sim.get_model(model_name)
    phase = lambda w: phases[min(len(phases) - 1, (w * WINDOW) // phase_len)]  # noqa: E731
    orc = [oracle(model, c) for c in phases]
    bo = bo_config(model, phases[0], arch)
    runs = {
        "autobyte": run_tuner("autobyte", _autobyte(_fresh(net)), BYTESCHEDULER_DEFAULT, model, phase, n_windows),
        "static_bo": run_tuner("static_bo", None, bo, model, phase, n_windows),
        "static_default": run_tuner("static_default", None, BYTESCHEDULER_DEFAULT, model, phase, n_windows),
        "baseline": run_tuner("baseline", None, DDP_DEFAULT, model, phase, n_windows),
    }
    # the oracle switches to each phase's best at the phase start
    o = runs["oracle"] = run_tuner("oracle", None, lambda w: orc[min(len(phases) - 1, (w * WINDOW) // phase_len)][0], model, phase, n_windows)
    # iterations until within 5% of the oracle after each change (checked every CHECK iterations)
    ab = runs["autobyte"]
    n_checks = len(ab.check_speeds)
    to5 = []
    for p in range(len(phases)):
        c0 = (p * phase_len) // CHECK
        c1 = min(n_checks, ((p + 1) * phase_len) // CHECK) if p < len(phases) - 1 else n_checks
        k = next((c - c0 for c in range(c0, c1) if ab.check_speeds[c] >= 0.95 * o.check_speeds[c]), None)
        to5.append(None if k is None else (k + 1) * CHECK)
    return {
        "model": model_name, "arch": arch, "bo_config": str(bo),
        "mean": {k: r.mean for k, r in runs.items()},
        "autobyte_vs_oracle": ab.mean / o.mean, "autobyte_vs_static_bo": ab.mean / runs["static_bo"].mean,
        "iters_to_5pct_after_change": to5,
        "series": {k: r.speeds for k, r in runs.items()},
        "autobyte_configs": [str(c) for c in ab.configs],
        "tuner_cpu_share": ab.tuner_cpu_s / max(ab.sim_s, 1e-9),
    }


def run_all(out: Path, weights: str | None = None, only: set[str] | None = None) -> dict[str, Any]:
    from autobyte import sim

    from autobyte.integrations._imports import pyplot

    from autobyte.meta import MetaNetwork

    pyplot("plotting the evaluation (benchmarks/evaluate.py)")  # before minutes of simulation, not after
    net = MetaNetwork.load(weights) if weights else MetaNetwork.load_default()
    out = Path(out)
    (out / "figures").mkdir(parents=True, exist_ok=True)
    path = out / "figures" / "eval_results.json"
    results: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    want = (lambda k: only is None or k in only)  # noqa: E731
    G = sim.GBPS
    if want("fig6"):
        hi, lo = sim.Cluster.from_gbps(8, 10, "ps"), sim.Cluster.from_gbps(8, 3, "ps")
        results["fig6"] = dynamic(net, "resnet50", [hi, lo, hi, lo, hi, lo], 20, "ps", 12)
        print("fig6", results["fig6"]["mean"], flush=True)
    if want("fig7"):
        base = sim.Cluster.from_gbps(8, 20, "ps")
        phases = [base, base.replace(bw_up_Bps=10 * G, bw_down_Bps=10 * G, compute_scale=2.0),
                  base.replace(bw_up_Bps=20 / 3 * G, bw_down_Bps=20 / 3 * G, compute_scale=3.0)]
        results["fig7"] = dynamic(net, "resnet50", phases, 20, "ps", 6)
        print("fig7", results["fig7"]["mean"], flush=True)
    if want("fig5"):
        model = sim.get_model("resnet50")
        cl = sim.Cluster.from_gbps(8, 10, "ps")
        best, best_speed = oracle(model, cl)
        r5 = {"oracle_config": str(best), "oracle_speed": best_speed}
        for s in (Config(2 * MiB, 4 * MiB), Config(8 * MiB, 24 * MiB)):
            r = run_tuner("autobyte", _autobyte(_fresh(net)), s, model, lambda w: cl, 8)
            r5[str(s)] = {"speeds": r.speeds, "configs": [str(c) for c in r.configs],
                          "final_vs_oracle": r.speeds[-1] / best_speed, "start_vs_oracle": r.speeds[0] / best_speed}
        results["fig5"] = r5
        print("fig5", {k: v for k, v in r5.items() if isinstance(v, dict) and 'final_vs_oracle' in v and print(k, v['final_vs_oracle'])}, flush=True)
    if want("steady"):
        model = sim.get_model("vgg16")
        cl = sim.Cluster.from_gbps(8, 5, "allreduce")
        t = _autobyte(_fresh(net))
        r = run_tuner("autobyte", t, BYTESCHEDULER_DEFAULT, model, lambda w: cl, 50)
        results["steady"] = {"model": "vgg16", "gbps": 5, "changes_at_iteration": r.changes,
                             "changes_after_iteration_100": sum(1 for c in r.changes if c > 100),
                             "tuner_cpu_share": r.tuner_cpu_s / r.sim_s, "adapt_runs": t.adapter.n_runs,  # type: ignore[attr-defined]
                             "adapt_s_max": t.adapter.last_duration_s}  # type: ignore[attr-defined]
        print("steady", results["steady"], flush=True)
    if want("shift"):
        model = sim.get_model("resnet50")
        base = sim.Cluster(8, "ps", bw_up_Bps=5 * G, bw_down_Bps=5 * G)
        cl = base.replace(per_message_s=base.per_message_s * 3, latency_s=base.latency_s * 5)
        t = _autobyte(_fresh(net))
        seq = [EVAL_SPACE[i] for i in np.random.default_rng(0).choice(len(EVAL_SPACE), 13, replace=False)]
        # the tuner observes a fixed probe sequence (reconfiguration off); after each window
        # we ask its (adapting) network for the speed of the next probe and compare
        t.start(EVAL_SPACE, seq[0])
        t.enabled = False
        errs = []
        pending = None
        for w, c in enumerate(seq):
            res = _sim(model, cl, c, seed=w)
            f = res.features()
            speed = float(f.speed.sum())
            if pending is not None:
                errs.append(abs(pending - speed) / speed)
            t.observe(Observation(w, c, speed, f))
            if w + 1 < len(seq):
                job, _ = t.learner.recent[-1]
                nxt = np.array([[seq[w + 1].partition_bytes, seq[w + 1].credit_bytes]], dtype=float)
                pending = float(t.net.predict_speeds(job, nxt)[0])
        first_under = next((i + 1 for i, e in enumerate(errs) if e < 0.10 and all(x < 0.10 for x in errs[i:])), None)
        results["shift"] = {"per_message_x": 3, "latency_x": 5, "errors_by_window": errs, "adapt_runs": t.adapter.n_runs,
                            "windows_until_error_stays_under_10pct": first_under}
        # the tuner running normally in the shifted cluster: MAPE of its predictions
        # over the whole evaluation space (simulated truth) after every window
        true = np.array([_sim(model, cl, c, seed=7).samples_per_s for c in EVAL_SPACE])
        t = _autobyte(_fresh(net))
        cur = t.start(EVAL_SPACE, BYTESCHEDULER_DEFAULT)
        grid_mape = []
        for w in range(10):
            res = _sim(model, cl, cur, seed=1000 + w)
            f = res.features()
            d = t.observe(Observation(w, cur, float(f.speed.sum()), f))
            job, _ = t.learner.recent[-1]
            grid_mape.append(float(np.mean(np.abs(t.net.predict_speeds(job, EVAL_SPACE.to_array()) - true) / true)))
            cur = d.config if d is not None else cur
        results["shift"]["tuner_grid_mape_by_window"] = grid_mape
        results["shift"]["tuner_final_vs_oracle"] = float(res.samples_per_s / true.max())
        _fresh(net)
        print("shift", results["shift"], flush=True)
    if want("fig89"):
        rows = []
        for arch in ("ps", "allreduce"):
            for m in ("resnet50", "vgg16", "alexnet"):
                model = sim.get_model(m)
                for g in (0.5, 1, 5, 10, 25):
                    cl = sim.Cluster.from_gbps(8, g, arch)
                    bo = bo_config(model, cl, arch)
                    ab = run_tuner("autobyte", _autobyte(_fresh(net)), BYTESCHEDULER_DEFAULT, model, lambda w: cl, 6)
                    orc = oracle(model, cl)
                    rows.append({
                        "arch": arch, "model": m, "gbps": g,
                        "baseline": _sim(model, cl, DDP_DEFAULT, 1).samples_per_s,
                        "static_default": _sim(model, cl, BYTESCHEDULER_DEFAULT, 1).samples_per_s,
                        "static_bo": _sim(model, cl, bo, 1).samples_per_s,
                        "autobyte": float(np.mean(ab.speeds[-3:])), "oracle": orc[1],
                    })
                    print(rows[-1], flush=True)
        results["fig89"] = rows
    path.write_text(json.dumps(results, indent=1))
    plot(results, out / "figures")
    return results


def plot(results: dict[str, Any], out: Path) -> None:
    from autobyte.integrations._imports import pyplot

    plt = pyplot("plotting the evaluation (benchmarks/evaluate.py)")

    for key, title in (("fig6", "ResNet50, PS, 8 workers: bandwidth 10 <-> 3 Gbps every 20 iterations"),
                       ("fig7", "ResNet50, PS, 8 workers: jobs join (shared bandwidth and GPU)")):
        if key not in results:
            continue
        r = results[key]
        fig, ax = plt.subplots(figsize=(7, 3.5))
        for name, s in r["series"].items():
            x = (np.arange(len(s)) + 1) * WINDOW
            ax.plot(x, s, marker="o", ms=3, label=name, lw=2 if name == "autobyte" else 1)
        ax.set_xlabel("iteration"), ax.set_ylabel("samples/s"), ax.set_title(title, fontsize=9)
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out / f"eval_{key}.png", dpi=110)
        plt.close(fig)
    if "fig5" in results:
        r = results["fig5"]
        fig, ax = plt.subplots(figsize=(6, 3.2))
        for k, v in r.items():
            if isinstance(v, dict):
                ax.plot((np.arange(len(v["speeds"])) + 1) * WINDOW, v["speeds"], marker="o", label=f"start {k}")
        ax.axhline(r["oracle_speed"], color="k", label=f"oracle {r['oracle_config']}")
        ax.set_xlabel("iteration"), ax.set_ylabel("samples/s"), ax.set_title("ResNet50, PS, 8 x 10 Gbps: convergence", fontsize=9)
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out / "eval_fig5.png", dpi=110)
        plt.close(fig)
    if "fig89" in results:
        rows = results["fig89"]
        fig, axes = plt.subplots(2, 3, figsize=(11, 5.5))
        for i, arch in enumerate(("ps", "allreduce")):
            for j, m in enumerate(("resnet50", "vgg16", "alexnet")):
                ax = axes[i, j]
                rr = [r for r in rows if r["arch"] == arch and r["model"] == m]
                x = np.arange(len(rr))
                for k, name in enumerate(("baseline", "static_default", "static_bo", "autobyte", "oracle")):
                    ax.bar(x + (k - 2) * 0.16, [r[name] for r in rr], 0.16, label=name)
                ax.set_xticks(x, [str(r["gbps"]) for r in rr])
                ax.set_title(f"{m}, {arch}", fontsize=9), ax.set_xlabel("Gbps")
        axes[0, 0].legend(fontsize=6)
        fig.tight_layout()
        fig.savefig(out / "eval_fig89.png", dpi=110)
        plt.close(fig)


def tables_markdown(results: dict[str, Any]) -> str:
    """Markdown tables of :func:`run_all`'s results (pasted into docs/evaluation.md)."""
    out = []
    for key in ("fig6", "fig7"):
        if key in results:
            r = results[key]
            out.append(f"**{key}** ({r['model']}, {r['arch']}; BO picked {r['bo_config']}):\n")
            out.append("| scheme | mean samples/s | vs oracle |\n|---|---|---|")
            o = r["mean"]["oracle"]
            for k, v in r["mean"].items():
                out.append(f"| {k} | {v:.1f} | {v / o:.3f} |")
            out.append(f"\nAutoByte / static BO = {r['autobyte_vs_static_bo']:.3f}; iterations to within 5% of the oracle "
                       f"after each change: {r['iters_to_5pct_after_change']}; tuner CPU / training time = {100 * r['tuner_cpu_share']:.3f}%.\n")
    if "fig89" in results:
        out.append("| arch | model | Gbps | baseline | static default | static BO | AutoByte | oracle | AB/BO | AB/baseline |\n|---|---|---|---|---|---|---|---|---|---|")
        for r in results["fig89"]:
            out.append(f"| {r['arch']} | {r['model']} | {r['gbps']} | {r['baseline']:.0f} | {r['static_default']:.0f} | {r['static_bo']:.0f} | "
                       f"{r['autobyte']:.0f} | {r['oracle']:.0f} | {r['autobyte'] / r['static_bo']:.3f} | {r['autobyte'] / r['baseline']:.3f} |")
    return "\n".join(out)


def build_parser() -> argparse.ArgumentParser:
    """``python benchmarks/evaluate.py``'s arguments (errors are one line, as the ``autobyte`` commands')."""
    from autobyte.cli import Parser, file_arg, list_arg, out_arg

    p = Parser(prog="benchmarks/evaluate.py",
               description="The paper's experiments (Fig. 5-9) on the simulator: AutoByte beside the static default, "
                           "BO, DDP and the per-phase oracle; results and plots for docs/evaluation.md.")
    p.add_argument("--out", default="docs", type=out_arg("--out", kind="dir"),
                   help="folder; writes figures/eval_results.json and figures/eval_*.png (default docs)")
    p.add_argument("--weights", default=None, type=file_arg("--weights"), help="meta-network weights (default: the shipped ones)")
    p.add_argument("--only", default=None, type=list_arg("--only", EXPERIMENTS),
                   help=f"comma-separated subset of {','.join(EXPERIMENTS)} (default: all)")
    p.set_defaults(func=_command)
    return p


def _command(args: argparse.Namespace) -> int:
    from autobyte.meta._cli import _check_weights

    _check_weights(args.weights)
    run_all(Path(args.out), weights=args.weights, only=None if args.only is None else set(args.only))
    return 0


def main(argv: list[str] | None = None) -> int:
    from autobyte.cli import dispatch, parse, tag_progs

    parser = build_parser()
    tag_progs(parser)
    args = parse(parser, list(sys.argv[1:] if argv is None else argv))
    return args if isinstance(args, int) else dispatch(args)


if __name__ == "__main__":
    sys.exit(main())
