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


#: Longest line a client may send (an iteration number and ``?``); a longer one drops the client.
MAX_LINE_BYTES = 64
#: Acknowledgements a client may leave unread before it is dropped.
MAX_PENDING_BYTES = 64 * 1024
#: Clients connected at once; more are refused (closed at once).
MAX_CLIENTS = 64


class ControlServer:
    """Launcher side: accepts clients, reports iterations to a callback; never blocks.

    The socket file is created accessible to its owner only (mode ``0600``,
    under a ``0077`` umask so that it never exists with wider rights): only
    the launcher's user can drive the links. Every send is non-blocking with a
    bounded per-client buffer, so a client that never reads its
    acknowledgements, sends garbage or endless lines, or opens connection
    after connection, is dropped instead of stalling the launcher's loop
    (which enforces ``--timeout-s`` and cleans up).

    Args:
        path: the socket's filesystem path (replaced if it exists).
        boundaries: iterations at which the trace does something (sent on connect).
    """

    def __init__(self, path: str, boundaries: list[int]) -> None:
        self.path = path
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            self.sock.bind(path)
        finally:
            os.umask(old)
        os.chmod(path, 0o600)
        self.sock.listen(64)
        self.sock.setblocking(False)
        self.hello = (json.dumps({"boundaries": boundaries}) + "\n").encode()
        self.conns: dict[socket.socket, bytes] = {}  # client -> partial line received
        self.out: dict[socket.socket, bytes] = {}  # client -> bytes not yet sent
        self.n_dropped = 0

    def fileobjs(self) -> list[socket.socket]:
        """Sockets to wait on for reading."""
        return [self.sock, *self.conns]

    def writers(self) -> list[socket.socket]:
        """Clients with unsent bytes, to wait on for writing."""
        return [c for c, b in self.out.items() if b]

    def _drop(self, conn: socket.socket) -> None:
        self.conns.pop(conn, None)
        self.out.pop(conn, None)
        try:
            conn.close()
        except OSError:
            pass

    def _send(self, conn: socket.socket, data: bytes) -> None:
        buf = self.out.get(conn, b"") + data
        try:
            n = conn.send(buf) if buf else 0
        except BlockingIOError:
            n = 0
        except OSError:
            self._drop(conn)
            return
        buf = buf[n:]
        if len(buf) > MAX_PENDING_BYTES:  # it does not read what it asked for
            self.n_dropped += 1
            self._drop(conn)
            return
        self.out[conn] = buf

    def handle_write(self, fobj: socket.socket) -> None:
        """Send what is pending to a client that :meth:`writers` listed and select found writable."""
        if fobj in self.out:
            self._send(fobj, b"")

    def handle(self, fobj: socket.socket, on_iteration: Callable[[int], None]) -> None:
        """Serve one readable socket: accept a client, or read its lines and acknowledge."""
        if fobj is self.sock:
            for _n in range(MAX_CLIENTS):  # drain the backlog, boundedly
                try:
                    conn, _ = self.sock.accept()
                except OSError:  # BlockingIOError: none left
                    return
                conn.setblocking(False)
                if len(self.conns) >= MAX_CLIENTS:
                    self.n_dropped += 1
                    conn.close()
                    continue
                self.conns[conn] = b""
                self._send(conn, self.hello)
            return
        if fobj not in self.conns:
            return
        try:
            data = fobj.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._drop(fobj)
            return
        buf = self.conns[fobj] + data
        *lines, rest = buf.split(b"\n")
        if len(rest) > MAX_LINE_BYTES or any(len(line) > MAX_LINE_BYTES for line in lines):
            self.n_dropped += 1
            self._drop(fobj)
            return
        self.conns[fobj] = rest
        for line in lines:
            text = line.decode("ascii", "replace").strip()
            wants_ack = text.endswith("?")
            try:
                k = int(text.rstrip("?"))
            except ValueError:
                continue  # garbage: ignored
            if k < 0:
                continue
            on_iteration(k)
            if wants_ack:
                self._send(fobj, f"ok {k}\n".encode())
                if fobj not in self.conns:
                    return  # dropped: it does not read its acknowledgements

    def close(self) -> None:
        for c in list(self.conns):
            self._drop(c)
        self.sock.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
