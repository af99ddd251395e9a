"""Failure diagnostics of the PyTorch engine: bounded waits, lost and mismatched peers.

Every wait of the engine ends within ``timeout_s``; a failure is reported as
:class:`PeerLostError` naming the peer (exited, stopped by a signal, or not
answering) or as :class:`CollectiveMismatchError` when ranks reached
different collective calls.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import zlib
from typing import Any, Callable

from ._common import CollectiveMismatchError, PeerLostError
from ._imports import require_torch

torch = require_torch()
import torch.distributed as dist  # noqa: E402


#: What a control collective is for; every rank announces it in a fixed-size header first.
_CONTROL_KINDS = {1: "start-up", 2: "buffer broadcast", 3: "tuning window", 4: "reconfigure()", 5: "issue-order broadcast"}


class _Failures:
    """Mixin of :class:`~autobyte.integrations.torch.ScheduledTraining`: collectives and waits that fail clearly."""

    rank: int
    world_size: int
    iteration: int
    timeout_s: float
    ctl_group: Any
    _cdev: Any
    _error: BaseException | None
    _peers: list[tuple[int, int]]
    _done_iter: int
    _cv: threading.Condition
    _updated: list[threading.Event]

    def _collective(self, fn: Callable[[], Any], what: str = "") -> Any:
        try:
            return fn()
        except RuntimeError as exc:
            err = self._lost(exc, what)
            self._fail(err)
            raise err from exc

    def _control(self, kind: int, a: int = 0, b: int = 0) -> None:
        """Announce the next control collective and check that every rank announced the same one.

        A fixed-size header is all-gathered first, so ranks that reached
        different calls (a collective method called on one rank only) get
        :class:`CollectiveMismatchError` instead of a size-mismatched
        collective, which gloo answers by aborting the process.
        """
        mine = torch.tensor([kind, a, b, self.iteration], dtype=torch.int64, device=self._cdev)
        out = [torch.zeros_like(mine) for _ in range(self.world_size)]
        what = "the other ranks to call reconfigure() (a collective call: every rank must call it)" if kind == 4 else f"the {_CONTROL_KINDS[kind]} of every rank"
        self._collective(lambda: dist.all_gather(out, mine, group=self.ctl_group), what)
        # One copy to the host for every rank's header (with NCCL the header is a device tensor).
        seen = [tuple(row) for row in torch.stack(out).tolist()]
        if len(set(seen)) == 1:
            return
        detail = ", ".join(f"rank {r}: {_CONTROL_KINDS.get(k, f'kind {k}')} ({x}, {y}) at iteration {i}" for r, (k, x, y, i) in enumerate(seen))
        hint = ""
        if any(k == 4 for k, *_ in seen):
            hint = " reconfigure() is a collective call: call it on every rank, at the same point, with the same arguments."
        elif all(k == 1 for k, *_ in seen):
            hint = " The (parameter count, element count) differ: every rank must schedule the same model."
        err = CollectiveMismatchError(
            f"autobyte: ranks reached different collective calls: {detail}. Every rank must make the same calls in the same order;{hint} "
            f"Rank {self.rank} stops here."
        )
        self._fail(err)
        raise err

    def _wait(self, ev: threading.Event, what: str) -> None:
        if not ev.wait(self.timeout_s):
            self._error = self._error or TimeoutError(f"waited {self.timeout_s:g} s for {what}")
        self._raise_if_failed()

    def _wait_iteration(self, it: int, what: str) -> None:
        deadline = time.monotonic() + self.timeout_s
        with self._cv:
            while self._done_iter < it and self._error is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    self._error = TimeoutError(f"waited {self.timeout_s:g} s for {what}")
                    break
                self._cv.wait(left)
        self._raise_if_failed()

    def _finish_iteration(self, it: int) -> None:
        with self._cv:
            self._done_iter = max(self._done_iter, it)
            self._cv.notify_all()

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            err = self._error
            lost = self._lost(err)
            if lost is err:
                raise err
            raise lost from err

    def _lost(self, exc: BaseException, what: str = "") -> BaseException:
        if isinstance(exc, (PeerLostError, CollectiveMismatchError, ValueError, TypeError)):
            return exc  # not a communication failure: reported as is
        host = zlib.crc32(socket.gethostname().encode())
        dead: list[str] = []
        peers = [(r, h, pid) for r, (h, pid) in enumerate(getattr(self, "_peers", [])) if r != self.rank]
        local = [(r, pid) for r, h, pid in peers if h == host]
        remote = [f"rank {r}" for r, h, _ in peers if h != host]
        # A crashing peer may take a moment to exit: look for up to 2 s.
        deadline = time.monotonic() + 2.0
        stopped: list[str] = []
        while local:
            dead = [f"rank {r} (pid {pid}, exited)" for r, pid in local if _pid_state(pid) == "exited"]
            stopped = [f"rank {r} (pid {pid}, stopped by a signal)" for r, pid in local if _pid_state(pid) == "stopped"]
            if dead or stopped or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        if dead:
            who = "lost peer: " + ", ".join(dead)
        elif stopped:
            who = "peer not answering: " + ", ".join(stopped)
        elif len(peers) == 1:
            r, _, pid = peers[0]
            who = f"peer not answering: rank {r} (pid {pid}{', on another host' if remote else ', running'}): hung, overloaded, or the network is down"
        else:
            others = [f"rank {r} (pid {pid}, running)" for r, pid in local] + [f"{x} (another host)" for x in remote]
            who = "peer not answering, one of: " + ", ".join(others)
        during = f" waiting for {what}" if what else ""
        return PeerLostError(
            f"autobyte: rank {self.rank} stopped at iteration {self.iteration}{during}: {who} ({type(exc).__name__}: {exc}). "
            f"Timeout is timeout_s={self.timeout_s:g}."
        )

    def _fail(self, exc: BaseException) -> None:
        if self._error is None:
            self._error = exc
        for ev in getattr(self, "_updated", []):
            ev.set()
        cv = getattr(self, "_cv", None)
        if cv is not None:
            with cv:
                cv.notify_all()


def _pid_state(pid: int) -> str:
    """``"exited"`` (zombies count), ``"stopped"`` (SIGSTOP, a debugger) or ``"running"`` for process ``pid`` on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return "exited"
    except PermissionError:
        return "running"
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "running"
    if state in ("Z", "X"):
        return "exited"
    return "stopped" if state in ("T", "t") else "running"
