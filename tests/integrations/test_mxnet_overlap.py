"""The KVStore engine's overlap with the next forward (issue 9): engine operations, one round's logic, real jobs.

The real jobs run this file as the worker of a loopback ``dist_sync`` job
(scheduler, server, 2 workers as processes): ``python test_mxnet_overlap.py
worker OUT SPEC_JSON``.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

pytestmark = pytest.mark.integration

mx = pytest.importorskip("mxnet")

ROOT = Path(__file__).resolve().parents[2]
ENV = {"PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}


# --------------------------------------------------------------------------- engine operations (one process)


def _ops() -> Any:
    from autobyte.integrations._mxnet_overlap import _EngineOps

    return _EngineOps(mx)


def test_a_held_operation_delays_only_what_uses_its_array() -> None:
    ops = _ops()
    a, b = mx.nd.ones((4,)), mx.nd.ones((4,))
    mx.nd.waitall()
    held: list[Any] = []
    ops.push(held.append, mutable=[a])
    after_a = a + 1
    after_b = b + 1
    after_b.wait_to_read()  # an unrelated array is not held
    deadline = time.monotonic() + 5
    while not held and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(held) == 1
    time.sleep(0.2)
    assert not ops.errors
    threading.Timer(0.3, held[0]).start()
    t0 = time.perf_counter()
    np.testing.assert_array_equal(after_a.asnumpy(), 2 * np.ones(4))
    assert time.perf_counter() - t0 > 0.2  # waited for the completion
    held[0]()  # a second call does nothing


def test_an_avatar_shares_memory_but_not_the_engine_variable() -> None:
    ops = _ops()
    g = mx.nd.arange(12)
    mx.nd.waitall()
    chunk = ops.avatar(g[4:8])
    np.testing.assert_array_equal(chunk.asnumpy(), [4, 5, 6, 7])
    held: list[Any] = []
    ops.push(held.append, mutable=[chunk])
    (g * 1).wait_to_read()  # not held: the avatar has its own variable
    deadline = time.monotonic() + 5
    while not held and time.monotonic() < deadline:
        time.sleep(0.01)
    held[0]()
    chunk[:] = -1
    mx.nd.waitall()
    np.testing.assert_array_equal(g.asnumpy()[3:9], [3, -1, -1, -1, -1, 8])


def test_a_failing_job_completes_its_operation_and_is_reported() -> None:
    ops = _ops()
    a = mx.nd.ones((2,))

    def boom(done: Any) -> None:
        raise ValueError("boom")

    ops.push(boom, mutable=[a])
    (a + 1).wait_to_read()  # not left pending
    assert isinstance(ops.errors[0], ValueError)


def test_ready_times_follow_the_order_the_arrays_are_written() -> None:
    from autobyte.integrations._mxnet_overlap import measure_ready_times

    ops = _ops()
    arrays = [mx.nd.zeros((3,)) for _ in range(4)]
    mx.nd.waitall()
    # each write's completion kept under its array's index: the engine may start the four
    # independent writes in any order (appending them made held[k] some other array's, now and then)
    held: list[Any] = [None] * 4
    for k, a in enumerate(arrays):
        ops.push(functools.partial(held.__setitem__, k), mutable=[a])
    deadline = time.monotonic() + 5
    while any(h is None for h in held) and time.monotonic() < deadline:
        time.sleep(0.01)

    def release() -> None:  # written in the order 2, 0, 3, 1
        for k in (2, 0, 3, 1):
            time.sleep(0.05)
            held[k]()

    threading.Thread(target=release).start()
    times = measure_ready_times(ops, [[a] for a in arrays])
    assert sorted(range(4), key=times.__getitem__) == [2, 0, 3, 1]


# --------------------------------------------------------------------------- one round, events fed by hand


class _Done:
    """Stands for a held engine operation."""

    def __init__(self, log: list[str], name: str) -> None:
        self.log, self.name = log, name

    def __call__(self) -> None:
        self.log.append(self.name)


def _round(sizes: list[int], credit: int, order: list[int] | None, tensors: list[list[int]]) -> Any:
    from autobyte.core.scheduler import CreditQueue, Message, Segment
    from autobyte.integrations._mxnet_overlap import _Bindings, _Land, _Round

    messages = [Message(i, tuple(Segment(t, 0, n // 4) for t in ts), n, 0, 0, "float32")
                for i, (n, ts) in enumerate(zip(sizes, tensors))]
    by_tensor: dict[int, list[int]] = {}
    for m in messages:
        for t in tensors[m.index]:
            by_tensor.setdefault(t, []).append(m.index)
    lands = [_Land([], ms) for _, ms in sorted(by_tensor.items())]
    land_of = [[k for k, land in enumerate(lands) if i in land.messages] for i in range(len(messages))]
    b = _Bindings((), [[] for _ in by_tensor], [], [], lands, land_of)
    return _Round(0, messages, list(range(100, 100 + len(messages))), b, CreditQueue(messages, credit, order),
                  threading.Condition(), 0.0, 8)


def test_gates_open_under_the_credit_in_the_agreed_order_and_lands_wait_for_their_messages() -> None:
    log: list[str] = []
    # messages 0, 1 of tensor 0 (split), message 2 of tensor 1; credit: one message; order 1, 0, 2
    r = _round([400, 400, 400], 400, [1, 0, 2], [[0], [0], [1]])
    for t in (0, 1):
        r.on_ready(t, _Done(log, f"ready{t}"))
    r.on_gate(0, _Done(log, "gate0"))
    assert log == ["ready0", "ready1"]  # message 0 is ready but 1 goes first
    r.on_gate(1, _Done(log, "gate1"))
    assert log[-1] == "gate1"
    r.on_land(0, _Done(log, "land0"))  # tensor 0 lands after both its messages
    r.on_gate(2, _Done(log, "gate2"))
    assert log[-1] == "gate1"  # the credit is full
    r.on_done(1, _Done(log, "done1"))
    assert log[-2:] == ["gate0", "done1"] and "land0" not in log
    r.on_done(0, _Done(log, "done0"))
    assert log[-3:] == ["land0", "gate2", "done0"]
    r.on_land(1, _Done(log, "land1"))
    assert log[-1] != "land1" and not r.finished
    r.on_done(2, _Done(log, "done2"))
    assert log[-2:] == ["land1", "done2"] and r.finished
    assert [rec[0] for rec in r.records] == [101, 100, 102]


def test_a_stalled_round_is_found_by_its_times_and_abandoned() -> None:
    log: list[str] = []
    r = _round([400, 400], 400, [0, 1], [[0], [1]])
    r.t_progress = 10.0
    assert r.stalled(100.0, 5.0) is None  # nothing in flight: local compute has no timeout
    r.on_gate(0, _Done(log, "gate0"))
    r.on_gate(1, _Done(log, "gate1"))
    r.on_land(0, _Done(log, "land0"))
    r.t_progress = 10.0
    assert r.stalled(14.0, 5.0) is None
    assert r.stalled(15.5, 5.0) == 0
    with r.cv:  # (the watchdog and the training thread call it under the round's lock)
        go = r.abandon()
    for g in go:
        g()
    assert set(log) == {"gate0", "gate1", "land0"}  # everything held is released
    r.on_land(1, _Done(log, "land1"))  # and what comes later is not held
    assert log[-1] == "land1"


# --------------------------------------------------------------------------- real jobs

N_LAYERS = 12  # Gluon names dense0 ... dense11: a Trainer sorts them dense0, dense1, dense10, dense11, dense2, ...
STEPS = 8


def _worker(out: str, spec: dict[str, Any]) -> None:  # noqa: C901 - one script, read top to bottom
    from mxnet import autograd, gluon

    from autobyte.integrations.mxnet import PeerLostError, schedule

    kv = mx.kv.create("dist_sync")
    rank = kv.rank
    mx.random.seed(7)
    emulated = spec.get("emulated")
    if emulated:  # layers that sleep: the first backward's order is measurable
        from autobyte.bench.ps_ranks import _EmulatedNet

        emu = SimpleNamespace(layer_elements=[300] * N_LAYERS, forward_s=[0.001] * N_LAYERS, backward_s=[0.03] * N_LAYERS)
        net = _EmulatedNet(mx, gluon, emu)
        net.initialize(mx.init.Zero())
        batches = [(mx.nd.ones((2, 1)), None)]

        def loss_of(x: Any, y: Any) -> Any:
            return net(x).sum()
    else:
        net = gluon.nn.HybridSequential()
        for _ in range(N_LAYERS - 1):
            net.add(gluon.nn.Dense(24, activation="tanh"))
        net.add(gluon.nn.Dense(4))
        net.initialize(mx.init.Xavier())
        rs = np.random.RandomState(100 + rank)
        batches = [(mx.nd.array(rs.randn(8, 10)), mx.nd.array(rs.randint(0, 4, 8))) for _ in range(STEPS)]
        ce = gluon.loss.SoftmaxCrossEntropyLoss()

        def loss_of(x: Any, y: Any) -> Any:
            return ce(net(x), y)
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.05, "momentum": 0.9}, kvstore=kv)
    engine = None
    if spec["method"] != "plain":
        engine = schedule(trainer, partition_bytes=spec["partition"], credit_bytes=spec["credit"],
                          overlap=spec.get("overlap", True), timeout_s=spec.get("timeout_s", 60))
    info: dict[str, Any] = {"rank": rank, "losses": []}
    late_at, die_at = spec.get("late_at"), spec.get("die_at")
    try:
        for it in range(spec.get("steps", STEPS)):
            x, y = batches[it % len(batches)]
            with autograd.record():
                loss = loss_of(x, y)
            loss.backward()
            if rank == 1 and it == die_at:
                assert engine is not None
                engine.synchronize()  # (its last round's messages are sent: a step returns before they are)
                os._exit(17)  # gone without a word, like a crash
            if rank == 1 and it == late_at:
                time.sleep(spec["late_s"])
            t0 = time.perf_counter()
            if it == die_at:
                info["t_lost"] = t0
            if engine is None:
                trainer.step(x.shape[0])
            else:
                engine.step(x.shape[0])
            if it == late_at and rank == 0:
                assert engine is not None and engine._round is not None
                info["step_s"] = time.perf_counter() - t0
                info["in_flight_after_step"] = not engine._round.finished
            if it == die_at:
                x, y = batches[(it + 1) % len(batches)]
                loss = loss_of(x, y)  # needs this step's updates: the watchdog must not let it hang
                loss.wait_to_read()
                info["forward_waited_s"] = time.perf_counter() - info["t_lost"]
            # read after the step: the next forward already waits for this step's updates
            info["losses"].append(float(loss.mean().asscalar()))
        if engine is not None:
            engine.synchronize()
    except PeerLostError as exc:
        info.update(error=type(exc).__name__, message=str(exc), waited=time.perf_counter() - info["t_lost"])
        with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
            json.dump(info, f)
        os._exit(3)  # the servers still wait for the lost worker: leave without a goodbye
    info["params"] = [p.data().asnumpy().ravel().tolist() for p in trainer._params]
    if engine is not None:
        info["priorities"] = {p.name: t.priority for p, t in zip(engine._params, engine.tensors)}
        info["n_messages"] = len(engine.last_messages)
        info["iterations"] = engine.iteration
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(info, f)


def _job(tmp_path: Path, name: str, spec: dict[str, Any], *, stop_on_failure: bool = True) -> list[dict[str, Any]]:
    from autobyte.integrations.mxnet import launch_local_ps

    out = tmp_path / name
    out.mkdir()
    results = launch_local_ps([sys.executable, __file__, "worker", str(out), json.dumps(spec)], n_workers=2,
                              timeout_s=150, env=ENV, stop_on_failure=stop_on_failure)
    infos = []
    for r in (0, 1):
        f = out / f"rank{r}.json"
        infos.append(json.loads(f.read_text()) if f.exists() else {"output": [x.output[-3000:] for x in results]})
    return infos


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """Plain dist_sync (Trainer.step, the servers run the optimizer): the reference."""
    infos = _job(tmp_path_factory.mktemp("ref"), "plain", {"method": "plain"})
    assert all("losses" in i for i in infos), infos
    return infos


def _same_as_plain(plain: list[dict[str, Any]], got: list[dict[str, Any]]) -> None:
    for ref, g in zip(plain, got):
        assert "losses" in g, g
        np.testing.assert_allclose(g["losses"], ref["losses"], rtol=1e-5, atol=1e-6)
        for a, b in zip(g["params"], ref["params"]):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)




@pytest.mark.timeout(300)
@pytest.mark.parametrize(("partition", "credit", "overlap"), [(1024, 1024, True), (1 << 20, 1 << 20, True),
                                                               (1024, 1024, False)])
def test_every_forward_sees_the_updated_weights(tmp_path: Path, plain: list[dict[str, Any]], partition: int,
                                                credit: int, overlap: bool) -> None:
    # Each loss is computed by the forward right after the previous step: equal losses mean that forward read
    # every weight after its update (split chunks with a 1X credit, fused buffers, and the synchronous path).
    got = _job(tmp_path, "engine", {"method": "engine", "partition": partition, "credit": credit, "overlap": overlap})
    _same_as_plain(plain, got)
    assert all(g["iterations"] == STEPS and g["n_messages"] > 0 for g in got)


@pytest.mark.timeout(300)
def test_step_returns_while_its_messages_wait_for_a_late_peer(tmp_path: Path, plain: list[dict[str, Any]]) -> None:
    got = _job(tmp_path, "late", {"method": "engine", "partition": 1024, "credit": 2048, "late_at": 3, "late_s": 2.0})
    assert got[0]["in_flight_after_step"], got[0]  # a dist_sync key completes only once worker 1 pushed it
    assert got[0]["step_s"] < 1.0, got[0]  # worker 1 pushes 2 s late
    _same_as_plain(plain, got)  # and the next forward still waited for the updates


@pytest.mark.timeout(300)
def test_a_lost_peer_releases_a_waiting_forward_and_the_next_step_raises(tmp_path: Path) -> None:
    timeout_s = 4.0
    got = _job(tmp_path, "lost", {"method": "engine", "partition": 1024, "credit": 2048, "die_at": 4,
                                  "timeout_s": timeout_s}, stop_on_failure=False)
    survivor = got[0]
    assert survivor.get("error") == "PeerLostError", survivor
    assert f"timeout_s={timeout_s:g}" in survivor["message"] and "of iteration 4" in survivor["message"]
    # the forward that needed the lost round did not hang; the error came within the timeout and a margin
    assert timeout_s - 0.5 < survivor["forward_waited_s"] < timeout_s + 5, survivor
    assert survivor["waited"] < timeout_s + 5, survivor


@pytest.mark.timeout(300)
def test_priorities_follow_the_layers_not_the_parameter_names(tmp_path: Path) -> None:
    got = _job(tmp_path, "order", {"method": "engine", "partition": 1 << 20, "credit": 1 << 20, "emulated": True,
                                   "steps": 2})
    for g in got:
        assert "priorities" in g, g
        by_layer = sorted(g["priorities"], key=lambda n: int(n.rsplit("layer", 1)[1]))
        assert [g["priorities"][n] for n in by_layer] == list(range(N_LAYERS)), g["priorities"]
    assert got[0]["priorities"] == got[1]["priorities"]


if __name__ == "__main__" and len(sys.argv) > 3 and sys.argv[1] == "worker":
    _worker(sys.argv[2], json.loads(sys.argv[3]))
