"""Online adaptation in a worker process: the same fit as inline, off the training interpreter, and never a failure of training."""

from __future__ import annotations

import copy
import io
import logging
import os

import numpy as np
import pytest

from autobyte.meta import Adapter, AutoByteTuner
from autobyte.meta import _adapt_worker

pytestmark = pytest.mark.integration


def _rows(net, n: int = 32, seed: int = 0):
    rng = np.random.default_rng(seed)
    return (rng.random((n, net.shape.lstm_units + net.shape.job_units)), rng.random((n, 12)), rng.random(n) - 0.5)


def _heads_equal(a, b) -> bool:
    return all(np.array_equal(k1, k2) and np.array_equal(b1, b2) for (k1, b1), (k2, b2) in zip(a.d, b.d))


def test_worker_fits_exactly_what_inline_fits_in_another_process(fresh_net):
    twin = copy.deepcopy(fresh_net)
    e, c, y = _rows(fresh_net)
    ad = Adapter(fresh_net, time_budget_s=60.0, max_epochs=40)
    inline = Adapter(twin, time_budget_s=60.0, max_epochs=40)
    before = fresh_net._np_head
    try:
        assert ad.start(e, c, y, background=True)
        ad.join(30.0)
        assert not ad.running and ad.n_runs == 1
        assert ad.worker_pid is not None and ad.worker_pid != os.getpid()
        assert ad.cpu_s > 0 and ad.last_steps == 40
        inline.start(e, c, y, background=False)
        assert fresh_net._np_head is not before
        assert _heads_equal(fresh_net._np_head, twin._np_head)  # the same arithmetic, bit for bit
        assert ad.last_loss == inline.last_loss
        # a second fit goes to the same worker, starting from the adapted head
        assert ad.start(e, c, y, background=True)
        pid = ad.worker_pid
        ad.join(30.0)
        inline.start(e, c, y, background=False)
        assert ad.worker_pid == pid and ad.n_runs == 2
        assert _heads_equal(fresh_net._np_head, twin._np_head)
    finally:
        ad.close()


def test_thread_mode_keeps_adapting_in_this_process(fresh_net):
    ad = Adapter(fresh_net, time_budget_s=60.0, max_epochs=20, process=False)
    before = fresh_net._np_head
    assert ad.start(*_rows(fresh_net), background=True)
    ad.join(30.0)
    assert ad.n_runs == 1 and ad.worker_pid is None and ad._worker is None
    assert fresh_net._np_head is not before and ad.cpu_s > 0


def test_a_dead_worker_falls_back_to_a_thread_with_a_warning(fresh_net, caplog):
    ad = Adapter(fresh_net, time_budget_s=60.0, max_epochs=5)
    rows = _rows(fresh_net)
    ad.start(*rows, background=True)
    ad.join(30.0)
    worker = ad._worker
    assert worker is not None
    with caplog.at_level(logging.WARNING, logger="autobyte.meta"):
        worker.proc.kill()
        worker.proc.wait(10.0)
        worker._reader.join(10.0)  # the reader saw the output end
        before = fresh_net._np_head
        assert ad.start(*rows, background=True)
        ad.join(30.0)
    assert "goes on in a thread" in caplog.text
    assert ad.process is False and ad._worker is None
    assert ad.n_runs == 2 and fresh_net._np_head is not before  # adapted all the same


def test_a_failed_fit_in_the_worker_is_logged_and_keeps_the_head(fresh_net, caplog):
    ad = Adapter(fresh_net, time_budget_s=60.0, max_epochs=5)
    before = fresh_net._np_head
    try:
        with caplog.at_level(logging.WARNING, logger="autobyte.meta"):
            assert ad.start(np.zeros((2, 3)), np.zeros((2, 12)), np.zeros(2), background=True)  # wrong width
            ad.join(30.0)
        assert "online adaptation failed" in caplog.text and "ValueError" in caplog.text
        assert ad.n_runs == 1 and fresh_net._np_head is before
        assert ad.process is True  # the worker is fine: only that fit failed
    finally:
        ad.close()


def test_a_cancelled_fit_is_dropped(fresh_net):
    ad = Adapter(fresh_net, time_budget_s=1.0, max_epochs=10**6)
    before = fresh_net._np_head
    assert ad.start(*_rows(fresh_net, n=256), background=True)
    ad.cancel()  # as load_state_dict does when it restores a head
    assert not ad.running
    # a fit sent after the cancel is still one at a time: the cancelled fit's answer does not end it
    assert ad.start(*_rows(fresh_net, n=8, seed=1), background=True)
    assert not ad.start(*_rows(fresh_net, n=8, seed=2), background=True)
    ad.join(30.0)
    assert ad.n_runs == 2 and not ad.running  # both answers came ...
    assert fresh_net._np_head is not before  # ... the second applied
    ad.close()


def test_close_ends_the_worker(fresh_net):
    ad = Adapter(fresh_net, time_budget_s=60.0, max_epochs=5)
    ad.start(*_rows(fresh_net), background=True)
    ad.join(30.0)
    proc = ad._worker.proc
    ad.close()
    assert proc.poll() == 0 and ad._worker is None


def test_serve_answers_each_request_and_stops_at_end_of_input(fresh_net):
    head = fresh_net._np_head
    e, c, y = _rows(fresh_net, n=8)
    params = [p for kb in head.d for p in kb]
    req = {"params": params, "offline": params, "cn": head.cn, "emb": e, "cand": c, "y": y,
           "options": {"learning_rate": 3e-3, "max_epochs": 3, "anchor": 0.0, "n_layers": 1, "time_budget_s": 60.0}}
    inp, out = io.BytesIO(), io.BytesIO()
    _adapt_worker.write_message(inp, req)
    _adapt_worker.write_message(inp, {**req, "emb": np.zeros((8, 2))})  # a bad request: an error answer, not a crash
    inp.seek(0)
    _adapt_worker.serve(inp, out)
    out.seek(0)
    good, bad = _adapt_worker.read_message(out), _adapt_worker.read_message(out)
    assert _adapt_worker.read_message(out) is None
    assert good["steps"] == 3 and good["pid"] == os.getpid() and good["cpu_s"] >= 0
    assert np.array_equal(good["params"][0], params[0])  # n_layers=1: the lower layers stay as they were
    assert not np.array_equal(good["params"][4], params[4])
    assert "error" in bad and "params" not in bad


def test_bad_process_argument(fresh_net):
    with pytest.raises(ValueError, match=r"process must be True .* but got process='yes'"):
        Adapter(fresh_net, process="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"adapt_process must be True .* but got adapt_process=1"):
        AutoByteTuner(fresh_net, adapt_process=1)  # type: ignore[arg-type]


def test_tuner_restore_drops_the_fit_in_flight(fresh_net):
    t = AutoByteTuner(fresh_net, adapt_time_s=1.0)
    state = t.state_dict()
    assert t.adapter.start(*_rows(fresh_net, n=256), background=True)
    t.load_state_dict(state)
    restored = fresh_net._np_head
    worker = t.adapter._worker
    t.adapter.close()
    worker._reader.join(30.0)
    assert t.adapter.n_runs == 1 and fresh_net._np_head is restored
