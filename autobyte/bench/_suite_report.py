"""The figures of a benchmark suite (``autobyte bench --suite``): per-scenario summaries, the suite's geomeans and tables.

From the runs :func:`autobyte.bench._suite.run_suite` measured: throughput
(median and spread over repeats), ratios against the reference methods, the
do-no-harm figure (the worst span of a tuner's run against the start
config's), what a tuner's trials cost, its CPU shares, and the markdown table
of ``suite_summary.md``.
"""

from __future__ import annotations

import json
import math
import os
import statistics
from typing import Any, Mapping, Sequence

from ._headroom import render as render_headroom
from ._real import BASELINE
from ._scenarios import TAGS, Scenario

#: The span of the do-no-harm figure, in iterations.
HARM_SPAN = 50

#: Samples per iteration are ``batch_size * N_WORKERS``.
N_WORKERS = 2


def is_tuner(method: str) -> bool:
    """Methods that change the config while running (the ones the do-no-harm figure is for)."""
    return method == "autobyte" or method.startswith("tuner:")


def worst_span_ratio(tuned_s: Sequence[float], start_s: Sequence[float], span: int = HARM_SPAN) -> tuple[float, int]:
    """Do-no-harm: the largest ``sum(tuned[i:i+span]) / sum(start[i:i+span])`` over aligned spans, and its first ``i``.

    Iteration ``i`` of both runs is under the same trace condition (traces
    are iteration-keyed), so the ratio compares like with like. Runs shorter
    than ``span`` compare their whole common length.

    Raises:
        ValueError: empty runs or a non-positive span.
    """
    n = min(len(tuned_s), len(start_s))
    if n == 0 or isinstance(span, bool) or not isinstance(span, int) or span < 1:
        raise ValueError(f"runs must be non-empty and span a positive integer, but got {n} iterations, span={span!r}.")
    w = min(span, n)
    a, b = sum(tuned_s[:w]), sum(start_s[:w])
    worst, at = a / b, 0
    for i in range(1, n - w + 1):
        a += tuned_s[i + w - 1] - tuned_s[i - 1]
        b += start_s[i + w - 1] - start_s[i - 1]
        if a / b > worst:
            worst, at = a / b, i
    return worst, at


#: how the reasons of a tuner's trials begin (the explorer's; the search's measurement of another candidate)
TRIAL_REASONS = ("explore", "search: measuring")


def trial_spans(its: Sequence[Mapping[str, Any]], rows: Sequence[Mapping[str, Any]]) -> list[tuple[int, int]]:
    """Index ranges ``[i, j)`` of ``its`` that ran a tuner's trials.

    A trial is a decision row (``decisions.jsonl``) whose ``reason`` starts
    with ``"explore"`` or ``"search: measuring"`` (the explorer's trial, or a
    window of another candidate of the search's race): its iterations are the first ones after the decision
    at the configuration it chose (starting before the next row's iteration:
    a decision held back, e.g. by the do-no-harm guard, ran no trial), until
    the configuration changes.
    """
    spans = []
    marks = sorted(int(d["iteration"]) for d in rows)
    for d in rows:
        if not str(d.get("reason") or "").startswith(TRIAL_REASONS) or d.get("config") is None:
            continue
        cfg, at = list(d["config"]), int(d["iteration"])
        until = next((m for m in marks if m > at), None)
        i = next((k for k, x in enumerate(its) if int(x["iteration"]) > at and list(x.get("config") or []) == cfg), None)
        if i is None or (until is not None and int(its[i]["iteration"]) > until):
            continue
        j = i
        while j < len(its) and list(its[j].get("config") or []) == cfg:
            j += 1
        spans.append((i, j))
    return spans


def trial_cost(its: Sequence[Mapping[str, Any]], rows: Sequence[Mapping[str, Any]],
               start: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """What a tuned run's trials cost against its start configuration's run of the same round.

    ``its``: the tuned run's iterations; ``rows``: its decisions; ``start``:
    the iterations of the run at the starting configuration (ByteScheduler's
    default) under the same trace (iteration ``i`` of both under the same
    condition). Returns ``trials`` (count), ``iterations`` (run at a trial),
    ``share`` (of the run's iterations), ``vs_start`` (the trials' speed over
    their iterations, the start run's time over the same iterations divided
    by theirs; ``None`` without trials) and ``cost`` (the time they took
    beyond the start run's over those iterations, a share of the start
    run's whole time; negative when trials ran faster).
    """
    spans = trial_spans(its, rows)
    base = {int(x["iteration"]): float(x["seconds"]) for x in start}
    tuned_s = base_s = 0.0
    n = 0
    for i, j in spans:
        for x in its[i:j]:
            k = int(x["iteration"])
            if k in base:
                tuned_s += float(x["seconds"])
                base_s += base[k]
            n += 1
    total = sum(base.values())
    return {"trials": len(spans), "iterations": n, "share": n / len(its) if its else 0.0,
            "vs_start": base_s / tuned_s if tuned_s > 0 else None,
            "cost": (tuned_s - base_s) / total if total > 0 else 0.0}


def summarize_trials(per: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Repeats' :func:`trial_cost` figures: each (``per_repeat``) and their medians (``vs_start`` over the repeats with trials)."""
    speeds = [p["vs_start"] for p in per if p["vs_start"] is not None]
    return {"per_repeat": list(per), "trials": statistics.median(p["trials"] for p in per),
            "share": statistics.median(p["share"] for p in per),
            "vs_start": statistics.median(speeds) if speeds else None,
            "cost": statistics.median(p["cost"] for p in per)}


def throughput(its: Sequence[Mapping[str, Any]], batch_size: int) -> float:
    """Samples/s of a run: all samples over all seconds."""
    secs = sum(float(r["seconds"]) for r in its)
    return batch_size * N_WORKERS * len(its) / secs if secs > 0 else 0.0


def geomean(xs: Sequence[float]) -> float | None:
    xs = [x for x in xs if x is not None and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


#: Reference methods of the ratio columns, in table order.
REFS = ("hindsight", "oracle", "bytescheduler", "bo", "ddp")


def summarize_scenario(sc: Scenario, runs: Mapping[str, Sequence[Sequence[Mapping[str, Any]]]],
                       meta: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
                       decisions: Mapping[str, Sequence[Sequence[Mapping[str, Any]]]] | None = None) -> dict[str, Any]:
    """Per method: samples/s per repeat, median, spread; ratios of medians to :data:`REFS`; do-no-harm; tuner CPU; trials.

    ``runs[method][repeat]`` is that run's iterations; ``meta[method][repeat]``
    its rank 0 ``rank0.json`` (for the tuner's CPU share);
    ``decisions[method][repeat]`` its decision rows (for what its trials
    cost, :func:`trial_cost`, against the default's run of the same round).
    """
    rows: dict[str, Any] = {}
    for m, reps in runs.items():
        tp = [throughput(its, sc.batch_size) for its in reps]
        rows[m] = {"samples_per_s": tp, "median": statistics.median(tp), "min": min(tp), "max": max(tp)}
    for m, row in rows.items():
        row["vs"] = {ref: row["median"] / rows[ref]["median"] for ref in REFS if ref in rows and rows[ref]["median"] > 0}
        if is_tuner(m) and "bytescheduler" in runs:
            starts = runs["bytescheduler"]
            worst = []
            for r, its in enumerate(runs[m]):
                base = starts[min(r, len(starts) - 1)]  # the start config's run of the same round
                ratio, at = worst_span_ratio([x["seconds"] for x in its], [x["seconds"] for x in base])
                worst.append({"ratio": ratio, "first_iteration": its[at]["iteration"] if its else at})
            row["worst_span"] = {"span": HARM_SPAN, "per_repeat": worst,
                                 "median": statistics.median(w["ratio"] for w in worst), "max": max(w["ratio"] for w in worst)}
            made = (decisions or {}).get(m)
            if made:
                row["trials"] = summarize_trials([trial_cost(its, made[r], starts[min(r, len(starts) - 1)])
                                                  for r, its in enumerate(runs[m]) if r < len(made)])
        if m == "bytescheduler" and len(runs[m]) > 1:
            # the start config against its own next repeat: how far two runs of one static config
            # differ over their worst span, the noise floor of the tuners' figure above
            secs = [[x["seconds"] for x in its] for its in runs[m]]
            noise = [worst_span_ratio(secs[r], secs[(r + 1) % len(secs)])[0] for r in range(len(secs))]
            row["worst_span"] = {"span": HARM_SPAN, "self": True, "per_repeat": [{"ratio": x} for x in noise],
                                 "median": statistics.median(noise), "max": max(noise)}
        shares = [mt["tuner_cpu_s"] / mt["wall_s"] for mt in (meta or {}).get(m, [])
                  if mt and mt.get("tuner_cpu_s") is not None and mt.get("wall_s")]
        if shares:
            row["tuner_cpu_share"] = statistics.median(shares)
        # the online adaptation's CPU, wherever it ran (a worker process by default): not in the decisions' time above
        adapt = [mt["adapt_cpu_s"] / mt["wall_s"] for mt in (meta or {}).get(m, [])
                 if mt and mt.get("adapt_cpu_s") is not None and mt.get("wall_s")]
        if adapt:
            row["adapt_cpu_share"] = statistics.median(adapt)
    return {"name": sc.name, "tag": sc.tag, "arch": sc.arch, "baseline": BASELINE[sc.arch], "model": sc.model,
            "batch_size": sc.batch_size, "iters": sc.iters,
            "compute_scale": sc.compute_scale, "about": sc.about, "phases": [[p.iters, p.condition.key] for p in sc.phases], "methods": rows}


def summarize_suite(plan_name: str, repeats: int, scenarios: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The suite's summary: per scenario rows, then geometric means of the ratios per tag."""
    gm: dict[str, Any] = {}
    for tag in TAGS:
        mine = [s for s in scenarios if s["tag"] == tag]
        if not mine:
            continue
        methods = list(dict.fromkeys(m for s in mine for m in s["methods"]))
        gm[tag] = {"n_scenarios": len(mine), "methods": {
            m: {ref: geomean([s["methods"][m]["vs"][ref] for s in mine if m in s["methods"] and ref in s["methods"][m]["vs"]])
                for ref in REFS}
            for m in methods}}
    return {"suite": plan_name, "repeats": repeats, "workers": N_WORKERS, "scenarios": list(scenarios), "geomean": gm}


def _ratio(x: float | None) -> str:
    return "" if x is None else f"{x:.3f}"


def _harm(ws: Mapping[str, Any] | None) -> str:
    """The do-no-harm cell: median over repeats of each repeat's worst span, and the worst repeat."""
    return "" if ws is None else f"{ws['median']:.3f} (max {ws['max']:.3f})"


def _trials_line(name: str, method: str, t: Mapping[str, Any]) -> str:
    speed = "" if t["vs_start"] is None else f", at {t['vs_start']:.3f}x the default's speed over them"
    return (f"- {name}, {method}: {t['trials']:g} trials, {100 * t['share']:.1f}% of iterations{speed}, "
            f"cost {100 * t['cost']:+.1f}% of the run's time")


def _cfg(pair: Sequence[int]) -> str:
    p, c = int(pair[0]), int(pair[1])
    return f"<{p / MIB_F:g} MiB, {c / p:.3g}X>"


MIB_F = 1024.0 * 1024.0


def _configs_line(s: Mapping[str, Any]) -> str:
    """One line: what hindsight, the oracle and BO ran, and how close the grids' prediction for hindsight came."""
    cfgs = s["configs"]
    parts = []
    if "hindsight" in cfgs:
        pred = s.get("hindsight_predicted_samples_per_s")
        meas = s["methods"].get("hindsight", {}).get("median")
        parts.append(f"hindsight {_cfg(cfgs['hindsight'])}"
                     + (f" (grids predicted {pred:.1f} samples/s{'' if meas is None else f', measured {meas:.1f}'})" if pred else ""))
    if "oracle_phases" in cfgs:
        parts.append("oracle " + ", ".join(f"it {start}: {_cfg(c)}" for start, c in cfgs["oracle_phases"]))
    if "bo" in cfgs:
        parts.append(f"BO {_cfg(cfgs['bo'])}")
    return f"- {s['name']}: " + "; ".join(parts)


def table_md(summary: Mapping[str, Any]) -> str:
    """``suite_summary.md``: one table per tag, then the geometric means."""
    lines = [f"Suite `{summary['suite']}`: {summary['workers']} workers in network namespaces, real training, "
             f"median of {summary['repeats']} repeat(s), spread = min-max over repeats; ratios are of medians. "
             f"Worst {HARM_SPAN}-it = the slowest {HARM_SPAN}-iteration span of a tuner's run over the same span of the "
             "ByteScheduler-default run of the same round (median over repeats, and the worst repeat; > 1.03 breaks "
             "the 3% guard); on the ByteScheduler-default row, each of its repeats against the next one: the same "
             "static config twice, the noise floor of that figure.", ""]
    head = ("| scenario | method | samples/s | spread | vs hindsight | vs oracle | vs BS default | vs BO | vs DDP (dist_sync on PS) | "
            f"worst {HARM_SPAN}-it vs start (max) | tuner CPU |")
    for tag in TAGS:
        mine = [s for s in summary["scenarios"] if s["tag"] == tag]
        if not mine:
            continue
        lines += [f"### {'Tuning' if tag == 'tune' else 'Held-out'} scenarios (`{tag}`)", "", head, "|" + "---|" * 2 + "---:|" * 9]
        for s in mine:
            for m, r in s["methods"].items():
                ws = r.get("worst_span")
                cpu, acpu = r.get("tuner_cpu_share"), r.get("adapt_cpu_share")
                shown = s.get("baseline", "ddp") if m == "ddp" else m
                lines.append(f"| {s['name']} | {shown} | {r['median']:.1f} | {r['min']:.1f}-{r['max']:.1f} | "
                             + " | ".join(_ratio(r["vs"].get(ref)) for ref in REFS)
                             + f" | {_harm(ws)} | {'' if cpu is None else f'{100 * cpu:.2f}%'}"
                             + f"{'' if not acpu else f' + {100 * acpu:.2f}% adapting'} |")
        notes = [_configs_line(s) for s in mine if {"hindsight", "oracle_phases", "bo"} & set(s.get("configs", {}))]
        if notes:
            lines += ["", "Configs run:", ""] + notes
        trials = [_trials_line(s["name"], m, r["trials"]) for s in mine for m, r in s["methods"].items() if "trials" in r]
        if trials:
            lines += ["", "Trials (the tuners' explore decisions and the search's measurements of other candidates; medians over repeats): how many, their iterations, "
                      "their speed over those iterations against the ByteScheduler-default run of the same round, and "
                      "the time they took beyond it as a share of that run's time:", ""] + trials
        g = summary["geomean"].get(tag)
        if g:
            base = "/".join(dict.fromkeys(s.get("baseline", "ddp") for s in mine))  # the unscheduled baselines averaged here
            lines += ["", f"Geometric mean over the {g['n_scenarios']} `{tag}` scenario(s):", "",
                      f"| method | vs hindsight | vs oracle | vs BS default | vs BO | vs {'DDP' if base == 'ddp' else base} |",
                      "|---|" + "---:|" * 5]
            for m, v in g["methods"].items():
                lines.append(f"| {base if m == 'ddp' else m} | " + " | ".join(_ratio(v[ref]) for ref in REFS) + " |")
        lines.append("")
    lines += headroom_lines(summary["scenarios"])
    return "\n".join(lines) + "\n"


def headroom_lines(scenarios: Sequence[Mapping[str, Any]]) -> list[str]:
    """The summary's headroom section (``benchmarks/headroom.py``'s figures for this run), for the scenarios that
    carry them (a run of both ``bytescheduler`` and ``hindsight``); none: no lines."""
    rooms = [dict(s["headroom"], scenario=s["name"]) for s in scenarios if s.get("headroom")]
    if not rooms:
        return []
    window = ", ".join(sorted({str(r["window"]) for r in rooms if "window" in r}))
    return ["### What any tuner could win here, against the noise", "",
            "`benchmarks/headroom.py`'s figures for this run, from the continuous runs of ByteScheduler's default and "
            "hindsight. **Hindsight vs default**: whole runs (medians). **Switching headroom**: the run's time if every "
            "condition ran at the faster of the two, composed from the measured phases, over hindsight throughout (an "
            "optimistic bound for a tuner that switches between them); in brackets the same over every grid "
            "configuration as the grids predict it. **Sigma of a run**: one static configuration's whole-run scatter "
            "between repeats (a median of 2 repeats resolves about twice it). Per condition: **the gain to find** "
            "(hindsight's steady speed over the default's; in brackets the grid's), **a window's scatter** "
            f"({window}-iteration windows, the tuner's checks), the **windows per configuration** a comparison needs "
            "to tell that gain (one-sided 5%, power 80%) against **the windows a phase holds**. `-`: too little data "
            "(one repeat, phases shorter than two windows) or no gain.", "", render_headroom(rooms), ""]


def write_suite(summary: Mapping[str, Any], out: str) -> None:
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "suite_summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    with open(os.path.join(out, "suite_summary.md"), "w") as f:
        f.write(table_md(summary))


# -- running --------------------------------------------------------------------------------------
