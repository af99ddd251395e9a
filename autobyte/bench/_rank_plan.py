"""What a benchmark rank runs and writes, shared by the all-reduce and the parameter-server rank scripts.

:func:`iteration_plan` reads a rank spec's ``method`` (``phases``: switch to a
config at given iterations; ``sweep``: measure each config for
``iters_per_config`` after ``warmup`` iterations; otherwise ``iters``
iterations) into the number of iterations and the switches;
:func:`decision_row` is one line of ``decisions.jsonl`` (a window outcome);
:func:`write_rank_outputs` writes ``rank<R>.json`` and, on rank 0,
``iterations.jsonl``, ``decisions.jsonl`` and (sweeps) ``sweep.jsonl``, the
files :mod:`autobyte.bench._real` reads; :func:`keep_log` keeps rank 0's
``autobyte`` log (the tuner's reasons at INFO) in ``tuner.log``.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any, Sequence

from ..core import Config


#: The file in a run's folder that holds rank 0's ``autobyte`` log (:func:`keep_log`).
LOG_FILE = "tuner.log"

#: Iterations a sweep runs at its first config before that config's own warm-up (the job's start).
START_ITERS = 1


def iteration_plan(spec: dict[str, Any]) -> tuple[int, dict[int, Config], list[tuple[int, Config]]]:
    """Iterations to run, the configuration to switch to at each listed iteration, and a sweep's (first iteration, config)."""
    method = spec["method"]
    sweep: list[tuple[int, Config]] = []
    if method == "sweep":
        per = int(spec.get("iters_per_config", 10)) + int(spec.get("warmup", 3))
        # iteration 0 is the job's start, never measured: timed start to start, it holds the set-up and leaves the
        # next iteration short (seen on a parameter server: 1.2 s against 1.9 s), which favoured the first config
        sweep = [(START_ITERS + i * per, Config(int(c[0]), int(c[1]))) for i, c in enumerate(spec["configs"])]
        n_iters = START_ITERS + per * len(sweep)
    else:
        n_iters = int(spec.get("iters", 200))
    phases = {int(k): v for k, v in spec.get("phases", [])} if method == "phases" else {}
    switch = dict(sweep) if sweep else {k: Config(int(v[0]), int(v[1])) for k, v in phases.items()}
    return n_iters, switch, sweep


def decision_row(out: Any) -> dict[str, Any]:
    """One ``decisions.jsonl`` row of a :class:`~autobyte.core.window.WindowOutcome`: the config in force, the
    decision's reason and predicted speed when one was made, the observed speed, and ``regime_changed`` at the
    check where the tuner heard of a change of conditions (with ``regime_rule``: which rule of the detector saw it).

    The reason is the whole one from rank 0's controller history when the outcome carries that entry (the
    decision message between ranks holds its first ``REASON_BYTES`` bytes only)."""
    cfg = out.config
    row: dict[str, Any] = {"iteration": out.iteration, "config": [cfg.partition_bytes, cfg.credit_bytes]}
    if out.decision is not None:
        entry = out.entry or {}
        whole = entry.get("reason") if entry.get("new_config") == out.decision.new.to_dict() else None
        row.update(reason=whole or out.decision.reason, predicted_speed=out.decision.predicted_speed)
    row["observed_speed"] = out.speed
    if out.regime_changed:
        row["regime_changed"] = True
        entry = out.entry or {}
        rule = entry.get("regime_rule")
        if rule is not None:
            row["regime_rule"] = rule  # which rule of the detector saw it: "speed" or "rate"
        if entry.get("mixed"):
            row["mixed"] = True  # the tuner heard of it at the check that showed it, a mix of both regimes
    return row


def write_rank_outputs(out_dir: str, rank: int, world: int, batch_size: int, spec: dict[str, Any], meta: dict[str, Any],
                       rows: list[dict[str, Any]], decisions: Sequence[dict[str, Any]], sweep: Sequence[tuple[int, Config]]) -> None:
    """``rank<R>.json`` (``meta``); on rank 0 the iterations (samples/s added), the decisions and a sweep's throughput per config."""
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(meta, f)
    if rank != 0:
        return
    with open(os.path.join(out_dir, "iterations.jsonl"), "w") as f:
        for r in rows:
            r["samples_per_s"] = batch_size * world / r["seconds"]
            f.write(json.dumps(r) + "\n")
    with open(os.path.join(out_dir, "decisions.jsonl"), "w") as f:
        for d in decisions:
            f.write(json.dumps(d) + "\n")
    if sweep:
        warm = int(spec.get("warmup", 3))
        per = int(spec.get("iters_per_config", 10)) + warm
        with open(os.path.join(out_dir, "sweep.jsonl"), "w") as f:
            for first, cfg in sweep:
                seg = rows[first + warm:first + per]
                secs = sum(r["seconds"] for r in seg)
                f.write(json.dumps({"config": [cfg.partition_bytes, cfg.credit_bytes], "iters": len(seg),
                                    "samples_per_s": batch_size * world * len(seg) / secs}) + "\n")


def keep_log(out_dir: str, rank: int) -> logging.Handler | None:
    """On rank 0, write the ``autobyte`` loggers' records at INFO and above to ``OUT_DIR/tuner.log``; the handler added.

    The tuner explains every decision, change of conditions and rule that acted there
    (``autobyte.meta`` at INFO), which ``decisions.jsonl`` holds only the reasons of moves of.
    The file is created at the first record, so a run that logs nothing leaves none.
    Warnings still reach stderr when the process has no other handler, as without
    this one (:data:`logging.lastResort`). Other ranks: ``None``, nothing changed.
    """
    if rank != 0:
        return None
    os.makedirs(out_dir, exist_ok=True)
    logger = logging.getLogger("autobyte")
    handler = logging.FileHandler(os.path.join(out_dir, LOG_FILE), delay=True)
    handler.setLevel(logging.INFO)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    logger.addHandler(handler)
    if not logging.getLogger().handlers:
        warn = logging.StreamHandler()
        warn.setLevel(logging.WARNING)
        logger.addHandler(warn)
    if logger.getEffectiveLevel() > logging.INFO:
        logger.setLevel(logging.INFO)
    return handler
