"""The control channel between a training process and the launcher.

A Unix stream socket (a filesystem path, so it crosses network namespaces)
named by ``$AUTOBYTE_TESTBED_CONTROL``. Protocol, one line each way:

- on connect the launcher sends ``{"boundaries": [k1, k2, ...]}``: the
  iterations at which the trace does something;
- the client sends ``"<k>\\n"`` when iteration ``k`` starts (fire and forget),
  or ``"<k>?\\n"`` when a boundary lies in ``(last k, k]``; then it waits for
  ``"ok <k>\\n"``, which the launcher sends once the links are re-shaped, so
  iteration ``k`` runs under the new rates.
"""

from __future__ import annotations

import bisect
import json
import os
import socket
import warnings
from typing import Callable

ENV_VAR = "AUTOBYTE_TESTBED_CONTROL"

#: Longest wait for the launcher to confirm a re-shape, in seconds.
ACK_TIMEOUT_S = 30.0


class _Client:
    def __init__(self, path: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(ACK_TIMEOUT_S)
        self.sock.connect(path)
        self.reader = self.sock.makefile("r", encoding="utf-8")
        hello = json.loads(self.reader.readline())
        self.boundaries: list[int] = sorted(int(b) for b in hello.get("boundaries", []))
        self.last = -1

    def notify(self, k: int) -> None:
        # a boundary b with last < b <= k must be applied before iteration k runs
        i = bisect.bisect_right(self.boundaries, self.last)
        wait = i < len(self.boundaries) and self.boundaries[i] <= k
        self.sock.sendall(f"{k}{'?' if wait else ''}\n".encode())
        self.last = max(self.last, k)
        if wait:
            reply = self.reader.readline()
            if not reply.startswith("ok"):
                raise ConnectionError(f"testbed launcher closed the control channel (reply {reply!r})")


_client: _Client | None = None
_disabled = False


def notify_iteration(k: int) -> None:
    """Tell the testbed launcher that iteration ``k`` starts; a no-op outside the testbed.

    Call it on rank 0 at the start of each training iteration (before the
    forward pass). At an iteration where the bandwidth trace changes, it blocks
    until the links are re-shaped (a few milliseconds), so the change is
    synchronous with training. Outside ``autobyte launch`` (no
    ``$AUTOBYTE_TESTBED_CONTROL``) it returns at once.

    Args:
        k: the iteration number, counting from 0.

    Raises:
        ValueError: ``k`` is not an integer >= 0.
    """
    global _client, _disabled
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        raise ValueError(f"k must be an iteration number (an integer >= 0), but got k={k!r}.")
    if _disabled:
        return
    path = os.environ.get(ENV_VAR)
    if not path:
        return
    try:
        if _client is None:
            _client = _Client(path)
        _client.notify(k)
    except (OSError, ValueError) as exc:
        _disabled = True
        warnings.warn(
            f"autobyte testbed control channel {path!r} failed ({exc}); bandwidth changes keyed on "
            "iterations will not follow this run any more.",
            RuntimeWarning,
            stacklevel=2,
        )


def _reset_client() -> None:
    """Forget the connection (tests, and after fork)."""
    global _client, _disabled
    if _client is not None:
        try:
            _client.sock.close()
        except OSError:
            pass
    _client = None
    _disabled = False


class ControlServer:
    """Launcher side: accepts clients, reports iterations to a callback."""

    def __init__(self, path: str, boundaries: list[int]) -> None:
        self.path = path
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        os.chmod(path, 0o666)
        self.sock.listen(64)
        self.sock.setblocking(False)
        self.hello = (json.dumps({"boundaries": boundaries}) + "\n").encode()
        self.conns: dict[socket.socket, bytes] = {}

    def fileobjs(self) -> list[socket.socket]:
        return [self.sock, *self.conns]

    def handle(self, fobj: socket.socket, on_iteration: Callable[[int], None]) -> None:
        if fobj is self.sock:
            try:
                conn, _ = self.sock.accept()
            except BlockingIOError:
                return
            conn.setblocking(True)
            conn.sendall(self.hello)
            conn.setblocking(False)
            self.conns[conn] = b""
            return
        try:
            data = fobj.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self.conns.pop(fobj, None)
            fobj.close()
            return
        buf = self.conns[fobj] + data
        *lines, rest = buf.split(b"\n")
        self.conns[fobj] = rest
        for line in lines:
            text = line.decode("ascii", "replace").strip()
            wants_ack = text.endswith("?")
            try:
                k = int(text.rstrip("?"))
            except ValueError:
                continue
            on_iteration(k)
            if wants_ack:
                try:
                    fobj.setblocking(True)
                    fobj.sendall(f"ok {k}\n".encode())
                    fobj.setblocking(False)
                except OSError:
                    pass

    def close(self) -> None:
        for c in list(self.conns):
            c.close()
        self.conns.clear()
        self.sock.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
