"""Bulk TCP both ways between two worker namespaces, and the tests' handle on it.

As a script, run in one worker namespace: ``python _bulk_pair.py MY_ADDR
PEER_ADDR N_CONNS PORT`` listens on ``N_CONNS`` ports from ``PORT``, opens
``N_CONNS`` connections to the peer's ports and writes 4 MB messages on each
(gloo-sized) until killed. Every 0.1 s it prints ``{"t": CLOCK_MONOTONIC
seconds, "recv": [bytes received on each connection]}``.

From a test, :class:`BulkFlows` starts the script in both namespaces of a
``Testbed(2)`` and keeps every sample it printed.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

MESSAGE = b"\0" * 4_000_000


class BulkFlows:
    """``_bulk_pair.py`` running in both namespaces of ``tb``; ``samples[r]``: ``(t, recv)`` as rank ``r`` printed them."""

    def __init__(self, tb: Any, n_conns: int, port: int) -> None:
        self.n_conns = n_conns
        self.samples: list[list[tuple[float, list[int]]]] = [[], []]
        self.procs = [subprocess.Popen(tb.exec_argv(r, [sys.executable, str(Path(__file__).resolve()), tb.address(r),
                                                        tb.address(1 - r), str(n_conns), str(port)]),
                                       stdout=subprocess.PIPE, text=True) for r in range(2)]
        for r in range(2):
            threading.Thread(target=self._read, args=(r,), daemon=True).start()

    def _read(self, r: int) -> None:
        assert self.procs[r].stdout is not None
        for line in self.procs[r].stdout:
            d = json.loads(line)
            self.samples[r].append((d["t"], d["recv"]))

    def latest(self, r: int) -> list[int]:
        return list(self.samples[r][-1][1]) if self.samples[r] else [0] * self.n_conns

    def wait_started(self, timeout_s: float = 20) -> None:
        """Until every connection has received bytes on both sides."""
        deadline = time.monotonic() + timeout_s
        while not all(all(self.latest(r)) for r in range(2)):
            assert time.monotonic() < deadline and all(p.poll() is None for p in self.procs), "bulk flows did not start"
            time.sleep(0.1)

    def close(self) -> None:
        for p in self.procs:
            p.kill()
            p.wait()


def main() -> int:
    me, peer, n_conns, port = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    received = [0] * n_conns

    def serve(i: int, srv: socket.socket) -> None:
        conn, _ = srv.accept()
        buf = bytearray(1 << 20)
        while True:
            k = conn.recv_into(buf)
            if not k:
                return
            received[i] += k

    def send(i: int) -> None:
        deadline = time.monotonic() + 20
        while True:
            try:
                conn = socket.create_connection((peer, port + i), timeout=2)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        conn.settimeout(None)
        while True:
            conn.sendall(MESSAGE)

    for i in range(n_conns):
        srv = socket.socket()
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind((me, port + i))
        srv.listen(1)
        threading.Thread(target=serve, args=(i, srv), daemon=True).start()
    for i in range(n_conns):
        threading.Thread(target=send, args=(i,), daemon=True).start()
    while True:
        time.sleep(0.1)
        print(json.dumps({"t": time.monotonic(), "recv": received}), flush=True)


if __name__ == "__main__":
    sys.exit(main())
