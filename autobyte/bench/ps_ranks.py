"""One process of a real MXNet ``dist_sync`` training run for ``autobyte bench --arch ps``.

Run as ``python -m autobyte.bench.ps_ranks SPEC_JSON OUT_DIR`` as every role
of a parameter-server job (``Testbed.run(..., ps=True)`` starts a scheduler,
one server per worker namespace, co-located with the workers as in the paper,
and the workers; the scheduler and the servers run their MXNet loop on
``import mxnet`` and never reach :func:`main`'s training). The spec and the
outputs are those of :mod:`autobyte.bench.allreduce_ranks`, with the
parameter server's baseline:

- ``method``: ``"dist_sync"`` (plain MXNet ``dist_sync``: ``Trainer.step``
  pushes every gradient and pulls every weight, the servers run the
  optimizer; the unscheduled baseline), ``"static"`` (``config``),
  ``"tuner"`` (``tuner``, start ``config``, ``window_iters``, ``guarded``),
  ``"phases"`` or ``"sweep"``; the scheduled methods run
  :class:`autobyte.integrations.mxnet.KVStoreEngine` (the tuner through
  :class:`~autobyte.integrations.mxnet.AutoByteHandler`'s window protocol).
- ``model``: ``"cnn"`` (a Gluon CNN with the layers of
  :func:`autobyte.bench.models.make_cnn`, sized by ``width``/``hidden``) or
  ``"emu:NAME"`` with ``compute_scale`` (emulated compute,
  :class:`autobyte.bench.emulation.Emulation`: one parameter per profile
  layer of its real size; each layer's forward and backward is an MXNet
  custom operator that sleeps the layer's scaled time, so gradients become
  ready in backward order, asynchronously, through MXNet's own dependency
  engine, which is where both the plain KVStore and the scheduled engine
  learn that a gradient is ready).
- ``iters``, ``batch_size``, ``seed``, ``slowdown`` as in ``allreduce_ranks``
  (with ``emu:NAME``, ``batch_size`` is the profile's batch, ``None`` for
  the zoo's, and the samples counted are the emulation's batch; a slowed
  emulated worker's layers sleep ``factor`` times longer, in forward and in
  the asynchronous backward alike. With the real CNN the slowdown is a host
  sleep before the iteration, which MXNet's asynchronous backward of the
  previous iteration partly overlaps: it slows the worker by less than
  ``factor``, so suite scenarios refuse it on the parameter server).
- ``overlap`` (default true): the scheduled engine's ``step`` returns before
  its messages are done, each layer's next forward waiting for its own
  update (false: ``step`` waits for every message, the engine before issue 9).

Rank 0 writes ``iterations.jsonl``, ``decisions.jsonl`` and, for sweeps,
``sweep.jsonl``, and keeps its ``autobyte`` log, the tuner's reasons, in
``tuner.log``; every worker writes ``rank<R>.json``. Iteration ``k`` starts
with :func:`autobyte.testbed.notify_iteration`.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

#: The methods this runner knows (``dist_sync`` is the unscheduled baseline).
METHODS = ("dist_sync", "static", "tuner", "phases", "sweep")


def main(argv: list[str] | None = None) -> None:
    args = argv or sys.argv[1:]
    spec: dict[str, Any] = json.loads(args[0])
    out_dir = args[1]
    if spec.get("method") not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, but got method={spec.get('method')!r}.")
    from ..integrations._mxnet_imports import import_mxnet

    mx = import_mxnet()  # a scheduler or server process serves here and exits
    from mxnet import autograd, gluon

    from ..testbed import notify_iteration
    from ._rank_plan import decision_row, iteration_plan, keep_log, write_rank_outputs

    kv = mx.kv.create("dist_sync")
    rank, world = int(kv.rank), int(kv.num_workers)
    keep_log(out_dir, rank)
    model_name = str(spec.get("model", "cnn"))
    bs = batch_size(spec)
    net, batches, loss_fn = _model(mx, gluon, spec, model_name, bs, rank)
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.01, "momentum": 0.9}, kvstore=kv)
    slow = {(int(a), int(b)): float(f) for a, b, r, f in spec.get("slowdown", []) if int(r) == rank}
    emulated = hasattr(net, "time_factor")
    compute_s = 0.0 if emulated else float(spec.get("compute_s") or 0.0) or (_compute_time(net, batches, loss_fn, autograd) if slow else 0.0)
    method = spec["method"]
    decisions: list[dict[str, Any]] = []
    engine: Any = None
    handler: Any = None
    tuner: Any = None

    def log_decision(out: Any) -> None:  # a WindowOutcome of core's window protocol
        decisions.append(decision_row(out))

    if method != "dist_sync":
        start = spec.get("config") or (spec["phases"][0][1] if method == "phases" else spec["configs"][0])
        if method == "tuner":
            from ..core.tuners import import_tuners, make_tuner
            from ..integrations.mxnet import AutoByteHandler

            import_tuners(spec.get("imports", []))
            tuner = make_tuner(spec["tuner"])
            if spec.get("guarded") is False:  # an offline search (BO before training): no do-no-harm guard
                tuner.guarded = False

            class _Logged(AutoByteHandler):  # type: ignore[misc,valid-type]
                def _follow(self, eng: Any, out: Any) -> None:
                    log_decision(out)
                    super()._follow(eng, out)

            handler = _Logged(tuner, partition_bytes=int(start[0]), credit_bytes=int(start[1]),
                              window_iters=int(spec.get("window_iters", 10)), warmup_iters=int(spec.get("warmup_iters", 2)),
                              timeout_s=float(spec.get("timeout_s", 600)), verbose=False)
        else:
            from ..integrations.mxnet import schedule

            engine = schedule(trainer, partition_bytes=int(start[0]), credit_bytes=int(start[1]),
                              timeout_s=float(spec.get("timeout_s", 600)), overlap=bool(spec.get("overlap", True)))

    class _Est:  # what the handler reads of an Estimator
        logger = None

    est = _Est()
    est.trainer = trainer  # type: ignore[attr-defined]

    n_iters, switch, sweep = iteration_plan(spec)

    rows: list[dict[str, Any]] = []
    cpu0, wall0 = time.process_time(), time.perf_counter()
    prev_start: float | None = None
    prev_cfg: Any = None
    for it in range(n_iters):
        if it in switch and engine is not None and it > 0:
            cfg = switch[it]
            engine.reconfigure(cfg.partition_bytes, cfg.credit_bytes)
        t_before = time.perf_counter()
        if rank == 0:
            notify_iteration(it)
        if prev_start is not None:
            rows.append({"iteration": it - 1, "seconds": t_before - prev_start, "config": prev_cfg})
        start_t = time.perf_counter()
        x, y = batches[it % len(batches)]
        factor = next((f for (a, b), f in slow.items() if a <= it < b), 1.0)
        if emulated:  # every layer's forward and backward sleep factor times longer
            net.time_factor = factor
        elif factor > 1.0:
            time.sleep((factor - 1.0) * compute_s)
        if engine is not None:
            engine.begin_iteration()
        elif handler is not None:
            handler.batch_begin(est)
        with autograd.record():
            loss = loss_fn(net(x), y)
        loss.backward()  # asynchronous: gradients become ready while the step below waits on them
        if engine is not None:
            engine.step(bs)
        elif handler is not None:
            handler.batch_end(est, loss=[loss])
        else:
            trainer.step(bs)
        # MXNet runs everything asynchronously: wait for this iteration's loss (as a training loop's metric does), so an
        # iteration's time is real; plain dist_sync's pulls still overlap the next forward.
        loss.wait_to_read()
        prev_start = start_t
        eng = engine if engine is not None else (handler.engine if handler is not None else None)
        prev_cfg = None if eng is None else [eng.config.partition_bytes, eng.config.credit_bytes]
    if engine is not None:  # the last iteration's messages (the engine overlaps them with the next forward)
        engine.synchronize()
    elif handler is not None:
        handler.train_end(est)
    for p in net.collect_params().values():  # the last update is done (plain dist_sync: the last pull)
        p.data().wait_to_read()
    kv._barrier()
    if prev_start is not None:
        rows.append({"iteration": n_iters - 1, "seconds": time.perf_counter() - prev_start, "config": prev_cfg})
    meta = {"rank": rank, "compute_s": compute_s, "cpu_s": time.process_time() - cpu0,
            "wall_s": time.perf_counter() - wall0, "tuner_cpu_s": getattr(tuner, "cpu_s", None),
            "adapt_cpu_s": getattr(getattr(tuner, "adapter", None), "cpu_s", None),
            "method": method, "model": model_name, "batch_size": bs}
    write_rank_outputs(out_dir, rank, world, bs, spec, meta, rows, decisions, sweep)


def batch_size(spec: dict[str, Any]) -> int:
    """Samples per worker and iteration: an emulation's (its profile at ``batch_size``, as ``allreduce_ranks``), else ``batch_size``."""
    from .emulation import DEFAULT_SCALE, Emulation, is_emulated

    name = str(spec.get("model", "cnn"))
    if is_emulated(name):
        return int(Emulation(name, float(spec.get("compute_scale", DEFAULT_SCALE)), spec.get("batch_size")).profile().batch_size)
    return int(spec.get("batch_size", 16))


def _model(mx: Any, gluon: Any, spec: dict[str, Any], name: str, bs: int, rank: int) -> tuple[Any, list[Any], Any]:
    """The network (initialised), a few batches for this rank, the loss."""
    from .emulation import DEFAULT_SCALE, Emulation, is_emulated

    seed = int(spec.get("seed", 0))
    rs = __import__("numpy").random.RandomState(seed * 1000 + rank)
    if is_emulated(name):
        # the profile at the spec's batch (the zoo's when absent): compute and the samples counted agree
        emu = Emulation(name, float(spec.get("compute_scale", DEFAULT_SCALE)), spec.get("batch_size"))
        net = _EmulatedNet(mx, gluon, emu)
        net.initialize(mx.init.Zero())
        x = mx.nd.array(rs.randn(bs, 1).astype("float32"))
        # one loss per sample, as a Gluon loss gives: AutoByteHandler counts the samples from its shape
        return net, [(x, None)], lambda out, y: out.reshape((out.shape[0], -1)).sum(axis=1)
    if name != "cnn":
        raise ValueError(f"model must be 'cnn' or 'emu:NAME' on the parameter server, but got model={name!r}.")
    net = make_gluon_cnn(gluon, width=int(spec.get("width", 32)), hidden=int(spec.get("hidden", 1536)))
    net.initialize(mx.init.Xavier())
    batches = [(mx.nd.array(rs.randn(bs, 3, 32, 32).astype("float32")), mx.nd.array(rs.randint(0, 10, bs).astype("float32")))
               for _ in range(8)]
    # (deferred shapes are known after the first forward, before the first step)
    return net, batches, gluon.loss.SoftmaxCrossEntropyLoss()


def make_gluon_cnn(gluon: Any, width: int = 32, hidden: int = 1536, n_classes: int = 10) -> Any:
    """The Gluon twin of :func:`autobyte.bench.models.make_cnn`: four conv + batch-norm blocks, two dense layers."""
    nn = gluon.nn
    w = width
    net = nn.HybridSequential()
    for cout, pool in ((w, True), (2 * w, True), (4 * w, False), (4 * w, True)):
        net.add(nn.Conv2D(cout, 3, padding=1), nn.BatchNorm(), nn.Activation("relu"))
        if pool:
            net.add(nn.MaxPool2D(2))
    net.add(nn.Flatten(), nn.Dense(hidden, activation="relu"), nn.Dense(n_classes))
    return net


_REGISTERED = False


def _register_emulated_layer(mx: Any) -> None:
    """The ``autobyte_emulated_layer`` custom operator: sleeps a layer's forward / backward time, passes the activation on.

    Its backward writes the weight's gradient (every element: a real
    gradient of the real size) after the sleep, so the gradient array is
    ready exactly when the layer's emulated backward ends.
    """
    global _REGISTERED
    if _REGISTERED:
        return

    class _Layer(mx.operator.CustomOp):  # type: ignore[misc,name-defined]
        def __init__(self, forward_s: float, backward_s: float) -> None:
            super().__init__()
            self.forward_s, self.backward_s = forward_s, backward_s

        def forward(self, is_train: bool, req: Any, in_data: Any, out_data: Any, aux: Any) -> None:
            time.sleep(self.forward_s)
            self.assign(out_data[0], req[0], in_data[0] + in_data[1][0])

        def backward(self, req: Any, out_grad: Any, in_data: Any, out_data: Any, in_grad: Any, aux: Any) -> None:
            time.sleep(self.backward_s)
            self.assign(in_grad[0], req[0], out_grad[0])
            if req[1] != "null":
                in_grad[1][:] = 1e-4  # noqa: the gradient's value is immaterial, its size and timing are the point

    class _LayerProp(mx.operator.CustomOpProp):  # type: ignore[misc,name-defined]
        def __init__(self, forward_s: str = "0", backward_s: str = "0") -> None:
            super().__init__(need_top_grad=True)
            self.forward_s, self.backward_s = float(forward_s), float(backward_s)

        def list_arguments(self) -> list[str]:
            return ["data", "weight"]

        def list_outputs(self) -> list[str]:
            return ["output"]

        def infer_shape(self, in_shape: Any) -> Any:
            return in_shape, [in_shape[0]], []

        def create_operator(self, ctx: Any, shapes: Any, dtypes: Any) -> Any:
            return _Layer(self.forward_s, self.backward_s)

    mx.operator.register("autobyte_emulated_layer")(_LayerProp)
    _REGISTERED = True


def _EmulatedNet(mx: Any, gluon: Any, emu: Any) -> Any:
    """A Gluon block with one flat parameter per profile layer; each layer an emulated custom operator."""
    _register_emulated_layer(mx)
    sizes = emu.layer_elements
    fwd, bwd = [float(t) for t in emu.forward_s], [float(t) for t in emu.backward_s]

    class EmulatedNet(gluon.Block):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.ws = [self.params.get(f"layer{i}", shape=(n,)) for i, n in enumerate(sizes)]
            #: the worker's compute slow-down (another job on its accelerator): every sleep is this many times longer
            self.time_factor = 1.0

        def forward(self, x: Any) -> Any:
            h = x
            f = self.time_factor
            for i, w in enumerate(self.ws):
                h = mx.nd.Custom(h, w.data(), op_type="autobyte_emulated_layer", forward_s=fwd[i] * f, backward_s=bwd[i] * f)
            return h

    return EmulatedNet()


def _compute_time(net: Any, batches: list[Any], loss_fn: Any, autograd: Any, n: int = 5) -> float:
    """Median seconds of one local forward + backward (no communication: before the first step)."""
    times = []
    for i in range(n + 1):
        x, y = batches[i % len(batches)]
        t0 = time.perf_counter()
        with autograd.record():
            loss = loss_fn(net(x), y)
        loss.backward()
        for p in net.collect_params().values():
            p.grad().wait_to_read()
        times.append(time.perf_counter() - t0)
    return sorted(times[1:])[n // 2]


if __name__ == "__main__":
    main()
