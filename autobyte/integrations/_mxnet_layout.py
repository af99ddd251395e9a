"""The engine side of a message plan for the MXNet engines, and waiting on other workers with a timeout.

:class:`_Layout` holds one plan's KVStore keys or collective names and its
fused buffers (a fused message gathers its small gradients into one buffer
and scatters the result back). :class:`_Timing` is rank 0's measured timing
of an overlapped round (when each gradient became ready, the bandwidth
achieved), from which the issue order every worker follows is computed.
:class:`_Waiter` waits on MXNet arrays from a thread, so that a wait for a
lost worker ends at a timeout.
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ..core.scheduler import Message, plan_order
from ._common import PeerLostError


@dataclass
class _Layout:
    """The engine side of one message plan: keys or names, fused buffers, readiness."""

    partition_bytes: int
    messages: list[Message]
    keys: list[int]
    fused: dict[int, list[Any]]  # message index -> one buffer per context
    completes: list[list[int]]  # tensor index -> messages that become ready with it
    mx_priority: list[int]
    names: list[str]  # collective names (all-reduce engines)
    order_key: int | None = None  # the KVStore key carrying rank 0's issue order (overlapped parameter server)

    def gather(self, index: int, flat: Sequence[Sequence[Any]]) -> list[Any]:
        """The buffers of message ``index`` (one per context), from the flattened gradients ``flat[tensor][ctx]``."""
        m = self.messages[index]
        if index not in self.fused:
            s = m.segments[0]
            return [g[s.start:s.stop] for g in flat[s.tensor]]
        bufs = self.fused[index]
        off = 0
        for s in m.segments:
            for buf, src in zip(bufs, flat[s.tensor]):
                buf[off:off + s.numel] = src[s.start:s.stop]
            off += s.numel
        return bufs

    def scatter(self, flat: Sequence[Sequence[Any]], indices: Sequence[int] | None = None) -> None:
        """Copy fused messages' synchronised buffers back into their gradients (``indices``; default every one)."""
        for i in self.fused if indices is None else indices:
            off = 0
            for s in self.messages[i].segments:
                for buf, dst in zip(self.fused[i], flat[s.tensor]):
                    dst[s.start:s.stop] = buf[off:off + s.numel]
                off += s.numel


class _Timing:
    """Measured ``(seconds from the first gradient to each tensor's, payload bytes per second)`` of overlapped rounds."""

    def __init__(self) -> None:
        self.value: tuple[np.ndarray, float] | None = None

    def learn(self, ready: dict[int, float], records: Sequence[tuple[int, int, float, float]], n_tensors: int) -> None:
        """Fold a finished round (ready times per tensor; ``(key, nbytes, t0, t1)`` per message) in, half weight each."""
        if len(ready) != n_tensors or not records:
            return
        first = min(ready.values())
        ready_s = np.array([ready[t] - first for t in range(n_tensors)])
        busy, end = 0.0, -np.inf
        for _k, _n, t0, t1 in sorted(records, key=lambda x: x[2]):
            if t1 > end:
                busy += t1 - max(t0, end)
                end = t1
        if busy <= 0:
            return
        bandwidth = sum(x[1] for x in records) / busy
        if self.value is None:
            self.value = (ready_s, bandwidth)
        else:
            old_s, old_bw = self.value
            self.value = (0.5 * (old_s + ready_s), 0.5 * (old_bw + bandwidth))

    def order(self, messages: Sequence[Message], credit_bytes: int) -> list[int] | None:
        """The live credit policy run on the measured timing (:func:`plan_order`); None before any round."""
        if self.value is None:
            return None
        ready_s, bandwidth = self.value
        return plan_order(list(messages), credit_bytes,
                          ready_time_s=lambda m: max(float(ready_s[t]) for t in m.tensors),
                          transfer_time_s=lambda m: m.nbytes / bandwidth)


class _Waiter:
    """One thread that waits on MXNet arrays for an engine, so that the engine's own wait can end at a timeout.

    MXNet's ``wait_to_read`` has no timeout; a dist_sync push never completes
    when another worker is gone.
    """

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Sequence[Any], threading.Event, list[BaseException]]] = queue.SimpleQueue()
        threading.Thread(target=self._run, name="autobyte-mxnet-wait", daemon=True).start()

    def _run(self) -> None:
        while True:
            arrays, done, error = self._jobs.get()
            try:
                for a in arrays:
                    a.wait_to_read()
            except BaseException as exc:  # an MXNet error belongs to the caller
                error.append(exc)
            done.set()

    def wait(self, arrays: Sequence[Any], timeout_s: float) -> bool:
        """Whether every array was ready within ``timeout_s`` (re-raises MXNet's error)."""
        done, error = threading.Event(), []  # type: tuple[threading.Event, list[BaseException]]
        self._jobs.put((arrays, done, error))
        if not done.wait(timeout_s):
            return False
        if error:
            raise error[0]
        return True


def _peer_lost(timeout_s: float, hint: str, what: str) -> PeerLostError:
    return PeerLostError(
        f"no answer from the other workers for {what} within timeout_s={timeout_s:g} s: "
        f"{hint} The job cannot go on: stop every process and restart from a checkpoint."
    )
