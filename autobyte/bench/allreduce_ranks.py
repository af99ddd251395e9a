"""One rank of a real all-reduce training run for ``autobyte bench`` and calibration.

Run as ``python -m autobyte.bench.allreduce_ranks SPEC_JSON OUT_DIR`` on every
worker (under ``autobyte launch`` / :func:`autobyte.testbed.launch`, or
:func:`autobyte.testing.run_ranks` on loopback). ``SPEC_JSON`` fields:

- ``method``: ``"ddp"`` (plain DistributedDataParallel), ``"static"``
  (``config``), ``"tuner"`` (``tuner`` name, start ``config``,
  ``window_iters``), ``"phases"`` (``phases``: ``[[first_iteration,
  [partition, credit]], ...]``, the per-phase oracle), or ``"sweep"``
  (``configs``: measure each for ``iters_per_config`` after ``warmup``
  iterations; used for grid search and calibration).
- ``iters``, ``batch_size``, ``width``/``hidden`` (CNN size), ``seed``.
- ``model``: one of :data:`autobyte.bench.models.MODELS` (default ``"cnn"``,
  sized by ``width``/``hidden``; the others at their default size), or an
  emulated zoo model ``"emu:NAME"`` (:mod:`autobyte.bench.emulate_torch`:
  real parameter tensors of the real sizes, per-layer compute slept from the
  profile ``compute_scale`` times slower, default 10; ``batch_size`` is then
  the profile's batch, ``None`` for the zoo's).
- ``slowdown``: ``[[first, end, rank, factor], ...]``: during iterations
  ``first <= k < end`` rank ``rank`` computes ``factor`` times slower (a
  sleep of ``(factor - 1)`` times ``compute_s``, the seconds of one local
  forward + backward: given in the spec, so every run of a benchmark sleeps
  alike, or else measured once before training on the unwrapped model),
  emulating a straggler. With an emulated model the rank's slept compute
  times are multiplied by ``factor`` instead.

Rank 0 writes ``OUT_DIR/iterations.jsonl`` (one line per iteration: index,
seconds, samples/s, config in force), ``OUT_DIR/decisions.jsonl`` and, for
sweeps, ``OUT_DIR/sweep.jsonl``; every rank writes ``OUT_DIR/rank<R>.json``
(its measured compute time per iteration, process CPU seconds, wall seconds
of the training loop and, with a tuner, the tuner's own CPU seconds where the
tuner counts them in ``cpu_s``); rank 0 keeps its ``autobyte`` log, the tuner's
reasons, in ``OUT_DIR/tuner.log``. Iteration ``k`` starts with
:func:`autobyte.testbed.notify_iteration` so a bandwidth trace switches
exactly at its iteration boundaries.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from ..integrations._imports import require_torch


def main(argv: list[str] | None = None) -> None:
    args = argv or sys.argv[1:]
    spec: dict[str, Any] = json.loads(args[0])
    out_dir = args[1]
    torch = require_torch()
    import torch.distributed as dist

    from ..integrations.torch import schedule
    from ..testbed import notify_iteration
    from .emulation import DEFAULT_SCALE, Emulation, is_emulated
    from ._rank_plan import decision_row, iteration_plan, keep_log, write_rank_outputs
    from .models import make_model, model_batches

    torch.set_num_threads(int(spec.get("threads", 1)))
    if spec.get("debug_hang_s"):
        import faulthandler

        faulthandler.dump_traceback_later(float(spec["debug_hang_s"]), exit=False)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    keep_log(out_dir, rank)
    model_name = str(spec.get("model", "cnn"))
    slow = {(int(a), int(b)): float(f) for a, b, r, f in spec.get("slowdown", []) if int(r) == rank}
    emu: Any = None
    if is_emulated(model_name):
        from .emulate_torch import EmulatedModel

        emu = Emulation(model_name, float(spec.get("compute_scale", DEFAULT_SCALE)), spec.get("batch_size"))
        bs = emu.profile().batch_size
        model: Any = EmulatedModel(emu, rank)
        data: list[Any] = [(model.example_input(), None)]  # the batch the engine's tuner counts
        # a plain SGD step: one pass over the real tensors (momentum would add two on 2 shared cores)
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)

        def loss_fn(out: Any, _y: Any) -> Any:  # the emulated model's output is its own scalar "loss"
            return out
        compute_s = emu.compute_s
    else:
        bs = int(spec.get("batch_size", 16))
        data = model_batches(model_name, 8, bs, rank, seed=int(spec.get("seed", 0)))
        model = make_model(model_name, width=int(spec.get("width", 32)), hidden=int(spec.get("hidden", 1536)))
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        loss_fn = torch.nn.functional.cross_entropy
        compute_s = float(spec.get("compute_s") or 0.0) or (_compute_time(model, data, loss_fn) if slow else 0.0)
    method = spec["method"]
    decisions: list[dict[str, Any]] = []
    handle = None
    net: Any = model

    def log_decision(out: Any) -> None:  # a WindowOutcome of core's window protocol
        decisions.append(decision_row(out))

    from ..core.tuners import import_tuners, make_tuner

    import_tuners(spec.get("imports", []))  # tuners registered by the bench's --import, as in its own process
    # Every scheduled method runs the same windows: a static config (and the oracle, switched by
    # reconfigure) under a StaticTuner, which never moves and is not guarded. Without a tuner the
    # engine keeps the gradients' ready order all run (no measured times, so no priority order),
    # which made every static baseline ~10% slower under a competing flow (docs/torch.md).
    tuner: Any = make_tuner(spec["tuner"]) if method == "tuner" else make_tuner("static")
    if method == "tuner" and spec.get("guarded") is False:  # an offline search (BO before training): no do-no-harm guard
        tuner.guarded = False
    if method == "ddp":
        net = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=25)
    else:
        start = spec.get("config") or (spec["phases"][0][1] if method == "phases" else spec["configs"][0])
        handle = schedule(
            model, opt, partition_bytes=int(start[0]), credit_bytes=int(start[1]),
            tuner=tuner,
            window_iters=int(spec.get("window_iters", 10)), warmup_iters=int(spec.get("warmup_iters", 2)),
            on_decision=log_decision, timeout_s=float(spec.get("timeout_s", 600)),
        )

    n_iters, switch, sweep = iteration_plan(spec)

    rows: list[dict[str, Any]] = []
    cpu0, wall0 = time.process_time(), time.perf_counter()
    prev_start: float | None = None
    prev_cfg: Any = None
    for it in range(n_iters):
        if it in switch and handle is not None and it > 0:
            cfg = switch[it]
            handle.reconfigure(cfg.partition_bytes, cfg.credit_bytes)
        t_before = time.perf_counter()
        if rank == 0:
            notify_iteration(it)
        if prev_start is not None:
            rows.append({"iteration": it - 1, "seconds": t_before - prev_start, "config": prev_cfg})
        start_t = time.perf_counter()
        x, y = data[it % len(data)]
        factor = next((f for (a, b), f in slow.items() if a <= it < b), 1.0)
        if emu is not None:
            model.time_factor = factor
        elif factor > 1.0:
            time.sleep((factor - 1.0) * compute_s)
        opt.zero_grad()
        loss_fn(net(x), y).backward()
        opt.step()
        prev_start = start_t
        prev_cfg = None if handle is None else [handle.config.partition_bytes, handle.config.credit_bytes]
    if handle is not None:
        handle.synchronize()
    dist.barrier()
    if prev_start is not None:
        rows.append({"iteration": n_iters - 1, "seconds": time.perf_counter() - prev_start, "config": prev_cfg})
    meta = {"rank": rank, "compute_s": compute_s, "cpu_s": time.process_time() - cpu0,
            "wall_s": time.perf_counter() - wall0, "tuner_cpu_s": getattr(tuner, "cpu_s", None),
            "adapt_cpu_s": getattr(getattr(tuner, "adapter", None), "cpu_s", None), "iters": n_iters}
    if emu is not None:
        meta.update(emulation=emu.to_dict(), sleep_overshoot_s=model.overshoot_s, batch_size=bs)
    write_rank_outputs(out_dir, rank, world, bs, spec, meta, rows, decisions, sweep)
    if handle is not None:
        handle.close()
    dist.destroy_process_group()


def compute_seconds(model_name: str, batch_size: int, *, threads: int = 1) -> float:
    """Median seconds of one local forward + backward of a :data:`~autobyte.bench.models.MODELS` model, here and now."""
    torch = require_torch()
    from .models import make_model, model_batches

    prev = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        model = make_model(model_name)
        return _compute_time(model, model_batches(model_name, 4, batch_size), torch.nn.functional.cross_entropy)
    finally:
        torch.set_num_threads(prev)


def _compute_time(model: Any, data: list[Any], loss_fn: Any, n: int = 5) -> float:
    """Median seconds of one local forward + backward (no communication: the model is not wrapped yet)."""
    times = []
    for i in range(n + 1):
        x, y = data[i % len(data)]
        t0 = time.perf_counter()
        loss_fn(model(x), y).backward()
        times.append(time.perf_counter() - t0)
    model.zero_grad(set_to_none=True)
    return sorted(times[1:])[n // 2]


if __name__ == "__main__":
    main()
