"""The tuner's two predictors on real rows: the meta-network and the simulator built from the window (docs/meta.md).

Every window of ``autobyte collect``'s raw data (one condition: model, rate,
repetition; one configuration in force) predicts the real speed of the
condition's other configurations. As the tuner would be after its first
trial, the configuration in force and one other (drawn with a fixed seed)
count as measured; the error is taken on the rest, and the pick is the
fastest of predicted-or-measured, judged by its real speed against the best.

``python benchmarks/sim_predictor_rows.py docs/figures/calib_real/raw docs/figures/meta_real/mlp/raw
docs/figures/meta_real/transformer/raw [--json OUT]``
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

import numpy as np


def evaluate(raw_dir: str, *, seed: int = 0, weights: str | None = None) -> dict[str, Any]:
    """Both predictors' error on unmeasured configurations and their picks, for one raw directory."""
    from autobyte.bench.collect import _load_net, meta_contexts, meta_rows, read_measurement
    from autobyte.core.space import Config, SearchSpace
    from autobyte.meta._simscore import SimPredictor

    ctxs = meta_contexts(read_measurement(raw_dir))
    if not ctxs:
        raise ValueError(f"raw_dir must hold measured conditions, but {raw_dir!r} has none.")
    net, _ = _load_net(weights)
    emb, cf, _y, spans = meta_rows(net, ctxs)
    logr_net = net.head_predict(emb, cf)
    rng = np.random.default_rng(seed)
    out: dict[str, dict[str, list[float]]] = {k: {"err": [], "pick": []} for k in ("network", "simulator", "fitted")}
    sim_s: list[float] = []
    fit_s: list[float] = []
    fit_pm: list[float] = []
    for (a, b), c in zip(spans, ctxs):
        real = np.asarray(c["speed"], dtype=np.float64)
        configs = [Config(int(p), int(q)) for p, q in c["candidates"]]
        cur = configs.index(c["current"])
        other = int(rng.choice([i for i in range(len(configs)) if i != cur]))
        known = [cur, other]
        rest = [i for i in range(len(configs)) if i not in known]
        sp = SimPredictor(SearchSpace(configs))
        ls = sp.log_speeds(c["features"], c["current"], np.arange(len(configs)), refresh=True)
        sim_s.append(sp.last_s)
        fp = SimPredictor(SearchSpace(configs), fit=True)
        lf = fp.log_speeds(c["features"], c["current"], np.arange(len(configs)), refresh=True,
                           measured={configs[i]: float(real[i]) for i in known})
        fit_s.append(fp.last_s)
        fit_pm.append(float(fp._kept[-1].per_message_s or fp.per_message_s))
        for name, lr in (("network", logr_net[a:b] - logr_net[a:b][cur]), ("simulator", ls - ls[cur]), ("fitted", lf - lf[cur])):
            est = np.exp(lr) * real[cur]
            out[name]["err"].extend((np.abs(est[rest] - real[rest]) / real[rest]).tolist())
            est[known] = real[known]
            out[name]["pick"].append(float(real[int(np.argmax(est))] / real.max()))
    res: dict[str, Any] = {"raw_dir": raw_dir, "windows": len(ctxs), "configs_per_condition": len(ctxs[0]["speed"]),
                           "sim_ms_per_window": 1e3 * float(np.mean(sim_s)), "fit_ms_per_window": 1e3 * float(np.mean(fit_s)),
                           "fitted_per_message_ms": [1e3 * v for v in fit_pm]}
    for name, d in out.items():
        res[name] = {"mape_unmeasured": float(np.mean(d["err"])), "pick_vs_best": float(np.mean(d["pick"])),
                     "worst_pick": float(np.min(d["pick"]))}
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("raw_dirs", nargs="+", help="raw directories written by `autobyte collect`")
    ap.add_argument("--seed", type=int, default=0, help="draw of the second measured configuration (0)")
    ap.add_argument("--weights", default=None, help="meta-network weights (default: the shipped ones)")
    ap.add_argument("--json", default=None, help="write the figures here as JSON")
    args = ap.parse_args(argv)
    for d in args.raw_dirs:
        if not os.path.isdir(d):
            ap.error(f"raw_dirs must be directories written by `autobyte collect`, but {d!r} is not a directory")
    rows = [evaluate(d, seed=args.seed, weights=args.weights) for d in args.raw_dirs]
    print("| raw data | windows | network: error on unmeasured | its pick vs best (worst) | simulator: error | its pick (worst) "
          "| simulator, per-message cost fitted: error | its pick (worst) | simulation ms (fitted) | fitted ms/message (median, range) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        n, s, f = r["network"], r["simulator"], r["fitted"]
        pm = r["fitted_per_message_ms"]
        print(f"| {r['raw_dir']} | {r['windows']} | {100 * n['mape_unmeasured']:.1f}% | {n['pick_vs_best']:.3f} ({n['worst_pick']:.3f}) "
              f"| {100 * s['mape_unmeasured']:.1f}% | {s['pick_vs_best']:.3f} ({s['worst_pick']:.3f}) "
              f"| {100 * f['mape_unmeasured']:.1f}% | {f['pick_vs_best']:.3f} ({f['worst_pick']:.3f}) "
              f"| {r['sim_ms_per_window']:.0f} ({r['fit_ms_per_window']:.0f}) | {np.median(pm):.2f} ({min(pm):.2f}-{max(pm):.2f}) |")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
