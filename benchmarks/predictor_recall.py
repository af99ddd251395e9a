"""The meta-network as a ranker: top-k recall on real rows of the testbed (issue 43, item 3).

A *group* is one set of conditions in which several configurations were measured one after the other by real
training on the testbed (``benchmarks/collect.py``'s raw folders: one rate, one repetition, 8 configurations,
windows of 5-10 iterations, 2 workers). For each group the network is asked, as the tuner asks it
(:class:`autobyte.meta._scorer.Scorer`, fresh: slope 1, over ``SearchSpace.default()`` plus the measured
configurations, one prediction per schedule class), for the speed of every candidate from the features of ONE
window, and the measured configurations are ranked by that prediction. A ranking *hits* at ``k`` and ``tol``
when a configuration measured within ``tol`` of the group's best measured speed is among its top ``k``.

Windows asked (both reported):

* ``start``: the window measured at the group's configuration nearest ByteScheduler's default (log2 distance,
  :meth:`SearchSpace.nearest`): what the tuner sees first;
* ``each``: every window of the group in turn (8 rankings per group).

References, same groups, same hit rule:

* ``random``: a uniformly random ranking (exact expectation);
* ``replicate``: the measured speeds of the same configurations at the same rate in the *other* repetitions
  (mean log speed; minutes apart, same machine): what a predictor that knew every speed measured before scores
  here, the labels' own noise floor for a ranking.

Ties (configurations of one schedule class get one prediction) count as the expected hit of a random order
among the tied.

Prototype variants (``--variant yes``; nothing in ``autobyte.meta`` changes): what a tuner can rank with after it
measured ``m`` windows of the group (the start window and ``m - 1`` others, seeded random choices, the same for
every variant), every configuration still ranked by prediction (measured ones included):

* ``residual``: the network's log predictions from the start window plus a per-job linear correction in
  (log2 credit multiple, log2 partition), the two axes its misses lie along, fitted by ridge on the measured
  pairs among the ``m`` windows (the residual of the measured log ratio from the network's);
* ``adapted``: the tuner's own online adaptation (:class:`autobyte.meta.Adapter`, 1 s budget, inline) on the
  same pairs, then the start window's ranking again;
* reference ``trend alone``: the same correction fitted with the network replaced by zeros (what the ``m``
  measurements say without the network).

Run (numpy, one core, about 10 seconds)::

    OMP_NUM_THREADS=1 python benchmarks/predictor_recall.py --gpu --m 2,3,4 --out docs/figures/predictor_recall

``--gpu`` adds the GPU bench summaries (``docs/figures/bench_gpu_h*``): their windows' features are not stored,
so they are reported apart: the static configurations' measured ranking of each run against the configuration
the tuner's network sent it to first, and every explore trial's predicted gain against what it measured.
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT), str(HERE)]  # the package, and the sibling script collect.py

from autobyte.core.space import BYTESCHEDULER_DEFAULT, Config, SearchSpace  # noqa: E402
from autobyte.meta._scorer import trend_coords  # noqa: E402

TOLS = (0.01, 0.02, 0.05)
KS = (1, 3)

#: name, raw folder (relative to the repository), model, role (why it is or is not held out)
SOURCES: tuple[tuple[str, str, str, str], ...] = (
    ("mlp", "docs/figures/meta_real/mlp/raw", "mlp", "held-out scenario (suite's held-out model; never trained on)"),
    ("transformer", "docs/figures/meta_real/transformer/raw", "transformer",
     "held-out scenario (suite's held-out model; never trained on)"),
    ("cnn_calib", "docs/figures/calib_raw", "cnn",
     "testbed CNN, calibration grid: never trained on by the shipped weights; the suite's tune-side model"),
    ("cnn_real", "docs/figures/calib_real/raw", "cnn",
     "testbed CNN: never trained on by the shipped weights; the rows cnn_ft.npz was fine-tuned on"),
)
HELD_OUT = ("mlp", "transformer")
FINETUNED_ON = ("cnn_real",)


@dataclass
class Group:
    """One set of conditions: configurations ``(K, 2)`` measured at ``speed (K,)`` samples/s, one window each.

    ``windows[i]``: ``{"features", "current", "observed"}`` of configuration ``i`` (what the tuner sees), or
    ``None`` (synthetic groups scored by a predictor that needs none)."""

    source: str
    rate_mbit: float
    rep: int
    configs: np.ndarray
    speed: np.ndarray
    windows: list[Any] = field(default_factory=list)

    @property
    def key(self) -> str:
        return f"{self.source}@{self.rate_mbit:g}Mbit/rep{self.rep}"

    def start_index(self) -> int:
        cfgs = [Config(int(p), int(c)) for p, c in self.configs]
        return cfgs.index(SearchSpace(list(dict.fromkeys(cfgs))).nearest(BYTESCHEDULER_DEFAULT))


# --------------------------------------------------------------------------- the hit rule (pure numpy)
def _comb(n: int, k: int) -> int:
    return math.comb(n, k) if 0 <= k <= n else 0


def expected_hit(pred: np.ndarray, good: np.ndarray, k: int) -> float:
    """Probability that a ``good`` configuration is among the top ``k`` by ``pred`` (ties in a random order)."""
    pred = np.asarray(pred, dtype=np.float64)
    good = np.asarray(good, dtype=bool)
    left = min(k, pred.size)
    for v in sorted(set(pred.tolist()), reverse=True):
        block = pred == v
        b, g = int(block.sum()), int((block & good).sum())
        if b <= left:
            if g:
                return 1.0
            left -= b
            if left == 0:
                return 0.0
        else:  # the top k ends inside this tie block: ``left`` of its ``b`` members, at random
            return 1.0 - _comb(b - g, left) / _comb(b, left)
    return 0.0


def ranking_hits(pred: np.ndarray, speed: np.ndarray, tols: Sequence[float] = TOLS,
                 ks: Sequence[int] = KS) -> dict[str, float]:
    """``{"top{k}@{tol%}": expected hit}`` of one ranking against the measured speeds."""
    speed = np.asarray(speed, dtype=np.float64)
    best = float(speed.max())
    return {f"top{k}@{round(100 * t):d}%": expected_hit(pred, speed >= (1.0 - t) * best, k) for t in tols for k in ks}


def random_hits(speed: np.ndarray, tols: Sequence[float] = TOLS, ks: Sequence[int] = KS) -> dict[str, float]:
    """The expected hits of a uniformly random ranking."""
    return ranking_hits(np.zeros(len(speed)), speed, tols, ks)


def _fmt(cfg: Sequence[float]) -> str:
    p, c = float(cfg[0]), float(cfg[1])
    part = f"{p / 2**20:g} MiB" if p >= 2**20 else f"{p / 2**10:g} KiB"
    return f"<{part}, {c / p:g}X>"


def failure_row(group: Group, pred: np.ndarray, window: int, tol: float = 0.01) -> dict[str, Any]:
    """What the ranking put first against what was best (for the breakdown)."""
    speed = group.speed
    i, b = int(np.argmax(pred)), int(np.argmax(speed))
    p, c = group.configs[:, 0].astype(float), group.configs[:, 1].astype(float)
    return {"group": group.key, "window": _fmt(group.configs[window]), "first": _fmt(group.configs[i]),
            "best": _fmt(group.configs[b]), "first_credit_x": round(c[i] / p[i], 3), "best_credit_x": round(c[b] / p[b], 3),
            "first_partition": int(p[i]), "best_partition": int(p[b]),
            "first_measured_vs_best": float(speed[i] / speed[b]),
            "predicted_gain_first": float(pred[i] / pred[window] - 1.0),
            "measured_gain_first": float(speed[i] / speed[window] - 1.0),
            "hit_top3": ranking_hits(pred, speed, (tol,), (3,))[f"top3@{round(100 * tol):d}%"]}


# --------------------------------------------------------------------------- the data
def load_groups(raw_dir: str, source: str) -> list[Group]:
    """Every condition of a raw folder of ``benchmarks/collect.py`` with 2+ configurations, as a :class:`Group`."""
    import collect  # the sibling script

    m = collect.read_measurement(raw_dir)
    ctxs = collect.meta_contexts(m)
    out, at = [], 0
    for cond in collect.conditions(m):
        cs = ctxs[at:at + len(cond)]
        at += len(cond)
        if len(cs) < 2:
            continue
        out.append(Group(source, float(cs[0]["rate_mbit"]), int(cs[0]["rep"]), np.asarray(cs[0]["candidates"], dtype=np.int64),
                         np.asarray(cs[0]["speed"], dtype=np.float64),
                         [{"features": c["features"], "current": c["current"], "observed": float(c["observed"])} for c in cs]))
    return out


# --------------------------------------------------------------------------- the predictors
class ScorerRanker:
    """The tuner's prediction of every measured configuration from one window (a fresh Scorer: slope 1)."""

    def __init__(self, net: Any) -> None:
        self.net = net
        self._spaces: dict[tuple[tuple[int, int], ...], tuple[SearchSpace, list[int]]] = {}

    def _space(self, group: Group) -> tuple[SearchSpace, list[int]]:
        key = tuple((int(p), int(c)) for p, c in group.configs)
        if key not in self._spaces:
            base = list(SearchSpace.default())
            cfgs = [Config(p, c) for p, c in key]
            space = SearchSpace(list(dict.fromkeys(base + cfgs)))
            self._spaces[key] = (space, [space.index(c) for c in cfgs])
        return self._spaces[key]

    def __call__(self, group: Group, window: int) -> np.ndarray:
        from autobyte.meta._scorer import Scorer

        space, idx = self._space(group)
        w = group.windows[window]
        s = Scorer(self.net, space).score(w["current"], w["observed"], w["features"])
        return np.asarray(s.predicted, dtype=np.float64)[idx]


def replicate_predictions(groups: Sequence[Group]) -> dict[int, np.ndarray]:
    """Per group (by index): the mean log speed of each configuration in the other repetitions at its source and rate."""
    out: dict[int, np.ndarray] = {}
    for gi, g in enumerate(groups):
        others = [h for h in groups if h is not g and h.source == g.source and h.rate_mbit == g.rate_mbit]
        rows = []
        for h in others:
            where = {(int(p), int(c)): float(np.log(v)) for (p, c), v in zip(h.configs, h.speed)}
            rows.append([where.get((int(p), int(c)), np.nan) for p, c in g.configs])
        if rows:
            arr = np.array(rows)
            if np.all(np.isfinite(arr).any(axis=0)):
                out[gi] = np.nanmean(arr, axis=0)
    return out


# --------------------------------------------------------------------------- scoring
def _mean(rows: list[dict[str, float]]) -> dict[str, float]:
    if not rows:
        return {}
    return {k: float(np.mean([r[k] for r in rows])) for k in rows[0]}


def _summ(rows: list[dict[str, float]]) -> dict[str, Any]:
    return {"rankings": len(rows), "recall": _mean(rows), "hits": {k: float(np.sum([r[k] for r in rows])) for k in (rows[0] if rows else {})}}


def evaluate(groups: Sequence[Group], predict: Callable[[Group, int], np.ndarray], *, windows: str = "start",
             tols: Sequence[float] = TOLS, ks: Sequence[int] = KS) -> dict[str, Any]:
    """Top-k recall of ``predict``'s rankings over ``groups``, per source and overall, with the failures.

    ``predict(group, window)`` returns the predicted speed of every configuration of ``group`` from the window
    of configuration ``window``. Returns ``{"by_source": {src: {"groups", "rankings", "recall", "hits"}},
    "overall": {...}, "failures": [failure_row...]}``.
    """
    if windows not in ("start", "each"):
        raise ValueError(f"windows must be 'start' or 'each', but got windows={windows!r}.")
    per: dict[str, list[dict[str, float]]] = collections.defaultdict(list)
    ngroups: collections.Counter[str] = collections.Counter()
    fails: list[dict[str, Any]] = []
    for g in groups:
        ngroups[g.source] += 1
        ws = [g.start_index()] if windows == "start" else range(len(g.speed))
        for w in ws:
            pred = predict(g, w)
            per[g.source].append(ranking_hits(pred, g.speed, tols, ks))
            fails.append(failure_row(g, pred, w, tols[0]))
    res = {"by_source": {s: {"groups": ngroups[s], **_summ(r)} for s, r in per.items()},
           "overall": {"groups": sum(ngroups.values()), **_summ([x for r in per.values() for x in r])},
           "failures": fails}
    return res


def evaluate_reference(groups: Sequence[Group], kind: str, tols: Sequence[float] = TOLS, ks: Sequence[int] = KS) -> dict[str, Any]:
    """``kind="random"`` or ``"replicate"`` (groups without another repetition are left out), same shape as :func:`evaluate`."""
    rep = replicate_predictions(groups) if kind == "replicate" else {}
    per: dict[str, list[dict[str, float]]] = collections.defaultdict(list)
    ngroups: collections.Counter[str] = collections.Counter()
    for gi, g in enumerate(groups):
        if kind == "random":
            per[g.source].append(random_hits(g.speed, tols, ks))
        elif gi in rep:
            per[g.source].append(ranking_hits(np.nan_to_num(rep[gi], nan=-np.inf), g.speed, tols, ks))
        else:
            continue
        ngroups[g.source] += 1
    return {"by_source": {s: {"groups": ngroups[s], **_summ(r)} for s, r in per.items()},
            "overall": {"groups": sum(ngroups.values()), **_summ([x for r in per.values() for x in r])}}


def seen_windows(group: Group, m: int, orders: int, seed: int = 0) -> list[list[int]]:
    """The windows a tuner has measured after ``m`` windows: the start window and ``m - 1`` others, ``orders``
    seeded random choices (the same for every variant of one group: a paired comparison)."""
    s0 = group.start_index()
    others = [i for i in range(len(group.speed)) if i != s0]
    rng = np.random.default_rng([seed, int(group.rate_mbit), group.rep, sum(map(ord, group.source))])
    return [[s0, *rng.choice(others, size=min(m - 1, len(others)), replace=False).tolist()] for _ in range(orders)]


def _pairs(group: Group, seen: Sequence[int]) -> list[tuple[int, int]]:
    return [(i, j) for i in seen for j in seen if i != j]


class AdaptedRanker:
    """Variant: the head adapted online (the tuner's :class:`~autobyte.meta.Adapter`, inline, its 1 s budget)
    on the pairs among the ``seen`` windows (rows from window ``i`` to configuration ``j``, target the measured
    ``log(speed_j / speed_i)``), then the start window's ranking; the head is reset afterwards."""

    def __init__(self, net: Any, time_budget_s: float = 1.0) -> None:
        self.net, self.time_budget_s = net, float(time_budget_s)
        self.base = ScorerRanker(net)

    def __call__(self, group: Group, seen: Sequence[int]) -> np.ndarray:
        from autobyte.meta import Adapter, candidate_features, featurize

        embs, cands, ys = [], [], []
        for i in seen:
            w = group.windows[i]
            job = featurize(w["features"], w["current"], w["observed"])
            j = [x for x in seen if x != i]
            embs.append(np.repeat(np.atleast_2d(self.net.encode(job)), len(j), axis=0))
            cands.append(candidate_features(job.layer_bytes, group.configs[j], w["current"]))
            ys.append(np.log(group.speed[j] / w["observed"]))
        ad = Adapter(self.net, time_budget_s=self.time_budget_s, process=False)
        try:
            ad.start(np.concatenate(embs), np.concatenate(cands), np.concatenate(ys), background=False)
            return self.base(group, seen[0])
        finally:
            self.net.reset_head()


class ShippedSeenRanker:
    """The tuner's Scorer after the ``seen`` windows, as the tuner feeds it: each window's prediction of the next
    window's configuration checked against what that measured (:meth:`Scorer.checked` with the move, which fits
    the slope and this job's credit/partition trend), then every configuration ranked from the last window."""

    def __init__(self, net: Any) -> None:
        self.base = ScorerRanker(net)

    def __call__(self, group: Group, seen: Sequence[int]) -> np.ndarray:
        from autobyte.meta._scorer import Scorer

        space, idx = self.base._space(group)
        s = Scorer(self.base.net, space)
        last: tuple[Config, Any] | None = None
        for i in seen:
            w = group.windows[i]
            sc = s.score(w["current"], w["observed"], w["features"])
            if last is not None and last[0] != w["current"]:
                k = space.index(w["current"])
                s.checked(float(last[1].predicted[k]), w["observed"], float(last[1].raw[k]), float(last[2]),
                          s.move(last[0], w["current"]))
            last = (w["current"], sc, w["observed"])
        w = group.windows[seen[-1]]
        return np.asarray(s.score(w["current"], w["observed"], w["features"]).predicted, dtype=np.float64)[idx]


#: ridge weight of the residual correction (squared log ratio; the first value tried, not tuned on these rows)
RIDGE = 0.5


#: ``(K, 2)``: log2 credit multiple and log2 partition, the two axes the network's misses lie along (the scorer's own)
trend_features = trend_coords


class ResidualRanker:
    """Variant: the network's log predictions from the start window plus a per-job linear correction in
    (log2 credit multiple, log2 partition), fitted by ridge (:data:`RIDGE`) on the measured pairs among the
    ``seen`` windows: residual ``log(speed_j / speed_i) - (pred_i(j) - pred_i(i))`` from each seen window ``i``.
    ``use_network=False`` is the reference without the network (the trend of the measured speeds alone)."""

    def __init__(self, net: Any, use_network: bool = True) -> None:
        self.base = ScorerRanker(net) if use_network else None

    def _logpred(self, group: Group, i: int) -> np.ndarray:
        return np.log(self.base(group, i)) if self.base is not None else np.zeros(len(group.speed))

    def __call__(self, group: Group, seen: Sequence[int]) -> np.ndarray:
        phi = trend_features(group.configs)
        preds = {i: self._logpred(group, i) for i in seen}
        x, y = [], []
        for i, j in _pairs(group, seen):
            x.append(phi[j] - phi[i])
            y.append(np.log(group.speed[j] / group.speed[i]) - (preds[i][j] - preds[i][i]))
        a = np.linalg.solve(np.asarray(x).T @ np.asarray(x) + RIDGE * np.eye(2), np.asarray(x).T @ np.asarray(y))
        return np.exp(preds[seen[0]] + phi @ a)


def evaluate_seen(groups: Sequence[Group], ranker: Callable[[Group, Sequence[int]], np.ndarray], *, m: int = 3,
                  orders: int = 4, tols: Sequence[float] = TOLS, ks: Sequence[int] = KS) -> dict[str, Any]:
    """Like :func:`evaluate`, for a ranker that has measured ``m`` windows (:func:`seen_windows`)."""
    per: dict[str, list[dict[str, float]]] = collections.defaultdict(list)
    ngroups: collections.Counter[str] = collections.Counter()
    fails: list[dict[str, Any]] = []
    for g in groups:
        ngroups[g.source] += 1
        for seen in seen_windows(g, m, orders):
            pred = ranker(g, seen)
            per[g.source].append(ranking_hits(pred, g.speed, tols, ks))
            fails.append(failure_row(g, pred, seen[0], tols[0]))
    return {"by_source": {s: {"groups": ngroups[s], **_summ(r)} for s, r in per.items()},
            "overall": {"groups": sum(ngroups.values()), **_summ([x for r in per.values() for x in r])}, "failures": fails}


# --------------------------------------------------------------------------- the failure breakdown
def breakdown(fails: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Counts of the credit multiple / partition ranked first against the best measured, and the misses' cost."""
    n = len(fails)
    miss = [f for f in fails if f["hit_top3"] < 0.5]
    part = lambda b: "<=256 KiB" if b <= 256 * 1024 else ("<=2 MiB" if b <= 2 * 2**20 else ">2 MiB")  # noqa: E731
    return {
        "rankings": n,
        "first_credit_x": dict(collections.Counter(f"{f['first_credit_x']:g}X" for f in fails)),
        "best_credit_x": dict(collections.Counter(f"{f['best_credit_x']:g}X" for f in fails)),
        "first_partition": dict(collections.Counter(part(f["first_partition"]) for f in fails)),
        "best_partition": dict(collections.Counter(part(f["best_partition"]) for f in fails)),
        "first_vs_best_pairs_top": collections.Counter(f"{f['first']} vs {f['best']}" for f in fails).most_common(8),
        "first_measured_vs_best_median": float(np.median([f["first_measured_vs_best"] for f in fails])) if fails else float("nan"),
        "top3_misses": len(miss),
        "misses_first_credit_1x": sum(f["first_credit_x"] == 1 for f in miss),
        "misses_first_partition_le_256k": sum(f["first_partition"] <= 256 * 1024 for f in miss),
        "predicted_gain_first_median": float(np.median([f["predicted_gain_first"] for f in fails])) if fails else float("nan"),
        "measured_gain_first_median": float(np.median([f["measured_gain_first"] for f in fails])) if fails else float("nan"),
        "top3_recall_by_rate_mbit": {r: float(np.mean([f["hit_top3"] for f in fails if _rate(f) == r]))
                                     for r in sorted({_rate(f) for f in fails})},
    }


def _rate(f: dict[str, Any]) -> float:
    return float(f["group"].split("@")[1].split("Mbit")[0])


# --------------------------------------------------------------------------- GPU summaries (features not stored)
_CFG = r"<partition ([0-9.]+) (KiB|MiB), credit ([0-9.]+)X>"
_UNIT = {"KiB": 2**10, "MiB": 2**20}


def _cfg_key(num: str, unit: str, x: str) -> tuple[float, float]:
    return (round(float(num) * _UNIT[unit]), float(x))


def _trial_outcome(lines: Sequence[str], key: tuple[float, float]) -> tuple[str, float | None]:
    """What became of an explore trial, from the decisions after it: ``(outcome, measured samples/s or None)``."""
    for nxt in lines:
        a = re.search(r"abort: trial " + _CFG + r" ran ([0-9.]+)", nxt)
        if a and _cfg_key(*a.groups()[:3]) == key:
            return "aborted", float(a.group(4))
        r = re.search(r"(rollback|measured best): " + _CFG + r" measured ([0-9.]+) samples/s in these conditions, "
                      + _CFG + r" ([0-9.]+)", nxt)
        if r:
            g = r.groups()
            if _cfg_key(*g[1:4]) == key:
                return "moved to (measured best)", float(g[4])
            if _cfg_key(*g[5:8]) == key:
                return "rolled back", float(g[8])
        gd = re.search(r"guard: " + _CFG + r" cost", nxt)
        if gd and _cfg_key(*gd.groups()) == key:
            return "guard (cost over the allowance)", None
        if "explore:" in nxt:
            break
    return "kept (no rollback, abort or guard before the next trial)", None


def gpu_report(paths: Iterable[str]) -> list[dict[str, Any]]:
    """Per GPU bench summary (``bench_gpu.md``): the static modes' measured ranking, and per tuner run every explore
    trial's predicted gain against what became of it (from the decisions' reasons). A run's first trial is the
    network's pick from the default (within the explorer's 2 powers of two)."""
    out = []
    for path in sorted(paths):
        text = Path(path).read_text(encoding="utf-8")
        modes = re.findall(r"^\| engine (<[^|]*?>)[^|]*\| ([0-9.]+) \|", text, re.M)
        static = sorted(((float(v), name) for name, v in modes if "wire" not in name), reverse=True)
        runs: list[dict[str, Any]] = []
        lines: list[str] = []
        for ln in text.splitlines() + ["**end**"]:
            if ln.startswith("**"):
                if runs and lines:
                    runs[-1]["lines"] = lines
                runs.append({"tuner": ln.split("**")[1], "lines": []})
                lines = []
            elif ln.startswith("- iteration"):
                lines.append(ln[2:])
        tuner_runs = []
        for run in runs:
            ls = run["lines"]
            trials = []
            for i, ln in enumerate(ls):
                m = re.search(r"explore: " + _CFG + r" predicted ([0-9.]+) samples/s \(best measured ([0-9.]+)", ln)
                if not m:
                    continue
                key = _cfg_key(*m.groups()[:3])
                pred, best = float(m.group(4)), float(m.group(5))
                outcome, got = _trial_outcome(ls[i + 1:], key)
                trials.append({"config": f"<{key[0] / 2**20:g} MiB, {key[1]:g}X>", "credit_x": key[1],
                               "predicted_gain": pred / best - 1.0, "outcome": outcome,
                               "measured_gain": None if got is None else got / best - 1.0})
            if trials:
                tuner_runs.append({"tuner": run["tuner"], "trials": trials})
        out.append({"path": path, "static_ranking": [f"{n} {v:.1f}" for v, n in static], "tuner_runs": tuner_runs})
    return out


def gpu_summary(files: Sequence[dict[str, Any]]) -> dict[str, Any]:
    runs = [r for f in files for r in f["tuner_runs"]]
    trials = [t for r in runs for t in r["trials"]]
    meas = [t for t in trials if t["measured_gain"] is not None]
    return {"files": len(files), "tuner_runs": len(runs), "explore_trials": len(trials),
            "outcomes": dict(collections.Counter(t["outcome"] for t in trials)),
            "trials_measured_in_log": len(meas),
            "trials_measured_better_than_best_by_1pct": sum(t["measured_gain"] > 0.01 for t in meas),
            "trials_credit_1x": sum(t["credit_x"] == 1 for t in trials),
            "credit_1x_outcomes": dict(collections.Counter(t["outcome"] for t in trials if t["credit_x"] == 1)),
            "predicted_gain_median": float(np.median([t["predicted_gain"] for t in trials])) if trials else None,
            "measured_gain_median": float(np.median([t["measured_gain"] for t in meas])) if meas else None,
            "first_trial_configs": dict(collections.Counter(r["trials"][0]["config"] for r in runs)),
            "best_static_configs": dict(collections.Counter(f["static_ranking"][0].rsplit(" ", 1)[0]
                                                            for f in files if f["static_ranking"]))}


# --------------------------------------------------------------------------- the report
def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def _row(name: str, res: dict[str, Any], tols: Sequence[float] = TOLS) -> str:
    r = res["recall"]
    h = res["hits"]
    cells = []
    for t in tols:
        k1, k3 = f"top1@{round(100 * t)}%", f"top3@{round(100 * t)}%"
        cells.append(f"{_pct(r.get(k1))} / {_pct(r.get(k3))} ({h.get(k3, 0):.1f})")
    return f"| {name} | {res['groups']} | {res['rankings']} | " + " | ".join(cells) + " |"


def markdown(report: dict[str, Any]) -> str:
    lines = ["# The meta-network as a ranker: top-k recall on real rows (issue 43, item 3)", "",
             f"Command: `{report['command']}`", "",
             "A group = one rate and repetition of a raw folder: 8 configurations measured one after the other by real "
             "training on the CPU testbed (2 workers). The network ranks the 8 from ONE window's features as the tuner's "
             "Scorer does (fresh, slope 1, one prediction per schedule class); a ranking hits when a configuration measured "
             "within tol of the group's best is in its top k. Cells: top-1 / top-3 recall (top-3 hits, ties counted as "
             "their expected hit). `start`: the window at the configuration nearest ByteScheduler's default; `each`: "
             "every window in turn. References: a random ranking; `replicate`: the same configurations' speeds measured in "
             "the other repetitions at that rate (the labels' noise floor).", "",
             "Held out: the shipped weights were trained on simulator windows only (models "
             + ", ".join(report.get("trained_models", [])) + "; simulated GPU clusters), so no real row was trained on; "
             "the mlp and transformer rows are the benchmark suite's held-out scenarios (collected for checks only), "
             "the CNN is the suite's tune-side model (its rows shaped the tuner's design, and `cnn_ft.npz`'s head was "
             "fine-tuned on `cnn_real`).", "",
             "VARIANT rows (prototypes, nothing in autobyte.meta changed) and the trend reference rank after the tuner "
             "measured m windows of the group (the start window and m-1 seeded random others, the same for all three): "
             "`residual` adds to the network's log predictions a per-job linear trend in (log2 credit multiple, log2 "
             f"partition) fitted by ridge ({report.get('ridge')}) on the measured pairs' residuals; `adapted` runs the tuner's "
             "own Adapter (1 s, inline) on those pairs; `trend alone` fits the same trend with no network. They rank "
             "every configuration by prediction, measured ones included: they answer another question than the one "
             "window rows (what a tuner can rank with after m windows).", "",
             "Sources: " + "; ".join(f"`{s['name']}` {s['path']} ({s['groups']} groups, {s['rows']} rows): {s['role']}"
                                     for s in report["sources"]), ""]
    header = "| ranking | groups | rankings | 1%: top-1 / top-3 (hits) | 2% | 5% |\n|---|---:|---:|---|---|---|"
    for title, sel in (("Held-out scenarios (mlp + transformer)", "held_out"), ("All real rows", "all")):
        lines += [f"## {title}", "", header]
        for name, res in report["tables"][sel].items():
            lines.append(_row(name, res))
        lines.append("")
    lines += ["## Per source", "", header]
    for src in report["per_source"]:
        for name, res in report["per_source"][src].items():
            lines.append(_row(f"{src}: {name}", res))
    lines.append("")
    lines += ["## Why it fails (shipped weights, every window)", ""]
    for scope, b in report["breakdown"].items():
        lines += [f"**{scope}** ({b['rankings']} rankings, {b['top3_misses']} top-3 misses at 1%): ranked first, credit "
                  f"{b['first_credit_x']} against best measured {b['best_credit_x']}; partition first {b['first_partition']} "
                  f"against best {b['best_partition']}. Misses whose first pick was credit 1X: {b['misses_first_credit_1x']}, "
                  f"partition <= 256 KiB: {b['misses_first_partition_le_256k']}. The first pick measured at "
                  f"{b['first_measured_vs_best_median']:.2f}x the best (median); it was predicted "
                  f"{100 * b['predicted_gain_first_median']:+.0f}% over the window's configuration and measured "
                  f"{100 * b['measured_gain_first_median']:+.0f}% (medians). Top-3 recall at 1% by link rate (Mbit/s): "
                  + ", ".join(f"{r:g}: {_pct(v)}" for r, v in b["top3_recall_by_rate_mbit"].items())
                  + ". Most frequent first-vs-best: "
                  + ", ".join(f"{p} ({n})" for p, n in b["first_vs_best_pairs_top"][:5]) + ".", ""]
    if report.get("gpu"):
        g = report["gpu"]["summary"]
        lines += ["## GPU bench summaries (features not stored: reported apart)", "",
                  f"{g['files']} summaries (bench_gpu.md of docs/figures/bench_gpu_h100, bench_gpu_h200; ResNet-50, 2 ranks "
                  f"on one GPU, gloo): the best static configuration measured {g['best_static_configs']}. "
                  f"{g['tuner_runs']} AutoByte runs from ByteScheduler's default: their first trial (the network's pick within "
                  f"the explorer's 2 powers of two) {g['first_trial_configs']}. {g['explore_trials']} explore trials "
                  f"({g['trials_credit_1x']} at credit 1X: {g['credit_1x_outcomes']}); all trials: {g['outcomes']}. Predicted "
                  f"gain over the best measured, median {_pct(g['predicted_gain_median'])}; measured (the "
                  f"{g['trials_measured_in_log']} trials whose speed the log states) {_pct(g['measured_gain_median'])}; "
                  f"of those, better than the best measured by 1%: {g['trials_measured_better_than_best_by_1pct']}.", ""]
    return "\n".join(lines) + "\n"


def _rounded(x: Any) -> Any:
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, (float, np.floating)):
        x = float(x)
        return round(x, 4) if math.isfinite(x) else None
    if isinstance(x, dict):
        return {str(k): _rounded(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_rounded(v) for v in x]
    return x


def _compact_json(report: dict[str, Any]) -> str:
    """One line per entry of the second level, floats to 4 digits (a small, diffable file)."""
    out = []
    for k, v in _rounded(report).items():
        if isinstance(v, dict):
            inner = ",\n".join(f"  {json.dumps(kk)}: {json.dumps(vv)}" for kk, vv in v.items())
            out.append(f" {json.dumps(k)}: {{\n{inner}\n }}")
        elif isinstance(v, list) and v and isinstance(v[0], dict):
            out.append(f" {json.dumps(k)}: [\n" + ",\n".join(f"  {json.dumps(x)}" for x in v) + "\n ]")
        else:
            out.append(f" {json.dumps(k)}: {json.dumps(v)}")
    return "{\n" + ",\n".join(out) + "\n}\n"


def _trained_models(weights: str | None) -> list[str]:
    """The models the weights' sidecar says they were trained on."""
    from autobyte.meta import default_weights_path

    path = (weights or str(default_weights_path())) + ".json"
    try:
        with open(path, encoding="utf-8") as f:
            return list(json.load(f)["info"]["models"])
    except (OSError, KeyError, ValueError):
        return []


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=None, help="folder for summary.json and summary.md")
    ap.add_argument("--weights", default=None, help="weights to score (default: the shipped ones)")
    ap.add_argument("--finetuned", default=str(ROOT / "docs/figures/meta_real/cnn_ft.npz"),
                    help="fine-tuned weights scored as well ('' to skip)")
    ap.add_argument("--variant", default="yes", choices=("yes", "no"), help="score the prototype variants")
    ap.add_argument("--m", default="3", help="windows measured before a variant ranks (the start + m-1 others); a list: 3,4")
    ap.add_argument("--orders", type=int, default=4, help="seeded random choices of those windows per group")
    ap.add_argument("--gpu", action="store_true", help="add the GPU bench summaries' report")
    args = ap.parse_args(argv)

    from autobyte.meta import MetaNetwork

    net = MetaNetwork.load(args.weights) if args.weights else MetaNetwork.load_default()
    groups: list[Group] = []
    sources = []
    for name, rel, model, role in SOURCES:
        gs = load_groups(str(ROOT / rel), name)
        groups += gs
        sources.append({"name": name, "path": rel, "model": model, "role": role, "groups": len(gs),
                        "rows": int(sum(len(g.speed) for g in gs))})
        print(f"{name}: {len(gs)} groups, {sources[-1]['rows']} rows ({rel})")

    shipped = ScorerRanker(net)
    rankers: dict[str, Callable[[Sequence[Group]], dict[str, Any]]] = {
        "shipped, start window": lambda gs: evaluate(gs, shipped, windows="start"),
        "shipped, each window": lambda gs: evaluate(gs, shipped, windows="each"),
    }
    if args.finetuned:
        ft = ScorerRanker(MetaNetwork.load(args.finetuned))
        rankers["cnn_ft (head fine-tuned on cnn_real), start window"] = lambda gs: evaluate(gs, ft, windows="start")
    if args.variant == "yes":
        o = args.orders
        for m in sorted({int(x) for x in str(args.m).split(",")}):
            rankers[f"shipped, after {m} windows (slope and credit/partition trend fitted on them)"] = \
                lambda gs, m=m: evaluate_seen(gs, ShippedSeenRanker(net), m=m, orders=o)
            rankers[f"VARIANT residual: + credit/partition trend fitted on {m} windows, every pair"] = \
                lambda gs, m=m: evaluate_seen(gs, ResidualRanker(net), m=m, orders=o)
            rankers[f"VARIANT adapted: the tuner's Adapter on {m} windows"] = \
                lambda gs, m=m: evaluate_seen(gs, AdaptedRanker(net), m=m, orders=o)
            rankers[f"reference: the trend of {m} windows alone (no network)"] = \
                lambda gs, m=m: evaluate_seen(gs, ResidualRanker(net, use_network=False), m=m, orders=o)
    rankers["random ranking"] = lambda gs: evaluate_reference(gs, "random")
    rankers["replicate (other repetitions' measured speeds)"] = lambda gs: evaluate_reference(gs, "replicate")

    full: dict[str, dict[str, Any]] = {name: fn(groups) for name, fn in rankers.items()}
    tables: dict[str, dict[str, Any]] = {"all": {}, "held_out": {}}
    for name, res in full.items():
        tables["all"][name] = res["overall"]
        hs = [res["by_source"][s] for s in HELD_OUT if s in res["by_source"]]
        if hs:
            n = sum(h["rankings"] for h in hs)
            tables["held_out"][name] = {
                "groups": sum(h["groups"] for h in hs), "rankings": n,
                "recall": {k: sum(h["recall"][k] * h["rankings"] for h in hs) / n for k in hs[0]["recall"]},
                "hits": {k: sum(h["hits"][k] for h in hs) for k in hs[0]["hits"]}}
    per_source = {s["name"]: {name: full[name]["by_source"][s["name"]] for name in full if s["name"] in full[name]["by_source"]}
                  for s in sources}
    each = full["shipped, each window"]["failures"]
    bd = {"held-out scenarios": breakdown([f for f in each if f["group"].split("@")[0] in HELD_OUT]),
          "testbed CNN": breakdown([f for f in each if f["group"].split("@")[0] not in HELD_OUT])}
    cmd = "OMP_NUM_THREADS=1 python benchmarks/predictor_recall.py " + " ".join(argv if argv is not None else sys.argv[1:])
    report: dict[str, Any] = {"command": cmd.strip(), "sources": sources, "tables": tables, "per_source": per_source,
                              "breakdown": bd,
                              "start_window_failures": full["shipped, start window"]["failures"],
                              "held_out": list(HELD_OUT), "weights": args.weights or "shipped", "ridge": RIDGE,
                              "trained_models": _trained_models(args.weights)}
    if args.gpu:
        paths = [str(p) for p in sorted(ROOT.glob("docs/figures/bench_gpu_h*/*/bench_gpu.md"))]
        files = gpu_report(paths)
        for f in files:
            f["path"] = os.path.relpath(f["path"], ROOT)
        report["gpu"] = {"summary": gpu_summary(files), "files": files}
    md = markdown(report)
    print(md)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "summary.json"), "w", encoding="utf-8") as f:
            f.write(_compact_json(report))
        with open(os.path.join(args.out, "summary.md"), "w", encoding="utf-8") as f:
            f.write(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
