"""The meta-network head's online adaptation: a fit in a worker process, a thread, or inline."""

from __future__ import annotations

import logging
import math
import os
import queue
import subprocess
import sys
import threading
import time
from collections import deque
from typing import Any

import numpy as np

from . import _adapt_worker
from ._adapt_worker import fit_head
from ._network import MetaNetwork, _Head

_log = logging.getLogger("autobyte.meta")


class Adapter:
    """Fine-tunes the meta-network's head on one job's observations, encoder frozen.

    An adaptation started with ``background=True`` (:meth:`start`) never
    makes the training step wait: by default the fit runs in a separate
    process (``process=True``; :mod:`autobyte.meta._adapt_worker`, started at
    the first adaptation, numpy only, at a lower CPU priority), so its tight
    loop never holds the training interpreter's lock; ``process=False`` runs
    it in a thread of this process. Either way the new head replaces the old
    one with one reference swap. If the worker cannot start or dies, the
    adapter warns once and goes on in a thread. With ``background=False`` the
    fit runs inline (deterministic, for simulation).

    Args:
        net: the meta-network (its head is updated in place).
        time_budget_s: wall-clock bound of one adaptation (1.0).
        learning_rate: Adam step size (3e-3).
        max_epochs: full-batch steps over the replay buffer (300), cut by the time budget.
        anchor: L2 pull towards the offline head weights (L2-SP), against forgetting (1e-2).
        n_layers: dense layers of the head fine-tuned, counted from the output (1..3).
            Few, small steps on the head only keep the offline knowledge.
        process: background adaptations run in a worker process (True) or a thread (False).

    Raises:
        ValueError: an argument out of range.
    """

    def __init__(
        self, net: MetaNetwork, *, time_budget_s: float = 1.0, learning_rate: float = 3e-3, max_epochs: int = 300,
        anchor: float = 1e-2, n_layers: int = 3, process: bool = True,
    ) -> None:
        for name, v in (("time_budget_s", time_budget_s), ("learning_rate", learning_rate)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                raise ValueError(f"{name} must be a positive finite number, but got {name}={v!r}.")
        if isinstance(max_epochs, bool) or not isinstance(max_epochs, int) or max_epochs < 1:
            raise ValueError(f"max_epochs must be a positive integer, but got max_epochs={max_epochs!r}.")
        self.net = net
        self.time_budget_s = float(time_budget_s)
        self.learning_rate = float(learning_rate)
        self.max_epochs = max_epochs
        if isinstance(anchor, bool) or not isinstance(anchor, (int, float)) or not math.isfinite(anchor) or anchor < 0:
            raise ValueError(f"anchor must be a non-negative finite number, but got anchor={anchor!r}.")
        self.anchor = float(anchor)
        if n_layers not in (1, 2, 3):
            raise ValueError(f"n_layers must be 1, 2 or 3 (dense layers of the head fine-tuned, from the top), but got n_layers={n_layers!r}.")
        self.n_layers = n_layers
        if not isinstance(process, bool):
            raise ValueError(f"process must be True (adapt in a worker process) or False (in a thread), but got process={process!r}.")
        self.process = process
        self._offline = [p.copy() for kb in net._np_head.d for p in kb]
        self._thread: threading.Thread | None = None
        self._worker: _Worker | None = None
        self._lock = threading.Lock()
        self._answered = threading.Event()
        self._answered.set()
        self._generation = 0  # a cancelled request's answer (older generation) is dropped
        self.n_runs = 0
        self.last_duration_s = 0.0
        self.total_s = 0.0
        #: CPU seconds the fits took, wherever they ran (the worker reports its own)
        self.cpu_s = 0.0
        self.last_steps = 0
        self.last_loss: tuple[float, float] | None = None
        #: the worker process's pid once it answered (``None``: no answer from a worker yet)
        self.worker_pid: int | None = None

    @property
    def running(self) -> bool:
        return (self._thread is not None and self._thread.is_alive()) or not self._answered.is_set()

    def _options(self) -> dict[str, Any]:
        return {"learning_rate": self.learning_rate, "max_epochs": self.max_epochs, "anchor": self.anchor,
                "n_layers": self.n_layers, "time_budget_s": self.time_budget_s}

    def start(self, emb: np.ndarray, cand: np.ndarray, y: np.ndarray, *, background: bool = True) -> bool:
        """Start one adaptation on rows ``(emb, cand) -> y``; ``False`` if one is still running."""
        if self.running:
            return False
        args = (emb.astype(np.float32), cand.astype(np.float32), y.astype(np.float32))
        if background and self.process and self._send(*args):
            return True
        if background:
            self._thread = threading.Thread(target=self._run, args=args, name="autobyte-adapt", daemon=True)
            self._thread.start()
        else:
            self._run(*args)
        return True

    def join(self, timeout: float | None = None) -> None:
        """Wait for the adaptation in progress (thread or worker) to end, at most ``timeout`` seconds."""
        if self._thread is not None:
            self._thread.join(timeout)
        self._answered.wait(timeout)

    def cancel(self) -> None:
        """Drop the result of the adaptation in progress (restoring a saved head: in-flight work is not kept)."""
        with self._lock:
            self._generation += 1
            self._answered.set()

    def close(self) -> None:
        """Stop the worker process, if one runs (it also stops by itself when this process exits)."""
        worker, self._worker = self._worker, None
        if worker is not None:
            worker.close()
        self.cancel()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    # -------------------------------------------------------------- the worker
    def _send(self, emb: np.ndarray, cand: np.ndarray, y: np.ndarray) -> bool:
        """Hand the fit to the worker process; ``False`` (thread from now on) when it cannot start or is gone."""
        head = self.net._np_head
        request = {"params": [p for kb in head.d for p in kb], "offline": self._offline, "cn": head.cn,
                   "emb": emb, "cand": cand, "y": y, "options": self._options()}
        with self._lock:
            try:
                if self._worker is None:
                    self._worker = _Worker(self._answer)
                self._answered.clear()
                self._worker.send(request, (self._generation, head.cn))
                return True
            except (OSError, ValueError) as exc:
                self._answered.set()
                self._fall_back(f"cannot reach the adaptation worker ({exc})")
                return False

    def _answer(self, worker: _Worker, answer: dict[str, Any] | None, tag: Any) -> None:
        """Called by ``worker``'s reader thread with each answer (``None``: the worker is gone)."""
        with self._lock:
            if answer is None:
                if self._worker is worker:  # not one closed on purpose
                    self._fall_back("the adaptation worker exited")
                self._answered.set()
                return
            generation, cn = tag if tag is not None else (-1, None)
            self.n_runs += 1
            self.last_duration_s = float(answer["wall_s"])
            self.total_s += self.last_duration_s
            self.cpu_s += float(answer["cpu_s"])
            self.worker_pid = int(answer["pid"])
            if "error" in answer:
                _log.warning("autobyte: online adaptation failed (%s); keeping the previous predictor.", answer["error"])
            elif generation == self._generation and cn is not None:
                p = answer["params"]
                self.net._np_head = _Head(cn, [(p[0], p[1]), (p[2], p[3]), (p[4], p[5])])  # one reference swap
                self.last_loss = tuple(answer["loss"])  # type: ignore[assignment]
                self.last_steps = int(answer["steps"])
            if generation == self._generation:  # a cancelled fit's answer does not end the one sent after it
                self._answered.set()

    def _fall_back(self, why: str) -> None:
        _log.warning("autobyte: %s; online adaptation goes on in a thread of this process.", why)
        self.process = False
        worker, self._worker = self._worker, None
        if worker is not None:
            worker.close()

    # ------------------------------------------------------------ in this process
    def _run(self, emb: np.ndarray, cand: np.ndarray, y: np.ndarray) -> None:
        t0, c0 = time.perf_counter(), time.thread_time()
        generation = self._generation
        head = self.net._np_head
        try:
            params, first, last, steps = fit_head(
                [p for kb in head.d for p in kb], self._offline, head.cn, emb, cand, y, t0=t0, **self._options())
            if generation == self._generation:
                self.net._np_head = _Head(head.cn, [(params[0], params[1]), (params[2], params[3]), (params[4], params[5])])
                self.last_loss = (first, last)
                self.last_steps = steps
        except Exception as exc:  # never let adaptation take training down
            _log.warning("autobyte: online adaptation failed (%s); keeping the previous predictor.", exc)
        finally:
            dt = time.perf_counter() - t0
            self.last_duration_s = dt
            self.total_s += dt
            self.cpu_s += time.thread_time() - c0
            self.n_runs += 1


class _Worker:
    """The adaptation worker process and the thread that reads its answers.

    ``on_answer(worker, answer, tag)`` is called from the reader thread for
    each answer with the tag its request was sent with, and once with
    ``answer=None`` when the worker's output ends (it exited or was closed).
    """

    def __init__(self, on_answer: Any) -> None:
        env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        self.proc = subprocess.Popen([sys.executable, "-u", _adapt_worker.__file__], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=env, close_fds=True)
        self._tags: deque[Any] = deque()
        self._on_answer = on_answer
        self._outbox: queue.SimpleQueue[dict[str, Any] | None] = queue.SimpleQueue()
        self._reader = threading.Thread(target=self._read, name="autobyte-adapt-reader", daemon=True)
        self._writer = threading.Thread(target=self._write, name="autobyte-adapt-writer", daemon=True)
        self._reader.start()
        self._writer.start()

    def send(self, request: dict[str, Any], tag: Any) -> None:
        """Queue one request; the writer thread sends it (a pipe write may wait for the worker to read)."""
        if self.proc.poll() is not None:
            raise OSError(f"the worker exited with code {self.proc.returncode}")
        self._tags.append(tag)
        self._outbox.put(request)

    def _write(self) -> None:
        assert self.proc.stdin is not None
        try:
            while (request := self._outbox.get()) is not None:
                _adapt_worker.write_message(self.proc.stdin, request)  # type: ignore[arg-type]
            self.proc.stdin.close()  # the worker ends at end of input
        except (OSError, ValueError) as exc:  # the worker is gone: the reader sees its output end
            _log.debug("autobyte: cannot write to the adaptation worker (%s)", exc)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        try:
            while True:
                answer = _adapt_worker.read_message(self.proc.stdout)  # type: ignore[arg-type]
                if answer is None:
                    break
                self._on_answer(self, answer, self._tags.popleft() if self._tags else None)
        except Exception as exc:  # a garbled stream: treat as the worker gone
            _log.debug("autobyte: adaptation worker output unreadable (%s)", exc)
        self._on_answer(self, None, None)

    def close(self) -> None:
        self._outbox.put(None)  # the writer closes the worker's input after what is queued
        try:
            self.proc.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            self.proc.kill()
